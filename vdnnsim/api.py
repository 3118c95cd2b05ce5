"""The library entry point: :func:`simulate`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .costmodel import synthesize
from .engine.sim import Simulation
from .errors import ConfigError
from .hardware import GPU, gpu_preset
from .network import NetworkSpec, ZOO, infer, network_from_dict, zoo_network
from .network.spec import is_network_file
from .policies import get_policy, liveness
from .results import RunResult
from .trace import Trace, trace_from_dict
from .yamlio import read_yaml
from .config import RunConfig


def resolve_gpu(gpu: str | GPU, overrides: dict[str, Any] | None = None) -> GPU:
    if isinstance(gpu, GPU):
        if overrides:
            from .hardware import GPUOverrides, apply_overrides
            return apply_overrides(gpu, GPUOverrides.model_validate(overrides))
        return gpu
    return gpu_preset(gpu, overrides)


def build_trace(network: str | os.PathLike | NetworkSpec | Trace, batch_size: int | None,
                gpu: GPU, dtype: str = "fp32") -> Trace:
    """A zoo name, a network spec (object or YAML path) or a trace (object or YAML path)."""
    if isinstance(network, Trace):
        return _check_batch(network, batch_size, "the trace")
    if isinstance(network, NetworkSpec):
        spec = network
    elif isinstance(network, str) and network in ZOO:
        spec = zoo_network(network)
    else:
        path = Path(network)
        if not path.suffix and not path.exists():
            zoo_network(str(network))  # raises the unknown-network error with the list
        data = read_yaml(path)
        if is_network_file(data):
            spec = network_from_dict(data, str(path))
        else:
            return _check_batch(trace_from_dict(data, str(path)), batch_size, str(path))
    if dtype not in ("fp32", "fp16", "bf16"):
        raise ConfigError(f"unknown dtype {dtype!r}; known: bf16, fp16, fp32")
    b = batch_size or spec.batch_size
    if not b:
        raise ConfigError(f"network {spec.name}: no batch_size given and the spec has none")
    return synthesize(infer(spec), b, gpu, dtype)


def _check_batch(trace: Trace, batch_size: int | None, where: str) -> Trace:
    if batch_size is not None and batch_size != trace.batch_size:
        raise ConfigError(f"{where} was recorded at batch size {trace.batch_size}, not "
                          f"{batch_size}; a trace's sizes and times hold for its own batch")
    return trace


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
    return run_trace(trace, g, policy, policy_options or {}, memory_bytes)


def run_trace(trace: Trace, gpu: GPU, policy: str, policy_options: dict[str, Any] | None = None,
              memory_bytes: int | None = None, oracle_ns: int | None = None) -> RunResult:
    capacity = memory_bytes if memory_bytes is not None else gpu.memory_bytes
    fn, fixed = get_policy(policy)
    plan = fn(trace, gpu, capacity, {**fixed, **(policy_options or {})})
    lv = liveness(trace)
    sim = Simulation(trace, gpu, plan, capacity, lv).run()
    if oracle_ns is None:
        oracle_ns = oracle_time_ns(trace, gpu)
    pool = sim.pool
    return RunResult(
        network=trace.name, batch_size=trace.batch_size, dtype=trace.dtype, gpu=gpu.name,
        policy=policy, capacity_bytes=capacity, peak_memory_bytes=pool.peak_live_bytes,
        peak_footprint_bytes=pool.peak_footprint_bytes,
        avg_memory_bytes=pool.average_bytes(sim.end_ns), iteration_time_ns=sim.end_ns,
        forward_time_ns=sim.fwd_end_ns, oracle_time_ns=oracle_ns,
        offloaded_bytes=sim.offloaded_bytes, prefetched_bytes=sim.prefetched_bytes,
        peak_host_bytes=sim.peak_host_bytes, stall_time_ns=sim.stall_ns,
        peak_breakdown=dict(pool.peak_breakdown), oom=pool.oom, notes=plan.notes,
        algos=tuple(layer.algos[a].name for layer, a in zip(trace.layers, plan.algos)),
        _ops=tuple(sim.ops), _mem=(tuple(pool.times), tuple(pool.levels)))


def oracle_time_ns(trace: Trace, gpu: GPU) -> int:
    """The paper's oracular baseline: no offload, the fastest algorithm everywhere and
    enough memory; each layer timed alone and the times summed."""
    fn, fixed = get_policy("baseline_p")
    plan = fn(trace, gpu, None, dict(fixed))
    return Simulation(trace, gpu, plan, None, record_ops=False).run().end_ns


def run_config(cfg: "RunConfig", base_dir: str | os.PathLike = ".") -> list[RunResult]:
    """Every policy of a run config, on one shared trace and oracle."""
    from .yamlio import parse_bytes

    name, overrides = cfg.gpu_name_and_overrides()
    g = resolve_gpu(name, overrides)
    network: str | Path = cfg.network
    if cfg.network not in ZOO and not Path(cfg.network).is_absolute():
        candidate = Path(base_dir) / cfg.network
        if candidate.exists():
            network = candidate
    trace = build_trace(network, cfg.batch_size, g, cfg.dtype)
    try:
        capacity = parse_bytes(cfg.memory_bytes) if cfg.memory_bytes is not None else None
    except ValueError as exc:
        raise ConfigError(f"memory_bytes: {exc}") from None
    for p in cfg.policy_list:
        get_policy(p)  # fail on a bad name before any work
    oracle = oracle_time_ns(trace, g)
    return [run_trace(trace, g, p, cfg.policy_options, capacity, oracle)
            for p in cfg.policy_list]
