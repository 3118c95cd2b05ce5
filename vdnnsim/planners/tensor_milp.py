"""The exact tensor planner: NOTE [milp planner]'s program over an op-by-op trace, its
checkpointable chunks the calls of modules.

NOTE [tensor milp]
Where an op-by-op trace has at most MAX_LAYERS ops, ``plan_tensors`` also solves the
program of NOTE [milp planner] over it: every buffer vDNN could offload a candidate (not
only those of MIN_BYTES), and as the chunks it may checkpoint, the calls of modules, all
calls of one module a single choice (their variables equal). Structures, each solved to
optimality: none checkpointed; the blocks; for each depth of the module tree, the modules
there whose calls do not overlap. Each answer is checked by the engine as the tensor runtime
runs it (no synchronisation, each copy paid for), an out-of-memory point cut and the program
solved again; the fastest checked answer is set beside the heuristic's. Exact for its
account, per structure; the structures themselves are enumerated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..engine import Plan
from ..hardware import GPU
from ..trace.model import Trace
from .milp import MAX_LAYERS, TIME_LIMIT_S, solve_structure

__all__ = ["MAX_LAYERS", "Exact", "solve_calls"]


@dataclass
class Exact:
    """The fastest engine-checked answer over the structures (``plan`` None where none
    fits), with the modules it checkpoints and a line per structure."""

    plan: Plan | None = None
    engine_ns: int = 0
    modules: tuple[str, ...] = ()
    steps: list[str] = field(default_factory=list)
    simulations: int = 0


def solve_calls(trace: Trace, gpu: GPU, budget_bytes: int,
                structures: Sequence[tuple[str, Sequence[Any]]], optimizer_offload: bool,
                settings: Any, time_limit_s: float = TIME_LIMIT_S) -> Exact:
    """NOTE [tensor milp] for one place of the optimizer; ``structures``: (name, the module
    calls it may checkpoint, each with ``path`` and ``runs``)."""
    out = Exact()
    for name, calls in structures:
        chunks, links, owner = [], [], []
        for c in sorted(calls, key=lambda c: c.runs[0]):
            links.append(tuple(range(len(chunks), len(chunks) + len(c.runs))))
            chunks.extend(c.runs)
            owner.extend([c.path] * len(c.runs))
        order = sorted(range(len(chunks)), key=lambda k: chunks[k])
        where = {k: n for n, k in enumerate(order)}
        sol = solve_structure(
            trace, gpu, budget_bytes, tuple(chunks[k] for k in order),
            time_limit_s=time_limit_s, bound_ns=out.engine_ns if out.plan else math.inf,
            allocator=settings, optimizer_offload=optimizer_offload,
            links=tuple(tuple(where[k] for k in g) for g in links if len(g) > 1),
            tensors=True)
        out.simulations += sol.rounds
        what = (f"exact program, {name} ({len(calls)} module(s) it may checkpoint)"
                + (" (optimizer on the CPU)" if optimizer_offload else ""))
        if sol.engine_ns is None:
            out.steps.append(f"{what}: {sol.note}")
            continue
        plan = sol.plan
        paths = tuple(dict.fromkeys(owner[k] for k in range(len(chunks))
                                    if chunks[k] in plan.recompute))
        out.steps.append(f"{what}: {sum(map(len, plan.offload))} offloaded, {len(paths)} "
                         f"checkpointed: {sol.engine_ns / 1e6:.1f} ms"
                         + ("" if sol.optimal else " (not proven optimal in its time)"))
        if out.plan is None or sol.engine_ns < out.engine_ns:
            out.plan, out.engine_ns, out.modules = plan, sol.engine_ns, paths
    return out
