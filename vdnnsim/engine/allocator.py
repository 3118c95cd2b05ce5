"""A CNMeM-like memory pool: one contiguous region of fixed capacity, carved by best fit,
coalesced on free.

NOTE [out of memory]
When no free block inside the capacity can hold a request (too little free memory, or
enough but fragmented), the pool records the first such failure (what, where, when) and
then keeps going, placing the block above the capacity. The run still reports what the
iteration *would* need (``peak_live_bytes``, ``peak_footprint_bytes``) and whether it fits
(``oom is None``). Within capacity the pool never hands out an address past it. The
engine records an offload that the host's memory cannot hold the same way, as the first
failure if none came before (kind 'host'); ``OutOfMemory.reason``
tells the three causes apart: 'capacity', 'fragmentation', 'host memory'.

NOTE [transient]
A layer's workspace is allocated just before its op and freed just after, with no other
allocation or free in between. Best fit then takes a free block and the free merges it
back whole, so the free lists end exactly as they began: ``transient`` records only what
the books see (live bytes up and down, the peak and its breakdown, the footprint, the
lifetime) and leaves the lists alone. Same numbers, less work (bench/bench_engine.py).
"""

from __future__ import annotations

import bisect
import operator
from typing import Any

from .invariants import InvariantViolation
from .memory_model import NO_FAULTS, Faults, Key, OutOfMemory, key_name, oom_record  # noqa: F401

ALIGN_BYTES = 512  # CNMeM rounds every allocation up to 512 bytes
_INF = 1 << 100  # 'unlimited': far past any byte count a trace can hold

