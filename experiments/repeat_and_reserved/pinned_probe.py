"""GPU (the H200 device machine). Where the pinned pool's extra block comes from (NOTE
[pinned pool]; docs/validation.md, "Pinned host memory"): VGG-16 (64) under the vDNN
runtime's vdnn_conv, nine steps as `vdnnsim measure` runs them (two warm-up steps, seven
timed), with or without a synchronisation after every step, then the pinned host
allocator's blocks (`torch.cuda.host_memory_stats()`), one JSON line:

    python experiments/repeat_and_reserved/pinned_probe.py [--sync]

The hypothesis: without --sync one block more than the 12 offloads a step (a request made
while its size's block from the previous step was still in flight), with --sync none.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's vdnnsim


def main(argv: list[str]) -> int:
    import torch

    from vdnnsim.gpu.runtime.vdnn import VDNN
    from vdnnsim.gpu.model.workload import build_workload, training_step

    sync = "--sync" in argv
    torch.backends.cudnn.benchmark = True  # as measure runs
    work = build_workload("torchvision:vgg16")
    work.model.to("cuda").train()
    runtime = VDNN(work.model, work.shape, "vdnn_conv")
    step = training_step(work, 64, "cuda", "fp32", "sgd", runner=runtime)
    for _ in range(9):
        step()
        runtime.end_iteration()
        if sync:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    h = torch.cuda.host_memory_stats()
    print(json.dumps({"sync": sync, "blocks": h["allocations.current"],
                      "pinned_bytes": h["allocated_bytes.current"],
                      "requests": h["active_requests.allocated"],
                      "offloads_per_step": runtime.stats.get("offloads", 0) // 9}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
