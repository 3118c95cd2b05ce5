"""Is a training step bound by the host or by the GPU? For each policy, the host's time to
issue one step (wall clock from the step's start until its Python code returns, with no
synchronisation inside) and the CPU time it used (all threads: autograd's backward runs on
its own), against the step's time on the GPU (CUDA events). When issuing takes about as
long as the step, the GPU waited for the host; when the host finishes well before, the GPU
set the pace. CPU time close to the issuing time means the host was busy, not blocked.

    python3 experiments/h200/hostbound.py MODEL BATCH OUT.json [POLICY ...]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's vdnnsim

from vdnnsim.gpu.models import build_model  # noqa: E402
from vdnnsim.gpu.runtime import VDNN  # noqa: E402


def main() -> int:
    spec, batch, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    policies = sys.argv[4:] or ["baseline", "vdnn_conv", "vdnn_all"]
    torch.backends.cudnn.benchmark = True
    rows = []
    for policy in policies:
        model, shape, _ = build_model(spec)
        model = model.cuda().train()
        net = VDNN(model, shape, policy) if policy != "baseline" else model
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(batch, *shape, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")

        def step():
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            opt.step()
            if isinstance(net, VDNN):
                net.end_iteration()

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        host, cpu, gpu = [], [], []
        for _ in range(7):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0, c0 = time.perf_counter(), time.process_time()
            s.record()
            step()
            e.record()
            host.append((time.perf_counter() - t0) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
            e.synchronize()
            gpu.append(s.elapsed_time(e))
        row = {"model": spec, "batch_size": batch, "policy": policy,
               "host_issue_ms": statistics.median(host), "step_ms": statistics.median(gpu),
               "host_cpu_ms": statistics.median(cpu),
               "host_issue_ms_all": host, "step_ms_all": gpu}
        rows.append(row)
        print(f"{spec} b{batch} {policy}: host issues a step in {row['host_issue_ms']:.1f} ms "
              f"({row['host_cpu_ms']:.1f} ms of CPU, all threads), the step takes "
              f"{row['step_ms']:.1f} ms", flush=True)
        del model, net, opt, x, y
        torch.cuda.empty_cache()
    json.dump(rows, open(out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
