"""Study files: one run, a grid (cartesian product), zipped lists, or explicit runs over
any run-config key. See docs/studies.md.

```yaml
name: vgg16 batch sweep
base: {gpu: k40}                     # keys every run shares
sweep:                               # cartesian product of every list
  batch_size: [64, 128, 256]
  policy: [baseline_p, vdnn_dyn]
zip:                                 # lists of one length, advanced together
  network: [alexnet, vgg16]
  batch_size: [128, 256]
runs:                                # explicit runs (each merged over base)
  - {network: googlenet, batch_size: 128, policy: vdnn_all_m}
```

Each run is one point: a network (zoo name, spec or trace path), a batch size, a GPU preset
with overrides, a dtype, one policy with options, and a pool capacity.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool,
                      ValidationError, model_validator)

from .. import limits
from ..config import GPUConfig as _GPUPoint
from ..errors import ConfigError
from ..hardware import Bandwidth, Capacity
from ..limits import MAX_NAME_CHARS, MAX_STUDY_RUNS
from ..yamlio import parse_bytes, parse_model, read_yaml, validation_message

# The keys a study may set per run; GPU override keys are folded into ``gpu``.
POINT_KEYS = ("network", "batch_size", "gpu", "dtype", "policy", "policy_options",
              "memory_bytes")
GPU_KEYS = ("link_bw_bytes_per_s", "h2d_bw_bytes_per_s", "d2h_bw_bytes_per_s",
            "link_latency_ns", "duplex", "peak_flops_scale", "mem_bw_bytes_per_s",
            "host_memory_bytes")
ALL_KEYS = POINT_KEYS + GPU_KEYS


class StudySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, description="Title.")
    description: str | None = Field(None, description="Free text for people.")
    base: dict[str, Any] = Field(default_factory=dict, description="Keys every run shares.")
    sweep: dict[str, list[Any]] = Field(default_factory=dict,
                                        description="Cartesian product of these lists.")
    zip: dict[str, list[Any]] = Field(default_factory=dict,
                                      description="Lists of one length, taken together.")
    runs: list[dict[str, Any]] = Field(default_factory=list,
                                       description="Explicit runs, each over base.")

    @model_validator(mode="after")
    def _check(self) -> "StudySpec":
        for section in ("base", "sweep", "zip"):
            for k in getattr(self, section):
                if k not in ALL_KEYS:
                    raise ValueError(f"{section}.{k}: unknown key; known: {', '.join(ALL_KEYS)}")
        for i, run in enumerate(self.runs):
            for k in run:
                if k not in ALL_KEYS:
                    raise ValueError(f"runs[{i}].{k}: unknown key; known: {', '.join(ALL_KEYS)}")
        for k, v in {**self.sweep, **self.zip}.items():
            if not v:
                raise ValueError(f"{k}: an empty list gives no runs")
        lengths = {k: len(v) for k, v in self.zip.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError("zip lists differ in length: "
                             + ", ".join(f"{k}={n}" for k, n in lengths.items()))
        both = set(self.sweep) & set(self.zip)
        if both:
            raise ValueError(f"{', '.join(sorted(both))}: in both sweep and zip")
        n = run_count(self)
        if n > MAX_STUDY_RUNS:
            raise ValueError(f"the study has {n if n < 10**15 else 'more than 10**15'} runs, "
                             f"more than the {MAX_STUDY_RUNS:,} one study may hold (about an "
                             "hour of simulation); split it")
        self.base = _checked(self.base, "base")
        self.sweep = {k: [_value(k, x, f"sweep.{k}[{i}]") for i, x in enumerate(v)]
                      for k, v in self.sweep.items()}
        self.zip = {k: [_value(k, x, f"zip.{k}[{i}]") for i, x in enumerate(v)]
                    for k, v in self.zip.items()}
        self.runs = [_checked(r, f"runs[{i}]") for i, r in enumerate(self.runs)]
        return self


def run_count(spec: "StudySpec") -> int:
    """How many runs ``expand`` would make, without making them."""
    grid = math.prod(len(v) for v in spec.sweep.values())
    zipped = len(next(iter(spec.zip.values()))) if spec.zip else 1
    if spec.runs:
        return len(spec.runs) if not (spec.sweep or spec.zip) else grid * zipped + len(spec.runs)
    return grid * zipped


class _Point(BaseModel):
    """The type of each key a study may set (the same as a run config's)."""

    model_config = ConfigDict(extra="forbid")
    network: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)] | None = None
    batch_size: Annotated[int, BeforeValidator(limits.batch_size),
                          Field(le=2**50)] | None = None  # a table column is 64-bit
    gpu: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)] | _GPUPoint | None \
        = None
    dtype: Literal["fp32", "fp16", "bf16"] | None = None
    policy: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)] | None = None
    policy_options: Annotated[dict[str, limits.OptionValue],
                              BeforeValidator(lambda v: {} if v is None else v)] | None = None
    memory_bytes: Capacity | None = None
    link_bw_bytes_per_s: Bandwidth | None = None
    h2d_bw_bytes_per_s: Bandwidth | None = None
    d2h_bw_bytes_per_s: Bandwidth | None = None
    link_latency_ns: Annotated[int, BeforeValidator(limits.latency_ns)] | None = None
    duplex: StrictBool | None = None
    peak_flops_scale: Annotated[float, BeforeValidator(limits.flops_scale)] | None = None
    mem_bw_bytes_per_s: Bandwidth | None = None
    host_memory_bytes: Capacity | None = None


