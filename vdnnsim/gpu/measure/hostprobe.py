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
HOST_PROBE_TOLERANCE (vdnnsim/measured/validate.py): a host-bound run's time then compares two
hosts. The simulator does not scale its host costs by it (a replay's vDNN reserved peak
moves with the host's speed too, docs/validation.md).

Measured on 2026-12-05 (traces/h200_issue28/session20/, docs/validation.md, "How fast the
host is"): a lent machine's host changes speed from one process to the next by up to 1.9x
within minutes (KVM guests; the same host-bound step 21-41 ms in eleven processes, each
steady within itself), and the probe taken once before the model hardly follows it
(Pearson's r 0.43 and -0.02 with the step's host time over two models' processes), while
a short probe after each timed step does (r 0.87, 0.82). So `vdnnsim measure` also times
STEP_PROBE_OPS launches after each timed step (``StepProbe``: on a one-element tensor made
before the model and kept, so no cache is emptied between steps; it sits in the first
small-pool segment, which the model's small tensors use too: 512 bytes more allocated)
and records them
(``host_probe_steps_ns``) and their median (``host_probe_between_ns``), and `vdnnsim
profile` takes it after each of its plain timed steps (``host_probe_between_ns`` in the
trace's source), and `vdnnsim calibrate --ops` beside each host chain's repetitions
(``host_probe_between_ns`` in each chain's record, the mean of a probe before and one
after its repetitions, none between them: the host model's calibration is a draw of the
host's speed too); `vdnnsim validate` compares a trace's and a record's where both
exist, else the probes before the model (and says which). No cost is scaled by a probe
unless asked: `vdnnsim validate --scale-host` (NOTE [host speed] in api.py). Tried in
session 26 on two lent H100 machines (traces/h200_issue28/session26, the test
written down in session 20): replaying a host-bound trace with its host costs times the
ratio of a measuring process's probe to the trace's took the median error over 120
trace-process pairs from 8.4% to 6.9% (max 46.6% to 40.5%), but not on one loan alone. Whether the probe between two timed
steps changes the host time of the next (its 300 dispatches and two synchronisations
come after the step's end is recorded, so GPU times are untouched) is not yet measured:
an A/B of measure with and without it is the next loan's first check.
"""

from __future__ import annotations

import statistics
import time

import torch

PROBE_OPS, PROBE_TRIALS = 2000, 5
STEP_PROBE_OPS = 300  # after each timed step: about 3 ms


def host_probe_ns(device: "torch.device | str", ops: int = PROBE_OPS,
                  trials: int = PROBE_TRIALS) -> float:
    """The host's median time per ``x.add_(1)`` launch on ``device``."""
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


class StepProbe:
    """The host's time per ``x.add_(1)`` launch, taken after each timed
    step on a one-element tensor of ``device`` kept from construction to ``close``."""

    def __init__(self, device: "torch.device | str", ops: int = STEP_PROBE_OPS) -> None:
        self.ops = ops
        self.x = torch.zeros(1, device=device)
        self.x.add_(1)  # the kernel loaded
        self.times: list[float] = []

    def __call__(self) -> float:
        x = self.x
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
        t0 = time.perf_counter_ns()
        for _ in range(self.ops):
            x.add_(1)
        ns = (time.perf_counter_ns() - t0) / self.ops
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
        self.times.append(ns)
        return ns

    def close(self) -> None:
        del self.x
