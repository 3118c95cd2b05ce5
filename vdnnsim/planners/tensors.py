"""Tensor-granular plans of op-by-op traces (``vdnnsim plan --method tensors``).

NOTE [tensor plans]
Each buffer a backward pass keeps is kept, offloaded (out after its last forward reader,
back before its first backward reader, NOTE [tensor prefetch]) or recomputed inside a
checkpointed module call (whole calls: the runtime checkpoints modules). Every answer is
the engine's replay under the budget. Offloads go in the order made; calls come from one
of three chains: all calls by forward time per byte dropped (a module replacing those in
it), the blocks in order, or the blocks from the last (the block planner's mixes). Tried:
the fewest offloads that fit, the fewest checkpointed, and for a grid of offload counts
the fewest checkpointed with them (bisection, fitting taken as monotone); the fastest
wins, the optimizer on the CPU weighed where its step is calibrated. Only where none fits,
the same again with each prefetch one layer ahead (the backward may wait for the link).
A heuristic: no claim of optimality.
"""

from __future__ import annotations

import bisect

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..engine import Plan, allocator_settings, checkpoint_buffers, keepers, liveness, replay
from ..engine import cpu_step_calibrated
from ..errors import ConfigError
from ..hardware import GPU, _capacity
from ..policies.plan import offload_sets
from .greedy import OP_LAYERS, layer_names, plan_to_dict
from .tensor_milp import MAX_LAYERS, solve_calls
from ..trace.model import Trace

MIN_BYTES = 1 << 20  # buffers smaller than this are kept: their copies cost more than they free
MIX_GRID = (1 / 8, 1 / 4, 1 / 2, 3 / 4)  # offload counts tried with checkpointed calls
OUTSIDE = "<outside>"
MAX_SHARE = 1 / 2  # a module running more of the step's ops is not checkpointed whole

# NOTE [plan margin]
# A plan that fills its budget in the engine fails on the GPU by the engine's error: where
# the step allocates a little more than its trace (cuDNN's workspaces, which meta-device
# traces lacked then; peak allocated 0.5-3.9% over on the H100), the caching allocator meets the
# cap, frees its cache and synchronises every step (10-15 times a step), and the host
# becomes the limit (docs/beyond-vdnn.md, "A third loan"). So `vdnnsim plan --method
# tensors` checks its plans under the budget less PLAN_MARGIN of it, the largest error
# measured, and the plan file keeps the budget as the run's cap and says the margin
# (margin_bytes); the block plan it is weighed against gets the same. Other methods plan
# at the budget unless given a margin (--margin).
PLAN_MARGIN = 0.04


@dataclass(frozen=True)
class ModuleCall:
    """A module's calls in the trace: the op ranges it runs (one per call)."""

    path: str
    runs: tuple[tuple[int, int], ...]
    drops: int  # bytes its checkpointing drops
    cost_ns: int  # forward time it runs again


@dataclass
class TensorPlan:
    """What ``plan_tensors`` found."""

    fits: bool
    plan: Plan | None = None
    peak_memory_bytes: int = 0
    iteration_time_ns: int = 0
    offloaded: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    optimizer_offload: bool = False
    simulations: int = 0
    steps: list[str] = field(default_factory=list)


def op_trace(trace: Trace) -> bool:
    """An op-by-op trace (NOTE [plan layer names]): its layers are ATen ops."""
    return layer_names(trace) == OP_LAYERS


def offload_candidates(trace: Trace, min_bytes: int = MIN_BYTES) -> list[tuple[int, str]]:
    """(layer, buffer): vDNN's offloads (a kept buffer copied by its last forward reader;
    never the batch or autocast's weight casts), at least ``min_bytes``, in forward order."""
    lv = liveness(trace)
    return [(i, b) for i, bs in enumerate(offload_sets(trace, lv, False)) for b in bs
            if lv.size[b] >= min_bytes]


