"""GPU and host-link presets. The numbers live in ``data/gpus.yaml`` with their sources."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, ValidationError,
                      field_validator)

from . import limits
from .errors import ConfigError, UnknownNameError, shown
from .yamlio import misplaced, parse_bytes, parse_model, read_yaml, validation_message

Bytes = Annotated[int, BeforeValidator(parse_bytes)]


@dataclass(frozen=True)
class Link:
    """The host link: per-direction DMA bandwidth and a fixed per-copy latency.

    ``duplex``: a D2H and an H2D copy can run at once (two copy engines). When both run,
    ``duplex_total_bw_bytes_per_s`` (if set) caps their sum; each then gets half of it.
    """

    h2d_bw_bytes_per_s: float
    d2h_bw_bytes_per_s: float
    latency_ns: int = 10_000
    duplex: bool = True
    duplex_total_bw_bytes_per_s: float | None = None


@dataclass(frozen=True)
class Host:
    """What the host (the CPU that runs the framework) spends, where a trace does not say.

    NOTE [host costs]
    A preset's host costs stand in for what a trace does not record: issuing a layer in
    eager PyTorch (``layer_*``, ``view_*`` for a layer that launches no kernel), zero_grad
    and the optimizer step (``step_ns + step_tensor_ns x tensors``), what vdnnsim's vDNN
    runtime adds per layer, offloaded and fetched buffer (``runtime_*``), how many commands
    a stream queues before a launch blocks (``launch_queue``, 0: no limit), the commands a
    layer issues per pass (``layer_kernels_*``), the driver's cudaMalloc and cudaFree of a
    caching-allocator segment (``segment_*``) and the CPU optimizer's step (``cpu_step_*``).
    A profiled trace's own host times win. Zeros mean not calibrated: the host then never
    sets the pace (a run that offloads the optimizer says its CPU step is left out).
    Where each preset's numbers come from: docs/hardware.md, "Host costs".
    """

    layer_fwd_ns: int = 0
    layer_bwd_ns: int = 0
    step_ns: int = 0
    step_tensor_ns: int = 0
    view_fwd_ns: int = 0
    view_bwd_ns: int = 0
    runtime_layer_fwd_ns: int = 0
    runtime_layer_bwd_ns: int = 0
    runtime_offload_ns: int = 0
    runtime_fetch_ns: int = 0
    launch_queue: int = 0
    segment_malloc_ns: int = 0  # a cudaMalloc of a segment
    segment_malloc_ns_per_gib: int = 0  # plus this per GiB of it
    segment_free_ns: int = 0  # and a cudaFree
    segment_free_ns_per_gib: int = 0
    layer_kernels_fwd: float = 1.0
    layer_kernels_bwd: float = 1.0
    # the CPU optimizer's step (fused AdamW, the host's threads) over one tensor of n
    # elements: cpu_step_ns + n x per element (fp32; _16: 16-bit)
    cpu_step_ns: int = 0
    cpu_step_ns_per_element: float = 0.0
    cpu_step_ns_per_element_16: float = 0.0
    # a CPU step's per-element time grows by this share for each
    # element of the parameters copied back (to the GPU) while it runs; 0: not calibrated
    cpu_step_copy_share: float = 0.0
    # the threads the step above was measured on, the memory
    # bandwidth they reach, and one thread's step: what a change of threads or bandwidth
    # scales it by (a what-if); zeros: the step cannot be varied
    cpu_threads: int = 0
    cpu_memory_bw_bytes_per_s: float = 0.0
    cpu_step_thread_ns_per_element: float = 0.0  # fp32
    cpu_step_thread_ns_per_element_16: float = 0.0  # 16-bit


# NOTE [cpu step model]
# The CPU optimizer's step (fused AdamW, one multi-threaded kernel per tensor) streams each
# element's parameter, gradient and two moments through host memory: 28 bytes an fp32
# element, 14 a 16-bit one. Its time per element is the longer of one thread's arithmetic
# over the threads and its bytes at the bandwidth those threads reach: a roofline. A host's
# measured ``cpu_step_ns_per_element*`` (``vdnnsim calibrate --cpu-step``, on
# ``cpu_threads``) are used as they are; the roofline only scales them to a host that
# differs in threads or bandwidth (measured time x roofline there / roofline here), so the
# calibrated host keeps its own number. The fixed cost per tensor and the copies' share are
# not scaled. How far a what-if lands from measurements: docs/beyond-vdnn.md, "The CPU
# step's threads and bandwidth".
CPU_STEP_BYTES = {"fp32": 28, "16": 14}


def cpu_step_roofline_ns(threads: int, bw_bytes_per_s: float, thread_ns: float,
                         bytes_per_element: int) -> float:
    """The roofline's ns per element: the step's arithmetic over
    ``threads`` or its bytes at the memory's bandwidth, whichever is longer."""
    return max(thread_ns / threads, bytes_per_element * 1e9 / bw_bytes_per_s)


