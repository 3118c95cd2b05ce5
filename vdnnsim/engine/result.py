"""What a replay gives its caller: a frozen record of the finished run, not the
simulation that made it (the simulation and its memory model are dropped with it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .allocator import average_bytes
from .memory_model import MemoryModel, OutOfMemory


@dataclass(frozen=True, slots=True)
class Replayed:
    """One replayed iteration, as every caller of :func:`~.replay.replay` reads it.

    Times are the GPU's (ns from the step's start); ``oom`` is the first failure to place
    something (None: it fits). A pass stopped at its out-of-memory (``stopped``) has only
    ``oom`` and the peaks it reached: ``memory_steps`` is None and ``avg_memory_bytes``
    NaN. ``ops`` and ``spans`` are empty unless the run recorded ops."""

    end_ns: int
    fwd_end_ns: int
    oom: OutOfMemory | None
    stopped: bool
    paged: bool  # the run's memory was unified memory's pager
    record_ops: bool
    peak_live_bytes: int
    peak_footprint_bytes: int
    peak_breakdown: dict[str, int]
    offloaded_bytes: int
    prefetched_bytes: int
    peak_host_bytes: int
    pinned_host_bytes: int  # what the runtime's pinned pool kept
    param_fetched_bytes: int
    stall_ns: int
    host_bound_ns: int
    host_issue_ns: int
    # what the simulation left, read only through the properties below (as tuples): most
    # replays (a policy's or a planner's) never ask for them. The curve of live bytes
    # (None: stopped), the ops' fields in the order they ended and the allocations'
    # lifetimes (empty unless ops were recorded), each layer pass's (start, end) ns
    _times: list[int] | None
    _levels: list[int] | None
    _curve: Any
    _ops: list[tuple]
    _spans: list[tuple[str, str, int, int, int]]
    _layer_spans: list[tuple[int, int]]

    @property
    def fits(self) -> bool:
        return self.oom is None

    @property
    def ops(self) -> tuple[tuple, ...]:
        """Op's fields, in the order the ops ended (empty unless ops were recorded)."""
        return tuple(self._ops)

    @property
    def spans(self) -> tuple[tuple[str, str, int, int, int], ...]:
        """(key, category, bytes, t0, t1) per allocation (empty unless ops were recorded)."""
        return tuple(self._spans)

    @property
    def layer_spans(self) -> tuple[tuple[int, int], ...]:
        """Each layer pass's (start, end) ns on the compute stream."""
        return tuple(self._layer_spans)

    @property
    def memory_steps(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(times ns, live bytes) of the memory curve; None for a stopped pass."""
        if self._times is None:
            return None
        return tuple(self._times), tuple(self._levels or ())

    @property
    def avg_memory_bytes(self) -> float:
        """The time-weighted mean of live bytes over the iteration (NaN: stopped)."""
        if self._times is None:
            return float("nan")
        return average_bytes(self._times, self._levels or [], self._curve, self.end_ns)


def replayed(sim: Any) -> Replayed:
    """The record of the finished simulation ``sim``."""
    pool: MemoryModel = sim.pool
    sem = sim.sem
    end = sim.end_ns
    if sem.paged:  # PyTorch's pool under its runtimes; the Torch7
        pinned = 0  # runtime pins each copy and frees it (its peak); unified memory: none
    else:
        pinned = sim.pinned.reserved_bytes if sem.caching_allocator else sim.peak_host_bytes
    times = pool.times
    return Replayed(
        end, sim.fwd_end_ns, pool.oom, sim.stopped, sem.paged, sim.record_ops,
        pool.peak_live_bytes, pool.peak_footprint_bytes, dict(pool.peak_breakdown),
        sim.offloaded_bytes, sim.prefetched_bytes, sim.peak_host_bytes, pinned,
        sim.param_fetched_bytes, sim.stall_ns, sim.host_bound_ns, sim.host_issue_ns,
        times, pool.levels, getattr(pool, "curve", None),
        sim.ops if sim.record_ops else [], (pool.spans or []) if sim.record_ops else [],
        sim.layer_spans)
