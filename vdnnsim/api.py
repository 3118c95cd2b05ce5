"""The library entry point: :func:`simulate`."""

from __future__ import annotations

import math
import operator
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import limits
from .costs.analytic import synthesize
from .engine import (PINNINGS, AllocatorSettings, aligned, allocator_settings,
                     cpu_step_calibrated, cpu_step_per_element, optimizer_host_bytes,
                     optimizer_pinned_bytes, replay)
from .errors import ConfigError, ScaleError, TraceError, VdnnError, in_file
from .hardware import GPU, gpu_from_file, gpu_preset, is_spec_path
from .hostspeed import HOST_COSTS, at_host_speed, host_said  # noqa: F401 (validate's, scripts')
from .network import DTYPE_BYTES, NetworkSpec, ZOO, infer, network_from_dict, zoo_network
from .network.spec import is_network_file
from .trace.optimizer import with_optimizer
from .policies import get_policy, liveness
from .policies.builtin import COMMON_OPTIONS
from .planners.blocks import plan_blocks
from .policies.context import PolicyContext
from .results import RunResult
from .trace import Trace, trace_from_dict
from .yamlio import misplaced, paused_gc, read_yaml
from .planners.planfile import margin_said, with_run
from .report.plan import BlockPlanReport, LayerPlanReport, PlanReport
from .config import RunConfig


# NOTE [simulated scale]
# The cost model and the reports work in floats, so a run past about an exbibyte (a batch
# of 10**11 images, a size of 1e19 in a trace) would lose precision or overflow. No GPU
# comes near, so build_trace refuses any trace that needs more than MAX_BYTES in all with
# a user error.
MAX_BYTES = limits.MAX_BYTES


def _user_value(check, value: Any, what: str) -> Any:
    """A library argument checked like the same key of a config."""
    try:
        return check(value)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def _capacity(memory_bytes: Any) -> int | None:
    if memory_bytes is None:
        return None
    from .hardware import _capacity as check
    return _user_value(check, memory_bytes, "memory_bytes")


def resolve_gpu(gpu: str | GPU, overrides: dict[str, Any] | None = None,
                base_dir: str | os.PathLike | None = None) -> GPU:
    """A preset name, a GPU spec file (a path ending in .yaml or .yml, or with a folder; one
    preset's mapping, as in vdnnsim/data/gpus.yaml) or a ``vdnnsim.GPU``, with
    ``overrides``. A relative spec path is looked for under ``base_dir`` (a config's
    folder) first, then as written."""
    if overrides is not None and not isinstance(overrides, dict):
        raise ConfigError(f"gpu overrides must be a mapping, got {type(overrides).__name__}")
    if not isinstance(gpu, (str, GPU)):
        raise ConfigError(f"gpu must be a preset name, a GPU spec file or a vdnnsim.GPU, got "
                          f"{type(gpu).__name__}")
    if isinstance(gpu, str) and is_spec_path(gpu):
        path = Path(gpu)
        if base_dir is not None and not path.is_absolute() and (Path(base_dir) / path).exists():
            path = Path(base_dir) / path
        gpu = gpu_from_file(path)
    if isinstance(gpu, GPU):
        if overrides:
            from .hardware import apply_overrides, parse_overrides
            return apply_overrides(gpu, parse_overrides(overrides))
        return gpu
    return gpu_preset(gpu, overrides)


