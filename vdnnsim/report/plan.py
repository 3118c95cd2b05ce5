"""The text of a plan report (`vdnnsim plan`): what the planner tried, the plan, and the
policies beside it. Lines for stdout, and notes for stderr."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..engine import AllocatorSettings
from ..hardware import GPU
from ..results import RunResult
from ..trace.model import Trace
from ..units import GiB
from .table import UNTIMED_NOTE, format_seconds, format_slowdown

DONE = {"offload": "offloaded", "recompute": "checkpointed"}


@dataclass(frozen=True)
class LayerPlanReport:
    """What a layer planner (MILP, greedy) found for a run config under a budget: the plan
    (None: none fits), its search, its replay and the policies it is compared with."""

    trace: Trace  # the trace the plan runs (reshaped where it splits the batch)
    gpu: GPU
    budget_bytes: int
    allocator: AllocatorSettings
    optimizer_offload: bool
    plan: Any  # the planner's Plan, or None
    search: Any  # its Search: steps and simulations
    planned: RunResult | None
    reference: tuple[tuple[str, RunResult], ...]  # the policies beside it
    caution: str | None  # the fragmentation caution (planners.greedy)
    op_layers: bool  # the plan names an op-by-op trace's ATen ops: the runtime cannot run it
    cpu_step_calibrated: bool
    plan_file: dict[str, Any] | None  # the plan file's contents
    margin_bytes: int = 0  # of the budget, left free (NOTE [plan margin])
    host_notes: tuple[str, ...] = ()  # the host calibration's line, or the band's

    @property
    def fits(self) -> bool:
        return self.plan is not None


@dataclass(frozen=True)
class BlockPlanReport:
    """What the block planner found for a run config under a budget."""

    trace: Trace
    gpu: GPU
    budget_bytes: int
    allocator: AllocatorSettings
    plan: Any  # the planner's BlockPlan
    uncapped: RunResult | None  # the step without a cap (eager), where a plan fits
    host_short: tuple[int, int] | None  # (needed, host) bytes where the host is too small
    caution: str | None
    cpu_step_calibrated: bool
    plan_file: dict[str, Any] | None
    margin_bytes: int = 0
    host_notes: tuple[str, ...] = ()  # as LayerPlanReport's

    @property
    def fits(self) -> bool:
        return bool(self.plan.fits)


PlanReport = LayerPlanReport | BlockPlanReport


def format_plan(report: "PlanReport") -> tuple[list[str], list[str]]:
    """The report's lines for stdout and its notes for stderr."""
    if isinstance(report, BlockPlanReport):
        return _block_lines(report), _notes(report, report.plan.peak_memory_bytes
                                            if report.fits else None)
    return _layer_lines(report), _notes(report, report.planned.peak_memory_bytes
                                        if report.planned else None)


def plan_head(report: "PlanReport", on_cpu: bool) -> str:
    """The first line's start: the network, the GPU, the budget, the allocator's settings
    where not PyTorch's defaults, and the optimizer where on the CPU."""
    t, s = report.trace, report.allocator
    return (f"{t.name} ({t.batch_size}) on {report.gpu.name}, budget "
            f"{report.budget_bytes / GiB:.2f} GiB"
            + (f" ({report.margin_bytes / GiB:.2f} GiB of it left free)"
               if report.margin_bytes else "")
            + ("" if s.default else f", allocator {s.conf()}")
            + (", optimizer on the CPU" if on_cpu else ""))


def uncalibrated_cpu_step(gpu_name: str) -> str:
    return (f"note: {gpu_name}'s host has no calibration of the CPU optimizer step: the "
            "plan's time leaves it out")


def _notes(report: "PlanReport", peak: int | None) -> list[str]:
    from ..costs.retime import run_note
    from ..planners.greedy import OP_PLAN_CANNOT_RUN
    out = [f"note: {n}" for n in run_note(report.trace)]  # NOTE [retime]
    out += [f"note: {n}" for n in report.host_notes]  # the host calibration's, or band
    if peak is None:
        return out
    if getattr(report, "op_layers", False):
        out.append(f"note: {OP_PLAN_CANNOT_RUN}")
    on_cpu = getattr(report, "optimizer_offload", None)
    if on_cpu is None:
        on_cpu = report.plan.optimizer_offload
    if on_cpu and not report.cpu_step_calibrated:
        out.append(uncalibrated_cpu_step(report.gpu.name))
    if report.caution:
        out.append(report.caution)
    from ..costs.workspaces import unknown_workspaces
    convs = unknown_workspaces(report.trace)
    if convs:
        out.append(f"note: this trace's {convs} convolution(s) have no workspace (no "
                   "predicted class covers them): on the GPU theirs come on top of "
                   "the planned peak, and near the cap the caching allocator may free its "
                   "cache and retry, a cost the plan's time leaves out")
    return out


