"""How fast this machine's host is (NOTE [host probe]).

NOTE [host probe]
The lent machines' hosts are not equally fast: on 2026-12-04 two loans a quarter of an
hour apart issued the same host-bound steps 1.15x and 1.76x as slowly as the committed
records (traces/h200_bwdws/README.md, session 18), and three fresh processes on one machine
cannot see that. So `vdnnsim measure` records, and `vdnnsim profile` writes into the
trace's source, ``host_probe_ns``: the median over PROBE_TRIALS of the host's time per
launch of PROBE_OPS back-to-back ``x.add_(1)`` on a one-element tensor of the device (each
a dispatch and, on a GPU, a kernel launch; the GPU is idle, so the launch queue never
fills), taken before the model is built. ``--repeat`` keeps its median and band; `vdnnsim
validate` says where a measurement's host and its trace's differ by more than
HOST_PROBE_TOLERANCE (vdnnsim/validate.py): a host-bound run's time then compares two
hosts. The simulator does not scale its host costs by it (a replay's vDNN reserved peak
moves with the host's speed too, docs/validation.md).
"""

from __future__ import annotations

import statistics
import time

import torch

PROBE_OPS, PROBE_TRIALS = 2000, 5  # NOTE [host probe]


def host_probe_ns(device: "torch.device | str", ops: int = PROBE_OPS,
                  trials: int = PROBE_TRIALS) -> float:
    """NOTE [host probe]: the host's median time per ``x.add_(1)`` launch on ``device``."""
    x = torch.zeros(1, device=device)
    x.add_(1)  # the first launch loads the kernel
    if x.is_cuda:
        torch.cuda.synchronize(x.device)
    per_op = []
    for _ in range(trials):
        t0 = time.perf_counter_ns()
        for _ in range(ops):
            x.add_(1)
        per_op.append((time.perf_counter_ns() - t0) / ops)
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
    if x.is_cuda:  # its block's segment is not the run's to reserve
        del x
        torch.cuda.empty_cache()
    return statistics.median(per_op)
