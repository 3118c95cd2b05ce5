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
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import ConfigError
from ..yamlio import parse_bytes, parse_model, read_yaml

# The keys a study may set per run; GPU override keys are folded into ``gpu``.
POINT_KEYS = ("network", "batch_size", "gpu", "dtype", "policy", "policy_options",
              "memory_bytes")
GPU_KEYS = ("link_bw_bytes_per_s", "h2d_bw_bytes_per_s", "d2h_bw_bytes_per_s",
            "link_latency_ns", "duplex", "peak_flops_scale", "mem_bw_bytes_per_s")
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
        return self


def expand(spec: StudySpec) -> list[dict[str, Any]]:
    """Every run of a study as a flat dict of ALL_KEYS values (missing keys omitted)."""
    grid = [dict(zip(spec.sweep, combo)) for combo in itertools.product(*spec.sweep.values())]
    n = len(next(iter(spec.zip.values()))) if spec.zip else 1
    zipped = [{k: v[i] for k, v in spec.zip.items()} for i in range(n)]
    points = [{**spec.base, **z, **g} for z in zipped for g in grid]
    if spec.runs:
        explicit = [{**spec.base, **r} for r in spec.runs]
        points = explicit if not (spec.sweep or spec.zip) else points + explicit
    if not points or not any(points):
        points = [dict(spec.base)]
    return points


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
