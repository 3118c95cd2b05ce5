"""Time per module, forward and backward, read from a torch.profiler (Kineto) Chrome trace.

NOTE [kineto attribution]
Every GPU activity of a step lands in exactly one bucket, decided by the context of the
host event that launched it: an optimizer or zero_grad annotation, else the outermost
backward op (its module's backward), else the innermost ``vdnnsim.module::<path>`` range
(that module's forward), else "loss/outside modules"; an activity whose launch is not
found is "unattributed". A top-level backward op belongs to the module of the forward op
with its ``Sequence number`` that started last before it (``AccumulateGrad``, which has
none, to the backward op just before it on its thread in its step). An activity's queued
gap, the stream idle while it was already issued, is its own time. So a step's buckets
sum to its ``device_total_ns``.

Marks. ``module_ranges(model)`` (tracefile.py) opens a ``record_function`` range
``vdnnsim.module::<path>`` around every module call (the root's path is "", a shared module
carries its first path of ``named_modules()``); ``step_range(k)`` names a training step
``vdnnsim.step#<k>``. Functional code and a submodule used without ``__call__`` count for
the module whose call they run in.
Nesting. On each thread (pid, tid) the host events (cpu_op, user_annotation, cuda_runtime,
cuda_driver) are sorted by start, longer first, and walked with a stack; each inherits its
parent's context. A step is a span of host time (the step range's; with none, the whole
trace): an event belongs to the step its start falls in, whatever its thread.
Backward. Several forward ops share a sequence number s: the last one's node runs (s never
resets, so it is unique across steps). Forward ops with sequence numbers on several threads
make the match ambiguous (a warning); any other backward op without one is "unattributed".
Device time. An activity (``kernel``, ``gpu_memcpy``, ``gpu_memset``) links to its launch by
``args.correlation`` or by the ``ac2g`` flow of that id; its step is its launch's. An
activity with no launch is "unattributed", in the step that started last before it. On a
trace with no GPU activity every cpu_op's self time stands for an activity
(``Attribution.time_source``).
Gaps. Per stream, activities by start, an activity's queued gap is ``ts - max(end of the
stream's activities before it, end of its launch)`` where positive (for one launched to an
idle stream: the launch latency). None is counted for an activity with no launch, for a
gap over ``GAP_BOUND_NS`` (the stream waited for something else), or where another
stream's activity on the device overlaps it; gaps are summed apart in ``gap_ns``.
``device_busy_ns`` is the union of the activities' intervals, without gaps; what lies
outside every step range is ``Attribution.outside_steps``.
Host time. Forward: a module range's duration minus its child module ranges'; backward: the
durations of the module's top-level backward ops; optimizer and zero_grad: their
annotations'. Small ops' host times are mostly profiler overhead: upper bounds.
Memory. Per step and Device Id, the peak "Total Allocated" and "Total Reserved" of the
device's ``[memory]`` events (Device Type 1 on a GPU trace, 0 on a CPU trace).
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from .tracefile import (BACKWARD_PREFIX, GPU_CATS, HOST_CATS, LAUNCH_CATS, MODULE_PREFIX,
                        OPTIMIZER_PREFIX, STEP_PREFIX, ZERO_GRAD_PREFIX, load_trace,
                        module_ranges, shown, step_range)

_RANK = {"user_annotation": 0, "cpu_op": 1}  # equal start and length: annotation outermost
TIME_GPU = "gpu"  # Attribution.time_source: GPU activities
TIME_CPU = "cpu_self"  # no GPU activity: each cpu_op's self time
OUTSIDE = "loss/outside modules"
GAP_BOUND_NS = 50_000  # a longer idle wait is not dispatch
_OUT: Any = object()  # a backward op's target: outside modules (a path could be any string)


@dataclass
class Cost:
    """Time given to one module's forward or backward pass, or to one bucket, in a step."""
    device_ns: int = 0  # summed GPU activity time (or cpu_op self time: Attribution.time_source)
    host_ns: int = 0  # summed host durations (the module docstring says of what)
    calls: int = 0  # the host ranges / top-level ops that host_ns sums
    activities: int = 0  # the GPU activities (or cpu_ops) that device_ns sums
    gap_ns: int = 0  # of device_ns, the activities' queued gaps