def cpu_step_modelled(host: Host) -> bool:
    """Whether ``host`` has the threads-and-bandwidth model."""
    return bool(host.cpu_threads and host.cpu_memory_bw_bytes_per_s
                and host.cpu_step_thread_ns_per_element
                and host.cpu_step_thread_ns_per_element_16)


# NOTE [host memory]
# Offloaded buffers land in pinned host memory (cudaMallocHost, as vDNN and
# save_on_cpu(pin_memory=True) take it). A run whose pinned host bytes at some moment
# exceed ``host_memory_bytes`` does not fit: the first offload that overflows the host is
# the run's out-of-memory (kind 'host', reason 'host memory'), and vdnn_dyn and the
# planners look for a plan that fits both memories. A preset gives its typical host's
# memory, per GPU where a host serves several; all of it counts as pinnable (an upper
# bound). The unified-memory policies migrate pages into pageable memory, which the OS can
# swap: their host bytes are not checked.


@dataclass(frozen=True)
class SpecRuleFit:
    """A GPU's correction of the op spec rule, fitted to public kernel measurements of that
    card (NOTE [op spec rule fit])."""

    compute_scale: float  # times every peak the op model sees
    bandwidth_scale: float  # times the bandwidth it sees
    records: int  # the measurements it was fitted on
    source: str = ""


# the analytic cost model's algorithm classes (costmodel.EFF's keys), which a preset's
# algo_efficiency may name
ALGO_CLASSES = ("implicit_gemm", "implicit_precomp_gemm", "gemm", "fft", "fft_tiling",
                "winograd", "fc", "elementwise")
# the dtypes a preset's peak_flops may name; the first three it must (the cost models time them)
PEAK_DTYPES = ("fp32", "fp16", "bf16", "tf32", "fp8")


@dataclass(frozen=True)
class GPU:
    name: str
    display_name: str
    memory_bytes: int
    peak_flops: dict[str, float]
    mem_bw_bytes_per_s: float
    launch_overhead_ns: int
    winograd: bool
    link: Link
    source: str = ""
    host: Host = Host()
    sm_count: int = 0  # streaming multiprocessors; 0: unknown
    calibration: str = ""  # fitted kernel model, relative to vdnnsim/data
    cublas_workspace_bytes: int = 0  # what PyTorch's cuBLAS handles hold
    host_memory_bytes: int | None = None  # pinnable host memory; None: no limit
    op_calibration: str = ""  # fitted op-level model, relative to vdnnsim/data
    # the analytic cost model's efficiency of an algorithm class on this card, where it has
    # been calibrated; the classes not named keep costs.analytic's EFF
    algo_efficiency: dict[str, float] = field(default_factory=dict)
    spec_rule: SpecRuleFit | None = None  # the op spec rule's fitted correction, if any

    def flops(self, dtype: str) -> float:
        return self.peak_flops[dtype]


