"""Is a training step bound by the host or by the GPU? For each policy, the host's time to
issue one step (wall clock from the step's start until its Python code returns, with no
synchronisation inside) and the CPU time it used (all threads: autograd's backward runs on
its own), against the step's time on the GPU (CUDA events). When issuing takes about as
long as the step, the GPU waited for the host; when the host finishes well before, the GPU
set the pace. CPU time close to the issuing time means the host was busy, not blocked.

    python3 experiments/validation/hostbound.py MODEL BATCH OUT.json [POLICY ...]

The step is NOTE [training step]'s (vdnnsim/gpu/model/workload.py: SGD, cross-entropy of the
logits).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's vdnnsim


def main() -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("batch", type=int)
    p.add_argument("out")
    p.add_argument("policies", nargs="*", metavar="POLICY",
                   default=["baseline", "vdnn_conv", "vdnn_all"])
    args = p.parse_args()
    import torch

    from vdnnsim.gpu.runtime.vdnn import VDNN
    from vdnnsim.gpu.model.workload import build_workload, training_step

    spec, batch, out, policies = args.model, args.batch, args.out, args.policies
    torch.backends.cudnn.benchmark = True
    rows = []
    for policy in policies:
        work = build_workload(spec)
        model = work.model.cuda().train()
        net = VDNN(model, work.shape, policy) if policy != "baseline" else None
        train = training_step(work, batch, "cuda", runner=net)

        def step(train=train, net=net):
            train()
            if net is not None:
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
        del work, model, net, train, step
        torch.cuda.empty_cache()
    json.dump(rows, open(out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
