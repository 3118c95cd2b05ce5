"""How fast this machine's host is (NOTE [host probe]).

NOTE [host probe]
The lent machines' hosts are not equally fast, and one host changes speed from one process
to the next. So `vdnnsim measure` records, and `vdnnsim profile` writes into the trace's
source, ``host_probe_ns``: the median over PROBE_TRIALS of the host's time per launch of
PROBE_OPS back-to-back ``x.add_(1)`` on a one-element tensor of the device, taken before
the model is built; and ``StepProbe`` times STEP_PROBE_OPS launches after each timed step
(measure: ``host_probe_steps_ns`` and their median ``host_probe_between_ns``; profile: the
trace's ``host_probe_between_ns``; calibrate --ops: beside each host chain's repetitions).
`vdnnsim validate` compares a trace's and a record's probes where both exist, else the
probes before the model, and says where they differ by more than HOST_PROBE_TOLERANCE. No
cost is scaled by a probe unless asked (`vdnnsim validate --scale-host`, or a host
calibration's: ``probe_host``, hostcal.py).

The step probe's tensor is made before the model and kept, so no cache is emptied between
steps (it sits in the first small-pool segment: 512 bytes more allocated). The evidence
(how much hosts differ, how well each probe follows the step's host time) is in
docs/gpu.md, "How fast the host is".
"""

from __future__ import annotations

import statistics
import time
from typing import Any

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


def probe_host(device: "torch.device | str", between: int) -> dict[str, Any]:
    """A host calibration's probes (hostcal.py), without a model: the probe before a
    model, then ``between`` of the probe after a step, back to back, and their median."""
    before = host_probe_ns(device)
    probe = StepProbe(device)
    try:
        steps = [probe() for _ in range(between)]
    finally:
        probe.close()
    return {"host_probe_ns": round(before, 1),
            "host_probe_between_ns": round(statistics.median(steps), 1),
            "host_probe_steps_ns": [round(x, 1) for x in steps]}
