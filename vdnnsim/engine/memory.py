"""The host's memory decisions: allocations, frees deferred to a copy's event, offloads,
prefetches and workspaces, and the memory curve on the GPU's clock.

NOTE [memory time]
The allocator sees the host's order, and its peaks are the ones PyTorch reports. The
memory curve, the tensor lifetimes and an out-of-memory's time are shown on the GPU's
clock: each change is stamped with the GPU op it belongs to (an allocation with the start
of the op that first uses the block, a free with the end of the op that last used it, a
deferred free with the end of the copy it waited for), and the stamps become times when
the run has ended; the lifetimes' keys are named then too, each key once a trace (the
pools record the keys themselves). A pass that stopped at its out-of-memory
(``replay(stop_at_oom=True)``) is no result, only an answer to whether and where it runs
out: its curve and lifetimes are not worked out (``times``, ``levels`` and ``spans`` are
None, so nothing can read them as a run's), only the out-of-memory's time.
"""

from __future__ import annotations

from dataclasses import replace

from .allocator import OutOfMemory, key_name
from .compile import cublas_workspaces, optimizer_state
from ..units import GiB, transfer_ns
from .streams import _At, _Op, new_op

class RetiredKeys(dict):
    """The keys whose blocks wait for an event, each as often as it
    waits (a multiset: a buffer prefetched back, used and freed again can be retired a
    second time before its first block's event completes; a set counted it once, and the
    first release then freed the second block while the first was never given back)."""

    __slots__ = ()

    def add(self, key) -> None:
        self[key] = self.get(key, 0) + 1

    def discard(self, key) -> None:
        n = self.get(key, 0)
        if n > 1:
            self[key] = n - 1
        elif n:
            del self[key]


