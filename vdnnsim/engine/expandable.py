"""PyTorch's caching allocator with ``expandable_segments:True``.

NOTE [expandable segments]
With ``expandable_segments:True`` the allocator keeps one segment per pool (small, large)
and stream: a range of virtual addresses as large as the device, whose physical pages (2 MiB
in the small pool, 20 MiB in the large) it maps as it needs them (CUDACachingAllocator.cpp,
Note [Expandable Segments]). Blocks are placed and split as in fixed segments. When no free
block holds a request, it maps pages at the lowest address where the free block before and
the unmapped range after together hold it (normally the segment's end), as many whole pages
as the part not yet free needs; reserved memory is the mapped pages. Releasing the cache
unmaps every whole page inside a free block, and later mappings fill those holes first, at
the lowest address. A request that still does not fit synchronises and retries, or is out
of memory, as with fixed segments.
"""

from __future__ import annotations

from .allocator import Key
from .caching import LARGE_BUFFER, SMALL_BUFFER, SMALL_SIZE, CachingPool, round_size

_FAR = 1 << 100  # the end of a segment's address range: never reached


class ExpandablePool(CachingPool):
    """NOTE [expandable segments]: :class:`CachingPool` with one growing segment per pool
    and stream."""

    def __init__(self, capacity_bytes: int | None):
        super().__init__(capacity_bytes)
        self._es: dict[tuple[str, str], int] = {}  # (pool, stream) -> its segment
        self._high: dict[int, int] = {}  # segment -> the end of its mapped range
        self._holes: dict[int, dict[int, int]] = {}  # segment -> {offset: size} unmapped
        # what ``_plan`` reads changes only through the methods that count here: its last
        # answer holds while the count stands (an allocation asks twice: would_release, alloc)
        self._changes = 0
        self._last_plan: tuple[tuple[int, int, int, int], tuple[int, list]] | None = None

    def _add_free(self, seg: int, off: int, size: int) -> None:
        self._changes += 1
        super()._add_free(seg, off, size)

    def _take_free(self, seg: int, off: int) -> int:
        self._changes += 1
        return super()._take_free(seg, off)

    @staticmethod
    def _page(pool: str) -> int:
        return SMALL_BUFFER if pool == "small" else LARGE_BUFFER

    def _segment(self, pool: str, stream: str) -> int:
        seg = self._es.get((pool, stream))
        if seg is None:
            seg = self._es[(pool, stream)] = self._next_seg
            self._next_seg += 1
            self._segments[seg] = (pool, 0)
            self._stream[seg] = stream
            self._free[seg], self._ends[seg], self._holes[seg] = {}, {}, {}
            self._high[seg] = 0
            self._changes += 1
        return seg

    def _plan(self, seg: int, size: int, page: int) -> tuple[int, list[tuple[int, int]]]:
        """Where ``size`` goes once pages are mapped: (its start, [(offset, bytes) to map]),
        the lowest start whose free and unmapped ranges from there hold it."""
        asked = (self._changes, seg, size, page)
        if self._last_plan is not None and self._last_plan[0] == asked:
            return self._last_plan[1]
        found = self._find(seg, size, page)
        self._last_plan = (asked, found)
        return found

    def _find(self, seg: int, size: int, page: int) -> tuple[int, list[tuple[int, int]]]:
        free, holes, high = self._free[seg], self._holes[seg], self._high[seg]
        for at in [*sorted(holes), high]:
            start = self._ends[seg].get(at, at)  # the free block just before, if any
            p, got, maps = start, 0, []
            while got < size:
                if p in free:
                    got += free[p]
                    p += free[p]
                elif p in holes or p == high:
                    room = holes[p] if p in holes else _FAR
                    m = min(room, -(-(size - got) // page) * page)
                    maps.append((p, m))
                    got += m
                    p += m
                    if m < room:
                        break
                else:
                    break  # an allocated block: this start cannot hold it
            if got >= size:
                return start, maps
        raise AssertionError("the end of a segment always holds a request")

    def _grow(self, pool: str, size: int, stream: str, key: Key, layer: str, phase: str,
              now: int, can_sync: bool) -> tuple[int, int, int] | None:
        seg, page = self._segment(pool, stream), self._page(pool)
        plan = self._plan(seg, size, page)

        def need() -> int:
            nonlocal plan
            plan = self._plan(seg, size, page)
            return sum(m for _, m in plan[1])
        if self._room(sum(m for _, m in plan[1]), key, layer, phase, now, can_sync,
                      need) is None:
            return None
        start, maps = plan
        holes = self._holes[seg]
        self._changes += 1
        for off, m in maps:  # map: the range becomes a free block, merged with neighbours
            if off == self._high[seg]:
                self._high[seg] += m
            else:
                room = holes.pop(off)
                if room > m:
                    holes[off + m] = room - m
            self._merge_free((seg, off, m, ""))
        pool_, mapped = self._segments[seg]
        self._segments[seg] = (pool_, mapped + sum(m for _, m in maps))
        return seg, start, self._free[seg][start]

    def would_release(self, size_bytes: int, stream: str = "compute") -> bool:
        if size_bytes <= 0:
            return False
        size = round_size(size_bytes)
        pool = "small" if size <= SMALL_SIZE else "large"
        if self._best(pool, size, stream) is not None:
            return False
        seg = self._es.get((pool, stream))
        if seg is None:
            need = -(-size // self._page(pool)) * self._page(pool)
        else:
            need = sum(m for _, m in self._plan(seg, size, self._page(pool))[1])
        return self.reserved_bytes + need > self.capacity

    def _release_cached(self) -> None:
        """Unmap every whole page inside a free block."""
        for seg, (pool, mapped) in list(self._segments.items()):
            page, holes = self._page(pool), self._holes[seg]
            for off, size in sorted(self._free[seg].items()):
                a, b = -(-off // page) * page, (off + size) // page * page
                if b <= a:
                    continue
                self._take_free(seg, off)
                if a > off:
                    self._add_free(seg, off, a - off)
                if off + size > b:
                    self._add_free(seg, b, off + size - b)
                holes[a] = b - a
                mapped -= b - a
                self.reserved_bytes -= b - a
                self.released += 1
                self.released_bytes += b - a
            self._segments[seg] = (pool, mapped)
            self._merge_holes(seg)

    def _merge_holes(self, seg: int) -> None:
        self._changes += 1
        holes, merged = self._holes[seg], {}
        last = None
        for off in sorted(holes):
            if last is not None and last + merged[last] == off:
                merged[last] += holes[off]
            else:
                merged[off] = holes[off]
                last = off
        if last is not None and last + merged[last] == self._high[seg]:
            self._high[seg] = last  # a hole at the end shortens the segment
            del merged[last]
        self._holes[seg] = merged
