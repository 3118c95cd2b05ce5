"""A model of PyTorch's CUDA caching allocator (allocated vs reserved).

NOTE [caching allocator]
The rules of c10/cuda/CUDACachingAllocator.cpp that decide memory, not speed: a request is
rounded up to a multiple of 512 bytes; up to 1 MiB it comes from the small pool (2 MiB
segments), else from the large pool (20 MiB segments under 10 MiB, else the request rounded
up to 2 MiB); it takes its pool's smallest free block that holds it and splits it when the
rest is at least 512 bytes (small) or over 1 MiB (large), an unsplit rest counting as
allocated; a freed block merges with its free neighbours, and segments stay reserved. A new
segment must fit under the cap; if it does not, every fully free segment is released and the
request retried; then the host synchronises on the deferred frees' events, frees them,
releases again and retries once more (release_cached_blocks); then it is out of memory.

NOTE [allocator costs]
The allocator's driver calls cost time, paid when the cache is released under a cap: each
released segment is a cudaFree, which waits for the whole device, and each segment made
again afterwards a cudaMalloc. An uncapped step in its steady state makes no segment, so the
pool counts only the segments it released (``released``) and those it made after a release
(``remade``), with their bytes; the engine charges the host the preset's
``segment_free_ns`` and ``segment_malloc_ns`` for each, plus the ``_per_gib`` terms for each
GiB, and makes it wait for every stream before a release (docs/validation.md, "Allocator
costs").

NOTE [stream pools]
PyTorch's allocator keeps each segment for the stream it was made on: a block freed to a
segment of the copy stream is reused only by the copy stream's next allocation (blocks
know their stream; the free lists are per pool and stream). The block runtime allocates its
prefetched copies on its copy stream (vdnnsim/gpu/runtime/blocks.py), so its plans
(``Plan.prefetch_stream``) put them there; every other allocation is the compute
stream's (the fx runtime allocates its prefetches before it enters its side stream). A
release of the cache frees the fully free segments of every stream.

NOTE [deferred free]
A block that another stream used (``record_stream``: the runtimes' copies) is, when freed,
no longer allocated but not reusable: the allocator records an event on that stream and
returns the block to its pool only when a later malloc on the host (process_events) finds
the event complete. ``retire`` takes such a block out of the allocated set and ``release``
gives it back to the free lists. A key can wait twice at once (offloaded, prefetched back,
used and freed again before its first event is seen): each of its blocks waits for its own
event, released oldest first (``RetiredKeys`` counts the key as often), and every run ends
by checking that the books balance (``unaccounted_bytes``).

An out-of-memory records the segment the allocator asked the device for (requested) and
the room left under the cap for one (largest free): a 1 MiB tensor that needs a new 2 MiB
segment under a 1 MiB cap is reported as the 2 MiB it could not get. ``allocated`` is the
sum of allocated blocks, ``reserved`` the sum of segments: what
torch.cuda.max_memory_allocated / max_memory_reserved report. As in NOTE [out of memory],
a request that fails is recorded and then placed anyway.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from .allocconf import split_pairs
from ..errors import ConfigError
from ..limits import short_repr
from .allocator import Accounting, Key, key_name, oom_record
from .invariants import InvariantViolation

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
MIN_LARGE_ALLOC = 10 << 20
LARGE_BUFFER = 20 << 20
ROUND_LARGE = 2 << 20


@dataclass(frozen=True)
class AllocatorSettings:
    """NOTE [allocator settings]
    The settings of PyTorch's caching allocator a run replays, as PYTORCH_CUDA_ALLOC_CONF
    sets them on the real machine (``allocator:`` in run configs, ``allocator=`` of
    ``run_trace``). Modelled: ``expandable_segments``. The other keys PyTorch reads
    (max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold, ...) change
    placement in ways the model does not follow: asking for one is an error, not a silent
    default. They apply to PyTorch traces only (a Torch7 trace's pool is CNMeM's). A policy
    that replays to choose does so under the run's settings (NOTE [planning allocator]); the
    planners choose under the settings they are given (NOTE [planned allocator])."""

    expandable_segments: bool = False

    @property
    def default(self) -> bool:
        return self == AllocatorSettings()

    def conf(self) -> str:
        """As PYTORCH_CUDA_ALLOC_CONF would say it ('' for the default)."""
        return "expandable_segments:True" if self.expandable_segments else ""


KNOWN_SETTINGS = ("expandable_segments",)
UNMODELLED = ("max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
              "pinned_use_cuda_host_register", "pinned_num_register_threads", "backend",
              "release_lock_on_cudamalloc", "pinned_use_background_threads",
              "graph_capture_record_stream_reuse", "per_process_memory_fraction")


def allocator_settings(value: Any) -> AllocatorSettings:
    """NOTE [allocator settings]: ``value`` (None, a mapping such as
    ``{expandable_segments: true}``, a PYTORCH_CUDA_ALLOC_CONF string such as
    ``expandable_segments:True``, or settings) as settings; a one-line error otherwise."""
    if value is None or isinstance(value, AllocatorSettings):
        return value or AllocatorSettings()
    if isinstance(value, str):  # the one reader of that text (allocconf.split_pairs)
        value = {k: {"true": True, "false": False}.get(v.lower(), v)
                 for k, v in split_pairs(value, "allocator:").items()}
    if not isinstance(value, dict):
        raise ConfigError(f"allocator must be a mapping such as {{expandable_segments: true}}"
                          f", got {type(value).__name__}")
    for k, v in value.items():
        if k in UNMODELLED:
            raise ConfigError(f"allocator: {k} is not modelled (modelled: "
                              f"{', '.join(KNOWN_SETTINGS)}); a run under it would be "
                              "predicted as if it were unset")
        if k not in KNOWN_SETTINGS:
            raise ConfigError(f"allocator: unknown setting {short_repr(k)}; known: "
                              f"{', '.join(KNOWN_SETTINGS)}")
        if not isinstance(v, bool):
            raise ConfigError(f"allocator: {k} must be true or false, got {short_repr(v)}")
    return AllocatorSettings(**value)


def round_size(n: int) -> int:
    return MIN_BLOCK if n < MIN_BLOCK else -(-n // MIN_BLOCK) * MIN_BLOCK


def segment_size(n: int) -> int:
    if n <= SMALL_SIZE:
        return SMALL_BUFFER
    if n < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-n // ROUND_LARGE) * ROUND_LARGE


class CachingPool(Accounting):
    """Same interface as :class:`~vdnnsim.engine.allocator.Pool`; the footprint is the
    reserved memory.

    Free blocks are kept per pool in a list sorted by (size, segment, offset), so the best
    fit is a bisection, as PyTorch's own size-ordered block sets are (ties: the earlier
    segment, then the lower offset, i.e. the lower address); neighbours are found through
    per-segment maps of block starts and ends. Every operation is logarithmic in the number
    of free blocks but for the list's insertions (a memmove)."""

    def __init__(self, capacity_bytes: int | None):
        super().__init__(capacity_bytes)
        self._segments: dict[int, tuple[str, int]] = {}  # id -> (pool, size)
        self._free: dict[int, dict[int, int]] = {}  # segment -> {offset: size} of free blocks
        self._ends: dict[int, dict[int, int]] = {}  # segment -> {end: offset} of free blocks
        # free blocks per (pool, stream): a segment serves the stream it was made for
        self._index: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
        self._stream: dict[int, str] = {}  # segment -> the stream it was made for
        self._blocks: dict[Key, tuple[int, int, int, str]] = {}  # key -> seg, off, size, cat
        self.live = self._blocks  # what `key in` asks
        # each key's retired blocks, oldest first: a key can be
        # retired again (a buffer prefetched back, used and freed) before its first block's
        # event completes, and each block waits for its own event
        self._retired: dict[Key, list[tuple[int, int, int, str]]] = {}
        self._next_seg = 0
        self.reserved_bytes = 0
        self.released = 0  # segments given back (cudaFree)
        self.remade = 0  # and segments made after a release (cudaMalloc in a steady state)
        self.released_bytes = 0
        self.remade_bytes = 0

    def __contains__(self, key: Key) -> bool:
        return key in self._blocks

    def next_iteration(self) -> None:
        """The books start again for the iteration that is reported,
        as ``torch.cuda.reset_peak_memory_stats`` starts them after the warm-up steps: the
        peaks from what is allocated and reserved now, the curve from the live bytes at
        time 0, every live block's lifetime from time 0; the blocks and segments stay."""
        self.peak_live_bytes = self.live_bytes
        self.peak_breakdown = {k: v for k, v in self.by_category.items() if v}
        self.peak_footprint_bytes = self.reserved_bytes
        self.times, self.levels, self.curve = [0], [self.live_bytes], None
        self._open = dict.fromkeys(self._blocks, 0)

    def live_keys(self) -> list[Key]:
        """The keys allocated now (a retired block is not: it waits apart for release)."""
        return list(self._blocks)

    def _size_category(self, key: Key) -> tuple[int, str]:
        block = self._blocks[key]
        return block[2], block[3]

    def _add_free(self, seg: int, off: int, size: int) -> None:
        self._free[seg][off] = size
        self._ends[seg][off + size] = off
        bisect.insort(self._index.setdefault((self._segments[seg][0], self._stream[seg]), []),
                      (size, seg, off))

    def _take_free(self, seg: int, off: int) -> int:
        size = self._free[seg].pop(off)
        del self._ends[seg][off + size]
        idx = self._index[(self._segments[seg][0], self._stream[seg])]
        del idx[bisect.bisect_left(idx, (size, seg, off))]
        return size

    def _best(self, pool: str, size: int, stream: str = "compute"
              ) -> tuple[int, int, int] | None:
        idx = self._index.get((pool, stream), ())
        i = bisect.bisect_left(idx, (size, -1, -1))
        if i == len(idx):
            return None
        bsize, seg, off = idx[i]
        return seg, off, bsize

    def empty_cache(self) -> None:
        """torch.cuda.empty_cache(): the fully free segments given back, as a release under
        the cap but not counted as one (NOTE [allocator costs] counts what a step under a
        cap pays; the autotuner's calls are the first step's)."""
        counts = self.released, self.released_bytes
        self._release_cached()
        self.released, self.released_bytes = counts

    def _release_cached(self) -> None:
        for seg in [s for s, (pool, size) in self._segments.items()
                    if self._free[s].get(0) == size]:
            self._take_free(seg, 0)
            size = self._segments.pop(seg)[1]
            self.reserved_bytes -= size
            del self._free[seg], self._ends[seg], self._stream[seg]
            self.released += 1
            self.released_bytes += size

    def would_release(self, size_bytes: int, stream: str = "compute") -> bool:
        """Whether this request needs a new segment past the cap,
        so that the cache is released first."""
        if size_bytes <= 0:
            return False
        size = round_size(size_bytes)
        if self._best("small" if size <= SMALL_SIZE else "large", size, stream) is not None:
            return False
        return self.reserved_bytes + segment_size(size) > self.capacity

    def alloc(self, key: Key, size_bytes: int, category: str, now: int,
              layer: str = "", phase: str = "", can_sync: bool = False,
              stream: str = "compute") -> bool:
        """Place the block; ``False`` (and nothing changed but the released cache) when it
        needs a segment past the capacity and ``can_sync``: the caller synchronises on
        the deferred frees and asks again."""
        if key in self._blocks:
            raise RuntimeError(f"double allocation of {key}")
        if size_bytes <= 0:
            return True
        size = round_size(size_bytes)
        pool = "small" if size <= SMALL_SIZE else "large"
        found = self._best(pool, size, stream)
        if found is None:
            found = self._grow(pool, size, stream, key, layer, phase, now, can_sync)
            if found is None:
                return False
        seg, off, bsize = found
        self._take_free(seg, off)
        rest = bsize - size
        if (pool == "small" and rest >= MIN_BLOCK) or (pool == "large" and rest > SMALL_SIZE):
            self._add_free(seg, off + size, rest)
            taken = size
        else:
            taken = bsize
        self._blocks[key] = (seg, off, taken, category)
        self._taken(key, taken, category, now)
        return True

    def _room(self, need: int, key: Key, layer: str, phase: str, now: int,
              can_sync: bool, retry) -> int | None:
        """``need`` more bytes reserved under the cap: if they do
        not fit, the cache is released and ``retry()`` says what is needed then; None when
        it still does not fit and ``can_sync`` (the caller synchronises and asks again);
        else what to reserve (past the cap only with the out-of-memory recorded)."""
        if self.reserved_bytes + need > self.capacity:
            self._release_cached()
            need = retry()
            if self.reserved_bytes + need > self.capacity and can_sync:
                return None
            if self.reserved_bytes + need > self.capacity and self.oom is None:
                free = self.capacity - self.live_bytes
                self.oom = oom_record(key, layer, phase, now, need, free,
                                      max(0, self.capacity - self.reserved_bytes))
        if self.reserved_bytes + need > self.capacity and self.oom is None:
            raise InvariantViolation(f"reserved a segment past the capacity with no "
                                     "out-of-memory recorded", layer, key_name(key))
        if self.released:
            self.remade += 1
            self.remade_bytes += need
        self.reserved_bytes += need
        self.peak_footprint_bytes = max(self.peak_footprint_bytes, self.reserved_bytes)
        return need

    def _grow(self, pool: str, size: int, stream: str, key: Key, layer: str, phase: str,
              now: int, can_sync: bool) -> tuple[int, int, int] | None:
        """No free block holds ``size``: a new segment (cudaMalloc), as (segment, offset,
        size) of the free block that now holds it; None as :meth:`_room`."""
        seg_size = segment_size(size)
        if self._room(seg_size, key, layer, phase, now, can_sync, lambda: seg_size) is None:
            return None
        seg = self._next_seg
        self._next_seg += 1
        self._segments[seg] = (pool, seg_size)
        self._stream[seg] = stream
        self._free[seg], self._ends[seg] = {}, {}
        self._add_free(seg, 0, seg_size)
        return seg, 0, seg_size

    def transient(self, key: Key, size_bytes: int, category: str, start: int, end: int
                  ) -> bool:
        """As :meth:`Pool.transient`; ``False`` where it needs a new
        segment (which stays reserved: the caller takes the full path)."""
        if size_bytes <= 0:
            return True
        if key in self._blocks:
            raise RuntimeError(f"double allocation of {key}")
        size = round_size(size_bytes)
        pool = "small" if size <= SMALL_SIZE else "large"
        found = self._best(pool, size)
        if found is None:
            return False
        rest = found[2] - size
        split = rest >= MIN_BLOCK if pool == "small" else rest > SMALL_SIZE
        taken = size if split else found[2]
        self._blip(key, taken, category, start, end)
        return True

    def retire(self, key: Key, now: int) -> None:
        """No longer allocated, not yet reusable."""
        block = self._blocks.pop(key, None)
        if block is None:
            return
        self._retired.setdefault(key, []).append(block)
        self._given_back(key, block[2], block[3], now)

    def release(self, key: Key, now: int) -> None:
        """The oldest retired block of ``key`` is free (its event completed)."""
        blocks = self._retired.get(key)
        if blocks:
            block = blocks.pop(0)
            if not blocks:
                del self._retired[key]
            self._merge_free(block)

    def free(self, key: Key, now: int) -> None:
        block = self._blocks.pop(key, None)
        if block is None:
            return
        self._merge_free(block)
        self._given_back(key, block[2], block[3], now)

    def unaccounted_bytes(self) -> int:
        """Reserved bytes that are neither a live block, a retired one,
        nor free (0 when the books balance; a block lost to them is memory never reused)."""
        held = sum(b[2] for b in self._blocks.values()) + sum(
            b[2] for blocks in self._retired.values() for b in blocks)
        return self.reserved_bytes - held - sum(sum(f.values()) for f in self._free.values())

    def _merge_free(self, block: tuple[int, int, int, str]) -> None:
        seg, off, size, _ = block
        left = self._ends[seg].get(off)  # merge with free neighbours
        if left is not None:
            size += self._take_free(seg, left)
            off = left
        if off + size in self._free[seg]:
            size += self._take_free(seg, off + size)
        self._add_free(seg, off, size)