def module_calls(trace: Trace, whole: bool = False) -> list[ModuleCall]:
    """Every module (by path, not the model itself, nor, unless ``whole``, one running more
    than MAX_SHARE of the ops) whose checkpointing drops something, cheapest forward time
    per byte dropped first."""
    runs: dict[str, list[list[int]]] = {}
    prev: set[str] = set()
    for i, layer in enumerate(trace.layers):
        path = layer.attrs.get("module", OUTSIDE)
        parts = [] if path in (OUTSIDE, "") else path.split(".")
        here = {".".join(parts[:k]) for k in range(1, len(parts) + 1)}
        here.difference_update(layer.attrs.get("uncalled", ()))  # never called: no checkpoint
        for p in here:
            if p in prev and runs[p][-1][1] == i - 1:
                runs[p][-1][1] = i
            else:
                runs.setdefault(p, []).append([i, i])
        prev = here
    lv = liveness(trace)
    keep = trace.memo("keepers", lambda: keepers(trace, lv))
    held = {b for b, t in trace.buffers.items() if t.kind == "input"}
    # a buffer is dropped by a segment that holds its producer and every backward keeper
    spans = sorted((min(p, *keep[b]), max(p, *keep[b]), lv.size[b])
                   for b, p in lv.producer.items()
                   if b in keep and b not in held and b not in lv.outputs)
    los = [s[0] for s in spans]
    fwd = [layer.algos[a].fwd_ns for layer, a in zip(trace.layers, trace.fastest_algos)]
    out = []
    for path, rs in runs.items():
        drops = cost = 0
        for first, last in rs:
            for lo, hi, size in spans[bisect.bisect_left(los, first):
                                      bisect.bisect_right(los, last)]:
                if hi <= last:
                    drops += size
            cost += sum(fwd[first:last + 1])
        if any(trace.checkpoints_any(a, b) for a, b in rs):
            continue  # the model checkpoints it, or some of it, itself (stepopts.py)
        if drops and (whole or sum(b - a + 1 for a, b in rs) <= len(trace.layers) * MAX_SHARE):
            out.append(ModuleCall(path, tuple(map(tuple, rs)), drops, cost))
    out.sort(key=lambda c: (c.cost_ns / c.drops, -c.drops, c.path))
    return out


def block_calls(trace: Trace) -> list[ModuleCall]:
    """The trace's blocks (NOTE [blocks]) as module calls in forward order: checkpointing
    the first r of them is the block planner's recompute plan."""
    from ..policies.blocks import block_regions

    by_path = {c.path: c for c in module_calls(trace, whole=True)}
    out = []
    for region in block_regions(trace)[1:-1]:
        path = trace.layers[region[0]].attrs.get("block_path") if region else None
        c = by_path.get(path)  # a block's call, which its region may outlast (a residual
        if c is not None and len(c.runs) == 1 and c.runs[0][0] == region[0] \
                and c.runs[0][1] <= region[-1]:  # add after it)
            out.append(c)
    return out


def recompute_order(calls: list[ModuleCall]) -> list[ModuleCall]:
    """The checkpointed calls' growth, one module at a time in ``calls``' order: a module
    that holds modules taken before it replaces them (it drops all they drop and more); one
    inside a module taken, or meeting one without holding it, is passed over. The first r
    steps' modules are :func:`taken` (r)."""
    out: list[ModuleCall] = []
    chosen: list[ModuleCall] = []
    for c in calls:
        meets = [d for d in chosen if any(_overlap(a, b) for a in c.runs for b in d.runs)]
        if all(_holds(c, d) for d in meets):
            chosen = [d for d in chosen if d not in meets] + [c]
            out.append(c)
    return out


def taken(order: list[ModuleCall], r: int) -> list[ModuleCall]:
    """The modules checkpointed after the first ``r`` steps of ``order``."""
    chosen: list[ModuleCall] = []
    for c in order[:r]:
        chosen = [d for d in chosen if not _holds(c, d)] + [c]
    return chosen


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _holds(c: ModuleCall, d: ModuleCall) -> bool:
    """Every call of ``d`` lies inside a call of ``c``."""
    return all(any(a[0] <= b[0] and b[1] <= a[1] for a in c.runs) for b in d.runs)


def _disjoint(calls: list[ModuleCall]) -> list[ModuleCall]:
    """``calls`` less any whose runs overlap those of a call kept before it (by first op)."""
    kept: list[ModuleCall] = []
    taken: list[tuple[int, int]] = []
    for c in sorted(calls, key=lambda c: (c.runs[0][0], c.path)):
        if all(b < f or a > last for a, b in c.runs for f, last in taken):
            kept.append(c)
            taken.extend(c.runs)
    return kept