def build_trace(network: str | os.PathLike | NetworkSpec | Trace, batch_size: int | None,
                gpu: GPU, dtype: str = "fp32", *, retime: bool = True) -> Trace:
    """A zoo name, a network spec (object or YAML path) or a trace (object or YAML path);
    a trace made for another GPU re-timed for ``gpu`` where it can be, unless ``retime`` is
    off (NOTE [retime])."""
    spec_file = ""
    if not isinstance(gpu, GPU):
        raise ConfigError(f"build_trace needs a vdnnsim.GPU (vdnnsim.gpu_preset(name)), got "
                          f"{type(gpu).__name__}")
    if batch_size is not None:
        batch_size = _user_value(limits.api_batch_size, batch_size, "batch_size")
    if not isinstance(network, (str, os.PathLike, NetworkSpec, Trace)):
        raise ConfigError(f"network must be a zoo name, a path, a NetworkSpec or a Trace, "
                          f"got {type(network).__name__}")
    if isinstance(network, str) and not network:
        raise ConfigError("network: an empty name")
    if isinstance(network, Trace):
        return _check_trace(network, batch_size, "the trace", gpu if retime else None)
    if isinstance(network, NetworkSpec):
        spec = network
    elif isinstance(network, str) and network in ZOO:
        spec = zoo_network(network)
    else:
        path = Path(network)
        if not path.suffix and not os.path.exists(path):
            zoo_network(str(network))  # raises the unknown-network error with the list
        data = read_yaml(path)
        wrong = misplaced(data, path, "a network spec or trace",
                          ("network spec", "trace"))
        if wrong:
            raise ConfigError(wrong)
        if is_network_file(data):
            spec, spec_file = network_from_dict(data, str(path)), f"{path}: "
        else:
            return _check_trace(trace_from_dict(data, str(path)), batch_size, str(path),
                                gpu if retime else None)
    if dtype not in ("fp32", "fp16", "bf16"):
        raise ConfigError(f"unknown dtype {limits.short_repr(dtype)}; known: bf16, fp16, fp32")
    b = batch_size or spec.batch_size
    if not b:
        raise ConfigError(f"{spec_file}network {spec.name}: no batch_size given and the "
                          "spec has none")
    try:
        with paused_gc():
            info = infer(spec)
    except TraceError as exc:
        raise TraceError(f"{spec_file}{exc}") from None
    where = f"{spec_file}network {spec.name} at batch size {b}"
    need = (b * (math.prod(info.input_shape) + sum(layer.out_elems for layer in info.layers))
            + 2 * info.params) * DTYPE_BYTES[dtype]
    if need > MAX_BYTES:  # NOTE [simulated scale]; before the cost model makes floats
        raise ScaleError(f"{where}: {_too_big(need)}")
    with paused_gc():
        return _check_size(synthesize(info, b, gpu, dtype), where, ScaleError)


def _too_big(n: int) -> str:
    from .units import GiB
    gib = f"{n / GiB:.3g} GiB" if n < 2**1000 else "more than 2**1000 bytes"
    return f"needs {gib} in all, more than the 1 PiB (2**50 bytes) the simulator models"


def _check_size(trace: Trace, where: str, error: type[VdnnError] = TraceError) -> Trace:
    """NOTE [simulated scale] applies, to bytes and to times: a synthesized layer slower
    than the trace format's 10**18 ns (a GPU scaled down a millionfold) is refused here,
    where a written trace would be refused on reading."""
    worst = max((max(a.fwd_ns, a.bwd_ns) for layer in trace.layers for a in layer.algos),
                default=0)
    if worst > 10**18:
        raise error(f"{where}: the cost model times a layer at {worst:.3g} ns, more than "
                         "the 10**18 ns (31 years) a trace can hold")
    need = (sum(t.size_bytes for t in trace.buffers.values()) + 2 * trace.weight_bytes
            + sum(max(a.workspace_bytes for a in layer.algos) for layer in trace.layers))
    if need > MAX_BYTES:
        raise error(f"{where}: {_too_big(need)}")
    return trace


def _check_trace(trace: Trace, batch_size: int | None, where: str,
                 gpu: GPU | None = None) -> Trace:
    if batch_size is not None and batch_size != trace.batch_size:
        raise ConfigError(f"{where} was recorded at batch size {trace.batch_size}, not "
                          f"{batch_size}; a trace's sizes and times hold for its own batch")
    if gpu is not None:
        from .costs.retime import for_run
        try:
            trace = for_run(trace, gpu)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return _check_size(trace, where)


