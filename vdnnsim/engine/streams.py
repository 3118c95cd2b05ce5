"""The GPU's streams: the ops in flight and the processes that play them.

NOTE [streams]
Each stream is a process that runs the ops it is given in order: an op starts once it is
issued, its predecessor on the stream has ended, and every op it waits for
(cudaStreamWaitEvent) has ended; the time a compute op waits for a copy is a stall. An op
whose start is known when it is issued is scheduled then, and recorded at once (no simpy
event) if nothing issued before it is still to be played; otherwise the stream process
plays it, one event per op. Copies run on copy engines: a D2H and an H2D engine when the
link is duplex, one shared engine otherwise; under PyTorch semantics every copy runs on the
runtime's one side stream. ``Op`` records are what RunResult's timeline shows: 'compute',
the copy streams, and 'host' (what the host spent issuing each layer, and where it
waited).
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import simpy

from ..units import transfer_ns
from .invariants import StreamClock

class Op(NamedTuple):
    """One slice of the timeline. A simulation records each as a plain tuple of these
    fields (a run records thousands), which RunResult.ops makes Ops
    when they are asked for."""

    stream: str  # compute | d2h | h2d | copy | host
    kind: str  # fwd | bwd | step | offload | prefetch | fetch | stall | issue | wait
    layer: str
    name: str
    start_ns: int
    end_ns: int
    size_bytes: int = 0


LAYER_PASSES = frozenset({"fwd", "bwd"})  # a layer's passes on the compute stream
# the copies that bring an offloaded buffer back (a gradient's copy to the optimizer on the
# CPU and the parameters' back are the optimizer's own buffers)
_RETURNS = frozenset({"prefetch", "fetch"})


class _Op:
    """A GPU op in flight, made by :func:`new_op`. ``end`` is None until its start is
    known."""

    __slots__ = ("stream", "kind", "layer", "name", "dur", "size", "issue", "waits", "start",
                 "end", "stall", "idle", "done", "copy")


def new_op(stream: "_Stream", kind: str, layer: str, name: str, dur: int = 0, size: int = 0,
           waits: tuple[_Op, ...] = (), copy: str = "") -> _Op:
    """A new :class:`_Op` (a function that fills an empty slotted
    object costs a third less than calling a class's ``__init__``, which CPython 3.11
    cannot inline; an iteration makes thousands)."""
    op = _Op()
    op.stream, op.kind, op.layer, op.name = stream, kind, layer, name
    op.dur, op.size, op.waits, op.copy = dur, size, waits, copy
    op.start = op.end = op.done = None
    # set when it is put on its stream (Streams._push, paged.py), before anyone reads
    # them: issue, the host's time then; stall, what it waited for a copy; idle, what its
    # stream sat idle for the host to issue it
    return op


class _At:
    """A stamp's anchor at a known time."""

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


class Streams:
    """The compute stream and the copy engines of a :class:`~.sim.Simulation` (a part of
    it: the attributes it reads are the simulation's)."""

    __slots__ = ()  # the attributes are the simulation's (Simulation.__slots__)

    def _push(self, s: _Stream, op: _Op) -> _Op:
        issue = op.issue = self.host_ns
        tail = s.tail
        if tail is not None and not s.shares_bw:
            base = issue if issue > tail else tail
            t = base
            for w in op.waits:
                e = w.end
                if e is None:
                    t = -1
                    break
                if e > t:
                    t = e
            if t >= 0:
                end = t + op.dur
                op.start, op.end, op.stall = t, end, t - base
                op.idle = issue - tail if issue > tail else 0
                if self._credit and s is self.compute:
                    self._settle(op)
                s.tail = end
                if not s.q and s.cur is None:  # nothing before it left to play: done
                    s.last = op
                    if s is self.compute and not (op.copy or op.stall or self.checks and (
                            t < s.prev_end or end < t)):
                        # _finish, inline, for the commonest op: a
                        # kernel that waited for no copy (and nothing waits for it yet)
                        s.prev_end = end
                        self.host_bound_ns += op.idle
                        if end > self.end_ns:
                            self.end_ns = end
                        if end > t:
                            if op.kind in LAYER_PASSES:
                                self.layer_spans.append((t, end))
                            if self.record_ops:
                                self.ops.append((s.name, op.kind, op.layer, op.name, t, end,
                                                 op.size))
                    else:
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
                    dur = op.dur  # a copy's: alone on the link (_copy_op)
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
        if self.checks and (start < s.prev_end or end < start):  # in order, never
            s.clock.last_end = s.prev_end  # overlapping (inline: every op)
            s.clock.op(start, end, op.layer, f"the copy of {op.name}" if op.copy else op.kind)
        s.prev_end = end
        record = self.record_ops
        if s is self.compute:
            self.host_bound_ns += op.idle
            if op.copy:  # an on-demand fetch: the stream copies, not computes; the host
                self.stall_ns += end - start  # copy is released once it is back
                self.host_bytes -= op.size
                self.pinned.give(op.size)
            if op.stall:
                self.stall_ns += op.stall
                if record:
                    self.ops.append((s.name, "stall", op.layer, "wait for a copy",
                                     start - op.stall, start, 0))
            if end > self.end_ns:  # the iteration is the compute stream's
                self.end_ns = end
            if end > start and not op.copy and op.kind in LAYER_PASSES:
                self.layer_spans.append((start, end))
            if record and (end > start or op.copy):
                self.ops.append((s.name, op.kind, op.layer, op.name, start, end, op.size))
        else:
            if record:  # a copy shows as its direction
                self.ops.append((op.copy, op.kind, op.layer, op.name, start, end, op.size))
            if op.kind in _RETURNS:  # the host copy is released once it is back
                self.host_bytes -= op.size
                self.pinned.give(op.size)
        if op.done is not None:
            op.done.succeed()
