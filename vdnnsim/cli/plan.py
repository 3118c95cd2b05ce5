"""The plan command: plan a run config's network under a memory budget."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..units import GiB
from .common import shown, writable


def cmd_plan(args: argparse.Namespace) -> int:
    """NOTE [planner]: plan a run config's network under a budget; print and write it."""
    from pathlib import Path

    from ..api import build_trace, resolve_gpu, run_trace
    from ..config import load_config
    from ..errors import ConfigError, in_file
    from ..hardware import _capacity
    from ..trace.optimizer import with_optimizer
    from ..planners.greedy import plan_to_dict, search_plan

    writable(args.output)
    cfg, base = load_config(args.config)
    try:
        budget = _capacity(args.budget)
    except ValueError as exc:
        raise ConfigError(f"--budget: {exc}") from None
    name, overrides = cfg.gpu_name_and_overrides()
    with in_file(args.config, "gpu"):
        gpu = resolve_gpu(name, overrides)
    network = cfg.network
    if not Path(network).is_absolute() and (Path(base) / network).exists():
        network = str(Path(base) / network)
    with in_file(args.config, "network"):
        trace = with_optimizer(build_trace(network, cfg.batch_size, gpu, cfg.dtype),
                               cfg.optimizer)
    from ..api import _allocator_for
    if args.allocator:  # NOTE [planned allocator]: the flag over the config's
        from ..engine.allocconf import parse_pairs
        settings = _allocator_for(trace, parse_pairs(args.allocator))
    else:
        with in_file(args.config, "allocator"):
            settings = _allocator_for(trace, cfg.allocator.model_dump() if cfg.allocator
                                      else None)
    from ..policies.blocks import block_regions
    offload = args.optimizer_offload or ("on" if cfg.optimizer_offload else "auto")
    if args.method == "blocks" or args.method == "auto" and len(block_regions(trace)) > 2:
        return _plan_blocks(args, trace, gpu, budget,
                            {"auto": None, "on": True, "off": False}[offload], settings,
                            cfg.optimizer_pinning)
    if cfg.optimizer_pinning != "caching":  # NOTE [optimizer pinning]
        raise ConfigError(f"{args.config}: optimizer_pinning: {cfg.optimizer_pinning} is "
                          "planned by the block planner only (--method blocks, a model with "
                          "blocks); the layer planners count the pinned allocator's copies")
    on_cpu = offload == "on"  # NOTE [optimizer offload]: auto keeps it on the GPU here
    if not trace.timed:  # NOTE [memory-only traces]: these planners pick the fastest plan
        raise ConfigError(f"{args.config}: network: {cfg.network} is a memory-only trace "
                          f"(every layer 0 ns), and --method {args.method} picks the fastest "
                          "plan by times it does not have; plan by memory with --method "
                          "blocks (a model with blocks), or plan a timed trace (vdnnsim "
                          "profile on a GPU)")
    plan, search = search_plan(trace, gpu, budget, method=args.method,
                               headroom=not args.no_headroom, allocator=settings,
                               optimizer_offload=on_cpu)
    head = _plan_head(trace, gpu, budget, settings) + (
        ", optimizer on the CPU" if on_cpu else "")
    ref = {p: run_trace(trace, gpu, p, memory_bytes=budget, record=False, allocator=settings,
                        optimizer_offload=on_cpu)
           for p in ("eager" if trace.pytorch else "baseline_p", "vdnn_dyn")}
    if plan is None:
        print(f"{head}: no plan found that fits ({search.simulations} simulations)")
        for p, r in ref.items():
            print(f"  {p}: {'fits' if r.fits else 'out of memory'}")
        return 1
    from ..api import run_plan
    if plan.trace is not None:  # NOTE [batch split]: the plan runs a reshaped network
        trace = plan.trace
    r = run_plan(trace, gpu, plan, budget, allocator=settings)
    print(f"{head}: {search.simulations} simulations")
    for step in search.steps:
        print(f"  {step}")
    moved = [(trace.layers[i].id, b) for i, o in enumerate(plan.offload) for b in o]
    fastest = [x.fastest_algo() for x in trace.layers]
    leaner = [(x.id, x.algos[a].name) for x, a, f in zip(trace.layers, plan.algos, fastest)
              if a != f]
    print(f"plan: {len(moved)} buffer(s) offloaded ({r.offloaded_bytes / GiB:.2f} GiB), "
          f"{len(leaner)} layer(s) on a leaner algorithm, {len(plan.recompute)} checkpointed "
          f"segment(s)" + "".join(f", {a}..{b} split in {k}" for a, b, k in plan.split))
    from ..report.table import format_seconds, format_slowdown
    print(f"{'policy':10s} {'fits':4s} {'peak GiB':>8s} {'iter ms':>9s} {'slowdown':>8s}")
    for p, x in (("planned", r), *ref.items()):
        print(f"{p:10s} {'yes' if x.fits else 'no':4s} {x.peak_memory_bytes / GiB:8.2f} "
              f"{format_seconds(x.iteration_time_s * 1e3, 1):>9s} "
              f"{format_slowdown(x.slowdown):>8s}")
    from ..planners.greedy import OP_PLAN_CANNOT_RUN, fragmentation_caution, layer_names
    if layer_names(trace) == "ops":
        print(f"note: {OP_PLAN_CANNOT_RUN}", file=sys.stderr)
    if on_cpu:
        _uncalibrated_cpu_step(gpu)
    caution = fragmentation_caution(trace, budget, r.peak_memory_bytes, settings)
    if caution:
        print(caution, file=sys.stderr)
    if args.output:  # NOTE [plan files]
        from ..planners.planfile import write_plan_file
        predicted = {"peak_memory_bytes": r.peak_memory_bytes,
                     "iteration_time_ns": r.iteration_time_ns}
        write_plan_file(args.output, plan_to_dict(trace, gpu, budget, plan, predicted,
                                                  settings))
        print(f"wrote {shown(args.output)}: replay it with policy 'planned', "
              f"policy_options: {{file: {args.output}}}", file=sys.stderr)
    return 0


