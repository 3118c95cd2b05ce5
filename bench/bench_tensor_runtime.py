"""The tensor runtime's step (NOTE [tensor runtime]) against the PCIe bound of its copies, on
a CUDA GPU: each plan run by ``vdnnsim measure --plan PLAN --json`` (a fresh process, the
median of its steps), and the host link's bandwidth measured here, each way, with pinned
copies. A step cannot be shorter than its copies out at the device-to-host bandwidth, nor
than its copies back at the host-to-device one; the bench prints both bounds beside the
step and the step's share of the larger (1.00: the copies set the step).

    python bench/bench_tensor_runtime.py [PLAN ...]

Default: the held-out BART-base plan at 70% of its peak, which only offloads (88 buffers,
traces/h200_tensor_plans/plans/bart-base-70-tensors.yaml). Needs a CUDA GPU (the device
machine: simpy and pydantic from the carried wheels, as experiments/tensor_plans/gpu_runs.sh).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "traces/h200_tensor_plans/plans/bart-base-70-tensors.yaml"
GiB = 2**30


def link_bytes_per_s(nbytes: int = GiB // 2, repeat: int = 5) -> tuple[float, float]:
    """(device to host, host to device) bytes a second: the median of ``repeat`` copies of
    ``nbytes`` between a GPU buffer and a pinned host buffer."""
    import statistics

    import torch
    gpu = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    out = []
    for dst, src in ((host, gpu), (gpu, host)):
        times = []
        for _ in range(repeat + 1):  # the first is a warm-up
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        out.append(nbytes / statistics.median(times[1:]))
    return out[0], out[1]


def main() -> int:
    try:
        import torch
    except ImportError:
        print("bench_tensor_runtime: needs torch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_tensor_runtime: needs a CUDA GPU", file=sys.stderr)
        return 2
    plans = [Path(p) for p in sys.argv[1:]] or [DEFAULT]
    d2h, h2d = link_bytes_per_s()
    print(f"{torch.cuda.get_device_name(0)}: link {d2h / 1e9:.1f} GB/s to the host, "
          f"{h2d / 1e9:.1f} GB/s back (pinned, {GiB // 2 >> 20} MiB copies)")
    print(f"{'plan':34s} {'step ms':>8s} {'out GiB':>8s} {'out ms':>7s} {'back GiB':>9s} "
          f"{'back ms':>8s} {'step / bound':>12s}")
    for plan in plans:
        r = subprocess.run([sys.executable, "-m", "vdnnsim", "measure", "--plan", str(plan),
                            "--json"], capture_output=True, text=True, cwd=ROOT)
        if r.returncode:
            print(f"{plan.name:34s} failed: {r.stderr.strip().splitlines()[-1:]}")
            continue
        rec = json.loads(r.stdout)
        out_ms = rec["offloaded_bytes"] / d2h * 1e3
        back_ms = rec["prefetched_bytes"] / h2d * 1e3
        bound = max(out_ms, back_ms)
        share = f"{rec['iteration_ms'] / bound:12.2f}" if bound else f"{'no copies':>12s}"
        print(f"{plan.name:34s} {rec['iteration_ms']:8.1f} {rec['offloaded_bytes'] / GiB:8.2f} "
              f"{out_ms:7.1f} {rec['prefetched_bytes'] / GiB:9.2f} {back_ms:8.1f} {share}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
