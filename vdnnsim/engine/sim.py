"""The discrete-event model of one training iteration (simpy): a :class:`Simulation` is
the host (host.py), the streams (streams.py), the host's memory decisions (memory.py) and
the iteration it walks (iteration.py), over what compile.py worked out beforehand, on a
model of memory behind one interface (memory_model.py: a pool, or the pager of unified
memory, whose hooks are paged.py). NOTE [host], NOTE [streams], NOTE [launch queue],
NOTE [memory time] and NOTE [uvm] are in those files; engine/replay.py is the one place a
simulation is made.

NOTE [engine speed]
A vDNN iteration is pure Python at about 60k instructions a layer and pass, spread thin over
the host's walk, the pool's books and issuing and recording ops. What keeps it there: slots
(no instance dict); the walks allocate, place a workspace and stamp inline where no
deferred free is pending; a memory model's ``live`` mapping answers ``key in`` without a
Python call; ops are made by a function, not a class's ``__init__``; hot loops use no
generator or comprehension; the timeline is kept as plain tuples; each buffer's copy is
timed once per trace and link, and what a policy derives from the trace alone is worked out
once per trace. Speed is counted in instructions (``bench/engine_instructions.py``): wall
time on a shared two-core machine swings about 2x within an hour for the same code.
"""

from __future__ import annotations

from collections import deque

import simpy

from ..hardware import GPU
from ..trace.model import Trace
from .compile import Program, compile_plan, checkpoint_buffers, free_points, keepers, recompute_sets
from .host import Host
from .allocator import key_name
from .invariants import InvariantViolation
from .iteration import Iteration
from .memory import Memory, RetiredKeys
from .memory_model import MemoryModel
from .network_wide import NetworkWide
from .optimizer_step import STEP_PIECES, OptimizerStep
from .paged import Paging
from .params import ParamMoves
from .pinned import PinnedPool
from .plan import Liveness, Plan, liveness
from .semantics import semantics_for
from .streams import Op, Streams, _Op, _Stream, _Zero

__all__ = ["Op", "Program", "STEP_PIECES", "Simulation", "checkpoint_buffers", "free_points",
"keepers",
           "recompute_sets"]