def aligned(n: int) -> int:
    return -(-n // ALIGN_BYTES) * ALIGN_BYTES


def average_bytes(times: list[int], levels: list[int], curve: Any, end_ns: int) -> float:
    """Time-weighted mean over [0, end_ns] of the curve that steps to ``levels[k]`` at
    ``times[k]`` (``curve``: the same as int64 arrays, or None)."""
    if end_ns <= 0:
        return float(levels[-1])
    n = bisect.bisect_left(times, end_ns)  # in time order: the steps before end_ns
    if n and curve is not None and end_ns < 2**47:
        # exact in int64 (Python's integers of this size take several digits each):
        # the levels in 16-bit limbs, each limb's sum of products below 2**16 * end_ns
        t, live = curve
        live = live[:n]
        if int(live.max()) < 2**48:
            import numpy as np  # (numpy is imported by then: memory.py's curve)
            dt = np.diff(t[:n], append=end_ns)
            total = sum(int(((live >> k) & 0xFFFF).dot(dt)) << k for k in (0, 16, 32))
            return total / end_ns  # (exact integers until this division)
    ends = times[1:n] + [end_ns] if n else []
    total = sum(map(operator.mul, levels[:n], map(operator.sub, ends, times[:n])))
    return total / end_ns  # (exact integers until this division)


class Accounting:
    """What every pool model keeps: live bytes over time, the peak and its breakdown by
    category, the first out-of-memory failure, and (when ``spans`` is a list) each
    allocation's lifetime."""

    def __init__(self, capacity_bytes: int | None):
        self.capacity = capacity_bytes if capacity_bytes is not None else _INF
        self.live_bytes = 0
        self.peak_live_bytes = 0
        self.peak_footprint_bytes = 0
        self.by_category: dict[str, int] = {}
        self._peak_bc: dict[str, int] = {}  # by_category at the peak (peak_breakdown)
        self.oom: OutOfMemory | None = None
        self.times: list[int] = [0]
        self.levels: list[int] = [0]
        self.curve = None  # times and levels as int64 arrays, once on the GPU's clock
        self.spans: list[tuple[str, str, int, int, int]] | None = None  # key, cat, size, t0, t1
        self._open: dict[Key, int] = {}  # each live allocation's start stamp (spans a list)

    @property
    def peak_breakdown(self) -> dict[str, int]:
        """The live bytes by category at the peak (each new peak
        copies the books in C; the empty categories are dropped here, once)."""
        return {k: v for k, v in self._peak_bc.items() if v}

    @peak_breakdown.setter
    def peak_breakdown(self, value: dict[str, int]) -> None:
        self._peak_bc = value

    def open_spans(self) -> list[tuple[Key, int, int, str]]:
        """(key, start stamp, bytes, category) of every allocation not yet freed, when
        lifetimes are recorded (``spans`` a list)."""
        return [(key, t0, *self._size_category(key)) for key, t0 in self._open.items()]

    def _size_category(self, key: Key) -> tuple[int, str]:
        """The bytes and category of live allocation ``key``."""
        raise NotImplementedError

    # _taken and _given_back run at every allocation and free (bench/bench_engine.py)
    def _taken(self, key: Key, size: int, category: str, now: int) -> None:
        bc = self.by_category
        bc[category] = bc.get(category, 0) + size
        if self.spans is not None:
            self._open[key] = now
        live = self.live_bytes = self.live_bytes + size
        if live > self.peak_live_bytes:
            self.peak_live_bytes = live
            self._peak_bc = bc.copy()  # (the zeros dropped when it is read)
        times = self.times  # _level, inline
        if times[-1] == now:
            self.levels[-1] = live
        else:
            times.append(now)
            self.levels.append(live)

    def _given_back(self, key: Key, size: int, category: str, now: int) -> None:
        self.by_category[category] -= size
        spans = self.spans  # the key, named when the run ends
        if spans is not None:
            t0 = self._open.pop(key, None)
            if t0 is not None:
                spans.append((key, category, size, t0, now))
        live = self.live_bytes = self.live_bytes - size
        if live < 0:
            raise InvariantViolation(f"the pool's live bytes fell to {live}")
        times = self.times  # _level, inline
        if times[-1] == now:
            self.levels[-1] = live
        else:
            times.append(now)
            self.levels.append(live)

    def _blip(self, key: Key, size: int, category: str, start: int, end: int) -> None:
        """:meth:`_taken` at ``start`` then :meth:`_given_back` at ``end``
        (NOTE [transient]), in one frame."""
        bc = self.by_category
        bc[category] = bc.get(category, 0) + size
        live = self.live_bytes + size
        if live > self.peak_live_bytes:
            self.peak_live_bytes = live
            self._peak_bc = bc.copy()  # (the zeros dropped when it is read)
        bc[category] -= size
        if self.spans is not None:
            self.spans.append((key, category, size, start, end))
        times, levels = self.times, self.levels
        if times[-1] == start:
            levels[-1] = live
        else:
            times.append(start)
            levels.append(live)
        if times[-1] == end:
            levels[-1] = self.live_bytes
        else:
            times.append(end)
            levels.append(self.live_bytes)

    def average_bytes(self, end_ns: int) -> float:
        """Time-weighted mean of live bytes over [0, end_ns]."""
        return average_bytes(self.times, self.levels, self.curve, end_ns)

    def access(self, touched, now: int) -> Faults:
        """In device memory every allocated buffer is where a
        pass needs it: an access costs nothing (the pager's does)."""
        return NO_FAULTS


_SHIFT = 64  # a free block's index key: size << _SHIFT | start (one int compares faster than a
# tuple)
_LOW = (1 << _SHIFT) - 1


class Pool(Accounting):
    """CNMeM's root manager: the free blocks sorted by address (to merge neighbours) and,
    for best fit, by (size, address): the smallest block that holds the request, the lowest
    address on ties, found by bisection (CNMeM scans its list; same choice, less time)."""

    def __init__(self, capacity_bytes: int | None):
        super().__init__(capacity_bytes)
        self._starts: list[int] = [0]  # free blocks, sorted by start address
        self._sizes: list[int] = [_INF]  # the last free block runs to infinity
        self._by_size: list[int] = [_INF << _SHIFT]  # size << _SHIFT | start, each free block
        self._blocks: dict[Key, tuple[int, int, str]] = {}  # key -> (start, size, category)
        self.live = self._blocks  # what `key in` asks
        self.first_fit = False

    def __contains__(self, key: Key) -> bool:
        return key in self._blocks

    def live_keys(self) -> list[Key]:
        """The keys allocated now."""
        return list(self._blocks)

    def _size_category(self, key: Key) -> tuple[int, str]:
        _, size, category = self._blocks[key]
        return size, category

    def retire(self, key: Key, now: int) -> None:
        """CNMeM has no stream semantics; the block stays allocated
        until :meth:`release` (its copy has landed)."""

    def release(self, key: Key, now: int) -> None:
        self.free(key, now)

    def alloc(self, key: Key, size_bytes: int, category: str, now: int,
              layer: str = "", phase: str = "", can_sync: bool = False) -> bool:
        blocks = self._blocks
        if key in blocks:
            raise RuntimeError(f"double allocation of {key}")
        size = -(-size_bytes // ALIGN_BYTES) * ALIGN_BYTES
        if size == 0:
            return True
        by, cap = self._by_size, self.capacity
        j, n = bisect.bisect_left(by, size << _SHIFT), len(by)
        if self.first_fit:  # the lowest address that holds it
            j = self._first_fit(size, cap, n)
        while j < n:  # the smallest free block that holds it inside the capacity
            k = by[j]
            start = k & _LOW
            if start + size <= cap:
                break
            j += 1
        else:
            if self.oom is None:
                free = cap - self.live_bytes
                largest = max((min(s, cap - a) for a, s in
                               zip(self._starts, self._sizes) if a < cap), default=0)
                self.oom = oom_record(key, layer, phase, now, size, free, largest)
            j = self._best_fit(size, _INF)
            assert j is not None
            k = by[j]
            start = k & _LOW
        bsize = k >> _SHIFT
        if start + size > cap and self.oom is None:
            raise InvariantViolation(f"placed {size} bytes past the capacity with no "
                                     "out-of-memory recorded", layer, key_name(key))
        del by[j]
        starts = self._starts
        i = bisect.bisect_left(starts, start)
        if bsize == size:
            del starts[i], self._sizes[i]
        else:
            starts[i], self._sizes[i] = start + size, bsize - size
            bisect.insort(by, (bsize - size) << _SHIFT | (start + size))
        blocks[key] = (start, size, category)
        if start + size > self.peak_footprint_bytes:
            self.peak_footprint_bytes = start + size
        self._taken(key, size, category, now)
        return True

    def free(self, key: Key, now: int) -> None:
        block = self._blocks.pop(key, None)
        if block is None:
            return
        start, size, category = block
        starts, sizes, by = self._starts, self._sizes, self._by_size
        i = bisect.bisect_left(starts, start)
        end = start + size
        right = i < len(starts) and starts[i] == end
        if i > 0 and starts[i - 1] + sizes[i - 1] == start:  # merge with the left neighbour
            left = sizes[i - 1]
            del by[bisect.bisect_left(by, left << _SHIFT | starts[i - 1])]
            merged = left + size
            if right:
                del by[bisect.bisect_left(by, sizes[i] << _SHIFT | end)]
                merged += sizes[i]
                del starts[i], sizes[i]
            sizes[i - 1] = merged
            bisect.insort(by, merged << _SHIFT | starts[i - 1])
        elif right:  # with the right one
            del by[bisect.bisect_left(by, sizes[i] << _SHIFT | end)]
            starts[i] = start
            sizes[i] += size
            bisect.insort(by, sizes[i] << _SHIFT | start)
        else:
            starts.insert(i, start)
            sizes.insert(i, size)
            bisect.insort(by, size << _SHIFT | start)
        self._given_back(key, size, category, now)

    def transient(self, key: Key, size_bytes: int, category: str, start: int, end: int
                  ) -> bool:
        """NOTE [transient]: ``key`` allocated at ``start`` and freed at ``end``, nothing
        allocated or freed in between, so the free lists end as they began: only the books
        change. ``False`` (nothing done) where it does not fit inside the capacity: the
        caller then allocates and frees it, and the out-of-memory is recorded there."""
        size = -(-size_bytes // ALIGN_BYTES) * ALIGN_BYTES
        if size == 0:
            return True
        if key in self._blocks:
            raise RuntimeError(f"double allocation of {key}")
        by, cap = self._by_size, self.capacity
        j, n = bisect.bisect_left(by, size << _SHIFT), len(by)
        if self.first_fit:
            j = self._first_fit(size, cap, n)
        while j < n:
            at = by[j] & _LOW
            if at + size <= cap:
                break
            j += 1
        else:
            return False
        if at + size > self.peak_footprint_bytes:
            self.peak_footprint_bytes = at + size
        self._blip(key, size, category, start, end)
        return True

    def _first_fit(self, size: int, limit: int, none: int) -> int:
        """NOTE [placement]
        CNMeM places by best fit (the smallest free block that holds the request); a pool
        may instead take the lowest-addressed free block that holds it (first fit), as
        simpler allocators do. Index of that block in the size order, ``none`` if no block
        below ``limit`` holds it."""
        for a, s in zip(self._starts, self._sizes):
            if s >= size and a + size <= limit:
                return bisect.bisect_left(self._by_size, s << _SHIFT | a)
        return none

    def _best_fit(self, size: int, limit: int) -> int | None:
        """Index in the size order of the smallest free block that holds ``size`` below
        ``limit``."""
        by = self._by_size
        for j in range(bisect.bisect_left(by, size << _SHIFT), len(by)):
            if (by[j] & _LOW) + size <= limit:
                return j
        return None
