"""The planner: for a trace, a GPU and a memory budget, which buffers to offload or
recompute and which algorithm each layer runs, checked by the engine (``vdnnsim plan``).

NOTE [planner]
A greedy search whose every step is a simulation (the engine is the judge, never a
formula):

1. Start from the fastest algorithms with nothing offloaded.
2. Run the plan against the budget, stopping at the first out-of-memory. Where it runs
   out for a layer's workspace, move that layer to a leaner algorithm (vdnn_dyn's rule:
   the fastest whose workspace closes the gap). Otherwise offload one more buffer: among
   vDNN's candidates (a buffer its last forward reader copies out), those that are off
   the GPU at the failing point once offloaded (copied before the failing layer's
   forward pass; for a backward failure also needed by no layer until two below it), the
   largest. Repeat until the plan fits or nothing is left to offload.
3. Then make it faster: drop each offload (smallest first) and move each leaner algorithm
   back to the fastest, keeping every change that still fits and is not slower.
4. vdnn_dyn's own answer is a candidate too, and so is activation checkpointing
   with 2 to 32 of checkpoint_sequential's segments, alone or with
   vDNN's offload of what it keeps; the fastest candidate that fits is returned.

5. The whole search runs again on the network with a batch split
   from its first layer to each of its first three shrinking layers, in 2 or 4 slices,
   with and without each slice checkpointed; checkpointing candidates then cover the
   layers after the split (the splits tried: split.py's ``split_structures``, which the
   MILP tries too).

The prefetches are findPrefetchLayer's over the chosen offloads, with the policies'
default reading of its marks. It is a heuristic: no
claim of optimality (the exact program is milp.py's; ``method='auto'``
runs both and keeps the faster); each plan's memory and time are the engine's. A plan is
written as a YAML file (``format: vdnnsim-plan``: per layer its algorithm, offloads and prefetch; the recomputed
segments) that the ``planned`` policy replays (policies/planned.py reads it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from . import milp
from ..engine import replay
from ..engine import allocator_settings
from ..engine import Plan, liveness
from ..engine import Replayed, checkpoint_buffers, keepers
from ..errors import ConfigError
from ..hardware import GPU
from ..limits import short_repr
from ..policies.blocks import block_regions, block_segments
from ..policies.builtin import algo_choice
from ..policies.context import PolicyContext
from ..policies.dyn import vdnn_dyn
from ..policies.plan import downgrade, find_prefetch_schedule, offload_sets, policy_marks
from ..policies.planned import FORMAT, plan_from_file  # noqa: F401  (re-exported)
from ..policies.recompute import sequential_segments, with_segments
from .blocks import BlockPlan
from .split import split_candidates, split_structures  # noqa: F401  (re-exported)
from ..trace.model import Trace


@dataclass
class Search:
    """What the planner tried (for the printed log)."""

    steps: list[str] = field(default_factory=list)
    simulations: int = 0
    allocator: Any = None  # the settings each replay is under
    optimizer_offload: bool = False  # each replay with it on the CPU


def _plan(trace: Trace, algos: list[int], chosen: set[str], cands: tuple[tuple[str, ...], ...],
          segs: tuple[tuple[int, int], ...] = (), name: str = "planned",
          split: tuple[tuple[str, str, int], ...] = ()) -> Plan:
    """``split``: the batch splits that made ``trace``, which the plan
    carries with the trace it runs."""
    offload = tuple(tuple(b for b in c if b in chosen) for c in cands)
    marks = policy_marks(trace, "all", "measured")  # the default
    return Plan(name, "layer_wise", tuple(algos), offload,
                find_prefetch_schedule(trace, offload, marks), True, runtime=True,
                recompute=segs, trace=trace if segs or split else None, split=split)


def _run(trace: Trace, gpu: GPU, plan: Plan, budget_bytes: int, search: Search) -> Replayed:
    search.simulations += 1
    if search.optimizer_offload:
        plan = replace(plan, optimizer_offload=True, profiled=None)
    return replay(trace, gpu, plan, budget_bytes, liveness(trace), record_ops=False,
                  stop_at_oom=True, allocator=search.allocator)


METHODS = ("auto", "milp", "greedy")


# NOTE [autotune headroom]
# Under cudnn.benchmark, PyTorch picks each convolution's algorithm at its first call
# (aten/src/ATen/native/cudnn/Conv_v8.cpp): it allocates one workspace the size of the
# largest candidate's, halving the request until the caching allocator grants it, and
# drops every candidate whose workspace exceeds what it got. The fastest algorithm, with
# workspace W, survives for sure only if 2W can be allocated at that moment (the request
# that succeeds is more than half the room); with less room a slower algorithm may win,
# which the profiled trace does not know (docs/beyond-vdnn.md). So for PyTorch traces the
# planner checks every plan with each layer's workspaces at AUTOTUNE_FACTOR times their size; the plan's predicted memory and
# time are then the trace's own. ``headroom=False`` plans without it.
AUTOTUNE_FACTOR = 2


def scale_workspaces(trace: Trace, factor: float) -> Trace:
    """``trace`` with every algorithm's workspaces times ``factor`` (exact for 2, then
    1/2)."""
    layers = tuple(replace(x, algos=tuple(
        replace(a, fwd_workspace_bytes=int(a.fwd_workspace_bytes * factor),
                bwd_workspace_bytes=int(a.bwd_workspace_bytes * factor)) for a in x.algos))
        for x in trace.layers)
    return replace(trace, layers=layers)


def search_plan(trace: Trace, gpu: GPU, budget_bytes: int, max_steps: int = 400,
                method: str = "auto", headroom: bool = True,
                allocator: Any = None, optimizer_offload: bool = False
                ) -> tuple[Plan | None, Search]:
    """The best plan found that fits in ``budget_bytes`` (None: none).
    ``method``: 'greedy' (this module's search), 'milp' or 'auto'
    (both where the program is tractable, up to ``milp.MAX_LAYERS`` layers, and the
    faster engine-checked answer; the greedy search alone above it). ``headroom``: the
    autotune headroom, for PyTorch traces with any workspace. ``allocator``: the
    caching allocator's settings every candidate is checked under (None: PyTorch's
    defaults). ``optimizer_offload``: every candidate replayed
    with the optimizer's state and step on the CPU, and the plan
    says so; the activations' plan is chosen for that step."""
    if method not in METHODS:
        raise ConfigError(f"planner method must be one of {', '.join(METHODS)}, got "
                          f"{short_repr(method)}")
    allocator = allocator_settings(allocator)  # (a Torch7 trace with the optimizer on the
    # CPU: the plan check of every replay refuses it)
    if not (headroom and trace.pytorch and any(
            a.workspace_bytes for x in trace.layers for a in x.algos)):
        return _search_plan(trace, gpu, budget_bytes, max_steps, method, allocator,
                            optimizer_offload)
    plan, search = _search_plan(scale_workspaces(trace, AUTOTUNE_FACTOR), gpu, budget_bytes,
                                max_steps, method, allocator, optimizer_offload)
    search.steps.insert(0, f"every workspace checked at {AUTOTUNE_FACTOR}x its size "
                           "(autotune headroom)")
    if plan is not None and plan.trace is not None:
        plan = replace(plan, trace=scale_workspaces(plan.trace, 1 / AUTOTUNE_FACTOR))
    return plan, search


