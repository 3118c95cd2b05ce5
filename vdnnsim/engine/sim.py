"""The discrete-event model of one training iteration (simpy).

NOTE [streams]
One process is the compute stream: it runs each layer's forward, then each layer's
backward, in order, and does the host-side work between kernels (pool allocations, issuing
copies), as vDNN's runtime does. Copies run on copy engines: a D2H and an H2D engine when
the link is duplex, one shared engine otherwise; each engine is FIFO with one copy at a
time (`_Engine`: what a simpy Resource of capacity one does, without its bookkeeping). A
copy's completion is a simpy event; the compute stream waiting for it is
cudaStreamSynchronize / cudaStreamWaitEvent, and the time it waits is a stall.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import simpy

from ..hardware import GPU
from ..policies.plan import Liveness, Plan, liveness
from ..trace.model import Trace
from ..units import transfer_ns
from .allocator import Pool, key_name
from .invariants import InvariantViolation, StreamClock
from .caching import CachingPool


@dataclass(frozen=True)
class Op:
    stream: str  # compute | d2h | h2d
    kind: str  # fwd | bwd | offload | prefetch | stall
    layer: str
    name: str
    start_ns: int
    end_ns: int
    size_bytes: int = 0


# NOTE [pytorch semantics]
# A trace whose source framework is 'pytorch' (profiled from, or built like, a PyTorch
# model) replays PyTorch's memory behaviour instead of Torch7's:
# - the pool is the caching allocator (NOTE [caching allocator]): allocated vs reserved;
# - each layer's parameters are their own allocations, and their gradients are allocated
#   by the layer's first backward pass (zero_grad(set_to_none=True) freed them before the
#   iteration) and kept to its end;
# - an in-place op's backward writes a new gradient tensor (autograd's ReluBackward is not
#   in place), so gradients are per tensor; only a view (flatten, reshape) shares its
#   base's gradient;
# - the optimizer step (``trace.step_ns``) ends the iteration.
# Any trace's ``resident_bytes`` (what the framework holds all run long, such as cuBLAS's
# workspaces) is allocated first, as category 'resident', and never freed.


class Simulation:
    """Replays ``plan`` on ``trace`` for ``gpu`` with a pool of ``capacity_bytes``
    (``None``: unlimited). One simpy Environment per instance; :meth:`run` once."""

    def __init__(self, trace: Trace, gpu: GPU, plan: Plan, capacity_bytes: int | None,
                 lv: Liveness | None = None, record_ops: bool = True, checks: bool = True):
        """``checks=False`` skips the data, stream and end checks of NOTE [invariants]; it
        exists only so that bench/bench_engine.py can measure what they cost."""
        self.trace, self.gpu, self.plan = trace, gpu, plan
        self.checks = checks
        self.lv = lv or liveness(trace)
        self.env = simpy.Environment()
        self.pool = CachingPool(capacity_bytes) if trace.pytorch else Pool(capacity_bytes)
        self._gkey, self._gsize, self._gneeds = self._grad_keys()
        link = gpu.link
        if link.duplex:
            self._engines = {"d2h": _Engine(self.env), "h2d": _Engine(self.env)}
            self._clocks = {"compute": StreamClock("compute"), "d2h": StreamClock("d2h"),
                            "h2d": StreamClock("h2d")}
        else:
            shared = _Engine(self.env)
            self._engines = {"d2h": shared, "h2d": shared}
            copy = StreamClock("copy")
            self._clocks = {"compute": StreamClock("compute"), "d2h": copy, "h2d": copy}
        self.record_ops = record_ops
        if record_ops:
            self.pool.spans = []
        self.ops: list[Op] = []
        self.stall_ns = 0
        self.offloaded_bytes = 0
        self.prefetched_bytes = 0
        self.host_bytes = 0
        self.peak_host_bytes = 0
        self.end_ns = 0
        self.fwd_end_ns = 0
        self._on_host: set[str] = set()
        self._in_flight: dict[str, simpy.Event] = {}
        self._release_on_landing: set[str] = set()
        self._landed: set[str] = set()

    def _grad_keys(self) -> tuple[dict[str, str], dict[str, int], dict[str, bool]]:
        """Which gradient buffer each tensor's gradient lives in (NOTE [pytorch semantics])."""
        trace, lv = self.trace, self.lv
        key: dict[str, str] = {}
        if trace.pytorch:
            kind_of = {t: trace.layers[i].kind for t, i in trace.producers().items()}
            for t in trace.tensors:  # each chain of views walked once (memo in key)
                chain, g = [], t
                while (g not in key and trace.tensors[g].alias_of is not None
                       and kind_of.get(g) == "flatten"):
                    chain.append(g)
                    g = trace.tensors[g].alias_of  # type: ignore[assignment]
                g = key.get(g, g)
                key[t] = g
                for c in chain:
                    key[c] = g
            needs = {g: trace.tensors[g].requires_grad for g in set(key.values())}
        else:
            key = dict(lv.root)
            needs = {g: lv.needs_grad[g] for g in set(key.values())}
        size = {g: trace.tensors[g].size_bytes for g in needs}
        return key, size, needs

    # -- helpers -----------------------------------------------------------------------------
    def _op(self, *args) -> None:
        if self.record_ops:
            self.ops.append(Op(*args))

    def _compute(self, kind: str, layer: str, dur_ns: int):
        if dur_ns > 0:
            start = self.env.now
            yield self.env.timeout(dur_ns)
            if self.checks:
                self._clocks["compute"].op(start, self.env.now, layer, kind)
            self._op("compute", kind, layer, f"{layer}:{kind}", start, self.env.now)

    def _wait(self, events: list[simpy.Event], layer: str, why: str):
        pending = [e for e in events if not e.processed]
        if not pending:
            return
        start = self.env.now
        yield pending[0] if len(pending) == 1 else self.env.all_of(pending)
        if self.env.now > start:
            self.stall_ns += self.env.now - start
            self._op("compute", "stall", layer, f"wait {why}", start, self.env.now)

    def _copy(self, direction: str, buf: str, layer: str, done: simpy.Event):
        link, size = self.gpu.link, self.lv.size[buf]
        engine = self._engines[direction]
        yield engine.acquire()
        bw = link.d2h_bw_bytes_per_s if direction == "d2h" else link.h2d_bw_bytes_per_s
        other = self._engines["h2d" if direction == "d2h" else "d2h"]
        if link.duplex and link.duplex_total_bw_bytes_per_s and other.busy:
            bw = min(bw, link.duplex_total_bw_bytes_per_s / 2)
        start = self.env.now
        yield self.env.timeout(transfer_ns(size, bw, link.latency_ns))
        if self.checks:
            self._clocks[direction].op(start, self.env.now, layer, f"the copy of {buf}")
        kind = "offload" if direction == "d2h" else "prefetch"
        self._op(direction, kind, layer, buf, start, self.env.now, size)
        engine.release()
        if direction == "d2h":
            self._landed.add(buf)
            if buf in self._release_on_landing:  # no end-of-layer sync: release now
                self._release_on_landing.discard(buf)
                self.pool.free(buf, self.env.now)
        else:
            self._free_host(buf)
        done.succeed()

    def _free_host(self, buf: str) -> None:
        self.host_bytes -= self.lv.size[buf]

    def _offload(self, buf: str, layer: str) -> simpy.Event:
        done = self.env.event()
        self.offloaded_bytes += self.lv.size[buf]
        self.host_bytes += self.lv.size[buf]
        self.peak_host_bytes = max(self.peak_host_bytes, self.host_bytes)
        self._on_host.add(buf)
        self._landed.discard(buf)
        self.env.process(self._copy("d2h", buf, layer, done))
        return done

    def _release_offloaded(self, bufs: tuple[str, ...]) -> None:
        """After an offloading layer's forward pass without sync: release what has landed,
        and the rest when its copy lands (never while the layer still reads it)."""
        for b in bufs:
            if b in self._landed:
                self.pool.free(b, self.env.now)
            else:
                self._release_on_landing.add(b)

    def _prefetch(self, buf: str, layer: str) -> simpy.Event:
        if buf in self.pool:  # its offload has not landed yet: keep the GPU copy
            self._release_on_landing.discard(buf)
            self._on_host.discard(buf)
            self._free_host(buf)
            done = self.env.event()
            done.succeed()
            return done
        self.pool.alloc(buf, self.lv.size[buf], "activations", self.env.now, layer, "prefetch")
        done = self.env.event()
        self.prefetched_bytes += self.lv.size[buf]
        self._on_host.discard(buf)
        self._in_flight[buf] = done
        self.env.process(self._copy("h2d", buf, layer, done))
        return done

    # -- the iteration -------------------------------------------------------------------------
    def run(self) -> "Simulation":
        proc = (self._network_wide() if self.plan.memory == "network_wide"
                else self._layer_wise())
        self.env.process(proc)
        self.env.run()
        self._check_end()
        if self.pool.spans is not None:  # what is still allocated lives to the end
            for key, (t0, size, cat) in self.pool._open.items():
                self.pool.spans.append((key_name(key), cat, size, t0, self.end_ns))
        return self

    # -- NOTE [invariants] -------------------------------------------------------------------
    def _check_on_gpu(self, tensors: tuple[str, ...], layer: str, phase: str) -> None:
        if not self.checks:
            return
        lv, pool = self.lv, self.pool
        for t in tensors:
            b = lv.root[t]
            if not lv.size[b]:
                continue  # an empty buffer takes no memory: never allocated
            fetch = self._in_flight.get(b)
            if b not in pool or b in self._on_host or (fetch is not None and not fetch.processed):
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

    def _held_inputs(self) -> set[str]:
        lv = self.lv
        return {b for b in lv.size if b not in lv.producer} if self.trace.pytorch else set()

    def _persistent(self, grads: bool = True) -> None:
        if self.trace.resident_bytes:
            self.pool.alloc(("resident", ""), self.trace.resident_bytes, "resident", 0, "", "start")
        if self.trace.pytorch:
            for layer in self.trace.layers:
                self.pool.alloc(("weights", layer.id), layer.weight_bytes, "weights", 0, "",
                                "start")
                if grads:
                    self.pool.alloc(("wgrad", layer.id), layer.weight_bytes, "weight_grads", 0,
                                    "", "start")
            return
        w = self.trace.weight_bytes
        self.pool.alloc(("weights", ""), w, "weights", 0, "", "start")
        self.pool.alloc(("weight_grads", ""), w, "weight_grads", 0, "", "start")

    def _step(self):
        if self.trace.step_ns:
            start = self.env.now
            yield self.env.timeout(self.trace.step_ns)
            self._op("compute", "step", "", "optimizer step", start, self.env.now)

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
        for layer, a in zip(trace.layers, plan.algos):
            yield from self._compute("fwd", layer.id, layer.algos[a].fwd_ns)
        self.fwd_end_ns = self.env.now
        for layer, a in zip(reversed(trace.layers), reversed(plan.algos)):
            yield from self._compute("bwd", layer.id, layer.algos[a].bwd_ns)
        yield from self._step()
        self.end_ns = self.env.now

    def _layer_wise(self):
        trace, plan, lv, pool, env = self.trace, self.plan, self.lv, self.pool, self.env
        layers = trace.layers
        self._persistent(grads=not trace.pytorch)
        for b, size in lv.size.items():
            if b not in lv.producer:  # network inputs are on the GPU before the iteration
                pool.alloc(b, size, "activations", 0, "", "start")
        held = self._held_inputs()
        fwd_free: dict[int, list[str]] = {}
        for b, last in lv.fwd_last.items():
            if not lv.kept(b) and b not in lv.outputs and b not in held:
                at = max(last, lv.producer.get(b, -1))
                fwd_free.setdefault(at, []).append(b)
        bwd_free: dict[int, list[str]] = {}
        for b, last in lv.bwd_last.items():
            if b not in held:  # the training loop holds the input batch (pytorch)
                bwd_free.setdefault(last, []).append(b)

        # forward
        for i, layer in enumerate(layers):
            algo = layer.algos[plan.algos[i]]
            for t in layer.outputs:
                if lv.root[t] == t:
                    pool.alloc(t, lv.size[t], "activations", env.now, layer.id, "forward")
            ws_key = ("workspace", layer.id)
            pool.alloc(ws_key, algo.fwd_workspace_bytes, "workspace", env.now, layer.id,
                       "forward")
            self._check_on_gpu(layer.inputs, layer.id, "forward")
            copies = [self._offload(b, layer.id) for b in plan.offload[i]]
            yield from self._compute("fwd", layer.id, algo.fwd_ns)
            pool.free(ws_key, env.now)
            for b in fwd_free.get(i, ()):
                pool.free(b, env.now)
            if copies and plan.sync:
                yield from self._wait(copies, layer.id, "offload")
                for b in plan.offload[i]:
                    pool.free(b, env.now)
            elif copies:
                self._release_offloaded(plan.offload[i])
        self.fwd_end_ns = env.now
        for b in lv.outputs:
            if not lv.kept(b):
                pool.free(b, env.now)
            g = self._gkey[b]
            if self._gneeds[g] and ("grad", g) not in pool:
                pool.alloc(("grad", g), self._gsize[g], "gradients", env.now, "", "backward")

        # backward
        for i in range(len(layers) - 1, -1, -1):
            layer = layers[i]
            algo = layer.algos[plan.algos[i]]
            need = []
            for t in layer.saved:
                b = lv.root[t]
                if b in self._on_host:  # no earlier prefetch brought it: fetch on demand,
                    need.append(self._prefetch(b, layer.id))  # ahead of the prefetch below
                elif b in self._in_flight:
                    need.append(self._in_flight[b])
            j = plan.prefetch[i]
            fetches = [self._prefetch(b, layer.id) for b in plan.offload[j]
                       if b in self._on_host] if j >= 0 else []
            yield from self._wait(need, layer.id, "fetch of own input")
            for t in layer.inputs:
                g = self._gkey[t]
                if self._gneeds[g] and ("grad", g) not in pool:
                    pool.alloc(("grad", g), self._gsize[g], "gradients", env.now, layer.id,
                               "backward")
            if trace.pytorch and ("wgrad", layer.id) not in pool:
                pool.alloc(("wgrad", layer.id), layer.weight_bytes, "weight_grads", env.now,
                           layer.id, "backward")
            ws_key = ("workspace", layer.id)
            pool.alloc(ws_key, algo.bwd_workspace_bytes, "workspace", env.now, layer.id,
                       "backward")
            self._check_on_gpu(layer.saved, layer.id, "backward")
            yield from self._compute("bwd", layer.id, algo.bwd_ns)
            pool.free(ws_key, env.now)
            for t in layer.outputs:
                if self._gkey[t] == t:
                    pool.free(("grad", t), env.now)
            for b in bwd_free.get(i, ()):
                pool.free(b, env.now)
                self._in_flight.pop(b, None)
            if fetches and plan.sync:
                yield from self._wait(fetches, layer.id, "prefetch")
        yield from self._step()
        self.end_ns = env.now


class _Engine:
    """A copy engine: one copy at a time, the rest wait in FIFO order. The same grants, in
    the same event order, as ``simpy.Resource(env, 1)``: a free engine is taken at the
    request (``busy`` at once, the copy resumes on the next event), and a release hands
    the engine straight to the first waiter."""

    __slots__ = ("env", "busy", "_waiting")

    def __init__(self, env: simpy.Environment):
        self.env, self.busy, self._waiting = env, False, deque()

    def acquire(self) -> simpy.Event:
        granted = self.env.event()
        if self.busy:
            self._waiting.append(granted)
        else:
            self.busy = True
            granted.succeed()
        return granted

    def release(self) -> None:
        if self._waiting:
            self._waiting.popleft().succeed()
        else:
            self.busy = False
