"""The one entry to the engine.

NOTE [replay]
Every caller that replays a plan (the API, the CLI, vDNN_dyn's profiling passes, the
planners, the benchmarks) calls :func:`replay`; nothing else constructs a simulation, and
no caller sees one: it gets the run's frozen record (``Replayed``, result.py). The
semantics (the trace's framework, and the plan's memory mode) pick the model of memory
behind the one interface: a pool (CNMeM's or PyTorch's caching allocator) or page-based
unified memory's pager, whose iteration is replayed twice on the same pages and the
second reported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..hardware import GPU
from ..trace.model import Trace
from .plan import Liveness, Plan, liveness
from . import autotune
from .compile import offload_around_own, steady_state
from .semantics import semantics_for
from .result import Replayed, replayed
from .sim import Simulation

if TYPE_CHECKING:
    from .caching import AllocatorSettings


def replay(trace: Trace, gpu: GPU, plan: Plan, capacity_bytes: int | None,
           lv: Liveness | None = None, *, record_ops: bool = True, checks: bool = True,
           stop_at_oom: bool = False, allocator: "AllocatorSettings | None" = None
           ) -> Replayed:
    """Replay ``plan`` on ``trace`` for ``gpu`` with ``capacity_bytes`` of device memory
    (``None``: unlimited) and return the finished run's record. ``record_ops=False``: no op
    timeline or tensor lifetimes; ``checks=False``: no invariant checks (the benchmark's
    comparison only); ``stop_at_oom``: stop issuing at the first layer after an
    out-of-memory (a pass that only asks whether and where it runs out); ``allocator``:
    the caching allocator's settings."""
    lv = lv if lv is not None else liveness(trace)
    sem = semantics_for(trace, plan)
    plan = offload_around_own(trace, lv, plan, sem)  # the model's own checkpointing
    memory = sem.memory(gpu, plan, capacity_bytes, lv, allocator)
    warmup = sem.warmup_iterations or steady_state(trace, sem)
    tune = warmup > 0 and not sem.paged and autotune.replays_tuning(trace)
    for warm in range(warmup, -1, -1):  # the last one is the run's
        first = warm == warmup
        sim = Simulation(trace, gpu, plan, memory, lv, record_ops=record_ops and not warm,
                         checks=checks, stop_at_oom=stop_at_oom, first=first,
                         autotune=tune and first,
                         first_step=first and warmup > 0).run()
        if warm and not sem.paged and memory.oom is not None:
            # a run whose first iteration does not fit is that iteration, replayed again to
            # be recorded; unrecorded, the first was that replay already (same inputs)
            if first and not record_ops:
                return replayed(sim)
            memory = sem.memory(gpu, plan, capacity_bytes, lv, allocator)
            return replayed(Simulation(trace, gpu, plan, memory, lv, record_ops=record_ops,
                                       checks=checks, stop_at_oom=stop_at_oom, autotune=tune,
                                       first_step=True).run())
        if warm:  # the next iteration finds the memory where
            memory.next_iteration()  # type: ignore[attr-defined]  # this one left it
    return replayed(sim)