def _search_plan(trace: Trace, gpu: GPU, budget_bytes: int, max_steps: int, method: str,
                 allocator: Any = None, optimizer_offload: bool = False
                 ) -> tuple[Plan | None, Search]:
    search = Search(allocator=allocator, optimizer_offload=optimizer_offload)
    plan, search = _searched(trace, gpu, budget_bytes, max_steps, method, search)
    if plan is not None and optimizer_offload:  # as replayed
        plan = replace(plan, optimizer_offload=True, profiled=None)
    return plan, search


def _searched(trace: Trace, gpu: GPU, budget_bytes: int, max_steps: int, method: str,
              search: Search) -> tuple[Plan | None, Search]:
    exact = None
    if method == "milp" or (method == "auto" and len(trace.layers) <= milp.MAX_LAYERS):
        plan, ns, report = milp.milp_plan(trace, gpu, budget_bytes, allocator=search.allocator,
                                          optimizer_offload=search.optimizer_offload)
        search.simulations += report.simulations
        kept = [(tag, s) for tag, s in report.solutions if s.engine_ns is not None]
        search.steps.append(f"MILP: {len(report.solutions)} structures, {len(kept)} with an "
                            f"engine-checked plan, {report.seconds:.1f} s")
        for tag, s in kept:
            search.steps.append(f"MILP, {tag}: {s.engine_ns / 1e6:.1f} ms (program "
                                f"{s.objective_ns / 1e6:.1f} ms, {s.rounds} round(s)"
                                f"{'' if s.optimal else ', not proven optimal'})")
        if plan is not None:
            exact = (plan, ns)
        if method == "milp":
            return (plan, search)
    best = _search(trace, gpu, budget_bytes, max_steps, search)
    for (first, last, parts), st, per_part, rest in split_structures(trace, gpu):
        for segs in ((), per_part):
            tag = (f"split {first}..{last} in {parts}"
                   + (", each part checkpointed" if segs else ""))
            found = _search(st, gpu, budget_bytes, max_steps, search, segs, rest, tag,
                            ((first, last, parts),))
            if found is not None and (best is None or found[1] < best[1]):
                best = found
    if exact is not None:
        search.steps.append(f"greedy search: {best[1] / 1e6:.1f} ms" if best else
                            "greedy search: nothing fits")
        if best is None or exact[1] < best[1]:
            search.steps.append(f"the MILP's plan is taken: {exact[1] / 1e6:.1f} ms")
            best = exact
    return (best[0] if best else None), search


