"""The one entry to the engine (NOTE [replay]).

NOTE [replay]
Every caller that replays a plan (the API, the CLI, vDNN_dyn's profiling passes, the
planners, the benchmarks) calls :func:`replay`; nothing else constructs a simulation. The
plan's memory mode picks the model of memory: a pool (CNMeM's or PyTorch's caching
allocator, chosen by the trace's semantics) or page-based unified memory (NOTE [uvm]).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..hardware import GPU
from ..trace.model import Trace
from .plan import Liveness, Plan, liveness

if TYPE_CHECKING:
    from .caching import AllocatorSettings
    from .sim import Simulation
    from .uvm import UvmSimulation


def replay(trace: Trace, gpu: GPU, plan: Plan, capacity_bytes: int | None,
           lv: Liveness | None = None, *, record_ops: bool = True, checks: bool = True,
           stop_at_oom: bool = False, allocator: "AllocatorSettings | None" = None
           ) -> "Simulation | UvmSimulation":
    """Replay ``plan`` on ``trace`` for ``gpu`` with ``capacity_bytes`` of device memory
    (``None``: unlimited) and return the finished run. ``record_ops=False``: no op
    timeline or tensor lifetimes; ``checks=False``: no invariant checks (the benchmark's
    comparison only); ``stop_at_oom``: stop issuing at the first layer after an
    out-of-memory (a pass that only asks whether and where it runs out); ``allocator``:
    the caching allocator's settings (NOTE [allocator settings])."""
    lv = lv if lv is not None else liveness(trace)
    if plan.memory == "uvm":  # NOTE [uvm]
        from .uvm import UvmSimulation
        if capacity_bytes is None:
            raise ValueError("unified memory needs a capacity")
        if allocator is not None and not allocator.default:
            from ..errors import ConfigError
            raise ConfigError("allocator settings apply to the caching allocator, not to "
                              "unified memory (cudaMallocManaged)")
        return UvmSimulation(trace, gpu, plan, capacity_bytes, lv,
                             record_ops=record_ops).run()
    from .sim import Simulation
    return Simulation(trace, gpu, plan, capacity_bytes, lv, record_ops=record_ops,
                      checks=checks, stop_at_oom=stop_at_oom, allocator=allocator).run()