def milp_structures(trace: Trace) -> list[tuple[str, list[ModuleCall]]]:
    """NOTE [tensor milp]'s structures: (name, the module calls it may checkpoint)."""
    out: list[tuple[str, list[ModuleCall]]] = [("none checkpointed", [])]
    blocks = block_calls(trace)
    seen = set()
    if blocks:
        out.append(("the blocks", blocks))
        seen.add(tuple(sorted(c.path for c in blocks)))
    calls = module_calls(trace)
    for depth in sorted({c.path.count(".") for c in calls}):
        level = _disjoint([c for c in calls if c.path.count(".") == depth])
        key = tuple(sorted(c.path for c in level))
        if level and key not in seen:
            seen.add(key)
            out.append((f"modules at depth {depth + 1}", level))
    return out


def prefetch_slots(trace: Trace, offload: tuple[tuple[str, ...], ...], gpu: GPU,
                   lazy: bool = False) -> tuple[int, ...]:
    """NOTE [tensor prefetch]
    Each offloading layer's buffers are brought back as late as the link allows: the
    copies, taken from the last needed to the first, each end by the backward start of the
    first layer that reads one of them (by the trace's backward times, the fastest
    algorithms) or by the start of the copy after it on the link, whichever is earlier; a
    copy is issued during the backward of the layer running when it must start (a slot
    taken goes to the next earlier one in backward order: one layer's prefetch per slot).
    ``lazy``: each issued one layer ahead of its first reader, as vDNN does, whatever the
    link: the backward may wait for it, and fewer fetched buffers are held at once."""
    lv = liveness(trace)
    n = len(trace.layers)
    bwd = [layer.algos[a].bwd_ns for layer, a in zip(trace.layers, trace.fastest_algos)]
    start = [0] * n  # backward start of layer i, from the backward's start
    t = 0
    for i in range(n - 1, -1, -1):
        start[i] = t
        t += bwd[i]
    bw = gpu.link.h2d_bw_bytes_per_s
    need = []  # (backward start of the first reader, layer, bytes)
    for i, bs in enumerate(offload):
        if bs:
            first = max(_first_keeper(trace, b) for b in bs)
            need.append((start[first], i, sum(lv.size[b] for b in bs), first))
    slots = [-1] * n
    link_free = float("inf")  # the start of the next copy on the link
    for due, i, size, first in sorted(need, reverse=True):  # the last needed first
        if lazy:
            j = max(first + 1, i + 1)
            while j < n and slots[j] != -1:
                j += 1
            if j < n:
                slots[j] = i
            continue
        end = min(due, link_free)
        begin = end - size / bw * 1e9
        link_free = begin
        # the layer whose backward is running at ``begin``: the last with start <= begin
        j = n - 1
        lo, hi = 0, n - 1
        while lo <= hi:  # start[] decreases with i
            mid = (lo + hi) // 2
            if start[mid] <= begin:
                j, hi = mid, mid - 1
            else:
                lo = mid + 1
        j = max(j, i + 1)
        while j < n and slots[j] != -1:
            j += 1
        if j >= n:  # every slot up to the backward's start taken: the latest free one
            j = next((k for k in range(n - 1, i, -1) if slots[k] == -1), -1)
        if j >= 0:
            slots[j] = i
    return tuple(slots)


def _first_keeper(trace: Trace, buf: str) -> int:
    """The first layer in backward order (the highest index) whose backward reads ``buf``."""
    lv = liveness(trace)
    keep = trace.memo("keepers", lambda: keepers(trace, lv))
    return max(keep[buf])


def _fewest(f: Callable[[int], bool], hi: int) -> int | None:
    """The least x in 0..hi with f(x), taking f as monotone; None if not f(hi)."""
    if not f(hi):
        return None
    lo = -1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if f(mid) else (mid, hi)
    return hi