def _search(trace: Trace, gpu: GPU, budget_bytes: int, max_steps: int, search: Search,
            fixed: tuple[tuple[int, int], ...] = (), start: int = 0, tag: str = "",
            split: tuple[tuple[str, str, int], ...] = ()) -> tuple[Plan, int] | None:
    """One search of NOTE [planner] on ``trace`` with the checkpointed segments ``fixed``
    kept and further segments placed from layer ``start`` on; ``split``: the batch splits
    that made ``trace`` from the network, () for the network itself."""
    lv = liveness(trace)
    n = len(trace.layers)
    cands = offload_sets(trace, lv, conv_only=False)
    if fixed:  # never offload what a fixed segment drops or rereads
        held = {b for b in lv.size if b not in lv.producer} if trace.pytorch else set()
        skip: set[str] = set()
        for f, l_ in fixed:
            dropped, inputs = checkpoint_buffers(trace, lv, f, l_, held)
            skip |= dropped | inputs
        cands = tuple(tuple(b for b in c if b not in skip) for c in cands)
    at = {b: i for i, c in enumerate(cands) for b in c}  # buffer -> the layer that copies it
    keep = keepers(trace, lv)
    first_use = {b: max(keep.get(b, [-1])) for b in at}  # its first backward reader
    algos = list(algo_choice(trace, "p"))
    fastest = tuple(algos)
    chosen: set[str] = set()
    prefix = f"{tag}: " if tag else ""
    fits = None
    for _ in range(max_steps):
        plan = _plan(trace, algos, chosen, cands, fixed, split=split)
        sim = _run(trace, gpu, plan, budget_bytes, search)
        oom = sim.oom
        if oom is None:
            fits = (plan, sim.end_ns)
            break
        i = trace.layer_index(oom.layer) if oom.layer else n - 1
        if oom.kind == "workspace":
            choice = downgrade(trace, i, algos[i], oom.requested_bytes
                                - oom.largest_free_bytes)
            if choice is not None:
                algos[i] = choice
                search.steps.append(f"{prefix}{trace.layers[i].id}: leaner algorithm "
                                    f"{trace.layers[i].algos[choice].name}")
                continue
        backward = oom.phase == "backward"
        pick = [b for b in at if b not in chosen and at[b] < i
                and (not backward or first_use[b] < i - 1)]
        if not pick:
            break
        b = max(pick, key=lambda x: (lv.size[x], -at[x]))
        chosen.add(b)
        search.steps.append(f"{prefix}offload {b} ({lv.size[b] / 2**20:.0f} MiB) at "
                            f"{trace.layers[at[b]].id}, for {oom.layer or 'the end'} "
                            f"({oom.phase})")
    if fits is not None:  # 3. faster: fewer offloads, faster algorithms
        plan, best = fits
        for b in sorted(chosen, key=lambda x: lv.size[x]):
            trial = _plan(trace, algos, chosen - {b}, cands, fixed, split=split)
            sim = _run(trace, gpu, trial, budget_bytes, search)
            if sim.oom is None and sim.end_ns <= best:
                chosen.discard(b)
                plan, best = trial, sim.end_ns
                search.steps.append(f"{prefix}keep {b} on the GPU: {best / 1e6:.1f} ms")
        for i in range(n):
            if algos[i] != fastest[i]:
                trial_algos = list(algos)
                trial_algos[i] = fastest[i]
                trial = _plan(trace, trial_algos, chosen, cands, fixed, split=split)
                sim = _run(trace, gpu, trial, budget_bytes, search)
                if sim.oom is None and sim.end_ns <= best:
                    algos = trial_algos
                    plan, best = trial, sim.end_ns
                    search.steps.append(f"{prefix}{trace.layers[i].id}: back to its fastest "
                                        f"algorithm: {best / 1e6:.1f} ms")
        fits = (plan, best)
        search.steps.append(f"{prefix}offload search: {best / 1e6:.1f} ms")
    m = n - start
    for k in sorted({2, 3, 4, 6, 8, 12, 16, 24, 32, round(m ** 0.5)}):  # 5. recompute
        if not 2 <= k <= m or trace.checkpointed:  # (a model checkpointing itself: not)
            continue
        segs = fixed + tuple((start + a, start + b)
                             for a, b in sequential_segments(m, k))
        for which in ("none", "all"):
            cp = with_segments(trace, segs, which, algo_choice(trace, "p"))
            cp = replace(cp, policy="planned", runtime=True, trace=trace, split=split)
            sim = _run(trace, gpu, cp, budget_bytes, search)
            if sim.oom is None and (fits is None or sim.end_ns < fits[1]):
                search.steps.append(f"{prefix}checkpoint, {k} segments, offload {which}: "
                                    f"{sim.end_ns / 1e6:.1f} ms")
                fits = (cp, sim.end_ns)
    if not fixed and not split:
        # 4. vdnn_dyn's answer is a candidate (NOTE [planning allocator])
        dyn = vdnn_dyn(trace, gpu, budget_bytes, {}, PolicyContext(search.allocator))
        search.simulations += 1
        # its profiling passes replayed under the search's allocator settings; with the
        # optimizer on the CPU (which vdnn_dyn plans without) its plan is replayed again
        dsim = (dyn.profiled if not search.optimizer_offload else None) or \
            _run(trace, gpu, dyn, budget_bytes, search)
        if dsim.oom is None and (fits is None or dsim.end_ns < fits[1]):
            search.steps.append(f"vdnn_dyn's plan is faster ({dsim.end_ns / 1e6:.1f} ms): "
                                f"taken")
            fits = (Plan("planned", dyn.memory, dyn.algos, dyn.offload, dyn.prefetch,
                         dyn.sync, runtime=True), dsim.end_ns)
    return fits