class _LinkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    h2d_bw_bytes_per_s: float = Field(gt=0, description="Host-to-device bytes per second.")
    d2h_bw_bytes_per_s: float = Field(gt=0, description="Device-to-host bytes per second.")
    latency_ns: int = Field(10_000, ge=0, description="Fixed cost of each copy.")
    duplex: bool = Field(True, description="Both directions at once.")
    duplex_total_bw_bytes_per_s: float | None = Field(
        None, gt=0, description="Cap on the sum of both directions when both run.")


class _HostSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    layer_fwd_ns: int = Field(0, ge=0, le=10**12, description="Eager PyTorch: the host's "
                              "time to issue one layer's forward pass (synthesized traces).")
    layer_bwd_ns: int = Field(0, ge=0, le=10**12, description="And its backward pass.")
    step_ns: int = Field(0, ge=0, le=10**12, description="Eager PyTorch: the host's time "
                         "for zero_grad and the optimizer step, fixed part (synthesized "
                         "traces).")
    step_tensor_ns: int = Field(0, ge=0, le=10**12, description="And per parameter tensor.")
    view_fwd_ns: int = Field(0, ge=0, le=10**12, description="Eager PyTorch: a layer that "
                             "launches no kernel (a view), forward pass; 0: as any layer.")
    view_bwd_ns: int = Field(0, ge=0, le=10**12, description="And its backward pass.")
    runtime_layer_fwd_ns: int = Field(0, ge=0, le=10**12, description="What the vDNN "
                                      "runtime adds per layer in the forward pass.")
    runtime_layer_bwd_ns: int = Field(0, ge=0, le=10**12, description="And per layer in "
                                      "the backward pass.")
    runtime_offload_ns: int = Field(0, ge=0, le=10**12, description="What the vDNN runtime "
                                    "spends per offloaded buffer.")
    runtime_fetch_ns: int = Field(0, ge=0, le=10**12, description="And per fetched buffer.")
    launch_queue: int = Field(0, ge=0, le=10**9, description="Commands a stream's launch "
                              "queue holds before a launch blocks the host; 0: no limit.")
    segment_malloc_ns: int = Field(0, ge=0, le=10**12, description="The driver's cudaMalloc "
                                   "of one caching-allocator segment.")
    segment_malloc_ns_per_gib: int = Field(0, ge=0, le=10**12, description="Plus this per "
                                           "GiB of the segment.")
    segment_free_ns: int = Field(0, ge=0, le=10**12, description="And its cudaFree.")
    segment_free_ns_per_gib: int = Field(0, ge=0, le=10**12, description="Plus this per "
                                         "GiB of the segment.")
    layer_kernels_fwd: float = Field(1.0, ge=0, le=10**6, description="Commands a layer's "
                                     "forward pass issues, where a trace does not say.")
    layer_kernels_bwd: float = Field(1.0, ge=0, le=10**6, description="And its backward.")
    cpu_step_ns: int = Field(0, ge=0, le=10**12, description="The CPU optimizer's step "
                             "(optimizer offload) over one tensor, fixed part.")
    cpu_step_ns_per_element: float = Field(0.0, ge=0, le=10**6, description="And per "
                                           "element of an fp32 tensor.")
    cpu_step_ns_per_element_16: float = Field(0.0, ge=0, le=10**6, description="And per "
                                              "element of a 16-bit tensor.")
    cpu_step_copy_share: float = Field(0.0, ge=0, le=10, description="The step's per-element "
                                       "time grows by this share for each element copied "
                                       "back to the GPU while it runs.")
    cpu_threads: int = Field(0, ge=0, le=4096, description="Threads the CPU step runs on.")
    cpu_memory_bw_bytes_per_s: float = Field(0.0, ge=0, le=1e15, description="The host "
                                             "memory's bandwidth those threads reach.")
    cpu_step_thread_ns_per_element: float = Field(0.0, ge=0, le=10**6, description="The CPU "
                                                  "step's arithmetic on one thread, per fp32 "
                                                  "element.")
    cpu_step_thread_ns_per_element_16: float = Field(0.0, ge=0, le=10**6, description="And "
                                                     "per 16-bit element.")
    source: str = Field("", description="Where the numbers come from.")


