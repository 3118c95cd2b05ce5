"""The run config (YAML): one network at one batch size on one GPU under one or more
policies. See docs/configs.md.

```yaml
network: vgg16            # zoo name, or a path to a network spec or trace file
batch_size: 256
gpu: k40                  # preset name, or {preset: k40, memory_bytes: 12 GiB, ...}
policies: [baseline_p, vdnn_all_m, vdnn_dyn]
```
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool,
                      model_validator)

from .errors import ConfigError
from .hardware import Capacity, GPUOverrides
from .limits import OptionValue
from .limits import batch_size as batch_size_value
from .yamlio import misplaced, parse_model, read_yaml


class GPUConfig(GPUOverrides):
    """A preset with overrides."""

    preset: str = Field(description="GPU preset name (vdnnsim list gpus).")


class AllocatorConfig(BaseModel):
    """The caching allocator's settings a run replays, as
    PYTORCH_CUDA_ALLOC_CONF sets them."""

    model_config = ConfigDict(extra="forbid")

    expandable_segments: StrictBool = Field(
        False, description="One growing segment per pool and stream, as expandable_segments:True.")


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, description="A title for the table.")
    description: str | None = Field(None, description="Free text for people.")
    network: str = Field(min_length=1, description="Zoo network name, or a path to a "
                         "network spec or a trace file (relative paths: from the config's "
                         "folder).")
    batch_size: Annotated[int, BeforeValidator(batch_size_value)] | None = Field(
        None, description="Batch size (default: the network's; a trace fixes its own).")
    gpu: str | GPUConfig = Field("k40", description="Preset name, or a mapping with "
                                 "'preset' and overrides.")
    dtype: Literal["fp32", "fp16", "bf16"] = Field("fp32", description="Element type.")
    optimizer: Literal["sgd", "adam", "adamw"] | None = Field(
        None, description="The training step's optimizer: Adam and "
        "AdamW keep two moments per parameter and a temporary while they step (default: the "
        "trace's own, sgd for a network spec).")
    policy: str | None = Field(None, min_length=1, description="One policy name.")
    policies: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, min_length=1, description="Policy names.")
    policy_options: Annotated[dict[str, OptionValue],
                              BeforeValidator(lambda v: {} if v is None else v)] = Field(
        default_factory=dict, description="Options passed to every policy (switches and "
        "names: true/false, a word or a number); null is none.")
    memory_bytes: Capacity | None = Field(None, description="Pool capacity override, e.g. "
                                       "'12 GiB' (default: the GPU's memory).")
    allocator: AllocatorConfig | None = Field(None, description="PyTorch's caching "
                                              "allocator settings; PyTorch traces only.")
    optimizer_offload: bool = Field(False, description="The optimizer's state and step on "
                                    "the CPU, each weight gradient copied there as the "
                                    "backward pass makes it; "
                                    "PyTorch traces only.")
    optimizer_pinning: Literal["caching", "registered"] = Field(
        "caching", description="Where the offloaded optimizer's host copies live: PyTorch's "
        "pinned allocator (each a power of two) or one registered buffer; with optimizer_offload.")

    @model_validator(mode="after")
    def _one_policy_key(self) -> "RunConfig":
        if self.policy and self.policies:
            raise ValueError("give 'policy' or 'policies', not both")
        return self

    @property
    def policy_list(self) -> list[str]:
        if self.policies:
            return list(self.policies)
        return [self.policy] if self.policy else ["baseline_p", "vdnn_all_m", "vdnn_all_p",
                                                  "vdnn_conv_m", "vdnn_conv_p", "vdnn_dyn"]

    def gpu_name_and_overrides(self) -> tuple[str, dict[str, Any] | None]:
        if isinstance(self.gpu, str):
            return self.gpu, None
        o = self.gpu.model_dump(exclude_none=True)
        return o.pop("preset"), o


def load_config(path: str | os.PathLike) -> tuple[RunConfig, Path]:
    p = Path(path)
    return config_from_dict(read_yaml(p, ConfigError), str(p)), p.parent


def config_from_dict(data: Any, source: str = "<config>") -> RunConfig:
    """A key set to null is as if it were absent (its default), as in a study."""
    wrong = misplaced(data, source, "a run config", ("run config",))
    if wrong:
        raise ConfigError(wrong)
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if v is not None}
    return parse_model(RunConfig, data, source, ConfigError)