# -- the plan file ---------------------------------------------------------------------------
# NOTE [plan layer names]
# A layer plan names the trace's layers. The vDNN runtime finds a torchvision or zoo
# trace's layers (``layer_names: fx``) in its own torch.fx graph of the model. An op-by-op
# trace's layers (``layer_names: ops``: the op probe's ATen ops, convolution_0) are in no
# fx graph: such a plan runs only as version 3 (``vdnnsim plan --method tensors``, which
# keys each offloaded buffer and names its checkpointed modules for the tensor runtime,
# NOTE [tensor runtime]); the MILP's and the greedy search's plans of such a trace (version
# 1 or 2) predict but cannot run, vdnnsim plan says so when it writes one, and vdnnsim
# measure --plan refuses one in one line before it builds the model. ``vdnnsim plan
# --method auto`` plans an op-by-op trace by tensors and by blocks, and keeps the faster.
OP_LAYERS = "ops"
OP_PLAN_CANNOT_RUN = ("this layer plan names the ATen ops of an op-by-op trace (an hf: or "
                      "factory model's), which the vDNN runtime "
                      "cannot find in its fx graph of the model, and is older than version "
                      "3, which says what the tensor runtime finds them by: it predicts, but "
                      "cannot run; plan it again (vdnnsim plan writes version 3 plans of op "
                      "traces, which run), or for a model with blocks plan with --method "
                      "blocks")


# NOTE [fragmentation caution]
# A plan is checked by replaying it under the budget, the engine's caching allocator
# deciding where each block goes; near the cap that model is least sure (the segments a
# real run splits, gives back and makes again). ``vdnnsim plan`` says so when a plan of a
# PyTorch trace leaves less than CAUTION_SHARE of its budget unallocated at its predicted
# peak (the largest share a replay-fitted plan was measured to run out of memory with:
# docs/validation.md, "Plans near the cap"); it does not change the plan.
CAUTION_SHARE = 0.061