def simulate(network: str | os.PathLike | NetworkSpec | Trace, batch_size: int | None = None,
             gpu: str | GPU = "k40", policy: str = "baseline_p", *, dtype: str = "fp32",
             gpu_overrides: dict[str, Any] | None = None,
             policy_options: dict[str, Any] | None = None,
             memory_bytes: int | None = None) -> RunResult:
    """Simulate one training iteration and return its RunResult.

    ``memory_bytes`` overrides the pool capacity (default: the GPU's memory).
    """
    g = resolve_gpu(gpu, gpu_overrides)
    trace = build_trace(network, batch_size, g, dtype)
    return run_trace(trace, g, policy, policy_options, memory_bytes)


def run_trace(trace: Trace, gpu: GPU, policy: str, policy_options: dict[str, Any] | None = None,
              memory_bytes: int | None = None, *, record: bool = True,
              allocator: Any = None, optimizer_offload: bool = False,
              optimizer_pinning: str = "caching") -> RunResult:
    """Simulate ``trace`` under ``policy``. ``record=False`` skips the op timeline and the
    tensor lifetimes (the summary and the memory curve stay): what sweeps need.
    ``allocator``: the caching allocator's settings, a mapping such as
    ``{"expandable_segments": True}`` or a PYTORCH_CUDA_ALLOC_CONF string
    (NOTE [allocator settings]). ``optimizer_offload``: the optimizer's state and step on the
    CPU, the weight gradients copied there as the backward pass makes them
    (NOTE [optimizer offload]); the policy plans as if the optimizer were on the GPU."""
    if not isinstance(trace, Trace):
        raise ConfigError(f"run_trace needs a vdnnsim.Trace, got {type(trace).__name__}")
    if not isinstance(gpu, GPU):
        raise ConfigError(f"run_trace needs a vdnnsim.GPU, got {type(gpu).__name__}")
    memory_bytes = _capacity(memory_bytes)
    capacity = memory_bytes if memory_bytes is not None else gpu.memory_bytes
    if not isinstance(policy, str):
        raise ConfigError(f"policy must be a name, got {type(policy).__name__}")
    fn, fixed = get_policy(policy)
    options = policy_options if policy_options is not None else {}
    if not isinstance(options, dict):
        raise ConfigError(f"policy {policy}: policy_options must be a mapping, got "
                          f"{type(options).__name__}")
    if any(not isinstance(k, str) for k in options):
        raise ConfigError(f"policy {policy}: policy_options keys must be names")
    fixed_keys = sorted(set(options) & set(fixed))
    if fixed_keys:  # the registry's own settings of this name (which algorithms, which layers)
        raise ConfigError(f"policy {policy}: unknown option(s) {', '.join(fixed_keys)}; known: "
                          f"{', '.join(sorted(COMMON_OPTIONS))}")
    settings = _allocator_for(trace, allocator)
    ctx = PolicyContext(settings, plan_blocks)  # NOTE [planning allocator]
    with paused_gc():  # NOTE [paused gc]
        plan = fn(trace, gpu, capacity, {**options, **fixed}, ctx)
        if optimizer_offload:
            plan = offload_optimizer(plan, trace, gpu, optimizer_pinning)
        elif optimizer_pinning != "caching":  # a plan file's optimizer on the CPU
            if not plan.optimizer_offload or optimizer_pinning not in PINNINGS:
                raise ConfigError(f"optimizer_pinning {optimizer_pinning!r} goes with "
                                  "optimizer_offload")
            plan = replace(plan, optimizer_pinning=optimizer_pinning)
        if plan.planned_allocator is not None and plan.planned_allocator != settings.conf():
            plan = replace(plan, notes=plan.notes + (
                f"the plan was made under the allocator settings "
                f"{plan.planned_allocator or 'of PyTorch (the defaults)'}; this run replays "
                f"it under {settings.conf() or 'the defaults'} (allocator: in the run "
                "config)",))
        if plan.trace is not None:  # the plan runs a reshaped network
            trace = plan.trace
        lv = liveness(trace)
        sim = plan.profiled  # its last profiling pass, where it fits
        if plan.memory == "uvm" or sim is None or (record and not sim.record_ops) \
                or not settings.default:  # the plan replayed
            sim = replay(trace, gpu, plan, capacity, lv, record_ops=record,
                         allocator=settings)
        result = _result(trace, gpu, policy, capacity, plan, sim, record)
        del sim, plan  # freed now, by their reference counts: the collector, back on when
    return cap_edge(result, trace, settings)  # the block ends, then has only the result