class _SpecRuleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    compute_scale: float = Field(ge=0.1, le=10, description="Times every peak FLOP/s the "
                                 "op model's spec rule sees.")
    bandwidth_scale: float = Field(ge=0.1, le=10, description="Times the DRAM bandwidth "
                                   "it sees.")
    records: int = Field(ge=1, description="The kernel measurements it was fitted on.")
    source: str = Field(min_length=1, description="The measurements and the fit.")


class _GPUSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    display_name: str = Field(description="Marketing name.")
    memory_bytes: Bytes = Field(gt=0, description="Device memory capacity.")
    peak_flops: dict[str, float] = Field(description="Peak FLOP/s per dtype, dense: fp32, "
                                         "fp16 and bf16, and where the chip has them tf32 "
                                         "and fp8.")
    mem_bw_bytes_per_s: float = Field(gt=0, description="DRAM bandwidth.")
    launch_overhead_ns: int = Field(ge=0, description="Fixed cost per layer call.")
    winograd: bool = Field(description="cuDNN of the era offers Winograd.")
    link: _LinkSpec = Field(description="Host link.")
    host: _HostSpec = Field(default_factory=_HostSpec, description="Host costs; zeros "
                            "where not calibrated.")
    sm_count: int = Field(0, ge=0, description="Streaming multiprocessors.")
    calibration: str = Field("", description="Fitted kernel-time model.")
    cublas_workspace_bytes: int = Field(0, ge=0, description="cuBLAS workspaces PyTorch "
                                        "holds once a model has run a matmul.")
    host_memory_bytes: Bytes = Field(gt=0, description="The typical host's memory (per GPU "
                                     "where it serves several) that offloads may pin.")
    source: str = Field(description="Where the numbers come from.")
    op_calibration: str = Field("", description="Fitted op-level kernel model: any "
                                "model's meta-device trace is timed by it.")
    algo_efficiency: dict[str, float] = Field(
        default_factory=dict, description="The analytic cost model's share of peak FLOP/s "
        "for an algorithm class on this card, where calibrated.")
    spec_rule: _SpecRuleSpec | None = Field(None, description="A correction of the op "
                                            "model's spec rule (no op_calibration) fitted "
                                            "to kernel measurements of this card.")

    @field_validator("peak_flops")
    @classmethod
    def _known_dtypes(cls, v: dict[str, float]) -> dict[str, float]:
        for k, f in v.items():
            if k not in PEAK_DTYPES:
                raise ValueError(f"unknown dtype {k!r} (one of "
                                 f"{', '.join(PEAK_DTYPES)})")
            if not 0 < f <= 1e18:
                raise ValueError(f"{k} must be in (0, 1e18] FLOP/s, got {f}")
        missing = [k for k in PEAK_DTYPES[:3] if k not in v]
        if missing:
            raise ValueError(f"{', '.join(missing)} missing (fp32, fp16 and bf16 "
                             "are required; a chip without bf16 gives it the fp32 rate)")
        return v

    @field_validator("algo_efficiency")
    @classmethod
    def _known_classes(cls, v: dict[str, float]) -> dict[str, float]:
        for k, e in v.items():
            if k not in ALGO_CLASSES:
                raise ValueError(f"algo_efficiency: unknown class {k!r} (one of "
                                 f"{sorted(ALGO_CLASSES)})")
            if not 0 < e <= 1:
                raise ValueError(f"algo_efficiency: {k} must be in (0, 1], got {e}")
        return v


Bandwidth = Annotated[float, BeforeValidator(limits.bandwidth)]


def _capacity(value: Any) -> int:
    n = parse_bytes(value)
    if n < 1:
        raise ValueError("a memory capacity must be at least 1 byte")
    return n