@dataclass
class ModuleTime:
    """A module path's (or "loss/outside modules"') forward and backward cost in a step."""
    forward: Cost = field(default_factory=Cost)
    backward: Cost = field(default_factory=Cost)
    backward_nodes: dict[str, int] = field(default_factory=dict)  # node name -> times run


@dataclass
class MemoryPeak:
    """The ``[memory]`` events of one device in a step: peaks of the allocator's totals."""
    allocated_bytes: int
    reserved_bytes: int
    events: int


@dataclass
class StepAttribution:
    """One profiled step (a ``vdnnsim.step#k`` range, or the whole trace)."""
    index: int | None  # k of vdnnsim.step#k; None for the whole trace (no step range)
    name: str
    start_ns: int  # the step range's host span, ns on the trace's clock
    end_ns: int
    wall_ns: int  # start to the later of the range's end and its last activity's end
    modules: dict[str, ModuleTime]  # module path ("" the root) -> cost, first call first
    outside: ModuleTime  # "loss/outside modules"
    optimizer: Cost
    zero_grad: Cost
    unattributed: Cost  # device time no rule could place (host: unplaced backward ops)
    activities: int
    device_total_ns: int  # sum of the activities' times, gaps included: sum(buckets.values())
    device_busy_ns: int  # union of the activities' intervals (gaps not in it)
    gap_ns: int  # of device_total_ns, the activities' queued gaps
    memory: dict[int, MemoryPeak]  # Device Id -> peaks

    @property
    def buckets(self) -> dict[str, int]:
        """Device ns per bucket; they sum to ``device_total_ns``."""
        return {"modules (forward)": sum(m.forward.device_ns for m in self.modules.values()),
                "modules (backward)": sum(m.backward.device_ns
                                          for m in self.modules.values()),
                OUTSIDE: self.outside.forward.device_ns + self.outside.backward.device_ns,
                "optimizer": self.optimizer.device_ns, "zero_grad": self.zero_grad.device_ns,
                "unattributed": self.unattributed.device_ns}


@dataclass
class Attribution:
    """``attribute``'s answer: per step, time per module and bucket."""
    time_source: str  # TIME_GPU ("gpu"): GPU activities; TIME_CPU ("cpu_self"): cpu_op self times
    steps: list[StepAttribution]
    outside_steps: Cost  # activities outside every step range (device_ns, gap_ns, activities)
    warnings: list[str]  # what makes a number doubtful, one line each


# ---------------------------------------------------------------- attribution

def _ns(x: Any) -> int:
    v = float(x)
    if not math.isfinite(v):
        raise ValueError(x)
    return int(round(v * 1000.0))