def _layer_lines(r: "LayerPlanReport") -> list[str]:
    head = plan_head(r, r.optimizer_offload)
    if r.plan is None:
        return [f"{head}: no plan found that fits ({r.search.simulations} simulations)"] + [
            f"  {p}: {'fits' if x.fits else 'out of memory'}" for p, x in r.reference]
    out = [f"{head}: {r.search.simulations} simulations"]
    out += [f"  {step}" for step in r.search.steps]
    trace, plan, planned = r.trace, r.plan, r.planned
    moved = [(trace.layers[i].id, b) for i, o in enumerate(plan.offload) for b in o]
    fastest = [x.fastest_algo() for x in trace.layers]
    leaner = [x.id for x, a, f in zip(trace.layers, plan.algos, fastest) if a != f]
    out.append(f"plan: {len(moved)} buffer(s) offloaded ({planned.offloaded_bytes / GiB:.2f} "
               f"GiB), {len(leaner)} layer(s) on a leaner algorithm, {len(plan.recompute)} "
               f"checkpointed segment(s)"
               + "".join(f", {a}..{b} split in {k}" for a, b, k in plan.split))
    out.append(f"{'policy':10s} {'fits':4s} {'peak GiB':>8s} {'iter ms':>9s} {'slowdown':>8s}")
    for p, x in (("planned", planned), *r.reference):
        out.append(f"{p:10s} {'yes' if x.fits else 'no':4s} {x.peak_memory_bytes / GiB:8.2f} "
                   f"{format_seconds(x.iteration_time_s * 1e3, 1):>9s} "
                   f"{format_slowdown(x.slowdown):>8s}")
    return out


def _tried(r: "BlockPlanReport") -> list[str]:
    """Each count of blocks tried, offloaded or checkpointed; per count of blocks whose
    parameters are on the host, the fewest that fit; per count offloaded, the count
    checkpointed after them that fits."""
    plan, timed = r.plan, r.trace.timed
    out = []
    for what, tried in (("offloaded", plan.tried), ("checkpointed", plan.tried_recompute)):
        for k, fits, peak, ns in tried:
            out.append(f"  {k:3d} block(s) {what}: {'fits' if fits else 'out of memory'}, "
                       f"peak {peak / GiB:.2f} GiB" + (f", {ns / 1e6:.1f} ms" if timed else ""))
    best: dict[tuple[int, str], tuple[int, int, int]] = {}
    for p, how, k, fits, peak, ns in plan.tried_params:
        best.setdefault((p, how), (-1, 0, 0))
        if fits and (best[p, how][0] < 0 or k < best[p, how][0]):
            best[p, how] = (k, peak, ns)
    for (p, how), (k, peak, ns) in best.items():
        out.append(f"  {p:3d} block(s)' parameters on the host: " + (
            f"fits with {k} block(s) {DONE.get(how, how)}, peak {peak / GiB:.2f} GiB"
            + (f", {ns / 1e6:.1f} ms" if timed else "") if k >= 0 else
            f"out of memory with every block {DONE.get(how, how)}"))
    mixes: dict[tuple[int, int], tuple[int, int, int]] = {}
    for p, o, k, fits, peak, ns in plan.tried_mixed:
        if fits and ((p, o) not in mixes or ns < mixes[p, o][2]):
            mixes[p, o] = (k, peak, ns)
    for (p, o), (k, peak, ns) in sorted(mixes.items()):
        out.append(f"  {o:3d} block(s) offloaded, then {k} checkpointed"
                   + (f" ({p} blocks' parameters on the host)" if p else "")
                   + f": fits, peak {peak / GiB:.2f} GiB, {ns / 1e6:.1f} ms")
    return out


def _block_lines(r: "BlockPlanReport") -> list[str]:
    plan, timed = r.plan, r.trace.timed
    head = plan_head(r, plan.optimizer_offload)
    n = (len(plan.tried) + len(plan.tried_recompute) + len(plan.tried_params)
         + len(plan.tried_mixed) + plan.mix_floors)
    out = [f"{head}: {n} simulations, {plan.total} blocks"] + _tried(r)
    if not plan.fits:
        out.append(f"{head}: no plan found that fits, even with every block offloaded")
        if r.host_short is not None:
            need, host = r.host_short
            out.append(f"  the optimizer on the CPU needs {need / GiB:.2f} GiB of host memory; "
                       f"the host has {host / GiB:.2f} GiB (gpu.host_memory_bytes)")
        return out + ([] if timed else [UNTIMED_NOTE])
    base = r.uncapped
    if not timed:
        return out + [
            f"plan: offload the first {plan.blocks} of {plan.total} blocks"
            + (f", the parameters of the first {plan.params} on the host" if plan.params
               else "") + f": peak {plan.peak_memory_bytes / GiB:.2f} GiB (the step without "
            f"a cap: peak {base.peak_memory_bytes / GiB:.2f} GiB)", UNTIMED_NOTE]
    ratio = (plan.iteration_time_ns / base.iteration_time_ns if base.iteration_time_ns
             else float("nan"))
    what = (f"offload the first {plan.blocks} and checkpoint the {plan.recompute} "
            f"after them" if plan.recompute and plan.blocks
            else f"checkpoint the first {plan.recompute}" if plan.recompute
            else f"offload the first {plan.blocks}")
    if plan.params:
        what += f" and keep the parameters of the first {plan.params} on the host,"
    return out + [f"plan: {what} of {plan.total} blocks: "
                  f"{plan.iteration_time_ns / 1e6:.1f} ms, {format_slowdown(ratio)} "
                  f"the step without a cap ({base.iteration_time_ns / 1e6:.1f} ms, peak "
                  f"{base.peak_memory_bytes / GiB:.2f} GiB)"]
