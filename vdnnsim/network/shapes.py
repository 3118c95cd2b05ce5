"""Shape inference and byte accounting for a :class:`NetworkSpec`.

Output sizes use the floor rule of Torch and cuDNN: ``floor((in + 2*pad - k) / s) + 1``
(``ceil`` where a pool asks for it). Shapes are per image; multiply by the batch size for
tensor sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import TraceError
from .spec import LayerDef, NetworkSpec

Shape = tuple[int, ...]

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


@dataclass(frozen=True)
class LayerInfo:
    """One layer after shape inference (all counts per image)."""

    name: str
    type: str
    inputs: tuple[str, ...]
    in_shapes: tuple[Shape, ...]
    out_shape: Shape
    params: int
    flops: int
    inplace: bool
    alias: bool
    needs_input_grad: bool
    d: LayerDef

    @property
    def out_elems(self) -> int:
        return math.prod(self.out_shape)

    @property
    def in_elems(self) -> int:
        return sum(math.prod(s) for s in self.in_shapes)


@dataclass(frozen=True)
class NetworkInfo:
    name: str
    input_shape: Shape
    layers: tuple[LayerInfo, ...]

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)


def _pool_out(n: int, k: int, s: int, p: int, ceil: bool) -> int:
    num = n + 2 * p - k
    out = (-(-num // s) if ceil else num // s) + 1
    if ceil and (out - 1) * s >= n + p:  # Torch: the last window must start inside the input
        out -= 1
    return out


def infer(spec: NetworkSpec) -> NetworkInfo:
    shapes: dict[str, Shape] = {"data": tuple(spec.input)}
    grad: dict[str, bool] = {"data": False}
    infos: list[LayerInfo] = []
    prev = "data"
    # the extra tensors the cost model adds: a dropout's mask, a batch
    # norm's statistics; a layer may not take one of their names
    extras = {f"{d.name}:{x}": d.name for d in spec.layers
              for x in {"dropout": ("mask",), "bn": ("stats",)}.get(d.type, ())}
    for i, d in enumerate(spec.layers):
        where = f"{spec.name}: layers[{i}] ({d.name})"
        if d.name in shapes:
            raise TraceError(f"{where}: duplicate layer name {d.name!r}")
        if d.name in extras:
            raise TraceError(f"{where}: {d.name!r} is the name of layer {extras[d.name]!r}'s "
                             "extra tensor; rename the layer")
        inputs = tuple(d.inputs) if d.inputs else (prev,)
        for name in inputs:
            if name not in shapes:
                raise TraceError(f"{where}: input {name!r} is not the network input or an "
                                 "earlier layer")
        ins = tuple(shapes[n] for n in inputs)
        if d.type not in ("concat", "add") and len(inputs) != 1:
            raise TraceError(f"{where}: a {d.type} layer reads exactly one input")
        try:
            out, params, flops = _layer(d, ins)
        except ValueError as exc:
            raise TraceError(f"{where}: {exc}") from None
        inplace = bool(d.inplace if d.inplace is not None else d.type == "relu")
        if inplace and d.type not in ("relu", "threshold", "dropout"):
            raise TraceError(f"{where}: a {d.type} layer cannot run in place")
        alias = d.type == "flatten"
        needs_grad = any(grad[n] for n in inputs)
        grad[d.name] = needs_grad or params > 0
        shapes[d.name] = out
        infos.append(LayerInfo(d.name, d.type, inputs, ins, out, params, flops, inplace,
                               alias, needs_grad, d))
        prev = d.name
    return NetworkInfo(spec.name, tuple(spec.input), tuple(infos))


def _layer(d: LayerDef, ins: tuple[Shape, ...]) -> tuple[Shape, int, int]:
    x = ins[0]
    n = math.prod(x)
    t = d.type
    if t == "conv":
        if len(x) != 3:
            raise ValueError(f"conv needs a CxHxW input, got {_fmt(x)}")
        c, h, w = x
        k = d.kernel or 1
        if c % d.groups or d.out % d.groups:  # type: ignore[operator]
            raise ValueError(f"channels {c} -> {d.out} do not divide into {d.groups} groups")
        if h + 2 * d.pad < k or w + 2 * d.pad < k:
            raise ValueError(f"input {h}x{w} (pad {d.pad}) is smaller than kernel {k}")
        ho, wo = (h + 2 * d.pad - k) // d.stride + 1, (w + 2 * d.pad - k) // d.stride + 1
        cin_g = c // d.groups
        params = d.out * cin_g * k * k + (d.out if d.bias else 0)  # type: ignore[operator]
        flops = 2 * d.out * cin_g * k * k * ho * wo  # type: ignore[operator]
        return (d.out, ho, wo), params, flops  # type: ignore[return-value]
    if t == "fc":
        params = n * d.out + (d.out if d.bias else 0)  # type: ignore[operator]
        return (d.out,), params, 2 * n * d.out  # type: ignore[return-value, operator]
    if t in ("maxpool", "avgpool"):
        if len(x) != 3:
            raise ValueError(f"{t} needs a CxHxW input, got {_fmt(x)}")
        c, h, w = x
        k = d.kernel or 1
        if h + 2 * d.pad < k or w + 2 * d.pad < k:
            raise ValueError(f"input {h}x{w} (pad {d.pad}) is smaller than kernel {k}")
        ho, wo = (_pool_out(h, k, d.stride, d.pad, d.ceil_mode),
                  _pool_out(w, k, d.stride, d.pad, d.ceil_mode))
        return (c, ho, wo), 0, c * ho * wo * k * k
    if t == "concat":
        if any(len(s) != len(x) or s[1:] != x[1:] for s in ins):
            raise ValueError("concat inputs differ in shape beyond the channel dimension: "
                             + ", ".join(_fmt(s) for s in ins))
        return (sum(s[0] for s in ins),) + x[1:], 0, sum(math.prod(s) for s in ins)
    if t == "add":
        if any(s != x for s in ins):
            raise ValueError("add inputs differ in shape: " + ", ".join(_fmt(s) for s in ins))
        return x, 0, n * (len(ins) - 1)
    if t == "flatten":
        return (n,), 0, 0
    if t == "bn":
        return x, 2 * x[0], 4 * n
    if t == "lrn":
        return x, 0, (2 * d.size + 3) * n
    return x, 0, n  # relu, threshold, dropout, softmax


def _fmt(s: Shape) -> str:
    return "x".join(map(str, s))