class Simulation(Streams, Host, Memory, Iteration, NetworkWide, OptimizerStep, ParamMoves,
                 Paging):
    """Replays ``plan`` on ``trace`` for ``gpu`` on ``memory`` (
    what ``Semantics.memory`` makes). One simpy Environment per instance; :meth:`run`
    once."""

    # slots, not a __dict__ of sixty names (an instance dict that
    # large is not shared, and every self.x in the hot loop became a dict lookup)
    __slots__ = ("_copy", "_credit", "_cublas", "_d2h_bw", "_d2h_ns", "_fwd_host", "_fwd_ops",
                 "_gkey", "_gneeds", "_grad_copies", "_gsize", "_h2d_bw", "_h2d_ns", "_h_fetch",
                 "_h_offload", "_hb",
                 "_hf", "_host_cap", "_host_track", "_in_flight", "_kb", "_kf",
                 "_layer_steps", "_link_ns", "_micro", "_next_waits", "_opt", "_on_host", "_param_ready",
                 "_pending", "_pstream",
                 "_queue", "_queued", "_queued_k", "_recorded", "_retired", "_seg_costs",
                 "_segments", "_sent", "_stamp_edges", "_stamp_ops", "_streams",
                 "autotune", "checks", "compute", "end_ns", "env", "first", "first_step",
                 "fwd_end_ns", "gpu", "host_bound_ns", "host_bytes", "host_issue_ns", "host_ns",
                 "layer_spans", "lv",
                 "offloaded_bytes", "ops", "param_fetched_bytes", "peak_host_bytes", "pinned",
                 "plan", "pool",
                 "prefetched_bytes", "program", "record_ops", "sem", "stall_ns",
                 "stop_at_oom", "stopped", "trace")

    def __init__(self, trace: Trace, gpu: GPU, plan: Plan, memory: MemoryModel,
                 lv: Liveness | None = None, record_ops: bool = True, checks: bool = True,
                 stop_at_oom: bool = False, first: bool = True, autotune: bool = False,
                 first_step: bool = False):
        """``checks=False`` skips the data, stream and end checks of NOTE [invariants]; it
        exists only so that bench/bench_engine.py can measure what they cost.
        ``stop_at_oom``: the host stops issuing at the first layer that starts after an
        out-of-memory, for a caller that wants only whether and where it ran out (vdnn_dyn's
        profiling passes); such a run's other numbers are partial. ``autotune``: this is
        the process's first step, in which cuDNN's autotuner empties the cache at each
        convolution it tunes. ``first_step``: this iteration is
        the process's first step, replayed as such before the one reported (or reported
        itself where it does not fit): the cuBLAS workspaces are allocated at the first
        matmuls, not before it."""
        self.stop_at_oom = stop_at_oom
        self.first = first  # else the memory holds the last iteration's
        self.autotune = autotune
        self.first_step = first and first_step
        self._cublas = None  # and where this iteration allocates them, if it does
        self.stopped = False
        self.trace, self.gpu, self.plan = trace, gpu, plan
        self.checks = checks
        self.lv = lv or liveness(trace)
        self.sem = sem = semantics_for(trace, plan)
        self.env = simpy.Environment()
        self.pool = memory
        # what the host walks, worked out before it starts
        self.program = prog = compile_plan(trace, plan, self.lv, sem, gpu.host)
        self._gkey, self._gsize, self._gneeds = prog.gkey, prog.gsize, prog.gneeds
        self._layer_steps = prog.steps
        self._hf, self._hb = prog.host_fwd_ns, prog.host_bwd_ns
        self._h_offload, self._h_fetch = prog.host_offload_ns, prog.host_fetch_ns
        self._queue = prog.launch_queue
        self._kf, self._kb = prog.kernels_fwd, prog.kernels_bwd
        self._segments = prog.segments
        h = gpu.host
        # only the caching allocator releases its cache, and only a
        # preset that measured the driver's calls charges for them
        self._seg_costs = hasattr(self.pool, "would_release") and bool(
            h.segment_malloc_ns or h.segment_free_ns or h.segment_malloc_ns_per_gib
            or h.segment_free_ns_per_gib)
        # a prefetch on the side stream is allocated from its pool
        # where the runtime allocates it there (the block runtime fetches on demand there too)
        self._pstream = plan.prefetch_stream if plan.prefetch_stream != "compute" \
            and hasattr(self.pool, "would_release") else None
        link = gpu.link
        self._d2h_bw, self._h2d_bw = link.d2h_bw_bytes_per_s, link.h2d_bw_bytes_per_s
        self._link_ns = link.latency_ns
        # each buffer's copy, timed once per trace and link, where
        # the sizes are the trace's own liveness's (a caller's other liveness: not kept)
        memo = trace.memo if self.lv is liveness(trace) else lambda key, make: make()
        self._d2h_ns = memo(("copy ns", self._d2h_bw, self._link_ns), dict)
        self._h2d_ns = memo(("copy ns", self._h2d_bw, self._link_ns), dict)
        self.compute = _Stream("compute")
        if sem.one_side_stream or not link.duplex:
            side = _Stream("copy")
            self._copy = {"d2h": side, "h2d": side}
        else:
            shares = bool(link.duplex_total_bw_bytes_per_s)
            self._copy = {"d2h": _Stream("d2h", shares), "h2d": _Stream("h2d", shares)}
        # the runtime's own stream for the optimizer's copies
        self._opt = _Stream("optimizer") if plan.optimizer_offload else None
        self._streams = [self.compute] + list(dict.fromkeys(self._copy.values())) + (
            [self._opt] if self._opt is not None else [])
        self.record_ops = record_ops
        self._host_track = record_ops and not sem.paged  # no host track
        if record_ops:
            self.pool.spans = []
        self.ops: list[tuple] = []  # Op's fields (RunResult.ops makes them Ops)
        self.layer_spans: list[tuple[int, int]] = []  # kept unrecorded too
        self.stall_ns = 0
        self.offloaded_bytes = 0
        self.prefetched_bytes = 0
        self.host_bytes = 0
        self.peak_host_bytes = 0
        self.pinned = PinnedPool()
        self._host_cap = gpu.host_memory_bytes  # None: no limit
        self.end_ns = 0
        self.fwd_end_ns = 0
        self.host_issue_ns = 0  # the host done issuing the step
        self.host_ns = 0  # the host's clock
        self.host_bound_ns = 0  # the compute stream idle, waiting for the host to issue
        self._credit = 0
        self._micro = 0  # the micro-batch the host is in (stepopts.py)
        self._stamp_ops: list[object] = [_Zero]  # stamp k is the start
        self._stamp_edges: list[int] = [0]  # (edge 0) or end (1) of _stamp_ops[k]
        self._pending: deque[tuple[_Op, object]] = deque()
        self._retired = RetiredKeys()
        self._on_host: set[str] = set()
        self._in_flight: dict[str, _Op] = {}
        self._sent: dict[str, _Op] = {}  # buffer -> its offload
        self._recorded: set[str] = set()  # blocks a side-stream copy used (record_stream)
        self._next_waits: tuple[_Op, ...] = ()
        self._grad_copies: list[tuple[str, int, _Op]] = []
        self._param_ready: dict[int, _Op] = {}  # group -> copy
        self.param_fetched_bytes = 0
        self._fwd_ops: tuple = ()
        self._fwd_host = 0
        self._queued: deque[tuple[_Op, float]] = deque()
        self._queued_k = 0.0

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
        if self.stopped:  # no result, only whether and where
            self._stopped_time()
        else:
            self._to_gpu_time()
        if self.sem.paged:
            self._paged_totals()
        self.fwd_end_ns = max([self._fwd_host] + [op.end for op in self._fwd_ops
                                                  if op is not None])  # type: ignore[misc]
        return self

    # -- NOTE [invariants] -------------------------------------------------------------------
    def _check_on_gpu(self, bufs: tuple[str, ...], layer: str, phase: str,
                      waits: tuple[_Op, ...] = ()) -> None:
        """``bufs``: the non-empty buffers the pass reads (an empty one is never
        allocated)."""
        if not self.checks:
            return
        live, on_host, in_flight = self.pool.live, self._on_host, self._in_flight
        for b in bufs:
            fetch = in_flight.get(b)
            late = (fetch is not None and fetch not in waits
                    and (fetch.end is None or fetch.end > self.host_ns))
            if b not in live or b in on_host or late:
                where = ("on the host" if b in on_host else "still being fetched"
                         if b in live else "not allocated")
                raise InvariantViolation(f"{phase} pass reads a buffer that is {where}",
                                         layer, b)

    _LIVE_ALL_RUN = frozenset({"weights", "weight_grads", "wgrad", "resident", "state"})

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
        if self.plan.memory == "network_wide":
            return
        lost = getattr(self.pool, "unaccounted_bytes", None)  # the caching pool's books
        if lost is not None and lost():
            raise InvariantViolation(f"{lost()} reserved bytes are neither allocated, "
                                     "waiting for an event nor free")
        leaves = {b for b in self.lv.size if b not in self.lv.producer}
        for key in self.pool.live_keys():
            if isinstance(key, tuple) and key[0] in self._LIVE_ALL_RUN \
                    or key in leaves:  # the training loop's batch (an unread input stays)
                continue
            if isinstance(key, tuple) and key[0] == "grad" and key[1] in leaves:
                continue  # a network input's gradient is its result, kept like dW
            raise InvariantViolation("still allocated after the iteration", "",
                                     key_name(key))
