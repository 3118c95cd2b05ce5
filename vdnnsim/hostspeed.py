"""A replay at another host's speed: every host cost scaled, by a factor a host
calibration gives (hostcal.py), or by the ends of the measured spread of hosts, which
make a host-bound step's band between a fast and a slow host (the notes below)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from .errors import ConfigError

if TYPE_CHECKING:
    from .hardware import GPU
    from .results import RunResult
    from .trace import Trace

# NOTE [host speed]
# A host-bound step's time is the host's, and hosts differ: a lent machine's changes speed
# from one process to the next. ``at_host_speed`` is a trace and a GPU whose every host cost
# the replay charges (the trace's per-layer and step host times; the preset's eager and
# vDNN-runtime costs) is k times the original: the same step on a host k times slower. k is
# a ratio of launch probes (gpu/measure/hostprobe.py), this host's over the host's the costs
# were measured on: for `vdnnsim validate --scale-host`, the measuring process's over the
# trace's, between timed steps; for `--host-cal FILE` (`vdnnsim calibrate --host`), the
# file's over the trace's own (between steps, else before the model), or, for an op-model
# trace, over the op model's fit's. A preset's host costs carry no probe: there the file is
# not applied and the result says so. Neither is the default (docs/user-guide.md, "Host
# speed").
HOST_COSTS = ("layer_fwd_ns", "layer_bwd_ns", "step_ns", "step_tensor_ns", "view_fwd_ns",
              "view_bwd_ns", "runtime_layer_fwd_ns", "runtime_layer_bwd_ns",
              "runtime_offload_ns", "runtime_fetch_ns")


def at_host_speed(trace: Trace, gpu: GPU, k: float) -> tuple[Trace, GPU]:
    """``trace`` and ``gpu`` with every host cost times ``k`` (the note above)."""
    if isinstance(k, bool) or not (isinstance(k, (int, float)) and 0 < k < float("inf")):
        raise ConfigError(f"host speed factor must be a positive number, got {k!r}")
    layers = tuple(replace(layer, host_fwd_ns=round(layer.host_fwd_ns * k),
                           host_bwd_ns=round(layer.host_bwd_ns * k))
                   for layer in trace.layers)
    t = replace(trace, layers=layers, host_step_ns=round(trace.host_step_ns * k),
                host_accumulate_ns=round(trace.host_accumulate_ns * k),
                optimizer_steps=tuple((name, gpu_ns, round(host_ns * k)) for name, gpu_ns,
                                      host_ns in trace.optimizer_steps))
    g = replace(gpu, host=replace(gpu.host, **{f: round(getattr(gpu.host, f) * k)
                                               for f in HOST_COSTS}))
    return t, g


# NOTE [host band]
# Without a host calibration, a step whose host issues HOST_BOUND of it or more (as
# `vdnnsim measure --repeat` counts it) is given as a band too: replayed with every host
# cost times HOST_FAST and HOST_SLOW, the fastest and slowest host issue time of one
# process over the median of its run's processes, rounded outward, in the noise data's 48
# processes of 7 host-bound runs (traces/h200_host_noise, the unpinned processes of
# traces/h200_reserved_heldout/host_speed/cores, host_tests_h100/probe-h100's two loans;
# experiments/host_costs/host_band.py prints them). An op-model or preset trace's host is
# taken as the median one; a profiled trace's host costs are one process's draw, so its
# band is the ratio of a fast to a slow draw: HOST_FAST / HOST_SLOW to HOST_SLOW /
# HOST_FAST. Two more replays, only where host-bound; the one-number time stays the
# trace's own host's.
HOST_FAST, HOST_SLOW = 0.65, 1.24
FLAT = 1.01  # a slow host's step no longer than this: the host's issue time is spent waiting


def band_factors(trace: Trace) -> tuple[float, float]:
    """The host speed factors of the band's fast and slow ends for ``trace``."""
    if trace.source.kind == "profiled":
        return HOST_FAST / HOST_SLOW, HOST_SLOW / HOST_FAST
    return HOST_FAST, HOST_SLOW


