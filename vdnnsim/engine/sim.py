"""The discrete-event model of one training iteration (simpy).

NOTE [host]
One process is the host: it walks the iteration in program order (each layer's forward,
then each layer's backward, then the optimizer step), pays each op's host cost (the
trace's per-layer host times, NOTE [host timing]; the vDNN runtime's own, NOTE [host
costs]), makes every memory decision (allocate, free, ``record_stream``) at its own time,
and puts each GPU op on its stream. The host's clock runs ahead of simpy's: it advances
simpy's clock only when it must see the GPU (a synchronisation, or an allocation that
asks whether a deferred free's event has completed, NOTE [deferred free]), so a host that
never waits costs no events. Under a memory cap the caching allocator synchronises the
host on its pending events before giving up (NOTE [caching allocator]); the GPU then
idles while the host catches up, as it does on the real machine. The optimizer step is
issued in STEP_PIECES parts, host then GPU in turn, so a host-bound step's GPU work runs
while the host still issues it (one op after the whole host cost made a host-bound step
pay both: +11% on ViT-B/16 in bf16 at batch 32, docs/validation.md).

NOTE [streams]
Each stream is a process that runs the ops it is given in order: an op starts once it is
issued, its predecessor on the stream has ended, and every op it waits for
(cudaStreamWaitEvent) has ended; the time a compute op waits for a copy beyond the first
two is a stall. An op whose start is known when it is issued (its stream's last op and
everything it waits for have known ends, and its length does not depend on what else is
running) is scheduled then; if nothing issued before it is still to be played, it is
recorded at once and costs no simpy event (its end is what anyone who waits for it reads;
the only bookkeeping that depends on when it is recorded, the host copies' total, rises
only in the forward pass and falls only in the backward). Otherwise the stream process
plays it: one event per op. Copies
run on copy engines: a D2H and an H2D engine when the link is duplex, one shared engine
otherwise; under PyTorch semantics every copy runs on the runtime's one side stream.
``Op`` records are what RunResult's timeline shows: 'compute', the copy streams, and
'host' (what the host spent issuing each layer, and where it waited).

NOTE [launch queue]
A stream's launch queue holds a bounded number of commands (about a thousand kernels,
memsets and copies on the H200, NOTE [kernel counts]): a host that runs that far ahead of
the GPU blocks in its next launch until the oldest queued command starts. Under PyTorch
semantics the host counts the commands of each compute op it has issued that has not
started (the trace's per-layer counts, else the preset's mean) and, when the next layer's
would overflow the preset's ``launch_queue``, waits for the oldest to start. This is what
keeps a host far ahead of a copy-bound GPU (vdnn_all) from piling up deferred frees and
reserving memory the real allocator never asks for. Torch7's host waits for every layer,
so its queue never fills.

NOTE [memory time]
The allocator sees the host's order, and its peaks are the ones PyTorch reports. The
memory curve, the tensor lifetimes and an out-of-memory's time are shown on the GPU's
clock: each change is stamped with the GPU op it belongs to (an allocation with the start
of the op that first uses the block, a free with the end of the op that last used it, a
deferred free with the end of the copy it waited for), and the stamps become times when
the run has ended.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import NamedTuple

import simpy

from ..hardware import GPU
from ..trace.model import Trace
from ..units import transfer_ns
from .allocator import OutOfMemory, key_name
from .invariants import InvariantViolation, StreamClock
from .plan import Liveness, Plan, liveness
from .semantics import semantics_for

# NOTE [host]: the optimizer step is issued in this many equal parts, host then GPU in turn
# (its foreach kernels go out one after another; the GPU need not wait for the last launch)
STEP_PIECES = 8


class Op(NamedTuple):
    """One slice of the timeline (a tuple: a run records thousands)."""

    stream: str  # compute | d2h | h2d | copy | host
    kind: str  # fwd | bwd | step | offload | prefetch | fetch | stall | issue | wait
    layer: str
    name: str
    start_ns: int
    end_ns: int
    size_bytes: int = 0


_record = tuple.__new__  # Op(...) without namedtuple's Python-level __new__: _record(Op, (...))


class _Op:
    """A GPU op in flight. ``end`` is None until its start is known."""

    __slots__ = ("stream", "kind", "layer", "name", "dur", "size", "issue", "waits", "start",
                 "end", "stall", "idle", "done", "copy")

    def __init__(self, stream: "_Stream", kind: str, layer: str, name: str, dur: int = 0,
                 size: int = 0, waits: tuple["_Op", ...] = (), copy: str = ""):
        self.stream, self.kind, self.layer, self.name = stream, kind, layer, name
        self.dur, self.size, self.waits, self.copy = dur, size, waits, copy
        self.issue = 0
        self.start: int | None = None
        self.end: int | None = None
        self.stall = 0
        self.idle = 0  # its stream sat idle for the host to issue it
        self.done: simpy.Event | None = None


class _At:
    """A stamp's anchor at a known time (NOTE [memory time])."""

    __slots__ = ("start", "end")

    def __init__(self, t: int):
        self.start = self.end = t


_Zero = _At(0)  # the anchor of what exists before the first op


class _Later:
    """A stamp's anchor at the later end of two ops (a buffer released when its copy has
    landed and the layer reading it is done)."""

    __slots__ = ("a", "b")

    def __init__(self, a: "_Op", b: "_Op"):
        self.a, self.b = a, b

    @property
    def end(self) -> int:
        return max(self.a.end, self.b.end)  # type: ignore[type-var]

    start = end


class _Stream:
    __slots__ = ("name", "q", "wake", "last", "tail", "clock", "cur", "shares_bw", "prev_end")

    def __init__(self, name: str, shares_bw: bool = False):
        self.name = name
        self.q: deque[_Op] = deque()
        self.wake: simpy.Event | None = None
        self.last: _Op | None = None  # the op issued last
        self.tail: int | None = 0  # when everything issued so far ends, if known
        self.clock = StreamClock(name)
        self.cur: _Op | None = None
        self.prev_end = 0  # when the op it ran last ended
        self.shares_bw = shares_bw  # a copy's bandwidth depends on the other engine