def _uncalibrated_cpu_step(gpu: Any) -> None:
    """A plan with the optimizer on the CPU: a note where the preset's host has no
    calibration of the CPU step, which the plan's time then leaves out."""
    from ..engine.optimizer_step import cpu_step_calibrated
    if not cpu_step_calibrated(gpu.host):
        print(f"note: {gpu.name}'s host has no calibration of the CPU optimizer step: the "
              "plan's time leaves it out (NOTE [optimizer offload])", file=sys.stderr)


def _plan_head(trace: Any, gpu: Any, budget: int, settings: Any) -> str:
    """The first line of a plan's report (the allocator's settings where not PyTorch's
    defaults, NOTE [planned allocator])."""
    return (f"{trace.name} ({trace.batch_size}) on {gpu.name}, budget {budget / GiB:.2f} GiB"
            + ("" if settings.default else f", allocator {settings.conf()}"))


def _plan_blocks(args: argparse.Namespace, trace: Any, gpu: Any, budget: int,
                 optimizer_offload: bool | None, settings: Any,
                 pinning: str = "caching") -> int:
    """NOTE [block plan]: a transformer's plan, the fewest offloaded blocks that fit;
    ``optimizer_offload`` as plan_blocks takes it (NOTE [optimizer offload]);
    ``settings``: the caching allocator's (NOTE [planned allocator])."""
    from ..api import run_trace
    from ..planners.planfile import write_plan_file
    from ..planners.greedy import block_plan_to_dict, plan_blocks
    from ..report.table import UNTIMED_NOTE, format_slowdown

    plan = plan_blocks(trace, gpu, budget, optimizer_offload, settings, pinning)
    head = _plan_head(trace, gpu, budget, settings)
    if plan.optimizer_offload:
        head += ", optimizer on the CPU"
    timed = trace.timed  # NOTE [memory-only traces]: a count that fits by memory alone
    n = (len(plan.tried) + len(plan.tried_recompute) + len(plan.tried_params)
         + len(plan.tried_mixed) + plan.mix_floors)
    print(f"{head}: {n} simulations, {plan.total} blocks")
    for what, tried in (("offloaded", plan.tried), ("checkpointed", plan.tried_recompute)):
        for k, fits, peak, ns in tried:
            print(f"  {k:3d} block(s) {what}: {'fits' if fits else 'out of memory'}, "
                  f"peak {peak / GiB:.2f} GiB" + (f", {ns / 1e6:.1f} ms" if timed else ""))
    # NOTE [parameter offload]: per count of blocks whose parameters are on the host, the
    # fewest offloaded and checkpointed blocks that fit (the bisection's other tries left out)
    best: dict[tuple[int, str], tuple[int, int, int]] = {}
    DONE = {"offload": "offloaded", "recompute": "checkpointed"}
    for p, how, k, fits, peak, ns in plan.tried_params:
        best.setdefault((p, how), (-1, 0, 0))
        if fits and (best[p, how][0] < 0 or k < best[p, how][0]):
            best[p, how] = (k, peak, ns)
    for (p, how), (k, peak, ns) in best.items():
        print(f"  {p:3d} block(s)' parameters on the host: " + (
            f"fits with {k} block(s) {DONE.get(how, how)}, peak {peak / GiB:.2f} GiB"
            + (f", {ns / 1e6:.1f} ms" if timed else "") if k >= 0 else
            f"out of memory with every block {DONE.get(how, how)}"))
    # NOTE [block mix]: per count of offloaded blocks, the count checkpointed after them
    # that fits (the fewest; the counts tried below it left out)
    mixes: dict[tuple[int, int], tuple[int, int, int]] = {}
    for p, o, r, fits, peak, ns in plan.tried_mixed:
        if fits and ((p, o) not in mixes or ns < mixes[p, o][2]):
            mixes[p, o] = (r, peak, ns)
    for (p, o), (r, peak, ns) in sorted(mixes.items()):
        print(f"  {o:3d} block(s) offloaded, then {r} checkpointed"
              + (f" ({p} blocks' parameters on the host)" if p else "")
              + f": fits, peak {peak / GiB:.2f} GiB, {ns / 1e6:.1f} ms")
    if not plan.fits:
        print(f"{head}: no plan found that fits, even with every block offloaded")
        from ..engine.compile import optimizer_host_bytes
        from ..policies.blocks import weighs_cpu_optimizer
        need, host = optimizer_host_bytes(trace, pinning), gpu.host_memory_bytes
        if (optimizer_offload is not False and weighs_cpu_optimizer(trace, gpu)
                and host is not None and need > host):
            # NOTE [host memory]: why the optimizer on the CPU did not help
            print(f"  the optimizer on the CPU needs {need / GiB:.2f} GiB of host memory; the "
                  f"host has {host / GiB:.2f} GiB (gpu.host_memory_bytes)")
        if not timed:
            print(UNTIMED_NOTE)
        return 1
    base = run_trace(trace, gpu, "eager", record=False, allocator=settings)
    if plan.optimizer_offload:
        _uncalibrated_cpu_step(gpu)
    if timed:
        ratio = (plan.iteration_time_ns / base.iteration_time_ns if base.iteration_time_ns
                 else float("nan"))
        what = (f"offload the first {plan.blocks} and checkpoint the {plan.recompute} "
                f"after them" if plan.recompute and plan.blocks  # NOTE [block mix]
                else f"checkpoint the first {plan.recompute}" if plan.recompute
                else f"offload the first {plan.blocks}")  # NOTE [block recompute]
        if plan.params:  # NOTE [parameter offload]
            what += f" and keep the parameters of the first {plan.params} on the host,"
        print(f"plan: {what} of {plan.total} blocks: "
              f"{plan.iteration_time_ns / 1e6:.1f} ms, {format_slowdown(ratio)} "
              f"the step without a cap ({base.iteration_time_ns / 1e6:.1f} ms, peak "
              f"{base.peak_memory_bytes / GiB:.2f} GiB)")
    else:
        print(f"plan: offload the first {plan.blocks} of {plan.total} blocks"
              + (f", the parameters of the first {plan.params} on the host" if plan.params
                 else "") + ": peak "
              f"{plan.peak_memory_bytes / GiB:.2f} GiB (the step without a cap: peak "
              f"{base.peak_memory_bytes / GiB:.2f} GiB)")
        print(UNTIMED_NOTE)
    from ..planners.greedy import fragmentation_caution
    caution = fragmentation_caution(trace, budget, plan.peak_memory_bytes, settings)
    if caution:
        print(caution, file=sys.stderr)
    if args.output:
        write_plan_file(args.output, block_plan_to_dict(trace, gpu, budget, plan, settings))
        print(f"wrote {shown(args.output)}: run it with vdnnsim measure --plan "
              f"{args.output}", file=sys.stderr)
    return 0


