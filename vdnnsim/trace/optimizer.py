"""The optimizer a training step runs, as the simulator sees it (``optimizer:`` in run
configs, ``with_optimizer``).

NOTE [optimizer state]
A trace's step (``step_ns``, ``host_step_ns``) is its ``optimizer``'s: mostly plain SGD
(PyTorch's foreach update, 3 bytes moved per parameter byte); a trace profiled with Adam
or AdamW replays with that optimizer only. Adam and AdamW (foreach, no amsgrad) add two
moments per parameter in the parameter's dtype to ``resident_bytes`` and one
parameter-sized temporary to ``step_workspace_bytes``, and their update moves 20 bytes
per parameter byte: the step's GPU time is the SGD step's scaled by 20 / 3, its host time
kept, unless the trace carries calibrated steps (``optimizer_steps``), which win. These
are counts of the optimizer's code, not fits: docs/trace-format.md, "The optimizer's
step".
"""

from __future__ import annotations

from dataclasses import replace

from ..engine import MOMENTS
from ..errors import ConfigError
from .model import Trace

OPTIMIZERS = ("sgd", "adam", "adamw")
SGD_BYTES = 3  # bytes moved per parameter byte by the foreach SGD step
ADAM_BYTES = 20  # by the foreach Adam/AdamW step
ADAM_STATE = MOMENTS["adam"]  # moments per parameter (the engine's count)
ADAM_TEMP = 1  # parameter-sized temporaries while the step runs


def with_optimizer(trace: Trace, optimizer: str) -> Trace:
    """``trace`` trained with ``optimizer`` instead of SGD (a trace profiled with
    ``optimizer`` already is returned as it is)."""
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
    for name, gpu_ns, h_ns in trace.optimizer_steps:  # calibrated
        if name == optimizer:
            step_ns, host_ns = gpu_ns, h_ns
    return replace(trace, resident_bytes=trace.resident_bytes + ADAM_STATE * w,
                   step_workspace_bytes=trace.step_workspace_bytes + ADAM_TEMP * w,
                   step_ns=step_ns, host_step_ns=host_ns, optimizer=optimizer)