def fragmentation_caution(trace: Trace, budget_bytes: int, peak_allocated: int,
                          allocator: Any = None) -> str | None:
    """A line for a PyTorch trace's plan under the default
    allocator whose allocated peak leaves less than CAUTION_SHARE of ``budget_bytes``; None
    otherwise (and under expandable segments)."""
    if not trace.pytorch or not budget_bytes \
            or budget_bytes - peak_allocated >= CAUTION_SHARE * budget_bytes \
            or not allocator_settings(allocator).default:
        return None
    left = budget_bytes - peak_allocated
    return (f"caution: the plan leaves {left / 2**30:.2f} GiB ({100 * left / budget_bytes:.1f}%) "
            "of the budget unallocated at its peak; under a real cap, plans the replay "
            f"fitted have run out of memory with up to {100 * CAUTION_SHARE:.1f}% left "
            "(PyTorch's caching allocator near the cap): plan "
            "for a smaller budget to keep a margin, or under expandable segments "
            "(--allocator expandable_segments=true)")


def layer_names(trace: Trace) -> str:
    """NOTE [plan layer names]: 'ops' for an op-by-op trace (its layers carry the module
    path the op probe gives every op), else 'fx'."""
    return OP_LAYERS if any("module" in x.attrs for x in trace.layers) else "fx"


def plan_to_dict(trace: Trace, gpu: GPU, budget_bytes: int, plan: Plan,
                 predicted: dict[str, Any], allocator: Any = None) -> dict[str, Any]:
    if plan.trace is not None:  # the layers of the reshaped network
        trace = plan.trace
    layers = []
    for i, x in enumerate(trace.layers):
        d: dict[str, Any] = {"id": x.id, "algo": x.algos[plan.algos[i]].name}
        if plan.offload[i]:
            d["offload"] = list(plan.offload[i])
        if plan.prefetch[i] >= 0:
            d["prefetch"] = trace.layers[plan.prefetch[i]].id
        layers.append(d)
    return {"format": FORMAT, "version": 1, "network": trace.name,
            "batch_size": trace.batch_size, "gpu": gpu.name, "budget_bytes": budget_bytes,
            "layer_names": layer_names(trace), "sync": plan.sync,
            # said where it is on (a plan without it reads as before)
            **({"optimizer_offload": True} if plan.optimizer_offload else {}),
            **planned_allocator(allocator), "predicted": predicted,
            "split": [list(x) for x in plan.split],
            "recompute": [[trace.layers[a].id, trace.layers[b].id] for a, b in plan.recompute],
            "layers": layers}


# A block plan's file (NOTE [block plan] in planners/blocks.py, where ``plan_blocks`` finds
# the count).
from .planfile import BLOCK_FORMAT  # noqa: E402  (the block plan file's format)


def block_paths(trace: Trace) -> list[str] | None:
    """The trace's blocks by module path, in order (None where its layers
    carry none: a trace of an older probe, whose blocks were its largest ModuleList's)."""
    regions = block_regions(trace)[1:-1]
    paths = [trace.layers[r[0]].attrs.get("block_path") if r else None for r in regions]
    return paths if paths and all(isinstance(p, str) for p in paths) else None


def recompute_paths(trace: Trace, recompute: int, start: int = 0) -> list[str]:
    """The blocks a plan checkpoints, by path (after the first
    ``start``, the offloaded ones)."""
    return list(block_segments(trace, recompute, start)) if recompute else []


def planned_allocator(allocator: Any) -> dict[str, Any]:
    """A plan file's ``allocator`` entry for these settings
    (none for PyTorch's defaults)."""
    settings = allocator_settings(allocator)
    return {} if settings.default else {
        "allocator": {"expandable_segments": settings.expandable_segments}}


def block_plan_to_dict(trace: Trace, gpu: GPU, budget_bytes: int, plan: BlockPlan,
                       allocator: Any = None) -> dict[str, Any]:
    return {"format": BLOCK_FORMAT, "network": trace.name, "batch_size": trace.batch_size,
            "gpu": gpu.name, "budget_bytes": budget_bytes, "optimizer": trace.optimizer,
            "blocks": plan.blocks, "total_blocks": plan.total,
            "recompute_blocks": plan.recompute,
            "recompute_paths": recompute_paths(trace, plan.recompute, plan.blocks),
            # the blocks by module path, the runtime hooks them by these
            "block_paths": block_paths(trace),
            # said where it is on (a plan without it reads as before)
            **({"optimizer_offload": True} if plan.optimizer_offload else {}),
            # said where some are on the host
            **({"param_blocks": plan.params} if plan.params else {}),
            # said where the copies are registered
            **({"optimizer_pinning": plan.optimizer_pinning}
               if plan.optimizer_pinning != "caching" else {}),
            **planned_allocator(allocator),
            "predicted": {"peak_memory_bytes": plan.peak_memory_bytes,
                          # no time where the trace has none
                          "iteration_time_ns": plan.iteration_time_ns if trace.timed else None}}
