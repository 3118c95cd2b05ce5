"""The network spec format (YAML): layers with their hyper-parameters, no sizes or times.

A layer reads the previous layer's output unless it names ``inputs``; the name ``data``
is the network input. Shapes, byte sizes and FLOPs come from :mod:`vdnnsim.network.shapes`.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from .. import limits

from ..errors import TraceError
from ..yamlio import parse_model, read_yaml

LayerType = Literal["conv", "fc", "relu", "threshold", "maxpool", "avgpool", "lrn",
                    "concat", "add", "bn", "dropout", "softmax", "flatten"]

Whole = Annotated[int, BeforeValidator(limits.whole)]  # whole numbers only
Positive = Annotated[int, BeforeValidator(limits.whole), Field(ge=1)]

_NEEDS_OUT = {"conv", "fc"}
_NEEDS_KERNEL = {"conv", "maxpool", "avgpool"}


class LayerDef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="Unique layer name; also its output's id.")
    type: LayerType = Field(description="Layer type.")
    inputs: list[str] | None = Field(None, description="Layers (or 'data') read; default: "
                                     "the previous layer.")
    out: Whole | None = Field(None, ge=1, description="Output channels (conv) or features (fc).")
    kernel: Whole | None = Field(None, ge=1, description="Square kernel size (conv, pools).")
    stride: Whole = Field(1, ge=1, description="Stride (conv, pools).")
    pad: Whole = Field(0, ge=0, description="Zero padding on each side (conv, pools).")
    groups: Whole = Field(1, ge=1, description="Channel groups (conv).")
    bias: bool = Field(True, description="Whether conv/fc has a bias.")
    inplace: bool | None = Field(None, description="Overwrite the input (relu default: "
                                 "true; dropout default: false).")
    ceil_mode: bool = Field(False, description="Pool output rounding (Torch default: floor).")
    size: Whole = Field(5, ge=1, description="LRN window.")
    p: float = Field(0.5, ge=0, lt=1, description="Dropout probability.")

    @model_validator(mode="after")
    def _required(self) -> "LayerDef":
        if self.type in _NEEDS_OUT and self.out is None:
            raise ValueError(f"a {self.type} layer needs 'out'")
        if self.type in _NEEDS_KERNEL and self.kernel is None:
            raise ValueError(f"a {self.type} layer needs 'kernel'")
        return self


class NetworkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Network name.")
    input: tuple[Positive, Positive, Positive] = Field(
        description="Input channels, height, width (each at least 1).")
    batch_size: Annotated[int, BeforeValidator(limits.batch_size)] | None = Field(
        None, description="Default batch size.")
    layers: list[LayerDef] = Field(min_length=1, description="Layers in execution order.")
    source: str | None = Field(None, description="Where the definition comes from.")


def network_from_dict(data: Any, source: str = "<network>") -> NetworkSpec:
    return parse_model(NetworkSpec, data, source, TraceError)


def load_network(path: str | os.PathLike) -> NetworkSpec:
    return network_from_dict(read_yaml(path, TraceError), str(path))


def is_network_file(data: Any) -> bool:
    return isinstance(data, dict) and "layers" in data and "input" in data and "format" not in data