class _Events:
    """The trace's events as parallel lists (fast enough for 10**5..10**6 events)."""

    def __init__(self, events: list[Any], what: str):
        self.name: list[str] = []
        self.cat: list[str] = []
        self.ts: list[int] = []
        self.dur: list[int] = []
        self.args: list[dict[str, Any]] = []
        self.thread: list[Any] = []
        self.host: list[int] = []  # indices of host events
        self.gpu: list[int] = []
        self.memory: list[tuple[int, dict[str, Any]]] = []
        self.flow_s: dict[tuple[Any, Any, int], Any] = {}  # (pid, tid, ts) -> ac2g id
        self.flow_f: dict[tuple[Any, Any, int], Any] = {}
        for k, e in enumerate(events):
            if not isinstance(e, dict):
                continue
            ph, cat = e.get("ph"), e.get("cat")
            try:
                if ph == "X" and (cat in HOST_CATS or cat in GPU_CATS):
                    ts, dur = _ns(e["ts"]), _ns(e.get("dur", 0))
                    if dur < 0:
                        raise ValueError(dur)
                    i = len(self.ts)
                    self.name.append(str(e.get("name", "")))
                    self.cat.append(cat)
                    self.ts.append(ts)
                    self.dur.append(dur)
                    args = e.get("args")
                    self.args.append(args if isinstance(args, dict) else {})
                    self.thread.append((e.get("pid"), e.get("tid")))
                    (self.gpu if cat in GPU_CATS else self.host).append(i)
                elif ph == "i" and e.get("name") == "[memory]":
                    args = e.get("args")
                    if isinstance(args, dict):
                        self.memory.append((_ns(e["ts"]), args))
                elif cat == "ac2g" and ph in ("s", "f"):
                    where = (e.get("pid"), e.get("tid"), _ns(e["ts"]))
                    (self.flow_s if ph == "s" else self.flow_f)[where] = e.get("id")
            except (KeyError, TypeError, ValueError, OverflowError):
                raise ConfigError(f"{what}: trace event {k} ({str(e.get('name'))[:60]!r}): its "
                                  "ts/dur are not finite non-negative numbers") from None

    def end(self, i: int) -> int:
        return self.ts[i] + self.dur[i]


def _seq(args: dict[str, Any]) -> int | None:
    s = args.get("Sequence number")
    return s if isinstance(s, int) and not isinstance(s, bool) and s >= 0 else None


def _queued_gaps(ev: _Events, links: list[tuple[int, int]]) -> dict[int, int]:
    """Activity -> its queued gap in ns, for the
    (activity, launch or -1) pairs ``links``; an activity without a gap is absent."""
    streams: dict[Any, list[tuple[int, int, int]]] = {}
    devices: dict[Any, list[int]] = {}
    for i, j in links:
        streams.setdefault(ev.thread[i], []).append((ev.ts[i], i, j))
        devices.setdefault(ev.thread[i][0], []).append(i)
    reach: dict[Any, tuple[list[int], list[int]]] = {}  # device -> starts, running max end
    for dev, lst in devices.items():
        lst.sort(key=lambda i: ev.ts[i])
        reach[dev] = ([ev.ts[i] for i in lst],
                      list(itertools.accumulate((ev.end(i) for i in lst), max)))
    gaps: dict[int, int] = {}
    for (dev, _), lst in streams.items():
        starts, ends = reach[dev]
        lst.sort()
        hi: int | None = None  # the end of the stream's activities so far
        for t, i, j in lst:
            if j >= 0:
                idle = ev.end(j) if hi is None else max(hi, ev.end(j))
                g = t - idle
                # what started on the device before t: ended by idle unless another
                # stream's activity overlaps the gap (this stream's ended by hi <= idle)
                k = bisect.bisect_left(starts, t)
                if 0 < g <= GAP_BOUND_NS and (k == 0 or ends[k - 1] <= idle):
                    gaps[i] = g
            hi = ev.end(i) if hi is None else max(hi, ev.end(i))
    return gaps


