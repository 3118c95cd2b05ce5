"""The exact planner: a mixed-integer linear program over keep / offload / recompute and
each layer's algorithm, solved by HiGHS (``scipy.optimize.milp``), every answer checked
by the engine (``vdnnsim plan --method milp``).

NOTE [milp planner]
For one *structure* (the network, possibly batch-split, and a
partition of its layers into consecutive chunks that may be checkpointed), the program
chooses

- ``a[i,k]``: layer i runs algorithm k (one per layer);
- ``o[b]``: buffer b (one of vDNN's candidates, ``offload_sets``) is copied to the host by
  its last forward reader and brought back by a prefetch in a fixed slot: the backward
  pass of the layer just above its first backward reader (slots are handed out from the
  bottom, a layer a slot; one that finds none is fetched on demand);
- ``c[s]``: chunk s is a checkpointed segment; a buffer the segment
  drops or rereads is never offloaded (``o[b] + c[s] <= 1``);

to minimise the sum over layers of ``max(compute, copies)`` for each forward and backward
pass (the end-of-layer synchronisation of the paper, which the planner's plans keep) plus
the forward time run again in checkpointed segments, subject to memory at every point of
the iteration (each layer's forward and backward pass, and each layer's recompute) being
within the budget. Memory is this module's own account of the buffers' lifetimes
under the trace's semantics: every buffer, gradient, weight gradient
and workspace as an interval of the iteration, each decision adding or removing bytes on
intervals of its own; so the program is linear and exact *for that account*.

The account is not the engine: the caching allocator's blocks and segments, copies
still in flight, the host running ahead. So each solution is run by the engine, and
where it runs out of memory the point that failed gets a margin of what was missing
(a lazy cut) and the program is solved again, up to ``ROUNDS`` times. The planner's
answer is the engine's memory and time; the program's objective is printed beside it.

What is exact and what is enumerated: for a given structure the program is solved to
optimality (HiGHS, no gap) over every combination of algorithms, offloads and chunks;
the structures themselves (no split or the greedy planner's split candidates; chunk
grids of 2 to 32 chunks) are enumerated, and the fastest engine-checked answer over
them is returned. Chunk boundaries are not variables (a free segmentation is quadratic
in variables and cubic in constraints); an input read by two checkpointed chunks is
counted once per chunk (a conservative over-count).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..engine import aligned
from ..engine import Liveness, Plan, liveness
from ..engine import semantics_for
from ..engine import replay
from ..engine import optimizer_state
from ..engine import checkpoint_buffers, free_points, keepers
from ..hardware import GPU
from ..policies.plan import offload_sets
from .mip import Program
from .split import split_structures
from ..trace.model import Trace
from ..units import GiB, transfer_ns

ROUNDS = 12  # lazy cuts per structure before it is given up
TIME_LIMIT_S = 20.0  # per program; a program not solved to optimality says so
MAX_LAYERS = 600  # above this the planner's heuristic is used


@dataclass
class Solution:
    """One structure's answer: the plan, the program's objective and what the engine said."""

    plan: Plan | None
    objective_ns: float  # the program's step time (its own time model)
    engine_ns: int | None  # the engine's, None where it did not fit
    rounds: int
    optimal: bool
    note: str = ""


GIB = float(GiB)
MS = 1e6


class Account:
    """The memory of one iteration as intervals over positions:
    layer i's forward pass at ``i``, the end of the forward pass at ``n - 0.5``, layer j's
    backward pass at ``2n - 1 - j`` and the moment before it at ``2n - 1.5 - j``."""

    def __init__(self, trace: Trace, lv: Liveness | None = None,
                 optimizer_offload: bool = False):
        self.trace = trace
        self.lv = lv = lv or liveness(trace)
        self.sem = sem = semantics_for(trace)
        n = self.n = len(trace.layers)
        self.held = {b for b in lv.size if b not in lv.producer} if sem.holds_inputs else set()
        self.size = {b: aligned(s) if s else 0 for b, s in lv.size.items()}
        self.const: list[tuple[int, float, float]] = []  # (bytes, first, last) positions
        end = 2 * n
        # with the optimizer on the CPU its state (in the resident bytes) is not the GPU's
        resident = trace.resident_bytes - (sum(optimizer_state(trace)) if optimizer_offload
                                           else 0)
        if resident:
            self.const.append((aligned(resident), -1, end))
        for i, x in enumerate(trace.layers):
            if x.weight_bytes:
                w = aligned(x.weight_bytes)
                self.const.append((w, -1, end))
                # its gradient, to the step; with the optimizer on the CPU
                # copied out after its backward pass: counted to the next layer's
                self.const.append((w, self.bwd(i) if sem.per_layer_weights else -1,
                                   self.bwd(i) + 1 if optimizer_offload else end))
        fwd_free, bwd_free = free_points(lv, self.held)
        self.freed_f = {b: at for at, bs in fwd_free.items() for b in bs}
        self.freed_b = {b: at for at, bs in bwd_free.items() for b in bs}
        self.span: dict[str, tuple[float, float]] = {}  # buffer -> its base interval
        for b, size in self.size.items():
            if not size:
                continue
            start = lv.producer.get(b, -1)
            if b in self.freed_f:
                stop = float(self.freed_f[b])
            elif b in self.freed_b:
                stop = float(self.bwd(self.freed_b[b]))
            elif b in lv.outputs and not lv.kept(b) and b not in self.held:
                stop = n - 0.5
            else:
                stop = end
            self.span[b] = (start, stop)
            self.const.append((size, start, stop))
        gkey, gsize, gneeds = sem.grad_keys(trace, lv)
        first: dict[str, float] = {}
        for b in lv.outputs:
            g = gkey[b]
            if gneeds[g]:
                first[g] = n - 0.5
        for i in range(n - 1, -1, -1):
            for t in trace.layers[i].inputs:
                g = gkey[t]
                if gneeds[g] and g not in first:
                    first[g] = self.bwd(i)
        freed = {}
        for i, x in enumerate(trace.layers):
            for t in x.outputs:
                if gkey[t] == t:
                    freed[t] = self.bwd(i)
        for g, at in first.items():
            if gsize[g]:
                self.const.append((aligned(gsize[g]), at, freed.get(g, end)))

    def bwd(self, j: int) -> float:
        return 2 * self.n - 1 - j

    def before_bwd(self, j: int) -> float:
        return 2 * self.n - 1.5 - j


def chunk_grid(first: int, n: int, k: int) -> tuple[tuple[int, int], ...]:
    """Layers first..n-1 in k consecutive chunks of (n - first) // k layers, the last
    taking the rest (checkpoint_sequential's sizes, every chunk a candidate)."""
    m = n - first
    size = m // k
    if size < 1:
        return ()
    out = [(first + s * size, first + (s + 1) * size - 1) for s in range(k - 1)]
    out.append((first + (k - 1) * size, n - 1))
    return tuple(out)


def prefetch_slots(trace: Trace, lv: Liveness, cands: tuple[tuple[str, ...], ...]
                   ) -> tuple[dict[int, int], dict[int, int]]:
    """Per offloading layer, the backward pass that prefetches its
    buffers (``slot``) or, where no slot is left, the layer that fetches them on demand."""
    keep = keepers(trace, lv)
    n = len(trace.layers)
    need = {L: max(max(keep[b]) for b in c) for L, c in enumerate(cands) if c}
    taken: set[int] = set()
    slot: dict[int, int] = {}
    demand: dict[int, int] = {}
    for L in sorted(need, key=lambda x: (need[x], x)):
        j = need[L] + 1
        while j in taken:
            j += 1
        if j <= n - 1:
            taken.add(j)
            slot[L] = j
        else:
            demand[L] = need[L]
    return slot, demand


@dataclass
class Built:
    """A program and what its variables mean."""

    program: Program
    account: Account
    algo_vars: list[list[tuple[int, int]]]  # per layer: (variable, algorithm index)
    chunk_vars: list[int]  # per chunk
    off_vars: dict[str, int]  # per candidate buffer
    cands: tuple[tuple[str, ...], ...]  # vDNN's candidates, per layer
    slot: dict[int, int]  # offloading layer -> the backward pass that prefetches it
    # point -> (its memory row, its constant GiB, the chunk variable that guards it and
    # the guard's big-M coefficient)
    mem_rows: dict[tuple, tuple[int, float, int | None, float]]
    chunks: tuple[tuple[int, int], ...]

    def assignment(self, algos, offloaded: set[str], segs) -> np.ndarray:
        """The binary variables of a plan (continuous ones at zero)."""
        x = np.zeros(len(self.program.names))
        for vs, a in zip(self.algo_vars, algos):
            for v, k in vs:
                x[v] = float(k == a)
        for b, v in self.off_vars.items():
            x[v] = float(b in offloaded)
        for v, c in zip(self.chunk_vars, self.chunks):
            x[v] = float(c in segs)
        return x

    def memory_bytes(self, x: np.ndarray) -> dict[tuple, float]:
        """The account's bytes at each point under ``x``; a recompute
        point only where its chunk is checkpointed."""
        out = {}
        rows = self.program.rows
        for key, (r, const, guard, big) in self.mem_rows.items():
            if guard is not None and x[guard] < 0.5:
                continue
            used = sum(c * x[v] for v, c in rows[r].items())
            out[key] = (const + used - big * (guard is not None)) * GIB
        return out


class _Builder:
    """The steps of ``build``, in the order it runs them (variables and rows are numbered
    in that order); the points of the account and their constant GiB are set up first."""

    def __init__(self, trace: Trace, gpu: GPU, acc: Account,
                 chunks: tuple[tuple[int, int], ...]):
        self.trace, self.acc, self.chunks = trace, acc, chunks
        self.lv, self.n = acc.lv, acc.n
        self.layers = trace.layers
        self.p = Program()
        self.link = gpu.link
        # points: key -> position
        points: dict[tuple, float] = {}
        for i in range(self.n):
            points[("fwd", i)] = float(i)
            points[("bwd", i)] = acc.bwd(i)
        for first, last in chunks:
            points[("pre", last)] = acc.before_bwd(last)
        self.keys = keys = list(points)
        pos = np.array([points[k] for k in keys])
        self.order = np.argsort(pos, kind="stable")
        self.spos = pos[self.order]
        self.index = {k: r for r, k in enumerate(keys)}
        self.base = np.zeros(len(keys))
        self.var_terms: list[dict[int, float]] = [{} for _ in keys]
        for size, a, b in acc.const:
            self.base[self.covered(a, b)] += size / GIB

    def covered(self, a: float, b: float, open_a: bool = False, open_b: bool = False
                ) -> np.ndarray:
        lo = np.searchsorted(self.spos, a, side="right" if open_a else "left")
        hi = np.searchsorted(self.spos, b, side="left" if open_b else "right")
        return self.order[lo:hi]

    def add(self, v: int, coef: float, rows) -> None:
        for r in rows:
            d = self.var_terms[r]
            d[v] = d.get(v, 0.0) + coef

    def algorithms(self) -> None:
        """One variable per algorithm of a layer that has several; workspaces."""
        p, base, index = self.p, self.base, self.index
        self.algo_vars: list[list[tuple[int, int]]] = []  # per layer: (var, algo index)
        for i, x in enumerate(self.layers):
            if len(x.algos) == 1:
                self.algo_vars.append([])
                a = x.algos[0]
                if a.fwd_workspace_bytes:
                    base[index[("fwd", i)]] += aligned(a.fwd_workspace_bytes) / GIB
                if a.bwd_workspace_bytes:
                    base[index[("bwd", i)]] += aligned(a.bwd_workspace_bytes) / GIB
                continue
            vs = []
            for k, a in enumerate(x.algos):
                v = p.var(f"algo[{x.id},{a.name}]", True)
                vs.append((v, k))
                if a.fwd_workspace_bytes:
                    self.add(v, aligned(a.fwd_workspace_bytes) / GIB, [index[("fwd", i)]])
                if a.bwd_workspace_bytes:
                    self.add(v, aligned(a.bwd_workspace_bytes) / GIB, [index[("bwd", i)]])
            p.row({v: 1.0 for v, _ in vs}, 1.0, 1.0)
            self.algo_vars.append(vs)

    def fwd_expr(self, i: int) -> tuple[dict[int, float], float]:
        x = self.layers[i]
        if not self.algo_vars[i]:
            return {}, x.algos[0].fwd_ns / MS
        return {v: x.algos[k].fwd_ns / MS for v, k in self.algo_vars[i]}, 0.0

    def bwd_expr(self, i: int) -> tuple[dict[int, float], float]:
        x = self.layers[i]
        if not self.algo_vars[i]:
            return {}, x.algos[0].bwd_ns / MS
        return {v: x.algos[k].bwd_ns / MS for v, k in self.algo_vars[i]}, 0.0

    def checkpoints(self) -> None:
        """One variable per chunk: the bytes it drops and rereads, and its forward again."""
        p, acc, lv, layers = self.p, self.acc, self.lv, self.layers
        self.chunk_vars = [p.var(f"checkpoint[{layers[f].id}..{layers[l_].id}]", True)
                           for f, l_ in self.chunks]
        self.no_offload: dict[str, list[int]] = {}
        self.chunk_sets = []
        for s, (first, last) in enumerate(self.chunks):
            v = self.chunk_vars[s]
            dropped, inputs = checkpoint_buffers(self.trace, lv, first, last, acc.held)
            self.chunk_sets.append(dropped)
            for b in dropped | inputs:
                self.no_offload.setdefault(b, []).append(v)
            for b in dropped:
                if acc.size[b]:
                    start = lv.forward_free(b)
                    self.add(v, -acc.size[b] / GIB,
                             self.covered(start, acc.bwd(last), True, True))
            for b in inputs:
                if not acc.size[b] or b not in acc.span:
                    continue
                stop = acc.span[b][1]
                if b in acc.freed_f or (b in acc.freed_b and acc.freed_b[b] > first):
                    self.add(v, acc.size[b] / GIB,
                             self.covered(stop, acc.bwd(first), True, False))
            # its forward again: a lower bound on the time that holds only when chosen
            t = p.var(f"recompute_ms[{layers[first].id}]", False, 1.0)
            coefs: dict[int, float] = {t: 1.0}
            const = 0.0
            big = 0.0
            for j in range(first, last + 1):
                e, c0 = self.fwd_expr(j)
                for k, val in e.items():
                    coefs[k] = coefs.get(k, 0.0) - val
                const += c0
                big += max(a.fwd_ns for a in layers[j].algos) / MS
            coefs[v] = coefs.get(v, 0.0) - big
            p.row(coefs, const - big, np.inf)  # t - sum fwd - big*c >= -big + const

    def offloads(self) -> None:
        """One variable per candidate buffer: its bytes away and its copies' times."""
        p, acc, lv, link = self.p, self.acc, self.lv, self.link
        d2h = link.d2h_bw_bytes_per_s
        h2d = link.h2d_bw_bytes_per_s
        self.cands = cands = offload_sets(self.trace, lv, conv_only=False)
        slot, demand = prefetch_slots(self.trace, lv, cands)
        self.slot = slot
        self.off_vars: dict[str, int] = {}
        self.out_xfer: dict[int, dict[int, float]] = {}  # layer -> var -> ms of its offloads
        self.pf_xfer: dict[int, dict[int, float]] = {}  # backward layer -> var -> ms prefetched
        self.od_xfer: dict[int, dict[int, float]] = {}  # backward layer -> var -> ms on demand
        for L, c in enumerate(cands):
            for b in c:
                size = lv.size[b]
                v = self.off_vars[b] = p.var(f"offload[{b}]", True)
                for cv in self.no_offload.get(b, ()):
                    p.row({v: 1.0, cv: 1.0}, -np.inf, 1.0)
                back = acc.bwd(slot[L]) if L in slot else acc.bwd(demand[L])
                self.add(v, -acc.size[b] / GIB, self.covered(L, back, True, True))
                self.out_xfer.setdefault(L, {})[v] = \
                    transfer_ns(size, d2h, link.latency_ns) / MS
                ms = transfer_ns(size, h2d, link.latency_ns) / MS
                if L in slot:
                    self.pf_xfer.setdefault(slot[L], {})[v] = ms
                else:
                    self.od_xfer.setdefault(demand[L], {})[v] = ms

    def times(self) -> None:
        """Each pass at least its compute and at least its copies."""
        p, layers = self.p, self.layers
        for i in range(self.n):
            t = p.var(f"fwd_ms[{layers[i].id}]", False, 1.0)
            e, c0 = self.fwd_expr(i)
            p.row({t: 1.0, **{k: -val for k, val in e.items()}}, c0, np.inf)
            if i in self.out_xfer:
                p.row({t: 1.0, **{k: -val for k, val in self.out_xfer[i].items()}}, 0.0,
                      np.inf)
            u = p.var(f"bwd_ms[{layers[i].id}]", False, 1.0)
            e, c0 = self.bwd_expr(i)
            od = self.od_xfer.get(i, {})
            row = {u: 1.0}
            for k, val in list(e.items()) + list(od.items()):
                row[k] = row.get(k, 0.0) - val
            p.row(row, c0, np.inf)
            if i in self.pf_xfer:
                row = {u: 1.0}
                for k, val in list(self.pf_xfer[i].items()) + list(od.items()):
                    row[k] = row.get(k, 0.0) - val
                p.row(row, 0.0, np.inf)

    def memory_rows(self, budget_gib: float, margin: dict[tuple, float]
                    ) -> dict[tuple, tuple[int, float, int | None, float]]:
        """A row per forward and backward point: its bytes within ``budget_gib``."""
        mem_rows: dict[tuple, tuple[int, float, int | None, float]] = {}
        for key in self.keys:
            if key[0] == "pre":
                continue
            r = self.index[key]
            hi = budget_gib - margin.get(key, 0.0) / GIB - self.base[r]
            mem_rows[key] = (self.p.row(dict(self.var_terms[r]), -np.inf, hi),
                             float(self.base[r]), None, 0.0)
        return mem_rows

    def recompute_rows(self, budget_gib: float, margin: dict[tuple, float],
                       mem_rows: dict[tuple, tuple[int, float, int | None, float]]) -> None:
        """Recompute points: the moment before the segment's last layer's backward pass,
        plus what the recompute has made so far and its layer's workspace."""
        acc, lv, layers, base = self.acc, self.lv, self.layers, self.base
        for s, (first, last) in enumerate(self.chunks):
            v = self.chunk_vars[s]
            r = self.index[("pre", last)]
            dropped = self.chunk_sets[s]
            big = float(base.max() + sum(acc.size.values()) / GIB + 64)
            made = 0.0
            transient: dict[str, int] = {}
            for j in range(first, last + 1):
                x = layers[j]
                for t in x.outputs:
                    if lv.root[t] != t or not acc.size[t]:
                        continue
                    if t in dropped:
                        made += acc.size[t] / GIB
                    else:  # made again as a new tensor, freed after its last reader
                        readers = [k for k in range(j + 1, last + 1)
                                   if t in {lv.root[y] for y in layers[k].inputs}]
                        transient[t] = max(readers, default=j)
                live = sum(acc.size[t] for t, until in transient.items() if until >= j) / GIB
                coefs = dict(self.var_terms[r])
                ws_const = 0.0
                if self.algo_vars[j]:
                    for av, k in self.algo_vars[j]:
                        if x.algos[k].fwd_workspace_bytes:
                            coefs[av] = coefs.get(av, 0.0) + aligned(
                                x.algos[k].fwd_workspace_bytes) / GIB
                elif x.algos[0].fwd_workspace_bytes:
                    ws_const = aligned(x.algos[0].fwd_workspace_bytes) / GIB
                coefs[v] = coefs.get(v, 0.0) + big
                key = ("recompute", j)
                const = float(base[r]) + made + live + ws_const
                hi = budget_gib - margin.get(key, 0.0) / GIB - const + big
                mem_rows[key] = (self.p.row(coefs, -np.inf, hi), const, v, big)
                transient = {t: u for t, u in transient.items() if u > j}


def build(trace: Trace, gpu: GPU, budget_bytes: int, chunks: tuple[tuple[int, int], ...],
          margin: dict[tuple, float], optimizer_offload: bool = False) -> Built:
    """The program of NOTE [milp planner] for ``trace`` with checkpointable ``chunks``;
    ``margin``: bytes kept free at a point (lazy cuts), by point key;
    ``optimizer_offload``: the weight gradients leave as they are made."""
    acc = Account(trace, optimizer_offload=optimizer_offload)
    b = _Builder(trace, gpu, acc, chunks)
    b.algorithms()
    b.checkpoints()
    b.offloads()
    b.times()
    budget_gib = budget_bytes / GIB
    mem_rows = b.memory_rows(budget_gib, margin)
    b.recompute_rows(budget_gib, margin, mem_rows)
    return Built(b.p, acc, b.algo_vars, b.chunk_vars, b.off_vars, b.cands, b.slot, mem_rows,
                 chunks)


def solve_structure(trace: Trace, gpu: GPU, budget_bytes: int, chunks: tuple[tuple[int, int], ...],
                    split: tuple = (), time_limit_s: float = TIME_LIMIT_S,
                    rounds: int = ROUNDS, bound_ns: float = math.inf,
                    allocator: Any = None, optimizer_offload: bool = False,
                    links: tuple[tuple[int, ...], ...] = (), tensors: bool = False
                    ) -> Solution:
    """Solve, check with the engine, cut where it ran out, again.
    ``bound_ns``: the best engine time found so far; a program whose optimum is no faster
    is given up (a cut only ever makes the optimum slower). ``allocator``: the caching
    allocator's settings the engine checks under;
    ``optimizer_offload``: the optimizer on the CPU: the
    program counts each weight gradient only to the next layer's backward pass (it is
    copied out as it is made), and the engine checks with the step on the CPU.
    ``links``: groups of chunks checkpointed together or not at all (one module's calls);
    ``tensors``: the plan is checked as the tensor runtime runs it (NOTE [tensor milp])."""
    lv = liveness(trace)
    chunk_at = {j: s for s, (f, l_) in enumerate(chunks) for j in range(f, l_ + 1)}
    last = Solution(None, math.inf, None, 0, False, "infeasible")
    built = build(trace, gpu, budget_bytes, chunks, {}, optimizer_offload)  # a cut moves one
    # row's bound
    prog, algo_vars, chunk_vars = built.program, built.algo_vars, built.chunk_vars
    for group in links:
        for a, b in zip(group, group[1:]):
            prog.row({chunk_vars[a]: 1.0, chunk_vars[b]: -1.0}, 0.0, 0.0)
    off_vars, cands, slot = built.off_vars, built.cands, built.slot
    for rnd in range(1, rounds + 1):
        x, optimal = prog.solve(time_limit_s)
        if x is None:
            last.note = ("no solution within the budget" if rnd == 1 else
                         f"no solution after {rnd - 1} cut(s)")
            last.rounds = rnd
            return last
        algos = tuple(max(vs, key=lambda vk: x[vk[0]])[1] if vs else 0 for vs in algo_vars)
        chosen = {b for b, v in off_vars.items() if x[v] > 0.5}
        segs = tuple(c for c, v in zip(chunks, chunk_vars) if x[v] > 0.5)
        offload = tuple(tuple(b for b in c if b in chosen) for c in cands)
        prefetch = [-1] * len(trace.layers)
        for L, j in slot.items():
            if offload[L]:
                prefetch[j] = L
        if tensors:  # no synchronisation; each copy paid for, not each layer
            plan = Plan("tensors", "layer_wise", algos, offload, tuple(prefetch), sync=False,
                        runtime="tensors", recompute=segs, optimizer_offload=optimizer_offload)
        else:
            plan = Plan("planned", "layer_wise", algos, offload, tuple(prefetch), True,
                        runtime=True, recompute=segs,
                        trace=trace if (segs or split) else None, split=split)
        objective = float(np.dot(prog.cost, x)) * MS
        if optimal and objective >= bound_ns:
            return Solution(None, objective, None, rnd, optimal,
                            "pruned: no faster than the best plan so far")
        checked = replace(plan, optimizer_offload=True) if optimizer_offload else plan
        sim = replay(trace, gpu, checked, budget_bytes, lv, record_ops=False, stop_at_oom=True,
                     allocator=allocator)
        oom = sim.oom
        if oom is None:
            return Solution(plan, objective, sim.end_ns, rnd, optimal)
        last = Solution(plan, objective, None, rnd, optimal, "the engine ran out of memory")
        i = trace.layer_index(oom.layer) if oom.layer else None
        if i is None:
            return Solution(None, objective, None, rnd, optimal,
                            f"out of memory before the first layer ({oom.tensor})")
        if oom.phase == "forward":
            key = ("fwd", i)
        elif oom.phase == "recompute" and i in chunk_at:
            key = ("recompute", i)
        else:
            key = ("bwd", i)
        missing = max(oom.requested_bytes - oom.free_bytes,
                      oom.requested_bytes - oom.largest_free_bytes, 2**21)
        prog.hi[built.mem_rows[key][0]] -= missing / GIB
    last.note = f"still out of memory after {rounds} cut(s)"
    return last


@dataclass
class Report:
    solutions: list[tuple[str, Solution]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def simulations(self) -> int:
        return sum(s.rounds for _, s in self.solutions)


def grids(trace: Trace, start: int = 0) -> list[int]:
    """The chunk counts tried for layers start..n-1."""
    m = len(trace.layers) - start
    ks = sorted({2, 4, 8, 16, round(m ** 0.5)})
    return [k for k in ks if 2 <= k <= m]


def milp_plan(trace: Trace, gpu: GPU, budget_bytes: int, time_limit_s: float = TIME_LIMIT_S,
              allocator: Any = None, optimizer_offload: bool = False
              ) -> tuple[Plan | None, int | None, Report]:
    """The fastest engine-checked answer over the structures, each
    checked under the caching allocator's settings ``allocator`` (None: PyTorch's
    defaults)."""
    t0 = time.perf_counter()
    report = Report()
    best: tuple[Plan, int] | None = None

    def consider(tag: str, tr: Trace, chunks, split=()):
        nonlocal best
        sol = solve_structure(tr, gpu, budget_bytes, chunks, split, time_limit_s,
                              bound_ns=best[1] if best else math.inf, allocator=allocator,
                              optimizer_offload=optimizer_offload)
        report.solutions.append((tag, sol))
        if sol.engine_ns is not None and (best is None or sol.engine_ns < best[1]):
            best = (sol.plan, sol.engine_ns)

    n = len(trace.layers)
    consider("no checkpointing", trace, ())
    for k in grids(trace) if not trace.checkpointed else ():  # (its own: stepopts.py)
        consider(f"{k} chunks", trace, chunk_grid(0, n, k))
    for sp, st, per_part, rest in split_structures(trace, gpu):
        first, last, parts = sp
        tag = f"split {first}..{last} in {parts}"
        consider(tag, st, per_part, (sp,))
        for k in grids(st, rest) if not trace.checkpointed else ():
            consider(f"{tag}, {k} chunks after it", st,
                     per_part + chunk_grid(rest, len(st.layers), k), (sp,))
    report.seconds = time.perf_counter() - t0
    if best is None:
        return None, None, report
    return best[0], best[1], report