class _Steps(NamedTuple):
    """What the host does for one layer that depends only on the trace and the semantics
    (built once per trace, NOTE [host]): names, the buffers it allocates and reads, the
    gradients it allocates and frees."""

    fwd: str  # the forward op's name
    bwd: str
    out_alloc: tuple[tuple[str, int], ...]  # (buffer, bytes) its forward allocates
    reads: tuple[str, ...]  # the non-empty buffers its forward reads (NOTE [invariants])
    saved: tuple[str, ...]  # and its backward
    grads_in: tuple[tuple[tuple[str, str], int], ...]  # input gradients its backward makes
    grads_out: tuple[tuple[str, str], ...]  # output gradients freed after its backward


def _steps(trace: Trace, lv: Liveness, gkey: dict[str, str], gsize: dict[str, int],
           gneeds: dict[str, bool]) -> tuple[_Steps, ...]:
    def bufs(tensors):
        return tuple(dict.fromkeys(b for t in tensors if lv.size[b := lv.root[t]]))
    return tuple(_Steps(
        f"{x.id}:fwd", f"{x.id}:bwd",
        tuple((t, lv.size[t]) for t in x.outputs if lv.root[t] == t and lv.size[t]),
        bufs(x.inputs), bufs(x.saved),
        tuple(dict.fromkeys((("grad", g), gsize[g]) for t in x.inputs
                            if gneeds[g := gkey[t]])),
        tuple(("grad", t) for t in x.outputs if gkey[t] == t)) for x in trace.layers)


def free_points(lv: Liveness, held: set[str]
                ) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """NOTE [buffer lifetimes]: the buffers freed after each layer's forward pass (read by
    no backward pass) and after each layer's backward pass (the last that keeps them);
    ``held`` (the training loop's input batch) is never freed."""
    fwd_free: dict[int, list[str]] = {}
    for b, last in lv.fwd_last.items():
        if not lv.kept(b) and b not in lv.outputs and b not in held:
            fwd_free.setdefault(max(last, lv.producer.get(b, -1)), []).append(b)
    bwd_free: dict[int, list[str]] = {}
    for b, last in lv.bwd_last.items():
        if b not in held:
            bwd_free.setdefault(last, []).append(b)
    return fwd_free, bwd_free


def keepers(trace: Trace, lv: Liveness) -> dict[str, list[int]]:
    """Buffer -> the layers whose backward pass keeps it."""
    out: dict[str, list[int]] = {}
    for i, layer in enumerate(trace.layers):
        for t in dict.fromkeys(lv.root[t] for t in layer.saved):
            out.setdefault(t, []).append(i)
    return out


def checkpoint_buffers(trace: Trace, lv: Liveness, first: int, last: int, held: set[str]
                       ) -> tuple[frozenset[str], frozenset[str]]:
    """NOTE [recompute]: (the buffers a checkpointed segment drops, its inputs)."""
    keep = trace.__dict__.get("_keepers")
    if keep is None:
        keep = trace.__dict__["_keepers"] = keepers(trace, lv)
    dropped = frozenset(
        b for b, p in lv.producer.items()
        if first <= p <= last and b in keep and b not in held and b not in lv.outputs
        and all(first <= k <= last for k in keep[b]))
    inputs = frozenset(
        b for j in range(first, last + 1) for t in trace.layers[j].inputs
        if lv.producer.get(b := lv.root[t], -1) < first and b not in held and lv.size[b])
    return dropped, inputs


def recompute_sets(trace: Trace, lv: Liveness, segments: tuple[tuple[int, int], ...],
                   held: set[str], fwd_free: dict[int, list[str]],
                   bwd_free: dict[int, list[str]]) -> dict[int, tuple[int, frozenset[str]]]:
    """NOTE [recompute]
    Activation checkpointing as torch.utils.checkpoint does it: a segment of layers runs
    forward keeping none of the buffers its own layers would keep for backward (those
    only layers inside the segment keep); it keeps its inputs (what its layers read that
    was made before it) until its first layer's backward pass is done; and before the
    backward pass of its last layer its forward runs again, bringing the dropped buffers
    back. A buffer a layer outside the segment keeps (the segment's output, saved by the
    next layer) is kept as usual. Moves the frees of ``fwd_free``/``bwd_free`` in place;
    returns, per segment's last layer, (its first layer, the buffers it drops)."""
    where_f = {b: at for at, bs in fwd_free.items() for b in bs}
    where_b = {b: at for at, bs in bwd_free.items() for b in bs}
    out: dict[int, tuple[int, frozenset[str]]] = {}
    for first, last in segments:
        dropped, inputs = checkpoint_buffers(trace, lv, first, last, held)
        for b in dropped:  # freed after its last forward reader; back at the recompute,
            at = max(lv.fwd_last[b], lv.producer[b])  # freed where it was
            fwd_free.setdefault(at, []).append(b)
            where_f[b] = at
        for b in inputs:
            if b in where_f:  # kept no longer than its forward: now to the backward
                fwd_free[where_f.pop(b)].remove(b)
                bwd_free.setdefault(first, []).append(b)
                where_b[b] = first
            elif where_b.get(b, -1) > first:  # freed before the segment's backward
                bwd_free[where_b[b]].remove(b)
                bwd_free.setdefault(first, []).append(b)
                where_b[b] = first
        out[last] = (first, dropped)
    return out