class Memory:
    """The memory side of a :class:`~.sim.Simulation` (a part of it: the attributes it
    reads are the simulation's)."""

    __slots__ = ()  # the attributes are the simulation's (Simulation.__slots__)

    def _process_events(self):
        """PyTorch's process_events at a malloc: release the deferred frees whose events
        the host sees complete, in order."""
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
        kw = {"stream": stream} if stream else {}
        if self._pending:
            yield from self._process_events()
        costs = self._seg_costs and pool.would_release(size, **kw)
        if costs:  # cudaFree waits for the whole device
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
        answer) and no release of the cache is due; ``False``: the
        caller runs :meth:`_alloc`, which may wait."""
        if self._pending:
            return False
        if self._seg_costs:
            kw = {"stream": stream} if stream else {}
            if self.pool.would_release(size, **kw):
                return False
            before = self._seg_count()
            self.pool.alloc(key, size, category, stamp, layer, phase, **kw)
            self._charge_segments(before, layer)
        elif stream:  # (a run's hottest call: no keyword dict where none is needed)
            self.pool.alloc(key, size, category, stamp, layer, phase, stream=stream)
        else:
            self.pool.alloc(key, size, category, stamp, layer, phase)
        return True

    def _drain(self, layer: str):
        """The host waits for every stream's work (cudaFree)."""
        yield from self._wait_ops([s.last for s in self._streams if s.last is not None],
                                  layer, "allocator: cudaFree synchronises the device")

    def _seg_count(self) -> tuple[int, int, int, int]:
        p = self.pool
        return p.released, p.remade, p.released_bytes, p.remade_bytes

    def _charge_segments(self, before: tuple[int, int, int, int], layer: str) -> None:
        """The host pays for the segments released and made again."""
        now = self._seg_count()
        if now == before:  # (the common case: nothing released or made)
            return
        freed, made, fb, mb = (a - b for a, b in zip(now, before))
        if freed or made:
            h = self.gpu.host
            ns = freed * h.segment_free_ns + made * h.segment_malloc_ns + round(
                (fb * h.segment_free_ns_per_gib + mb * h.segment_malloc_ns_per_gib) / GiB)
            self._spend(ns, layer, "allocator: cudaFree / cudaMalloc")

    def _retire(self, key, stamp: int, after: _Op | None) -> None:
        """Free ``key`` once ``after`` (a copy that used it) has ended; at once if nothing is in
        flight."""
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
        self.pinned.take(size)
        self._on_host.add(buf)
        if self.sem.host_ahead:
            self._recorded.add(buf)
        # a copy is timed as if alone on the link (a duplex link whose engines share its
        # bandwidth times it again when it starts, Streams._serve)
        op = new_op(self._copy["d2h"], "offload", layer, buf,
                 self._d2h_ns.get(buf) or self._copy_ns_of(buf, size, "d2h"), size,
                 (before,) if before is not None else (), "d2h")
        self._sent[buf] = op
        cap = self._host_cap
        if cap is not None and self.host_bytes > cap and self.pool.oom is None:
            # the first offload the host cannot hold, at its start
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
            self.pinned.give(size)
            return None
        if buf in pool.live:  # still allocated (its free is yet to come): nothing to move
            self.host_bytes -= size
            self.pinned.give(size)
            return None
        kind = "fetch" if on_demand else "prefetch"
        side = not (on_demand and self.sem.one_side_stream)  # PyTorch: on compute
        stream = self._copy["h2d"] if side else self.compute
        waits: tuple[_Op, ...] = (sent,)  # the host copy must have landed
        if side and self.sem.host_ahead and self.compute.last is not None:
            waits += (self.compute.last,)  # side.wait_stream(compute)
        op = new_op(stream, kind, layer, buf,
                    self._h2d_ns.get(buf) or self._copy_ns_of(buf, size, "h2d"), size,
                 waits, "h2d")  # (timed as _offload's)
        anchor = op if self.sem.host_ahead else _At(self.host_ns)
        pstream = self._pstream
        stamp = self._stamp(anchor, 0)
        if pstream is None and not self._pending and not self._seg_costs:  # _take, inline
            pool.alloc(buf, size, "activations", stamp, layer, kind)
            self._fetched(buf, op, side)
            return None
        a = (buf, size, "activations", stamp, layer, kind, pstream)
        if self._take(*a):
            self._fetched(buf, op, side)
            return None
        return self._fetch_later(a, op, side)

    def _copy_ns_of(self, buf: str, size: int, way: str) -> int:
        """A copy of ``buf`` alone on the link, timed once per trace and link
        (NOTE [engine speed]: ``_d2h_ns`` and ``_h2d_ns`` keep it)."""
        bw, times = (self._d2h_bw, self._d2h_ns) if way == "d2h" else (self._h2d_bw,
                                                                          self._h2d_ns)
        times[buf] = transfer_ns(size, bw, self._link_ns)
        return times[buf]

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
        """A layer's workspace, freed when ``op`` ends: None when only the books saw it; else a
        generator for the host to run, which returns whether it
        was allocated for real (then the caller frees it after the op)."""
        if not self._pending and self.pool.transient(("workspace", layer), size, "workspace",
                                                     s0, self._stamp(op, 1)):
            return None
        return self._workspace_wait(size, s0, op, layer, phase)

    def _workspace_wait(self, size: int, s0: int, op: _Op, layer: str, phase: str):
        key = ("workspace", layer)
        if self._pending:  # a malloc's process_events first
            yield from self._process_events()
            if self.pool.transient(key, size, "workspace", s0, self._stamp(op, 1)):
                return False
        yield from self._alloc(key, size, "workspace", s0, layer, phase)
        return True

    def _empty_cache(self, layer: str):
        """The empty_cache after cuDNN's benchmark of a
        convolution, whose timing synchronised the device: the host waits for every
        stream, the deferred frees complete, and every fully free segment is given back."""
        yield from self._drain(layer)
        yield from self._process_events()
        self.pool.empty_cache()

    def _free_after(self, key, stamp: int) -> None:
        """Free a block at the host's time; a block a side-stream copy used waits for
        what that stream has been given so far (record_stream)."""
        if key in self._recorded and self.sem.host_ahead:
            self._recorded.discard(key)
            self._retire(key, stamp, self._copy["d2h"].last)
        else:
            self.pool.free(key, stamp)

    def _stopped_time(self) -> None:
        """A stopped pass: the out-of-memory's stamp becomes its
        time; the curve and the lifetimes are dropped."""
        pool = self.pool
        if pool.oom is not None:
            k = pool.oom.time_ns
            op = self._stamp_ops[k]
            pool.oom = replace(pool.oom, time_ns=op.end if self._stamp_edges[k] else op.start)
        pool.times = pool.levels = pool.spans = pool.curve = None

    def _to_gpu_time(self) -> None:
        """Stamps become GPU times."""
        import numpy as np  # here, not at the top: every vdnnsim process imports the
        # engine, and numpy costs ~86 ms and 13 MB at startup
        T = [op.end if edge else op.start  # type: ignore[attr-defined]
             for op, edge in zip(self._stamp_ops, self._stamp_edges)]
        pool = self.pool
        # the curve's steps at their GPU times, in time order (a stable sort: steps at one
        # time keep the host's order), merged where they fall at one time (the last level
        # stands); numpy, exact in int64: a run has thousands of steps
        # (fromiter converts a list of integers in a quarter less
        # than asarray, which inspects every element first)
        t = _int64s(T)[_int64s(pool.times)]
        d = _int64s(pool.levels)  # each step's change (np.diff with prepend: slower)
        d[1:] -= d[:-1].copy()
        order = np.argsort(t, kind="stable")
        t, live = t[order], np.cumsum(d[order])
        last = np.empty(len(t), dtype=bool)
        last[:-1] = t[1:] != t[:-1]
        last[-1:] = True
        t, live = t[last], live[last]
        if not len(t) or t[0] != 0:
            t, live = np.insert(t, 0, 0), np.insert(live, 0, 0)
        pool.times, pool.levels = t.tolist(), live.tolist()
        pool.curve = (t, live)  # (the average's, Accounting.average_bytes)
        if pool.oom is not None:
            pool.oom = replace(pool.oom, time_ns=T[pool.oom.time_ns])
        if pool.spans is not None:  # the pools record keys; each is named once a trace
            names = self.trace.memo("key names", dict)
            pool.spans = [(names[k] if k in names else names.setdefault(k, key_name(k)), c,
                           size, T[t0], T[t1]) for k, c, size, t0, t1 in pool.spans]
            for key, t0, size, cat in pool.open_spans():  # what lives to the end
                pool.spans.append((key_name(key), cat, size, T[t0], self.end_ns))

    def _cublas_alloc(self, sizes: tuple[int, ...], which: str, stamp: int, layer: str,
                      phase: str):
        """A handle's workspaces, at its first matmul; held for
        the run, as the rest of the resident memory."""
        for k, size in enumerate(sizes):
            a = (("resident", f"cublas:{which}:{k}"), size, "resident", stamp, layer, phase)
            if not self._take(*a):
                yield from self._alloc(*a)

    def _persistent(self, grads: bool = True, lazy: bool = False) -> None:
        """What is allocated before the first iteration: the weights (and their gradients
        where the semantics keep them), and what the framework holds all run long, but
        for the cuBLAS workspaces where ``lazy`` (the process's first step): those its first
        matmuls allocate."""
        pool = self.pool
        # the optimizer's state is made at the first step, not here
        # (nowhere on the GPU, where the plan offloads it)
        resident = self.trace.resident_bytes - sum(
            optimizer_state(self.trace) if self.plan.optimizer_offload else self.program.state)
        ws = cublas_workspaces(self.trace, self.gpu.cublas_workspace_bytes, resident) \
            if lazy else None
        if ws is not None:
            resident -= sum(ws.fwd) + sum(ws.bwd)
            self._cublas = ws
        if resident:
            pool.alloc(("resident", ""), resident, "resident", 0, "", "start")
        if self.sem.per_layer_weights:
            params = self.program.params  # on the host
            away = params.layers if params is not None else ()
            for layer in self.trace.layers:
                if layer.id not in away:
                    pool.alloc(("weights", layer.id), layer.weight_bytes, "weights", 0, "",
                               "start")
                if grads:
                    pool.alloc(("wgrad", layer.id), layer.weight_bytes, "weight_grads", 0, "",
                               "start")
            return
        w = self.trace.weight_bytes
        pool.alloc(("weights", ""), w, "weights", 0, "", "start")
        pool.alloc(("weight_grads", ""), w, "weight_grads", 0, "", "start")


def _int64s(values: list[int]):
    import numpy as np
    return np.fromiter(values, dtype=np.int64, count=len(values))
