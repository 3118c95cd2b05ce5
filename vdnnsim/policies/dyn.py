"""vDNN_dyn: profiling passes pick the fastest configuration that fits.

NOTE [vdnn_dyn]
The paper's steps (shared/reference/vdnn_paper.md), each a profiling pass, which here is a
simulation of the candidate plan against the pool capacity:

1. vDNN_all with memory-optimal algorithms: if even that does not fit, the network cannot
   train; the plan is returned as is and the run reports where it ran out.
2. The fastest algorithms with no offload, then with vDNN_conv, then with vDNN_all: the
   first that fits wins.
3. Greedy, with vDNN_conv and then vDNN_all: run the pass; where a layer overflows,
   downgrade that layer's algorithm toward implicit GEMM (to the fastest option whose
   workspace is small enough to close the gap, else the leanest), and run again, until it
   fits or the overflowing layer has nothing left to give.
4. Otherwise the plan of step 1.
A profiling pass asks only whether and where the plan runs out of memory, so it stops at
the first layer after an out-of-memory (``replay(stop_at_oom=True)``); a pass that
fits runs whole, and is the result that run_trace reuses when it records no timeline.

What step 2's first candidate must fit (option ``no_offload_check``): for a Torch7 trace
(the paper's runtime) 'network_wide', the network-wide baseline with the fastest
algorithms, Torch's own allocation without vDNN; the plan it then runs is layer-wise with
no offload. The paper's figures decide between this and 'layer_wise' (the candidate itself
fits, PyTorch traces' default: they have no network-wide runtime): VGG-16 (128) under
vDNN_dyn is, in Fig. 11 and 14, vDNN_conv(p) to the MiB (avg 3852, max 6342, 1.000 of
baseline in both bars), so the paper's step 2 found that "no offload" did not fit at 128,
where base(p) needs 14475 MiB and the layer-wise plan without offload 9.5 GB here; at
64, where base(p) fits, its bars are the layer-wise run without offload (avg 3696 below
max 6342), and AlexNet, OverFeat and GoogLeNet (128), whose base(p) fits, run at 1.000.

Step 2's first candidate (the fastest algorithms, no offload) is profiled before step 1:
when it fits, the paper's answer is that plan whatever step 1 finds, so the feasibility
pass is skipped (one simulation fewer for every network that fits without offload). The
one input where the order shows is a pool where that plan fits and vDNN_all(m) does not
(fragmentation could do it): the paper's order would report out of memory, this one
returns the plan that fits.

The chosen plan carries its profiling pass (``Plan.profiled``): run_trace reports that
simulation rather than repeating it (the same deterministic simulation of the same plan).
Step 3's first pass of each kind is step 2's, and is not run again. Every pass but step
1's records its op timeline, since the first that fits is the answer;
step 1's does not, and a run that falls back to it and wants a timeline simulates it again.
"""

from __future__ import annotations

from typing import Any

from ..engine import Replayed, replay
from ..errors import ConfigError
from ..limits import short_repr
from ..hardware import GPU
from ..trace.model import Trace
from .builtin import algo_choice, check_options, common_options, vdnn_plan
from .context import NO_CONTEXT, PolicyContext
from .plan import Plan, downgrade, liveness


NO_OFFLOAD_CHECKS = ("network_wide", "layer_wise")


def network_wide_fits(trace: Trace, gpu: GPU, algos: tuple[int, ...], capacity: int | None,
                      lv, like: Plan, ctx: PolicyContext = NO_CONTEXT) -> bool:
    """Whether Torch's network-wide allocation with ``algos`` fits."""
    n = len(trace.layers)
    base = Plan("baseline_p", "network_wide", algos, ((),) * n, (-1,) * n,
                placement=like.placement)
    return replay(trace, gpu, base, capacity, lv, record_ops=False, stop_at_oom=True,
                  allocator=ctx.allocator).oom is None


