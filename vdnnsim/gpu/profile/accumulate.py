"""The gradient adds of a micro-batch after the first, measured where ``vdnnsim profile``
runs (gpu/model/stepoptions.py): what a profiled trace of several micro-batches holds in
``accumulate_ns`` and ``host_accumulate_ns``."""

from __future__ import annotations

import statistics
import time
from typing import Any

from .timing import _Clock


def time_adds(step: Any, trials: int, cuda: bool) -> tuple[int, int]:
    """(GPU ns, host ns) of one pass of the adds autograd's AccumulateGrad makes when a
    gradient is there already: each trainable parameter's ``grad.add_`` of a tensor of its
    size, one after another; the median of ``trials`` after one untimed. The gradients
    are a step's own (its backward pass, no update), dropped after. On a CPU the GPU time is
    the wall clock's, as the profile's other times there are; the host's is the Python
    loop's, which issues the adds as the autograd engine's thread does in C++ (an upper
    bound)."""
    step(update=False)  # the gradients, as the first micro-batch leaves them
    pairs = [(q.grad, q.detach()) for group in step.optimizer.param_groups
             for q in group["params"] if q.grad is not None]
    clock = _Clock(cuda)
    gpu: list[float] = []
    host: list[float] = []
    for k in range(trials + 1):
        h0 = time.perf_counter_ns()
        s = clock.mark()
        for g, x in pairs:  # read both, write one: three times the parameter's bytes
            g.add_(x)
        h1 = time.perf_counter_ns()
        e = clock.mark()
        if cuda:
            e.synchronize()
        if k:
            gpu.append(clock.ms(s, e) * 1e6)
            host.append(h1 - h0)
    del pairs
    step.zero_grad()
    return round(statistics.median(gpu)), round(statistics.median(host))