Capacity = Annotated[int, BeforeValidator(_capacity)]


class HostOverrides(BaseModel):
    """What a run config may change of a preset's host: its CPU optimizer step, as
    ``vdnnsim calibrate --cpu-step`` measures it, or a what-if of it."""

    model_config = ConfigDict(extra="forbid")
    cpu_threads: int | None = Field(None, ge=1, le=4096, description="Threads of the CPU "
                                    "step.")
    cpu_memory_bw_bytes_per_s: Bandwidth | None = Field(None, description="The host "
                                                        "memory's bandwidth they reach.")
    cpu_step_thread_ns_per_element: float | None = Field(
        None, gt=0, le=10**6, description="The step's arithmetic on one thread, per fp32 "
        "element.")
    cpu_step_thread_ns_per_element_16: float | None = Field(
        None, gt=0, le=10**6, description="And per 16-bit element.")
    cpu_step_ns: int | None = Field(None, ge=0, le=10**12, description="The step's fixed "
                                    "cost per tensor.")
    cpu_step_ns_per_element: float | None = Field(
        None, gt=0, le=10**6, description="The step per fp32 element on cpu_threads "
        "threads.")
    cpu_step_ns_per_element_16: float | None = Field(
        None, gt=0, le=10**6, description="And per 16-bit element.")
    cpu_step_copy_share: float | None = Field(None, ge=0, le=10, description="The step's "
                                              "per-element time grows by this share for "
                                              "each element copied back while it runs.")


class GPUOverrides(BaseModel):
    """What a run config may change on a preset (bounds: vdnnsim/limits.py)."""

    model_config = ConfigDict(extra="forbid")
    memory_bytes: Capacity | None = Field(None, description="Capacity, e.g. '12 GiB'.")
    link_bw_bytes_per_s: Bandwidth | None = Field(
        None, description="Set both directions of the host link.")
    h2d_bw_bytes_per_s: Bandwidth | None = Field(None, description="Host-to-device only.")
    d2h_bw_bytes_per_s: Bandwidth | None = Field(None, description="Device-to-host only.")
    link_latency_ns: Annotated[int, BeforeValidator(limits.latency_ns)] | None = Field(
        None, description="Per-copy latency.")
    duplex: StrictBool | None = Field(None, description="Both copy directions at once.")
    peak_flops_scale: Annotated[float, BeforeValidator(limits.flops_scale)] | None = Field(
        None, description="Scale compute peak.")
    mem_bw_bytes_per_s: Bandwidth | None = Field(None, description="DRAM bandwidth.")
    host_memory_bytes: Capacity | None = Field(
        None, description="Host memory offloads may pin, e.g. '64 GiB'.")
    host: HostOverrides | None = Field(None, description="The host's CPU optimizer step.")


def _gpu(name: str, s: _GPUSpec) -> GPU:
    return GPU(name, s.display_name, s.memory_bytes, dict(s.peak_flops), s.mem_bw_bytes_per_s,
               s.launch_overhead_ns, s.winograd, Link(**s.link.model_dump()), s.source,
               Host(**s.host.model_dump(exclude={"source"})), s.sm_count, s.calibration,
               s.cublas_workspace_bytes, s.host_memory_bytes, s.op_calibration,
               dict(s.algo_efficiency),
               SpecRuleFit(**s.spec_rule.model_dump()) if s.spec_rule else None)


@lru_cache(maxsize=1)
def _presets() -> dict[str, GPU]:
    raw = yaml.safe_load(resources.files("vdnnsim").joinpath("data/gpus.yaml").read_text())
    out = {}
    for name, data in raw.items():
        try:
            s = _GPUSpec.model_validate(data)
        except ValidationError as exc:  # a broken package, not a user error
            raise RuntimeError(validation_message(f"gpus.yaml: {name}", exc)) from None
        out[name] = _gpu(name, s)
    return out