def vdnn_dyn(trace: Trace, gpu: GPU, capacity: int | None, options: dict[str, Any],
             ctx: PolicyContext = NO_CONTEXT) -> Plan:
    opts = dict(options)
    c = common_options("vdnn_dyn", opts, trace)
    sync, prefetch, reading = c.sync, c.prefetch, c.reading
    more = {"distance": c.distance, "placement": c.placement, "joins": True}
    check = opts.pop("no_offload_check", "layer_wise" if trace.pytorch else "network_wide")
    if check not in NO_OFFLOAD_CHECKS:
        raise ConfigError(f"policy vdnn_dyn: option no_offload_check must be one of "
                          f"{', '.join(NO_OFFLOAD_CHECKS)}, got {short_repr(check)}")
    check_options("vdnn_dyn", opts, {"no_offload_check"})
    lv = liveness(trace)

    passes: dict[str, tuple[Plan, Replayed]] = {}  # step 1's pass and the latest other
    seen: dict[tuple, Replayed] = {}  # (which, algos) -> its pass: step 3 starts where
    # step 2 left off, with the fastest algorithms, and need not run that pass again

    def profile(plan: Plan, slot: str = "latest", key: tuple | None = None):
        if key in seen:
            passes[slot] = (plan, seen[key])
            return seen[key].oom
        # only whether and where it runs out counts: a pass stops at its first OOM; one
        # that fits is the answer (step 1's excepted), so it records its timeline
        run = plan.trace if plan.trace is not None else trace
        sim = replay(run, gpu, plan, capacity, lv if run is trace else liveness(run),
                     record_ops=slot != "step1", stop_at_oom=True,
                     allocator=ctx.allocator)
        passes[slot] = (plan, sim)
        if key is not None:
            seen[key] = sim
        return sim.oom

    def done(plan: Plan, note: str) -> Plan:
        sim = next((s for p, s in passes.values() if p is plan), None)
        if sim is not None and sim.stopped:  # a partial pass is no result to reuse
            sim = None
        return Plan("vdnn_dyn", plan.memory, plan.algos, plan.offload, plan.prefetch,
                    plan.sync, (note,), profiled=sim, runtime=plan.runtime,
                    placement=plan.placement, trace=plan.trace)

    fastest, leanest = algo_choice(trace, "p"), algo_choice(trace, "m")
    plan = vdnn_plan(trace, "none", fastest, sync, prefetch=prefetch, reading=reading, **more)
    if (check == "layer_wise" or network_wide_fits(trace, gpu, fastest, capacity, lv, plan, ctx)) \
            and profile(plan) is None:
        return done(plan, "step 2: fastest algorithms, offload none")
    step1 = vdnn_plan(trace, "all", leanest, sync, prefetch=prefetch, reading=reading, **more)
    if profile(step1, "step1") is not None:
        return done(step1, "step 1: even vDNN_all with memory-optimal algorithms runs out "
                    "of memory")
    for which in ("conv", "all"):
        plan = vdnn_plan(trace, which, fastest, sync, prefetch=prefetch, reading=reading, **more)
        if profile(plan, key=(which, tuple(fastest))) is None:
            return done(plan, f"step 2: fastest algorithms, offload {which}")
    for which in ("conv", "all"):
        algos = list(fastest)
        while True:
            plan = vdnn_plan(trace, which, tuple(algos), sync, prefetch=prefetch,
                             reading=reading, **more)
            oom = profile(plan, key=(which, tuple(algos)))
            if oom is None:
                changed = sum(a != f for a, f in zip(algos, fastest))
                return done(plan, f"step 3: greedy, offload {which}, {changed} layer(s) "
                            "moved to slower algorithms")
            if oom.kind != "workspace":
                break  # only the overflowing layer's own workspace is live when it runs
            i = trace.layer_index(oom.layer)
            choice = downgrade(trace, i, algos[i], oom.requested_bytes - oom.largest_free_bytes)
            if choice is None:
                break
            algos[i] = choice
    return done(step1, "step 4: fell back to vDNN_all with memory-optimal algorithms")
