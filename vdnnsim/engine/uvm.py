"""Page-based unified memory: the alternative the vDNN paper argues against, as a policy.

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
full they go first, written back as dirty (the driver cannot know they are dead). The iteration is replayed
twice and the second is reported (the first starts with everything on the host); the
network's input batch arrives on the host each iteration.

Parameters (policy options), with their sources: ``page_bytes`` 4096 and ``fault_ns``
45,000 (the paper: 20-50 us per 4 KB page fault, 80-200 MB/s; UVM simulators such as
UVMSmart and G10 use about 45 us a fault), ``fault_batch`` 1 (faults served per fault
latency; Pascal and later batch them), ``prefetch_bytes`` 0 (no prefetcher; 65536 or
2 MiB for a tree prefetcher or large pages), ``algo`` 'p' (the fastest algorithms: UVM
never runs out of memory, so nothing forces leaner ones). The host issues passes as in
:class:`Simulation`; the launch queue is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import simpy

from ..hardware import GPU
from ..trace.model import Trace
from .allocator import Accounting, key_name
from .plan import Liveness, Plan
from .semantics import semantics_for
from .compile import _steps, free_points
from .streams import Op

_record = tuple.__new__
_CATEGORY = {"weights": "weights", "wgrad": "weight_grads", "grad": "gradients",
             "workspace": "workspace", "resident": "resident"}


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


class UvmSimulation:
    """Replays a trace under page-based unified memory (NOTE [uvm]); the attributes
    api._result reads are those of :class:`Simulation`."""

    def __init__(self, trace: Trace, gpu: GPU, plan: Plan, capacity_bytes: int,
                 lv: Liveness, record_ops: bool = True):
        self.trace, self.gpu, self.plan, self.lv = trace, gpu, plan, lv
        self.p: UvmParams = plan.uvm
        self.capacity = capacity_bytes
        self.sem = sem = semantics_for(trace)
        keys = sem.grad_keys(trace, lv)
        self._gkey, self._gsize, self._gneeds = keys
        self._steps = _steps(trace, lv, *keys)
        self.record_ops = record_ops
        self.env = simpy.Environment()
        self.pool = Accounting(None)  # the GPU's resident bytes over time (no lifetimes:
        # a buffer's pages come and go piecemeal)
        self.ops: list[Op] = []
        self.resident: dict[Any, int] = {}  # buffer -> bytes on the GPU
        self.cached = 0  # freed buffers' pages still on the GPU (the caching allocator's)
        self.size: dict[Any, int] = {}  # managed buffers that exist -> bytes
        self.dirty: set[Any] = set()  # the GPU's copy is newer than the host's
        self._born: dict[Any, int] = {}  # buffer -> when it was created
        self.spans: list[tuple[str, str, int, int, int]] = []
        self.last_use: dict[Any, int] = {}
        self.uses: dict[Any, int] = {}
        self.clock = 0  # pass counter, for LRU/LFU
        self.t = 0  # the GPU's time within the iteration being recorded
        self.host = 0
        self.recording = False
        self.stall_ns = self.host_bound_ns = 0
        self.offloaded_bytes = self.prefetched_bytes = 0  # written back, migrated in
        self.faults = 0
        self.peak_managed = self.managed = 0
        self.peak_host_bytes = 0
        self.end_ns = self.fwd_end_ns = 0

    # -- managed memory ----------------------------------------------------------------------
    def _create(self, key: Any, size: int, on_gpu: bool) -> None:
        """A new managed buffer. ``on_gpu``: allocated by the program on the GPU side; it
        takes pages the allocator cached (freed, still resident: no fault) first, and the
        rest is created at first touch."""
        self.size[key] = size
        self._born[key] = self.t
        self.managed += size
        self.peak_managed = max(self.peak_managed, self.managed)
        if not on_gpu:
            self.resident[key] = 0
            return
        reuse = min(self.cached, size)
        if reuse:
            self.cached -= reuse
            self._level("cached", -reuse, "cached")
            self.resident[key] = reuse
            self._level(key, reuse)

    def _ensure(self, key: Any, size: int, on_gpu: bool) -> Any:
        """``key``, created first if it does not exist yet."""
        if key not in self.size:
            self._create(key, size, on_gpu)
        return key

    def _destroy(self, key: Any) -> None:
        size = self.size.pop(key, None)
        if size is None:
            return
        self.managed -= size
        self._span(key, size)
        r = self.resident.pop(key, 0)
        if r:  # the caching allocator keeps the block: its pages stay on the GPU
            self._level(key, -r)
            self.cached += r
            self._level("cached", r, "cached")
        self.dirty.discard(key)
        self.last_use.pop(key, None)
        self.uses.pop(key, None)

    def _span(self, key: Any, size: int) -> None:
        """A managed buffer's lifetime, for the run's tensor view (recorded iteration)."""
        t0 = self._born.pop(key, 0)
        if self.recording and self.record_ops:
            cat = _CATEGORY.get(key[0], key[0]) if isinstance(key, tuple) else "activations"
            self.spans.append((key_name(key), cat, size, t0, self.t))

    def _level(self, key: Any, delta: int, category: str = "resident") -> None:
        """The GPU's resident bytes change by ``delta`` (the curve of the run's memory)."""
        if delta > 0:
            self.pool._taken(key, delta, category, self.t)
        elif delta < 0:
            self.pool._given_back(key, -delta, category, self.t)

    def _touch(self, ws: list[tuple[Any, bool]], name: str, layer: str):
        """Make every buffer of ``ws`` (key, written) resident; returns the stall in ns."""
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
            self._level("cached", -take, "cached")
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
                self._level(k, -take)
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
            self._level(k, target[k] - self.resident.get(k, 0))  # shrinking ones first
            self.resident[k] = target[k]
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
        link = self.gpu.link
        stall = (faults * p.fault_ns
                 + (round(moved_in / link.h2d_bw_bytes_per_s * 1e9) if moved_in else 0)
                 + (round(written_back / link.d2h_bw_bytes_per_s * 1e9) if written_back else 0))
        if self.recording:
            self.faults += faults
            self.prefetched_bytes += moved_in
            self.offloaded_bytes += written_back
            self.stall_ns += stall
            if stall and self.record_ops:
                self.ops.append(_record(Op, ("h2d", "fetch", layer, f"{name}:faults", self.t,
                                             self.t + stall, moved_in)))
        return stall

    def _rank(self, k: Any) -> tuple[int, int]:
        if self.p.eviction == "lfu":
            return (self.uses.get(k, 0), self.last_use.get(k, 0))
        return (self.last_use.get(k, 0), 0)

    # -- the replay ----------------------------------------------------------------------
    def _pass(self, ws, dur: int, host_ns: int, kind: str, layer: str, name: str):
        self.host += host_ns
        if self.host > self.t:
            if self.recording:
                self.host_bound_ns += self.host - self.t
            yield self.env.timeout(self.host - self.t)
            self.t = self.host
        stall = self._touch(ws, name, layer)
        if stall:
            yield self.env.timeout(stall)
            self.t += stall
        if self.recording and self.record_ops:
            self.ops.append(_record(Op, ("compute", kind, layer, name, self.t, self.t + dur,
                                         0)))
        if dur:
            yield self.env.timeout(dur)
            self.t += dur

    def _layer_pass(self, ws, workspace: int, dur: int, host_ns: int, kind: str, layer: str,
                    name: str):
        """One layer's pass with its workspace (made for the pass, freed after it)."""
        if workspace:
            self._create(("workspace", layer), workspace, on_gpu=True)
            ws.append((("workspace", layer), True))
        yield from self._pass(ws, dur, host_ns, kind, layer, name)
        self._destroy(("workspace", layer))

    def _iteration(self):
        trace, lv, plan, steps = self.trace, self.lv, self.plan, self._steps
        layers = trace.layers
        held = {b for b in lv.size if b not in lv.producer}
        for b in held:  # a new batch, on the host
            self._destroy(b)
            self._create(b, lv.size[b], on_gpu=False)
        fwd_free, bwd_free = free_points(lv, held)
        if trace.resident_bytes and ("resident", "") not in self.size:
            self._create(("resident", ""), trace.resident_bytes, on_gpu=True)
        for i, layer in enumerate(layers):
            st, algo = steps[i], layer.algos[plan.algos[i]]
            ws: list[tuple[Any, bool]] = [(b, False) for b in st.reads]
            for t, size in st.out_alloc:
                self._create(t, size, on_gpu=True)
                ws.append((t, True))
            if layer.weight_bytes:  # the first iteration finds the weights on the host
                ws.append((self._ensure(("weights", layer.id), layer.weight_bytes, False),
                           False))
            yield from self._layer_pass(ws, algo.fwd_workspace_bytes, algo.fwd_ns,
                                        layer.host_fwd_ns, "fwd", layer.id, st.fwd)
            for b in fwd_free.get(i, ()):
                self._destroy(b)
        self.fwd_end_ns = self.t
        for b in lv.outputs:
            if not lv.kept(b):
                self._destroy(b)
            g = self._gkey[b]
            if self._gneeds[g] and ("grad", g) not in self.size:
                self._create(("grad", g), self._gsize[g], on_gpu=True)
        for i in range(len(layers) - 1, -1, -1):
            layer, st = layers[i], steps[i]
            algo = layer.algos[plan.algos[i]]
            ws = [(b, False) for b in st.saved] + [(g, False) for g in st.grads_out
                                                    if g in self.size]
            ws += [(self._ensure(g, size, True), True) for g, size in st.grads_in]
            if layer.weight_bytes:
                ws.append((("weights", layer.id), False))
                ws.append((self._ensure(("wgrad", layer.id), layer.weight_bytes, True), True))
            yield from self._layer_pass(ws, algo.bwd_workspace_bytes, algo.bwd_ns,
                                        layer.host_bwd_ns, "bwd", layer.id, st.bwd)
            for g in st.grads_out:
                self._destroy(g)
            for b in bwd_free.get(i, ()):
                self._destroy(b)
        ws = [(("weights", x.id), True) for x in layers if x.weight_bytes] + \
            [(("wgrad", x.id), False) for x in layers if x.weight_bytes]
        yield from self._pass(ws, trace.step_ns, trace.host_step_ns, "step", "", "step")
        for b in lv.outputs | {k for k in list(self.size) if isinstance(k, tuple)
                               and k[0] == "grad"}:
            self._destroy(b)

    def _run(self):
        yield from self._iteration()  # warm-up: everything starts on the host
        self.t = self.host = 0
        self.pool = Accounting(None)
        self._born = dict.fromkeys(self.size, 0)
        for k, r in self.resident.items():
            self._level(k, r)
        self._level("cached", self.cached, "cached")
        self.peak_managed = self.managed
        self.recording = True
        yield from self._iteration()
        self.end_ns = max(self.t, self.host)

    def run(self) -> "UvmSimulation":
        self.env.process(self._run())
        self.env.run()
        self.pool.peak_footprint_bytes = self.pool.peak_live_bytes
        if self.record_ops:  # what lives to the end
            self.t = self.end_ns
            for key in list(self._born):
                self._span(key, self.size[key])
            self.pool.spans = self.spans
        self.peak_host_bytes = max(0, self.peak_managed - self.pool.peak_live_bytes)
        return self