def _value(key: str, value: Any, where: str) -> Any:
    """One study value, checked and normalised (a byte string becomes its count)."""
    try:
        point = _Point.model_validate({key: value})
    except ValidationError as exc:
        msg = validation_message("", exc, {key: value})[2:]  # 'gpu.preset: ...'
        raise ValueError(f"{where}{msg[len(key):]}") from None
    out = getattr(point, key)
    return out.model_dump(exclude_none=True) if isinstance(out, BaseModel) else out


def _checked(values: dict[str, Any], where: str) -> dict[str, Any]:
    return {k: _value(k, v, f"{where}.{k}") for k, v in values.items()}


def expand(spec: StudySpec) -> list[dict[str, Any]]:
    """Every run of a study as a flat dict of ALL_KEYS values (missing keys omitted). A
    null value means 'not set here', as in a run config: the base's value, else the
    default, shows through."""
    grid = [_set(dict(zip(spec.sweep, combo)))
            for combo in itertools.product(*spec.sweep.values())]
    n = len(next(iter(spec.zip.values()))) if spec.zip else 1
    zipped = [_set({k: v[i] for k, v in spec.zip.items()}) for i in range(n)]
    base = _set(spec.base)
    points = [{**base, **z, **g} for z in zipped for g in grid]
    if spec.runs:
        explicit = [{**base, **_set(r)} for r in spec.runs]
        points = explicit if not (spec.sweep or spec.zip) else points + explicit
    if not points or not any(points):
        points = [dict(base)]
    return points


def _set(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def load_study(path: str | os.PathLike) -> tuple[StudySpec, Path]:
    p = Path(path)
    data = read_yaml(p, ConfigError)
    if isinstance(data, dict) and not ({"sweep", "zip", "runs", "base"} & set(data)):
        data = _from_run_config(data, str(p))
    return parse_model(StudySpec, data, str(p), ConfigError), p.parent


def _from_run_config(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A plain run config is a study too: its policies become a sweep."""
    from ..config import config_from_dict

    cfg = config_from_dict(data, source)
    gpu_name, overrides = cfg.gpu_name_and_overrides()
    base: dict[str, Any] = {"network": cfg.network, "gpu": {"preset": gpu_name,
                                                            **(overrides or {})},
                            "dtype": cfg.dtype, "policy_options": cfg.policy_options}
    if cfg.batch_size:
        base["batch_size"] = cfg.batch_size
    if cfg.memory_bytes is not None:
        base["memory_bytes"] = cfg.memory_bytes
    return {"name": cfg.name, "description": cfg.description, "base": base,
            "sweep": {"policy": cfg.policy_list}}


def memory_bytes_of(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return parse_bytes(value)
    except ValueError as exc:
        raise ConfigError(f"memory_bytes: {exc}") from None