# NOTE [cap edge]
# Under a cap, PyTorch's caching allocator (default settings) frees its cache and retries
# before it gives up, so a run whose step needs more than the cap can still fit, squeezed
# to within a few MiB of it; whether it does is decided by the fragmentation of hundreds of
# segments at one request. Where the engine fits a PyTorch run under the default allocator
# with less than EDGE_SHARE of the cap to spare, the result keeps its fit and carries a
# note saying that measured runs this close have gone both ways. Expandable segments are
# left out. The runs behind the 0.5%: docs/user-guide.md, "Fit at the cap".
EDGE_SHARE = 0.005


def cap_edge(result: RunResult, trace: Trace, settings: "AllocatorSettings") -> RunResult:
    """NOTE [cap edge]: ``result`` with a note where a PyTorch trace's run under the
    default allocator fits with less than EDGE_SHARE of its cap to spare."""
    cap = result.capacity_bytes
    spare = cap - result.peak_footprint_bytes if cap else None
    if not (result.fits and trace.pytorch and settings.default and spare is not None
            and spare < EDGE_SHARE * cap):
        return result
    return replace(result, notes=result.notes + (
        f"fits with {spare / 2**20:.0f} MiB of the {cap / 2**30:.2f} GiB cap to spare "
        f"({100 * spare / cap:.2f}%): measured runs the engine fits this close have gone "
        "both ways (the caching allocator's fragmentation at the cap)",))


def offload_optimizer(plan: Any, trace: Trace, gpu: GPU, pinning: str = "caching") -> Any:
    """NOTE [optimizer offload]: ``plan`` with the optimizer on the CPU (replayed anew: a
    policy's profiling pass had it on the GPU), saying so where the preset's host has no
    calibration of the CPU step, whose time is then left out."""
    if not trace.pytorch:
        raise ConfigError(f"{trace.name}: optimizer offload runs PyTorch traces (framework: "
                          "pytorch); this trace replays Torch7")
    notes = plan.notes
    if not cpu_step_per_element(gpu.host, trace.dtype):
        notes += (f"optimizer offload: {gpu.name}'s host has no calibration of the CPU "
                  "optimizer step (host.cpu_step_*): its time is left out, the step time is "
                  "too short",)
    if pinning not in PINNINGS:
        raise ConfigError(f"optimizer_pinning {pinning!r}: one of {', '.join(PINNINGS)}")
    return replace(plan, optimizer_offload=True, optimizer_pinning=pinning, profiled=None,
                   notes=notes)


def _allocator_for(trace: Trace, allocator: Any) -> "AllocatorSettings":
    """NOTE [allocator settings]: ``allocator`` checked, and refused for a Torch7 trace
    (its pool is CNMeM's) before any policy runs."""
    settings = allocator_settings(allocator)
    if not settings.default and not trace.pytorch:
        raise ConfigError(f"{trace.name}: allocator settings apply to PyTorch traces "
                          "(framework: pytorch); this trace replays Torch7's CNMeM pool")
    return settings


def run_plan(trace: Trace, gpu: GPU, plan: Any, budget_bytes: int, name: str = "planned",
             record: bool = False, allocator: Any = None) -> RunResult:
    """Replay a plan made elsewhere (a planner's) as the result of a run named ``name``;
    a plan that runs a reshaped network runs that one; ``allocator``
    as for :func:`run_trace`."""
    if plan.trace is not None:
        trace = plan.trace
    settings = _allocator_for(trace, allocator)
    with paused_gc():
        sim = replay(trace, gpu, plan, budget_bytes, record_ops=record, allocator=settings)
        return _result(trace, gpu, name, budget_bytes, plan, sim, record)