def ms(ns: float) -> str:
    """A step time in milliseconds, to three figures or so."""
    x = ns / 1e6
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def with_host_band(result: RunResult, trace: Trace, rerun: Callable[[float], RunResult],
                   what: str = "step") -> RunResult:
    """``result`` with its band and a note (on ``what``) where its step is host-bound and
    its host not calibrated; ``rerun(k)``: the same run with every host cost times k."""
    if result.host_factor is not None or not result.host_bound:
        return result
    fast, slow = (rerun(k) for k in band_factors(trace))
    step = f"{what} {ms(result.iteration_time_ns)} ms"
    short = [w for w, r in (("fast", fast), ("slow", slow)) if not r.fits]
    if short:  # the host's speed moved the peak past the cap
        note = (f"{step} (host-bound; on a {' and a '.join(short)} host the replay runs out "
                "of memory)")
        return replace(result, notes=result.notes + (note,))
    lo, hi = sorted((fast.iteration_time_ns, slow.iteration_time_ns))
    how = "host-bound"
    if hi <= FLAT * result.iteration_time_ns:  # its issue time is the GPU's, not its own
        how = (f"the host issues {result.host_issue_time_ns / result.iteration_time_ns:.0%} "
               "of it but waits on the GPU")
    note = f"{step} ({how}: {ms(lo)}-{ms(hi)} ms between a fast and a slow host)"
    return replace(result, host_band_ns=(lo, hi), notes=result.notes + (note,))


def host_said(result: RunResult, trace: Trace, rerun: Callable[[float], RunResult],
              calibration: tuple[float | None, str] | None = None,
              what: str = "step") -> RunResult:
    """``result`` with its host's line: a host calibration's (``calibration``: the factor,
    None where not applied, and its line: hostcal.host_factor), else, where the step is
    host-bound, its band."""
    if calibration is not None:
        k, line = calibration
        result = replace(result, notes=result.notes + (line,), host_factor=k)
    return with_host_band(result, trace, rerun, what)


def plan_host(report: Any, calibration: tuple[float | None, str] | None,
              run_trace: Callable[..., RunResult], run_plan: Callable[..., RunResult]) -> Any:
    """A plan report (report/plan.py) with its ``host_notes``: a host calibration's line,
    and, where it gives no factor, the planned step's band where host-bound: a block plan
    replayed as the policy vdnn_blocks runs it, a layer or tensor plan as planned
    (``run_trace``, ``run_plan``: the library's, which sits above this module)."""
    if not report.fits or not report.trace.timed:
        return replace(report, host_notes=(calibration[1],)) if calibration else report
    from .report.plan import BlockPlanReport

    if isinstance(report, BlockPlanReport):
        b = report.plan
        opts = {"blocks": b.blocks, "recompute": b.recompute, "params": b.params}

        def rerun(k: float) -> RunResult:
            t, g = at_host_speed(report.trace, report.gpu, k)
            return run_trace(t, g, "vdnn_blocks", opts,
                             report.budget_bytes - report.margin_bytes, record=False,
                             allocator=report.allocator, optimizer_offload=b.optimizer_offload,
                             optimizer_pinning=b.optimizer_pinning)
        planned = rerun(1.0) if calibration is None or calibration[0] is None else None
    else:
        plan = report.plan

        def rerun(k: float) -> RunResult:
            t, g = at_host_speed(report.trace, report.gpu, k)
            return run_plan(t, g, replace(plan, trace=t) if plan.trace is not None else plan,
                            report.budget_bytes, allocator=report.allocator)
        planned = report.planned
    if planned is None:  # a calibrated block plan: its line alone
        return replace(report, host_notes=(calibration[1],))
    r = host_said(planned, report.trace, rerun, calibration, "the planned step")
    return replace(report, host_notes=r.notes[len(planned.notes):])