def is_spec_path(gpu: str) -> bool:
    """Whether a ``--gpu`` or ``gpu:`` value names a GPU spec file rather than a preset: it
    ends in .yaml or .yml, or holds a folder separator."""
    return gpu.endswith((".yaml", ".yml")) or "/" in gpu or os.sep in gpu


def gpu_from_file(path: str | os.PathLike) -> GPU:
    """A GPU from a spec file: one preset's mapping, as in ``data/gpus.yaml`` (named by the
    file's stem), or one ``NAME: mapping`` entry copied from it (named NAME). A relative
    ``calibration`` or ``op_calibration`` is looked up beside the file, then in vdnnsim/data."""
    data = read_yaml(path, ConfigError)
    wrong = misplaced(data, path, "a GPU spec", ())
    if wrong:
        raise ConfigError(wrong)
    name = Path(path).stem
    if isinstance(data, dict) and len(data) == 1:
        (key, value), = data.items()
        if isinstance(value, dict) and key not in _GPUSpec.model_fields:
            name, data = str(key), value
    spec = parse_model(_GPUSpec, data, shown(path), ConfigError)
    for key in ("calibration", "op_calibration"):
        if getattr(spec, key):
            spec = spec.model_copy(update={key: _fitted_path(path, key, getattr(spec, key))})
    return _gpu(name, spec)


def _fitted_path(path: str | os.PathLike, key: str, value: str) -> str:
    beside = Path(path).parent / value
    if beside.is_file():
        return str(beside.resolve())
    if not Path(value).is_absolute() and resources.files("vdnnsim").joinpath("data",
                                                                              value).is_file():
        return value
    raise ConfigError(f"{shown(path)}: {key}: no such file {value!r} (beside the spec file or "
                      "in vdnnsim/data)")


def timing_of(gpu: GPU) -> str:
    """How vdnnsim times ``gpu``, in words: by its own fitted models where it has them, else
    by the spec rules on its datasheet numbers alone (NOTE [spec rule], NOTE [op spec rule]);
    and which of its host's costs are calibrated (NOTE [host costs])."""
    own = [what for what, has in (("op model", gpu.op_calibration),
                                  ("kernel model", gpu.calibration)) if has]
    parts = [f"calibrated {' and '.join(own)}" if own else "spec rule (datasheet numbers only)"]
    if gpu.spec_rule and not gpu.op_calibration:
        parts[0] = ("spec rule, corrected by public kernel measurements "
                    f"({gpu.spec_rule.records} records)")
    if gpu.algo_efficiency:
        parts[0] += f", {', '.join(sorted(gpu.algo_efficiency))} efficiency fitted"
    h = gpu.host
    if h.layer_fwd_ns or h.step_ns:
        parts.append("host costs calibrated")
    elif h.cpu_step_ns_per_element:
        parts.append("host: CPU optimizer step calibrated, other costs not")
    else:
        parts.append("host costs not calibrated")
    return "; ".join(parts)


def preset_names() -> list[str]:
    return list(_presets())


def gpu_preset(name: str, overrides: GPUOverrides | dict[str, Any] | None = None) -> GPU:
    if not isinstance(name, str):
        raise ConfigError(f"a GPU preset is named by a string, got {type(name).__name__}")
    if overrides is not None and not isinstance(overrides, (dict, GPUOverrides)):
        raise ConfigError(f"gpu overrides must be a mapping, got {type(overrides).__name__}")
    try:
        gpu = _presets()[name]
    except KeyError:
        raise UnknownNameError("GPU preset", name, preset_names()) from None
    if overrides is None:
        return gpu
    if isinstance(overrides, dict):
        overrides = parse_overrides(overrides)
    return apply_overrides(gpu, overrides)


def parse_overrides(data: dict[str, Any]) -> GPUOverrides:
    try:
        return GPUOverrides.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_message("gpu overrides", exc, data)) from None