def _result(trace: Trace, gpu: GPU, policy: str, capacity: int, plan: Any,
            sim: Replayed, record: bool) -> RunResult:
    from .costs.retime import run_note
    oracle_ns = oracle_time_ns(trace, gpu)
    return RunResult(
        network=trace.name, batch_size=trace.batch_size, dtype=trace.dtype, gpu=gpu.name,
        policy=policy, capacity_bytes=capacity, peak_memory_bytes=sim.peak_live_bytes,
        peak_footprint_bytes=sim.peak_footprint_bytes,
        avg_memory_bytes=sim.avg_memory_bytes,
        weight_bytes=2 * aligned(trace.weight_bytes), iteration_time_ns=sim.end_ns,
        forward_time_ns=sim.fwd_end_ns, oracle_time_ns=oracle_ns,
        offloaded_bytes=sim.offloaded_bytes, prefetched_bytes=sim.prefetched_bytes,
        peak_host_bytes=sim.peak_host_bytes, stall_time_ns=sim.stall_ns,
        host_bound_time_ns=sim.host_bound_ns,
        peak_breakdown=dict(sim.peak_breakdown), oom=sim.oom,
        notes=run_note(trace) + plan.notes,  # NOTE [retime]
        algos=algorithm_names(trace, plan.algos),
        _ops=sim.ops if record else (), _mem=sim.memory_steps,
        _spans=sim.spans if record else (),
        _layer_spans=sim.layer_spans,  # NOTE [layer average]
        host_capacity_bytes=gpu.host_memory_bytes, timed=trace.timed,
        # NOTE [optimizer offload]: the optimizer's pinned copies, and all it holds there
        pinned_host_bytes=sim.pinned_host_bytes + (
            optimizer_pinned_bytes(trace, plan.optimizer_pinning)
            if plan.optimizer_offload else 0),
        optimizer_host_bytes=(optimizer_host_bytes(trace, plan.optimizer_pinning)
                              if plan.optimizer_offload else 0),
        param_fetched_bytes=sim.param_fetched_bytes,
        host_issue_time_ns=sim.host_issue_ns, pytorch=trace.pytorch)
def algorithm_names(trace: Trace, algos: tuple[int, ...]) -> tuple[str, ...]:
    """Each layer's algorithm's name (in a C loop over the names of
    each layer's algorithms, worked out once per trace)."""
    names = trace.memo("algorithm names", lambda: [tuple(a.name for a in layer.algos)
                                                   for layer in trace.layers])
    return tuple(map(operator.getitem, names, algos))


def oracle_time_ns(trace: Trace, gpu: GPU) -> int:
    """The paper's oracular baseline: no offload, the fastest algorithm everywhere and
    enough memory; each layer timed alone and the times summed (what baseline_p with
    unlimited memory simulates, to the nanosecond: tests/test_invariants.py checks it)."""
    return trace.fastest_time_ns
@dataclass(frozen=True)
class RunSetup:
    """What a run config sets up for its runs: the trace (trained with its optimizer), the
    GPU, and the settings every run of it shares."""

    trace: Trace
    gpu: GPU
    allocator: AllocatorSettings
    budget_bytes: int | None  # the config's memory_bytes: the pool's size, or the GPU's
    optimizer_offload: bool
    optimizer_pinning: str
    # a host calibration's factor (None: not applied) and line (hostcal.host_factor)
    host: tuple[float | None, str] | None = None


def config_network(cfg: "RunConfig", base_dir: str | os.PathLike = ".") -> str | Path:
    """The config's network: a zoo name, else a path from the config's folder where a file
    is there, else as written (an absolute path, or one from the working folder)."""
    if cfg.network in ZOO or Path(cfg.network).is_absolute():
        return cfg.network
    candidate = Path(base_dir) / cfg.network
    return candidate if os.path.exists(candidate) else cfg.network