class _Attributor:
    """``attribute``'s state: the trace's events, each host event's context, the steps and
    the warnings so far. Its steps run in the order ``attribute`` calls them."""

    def __init__(self, ev: _Events, what: str):
        self.ev, self.what = ev, what
        self.warnings: list[str] = []
        n = len(ev.ts)
        self.parent = [-1] * n
        self.ctx_mod = [-1] * n  # innermost enclosing module range (the event itself included)
        self.ctx_bwd = [-1] * n  # outermost enclosing backward op
        self.ctx_spec = [-1] * n  # innermost optimizer / zero_grad annotation
        self.children = [0] * n  # summed durations of direct children (cpu_op, user_annotation)
        self.mod_children = [0] * n  # of a module range: its direct child module ranges' durations
        self.target: dict[int, Any] = {}  # top-level backward op -> module path, _OUT or None
        self.outside_steps = Cost()

    def nest(self) -> None:
        """Each host event's parent and context, walked per thread with a stack."""
        ev = self.ev
        parent, ctx_mod, ctx_bwd, ctx_spec = self.parent, self.ctx_mod, self.ctx_bwd, self.ctx_spec
        children, mod_children = self.children, self.mod_children
        by_thread: dict[Any, list[int]] = {}
        for i in ev.host:
            by_thread.setdefault(ev.thread[i], []).append(i)
        name, cat, ts, dur = ev.name, ev.cat, ev.ts, ev.dur
        for order in by_thread.values():
            order.sort(key=lambda i: (ts[i], -dur[i], _RANK.get(cat[i], 2)))
            stack: list[int] = []
            ends: list[int] = []
            for i in order:
                t = ts[i]
                while ends and ends[-1] <= t:
                    stack.pop()
                    ends.pop()
                m = b = s = -1
                if stack:
                    p = stack[-1]
                    parent[i] = p
                    m, b, s = ctx_mod[p], ctx_bwd[p], ctx_spec[p]
                    if cat[i] in _RANK:
                        children[p] += dur[i]
                nm = name[i]
                if cat[i] == "user_annotation" and nm.startswith(MODULE_PREFIX):
                    if m >= 0:
                        mod_children[m] += dur[i]
                    m = i
                elif nm.startswith(BACKWARD_PREFIX) and cat[i] == "cpu_op":
                    if b < 0:
                        b = i
                elif nm.startswith(OPTIMIZER_PREFIX) or nm.startswith(ZERO_GRAD_PREFIX):
                    s = i
                ctx_mod[i], ctx_bwd[i], ctx_spec[i] = m, b, s
                stack.append(i)
                ends.append(t + dur[i])

    def find_steps(self) -> None:
        """The steps: spans of host time (the step ranges', else the whole trace's)."""
        ev, what = self.ev, self.what
        name, cat, ts = ev.name, ev.cat, ev.ts
        step_ev = sorted((i for i in ev.host if cat[i] == "user_annotation"
                          and name[i].startswith(STEP_PREFIX)), key=lambda i: ts[i])
        for a, c in zip(step_ev, step_ev[1:]):
            if ts[c] < ev.end(a):
                raise ConfigError(f"{what}: step ranges {name[a]!r} and {name[c]!r} overlap; "
                                  "expected one vdnnsim.step range at a time")
        if step_ev:
            spans = [(ts[i], ev.end(i), name[i]) for i in step_ev]
        else:
            every = ev.host + ev.gpu
            spans = [(min((ts[i] for i in every), default=0),
                      max((ev.end(i) for i in every), default=0), "whole trace")]
        self.step_ev, self.spans = step_ev, spans
        self.starts = [s[0] for s in spans]

        def index_of(nm: str) -> int | None:
            try:
                return int(nm[len(STEP_PREFIX):])
            except ValueError:
                return None

        self.steps = [StepAttribution(
            index=index_of(nm) if step_ev else None, name=nm, start_ns=a, end_ns=z,
            wall_ns=z - a, modules={}, outside=ModuleTime(), optimizer=Cost(),
            zero_grad=Cost(), unattributed=Cost(), activities=0, device_total_ns=0,
            device_busy_ns=0, gap_ns=0, memory={})
            for a, z, nm in spans]

    def step_of(self, t: int, within: bool = True) -> int:
        k = bisect.bisect_right(self.starts, t) - 1
        if not self.step_ev:
            return 0
        if k < 0 or (within and t >= self.spans[k][1]):
            return -1
        return k

    def module(self, k: int, path: str) -> ModuleTime:
        got = self.steps[k].modules.get(path)
        if got is None:
            got = self.steps[k].modules[path] = ModuleTime()
        return got

    def forward_modules(self) -> None:
        """Forward module calls: host time exclusive of child module ranges."""
        ev = self.ev
        name, cat, ts, dur = ev.name, ev.cat, ev.ts, ev.dur
        for i in sorted((i for i in ev.host if cat[i] == "user_annotation"
                         and name[i].startswith(MODULE_PREFIX)), key=lambda i: ts[i]):
            k = self.step_of(ts[i])
            if k < 0 or self.ctx_bwd[i] >= 0:
                continue
            f = self.module(k, name[i][len(MODULE_PREFIX):]).forward
            f.host_ns += dur[i] - self.mod_children[i]
            f.calls += 1
        if not any(name[i].startswith(MODULE_PREFIX) for i in ev.host
                   if cat[i] == "user_annotation"):
            self.warnings.append("no vdnnsim.module:: ranges in the trace (was the model run "
                                 "inside kineto.module_ranges?): every op counts as outside "
                                 "modules")

    def forward_ops(self) -> dict[int, list[tuple[int, int]]]:
        """Forward ops by sequence number, each list by start."""
        ev = self.ev
        fwd_seq: dict[int, list[tuple[int, int]]] = {}
        fwd_threads: set[Any] = set()
        for i in ev.host:
            if ev.cat[i] != "cpu_op":
                continue
            a = ev.args[i]
            s = _seq(a)
            if s is not None and not a.get("Fwd thread id"):
                fwd_seq.setdefault(s, []).append((ev.ts[i], i))
                fwd_threads.add(ev.thread[i])
        for lst in fwd_seq.values():
            lst.sort()
        if len(fwd_threads) > 1:
            self.warnings.append(f"forward ops with sequence numbers on {len(fwd_threads)} "
                                 "threads: sequence numbers count per thread, so backward ops "
                                 "may be matched to the wrong forward op")
        return fwd_seq

    def backward_ops(self, fwd_seq: dict[int, list[tuple[int, int]]]) -> None:
        """Top-level backward ops -> a target: a module path, _OUT, or None
        (unattributed); their host time given to it."""
        ev = self.ev
        name, ts = ev.name, ev.ts
        tops = sorted((i for i in ev.host if self.ctx_bwd[i] == i),
                      key=lambda i: (str(ev.thread[i]), ts[i]))
        last: dict[Any, tuple[int, Any]] = {}  # thread -> (step, target) of the last seq op
        lost: dict[str, int] = {}
        for i in tops:
            node = name[i][len(BACKWARD_PREFIX):]
            k = self.step_of(ts[i])
            s = _seq(ev.args[i])
            tgt: Any = None
            why = ""
            if s is not None:
                cands = fwd_seq.get(s, [])
                j = bisect.bisect_left(cands, (ts[i], -1)) - 1
                if j >= 0:
                    f = cands[j][1]
                    tgt = name[self.ctx_mod[f]][len(MODULE_PREFIX):] if self.ctx_mod[f] >= 0 \
                        else _OUT
                else:
                    why = f"{node} (no forward op with sequence number {s})"
                last[ev.thread[i]] = (k, tgt)
            elif node.endswith("AccumulateGrad"):
                prev = last.get(ev.thread[i])
                if prev is not None and prev[0] == k:
                    tgt = prev[1]
                else:
                    why = f"{node} (no backward op before it)"
            else:
                why = f"{node} (no sequence number)"
            self.target[i] = tgt
            if why:
                lost[why] = lost.get(why, 0) + 1
            if k < 0:
                continue
            if tgt is None:
                c = self.steps[k].unattributed
            else:
                mt = self.steps[k].outside if tgt is _OUT else self.module(k, tgt)
                mt.backward_nodes[node] = mt.backward_nodes.get(node, 0) + 1
                c = mt.backward
            c.host_ns += ev.dur[i]
            c.calls += 1
        if lost:
            shown_ = [f"{w} x{c}" if c > 1 else w for w, c in sorted(lost.items())]
            self.warnings.append(f"{sum(lost.values())} backward ops not attributed: "
                                 f"{', '.join(shown_[:5])}"
                                 + (f" and {len(shown_) - 5} more" if len(shown_) > 5 else ""))

    def host_buckets(self) -> None:
        """Optimizer and zero_grad host time, and outside modules' forward: the host time
        of the top-level cpu_ops there."""
        ev = self.ev
        name, cat, ts, dur = ev.name, ev.cat, ev.ts, ev.dur
        steps, parent = self.steps, self.parent
        for i in ev.host:
            if cat[i] == "user_annotation" and self.ctx_spec[i] == i:
                k = self.step_of(ts[i])
                if k >= 0:
                    c = steps[k].optimizer if name[i].startswith(OPTIMIZER_PREFIX) \
                        else steps[k].zero_grad
                    c.host_ns += dur[i]
                    c.calls += 1
        for i in ev.host:
            if cat[i] == "cpu_op" and self.ctx_mod[i] < 0 and self.ctx_bwd[i] < 0 \
                    and self.ctx_spec[i] < 0 and (parent[i] < 0 or cat[parent[i]] != "cpu_op"):
                k = self.step_of(ts[i])
                if k >= 0:
                    steps[k].outside.forward.host_ns += dur[i]
                    steps[k].outside.forward.calls += 1

    def activities(self) -> tuple[str, list[tuple[int, int, int]], dict[int, int]]:
        """(time source, (activity, its launch or -1, its time) each, queued gaps): each
        activity and the host event whose context decides."""
        ev = self.ev
        cat, ts, dur = ev.cat, ev.ts, ev.dur
        gaps: dict[int, int] = {}
        if not ev.gpu:
            return TIME_CPU, [(i, i, max(0, dur[i] - self.children[i])) for i in ev.host
                              if cat[i] == "cpu_op"], gaps
        launch: dict[Any, int] = {}
        for i in ev.host:
            if cat[i] in LAUNCH_CATS:
                c = ev.args[i].get("correlation")
                if c is None:
                    c = ev.flow_s.get((*ev.thread[i], ts[i]))
                if c is not None:
                    launch[c] = i
        items = []
        unlinked = 0
        for i in ev.gpu:
            c = ev.args[i].get("correlation")
            j = launch.get(c, -1) if c is not None else -1
            if j < 0:
                c = ev.flow_f.get((*ev.thread[i], ts[i]))
                j = launch.get(c, -1) if c is not None else -1
            unlinked += j < 0
            items.append((i, j, dur[i]))
        gaps = _queued_gaps(ev, [(i, j) for i, j, _ in items])
        if unlinked:
            self.warnings.append(f"{unlinked} of {len(ev.gpu)} GPU activities have no launch "
                                 "event (correlation / ac2g flow): unattributed")
        return TIME_GPU, items, gaps

    def device_time(self, items: list[tuple[int, int, int]], gaps: dict[int, int]
                    ) -> list[list[tuple[int, int]]]:
        """Each activity's time (its gap included) to its bucket; per step, the
        activities' intervals."""
        ev = self.ev
        name, ts = ev.name, ev.ts
        ctx_mod, ctx_bwd, ctx_spec = self.ctx_mod, self.ctx_bwd, self.ctx_spec
        intervals: list[list[tuple[int, int]]] = [[] for _ in self.steps]
        for i, j, t in items:
            g = gaps.get(i, 0)
            t += g
            k = self.step_of(ts[j]) if j >= 0 else self.step_of(ts[i], within=False)
            if k < 0:
                self.outside_steps.device_ns += t
                self.outside_steps.gap_ns += g
                self.outside_steps.activities += 1
                continue
            st = self.steps[k]
            if j < 0:
                c = st.unattributed
            elif ctx_spec[j] >= 0:
                c = st.optimizer if name[ctx_spec[j]].startswith(OPTIMIZER_PREFIX) \
                    else st.zero_grad
            elif ctx_bwd[j] >= 0:
                tgt = self.target[ctx_bwd[j]]
                c = st.unattributed if tgt is None else (
                    st.outside if tgt is _OUT else self.module(k, tgt)).backward
            elif ctx_mod[j] >= 0:
                c = self.module(k, name[ctx_mod[j]][len(MODULE_PREFIX):]).forward
            else:
                c = st.outside.forward
            c.device_ns += t
            c.gap_ns += g
            c.activities += 1
            st.device_total_ns += t
            st.gap_ns += g
            st.activities += 1
            intervals[k].append((ts[i], ev.end(i)))
        return intervals

    def busy(self, intervals: list[list[tuple[int, int]]]) -> None:
        """Each step's busy time (the union of its activities' intervals) and wall time;
        a warning where device time went unattributed."""
        steps = self.steps
        for st, iv in zip(steps, intervals):
            busy, hi = 0, None
            for a, z in sorted(iv):
                if hi is None or a > hi:
                    busy += z - a
                    hi = z
                elif z > hi:
                    busy += z - hi
                    hi = z
            st.device_busy_ns = busy
            if iv:
                st.wall_ns = max(st.end_ns, max(z for _, z in iv)) - st.start_ns
        lossy = [st for st in steps if st.unattributed.device_ns]
        if lossy:
            worst = max(lossy, key=lambda st: st.unattributed.device_ns
                        / max(1, st.device_total_ns))
            un = sum(st.unattributed.device_ns for st in lossy)
            share = un / max(1, sum(st.device_total_ns for st in lossy))
            self.warnings.append(
                f"{un} ns ({share:.1%}) of device time unattributed in {len(lossy)} of "
                f"{len(steps)} steps; most in {worst.name}: {worst.unattributed.device_ns} ns "
                f"({worst.unattributed.device_ns / max(1, worst.device_total_ns):.1%})")

    def memory(self, time_source: str) -> None:
        """Memory peaks of the device: the GPU's (Device Type 1) where the trace has any."""
        ev = self.ev
        cuda_memory = any(a.get("Device Type") == 1 for _, a in ev.memory)
        if cuda_memory and time_source == TIME_CPU:
            self.warnings.append("CUDA memory events but no GPU activity (profiled without "
                                 "ProfilerActivity.CUDA?): device times are cpu_op self times")
        want = 1 if cuda_memory else 0
        for t, a in ev.memory:
            if a.get("Device Type") != want:
                continue
            k = self.step_of(t)
            if k < 0:
                continue
            dev = a.get("Device Id", -1)
            alloc, res = a.get("Total Allocated", 0), a.get("Total Reserved", 0)
            if not isinstance(alloc, (int, float)) or not isinstance(res, (int, float)):
                continue
            got = self.steps[k].memory.get(dev)
            if got is None:
                self.steps[k].memory[dev] = MemoryPeak(int(alloc), int(res), 1)
            else:
                got.allocated_bytes = max(got.allocated_bytes, int(alloc))
                got.reserved_bytes = max(got.reserved_bytes, int(res))
                got.events += 1


def attribute(trace: Any) -> Attribution:
    """Time per module path, forward and backward, and per
    bucket ("loss/outside modules", "optimizer", "zero_grad", "unattributed") of each
    profiled step of a torch.profiler trace (``load_trace``'s dict, or a path)."""
    data = load_trace(trace)
    what = "trace" if isinstance(trace, dict) else shown(trace)
    a = _Attributor(_Events(data["traceEvents"], what), what)
    a.nest()
    a.find_steps()
    a.forward_modules()
    a.backward_ops(a.forward_ops())
    a.host_buckets()
    time_source, items, gaps = a.activities()
    a.busy(a.device_time(items, gaps))
    a.memory(time_source)
    out = a.outside_steps
    if out.activities and a.step_ev:
        a.warnings.append(f"{out.activities} activities ({out.device_ns} ns) "
                          "ran outside every vdnnsim.step range")
    return Attribution(time_source=time_source, steps=a.steps, outside_steps=out,
                       warnings=a.warnings)
