"""vDNN for block-structured models: offload whole blocks (``vdnn_blocks``).

NOTE [block offload]
A transformer's trace from the op probe (NOTE [op probe], NOTE [blocks]) has
thousands of op layers, each tagged with its region (``attrs['block']``: 0 before the first
block, 1..N the blocks, N + 1 the head and the loss). vDNN's unit there is the block, as
in the runtime (vdnnsim/gpu/runtime/blocks.py): an offloaded block sends everything its
ops save for the backward pass (its input and its intermediates, the tensors autograd
keeps; never the weights or the batch, nor what every block reads, like a rotary table:
only tensors made in the block or last read by it, and not autocast's casts of the
weights, which its cache holds to the end of the forward pass anyway) to host memory
during the forward pass, and gets
it back while the backward pass of the block above runs (vDNN's prefetch, one block
ahead). In the plan the block's buffers are offloaded together at the last op that reads
any of them in the forward pass, and prefetched at the first op of the next region's
backward; as in the paper's vDNN_all the earliest blocks go first when only some are
offloaded (their buffers are needed last). Options: ``blocks`` (how many, from the first
block on; default every block), or ``budget`` (bytes, or a capacity like '22 GiB': the
fewest blocks whose replay fits it, NOTE [block plan], ``plan_blocks``).
The runtime's own host costs are not modelled (plan.runtime is false): its pack and
unpack hooks are a Python call per saved tensor, a few thousand a step.

NOTE [block recompute]
The other way to free a block's memory: run it under torch.utils.checkpoint (non-reentrant)
so that its forward pass keeps only its inputs, and run it again when the backward pass
reaches it. Option ``recompute``: the first that many blocks, checkpointed (the engine's
NOTE [recompute] over each block's own ops: not the ops after it in its region, which run
in the parent's code), nothing offloaded (with ``blocks`` too: NOTE [block mix]). The
block runtime wraps those modules' forward (vdnnsim/gpu/runtime/blocks.py); a block plan
carries ``recompute_blocks``. ``vdnnsim plan`` (NOTE [block plan]) tries both, offloading
and checkpointing the first k blocks, then their mixes, and keeps the fastest that fits
(on a memory-only trace, offloading, whose cost needs no times).
A block that writes its input in place is never checkpointed (``block_segments``: the plan
file lists the blocks it checkpoints, ``recompute_paths``, and the runtime wraps just those).
Gradients are the plain step's (tests/test_block_offload.py, on a CPU); a batch norm's
running statistics are updated once more by the recompute, as torch.utils.checkpoint does.
Measured in planned runs: the 3.4B Llama shape on the H200 (session 25) and the 7B on an
H100 (session 32), both with parameters on the host (NOTE [parameter offload]).

NOTE [block mix]
Both at once: the first ``blocks`` blocks offloaded and the ``recompute`` blocks after them
checkpointed (options ``blocks`` and ``recompute`` together; ``block_mixed_plan``). The
earliest blocks are the ones offloaded because their copies have the rest of the forward
pass to drain and their prefetches the backward of every block above to hide in; the
checkpointed blocks' cost, their forward run again, is the same wherever they are. Nothing
a checkpoint drops or keeps as its input is offloaded (``with_segments``' rule: the
checkpoint holds its input anyway). The planner (NOTE [block plan]) tries the mixes where
a mix can be faster than both pure plans.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..engine import ParamGroup, allocator_settings, cpu_step_calibrated, replay
from ..errors import ConfigError
from ..hardware import GPU, _capacity
from ..trace.model import Trace
from ..yamlio import paused_gc
from .builtin import algo_choice, check_options
from .plan import Plan, liveness, planning_allocator
from .recompute import with_segments, without_checkpointed


def block_regions(trace: Trace) -> list[list[int]]:
    """NOTE [block offload]: each region's layer indices, region 0 first (empty lists for
    regions with no ops); [] where the trace has no block tags."""
    tags = [layer.attrs.get("block") for layer in trace.layers]
    if any(not isinstance(t, int) or isinstance(t, bool) or t < 0 for t in tags):
        return []
    out: list[list[int]] = [[] for _ in range(max(tags) + 1)]
    for i, t in enumerate(tags):
        out[t].append(i)
    return out


def block_plan(trace: Trace, blocks: int, name: str = "vdnn_blocks") -> Plan:
    """NOTE [block offload]: the first ``blocks`` blocks offloaded."""
    regions = block_regions(trace)
    if len(regions) < 3:
        raise ConfigError(f"policy {name}: {trace.name} has no blocks (its layers carry no "
                          "block tags: profile or trace it with vdnnsim from a model)")
    lv = liveness(trace)
    n = len(trace.layers)
    skip = {b for b, t in trace.buffers.items() if t.kind == "input"}
    offload: list[list[str]] = [[] for _ in range(n)]
    prefetch = [-1] * n
    taken: set[str] = set()
    region = {i: r for r, idx in enumerate(regions) for i in idx}
    # autocast's casts of the weights: its cache holds them to the end of the forward pass,
    # so an offload would free nothing (NOTE [autocast cache]; the runtime keeps them too)
    skip |= lv.casts
    for r in range(1, min(blocks, len(regions) - 2) + 1):
        # the block's own tensors: made in it, or last read in it (its input); not what
        # every block reads (a rotary table, a mask), which no block's offload can free
        bufs = list(dict.fromkeys(
            b for i in regions[r] for t in trace.layers[i].saved
            if (b := lv.root[t]) not in skip and b not in taken and lv.size[b] and lv.kept(b)
            and r in (region.get(lv.producer.get(b, -1)), region.get(lv.fwd_last[b]))))
        if not bufs:
            continue
        at = max(max(lv.fwd_last[b], lv.producer.get(b, -1)) for b in bufs)
        written = {lv.root[t] for t in trace.layers[at].outputs}
        bufs = [b for b in bufs if b not in written]  # never copy what the layer overwrites
        above = next((regions[q] for q in range(r + 1, len(regions)) if regions[q]), None)
        if not bufs or above is None or max(above) <= at:
            continue
        taken.update(bufs)
        offload[at].extend(bufs)
        prefetch[max(above)] = at  # the first op of the next region's backward pass
    # NOTE [stream pools]: the block runtime allocates its prefetches on its copy stream
    return Plan(name, "layer_wise", algo_choice(trace, "p"), tuple(tuple(o) for o in offload),
                tuple(prefetch), sync=False, prefetch_stream="h2d")


def param_groups(trace: Trace, params: int) -> tuple[ParamGroup, ...]:
    """NOTE [parameter offload]: the weights of the first ``params`` blocks on the host,
    a group a block: fetched for its forward pass when the block before it starts (the
    runtime's prefetch, one block ahead), and for its backward pass when the backward of
    the region above it starts."""
    regions = block_regions(trace)
    layers = trace.layers
    groups = []
    for r in range(1, min(params, len(regions) - 2) + 1):
        idx = regions[r]
        if not any(layers[i].weight_bytes for i in idx):
            continue
        below = next((regions[q] for q in range(r - 1, -1, -1) if regions[q]), idx)
        above = next((regions[q] for q in range(r + 1, len(regions)) if regions[q]), idx)
        groups.append(ParamGroup(tuple(idx), min(idx), max(idx), min(below), max(above)))
    return tuple(groups)


def block_segments(trace: Trace, recompute: int,
                   start: int = 0) -> dict[str, tuple[int, int]]:
    """NOTE [block recompute]: of the ``recompute`` blocks after the first ``start`` (NOTE
    [block mix]; 0: from the first block on), those that can be
    checkpointed, by path: their own ops, (first, last) layer index each (a block's region
    without what runs after the block before the next one, a residual add of the parent's,
    which torch.utils.checkpoint on the module does not run again). A block whose input is
    written in place, by the block (a ReLU(inplace=True) module) or by anything after it,
    cannot be: the checkpoint keeps its input to run it again, and the write changes it
    (autograd refuses); it is left as it is. So is every block of a trace whose blocks
    carry no path (an older probe's): the runtime would not know which module to wrap."""
    regions = block_regions(trace)
    lv = liveness(trace)
    segs: dict[str, tuple[int, int]] = {}
    for r in range(start + 1, min(start + recompute, len(regions) - 2) + 1):
        idx = regions[r]
        if not idx:
            continue
        path = trace.layers[idx[0]].attrs.get("block_path")
        if not isinstance(path, str):  # a trace of an older probe: no module to wrap
            continue
        own = [i for i in idx if _under(trace.layers[i].attrs.get("module"), path)]
        if not own:
            continue
        a, b = min(own), max(own)
        inputs = {lv.root[t] for i in range(a, b + 1) for t in trace.layers[i].inputs
                  if lv.producer.get(lv.root[t], -1) < a}
        if any(trace.layers[i].kind.endswith("_") and any(
                lv.root[t] in inputs for t in trace.layers[i].outputs)
               for i in range(a, len(trace.layers))):
            continue
        segs[path] = (a, b)
    return segs


def _under(module: Any, path: str) -> bool:
    return isinstance(module, str) and (module == path or module.startswith(path + "."))


def block_recompute_plan(trace: Trace, recompute: int, name: str = "vdnn_blocks") -> Plan:
    """NOTE [block recompute]: the first ``recompute`` blocks checkpointed, nothing moved."""
    regions = block_regions(trace)
    if len(regions) < 3:
        raise ConfigError(f"policy {name}: {trace.name} has no blocks (its layers carry no "
                          "block tags: profile or trace it with vdnnsim from a model)")
    segs = tuple(block_segments(trace, recompute).values())
    return with_segments(trace, segs, "none", algo_choice(trace, "p"), sync=False, name=name)


def block_mixed_plan(trace: Trace, blocks: int, recompute: int,
                     name: str = "vdnn_blocks") -> Plan:
    """NOTE [block mix]: the first ``blocks`` blocks offloaded, the ``recompute`` after them
    checkpointed; either count 0 is the pure plan of the other."""
    if not recompute:
        return block_plan(trace, blocks, name)
    if not blocks:
        return block_recompute_plan(trace, recompute, name)
    plan = block_plan(trace, blocks, name)
    segs = tuple(block_segments(trace, recompute, blocks).values())
    if not segs:
        return plan
    offload = without_checkpointed(trace, segs, plan.offload)
    prefetch = tuple(p if p < 0 or offload[p] else -1 for p in plan.prefetch)
    return replace(plan, offload=offload, prefetch=prefetch, recompute=segs)


def vdnn_blocks(trace: Trace, gpu: GPU, capacity: int | None, options: dict[str, Any]) -> Plan:
    opts = dict(options)
    params = opts.pop("params", 0)
    if isinstance(params, bool) or not isinstance(params, int) or not 0 <= params <= 10**6:
        raise ConfigError(f"policy vdnn_blocks: option params must be a count of blocks "
                          f"from 0, got {params!r}")
    plan = _vdnn_blocks(trace, gpu, capacity, opts)
    # NOTE [parameter offload]: the first ``params`` blocks' weights on the host
    return replace(plan, params=param_groups(trace, params)) if params else plan


def _vdnn_blocks(trace: Trace, gpu: GPU, capacity: int | None,
                 opts: dict[str, Any]) -> Plan:
    blocks = opts.pop("blocks", None)
    budget = opts.pop("budget", None)
    recompute = opts.pop("recompute", None)
    check_options("vdnn_blocks", opts, set())
    if blocks is not None and budget is not None:
        raise ConfigError("policy vdnn_blocks: give blocks or budget, not both")
    if recompute is not None:
        if budget is not None:
            raise ConfigError("policy vdnn_blocks: recompute does not go with budget (the "
                              "budget's plan chooses both counts)")
        if isinstance(recompute, bool) or not isinstance(recompute, int) or \
                not 0 <= recompute <= 10**6:
            raise ConfigError(f"policy vdnn_blocks: option recompute must be a count of "
                              f"blocks from 0, got {recompute!r}")
        if blocks is None:
            return block_recompute_plan(trace, recompute)
        _count("blocks", blocks)
        return block_mixed_plan(trace, blocks, recompute)  # NOTE [block mix]
    regions = block_regions(trace)
    total = max(0, len(regions) - 2)
    if budget is not None:
        try:
            budget = _capacity(budget)
        except ValueError as exc:
            raise ConfigError(f"policy vdnn_blocks: option budget: {exc}") from None
        p = plan_blocks(trace, gpu, budget,  # NOTE [planning allocator]
                        allocator=planning_allocator())
        return block_mixed_plan(trace, p.blocks, p.recompute)
    if blocks is None:
        blocks = total
    _count("blocks", blocks)
    return block_plan(trace, blocks)


def _count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10**6:
        raise ConfigError(f"policy vdnn_blocks: option {name} must be a count of blocks "
                          f"from 0, got {value!r}")


# NOTE [block plan]
# For a trace with blocks (NOTE [block offload]) the plan is a count: the fewest blocks,
# offloaded from the first on, whose engine replay fits the budget (the engine judges; a
# block more never costs memory, so the first count that fits is the one), written as a
# ``vdnnsim-block-plan`` file (planner.py's ``block_plan_to_dict``) that `vdnnsim measure
# --plan` runs with the block runtime (vdnnsim/gpu/runtime/blocks.py). No algorithms to
# choose (one per op, as profiled), no batch split yet; checkpointing the first k blocks
# instead is NOTE [block recompute]. Each count is replayed as the policy ``vdnn_blocks``
# with that option would be (``run_trace`` of it gives the same memory and time).
# With the optimizer on the CPU the plan has a second count, the blocks whose parameters
# live on the host (NOTE [parameter offload]): for each such count from 0 on, the fewest
# offloaded (or checkpointed) blocks that then fit, found by bisection (fitting is taken
# as monotone in either count, as above); the fastest pair that fits wins. The scan stops
# at the first parameter count that fits with no activations moved (more parameters on
# the host then only add copies). A memory-only trace takes the fewest parameter blocks,
# then the fewest offloaded blocks, that fit (no time to weigh). On a timed trace whose
# blocks can be checkpointed, the mixes at the chosen parameter count last (NOTE [block
# mix], ``_with_mix``): the first o blocks offloaded and the fewest checkpointed
# after them that fit, counted up for each o while offloading o alone is faster than the
# plan so far; the fastest that fits wins.


@dataclass
class BlockPlan:
    blocks: int  # offloaded, from the first block on
    total: int  # blocks the model has
    fits: bool
    peak_memory_bytes: int
    iteration_time_ns: int
    tried: list[tuple[int, bool, int, int]] = field(default_factory=list)
    recompute: int = 0  # NOTE [block recompute]: blocks checkpointed, after the offloaded
    # ones where both counts are set (NOTE [block mix])
    tried_recompute: list[tuple[int, bool, int, int]] = field(default_factory=list)
    optimizer_offload: bool = False  # NOTE [optimizer offload]: the optimizer on the CPU
    params: int = 0  # NOTE [parameter offload]: blocks whose parameters are on the host
    optimizer_pinning: str = "caching"  # NOTE [optimizer pinning]: where its copies live
    # NOTE [block mix]: (parameter blocks, offloaded, checkpointed after them, fits, peak,
    # ns) of each replay of a mix (one that does not fit stopped there: its peak is where it
    # stopped, its ns 0), and the uncapped replays that bounded the search
    tried_mixed: list[tuple[int, int, int, bool, int, int]] = field(default_factory=list)
    mix_floors: int = 0
    # (parameter blocks, "offload" or "recompute", count, fits, peak, ns) of each replay
    # with parameters on the host
    tried_params: list[tuple[int, str, int, bool, int, int]] = field(default_factory=list)


def weighs_cpu_optimizer(trace: Trace, gpu: GPU) -> bool:
    """Whether ``plan_blocks`` with ``optimizer_offload=None`` tries the optimizer on the
    CPU: a PyTorch trace with weights, on a host whose CPU step is calibrated."""
    return bool(trace.pytorch and trace.weight_bytes and cpu_step_calibrated(gpu.host))


def plan_blocks(trace: Trace, gpu: GPU, budget: Any,
                optimizer_offload: bool | None = False, allocator: Any = None,
                pinning: str = "caching") -> BlockPlan:
    """NOTE [block plan]: the fewest offloaded blocks that fit ``budget`` (bytes, or a
    capacity like '22 GiB'), or, on a timed trace, the fewest checkpointed blocks (NOTE
    [block recompute]) if that is faster, or a mix of the first blocks offloaded and some
    after them checkpointed (NOTE [block mix]) if that is the fastest. ``optimizer_offload``: with the optimizer on
    the CPU (NOTE [optimizer offload]), or not; None: both ways, and the plan that fits
    wins, the faster where both do (a memory-only trace keeps the optimizer on the GPU
    where that fits: it has no time to weigh the CPU's step against), where the preset's
    host has a calibrated CPU step (else the optimizer stays on the GPU: its time would be
    unknown). With the optimizer on the CPU, blocks' parameters may stay on the host too
    (NOTE [parameter offload]). ``allocator``: the caching allocator's settings every
    count is replayed under (NOTE [planned allocator]; None: PyTorch's defaults).
    ``pinning``: where the optimizer on the CPU keeps its copies (NOTE [optimizer
    pinning]), which sets the host memory it needs."""
    if optimizer_offload is None:
        if not weighs_cpu_optimizer(trace, gpu):
            return plan_blocks(trace, gpu, budget, False, allocator)
        on_gpu = plan_blocks(trace, gpu, budget, False, allocator)
        if on_gpu.fits and not trace.timed:  # no time to weigh the CPU's step against
            return on_gpu
        on_cpu = plan_blocks(trace, gpu, budget, True, allocator, pinning)
        if on_gpu.fits != on_cpu.fits:
            return on_gpu if on_gpu.fits else on_cpu
        return on_cpu if on_cpu.iteration_time_ns < on_gpu.iteration_time_ns else on_gpu
    total = max(0, len(block_regions(trace)) - 2)
    if not total:
        raise ConfigError(f"{trace.name}: no blocks to offload (its layers carry no block "
                          "tags: profile or trace it from a model)")
    try:
        budget = _capacity(budget)
    except ValueError as exc:
        raise ConfigError(f"budget: {exc}") from None
    plans = {"blocks": block_plan, "recompute": block_recompute_plan}
    offload = bool(optimizer_offload)
    kept = pinning if offload else "caching"  # NOTE [optimizer pinning]
    allocator = allocator_settings(allocator)

    def replayed(option: str, k: int, params: int = 0, mixed: int = 0, *, capped: bool = True,
                 stop: bool = False) -> tuple[bool, int, int]:
        # mixed: NOTE [block mix], k offloaded blocks and the ``mixed`` after them
        # checkpointed; capped=False: on the whole card; stop: no time wanted if it does
        # not fit (the replay stops at its out-of-memory)
        if option == "floor":  # the copies of k offloaded with every block after them
            # checkpointed (the fewest any mix of k makes), and nothing run again
            plan = replace(block_mixed_plan(trace, k, total - k), recompute=())
        else:
            plan = block_mixed_plan(trace, k, mixed) if mixed else plans[option](trace, k)
        if offload:
            plan = replace(plan, optimizer_offload=True, optimizer_pinning=pinning,
                           params=param_groups(trace, params))
        with paused_gc():  # NOTE [paused gc], as run_trace's replay
            sim = replay(trace, gpu, plan, budget if capped else None, record_ops=False,
                         allocator=allocator, stop_at_oom=stop)
        r = (sim.oom is None, sim.peak_live_bytes, sim.end_ns)
        del sim
        return r

    def fewest(option: str) -> tuple[BlockPlan | None, list, tuple[bool, int, int]]:
        tried, r = [], (False, 0, 0)
        for k in range(total + 1):
            r = replayed(option, k)
            tried.append((k, *r))
            if r[0]:
                return BlockPlan(k, total, True, r[1], r[2], tried,
                                 optimizer_offload=offload, optimizer_pinning=kept), tried, r
        return None, tried, r

    can_wrap = trace.timed and bool(block_segments(trace, total))  # NOTE [block recompute]
    best, tried, r = fewest("blocks")
    if best is None:
        best = BlockPlan(total, total, False, r[1], r[2], tried, optimizer_offload=offload,
                         optimizer_pinning=kept)
    if trace.timed:
        rec, rtried = None, []
        if can_wrap:
            rec, rtried, _ = fewest("recompute")
        best.tried_recompute = rtried
        if rec is not None and (not best.fits or rec.iteration_time_ns < best.iteration_time_ns):
            best = BlockPlan(0, total, True, rec.peak_memory_bytes, rec.iteration_time_ns,
                             tried, recompute=rec.blocks, tried_recompute=rtried,
                             optimizer_offload=offload, optimizer_pinning=kept)
    moves = best.blocks or best.recompute  # what parameters on the host might spare
    if offload and (not best.fits or (trace.timed and moves)) and param_groups(trace, total):
        best = _with_params(best, total, replayed, can_wrap, trace.timed)
    if trace.timed and can_wrap and best.fits and (best.blocks or best.recompute):
        best = _with_mix(best, total, replayed)
    return best


def _fewest(best: BlockPlan, how: str) -> int | None:
    """The fewest ``how`` ('offload' or 'recompute') blocks that fit at ``best``'s count of
    parameter blocks, among the replays the plan made; None if none fit there."""
    if best.params:
        fit = [k for p, h, k, ok, _, _ in best.tried_params if p == best.params and h == how
               and ok]
    else:
        fit = [k for k, ok, _, _ in (best.tried if how == "offload" else best.tried_recompute)
               if ok]
    return min(fit) if fit else None


def _with_mix(best: BlockPlan, total: int, replayed: Any) -> BlockPlan:
    """NOTE [block mix]: at ``best``'s count of parameter blocks, for each count o of
    offloaded blocks (from 1, below the fewest that fit offloaded alone), the fewest r
    checkpointed after them that then fit, found by counting up (up to the fewest that
    fit checkpointed alone, or every block after them where that never fits); the fastest
    pair wins over ``best``. Counting up, not bisecting, as fitting is not monotone in r: a
    checkpointed block runs its forward again in the backward pass, which can make a new
    peak (VGG-16 (32) at 80% of its peak fits with 3 offloaded and 7 checkpointed, not
    with 8 to 13, and again with 14). The fewest r is taken as the fastest for its o (each
    block more runs again); near the cap the allocator can make a larger r faster, which
    this does not look for. The counts of o stop where o blocks offloaded on the whole
    card, with the copies of the mix of o that copies least (every block after them
    checkpointed: no checkpoint's input is copied) and nothing run again, are no faster
    than ``best``: a heuristic floor (a mix of them makes those copies or more, and runs
    blocks again), and each block more offloaded adds copies."""
    params, log = best.params, best.tried_mixed
    o_hi = _fewest(best, "offload")
    r_hi = _fewest(best, "recompute")
    floors = 0
    for o in range(1, total if o_hi is None else o_hi):
        ok, _, floor = replayed("floor", o, params, capped=False)
        floors += 1
        if ok and floor >= best.iteration_time_ns:
            break
        for r in range(1, min(total - o, total if r_hi is None else r_hi) + 1):
            ok, peak, ns = replayed("mix", o, params, r, stop=True)
            log.append((params, o, r, ok, peak, ns if ok else 0))
            if ok:
                if ns < best.iteration_time_ns:
                    best = replace(best, blocks=o, recompute=r, peak_memory_bytes=peak,
                                   iteration_time_ns=ns)
                break
    return replace(best, mix_floors=floors)


def _with_params(best: BlockPlan, total: int, replayed: Any, can_wrap: bool,
                 timed: bool) -> BlockPlan:
    """NOTE [parameter offload]: ``best`` (no parameters on the host) against the fastest
    pair of a parameter count and the fewest offloaded or checkpointed blocks that then
    fit (NOTE [block plan])."""
    log = best.tried_params

    def first_fit(option: str, params: int, hi: int) -> tuple[int, tuple] | None:
        """The fewest ``option`` blocks in 0..hi that fit with ``params`` (bisection)."""
        seen: dict[int, tuple] = {}

        def fits(k: int) -> bool:
            if k not in seen:
                seen[k] = replayed(option, k, params)
                log.append((params, "offload" if option == "blocks" else "recompute", k,
                             *seen[k]))
            return seen[k][0]
        if not fits(hi):
            return None
        lo = -1  # fits(lo) taken as false, fits(hi) true
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fits(mid) else (mid, hi)
        return hi, seen[hi]

    hi_off, hi_rec = total, total
    for params in range(1, total + 1):
        found = []
        off = first_fit("blocks", params, hi_off)
        if off is not None:
            hi_off = off[0]
            found.append(BlockPlan(off[0], total, True, off[1][1], off[1][2],
                                   best.tried, tried_recompute=best.tried_recompute,
                                   optimizer_offload=True, params=params, tried_params=log,
                                   optimizer_pinning=best.optimizer_pinning))
        if can_wrap:
            rec = first_fit("recompute", params, hi_rec)
            if rec is not None:
                hi_rec = rec[0]
                found.append(BlockPlan(0, total, True, rec[1][1], rec[1][2], best.tried,
                                       recompute=rec[0], tried_recompute=best.tried_recompute,
                                       optimizer_offload=True, params=params,
                                       tried_params=log,
                                       optimizer_pinning=best.optimizer_pinning))
        for cand in found:
            if not best.fits or (timed and cand.iteration_time_ns < best.iteration_time_ns):
                best = cand
        if not timed and best.fits:  # no time to weigh: the fewest parameter blocks
            return best
        if off is not None and off[0] == 0:  # nothing else moves: more only adds copies
            break
    return best