def setup_run(cfg: "RunConfig", base_dir: str | os.PathLike = ".", source: str | None = None,
              *, allocator: Any = None, check_policies: bool = False,
              host_cal: Any = None) -> RunSetup:
    """The one setup of a run config's runs (vdnnsim run, plot and plan): its GPU, its
    trace, its allocator settings (``allocator``, where given, over the config's).
    ``source``: the config's file, named with the key in any error its values cause
    (NOTE [user errors]); ``check_policies``: refuse a bad policy name before any work;
    ``host_cal``: a host calibration (its file, or a HostCalibration), whose factor the
    trace's host costs take where it gives one (hostcal.py)."""
    from .hostcal import as_calibration, host_factor
    host_cal, host = as_calibration(host_cal), None  # a bad file is told before any work
    name, overrides = cfg.gpu_name_and_overrides()
    with in_file(source, "gpu"):
        g = resolve_gpu(name, overrides, base_dir)
    with in_file(source, "network"):
        trace = build_trace(config_network(cfg, base_dir), cfg.batch_size, g, cfg.dtype)
        trace = with_optimizer(trace, cfg.optimizer or trace.optimizer)
    if check_policies:
        with in_file(source, "policies" if cfg.policies else "policy"):
            for p in cfg.policy_list:
                get_policy(p)
    if allocator is not None:  # KEY=VALUE pairs, as --allocator gives them, or a mapping
        if isinstance(allocator, (list, tuple)):
            from .engine import parse_pairs
            allocator = parse_pairs(list(allocator))
        settings = _allocator_for(trace, allocator)
    else:
        with in_file(source, "allocator"):
            settings = _allocator_for(trace, cfg.allocator.model_dump() if cfg.allocator
                                      else None)
    if host_cal is not None and trace.timed:
        host = host_factor(host_cal, trace, g)
        if host[0] is not None:
            trace, g = at_host_speed(trace, g, host[0])
    return RunSetup(trace, g, settings, cfg.memory_bytes, cfg.optimizer_offload,
                    cfg.optimizer_pinning, host)


def run_config(cfg: "RunConfig", base_dir: str | os.PathLike = ".",
               record: bool = True, source: str | None = None,
               host_cal: Any = None) -> list[RunResult]:
    """Every policy of a run config, on one shared trace. ``record=False``:
    no op timeline or tensor lifetimes (see :func:`run_trace`). ``source``: the config's
    file, named with the key in any error its values cause. ``host_cal``: as
    :func:`setup_run` takes it; without one, a host-bound step gets its band between a
    fast and a slow host (hostspeed.py)."""
    s = setup_run(cfg, base_dir, source, check_policies=True, host_cal=host_cal)
    kw = dict(allocator=s.allocator, optimizer_offload=s.optimizer_offload,
              optimizer_pinning=s.optimizer_pinning)

    def one(p: str) -> RunResult:
        r = run_trace(s.trace, s.gpu, p, cfg.policy_options, s.budget_bytes, record=record,
                      **kw)
        return host_said(r, s.trace, lambda k: run_trace(
            *at_host_speed(s.trace, s.gpu, k), p, cfg.policy_options, s.budget_bytes,
            record=False, **kw), s.host)
    with in_file(source, "policy_options"):
        return [one(p) for p in cfg.policy_list]


def plan_config(cfg: "RunConfig", base_dir: str | os.PathLike, budget_bytes: int, *,
                method: str = "auto", optimizer_offload: str | None = None,
                allocator: Any = None, headroom: bool = True, margin: float | None = None,
                source: str | None = None, host_cal: Any = None) -> PlanReport:
    """Plan a run config's network under ``budget_bytes``: the block planner for a trace
    with blocks (or ``method="blocks"``), else the layer planners.
    ``optimizer_offload``: "auto", "on", "off", or None for the config's; ``allocator``:
    settings over the config's; ``margin``: the share of the budget left free
    (NOTE [plan margin]; None: PLAN_MARGIN for tensor plans, none for the others); a
    synthesized trace's convolutions planned with their predicted workspaces, or without
    them where no plan fits with them (NOTE [conv workspaces]); ``host_cal``: as for
    :func:`run_config` (the report's ``host_notes`` say it)."""
    from .costs.workspaces import planned
    from .hostspeed import plan_host

    s = setup_run(cfg, base_dir, source, allocator=allocator, host_cal=host_cal)
    offload = optimizer_offload or ("on" if cfg.optimizer_offload else "auto")
    if margin is not None and not (isinstance(margin, (int, float)) and 0 <= margin < 1):
        raise ConfigError(f"margin: a share of the budget from 0 to below 1, got {margin!r}")
    how = (cfg, budget_bytes, method, offload, s.gpu, s.allocator, headroom, margin, source)
    report, said = planned(lambda t: _plan_dispatch(t, *how), s.trace, lambda r: r.fits)
    if said and report.fits:
        report = replace(report, caution="\n".join(filter(None, (report.caution,
                                                                  f"note: {said}"))))
    return plan_host(report, s.host, run_trace, run_plan)