def plan_tensors(trace: Trace, gpu: GPU, budget_bytes: Any,
                 optimizer_offload: bool | None = False, allocator: Any = None,
                 min_bytes: int = MIN_BYTES, exact: bool | None = None) -> TensorPlan:
    """NOTE [tensor plans] for ``trace`` under ``budget_bytes``. ``optimizer_offload``: with
    the optimizer on the CPU, or not; None: both where the host's CPU step is calibrated,
    the faster that fits winning. ``exact``: NOTE [tensor milp] too (None: where the trace
    has at most its MAX_LAYERS ops), the faster kept."""
    if not op_trace(trace):
        raise ConfigError(f"{trace.name}: tensor plans are for op-by-op traces (vdnnsim "
                          "trace --model of an hf: or factory model, vdnnsim profile)")
    if not trace.timed:
        raise ConfigError(f"{trace.name}: a memory-only trace has no times to choose "
                          "between offloading and recomputing by")
    if optimizer_offload is None:
        on_gpu = plan_tensors(trace, gpu, budget_bytes, False, allocator, min_bytes, exact)
        if not (trace.pytorch and trace.weight_bytes and trace.micro_batches == 1
                and cpu_step_calibrated(gpu.host)):  # (accumulation on the CPU: unmodelled)
            return on_gpu
        on_cpu = plan_tensors(trace, gpu, budget_bytes, True, allocator, min_bytes, exact)
        on_cpu.simulations += on_gpu.simulations
        on_cpu.steps[:0] = on_gpu.steps
        if on_gpu.fits != on_cpu.fits:
            return on_gpu if on_gpu.fits else on_cpu
        return on_cpu if on_cpu.iteration_time_ns < on_gpu.iteration_time_ns else on_gpu
    try:
        budget = _capacity(budget_bytes)
    except ValueError as exc:
        raise ConfigError(f"budget: {exc}") from None
    found = _search(trace, gpu, budget, optimizer_offload, allocator, min_bytes)
    if exact is None:
        exact = len(trace.layers) <= MAX_LAYERS
    if not exact:
        return found
    settings = allocator_settings(allocator)
    other = solve_calls(trace, gpu, budget, milp_structures(trace), optimizer_offload,
                        settings)
    found.steps += other.steps
    found.simulations += other.simulations
    if other.plan is None or (found.fits and found.iteration_time_ns <= other.engine_ns):
        return found
    res = replay(trace, gpu, other.plan, budget, record_ops=False, allocator=settings)
    return replace(found, fits=res.oom is None, plan=other.plan,
                   peak_memory_bytes=res.peak_live_bytes, iteration_time_ns=res.end_ns,
                   offloaded=tuple(b for bs in other.plan.offload for b in bs),
                   modules=other.modules, simulations=found.simulations + 1)


