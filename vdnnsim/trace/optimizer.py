"""The optimizer a training step runs, as the simulator sees it (``optimizer:`` in run
configs, ``with_optimizer``).

NOTE [optimizer state]
A trace's step (``step_ns``, ``host_step_ns``) is the step it was profiled or synthesized
with, its ``optimizer``. Mostly that is plain SGD (no momentum, no state), PyTorch's
foreach update, which reads each parameter and its gradient and writes the parameter: 3
bytes moved per parameter byte. (``vdnnsim profile --optimizer adamw`` of any model, NOTE
[module timing], measures the step itself instead: its times, its moments, counted into
``resident_bytes``, and its temporaries; such a trace replays with that optimizer only.)
Adam and AdamW (PyTorch's defaults: foreach, no amsgrad) keep two moments per parameter in
the parameter's dtype from the first step on, so the trace gains twice its weight bytes
as ``resident_bytes``; their update (lerp of the first moment, mul and addcmul of the
second, sqrt into a new list, two in-place divides and adds of it, addcdiv into the
parameters; AdamW also decays the parameters) moves 20 bytes per parameter byte, and the
sqrt's list is a temporary the size of the parameters while the step runs
(``step_workspace_bytes``; under PyTorch's caching allocator one tensor per parameter,
NOTE [step temporaries] in engine/compile.py). The step's GPU time is scaled by the bytes moved (20 / 3,
the same achieved bandwidth as the traced SGD step); its host time is kept (one foreach
launch per op either way, a few more ops). A trace that carries calibrated steps
(``optimizer_steps``: the op-level model's AdamW and SGD fits, NOTE [op model]) takes
the optimizer's own GPU and host times from them instead. These are counts of the optimizer's code
(torch 2.11), not fits; the H200 measurements that check them are in
docs/validation.md ("Optimizers"). A measured fact they agree with: on every H200
transformer run (traces/h200_hf), the memory before a step is 12 bytes a parameter (fp32
weights and two moments) plus the batch and the framework's own, and the step adds
exactly one parameter-sized temporary.
"""

from __future__ import annotations

from dataclasses import replace

from ..engine import MOMENTS
from ..errors import ConfigError
from .model import Trace

OPTIMIZERS = ("sgd", "adam", "adamw")
SGD_BYTES = 3  # bytes moved per parameter byte by the foreach SGD step
ADAM_BYTES = 20  # by the foreach Adam/AdamW step
ADAM_STATE = MOMENTS["adam"]  # moments per parameter (the engine's count, NOTE [steady state])
ADAM_TEMP = 1  # parameter-sized temporaries while the step runs


def with_optimizer(trace: Trace, optimizer: str) -> Trace:
    """NOTE [optimizer state]: ``trace`` trained with ``optimizer`` instead of SGD (a trace
    profiled with ``optimizer`` already is returned as it is)."""
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer {optimizer!r}: one of {', '.join(OPTIMIZERS)}")
    if optimizer == trace.optimizer:
        return trace
    if trace.optimizer != "sgd":
        raise ConfigError(f"{trace.name}: the trace's step is {trace.optimizer}'s (it was "
                          f"profiled with it); it replays with optimizer {trace.optimizer} "
                          f"only, not {optimizer}")
    w = trace.weight_bytes
    step_ns, host_ns = round(trace.step_ns * ADAM_BYTES / SGD_BYTES), trace.host_step_ns
    for name, gpu_ns, h_ns in trace.optimizer_steps:  # calibrated (NOTE [op model])
        if name == optimizer:
            step_ns, host_ns = gpu_ns, h_ns
    return replace(trace, resident_bytes=trace.resident_bytes + ADAM_STATE * w,
                   step_workspace_bytes=trace.step_workspace_bytes + ADAM_TEMP * w,
                   step_ns=step_ns, host_step_ns=host_ns, optimizer=optimizer)
