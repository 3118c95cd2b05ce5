"""The executor's side of unified memory: what a :class:`~.sim.Simulation`
does where its semantics say memory is paged (``Semantics.paged``) and its memory is the
pager. The iteration it walks is the pool runs' (iteration.py); these are the hooks.
"""

from __future__ import annotations

from .memory_model import Touch
from .streams import LAYER_PASSES, _At, _Op, new_op


class Paging:
    """The paged hooks of a :class:`~.sim.Simulation` (a part of it: the attributes it
    reads are the simulation's)."""

    __slots__ = ()  # the attributes are the simulation's (Simulation.__slots__)

    def _paged_start(self) -> None:
        """Before the first pass: a new input batch, written on the host (last
        iteration's is freed first), and the framework's resident memory."""
        pool, lv = self.pool, self.lv
        for b, size in lv.size.items():
            if b not in lv.producer:
                pool.free(b, 0)
                pool.alloc(b, size, "activations", 0, "", "start")
        if self.trace.resident_bytes and ("resident", "") not in pool:
            pool.alloc(("resident", ""), self.trace.resident_bytes, "resident", 0, "", "start")

    def _paged(self, op: _Op, touched: list[Touch]) -> None:
        """Run ``op`` on the compute stream after its page faults: when the host has
        issued it and the GPU has ended its last pass, the pager serves the faults of
        what it touches (the GPU runs nothing meanwhile: a stall), then the kernel runs.
        ``op.start``, the stamp of what the host allocated for the pass, stays at the
        previous pass's end, where the GPU's clock stood when the host allocated it."""
        cs = self.compute
        prev = cs.tail  # known: every paged op's end is known when it is issued
        t = self.host_ns if self.host_ns > prev else prev
        self.host_bound_ns += t - prev
        stall, moved = self.pool.access(touched, self._stamp(_At(t), 0))
        record = self.record_ops
        if stall:
            self.stall_ns += stall
            if record:
                self.ops.append(("h2d", "fetch", op.layer, f"{op.name}:faults",
                                             t, t + stall, moved))
        t += stall
        op.issue, op.start, op.end = self.host_ns, prev, t + op.dur
        if self.checks and (t < cs.prev_end or op.end < t):
            cs.clock.last_end = cs.prev_end
            cs.clock.op(t, op.end, op.layer, op.kind)
        if op.end > t and op.kind in LAYER_PASSES:
            self.layer_spans.append((t, op.end))
        if record:  # every pass, an empty one too
            self.ops.append((cs.name, op.kind, op.layer, op.name, t, op.end, 0))
        cs.last, cs.tail, cs.prev_end = op, op.end, op.end
        if op.end > self.end_ns:
            self.end_ns = op.end

    def _touched_fwd(self, i: int) -> list[Touch]:
        """What layer ``i``'s forward touches, in order: its inputs, its outputs, its
        weights (its workspace is the pager's)."""
        layer, st, size = self.trace.layers[i], self._layer_steps[i], self.lv.size
        touched = [(b, size[b], False) for b in st.reads]
        touched += [(b, n, True) for b, n in st.out_alloc]
        if layer.weight_bytes:
            touched.append((("weights", layer.id), layer.weight_bytes, False))
        return touched

    def _touched_bwd(self, i: int) -> list[Touch]:
        """What layer ``i``'s backward touches, in order: what it saved, its outputs'
        gradients, its inputs' gradients, its weights and their gradient."""
        layer, st, pool, size = self.trace.layers[i], self._layer_steps[i], self.pool, \
            self.lv.size
        touched = [(b, size[b], False) for b in st.saved]
        touched += [(g, 0, False) for g in st.grads_out if g in pool]
        touched += [(g, n, True) for g, n in st.grads_in]
        if layer.weight_bytes:
            touched.append((("weights", layer.id), layer.weight_bytes, False))
            touched.append((("wgrad", layer.id), layer.weight_bytes, True))
        return touched

    def _paged_step(self) -> None:
        """The optimizer step: one pass that writes every weight from its gradient; then
        the iteration's outputs and gradients are freed (the next makes its own)."""
        trace, pool = self.trace, self.pool
        self._spend(trace.host_step_ns, "", "optimizer step")
        weighted = [x for x in trace.layers if x.weight_bytes]
        touched = [(("weights", x.id), x.weight_bytes, True) for x in weighted]
        touched += [(("wgrad", x.id), x.weight_bytes, False) for x in weighted]
        op = new_op(self.compute, "step", "", "step", trace.step_ns)
        self._paged(op, touched)
        at = self._stamp(op, 1)
        for b in self.lv.outputs | {k for k in pool.live_keys()
                                    if isinstance(k, tuple) and k[0] == "grad"}:
            pool.free(b, at)

    def _paged_totals(self) -> None:
        """After the run: what the pager moved is the run's traffic (written back: out;
        migrated: in), and what it kept on the host its peak there."""
        pool = self.pool
        self.offloaded_bytes += pool.written_back_bytes
        self.prefetched_bytes += pool.migrated_bytes
        self.peak_host_bytes = pool.peak_host_bytes
