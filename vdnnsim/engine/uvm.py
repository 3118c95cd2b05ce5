"""Page-based unified memory, the alternative the vDNN paper argues against: the pager, the
third implementation of the memory interface.

NOTE [uvm]
Every buffer lives in one managed address space (cudaMallocManaged); none is ever refused.
The GPU holds at most ``capacity`` bytes of it. A kernel that touches a page the GPU does
not hold stops on a page fault: the driver evicts pages the pass does not use (least
recently used, ``uvm_lru``, or least frequently, ``uvm_lfu``; a dirty page is written back
over the link first), migrates the missing pages host-to-device, and the kernel goes on.
The GPU runs nothing while its faults are served, so a pass costs

    faults: ceil(missing / granule / fault_batch) x fault_ns
    + migrated bytes / h2d bandwidth + written-back bytes / d2h bandwidth
    + the kernel's own time

where ``granule`` is the page (4 KiB) or, with a prefetcher, what it migrates per fault
(a tree prefetcher's 64 KiB up to a 2 MiB large page). A page first touched on the GPU (a
new activation, gradient or workspace) is created there: it faults but moves nothing. A
pass whose own working set exceeds the capacity thrashes: the excess is written back and
migrated again within the pass. A freed buffer's pages stay on the GPU (the caching
allocator keeps the block) and a new buffer takes them without a fault; when the GPU is
full they go first, written back as dirty (the driver cannot know they are dead). What the
program writes from the host starts there: the weights (loaded before training, made at
their first touch) and the network's input batch (a new one each iteration).

:class:`Pager` is that model behind the memory interface: ``alloc`` and ``free`` make and
drop managed buffers, ``access`` is a pass touching its buffers and answers with the stall
it pays. The executor is the pool runs' (sim.py), with the semantics' choices for paged
memory made once (semantics.py, ``Semantics.paged``; the executor's side is paged.py):
each pass runs when the host has issued it and the GPU has served its faults, nothing else
in flight; the weights and their gradients are pages the passes touch, not blocks
allocated before the iteration; the step is one pass over every weight; the launch queue
is not modelled. The iteration is replayed twice on one pager and the second is reported
(the first starts with everything on the host): ``replay`` runs a warm-up first, and
:meth:`Pager.next_iteration` restarts the books with the pages where it left them.

Parameters (policy options), with their sources: ``page_bytes`` 4096 and ``fault_ns``
45,000 (the paper: 20-50 us per 4 KB page fault, 80-200 MB/s; UVM simulators such as
UVMSmart and G10 use about 45 us a fault), ``fault_batch`` 1 (faults served per fault
latency; Pascal and later batch them), ``prefetch_bytes`` 0 (no prefetcher; 65536 or
2 MiB for a tree prefetcher or large pages), ``algo`` 'p' (the fastest algorithms: UVM
never runs out of memory, so nothing forces leaner ones).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from ..hardware import Link
from .allocator import Accounting
from .invariants import InvariantViolation
from .memory_model import Faults, Touch

# a managed buffer's category in the run's tensor view, by its key's kind (a str: a tensor)
_CATEGORY = {"weights": "weights", "wgrad": "weight_grads", "grad": "gradients",
             "workspace": "workspace", "resident": "resident"}


def _category(key: Any) -> str:
    return _CATEGORY.get(key[0], key[0]) if isinstance(key, tuple) else "activations"


@dataclass(frozen=True)
class UvmParams:
    eviction: str = "lru"  # lru | lfu
    page_bytes: int = 4096
    fault_ns: int = 45_000
    fault_batch: int = 1
    prefetch_bytes: int = 0

    @property
    def granule(self) -> int:
        return max(self.page_bytes, self.prefetch_bytes)


class Pager(Accounting):
    """Unified memory behind the memory interface. Its curve is the GPU's
    resident bytes (category 'resident') and the freed pages it still holds ('cached');
    a buffer's lifetime is from its creation to its free, whatever its pages do."""

    def __init__(self, capacity_bytes: int, params: UvmParams, link: Link,
                 host_written: Collection[Any]):
        super().__init__(capacity_bytes)
        self.p, self.link = params, link
        self.host_written = host_written  # buffers made on the host, not on the GPU
        self.size: dict[Any, int] = {}  # managed buffers that exist -> bytes
        self.live = self.size  # what `key in` asks
        self.resident: dict[Any, int] = {}  # buffer -> bytes on the GPU
        self.cached = 0  # freed buffers' pages still on the GPU (the caching allocator's)
        self.dirty: set[Any] = set()  # the GPU's copy is newer than the host's
        self.last_use: dict[Any, int] = {}
        self.uses: dict[Any, int] = {}
        self.clock = 0  # touches so far, for LRU/LFU
        self.managed = self.peak_managed = 0
        self.faults = self.migrated_bytes = self.written_back_bytes = 0
        self._scratch: tuple[Any, int, int, int] | None = None

    @property
    def peak_host_bytes(self) -> int:
        """What the host held at the GPU's peak at least: managed bytes not resident."""
        return max(0, self.peak_managed - self.peak_live_bytes)

    def next_iteration(self) -> None:
        """A new iteration on the same pages: the books start again, with what is resident
        and cached at time 0 and every buffer that exists as made then."""
        Accounting.__init__(self, self.capacity)
        self._open = dict.fromkeys(self.size, 0)
        for r in self.resident.values():
            self._level(r, "resident", 0)
        self._level(self.cached, "cached", 0)
        self.peak_managed = self.managed
        self.faults = self.migrated_bytes = self.written_back_bytes = 0

    # -- the memory interface ------------------------------------------------------------
    def __contains__(self, key: Any) -> bool:
        return key in self.size

    def live_keys(self) -> list[Any]:
        return list(self.size)

    def _size_category(self, key: Any) -> tuple[int, str]:
        return self.size[key], _category(key)

    def alloc(self, key: Any, size_bytes: int, category: str, now: int, layer: str = "",
              phase: str = "", can_sync: bool = False) -> bool:
        """A new managed buffer: on the GPU (it takes cached pages first, the rest is
        made at its first touch) unless the host writes it."""
        if key in self.size:
            raise RuntimeError(f"double allocation of {key}")
        if size_bytes > 0:
            self._create(key, size_bytes, now)
        return True

    def free(self, key: Any, now: int) -> None:
        size = self.size.pop(key, None)
        if size is None:
            return
        self.managed -= size
        t0 = self._open.pop(key, 0)
        if self.spans is not None:  # the key, named when the run ends
            self.spans.append((key, _category(key), size, t0, now))
        r = self.resident.pop(key, 0)
        if r:  # the caching allocator keeps the block: its pages stay on the GPU
            self._level(-r, "resident", now)
            self.cached += r
            self._level(r, "cached", now)
        self.dirty.discard(key)
        self.last_use.pop(key, None)
        self.uses.pop(key, None)

    def retire(self, key: Any, now: int) -> None:
        """No stream semantics: freed at :meth:`release`."""

    def release(self, key: Any, now: int) -> None:
        self.free(key, now)

    def transient(self, key: Any, size_bytes: int, category: str, start: int, end: int
                  ) -> bool:
        """The workspace of the next pass: made at ``start``, touched
        (written) last by the pass's access, freed at ``end``."""
        if size_bytes > 0:
            self._scratch = (key, size_bytes, start, end)
        return True

    def access(self, touched: Sequence[Touch], now: int) -> Faults:
        """A pass touches ``touched``; a buffer that does not exist yet is made first
        (the weights on the host, the rest on the GPU); returns the pass's stall."""
        ws = []
        for key, size, written in touched:
            if size and key not in self.size:
                self._create(key, size, now)
            ws.append((key, written))
        scratch, self._scratch = self._scratch, None
        if scratch is not None:
            key, size, start, end = scratch
            self._create(key, size, start)
            ws.append((key, True))
        faults = self._touch(ws, now)
        if scratch is not None:
            self.free(scratch[0], scratch[3])
        return faults

    # -- the pages -----------------------------------------------------------------------
    def _create(self, key: Any, size: int, now: int) -> None:
        self.size[key] = size
        self._open[key] = now
        self.managed += size
        self.peak_managed = max(self.peak_managed, self.managed)
        if key in self.host_written or isinstance(key, tuple) and key[0] == "weights":
            self.resident[key] = 0
            return
        reuse = min(self.cached, size)
        if reuse:
            self.cached -= reuse
            self._level(-reuse, "cached", now)
            self.resident[key] = reuse
            self._level(reuse, "resident", now)

    def _level(self, delta: int, category: str, now: int) -> None:
        """The GPU's bytes of ``category`` change by ``delta`` at ``now`` (the run's curve;
        Accounting's books without an allocation behind them)."""
        if not delta:
            return
        bc = self.by_category
        bc[category] = bc.get(category, 0) + delta
        live = self.live_bytes = self.live_bytes + delta
        if live < 0:
            raise InvariantViolation(f"the pager's resident bytes fell to {live}")
        if live > self.peak_live_bytes:
            self.peak_live_bytes = self.peak_footprint_bytes = live
            self.peak_breakdown = {k: v for k, v in bc.items() if v}
        if self.times[-1] == now:
            self.levels[-1] = live
        else:
            self.times.append(now)
            self.levels.append(live)

    def _touch(self, ws: list[tuple[Any, bool]], now: int) -> Faults:
        """Make every buffer of ``ws`` (key, written) resident."""
        p, cap = self.p, self.capacity
        want = {k: self.size[k] for k, _ in ws if self.size.get(k)}
        total = sum(want.values())
        # a buffer never resident is created on the GPU at first touch: it faults, moves nothing
        missing = sum(want[k] - self.resident.get(k, 0) for k in want)
        moved_in = sum(want[k] - self.resident[k] for k in want if k in self.resident)
        held = sum(self.resident.values()) + self.cached
        need = held + missing - cap
        written_back = 0
        if need > 0 and self.cached:  # freed blocks' pages go first (dirty to the driver)
            take = min(self.cached, need)
            self.cached -= take
            self._level(-take, "cached", now)
            need -= take
            written_back += take
        if need > 0:  # evict pages this pass does not use, by the policy's order
            order = sorted((k for k, r in self.resident.items() if r and k not in want),
                           key=self._rank)
            for k in order:
                if need <= 0:
                    break
                take = min(self.resident[k], need)
                self.resident[k] -= take
                self._level(-take, "resident", now)
                need -= take
                if k in self.dirty:
                    written_back += take
                if self.resident[k] == 0:
                    self.dirty.discard(k)
        target = dict(want)
        thrash = max(0, total - cap)  # the pass's own pages do not fit: they go round again
        left = thrash
        for k in sorted(want, key=self._rank):  # the capacity holds the rest afterwards
            if not left:
                break
            cut = min(left, target[k])
            target[k] -= cut
            left -= cut
        for k in sorted(want, key=lambda k: target[k] - self.resident.get(k, 0)):
            self._level(target[k] - self.resident.get(k, 0), "resident", now)  # shrinking
            self.resident[k] = target[k]  # ones first
        if thrash:
            written_back += thrash
            moved_in += thrash
            missing += thrash
        for k, w in ws:
            if k in want:
                self.clock += 1
                self.last_use[k] = self.clock
                self.uses[k] = self.uses.get(k, 0) + 1
                if w:
                    self.dirty.add(k)
        granules = math.ceil(missing / p.granule) if missing > 0 else 0
        faults = math.ceil(granules / p.fault_batch)
        link = self.link
        stall = (faults * p.fault_ns
                 + (round(moved_in / link.h2d_bw_bytes_per_s * 1e9) if moved_in else 0)
                 + (round(written_back / link.d2h_bw_bytes_per_s * 1e9) if written_back else 0))
        self.faults += faults
        self.migrated_bytes += moved_in
        self.written_back_bytes += written_back
        return Faults(stall, moved_in)

    def _rank(self, k: Any) -> tuple[int, int]:
        if self.p.eviction == "lfu":
            return (self.uses.get(k, 0), self.last_use.get(k, 0))
        return (self.last_use.get(k, 0), 0)