def _search(trace: Trace, gpu: GPU, budget: int, optimizer_offload: bool, allocator: Any,
            min_bytes: int) -> TensorPlan:
    """NOTE [tensor plans]'s search, for one place of the optimizer."""
    settings = allocator_settings(allocator)
    lv = liveness(trace)
    cands = offload_candidates(trace, min_bytes)
    blocks = block_calls(trace)
    chains = {"modules": recompute_order(module_calls(trace)), "blocks": blocks,
              "blocks, the last first": blocks[::-1]}
    held = {b for b, t in trace.buffers.items() if t.kind == "input"}
    out = TensorPlan(False, optimizer_offload=bool(optimizer_offload))

    def chosen_calls(chain: str, r: int) -> list[ModuleCall]:
        calls = chains[chain]
        return taken(calls, r) if chain == "modules" else calls[:r]

    segment_sets: dict[tuple[int, int], frozenset[str]] = {}  # a segment's dropped | inputs

    def build(k: int, r: int, chain: str, lazy: bool) -> Plan:
        segs, barred = [], set()
        for c in chosen_calls(chain, r):
            for run in c.runs:
                segs.append(run)
                if run not in segment_sets:
                    dropped, inputs = checkpoint_buffers(trace, lv, *run, held)
                    segment_sets[run] = dropped | inputs
                barred |= segment_sets[run]
        chosen = {b for _, b in cands[:k] if b not in barred}
        offload = tuple(tuple(b for b in bs if b in chosen)
                        for bs in offload_sets(trace, lv, False))
        return Plan("tensors", "layer_wise", trace.fastest_algos, offload,
                    prefetch_slots(trace, offload, gpu, lazy), sync=False, runtime="tensors",
                    recompute=tuple(sorted(segs)),
                    optimizer_offload=bool(optimizer_offload))

    memo: dict[tuple[int, int, str, bool, bool], Any] = {}

    def run(k: int, r: int, chain: str, lazy: bool, stop: bool = True) -> Any:
        r = r if chains[chain] else 0
        key = (k, r, chain, lazy, stop)
        stopped = memo.get(key[:-1] + (True,)) if not stop else None
        if stopped is not None and stopped.oom:
            return stopped  # it does not fit: its time is not wanted
        if stopped is not None and key not in memo:  # it fits: it never stopped, so it is
            out.simulations += 1  # the whole run (counted, as the search asked for it)
            memo[key] = stopped
        if key not in memo:
            out.simulations += 1
            memo[key] = replay_of(build(k, r, chain, lazy), stop)
        return memo[key]

    replays: dict[tuple[Plan, bool], Any] = {}  # counts and chains that build one plan

    def replay_of(plan: Plan, stop: bool) -> Any:  # replay it once (the engine is exact)
        full = replays.get((plan, False))
        if full is not None:
            return full
        stopped = replays.get((plan, True))
        if stopped is not None and (stop or stopped.oom is None):  # it never stopped
            return stopped
        replays[(plan, stop)] = res = replay(trace, gpu, plan, budget, record_ops=False,
                                             stop_at_oom=stop, allocator=settings)
        return res

    def search(lazy: bool) -> list[tuple[int, int, str, bool]]:
        if run(0, 0, "modules", lazy).oom is None:
            return [(0, 0, "modules", lazy)]
        tried = []
        k_fit = _fewest(lambda k: run(k, 0, "modules", lazy).oom is None, len(cands))
        if k_fit is not None:
            tried.append((k_fit, 0, "modules", lazy))
        top = k_fit if k_fit is not None else len(cands)
        for chain, calls in chains.items():
            if not calls:
                continue
            r_fit = _fewest(lambda r: run(0, r, chain, lazy).oom is None, len(calls))
            if r_fit is not None:
                tried.append((0, r_fit, chain, lazy))
            for share in MIX_GRID + ((1.0,) if k_fit is None else ()):
                k = int(top * share)
                r = _fewest(lambda r: run(k, r, chain, lazy).oom is None,
                            len(calls)) if 0 < k <= top and k != k_fit else None
                if r is not None:
                    tried.append((k, r, chain, lazy))
            out.steps.append(f"{len(cands)} buffers of at least {min_bytes >> 20} MiB to "
                             f"offload, {len(calls)} {chain} to checkpoint"
                             + (", prefetched one layer ahead" if lazy else "")
                             + f"; fewest that fit: {k_fit if k_fit is not None else 'none'}"
                             f" offloaded, {r_fit if r_fit is not None else 'none'} "
                             "checkpointed")
        return tried

    best = None  # prefetches the backward may wait for only where no other plan fits
    for k, r, chain, lazy in dict.fromkeys(search(False) or search(True)):
        res = run(k, r, chain, lazy, stop=False)
        if res.oom is None and (best is None or res.end_ns < best[4].end_ns):
            best = (k, r, chain, lazy, res)
        out.steps.append(f"{k} offloaded, {r} {chain} checkpointed"
                         + (", prefetched one layer ahead" if lazy else "")
                         + (" (optimizer on the CPU)" if optimizer_offload else "")
                         + (f": {res.end_ns / 1e6:.1f} ms, peak {res.peak_live_bytes / 2**30:.2f}"
                            " GiB" if res.oom is None else ": out of memory"))
    if best is None:
        return out
    k, r, chain, lazy, res = best
    plan = build(k, r, chain, lazy)
    return replace(out, fits=True, plan=plan, peak_memory_bytes=res.peak_live_bytes,
                   iteration_time_ns=res.end_ns,
                   offloaded=tuple(b for bs in plan.offload for b in bs),
                   modules=tuple(c.path for c in chosen_calls(chain, r)))


def tensor_plan_to_dict(trace: Trace, gpu: GPU, budget_bytes: int, found: TensorPlan,
                        predicted: dict[str, Any], allocator: Any = None) -> dict[str, Any]:
    """The version 3 layer plan file of ``found`` (NOTE [plan files]): the layer plan with
    each offloaded buffer's key and the checkpointed modules."""
    plan = found.plan
    out = plan_to_dict(trace, gpu, budget_bytes, plan, predicted, allocator)
    out["version"] = 3
    producer = trace.producers()
    keys = []
    for b in found.offloaded:
        t, layer = trace.tensors[b], trace.layers[producer[b]]
        keys.append({"id": b, "module": layer.attrs.get("module", OUTSIDE),
                     "shape": list(t.shape or ()), "dtype": layer.attrs.get("dtype", "float32"),
                     "bytes": t.size_bytes})
    out["recompute_modules"] = list(found.modules)
    out["tensors"] = keys
    out["layers"] = out.pop("layers")  # last, as in every layer plan
    return out
