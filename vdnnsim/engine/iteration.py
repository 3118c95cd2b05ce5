"""The training iteration the host walks: the forward pass, the backward pass (with
checkpointed segments run again), once a micro-batch, and the optimizer step
(optimizer_step.py).

How micro-batches replay: stepopts.py; the network-wide iteration: network_wide.py.
"""

from __future__ import annotations

from .streams import _At, _Later, new_op


def _known(ops) -> bool:
    """Whether every op's end is known (a loop, not all() over a
    generator, which costs a generator each time and, stopped early, its closing)."""
    for op in ops:
        if op.end is None:
            return False
    return True


class Iteration:
    """The host's program of a :class:`~.sim.Simulation` (a part of it)."""

    __slots__ = ()  # the attributes are the simulation's (Simulation.__slots__)

    def _layer_wise(self):
        lv, pool, sem, prog = self.lv, self.pool, self.sem, self.program
        if sem.paged:  # the weights are pages the passes touch, the batch
            self._paged_start()  # is written on the host
            yield from self._iteration(prog.fwd_free, prog.bwd_free)
            return
        if not self.first:  # zero_grad(set_to_none=True) frees the
            for layer in self.trace.layers:  # last step's gradients; the rest is kept
                pool.free(("wgrad", layer.id), 0)
            yield from self._iteration(prog.fwd_free, prog.bwd_free)
            return
        self._persistent(grads=not sem.per_layer_weights, lazy=self.first_step)
        for b, size in lv.size.items():
            if b not in lv.producer:  # network inputs are on the GPU before the iteration
                pool.alloc(b, size, "activations", 0, "", "start")
        yield from self._iteration(prog.fwd_free, prog.bwd_free)

    def _recompute(self, first: int, last: int, dropped: frozenset[str]):
        """Before the backward pass of a checkpointed segment's last
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
            op = new_op(cs, "recompute", layer.id, f"{layer.id}:recompute", algo.fwd_ns,
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
        for t in transient:  # read by nothing left in the segment
            pool.free(("recompute", t), self._stamp(cs.last, 1))

    def _iteration(self, fwd_free, bwd_free):
        """The host's program: the forward pass, the backward pass, the optimizer step,
        and the synchronisation that ends the iteration."""
        for k in range(self.trace.micro_batches):  # gradient accumulation (stepopts.py)
            self._micro = k
            if (yield from self._forward(fwd_free)) or (yield from self._backward(bwd_free)):
                return  # stopped at an out-of-memory (stop_at_oom)
        yield from self._step()
        self.host_issue_ns = self.host_ns  # before the synchronisation
        # the iteration ends with a synchronisation: every deferred free completes
        yield from self._wait_ops([op for op, _ in self._pending] + [self.compute.last], "",
                                  "")
        for op, key in self._pending:
            if key in self._retired:
                self._retired.discard(key)
                self.pool.release(key, self._stamp(op, 1))
        self._pending.clear()

    def _forward(self, fwd_free):
        """Each layer's forward pass in order; True when it stopped (stop_at_oom)."""
        trace, plan, lv, pool, sem = self.trace, self.plan, self.lv, self.pool, self.sem
        layers, cs = trace.layers, self.compute
        ahead = sem.host_ahead
        hf, steps = self._hf, self._layer_steps
        stop, take, stamps, edges = self.stop_at_oom, self._take, self._stamp_ops, \
            self._stamp_edges
        later = self._micro  # a micro-batch after the first: nothing made a first time
        tuned = self.program.autotune if self.autotune and not later else None
        cublas = self._cublas if not later else None  # None, or made in this pass
        first_mm = cublas.fwd_layer if cublas is not None else -1
        # what _take and _workspace would do, without their calls,
        # where no deferred free is pending (then no event can change the answer)
        pending, direct = self._pending, not self._seg_costs
        alloc, transient, free = pool.alloc, pool.transient, pool.free
        checks, on_gpu = self.checks, self._check_on_gpu
        params = self.program.params
        for i, layer in enumerate(layers):
            if stop and pool.oom is not None:
                self.stopped = True
                return True
            if params is not None:
                yield from self._params_before(params.fwd_issue, params.fwd_wait, i, "forward")
            algo = layer.algos[plan.algos[i]]
            offload = plan.offload[i]
            st = steps[i]
            lid = layer.id
            h = hf[i] + self._h_offload * len(offload)
            if h:
                self._spend(h, lid, st.fwd)
            op = new_op(cs, "fwd", lid, st.fwd, algo.fwd_ns, waits=self._next_waits)
            self._next_waits = ()
            stamps.append(op)  # _stamp(op, 0), inline: a new op is never the last stamp
            edges.append(0)
            s0 = len(edges) - 1
            for t, size in st.out_alloc:
                if direct and not pending:
                    alloc(t, size, "activations", s0, lid, "forward")
                elif not take(t, size, "activations", s0, lid, "forward"):
                    yield from self._alloc(t, size, "activations", s0, lid, "forward")
            if i == first_mm:  # the main thread's handle's
                yield from self._cublas_alloc(cublas.fwd, "forward", s0, lid, "forward")
            if tuned and tuned[i][0]:
                yield from self._empty_cache(lid)
            held = False  # its workspace allocated for real
            ws = algo.fwd_workspace_bytes
            if ws and (pending or not transient(("workspace", lid), ws, "workspace", s0,
                                                 self._stamp(op, 1))):
                held = yield from self._workspace_wait(ws, s0, op, lid, "forward")
            if checks:
                on_gpu(st.reads, lid, "forward")
            before = cs.last
            if self._queue:
                yield from self._throttle(op, self._kf[i], lid)
            if sem.paged:  # its page faults first
                self._paged(op, self._touched_fwd(i))
            else:
                self._push(cs, op)
            copies = []  # (a loop: a comprehension costs a frame of its own)
            for b in offload:
                copies.append(self._offload(b, lid, before))
            s1 = len(edges) - 1  # _stamp(op, 1), inline
            if stamps[s1] is not op or not edges[s1]:
                stamps.append(op)
                edges.append(1)
                s1 += 1
            if held:
                free(("workspace", lid), s1)
            for b in fwd_free.get(i, ()):
                free(b, s1)
            if params is not None and i in params.last:
                self._param_free_group(params.last[i], s1)
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
                    if _known(copies):
                        self._synced(copies, layer.id, "offload")
                    else:
                        yield from self._sync(copies, layer.id, "offload")
                    at = self._stamp(_At(self.host_ns), 1)
                    for b in offload:
                        free(b, at)
            elif copies:  # no sync: each buffer is released when its copy has landed
                for b, c in zip(offload, copies):
                    if ahead:
                        self._free_after(b, s1)
                    else:
                        self._retire(b, self._stamp(_Later(op, c), 1), c)
        # the forward pass ends with its last op and whatever the next one must wait for
        if not later:
            self._fwd_ops = (cs.last, *self._next_waits)
            self._fwd_host = self.host_ns if not ahead else 0
        sf = self._stamp(cs.last if ahead else _At(self.host_ns), 1)
        for b in lv.outputs:
            if not lv.kept(b):
                pool.free(b, sf)
            g = self._gkey[b]
            if self._gneeds[g] and ("grad", g) not in pool.live:
                yield from self._alloc(("grad", g), self._gsize[g], "gradients", sf, "",
                                       "backward")
        return False

    def _backward(self, bwd_free):
        """Each layer's backward pass in reverse order, a checkpointed segment's forward
        run again before its last layer's; True when it stopped (stop_at_oom)."""
        trace, plan, lv, pool, sem = self.trace, self.plan, self.lv, self.pool, self.sem
        layers, cs, ahead = trace.layers, self.compute, sem.host_ahead
        hb, steps = self._hb, self._layer_steps
        stop, take, root, on_host = self.stop_at_oom, self._take, lv.root, self._on_host
        segments, stamps, edges = self._segments, self._stamp_ops, self._stamp_edges
        later, acc, hacc = self._micro, self.program.accum_ns, self.program.host_accum_ns
        tuned = self.program.autotune if self.autotune and not later else None
        cublas = self._cublas if not later else None
        first_mm = cublas.bwd_layer if cublas is not None else -1
        pending, direct = self._pending, not self._seg_costs
        alloc, transient, free, live = pool.alloc, pool.transient, pool.free, pool.live
        checks, on_gpu, in_flight = self.checks, self._check_on_gpu, self._in_flight
        params = self.program.params
        for i in range(len(layers) - 1, -1, -1):
            if stop and pool.oom is not None:
                self.stopped = True
                return True
            if params is not None:
                yield from self._params_before(params.bwd_issue, params.last, i,
                                               "backward")
            if segments and i in segments:
                first, dropped = segments[i]
                yield from self._recompute(first, i, dropped)
            layer = layers[i]
            algo = layer.algos[plan.algos[i]]
            st = steps[i]
            adds = later and layer.weight_bytes  # a later micro-batch adds into its gradient
            op = new_op(cs, "bwd", layer.id, st.bwd, algo.bwd_ns + (acc[i] if adds else 0))
            need = []
            for t in layer.saved:
                b = root[t]
                if b in on_host:  # no earlier prefetch brought it: fetch on demand,
                    w = self._prefetch(b, layer.id, on_demand=True)  # ahead of the
                    if w is not None:  # prefetch below
                        yield from w
                if b in self._in_flight:
                    need.append(self._in_flight[b])
            j = plan.prefetch[i]
            fetches = (yield from self._prefetch_layer(j, layer.id)) if j >= 0 else []
            h = hb[i] + self._h_fetch * (len(need) + len(fetches)) + (hacc[i] if adds else 0)
            if h:
                self._spend(h, layer.id, st.bwd)
            # the fetches of its own inputs still in flight (not `pending`: that name holds
            # the deferred frees, which decide below whether to allocate inline)
            late = ()  # (no list, nor a comprehension's frame, where
            for f in need:  # every fetch has landed)
                if f.end is None or f.end > self.host_ns:
                    late = [f for f in need if f.end is None or f.end > self.host_ns]
                    break
            if ahead:
                op.waits = self._next_waits + tuple(late)
            elif late:
                yield from self._sync(late, layer.id, "fetch of own input")
            self._next_waits = ()
            stamps.append(op)  # _stamp(op, 0), inline: a new op is never the last stamp
            edges.append(0)
            s0 = len(edges) - 1
            for g, size in st.grads_in:
                if g in live:
                    continue
                if direct and not pending:
                    alloc(g, size, "gradients", s0, layer.id, "backward")
                elif not take(g, size, "gradients", s0, layer.id, "backward"):
                    yield from self._alloc(g, size, "gradients", s0, layer.id, "backward")
            if i == first_mm:  # the autograd thread's handle's
                yield from self._cublas_alloc(cublas.bwd, "backward", s0, layer.id,
                                              "backward")
            if sem.per_layer_weights:
                yield from self._weight_grad(layer, adds, s0)
            held = False  # its workspace allocated for real
            tune = tuned is not None and tuned[i][1]
            if not (algo.bwd_workspaces or tune):  # one workspace (most layers)
                ws = algo.bwd_workspace_bytes
                if ws and (pending or not transient(("workspace", layer.id), ws, "workspace",
                                                     s0, self._stamp(op, 1))):
                    held = yield from self._workspace_wait(ws, s0, op, layer.id, "backward")
            else:
                held = yield from self._bwd_workspaces(algo, tune, s0, op, layer.id)
            if checks:
                on_gpu(st.saved, layer.id, "backward", op.waits)
            if self._queue:
                yield from self._throttle(op, self._kb[i], layer.id)
            if sem.paged:  # its page faults first
                self._paged(op, self._touched_bwd(i))
            else:
                self._push(cs, op)
            s1 = len(edges) - 1  # _stamp(op, 1), inline
            if stamps[s1] is not op or not edges[s1]:
                stamps.append(op)
                edges.append(1)
                s1 += 1
            if held:
                free(("workspace", layer.id), s1)
            if adds and ("wgrad_add", layer.id) in live:
                free(("wgrad_add", layer.id), s1)
            for g in st.grads_out:
                free(g, s1)
            if plan.optimizer_offload and layer.weight_bytes:
                self._grad_copy(layer.id, layer.weight_bytes, op, s1)
            if params is not None and i in params.bwd_free:
                free(("weights", layer.id), s1)
            for b in bwd_free.get(i, ()):
                self._free_after(b, s1)
                in_flight.pop(b, None)
            if not ahead:  # Torch7: the host waits for the layer (its end is known at once
                if op.end is None:  # unless it waits for a copy whose start is not)
                    yield from self._wait_ops((op,), layer.id)
                elif op.end > self.host_ns:
                    self.host_ns = op.end
            if fetches and plan.sync:
                if ahead:
                    self._next_waits = tuple(fetches)
                elif _known(fetches):
                    self._synced(fetches, layer.id, "prefetch")
                else:
                    yield from self._sync(fetches, layer.id, "prefetch")
        return False

    def _weight_grad(self, layer, adds: int, s0: int):
        """The layer's weight gradient, made by its first backward pass; in a later
        micro-batch (``adds``) the new gradient autograd adds into it, held to the pass's end
        (stepopts.py)."""
        key = ("wgrad", layer.id)
        if key in self.pool.live:
            if not adds:
                return
            key = ("wgrad_add", layer.id)
        yield from self._alloc(key, layer.weight_bytes, "weight_grads", s0, layer.id,
                               "backward")

    def _prefetch_layer(self, j: int, layer_id: str):
        """Issue the prefetches of layer ``j``'s offloaded buffers from layer ``layer_id``'s
        backward pass; the copies still in flight."""
        fetches = []
        for b in self.plan.offload[j]:
            if b in self._on_host:
                w = self._prefetch(b, layer_id)
                if w is not None:
                    yield from w
                if b in self._in_flight:
                    fetches.append(self._in_flight[b])
        return fetches

    def _bwd_workspaces(self, algo, tune: bool, s0: int, op, layer_id: str):
        """A backward pass of several cuDNN calls (or a tuned conv's): each call's
        workspace in turn; True where the last one is held for real."""
        held = False
        for ws in algo.bwd_workspaces or (algo.bwd_workspace_bytes,):
            if held:  # the last call's, freed before
                self.pool.free(("workspace", layer_id), s0)
                held = False
            if tune:  # each cuDNN call of a tuned conv empties the cache first
                yield from self._empty_cache(layer_id)
            if ws:
                w = self._workspace(ws, s0, op, layer_id, "backward")
                if w is not None:
                    held = yield from w
        return held