def _plan_dispatch(trace: Trace, cfg: "RunConfig", budget_bytes: int, method: str,
                   offload: str, gpu: GPU, settings: AllocatorSettings, headroom: bool,
                   margin: float | None, source: str | None) -> PlanReport:
    """plan_config's planner for ``trace`` (the config's, its workspaces settled)."""
    from .planners.greedy import search_plan
    from .planners.tensors import PLAN_MARGIN, op_trace
    from .policies.blocks import block_regions


    tensors = method == "tensors" or method == "auto" and op_trace(trace) and trace.timed
    room = budget_bytes - int(budget_bytes * (margin if margin is not None else
                                              PLAN_MARGIN if tensors else 0))
    if tensors:
        return _plan_tensors(trace, gpu, (budget_bytes, room), cfg, offload, settings,
                             blocks=method == "auto" and len(block_regions(trace)) > 2)
    if method == "blocks" or method == "auto" and len(block_regions(trace)) > 2:
        return _plan_blocks(trace, gpu, (budget_bytes, room), {"auto": None, "on": True,
                                                               "off": False}[offload],
                            settings, cfg.optimizer_pinning)
    if cfg.optimizer_pinning != "caching":
        raise ConfigError(f"{source}: optimizer_pinning: {cfg.optimizer_pinning} is "
                          "planned by the block planner only (--method blocks, a model with "
                          "blocks); the layer planners count the pinned allocator's copies")
    on_cpu = offload == "on"  # auto keeps it on the GPU here
    if not trace.timed:  # these planners pick the fastest plan
        raise ConfigError(f"{source}: network: {cfg.network} is a memory-only trace "
                          f"(every layer 0 ns), and --method {method} picks the fastest "
                          "plan by times it does not have; plan by memory with --method "
                          "blocks (a model with blocks), or plan a timed trace (vdnnsim "
                          "profile on a GPU)")
    plan, search = search_plan(trace, gpu, room, method=method, headroom=headroom,
                               allocator=settings, optimizer_offload=on_cpu)
    ref = tuple((p, run_trace(trace, gpu, p, memory_bytes=budget_bytes, record=False,
                              allocator=settings, optimizer_offload=on_cpu))
                for p in ("eager" if trace.pytorch else "baseline_p", "vdnn_dyn"))
    common = dict(gpu=gpu, budget_bytes=budget_bytes, allocator=settings,
                  optimizer_offload=on_cpu, search=search, reference=ref,
                  margin_bytes=budget_bytes - room,
                  cpu_step_calibrated=bool(cpu_step_calibrated(gpu.host)))
    if plan is None:
        return LayerPlanReport(trace=trace, plan=None, planned=None, caution=None,
                               op_layers=False, plan_file=None, **common)
    return _layer_report(trace, plan, common, margin_said((budget_bytes, room)))


def _layer_report(trace: Trace, plan: Any, common: dict[str, Any],
                  margin: dict[str, int]) -> LayerPlanReport:
    """The report of a layer plan that fits: replayed, cautioned, as a plan file."""
    from .planners.greedy import fragmentation_caution, layer_names, plan_to_dict

    if plan.trace is not None:  # the plan runs a reshaped network
        trace = plan.trace
    gpu, budget, settings = common["gpu"], common["budget_bytes"], common["allocator"]
    r = run_plan(trace, gpu, plan, budget, allocator=settings)
    predicted = {"peak_memory_bytes": r.peak_memory_bytes,
                 "iteration_time_ns": r.iteration_time_ns}
    return LayerPlanReport(
        trace=trace, plan=plan, planned=r, op_layers=layer_names(trace) == "ops",
        caution=fragmentation_caution(trace, budget, r.peak_memory_bytes, settings),
        plan_file=with_run(plan_to_dict(trace, gpu, budget, plan, predicted, settings),
                           trace) | margin, **common)


