"""Parameters that live on the host, fetched to the GPU for the passes that need them.

NOTE [parameter offload]
ZeRO-Offload's parameter side (FSDP's CPU offload without sharding): with the optimizer on
the CPU the host holds every parameter's master copy, pinned, and steps it there, so the GPU
need not keep its own. A plan's ``params`` groups (``ParamGroup``: a block's weight layers)
have no weights on the GPU between their uses: each group is fetched before its forward
pass (issued at ``fwd_issue``, one block ahead) and freed after it, fetched again before its
backward pass (at ``bwd_issue``), and each weight freed once its gradient is made. A fetch is
allocated from the compute stream's pool when issued and copied behind everything the
compute stream was given so far; the group's first layer waits for its last copy. The CPU
step updates the host's copy in place, so nothing is copied back for these parameters. The
cost: the weights copied in twice a step (vdnnsim/gpu/runtime/params.py is the runtime).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ..trace.model import Trace
from ..units import transfer_ns
from .streams import _Op, new_op


@dataclass(frozen=True)
class ParamGroup:
    """Weights that move together (a block's)."""

    layers: tuple[int, ...]  # the layers (indices) whose weights are on the host
    first: int  # the group's first layer: its forward waits for the fetch
    last: int  # its last: the weights are freed after its forward; its backward (the
    # group's first to run) waits for the fetch
    fwd_issue: int  # the fetch for the forward is issued before this layer's forward
    bwd_issue: int  # and for the backward before this layer's backward


class ParamSchedule(NamedTuple):
    """What the host does for the plan's parameter groups, per layer index
    (NOTE [compile])."""

    layers: frozenset[str]  # layer ids whose weights live on the host
    weights: tuple[tuple[tuple[str, int], ...], ...]  # per group, (layer id, bytes)
    fwd_issue: dict[int, tuple[int, ...]]  # layer -> groups fetched before its forward
    fwd_wait: dict[int, int]  # layer -> the group its forward waits for
    last: dict[int, int]  # layer -> the group it is the last of: freed after its forward,
    # waited for by its backward (the group's first to run)
    bwd_issue: dict[int, tuple[int, ...]]
    bwd_free: frozenset[int]  # layers whose own weights are freed after their backward


def param_schedule(trace: Trace, groups: tuple[ParamGroup, ...]) -> ParamSchedule | None:
    """NOTE [parameter offload]: ``groups`` as the host walks them; None: no groups."""
    if not groups:
        return None
    layers = trace.layers
    weights = tuple(tuple((layers[i].id, layers[i].weight_bytes) for i in g.layers
                          if layers[i].weight_bytes) for g in groups)
    fwd_issue: dict[int, tuple[int, ...]] = {}
    bwd_issue: dict[int, tuple[int, ...]] = {}
    for k, g in enumerate(groups):
        fwd_issue[g.fwd_issue] = fwd_issue.get(g.fwd_issue, ()) + (k,)
        bwd_issue[g.bwd_issue] = bwd_issue.get(g.bwd_issue, ()) + (k,)
    return ParamSchedule(
        frozenset(x for w in weights for x, _ in w), weights, fwd_issue,
        {g.first: k for k, g in enumerate(groups)}, {g.last: k for k, g in enumerate(groups)},
        bwd_issue,
        frozenset(i for g in groups for i in g.layers if layers[i].weight_bytes))


def check_groups(trace: Trace, groups: tuple[ParamGroup, ...]) -> str | None:
    """What is wrong with ``groups`` on ``trace``, or None."""
    n, seen = len(trace.layers), set()
    for g in groups:
        if not (0 <= g.fwd_issue <= g.first <= g.last <= g.bwd_issue < n):
            return (f"parameter group {g.first}..{g.last} (fetched before layers "
                    f"{g.fwd_issue} and {g.bwd_issue}) is not ordered inside the trace")
        for i in g.layers:
            if not g.first <= i <= g.last or i in seen:
                return f"parameter group {g.first}..{g.last}: layer {i} outside it or twice"
            seen.add(i)
    return None


class ParamMoves:
    """The parameter fetches of a :class:`~.sim.Simulation` (a part of it)."""

    __slots__ = ()  # the attributes are the simulation's (Simulation.__slots__)

    def _params_before(self, issue: dict[int, tuple[int, ...]], wait: dict[int, int], i: int,
                       phase: str):
        """Before layer ``i``'s pass: the fetches issued there, and the wait of the group
        it is the first to read (a generator: a fetch's allocation may wait)."""
        layer = self.trace.layers[i]
        for k in issue.get(i, ()):
            yield from self._param_fetch(k, layer.id, phase)
        if i in wait:
            self._next_waits += self._param_wait(wait[i])
        if self.checks and layer.id in self.program.params.layers and \
                ("weights", layer.id) not in self.pool.live:
            from .invariants import InvariantViolation
            raise InvariantViolation(f"{phase} pass reads weights that are on the host",
                                     layer.id, f"{layer.id}:weights")

    def _param_fetch(self, k: int, layer: str, phase: str):
        """Fetch group ``k``'s weights (a generator: an allocation may wait)."""
        sched = self.program.params
        stream, cs = self._copy["h2d"], self.compute
        waits: tuple[_Op, ...] = (cs.last,) if cs.last is not None else ()
        last = None
        for wid, size in sched.weights[k]:
            op = new_op(stream, "param_fetch", wid, f"{wid}:weights",
                        self._h2d_ns.get(("weights", wid))
                        or self._param_copy_ns(wid, size), size, waits, "h2d")
            a = (("weights", wid), size, "weights", self._stamp(op, 0), layer, phase)
            if not self._take(*a):
                yield from self._alloc(*a)
            last = self._push(stream, op)
            self.param_fetched_bytes += size
        self._param_ready[k] = last

    def _param_copy_ns(self, wid: str, size: int) -> int:
        t = self._h2d_ns[("weights", wid)] = transfer_ns(size, self._h2d_bw, self._link_ns)
        return t

    def _param_wait(self, k: int) -> tuple[_Op, ...]:
        """What a pass that reads group ``k``'s weights waits for: their last copy."""
        op = self._param_ready.pop(k, None)
        return (op,) if op is not None else ()

    def _param_free_group(self, k: int, stamp: int) -> None:
        for wid, _ in self.program.params.weights[k]:
            self.pool.free(("weights", wid), stamp)