class Simulation:
    """Replays ``plan`` on ``trace`` for ``gpu`` with a pool of ``capacity_bytes``
    (``None``: unlimited). One simpy Environment per instance; :meth:`run` once."""

    def __init__(self, trace: Trace, gpu: GPU, plan: Plan, capacity_bytes: int | None,
                 lv: Liveness | None = None, record_ops: bool = True, checks: bool = True,
                 stop_at_oom: bool = False):
        """``checks=False`` skips the data, stream and end checks of NOTE [invariants]; it
        exists only so that bench/bench_engine.py can measure what they cost.
        ``stop_at_oom``: the host stops issuing at the first layer that starts after an
        out-of-memory, for a caller that wants only whether and where it ran out (vdnn_dyn's
        profiling passes); such a run's other numbers are partial."""
        self.stop_at_oom = stop_at_oom
        self.stopped = False
        self.trace, self.gpu, self.plan = trace, gpu, plan
        self.checks = checks
        self.lv = lv or liveness(trace)
        self.sem = sem = semantics_for(trace)
        self.env = simpy.Environment()
        self.pool = sem.pool(capacity_bytes)
        if plan.placement == "first":  # NOTE [placement] (a CNMeM pool: Torch7 traces)
            self.pool.first_fit = True
        cached = trace.__dict__.get("_steps")  # a trace is immutable: once per semantics
        if cached is None or cached[0] is not sem or cached[1] is not self.lv:
            keys = sem.grad_keys(trace, self.lv)
            cached = (sem, self.lv, keys, _steps(trace, self.lv, *keys))
            trace.__dict__["_steps"] = cached
        (self._gkey, self._gsize, self._gneeds), self._layer_steps = cached[2], cached[3]
        link = gpu.link
        self.compute = _Stream("compute")
        if sem.one_side_stream or not link.duplex:
            side = _Stream("copy")
            self._copy = {"d2h": side, "h2d": side}
        else:
            shares = bool(link.duplex_total_bw_bytes_per_s)
            self._copy = {"d2h": _Stream("d2h", shares), "h2d": _Stream("h2d", shares)}
        self._streams = [self.compute] + list(dict.fromkeys(self._copy.values()))
        self.record_ops = record_ops
        if record_ops:
            self.pool.spans = []
        self.ops: list[Op] = []
        self.stall_ns = 0
        self.recomputed_ns = 0  # forward time run again (NOTE [recompute])
        self._segments: dict[int, tuple[int, frozenset[str]]] = {}
        self.offloaded_bytes = 0
        self.prefetched_bytes = 0
        self.host_bytes = 0
        self.peak_host_bytes = 0
        self._host_cap = gpu.host_memory_bytes  # NOTE [host memory]; None: no limit
        self.end_ns = 0
        self.fwd_end_ns = 0
        self.host_ns = 0  # the host's clock (NOTE [host])
        self.host_bound_ns = 0  # the compute stream idle, waiting for the host to issue
        self._credit = 0
        self._stamp_ops: list[object] = [_Zero]  # NOTE [memory time]: stamp k is the start
        self._stamp_edges: list[int] = [0]  # (edge 0) or end (1) of _stamp_ops[k]
        self._pending: deque[tuple[_Op, object]] = deque()  # NOTE [deferred free]
        self._retired: set = set()
        self._on_host: set[str] = set()
        self._in_flight: dict[str, _Op] = {}
        self._sent: dict[str, _Op] = {}  # buffer -> its offload
        self._recorded: set[str] = set()  # blocks a side-stream copy used (record_stream)
        self._next_waits: tuple[_Op, ...] = ()
        self._fwd_ops: tuple = ()
        self._fwd_host = 0
        self._queued: deque[tuple[_Op, float]] = deque()  # NOTE [launch queue]
        self._queued_k = 0.0
        self._host_costs()

    def _host_costs(self) -> None:
        """Per layer, what the host spends issuing each pass (NOTE [host costs])."""
        h = self.gpu.host
        runtime = self.plan.runtime and self.sem.host_ahead
        rf, rb = (h.runtime_layer_fwd_ns, h.runtime_layer_bwd_ns) if runtime else (0, 0)
        self._hf = [layer.host_fwd_ns + rf for layer in self.trace.layers]
        self._hb = [layer.host_bwd_ns + rb for layer in self.trace.layers]
        self._h_offload = h.runtime_offload_ns if runtime else 0
        self._h_fetch = h.runtime_fetch_ns if runtime else 0
        # NOTE [allocator costs]: only the caching allocator releases its cache, and only a
        # preset that measured the driver's calls charges for them
        self._seg_costs = hasattr(self.pool, "would_release") and bool(
            h.segment_malloc_ns or h.segment_free_ns or h.segment_malloc_ns_per_gib
            or h.segment_free_ns_per_gib)
        self._queue = h.launch_queue if self.sem.host_ahead else 0  # NOTE [launch queue]
        layers = self.trace.layers
        self._kf = [h.layer_kernels_fwd if x.kernels_fwd is None else x.kernels_fwd
                    for x in layers]
        self._kb = [h.layer_kernels_bwd if x.kernels_bwd is None else x.kernels_bwd
                    for x in layers]

    # -- streams (NOTE [streams]) -----------------------------------------------------------
    def _push(self, s: _Stream, op: _Op) -> _Op:
        op.issue = self.host_ns
        tail = s.tail
        if tail is not None and not s.shares_bw:
            base = op.issue if op.issue > tail else tail
            t = base
            for w in op.waits:
                if w.end is None:
                    t = -1
                    break
                if w.end > t:
                    t = w.end
            if t >= 0:
                dur = op.dur if not op.copy else self._copy_ns(op, False)
                op.start, op.end, op.stall = t, t + dur, t - base
                op.idle = op.issue - tail if op.issue > tail else 0
                if self._credit and s is self.compute:
                    self._settle(op)
                s.tail = op.end
                if not s.q and s.cur is None:  # nothing before it left to play: done
                    s.last = op
                    self._finish(s, op)
                    return op
            else:
                s.tail = None
        else:
            s.tail = None
        s.q.append(op)
        s.last = op
        if s.wake is not None:
            s.wake.succeed()
            s.wake = None
        return op

    def _copy_ns(self, op: _Op, shared: bool) -> int:
        link = self.gpu.link
        bw = link.d2h_bw_bytes_per_s if op.copy == "d2h" else link.h2d_bw_bytes_per_s
        if shared and link.duplex_total_bw_bytes_per_s:
            bw = min(bw, link.duplex_total_bw_bytes_per_s / 2)
        return transfer_ns(op.size, bw, link.latency_ns)

    def _serve(self, s: _Stream):
        env = self.env
        q = s.q
        while True:
            if not q:
                s.wake = env.event()
                yield s.wake
                continue
            op = q.popleft()
            if op.end is None:  # not scheduled when issued: run it now
                base = env.now if env.now > op.issue else op.issue
                for w in op.waits:
                    if w.end is None:
                        if w.done is None:
                            w.done = env.event()
                        yield w.done
                start = base
                for w in op.waits:
                    if w.end > start:  # type: ignore[operator]
                        start = w.end
                if op.copy and s.shares_bw:
                    if start > env.now:
                        yield env.timeout(start - env.now)
                    other = self._copy["h2d" if op.copy == "d2h" else "d2h"]
                    dur = self._copy_ns(op, other.cur is not None)
                else:
                    dur = op.dur if not op.copy else self._copy_ns(op, False)
                op.start, op.end, op.stall = start, start + dur, start - base
                op.idle = op.issue - s.prev_end if op.issue > s.prev_end else 0
                if self._credit and s is self.compute:
                    self._settle(op)
                if s.last is op:
                    s.tail = op.end
            s.cur = op
            if op.end > env.now:
                yield env.timeout(op.end - env.now)
            s.cur = None
            self._finish(s, op)

    def _finish(self, s: _Stream, op: _Op) -> None:
        start, end = op.start, op.end
        if self.checks:  # NOTE [invariants]: in order, never overlapping (inline: every op)
            clock = s.clock
            if start < clock.last_end or end < start:
                clock.op(start, end, op.layer, f"the copy of {op.name}" if op.copy else op.kind)
            clock.last_end = end
        s.prev_end = end
        record = self.record_ops
        if s is self.compute:
            self.host_bound_ns += op.idle
            if op.copy:  # an on-demand fetch: the stream copies, not computes; the host
                self.stall_ns += end - start  # copy is released once it is back
                self.host_bytes -= op.size
            if op.stall:
                self.stall_ns += op.stall
                if record:
                    self.ops.append(_record(Op, (s.name, "stall", op.layer, "wait for a copy",
                                                 start - op.stall, start, 0)))
            if end > self.end_ns:  # the iteration is the compute stream's
                self.end_ns = end
            if record and (end > start or op.copy):
                self.ops.append(_record(Op, (s.name, op.kind, op.layer, op.name, start, end,
                                             op.size)))
        else:
            if record:  # a copy shows as its direction
                self.ops.append(_record(Op, (op.copy, op.kind, op.layer, op.name, start, end,
                                             op.size)))
            if op.kind != "offload":  # a prefetch: the host copy is released once it is back
                self.host_bytes -= op.size
        if op.done is not None:
            op.done.succeed()

    # -- the host (NOTE [host]) -------------------------------------------------------------
    def _stamp(self, op: object, edge: int) -> int:
        ops, edges = self._stamp_ops, self._stamp_edges
        n = len(ops) - 1
        if ops[n] is op and edges[n] == edge:
            return n
        ops.append(op)
        edges.append(edge)
        return n + 1

    def _spend(self, ns: int, layer: str, what: str) -> None:
        if ns:
            if self.record_ops:
                self.ops.append(_record(Op, ("host", "issue", layer, what, self.host_ns,
                                             self.host_ns + ns, 0)))
            self.host_ns += ns

    def _see(self, op: _Op):
        """Advance simpy to the host's clock if that is needed to know whether ``op`` has
        ended by then."""
        if op.end is None and self.env.now < self.host_ns:
            yield self.env.timeout(self.host_ns - self.env.now)

    def _wait_ops(self, ops, layer: str, why: str = ""):
        """The host blocks until every op in ``ops`` has ended (cudaEventSynchronize);
        ``why`` names the wait on the host's track (none: Torch7's per-layer wait)."""
        t0 = self.host_ns
        for op in ops:
            if op.end is None:
                yield from self._see(op)
                if op.end is None:
                    if op.done is None:
                        op.done = self.env.event()
                    yield op.done
            if op.end > self.host_ns:  # type: ignore[operator]
                self.host_ns = op.end  # type: ignore[assignment]
        if self.host_ns > t0 and why and self.record_ops:
            self.ops.append(Op("host", "wait", layer, why, t0, self.host_ns))

    def _sync(self, ops, layer: str, why: str):
        """Torch7's end-of-layer synchronisation: the host waits for the copies; the time
        the compute stream then sits idle is a stall, not the host's (``_credit``)."""
        t0 = self.host_ns
        yield from self._wait_ops(ops, layer, why)
        if self.host_ns > t0:
            self._credit += self.host_ns - t0
            if self.record_ops:
                self.ops.append(Op("compute", "stall", layer, f"wait {why}", t0, self.host_ns))

    def _synced(self, ops, layer: str, why: str) -> None:
        """:meth:`_sync` where every op's end is known: nothing to wait for in simpy."""
        t0 = t = self.host_ns
        for op in ops:
            if op.end > t:
                t = op.end
        if t > t0:
            self.host_ns = t
            self._credit += t - t0
            if self.record_ops:
                self.ops.append(_record(Op, ("host", "wait", layer, why, t0, t, 0)))
                self.ops.append(_record(Op, ("compute", "stall", layer, f"wait {why}", t0, t,
                                             0)))

    def _throttle(self, op: _Op, k: float, layer: str):
        """NOTE [launch queue]: before the host launches ``op`` (``k`` commands), it waits
        until the queue has room for them."""
        q = self._queued
        while q:
            head, hk = q[0]
            if head.start is None or head.start > self.host_ns:
                if self._queued_k + k <= self._queue:
                    break
                t0 = self.host_ns
                if head.start is None:  # its start is not known yet: wait for its end
                    yield from self._wait_ops((head,), layer)
                else:
                    self.host_ns = head.start
                if self.host_ns > t0 and self.record_ops:
                    self.ops.append(_record(Op, ("host", "wait", layer, "launch queue full",
                                                 t0, self.host_ns, 0)))
            q.popleft()
            self._queued_k -= hk
        q.append((op, k))
        self._queued_k += k

    def _settle(self, op: _Op) -> None:
        """A compute op's idle time that a synchronisation caused is a stall."""
        c = min(op.idle, self._credit)
        op.idle -= c
        self.stall_ns += c  # its op is on the timeline already
        self._credit = 0

    def _process_events(self):
        """PyTorch's process_events at a malloc: release the deferred frees whose events
        the host sees complete, in order (NOTE [deferred free])."""
        pending, pool = self._pending, self.pool
        while pending:
            op, key = pending[0]
            if op.end is None:
                yield from self._see(op)
            if op.end is None or op.end > self.host_ns:
                return
            pending.popleft()
            if key in self._retired:
                self._retired.discard(key)
                pool.release(key, self._stamp(op, 1))

    def _alloc(self, key, size: int, category: str, stamp: int, layer: str, phase: str,
               stream: str | None = None):
        pool = self.pool
        kw = {"stream": stream} if stream else {}  # NOTE [stream pools]
        if self._pending:
            yield from self._process_events()
        costs = self._seg_costs and pool.would_release(size, **kw)
        if costs:  # NOTE [allocator costs]: cudaFree waits for the whole device
            yield from self._drain(layer)
        before = self._seg_count() if self._seg_costs else None
        if not pool.alloc(key, size, category, stamp, layer, phase,
                          can_sync=bool(self._pending), **kw):
            # release_cached_blocks: synchronise on every pending event, free, retry
            yield from self._wait_ops([op for op, _ in self._pending], layer,
                                      "allocator: synchronize_and_free_events")
            yield from self._process_events()
            pool.alloc(key, size, category, stamp, layer, phase, **kw)
        if before is not None:
            self._charge_segments(before, layer)

    def _take(self, key, size: int, category: str, stamp: int, layer: str, phase: str,
              stream: str | None = None) -> bool:
        """Allocate at once when no deferred free is pending (then no event can change the
        answer) and no release of the cache is due (NOTE [allocator costs]); ``False``: the
        caller runs :meth:`_alloc`, which may wait."""
        kw = {"stream": stream} if stream else {}  # NOTE [stream pools]
        if self._pending or self._seg_costs and self.pool.would_release(size, **kw):
            return False
        before = self._seg_count() if self._seg_costs else None
        self.pool.alloc(key, size, category, stamp, layer, phase, **kw)
        if before is not None:
            self._charge_segments(before, layer)
        return True

    def _drain(self, layer: str):
        """NOTE [allocator costs]: the host waits for every stream's work (cudaFree)."""
        yield from self._wait_ops([s.last for s in self._streams if s.last is not None],
                                  layer, "allocator: cudaFree synchronises the device")

    def _seg_count(self) -> tuple[int, int, int, int]:
        p = self.pool
        return p.released, p.remade, p.released_bytes, p.remade_bytes

    def _charge_segments(self, before: tuple[int, int, int, int], layer: str) -> None:
        """NOTE [allocator costs]: the host pays for the segments released and made again."""
        freed, made, fb, mb = (a - b for a, b in zip(self._seg_count(), before))
        if freed or made:
            h = self.gpu.host
            ns = freed * h.segment_free_ns + made * h.segment_malloc_ns + round(
                (fb * h.segment_free_ns_per_gib + mb * h.segment_malloc_ns_per_gib) / 2**30)
            self._spend(ns, layer, "allocator: cudaFree / cudaMalloc")

    def _retire(self, key, stamp: int, after: _Op | None) -> None:
        """Free ``key`` once ``after`` (a copy that used it) has ended (NOTE [deferred
        free]); at once if nothing is in flight."""
        if after is None or (after.end is not None and after.end <= self.host_ns
                             and not self._pending):
            self.pool.free(key, stamp)
            return
        self.pool.retire(key, stamp)
        self._retired.add(key)
        self._pending.append((after, key))

    def _offload(self, buf: str, layer: str, before: _Op | None) -> _Op:
        size = self.lv.size[buf]
        self.offloaded_bytes += size
        self.host_bytes += size
        if self.host_bytes > self.peak_host_bytes:
            self.peak_host_bytes = self.host_bytes
        self._on_host.add(buf)
        if self.sem.host_ahead:
            self._recorded.add(buf)
        op = _Op(self._copy["d2h"], "offload", layer, buf, size=size,
                 waits=(before,) if before is not None else (), copy="d2h")
        self._sent[buf] = op
        cap = self._host_cap
        if cap is not None and self.host_bytes > cap and self.pool.oom is None:
            # NOTE [host memory]: the first offload the host cannot hold, at its start
            free = max(0, cap - (self.host_bytes - size))
            self.pool.oom = OutOfMemory(buf, layer, "forward", self._stamp(op, 0), size, free,
                                        free, "host")
        return self._push(op.stream, op)

    def _prefetch(self, buf: str, layer: str, on_demand: bool = False):
        """Bring ``buf`` back; the copy's op is left in ``self._in_flight[buf]``. None when
        done; else the allocation must wait, and the host runs the generator returned."""
        pool, size = self.pool, self.lv.size[buf]
        self._on_host.discard(buf)
        sent = self._sent.pop(buf)
        if buf in self._retired and not self.sem.caching_allocator:
            # its offload has not been released: keep the GPU copy (Torch7, no sync)
            self._retired.discard(buf)
            self.host_bytes -= size
            return None
        if buf in pool:  # still allocated (its free is yet to come): nothing to move
            self.host_bytes -= size
            return None
        kind = "fetch" if on_demand else "prefetch"
        side = not (on_demand and self.sem.one_side_stream)  # PyTorch: on compute
        stream = self._copy["h2d"] if side else self.compute
        waits: tuple[_Op, ...] = (sent,)  # the host copy must have landed
        if side and self.sem.host_ahead and self.compute.last is not None:
            waits += (self.compute.last,)  # side.wait_stream(compute)
        op = _Op(stream, kind, layer, buf, size=size, waits=waits, copy="h2d")
        anchor = op if self.sem.host_ahead else _At(self.host_ns)
        # NOTE [stream pools]: a prefetch on the side stream, from its pool where the
        # runtime allocates it there
        # (the block runtime fetches on demand there too)
        pstream = self.plan.prefetch_stream if self.plan.prefetch_stream != "compute" \
            and hasattr(self.pool, "would_release") else None
        a = (buf, size, "activations", self._stamp(anchor, 0), layer, kind, pstream)
        if self._take(*a):
            self._fetched(buf, op, side)
            return None
        return self._fetch_later(a, op, side)

    def _fetch_later(self, a: tuple, op: _Op, side: bool):
        yield from self._alloc(*a)
        self._fetched(a[0], op, side)

    def _fetched(self, buf: str, op: _Op, side: bool) -> None:
        self.prefetched_bytes += op.size
        if side and self.sem.one_side_stream:
            self._recorded.add(buf)
        else:
            self._recorded.discard(buf)
        self._in_flight[buf] = self._push(op.stream, op)

    def _workspace(self, size: int, s0: int, op: _Op, layer: str, phase: str):
        """A layer's workspace, freed when ``op`` ends: None when only the books saw it
        (NOTE [transient]); else a generator for the host to run, which returns whether it
        was allocated for real (then the caller frees it after the op)."""
        if not self._pending and self.pool.transient(("workspace", layer), size, "workspace",
                                                     s0, self._stamp(op, 1)):
            return None
        return self._workspace_wait(size, s0, op, layer, phase)

    def _workspace_wait(self, size: int, s0: int, op: _Op, layer: str, phase: str):
        key = ("workspace", layer)
        if self._pending:  # a malloc's process_events first (NOTE [deferred free])
            yield from self._process_events()
            if self.pool.transient(key, size, "workspace", s0, self._stamp(op, 1)):
                return False
        yield from self._alloc(key, size, "workspace", s0, layer, phase)
        return True

    def _free_after(self, key, stamp: int) -> None:
        """Free a block at the host's time; a block a side-stream copy used waits for
        what that stream has been given so far (record_stream)."""
        if key in self._recorded and self.sem.host_ahead:
            self._recorded.discard(key)
            self._retire(key, stamp, self._copy["d2h"].last)
        else:
            self.pool.free(key, stamp)

    # -- the iteration -------------------------------------------------------------------------
    def run(self) -> "Simulation":
        env = self.env
        serving = [self._serve(s) for s in self._streams]
        for g in serving:
            env.process(g)
        host = self._network_wide() if self.plan.memory == "network_wide" else self._layer_wise()
        proc = env.process(host)
        env.run()
        for g in serving:  # each waits for work that will never come: closed, it lets go of
            g.close()  # the simulation (no reference cycle for the garbage collector)
        if proc.is_alive:
            raise InvariantViolation("the host waits for an op that never runs")
        if any(s.q for s in self._streams) or any(s.cur for s in self._streams):
            raise InvariantViolation("the GPU still had work queued when the host was done")
        if not self.stopped:
            self._check_end()
        self._to_gpu_time()
        self.fwd_end_ns = max([self._fwd_host] + [op.end for op in self._fwd_ops
                                                  if op is not None])  # type: ignore[misc]
        return self

    def _to_gpu_time(self) -> None:
        """NOTE [memory time]: stamps become GPU times."""
        T = [op.end if edge else op.start  # type: ignore[attr-defined]
             for op, edge in zip(self._stamp_ops, self._stamp_edges)]
        pool = self.pool
        prev, events = 0, []
        for s, level in zip(pool.times, pool.levels):
            events.append((T[s], level - prev))
            prev = level
        events.sort(key=lambda e: e[0])
        times, levels, live = [], [], 0
        for t, d in events:
            live += d
            if times and times[-1] == t:
                levels[-1] = live
            else:
                times.append(t)
                levels.append(live)
        if not times or times[0] != 0:
            times.insert(0, 0)
            levels.insert(0, 0)
        pool.times, pool.levels = times, levels
        if pool.oom is not None:
            pool.oom = replace(pool.oom, time_ns=T[pool.oom.time_ns])
        if pool.spans is not None:
            pool.spans = [(k, c, size, T[t0], T[t1]) for k, c, size, t0, t1 in pool.spans]
            for key, (t0, size, cat) in pool._open.items():  # what lives to the end
                pool.spans.append((key_name(key), cat, size, T[t0], self.end_ns))

    # -- NOTE [invariants] -------------------------------------------------------------------
    def _check_on_gpu(self, bufs: tuple[str, ...], layer: str, phase: str,
                      waits: tuple[_Op, ...] = ()) -> None:
        """``bufs``: the non-empty buffers the pass reads (an empty one is never
        allocated)."""
        if not self.checks:
            return
        pool = self.pool
        for b in bufs:
            fetch = self._in_flight.get(b)
            late = (fetch is not None and fetch not in waits
                    and (fetch.end is None or fetch.end > self.host_ns))
            if b not in pool or b in self._on_host or late:
                where = ("on the host" if b in self._on_host else "still being fetched"
                         if b in pool else "not allocated")
                raise InvariantViolation(f"{phase} pass reads a buffer that is {where}",
                                         layer, b)

    _LIVE_ALL_RUN = frozenset({"weights", "weight_grads", "wgrad", "resident"})

    def _check_end(self) -> None:
        if not self.checks:
            return
        if self.host_bytes != 0:
            raise InvariantViolation(f"{self.host_bytes} bytes of host copies never released")
        if self.prefetched_bytes > self.offloaded_bytes:
            raise InvariantViolation(f"{self.prefetched_bytes} bytes prefetched but only "
                                     f"{self.offloaded_bytes} offloaded")
        if self.plan.sync and self.prefetched_bytes != self.offloaded_bytes:
            raise InvariantViolation(f"{self.offloaded_bytes} bytes offloaded but "
                                     f"{self.prefetched_bytes} came back")
        if self.plan.memory != "layer_wise":
            return
        leaves = {b for b in self.lv.size if b not in self.lv.producer}
        for key in self.pool._blocks:
            if isinstance(key, tuple) and key[0] in self._LIVE_ALL_RUN \
                    or key in leaves:  # the training loop's batch (an unread input stays)
                continue
            if isinstance(key, tuple) and key[0] == "grad" and key[1] in leaves:
                continue  # a network input's gradient is its result, kept like dW
            raise InvariantViolation("still allocated after the iteration", "",
                                     key_name(key))

    def _persistent(self, grads: bool = True) -> None:
        pool = self.pool
        if self.trace.resident_bytes:
            pool.alloc(("resident", ""), self.trace.resident_bytes, "resident", 0, "", "start")
        if self.sem.per_layer_weights:
            for layer in self.trace.layers:
                pool.alloc(("weights", layer.id), layer.weight_bytes, "weights", 0, "", "start")
                if grads:
                    pool.alloc(("wgrad", layer.id), layer.weight_bytes, "weight_grads", 0, "",
                               "start")
            return
        w = self.trace.weight_bytes
        pool.alloc(("weights", ""), w, "weights", 0, "", "start")
        pool.alloc(("weight_grads", ""), w, "weight_grads", 0, "", "start")

    def _step(self):
        """The optimizer step, issued in STEP_PIECES equal parts, host then GPU in turn
        (NOTE [host]): its foreach kernels are launched one after another, so the GPU runs
        the first while the host still issues the rest."""
        trace = self.trace
        n = STEP_PIECES if trace.host_step_ns and trace.step_ns else 1
        host = [trace.host_step_ns * (k + 1) // n - trace.host_step_ns * k // n
                for k in range(n)]
        gpu = [trace.step_ns * (k + 1) // n - trace.step_ns * k // n for k in range(n)]
        self._spend(host[0], "", "optimizer step")
        waits = self._next_waits
        if self.sem.one_side_stream and self._copy["d2h"].last is not None:
            waits += (self._copy["d2h"].last,)  # end_iteration: wait for the side stream
        self._next_waits = ()
        if trace.step_ns or waits or trace.step_workspace_bytes:
            op = _Op(self.compute, "step", "", "optimizer step", gpu[0], waits=waits)
            held = False
            if trace.step_workspace_bytes:  # NOTE [optimizer state]
                w = self._workspace(trace.step_workspace_bytes, self._stamp(op, 0), op, "",
                                    "step")
                if w is not None:
                    held = yield from w
            self._push(self.compute, op)
            for k in range(1, n):
                self._spend(host[k], "", "optimizer step")
                op = _Op(self.compute, "step", "", "optimizer step", gpu[k])
                self._push(self.compute, op)
            if held:
                self.pool.free(("workspace", ""), self._stamp(op, 1))
        else:
            self._spend(sum(host[1:]), "", "optimizer step")

    def _network_wide(self):
        trace, plan, lv, pool = self.trace, self.plan, self.lv, self.pool
        self._persistent()
        for b, size in lv.size.items():
            pool.alloc(b, size, "activations", 0, "", "start")
        grads = [lv.size[b] for b in lv.size if lv.needs_grad[b]]
        big = max(grads, default=0)
        pool.alloc(("grad_buffer_0", ""), big, "gradients", 0, "", "start")
        pool.alloc(("grad_buffer_1", ""), big, "gradients", 0, "", "start")
        ws = max((layer.algos[a].workspace_bytes for layer, a in zip(trace.layers, plan.algos)),
                 default=0)
        pool.alloc(("workspace", ""), ws, "workspace", 0, "", "start")
        cs = self.compute
        for i, (layer, a) in enumerate(zip(trace.layers, plan.algos)):
            self._spend(self._hf[i], layer.id, f"{layer.id}:fwd")
            self._push(cs, _Op(cs, "fwd", layer.id, f"{layer.id}:fwd", layer.algos[a].fwd_ns))
        self._fwd_ops = (cs.last,)
        for i in range(len(trace.layers) - 1, -1, -1):
            layer = trace.layers[i]
            self._spend(self._hb[i], layer.id, f"{layer.id}:bwd")
            self._push(cs, _Op(cs, "bwd", layer.id, f"{layer.id}:bwd",
                               layer.algos[plan.algos[i]].bwd_ns))
        yield from self._step()

    def _layer_wise(self):
        trace, plan, lv, pool, sem = self.trace, self.plan, self.lv, self.pool, self.sem
        layers, cs = trace.layers, self.compute
        ahead = sem.host_ahead
        self._persistent(grads=not sem.per_layer_weights)
        for b, size in lv.size.items():
            if b not in lv.producer:  # network inputs are on the GPU before the iteration
                pool.alloc(b, size, "activations", 0, "", "start")
        held = {b for b in lv.size if b not in lv.producer} if sem.holds_inputs else set()
        fwd_free, bwd_free = free_points(lv, held)
        self._segments = {}
        if plan.recompute:
            self._segments = recompute_sets(trace, lv, plan.recompute, held, fwd_free,
                                            bwd_free)
        yield from self._iteration(fwd_free, bwd_free)

    def _recompute(self, first: int, last: int, dropped: frozenset[str]):
        """NOTE [recompute]: before the backward pass of a checkpointed segment's last
        layer, its forward runs again: the buffers it dropped come back under their own
        keys (its backward frees them as usual); the others it makes are transient,
        freed after their last reader in the segment."""
        trace, plan, lv, pool = self.trace, self.plan, self.lv, self.pool
        cs, steps = self.compute, self._layer_steps
        transient: dict[str, int] = {}  # key -> last reader in the segment
        for j in range(first, last + 1):
            layer, st = trace.layers[j], steps[j]
            algo = layer.algos[plan.algos[j]]
            if self._hf[j]:
                self._spend(self._hf[j], layer.id, f"{layer.id}:recompute")
            op = _Op(cs, "recompute", layer.id, f"{layer.id}:recompute", algo.fwd_ns,
                     waits=self._next_waits)
            self._next_waits = ()
            s0 = self._stamp(op, 0)
            for t, size in st.out_alloc:
                key = t if t in dropped else ("recompute", t)
                if key not in pool:
                    a = (key, size, "activations", s0, layer.id, "recompute")
                    if not self._take(*a):
                        yield from self._alloc(*a)
                    if key != t:  # freed after its last reader in the segment
                        transient[t] = max([k for k in range(j + 1, last + 1) if t in
                                            {lv.root[x] for x in trace.layers[k].inputs}],
                                           default=j)
            held = False
            if algo.fwd_workspace_bytes:
                w = self._workspace(algo.fwd_workspace_bytes, s0, op, layer.id, "recompute")
                if w is not None:
                    held = yield from w
            self._push(cs, op)
            s1 = self._stamp(op, 1)
            if held:
                pool.free(("workspace", layer.id), s1)
            for t, at in list(transient.items()):
                if at <= j:
                    pool.free(("recompute", t), s1)
                    del transient[t]
            self.recomputed_ns += algo.fwd_ns
        for t in transient:  # read by nothing left in the segment
            pool.free(("recompute", t), self._stamp(cs.last, 1))

    def _iteration(self, fwd_free, bwd_free):
        trace, plan, lv, pool, sem = self.trace, self.plan, self.lv, self.pool, self.sem
        layers, cs = trace.layers, self.compute
        ahead = sem.host_ahead
        hf, hb, steps = self._hf, self._hb, self._layer_steps

        # forward
        for i, layer in enumerate(layers):
            if self.stop_at_oom and pool.oom is not None:
                self.stopped = True
                return
            algo = layer.algos[plan.algos[i]]
            offload = plan.offload[i]
            st = steps[i]
            h = hf[i] + self._h_offload * len(offload)
            if h:
                self._spend(h, layer.id, st.fwd)
            op = _Op(cs, "fwd", layer.id, st.fwd, algo.fwd_ns, waits=self._next_waits)
            self._next_waits = ()
            s0 = self._stamp(op, 0)
            for t, size in st.out_alloc:
                a = (t, size, "activations", s0, layer.id, "forward")
                if not self._take(*a):
                    yield from self._alloc(*a)
            held = False  # its workspace allocated for real (NOTE [transient])
            if algo.fwd_workspace_bytes:
                w = self._workspace(algo.fwd_workspace_bytes, s0, op, layer.id, "forward")
                if w is not None:
                    held = yield from w
            self._check_on_gpu(st.reads, layer.id, "forward")
            before = cs.last
            if self._queue:
                yield from self._throttle(op, self._kf[i], layer.id)
            self._push(cs, op)
            copies = [self._offload(b, layer.id, before) for b in offload] if offload else ()
            s1 = self._stamp(op, 1)
            if held:
                pool.free(("workspace", layer.id), s1)
            for b in fwd_free.get(i, ()):
                pool.free(b, s1)
            if not ahead:  # Torch7: the host waits for the layer (its end is known at once
                if op.end is None:  # unless it waits for a copy whose start is not)
                    yield from self._wait_ops((op,), layer.id)
                elif op.end > self.host_ns:
                    self.host_ns = op.end
            if copies and plan.sync:
                if ahead:  # the compute stream waits for the copies (cudaStreamWaitEvent)
                    self._next_waits = tuple(copies)
                    for b in offload:
                        self._free_after(b, s1)
                else:  # the host waits for them, then frees (the paper's sync)
                    if all(c.end is not None for c in copies):
                        self._synced(copies, layer.id, "offload")
                    else:
                        yield from self._sync(copies, layer.id, "offload")
                    at = self._stamp(_At(self.host_ns), 1)
                    for b in offload:
                        pool.free(b, at)
            elif copies:  # no sync: each buffer is released when its copy has landed
                for b, c in zip(offload, copies):
                    if ahead:
                        self._free_after(b, s1)
                    else:
                        self._retire(b, self._stamp(_Later(op, c), 1), c)
        # the forward pass ends with its last op and whatever the next one must wait for
        self._fwd_ops = (cs.last, *self._next_waits)
        self._fwd_host = self.host_ns if not ahead else 0
        sf = self._stamp(cs.last if ahead else _At(self.host_ns), 1)
        for b in lv.outputs:
            if not lv.kept(b):
                pool.free(b, sf)
            g = self._gkey[b]
            if self._gneeds[g] and ("grad", g) not in pool:
                yield from self._alloc(("grad", g), self._gsize[g], "gradients", sf, "",
                                       "backward")

        # backward
        for i in range(len(layers) - 1, -1, -1):
            if self.stop_at_oom and pool.oom is not None:
                self.stopped = True
                return
            if i in self._segments:  # NOTE [recompute]
                first, dropped = self._segments[i]
                yield from self._recompute(first, i, dropped)
            layer = layers[i]
            algo = layer.algos[plan.algos[i]]
            st = steps[i]
            op = _Op(cs, "bwd", layer.id, st.bwd, algo.bwd_ns)
            need = []
            for t in layer.saved:
                b = lv.root[t]
                if b in self._on_host:  # no earlier prefetch brought it: fetch on demand,
                    w = self._prefetch(b, layer.id, on_demand=True)  # ahead of the
                    if w is not None:
                        yield from w
                    if b in self._in_flight:  # prefetch below
                        need.append(self._in_flight[b])
                elif b in self._in_flight:
                    need.append(self._in_flight[b])
            j = plan.prefetch[i]
            fetches = []
            if j >= 0:
                for b in plan.offload[j]:
                    if b in self._on_host:
                        w = self._prefetch(b, layer.id)
                        if w is not None:
                            yield from w
                        if b in self._in_flight:
                            fetches.append(self._in_flight[b])
            h = hb[i] + self._h_fetch * (len(need) + len(fetches))
            if h:
                self._spend(h, layer.id, st.bwd)
            pending = [f for f in need if f.end is None or f.end > self.host_ns]
            if ahead:
                op.waits = self._next_waits + tuple(pending)
            elif pending:
                yield from self._sync(pending, layer.id, "fetch of own input")
            self._next_waits = ()
            s0 = self._stamp(op, 0)
            for g, size in st.grads_in:
                if g not in pool:
                    a = (g, size, "gradients", s0, layer.id, "backward")
                    if not self._take(*a):
                        yield from self._alloc(*a)
            if sem.per_layer_weights and ("wgrad", layer.id) not in pool:
                yield from self._alloc(("wgrad", layer.id), layer.weight_bytes, "weight_grads",
                                       s0, layer.id, "backward")
            held = False  # its workspace allocated for real (NOTE [transient])
            if algo.bwd_workspace_bytes:
                w = self._workspace(algo.bwd_workspace_bytes, s0, op, layer.id, "backward")
                if w is not None:
                    held = yield from w
            self._check_on_gpu(st.saved, layer.id, "backward", op.waits)
            if self._queue:
                yield from self._throttle(op, self._kb[i], layer.id)
            self._push(cs, op)
            s1 = self._stamp(op, 1)
            if held:
                pool.free(("workspace", layer.id), s1)
            for g in st.grads_out:
                pool.free(g, s1)
            for b in bwd_free.get(i, ()):
                self._free_after(b, s1)
                self._in_flight.pop(b, None)
            if not ahead:  # Torch7: the host waits for the layer (its end is known at once
                if op.end is None:  # unless it waits for a copy whose start is not)
                    yield from self._wait_ops((op,), layer.id)
                elif op.end > self.host_ns:
                    self.host_ns = op.end
            if fetches and plan.sync:
                if ahead:
                    self._next_waits = tuple(fetches)
                elif all(f.end is not None for f in fetches):
                    self._synced(fetches, layer.id, "prefetch")
                else:
                    yield from self._sync(fetches, layer.id, "prefetch")
        yield from self._step()
        # the iteration ends with a synchronisation: every deferred free completes
        yield from self._wait_ops([op for op, _ in self._pending] + [cs.last], "", "")
        for op, key in self._pending:
            if key in self._retired:
                self._retired.discard(key)
                self.pool.release(key, self._stamp(op, 1))
        self._pending.clear()
