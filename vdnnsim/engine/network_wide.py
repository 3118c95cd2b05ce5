"""The network-wide iteration (the paper's baseline): every buffer allocated at the start,
the passes issued one after another, once a micro-batch (stepopts.py)."""

from __future__ import annotations

from .plan import grad_buffers
from .streams import new_op


class NetworkWide:
    """The network-wide program of a :class:`~.sim.Simulation` (a part of it)."""

    __slots__ = ()  # the attributes are the simulation's (Simulation.__slots__)

    def _network_wide(self):
        trace, plan, lv, pool = self.trace, self.plan, self.lv, self.pool
        if not self.first:  # everything it holds, it holds still
            yield from self._network_wide_passes()
            return
        self._persistent()
        for b, size in lv.size.items():
            pool.alloc(b, size, "activations", 0, "", "start")
        grads = [lv.size[b] for b in lv.size if lv.needs_grad[b]]
        big = max(grads, default=0)
        for k in range(grad_buffers(trace, lv)):
            pool.alloc((f"grad_buffer_{k}", ""), big, "gradients", 0, "", "start")
        ws = max((layer.algos[a].workspace_bytes for layer, a in zip(trace.layers, plan.algos)),
                 default=0)
        pool.alloc(("workspace", ""), ws, "workspace", 0, "", "start")
        yield from self._network_wide_passes()

    def _network_wide_passes(self):
        trace, plan = self.trace, self.plan
        cs = self.compute
        own = {last: first for first, last in trace.checkpointed_segments}
        acc, hacc = self.program.accum_ns, self.program.host_accum_ns
        for k in range(trace.micro_batches):  # and the adds of a later one
            for i, (layer, a) in enumerate(zip(trace.layers, plan.algos)):
                self._spend(self._hf[i], layer.id, f"{layer.id}:fwd")
                self._push(cs, new_op(cs, "fwd", layer.id, f"{layer.id}:fwd",
                                      layer.algos[a].fwd_ns))
            if not k:
                self._fwd_ops = (cs.last,)
            for i in range(len(trace.layers) - 1, -1, -1):
                layer = trace.layers[i]
                if own and i in own:  # the model's recompute: its time
                    for j in range(own[i], i + 1):
                        x = trace.layers[j]
                        self._spend(self._hf[j], x.id, f"{x.id}:recompute")
                        self._push(cs, new_op(cs, "recompute", x.id, f"{x.id}:recompute",
                                              x.algos[plan.algos[j]].fwd_ns))
                if k:
                    self._spend(self._hb[i] + hacc[i], layer.id, f"{layer.id}:bwd")
                    bwd = layer.algos[plan.algos[i]].bwd_ns + acc[i]
                else:
                    self._spend(self._hb[i], layer.id, f"{layer.id}:bwd")
                    bwd = layer.algos[plan.algos[i]].bwd_ns
                self._push(cs, new_op(cs, "bwd", layer.id, f"{layer.id}:bwd", bwd))
        yield from self._step()
        self.host_issue_ns = self.host_ns