def _plan_tensors(trace: Trace, gpu: GPU, budgets: tuple[int, int], cfg: "RunConfig",
                  offload: str, settings: AllocatorSettings, blocks: bool) -> PlanReport:
    """NOTE [tensor plans] under ``budgets`` (the budget, the room planned:
    NOTE [plan margin]); with ``blocks``, the block plan too, the faster that fits kept."""
    from .planners.greedy import Search, fragmentation_caution
    from .planners.tensors import plan_tensors, tensor_plan_to_dict

    budget_bytes, room = budgets
    on_cpu = {"auto": None, "on": True, "off": False}[offload]
    found = plan_tensors(trace, gpu, room, on_cpu, settings)
    if blocks:
        other = _plan_blocks(trace, gpu, budgets, on_cpu, settings, cfg.optimizer_pinning)
        if other.fits and (not found.fits
                           or other.plan.iteration_time_ns < found.iteration_time_ns):
            return other
    ref = (("eager", run_trace(trace, gpu, "eager", memory_bytes=budget_bytes, record=False,
                               allocator=settings, optimizer_offload=found.optimizer_offload)),)
    common = dict(gpu=gpu, budget_bytes=budget_bytes, allocator=settings,
                  optimizer_offload=found.optimizer_offload, reference=ref,
                  search=Search(found.steps, found.simulations),
                  margin_bytes=budget_bytes - room,
                  cpu_step_calibrated=bool(cpu_step_calibrated(gpu.host)))
    if not found.fits:
        return LayerPlanReport(trace=trace, plan=None, planned=None, caution=None,
                               op_layers=False, plan_file=None, **common)
    r = run_plan(trace, gpu, found.plan, budget_bytes, allocator=settings)
    predicted = {"peak_memory_bytes": r.peak_memory_bytes,
                 "iteration_time_ns": r.iteration_time_ns}
    return LayerPlanReport(
        trace=trace, plan=found.plan, planned=r, op_layers=False,
        caution=fragmentation_caution(trace, budget_bytes, r.peak_memory_bytes, settings),
        plan_file=with_run(tensor_plan_to_dict(trace, gpu, budget_bytes, found, predicted,
                                               settings), trace) | margin_said(budgets),
        **common)


def _plan_blocks(trace: Trace, gpu: GPU, budgets: tuple[int, int],
                 optimizer_offload: bool | None, settings: AllocatorSettings,
                 pinning: str) -> BlockPlanReport:
    """The fewest offloaded blocks that fit in ``budgets`` (as _plan_tensors takes
    them), and the step without a cap beside it."""
    from .planners.blocks import weighs_cpu_optimizer
    from .planners.greedy import block_plan_to_dict, fragmentation_caution

    budget_bytes, room = budgets
    plan = plan_blocks(trace, gpu, room, optimizer_offload, settings, pinning)
    common = dict(trace=trace, gpu=gpu, budget_bytes=budget_bytes, allocator=settings,
                  plan=plan, cpu_step_calibrated=bool(cpu_step_calibrated(gpu.host)),
                  margin_bytes=budget_bytes - room)
    if not plan.fits:
        need, host = optimizer_host_bytes(trace, pinning), gpu.host_memory_bytes
        short = ((need, host) if optimizer_offload is not False
                 and weighs_cpu_optimizer(trace, gpu) and host is not None and need > host
                 else None)  # why the optimizer on the CPU did not help
        return BlockPlanReport(uncapped=None, host_short=short, caution=None, plan_file=None,
                               **common)
    base = run_trace(trace, gpu, "eager", record=False, allocator=settings)
    return BlockPlanReport(
        uncapped=base, host_short=None,
        caution=fragmentation_caution(trace, budget_bytes, plan.peak_memory_bytes, settings),
        plan_file=with_run(block_plan_to_dict(trace, gpu, budget_bytes, plan, settings),
                           trace) | margin_said(budgets), **common)
