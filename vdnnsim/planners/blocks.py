"""The block planner: how many blocks of a block-structured model to
offload, checkpoint or mix, and whose parameters go to the host, judged by replaying each
count as the policy vdnn_blocks (policies/blocks.py) plans it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..engine import allocator_settings, cpu_step_calibrated, optimizer_state, replay
from ..errors import ConfigError
from ..hardware import GPU, _capacity
from ..policies.blocks import (block_mixed_plan, block_plan, block_recompute_plan,
                               block_regions, block_segments, param_groups)
from ..trace.model import Trace
from ..yamlio import paused_gc


# NOTE [block plan]
# For a trace with blocks the plan is a count: the fewest blocks, offloaded from the first
# on, whose engine replay fits the budget (a block more never costs memory, so the first
# count that fits is the one), each count replayed as the policy ``vdnn_blocks`` would
# plan it; or the fewest checkpointed (NOTE [block recompute]) where that is faster. With
# the optimizer on the CPU a second count, the blocks whose parameters live on the host: for
# each from 0 on, the fewest offloaded (or checkpointed) blocks that then fit, by bisection;
# the fastest pair wins, and the scan stops at the first count that fits with no activation
# moved. A memory-only trace takes the fewest parameter blocks, then the fewest offloaded
# ones (no time to weigh). On a timed trace whose blocks can be checkpointed, the mixes at
# the chosen parameter count come last (``_with_mix``).


@dataclass
class BlockPlan:
    blocks: int  # offloaded, from the first block on
    total: int  # blocks the model has
    fits: bool
    peak_memory_bytes: int
    iteration_time_ns: int
    tried: list[tuple[int, bool, int, int]] = field(default_factory=list)
    recompute: int = 0  # blocks checkpointed, after the offloaded
    # ones where both counts are set
    tried_recompute: list[tuple[int, bool, int, int]] = field(default_factory=list)
    optimizer_offload: bool = False  # the optimizer on the CPU
    params: int = 0  # blocks whose parameters are on the host
    optimizer_pinning: str = "caching"  # where its copies live
    # (parameter blocks, offloaded, checkpointed after them, fits, peak,
    # ns) of each replay of a mix (one that does not fit stopped there: its peak is where it
    # stopped, its ns 0), and the uncapped replays that bounded the search
    tried_mixed: list[tuple[int, int, int, bool, int, int]] = field(default_factory=list)
    mix_floors: int = 0
    # (parameter blocks, "offload" or "recompute", count, fits, peak, ns) of each replay
    # with parameters on the host (one that does not fit stopped there: its peak and ns are
    # where it stopped)
    tried_params: list[tuple[int, str, int, bool, int, int]] = field(default_factory=list)


def weighs_cpu_optimizer(trace: Trace, gpu: GPU) -> bool:
    """Whether ``plan_blocks`` with ``optimizer_offload=None`` tries the optimizer on the
    CPU: a PyTorch trace with weights of one micro-batch a step (the CPU optimizer with
    gradient accumulation is not modelled), on a host whose CPU step is calibrated."""
    return bool(trace.pytorch and trace.weight_bytes and trace.micro_batches == 1
                and cpu_step_calibrated(gpu.host))


def plan_blocks(trace: Trace, gpu: GPU, budget_bytes: Any,
                optimizer_offload: bool | None = False, allocator: Any = None,
                pinning: str = "caching") -> BlockPlan:
    """The fewest offloaded blocks that fit ``budget_bytes`` (bytes, or a
    capacity like '22 GiB'), or, on a timed trace, the fewest checkpointed blocks
    (NOTE [block recompute]) if that is faster, or a mix of the first blocks offloaded and some
    after them checkpointed if that is the fastest. ``optimizer_offload``: with the optimizer on
    the CPU, or not; None: both ways, and the plan that fits
    wins, the faster where both do (a memory-only trace keeps the optimizer on the GPU
    where that fits: it has no time to weigh the CPU's step against), where the preset's
    host has a calibrated CPU step (else the optimizer stays on the GPU: its time would be
    unknown). With the optimizer on the CPU, blocks' parameters may stay on the host too.
    ``allocator``: the caching allocator's settings every
    count is replayed under (None: PyTorch's defaults).
    ``pinning``: where the optimizer on the CPU keeps its copies, which sets the host memory it
    needs."""
    if optimizer_offload is None:
        if not weighs_cpu_optimizer(trace, gpu):
            return plan_blocks(trace, gpu, budget_bytes, False, allocator)
        if trace.timed and _gpu_cannot_hold(trace, budget_bytes):  # the answer is the
            on_cpu = plan_blocks(trace, gpu, budget_bytes, True, allocator, pinning)  # one
            if on_cpu.fits:  # below would give, without replaying the hopeless ones first
                return on_cpu
        on_gpu = plan_blocks(trace, gpu, budget_bytes, False, allocator)
        if on_gpu.fits and not trace.timed:  # no time to weigh the CPU's step against
            return on_gpu
        on_cpu = plan_blocks(trace, gpu, budget_bytes, True, allocator, pinning)
        if on_gpu.fits != on_cpu.fits:
            return on_gpu if on_gpu.fits else on_cpu
        return on_cpu if on_cpu.iteration_time_ns < on_gpu.iteration_time_ns else on_gpu
    total = max(0, len(block_regions(trace)) - 2)
    if not total:
        raise ConfigError(f"{trace.name}: no blocks to offload (its layers carry no block "
                          "tags: profile or trace it from a model)")
    try:
        budget_bytes = _capacity(budget_bytes)
    except ValueError as exc:
        raise ConfigError(f"budget: {exc}") from None
    plans = {"blocks": block_plan, "recompute": block_recompute_plan}
    offload = bool(optimizer_offload)
    kept = pinning if offload else "caching"
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
        with paused_gc():  # as run_trace's replay
            sim = replay(trace, gpu, plan, budget_bytes if capped else None, record_ops=False,
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

    # (a model that checkpoints itself is checkpointed by no plan: stepopts.py)
    can_wrap = trace.timed and not trace.checkpointed and bool(block_segments(trace, total))
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


def _gpu_cannot_hold(trace: Trace, budget_bytes: Any) -> bool:
    """Whether the weights and the optimizer's state, both on the GPU from the first step
    on, are alone more than ``budget_bytes``: no plan with the optimizer there fits."""
    try:
        budget = _capacity(budget_bytes)
    except ValueError:
        return False  # the search below says what is wrong with it
    return trace.weight_bytes + sum(optimizer_state(trace)) > budget


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
    """At ``best``'s count of parameter blocks, for each count o of
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
    fit."""
    log = best.tried_params

    def first_fit(option: str, params: int, hi: int) -> tuple[int, tuple] | None:
        """The fewest ``option`` blocks in 0..hi that fit with ``params`` (bisection)."""
        seen: dict[int, tuple] = {}

        def fits(k: int) -> bool:
            if k not in seen:
                seen[k] = replayed(option, k, params, stop=True)  # a miss: no time wanted
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