def apply_overrides(gpu: GPU, o: GPUOverrides) -> GPU:
    link = gpu.link
    if o.link_bw_bytes_per_s is not None:
        link = replace(link, h2d_bw_bytes_per_s=o.link_bw_bytes_per_s,
                       d2h_bw_bytes_per_s=o.link_bw_bytes_per_s,
                       duplex_total_bw_bytes_per_s=None)
    if o.h2d_bw_bytes_per_s is not None:
        link = replace(link, h2d_bw_bytes_per_s=o.h2d_bw_bytes_per_s)
    if o.d2h_bw_bytes_per_s is not None:
        link = replace(link, d2h_bw_bytes_per_s=o.d2h_bw_bytes_per_s)
    if o.link_latency_ns is not None:
        link = replace(link, latency_ns=o.link_latency_ns)
    if o.duplex is not None:
        link = replace(link, duplex=o.duplex)
    g = replace(gpu, link=link)
    if o.memory_bytes is not None:
        g = replace(g, memory_bytes=o.memory_bytes)
    if o.host_memory_bytes is not None:
        g = replace(g, host_memory_bytes=o.host_memory_bytes)
    if o.mem_bw_bytes_per_s is not None:
        g = replace(g, mem_bw_bytes_per_s=o.mem_bw_bytes_per_s)
    if o.peak_flops_scale is not None:
        g = replace(g, peak_flops={k: v * o.peak_flops_scale for k, v in g.peak_flops.items()})
    if o.host is not None:
        g = replace(g, host=_host_overridden(g, o.host))
    return g


_ROOFLINE = ("cpu_threads", "cpu_memory_bw_bytes_per_s", "cpu_step_thread_ns_per_element",
             "cpu_step_thread_ns_per_element_16")
_POINT = ("cpu_step_ns_per_element", "cpu_step_ns_per_element_16")


def _host_overridden(gpu: GPU, o: HostOverrides) -> Host:
    """The preset's host with ``o``'s fields (NOTE [cpu step model]). Where ``o`` gives the
    step's per-element times, they are a calibration (on its ``cpu_threads``) and are taken
    as they are; where it changes only the threads or the bandwidth, the preset's step is
    scaled by the roofline, which needs the preset's whole model."""
    given = o.model_dump(exclude_none=True)
    host = replace(gpu.host, **given)
    points = [k for k in _POINT if k in given]
    if len(points) == 1:
        raise ConfigError(f"gpu {gpu.name}: host.{points[0]} alone: a calibration gives "
                          f"both {' and '.join(_POINT)} (measured on its cpu_threads), a "
                          f"what-if of threads or bandwidth neither")
    if points or not any(k in given for k in _ROOFLINE):
        return host
    old = gpu.host
    if not cpu_step_modelled(old) or not (old.cpu_step_ns_per_element
                                          and old.cpu_step_ns_per_element_16):
        missing = [f"host.{k}" for k in _ROOFLINE + _POINT if not getattr(old, k)]
        raise ConfigError(f"gpu {gpu.name}: the preset's measured CPU step has no "
                          f"threads-and-bandwidth model to scale (the preset lacks "
                          f"{', '.join(missing)}); give a whole calibration instead, as "
                          f"`vdnnsim calibrate --cpu-step` prints it")
    scaled = {}
    for point, thread, kind in (("cpu_step_ns_per_element", "cpu_step_thread_ns_per_element",
                                 "fp32"),
                                ("cpu_step_ns_per_element_16",
                                 "cpu_step_thread_ns_per_element_16", "16")):
        then = cpu_step_roofline_ns(old.cpu_threads, old.cpu_memory_bw_bytes_per_s,
                                    getattr(old, thread), CPU_STEP_BYTES[kind])
        now = cpu_step_roofline_ns(host.cpu_threads, host.cpu_memory_bw_bytes_per_s,
                                   getattr(host, thread), CPU_STEP_BYTES[kind])
        scaled[point] = getattr(old, point) * now / then
    return replace(host, **scaled)
