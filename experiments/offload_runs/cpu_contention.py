"""GPU (the H200 device machine). Issue 31, session 24: does the CPU optimizer's step run
slower while the updated parameters are copied back to the GPU?

    python3 experiments/offload_runs/cpu_contention.py OUT.json [BLOCKS]

Measured in place, the step of CPUOffloadOptimizer (vdnnsim/gpu/runtime/cpu_optimizer.py) with the
parameters copied back after each tensor's CPU step (the optimizer alone on the CPU) ran
9-14% slower than its microbenchmark (``time_cpu_steps``, no copies), while the run that
keeps every block's parameters on the host (no copy back) matched it
(traces/h200_optimizer_offload/parameter_offload). The candidate: the copy-back's DMA reads the pinned host
copies from the same DRAM the CPU's AdamW streams (28 bytes an fp32 element against the
copy's 4).

This times the runtime's own ``step()`` over BLOCKS (default 6) Llama-3B-shaped blocks of
fp32 parameters (4 x 3200 x 3200 and 3 x 8640 x 3200 each), gradients queued as the
backward pass queues them, two arms interleaved step by step in one process: ``copy``
(every parameter resident on the GPU: each copied back on the side stream after its CPU
step, as with the optimizer alone on the CPU) and ``nocopy`` (none resident: the parameter
offload's case). One warm-up step of each first (it makes AdamW's state). Nothing here is
fitted; the record holds every step's time.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

sys.path.insert(0, ".")
from vdnnsim.gpu.runtime.cpu_optimizer import CPUOffloadOptimizer  # noqa: E402

SHAPES = [(3200, 3200)] * 4 + [(8640, 3200)] * 3


def main() -> None:
    out = sys.argv[1]
    blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # cpu: a dry run
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    params = [torch.nn.Parameter(torch.zeros(s, device=dev)) for _ in range(blocks)
              for s in SHAPES]
    opt = CPUOffloadOptimizer(params, "adamw")
    grads = [torch.randn(s, device=dev) * 1e-3 for s in SHAPES]

    def step(resident: bool) -> int:
        opt.resident = set(opt.params) if resident else set()
        for i, p in enumerate(reversed(params)):  # the backward pass's order
            p.grad = grads[(len(params) - 1 - i) % len(SHAPES)].clone()
            opt._gradient_ready(p)
        sync()
        t0 = time.perf_counter_ns()
        opt.step()
        sync()
        return time.perf_counter_ns() - t0

    times: dict[str, list[int]] = {"copy": [], "nocopy": []}
    step(True)
    step(False)
    for r in range(8):
        for arm in (("copy", "nocopy") if r % 2 == 0 else ("nocopy", "copy")):
            times[arm].append(step(arm == "copy"))
    elements = sum(p.numel() for p in params)
    rec = {"blocks": blocks, "tensors": len(params), "elements": elements,
           "threads": torch.get_num_threads(), "torch": torch.__version__,
           "ns": {k: statistics.median(v) for k, v in times.items()}, "ns_all": times}
    rec["ratio"] = rec["ns"]["copy"] / rec["ns"]["nocopy"]
    opt.close()
    with open(out, "w") as f:
        json.dump(rec, f, indent=1)
    print(json.dumps({k: rec[k] for k in ("elements", "threads", "ns", "ratio")}))


if __name__ == "__main__":
    main()
