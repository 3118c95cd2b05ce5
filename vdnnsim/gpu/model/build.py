"""Model specs: ``torchvision:NAME`` (any torchvision classification model) and
``zoo:NAME`` (the paper's networks, built as nn.Modules from the zoo specs)."""

from __future__ import annotations

import re

import torch
from torch import nn

from ...errors import ConfigError
from ...network import infer, zoo_network
from ...network.spec import NetworkSpec


def _key(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", name)


class ZooModule(nn.Module):
    """A NetworkSpec as an nn.Module: Torch7's layers, in the spec's order."""

    def __init__(self, spec: NetworkSpec):
        super().__init__()
        info = infer(spec)
        self.order: list[tuple[str, str, tuple[str, ...]]] = []
        self.layers = nn.ModuleDict()
        self.names: dict[str, str] = {}
        for li in info.layers:
            d, key = li.d, _key(li.name)
            self.names[key] = li.name
            cin = li.in_shapes[0][0]
            mod: nn.Module | None = None
            if d.type == "conv":
                mod = nn.Conv2d(cin, d.out, d.kernel, d.stride, d.pad, groups=d.groups,
                                bias=d.bias)
            elif d.type == "fc":
                mod = nn.Linear(li.in_elems, d.out, bias=d.bias)
            elif d.type == "relu":
                mod = nn.ReLU(inplace=li.inplace)
            elif d.type == "threshold":
                mod = nn.Threshold(0.0, 1e-6)
            elif d.type == "maxpool":
                mod = nn.MaxPool2d(d.kernel, d.stride, d.pad, ceil_mode=d.ceil_mode)
            elif d.type == "avgpool":
                mod = nn.AvgPool2d(d.kernel, d.stride, d.pad, ceil_mode=d.ceil_mode)
            elif d.type == "lrn":
                mod = nn.LocalResponseNorm(d.size)
            elif d.type == "bn":
                mod = nn.BatchNorm2d(cin)
            elif d.type == "dropout":
                mod = nn.Dropout(d.p, inplace=li.inplace)
            elif d.type == "softmax":
                mod = nn.Softmax(dim=1)
            elif d.type == "flatten":
                mod = nn.Flatten(1)
            if mod is not None:
                self.layers[key] = mod
            self.order.append((key, d.type, tuple(_key(n) for n in li.inputs)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        env = {"data": x}
        out = x
        for key, kind, inputs in self.order:
            args = [env[n] for n in inputs]
            if kind == "concat":
                out = torch.cat(args, 1)
            elif kind == "add":
                out = args[0]
                for a in args[1:]:
                    out = out + a
            else:
                out = self.layers[key](args[0])
            env[key] = out
        return out


def build_model(model: str) -> tuple[nn.Module, tuple[int, int, int], str]:
    """(module, per-image input shape, display name) for a model spec."""
    kind, _, name = model.partition(":")
    if kind == "zoo" and name:
        spec = zoo_network(name)
        return ZooModule(spec), tuple(spec.input), name  # type: ignore[return-value]
    if kind == "torchvision" and name:
        try:
            import torchvision.models as tvm
        except ImportError:
            raise ConfigError("torchvision is not installed: torchvision: models need it "
                              "(pip install 'vdnnsim[torch]')") from None
        except RuntimeError as exc:  # a torchvision built for another torch: 'operator
            # torchvision::nms does not exist'
            raise ConfigError(f"torchvision does not load beside this torch "
                              f"({str(exc).splitlines()[0][:120]}); install the pair that "
                              "'vdnnsim[torch]' pins") from None
        fn = getattr(tvm, name, None)
        if fn is None or not callable(fn) or name.startswith("_") or name[0].isupper():
            known = [n for n in tvm.list_models(module=tvm)] if hasattr(tvm, "list_models") \
                else []
            raise ConfigError(f"unknown torchvision model {name!r}"
                              + (f"; known: {', '.join(sorted(known))}" if known else ""))
        kwargs = {"weights": None}
        if name.startswith("inception"):
            kwargs["aux_logits"] = False
            kwargs["init_weights"] = False
        if name == "googlenet":
            kwargs.update(aux_logits=False, init_weights=False)
        module = fn(**kwargs)
        size = 299 if name.startswith("inception") else 224
        return module, (3, size, size), name
    raise ConfigError(f"model {model!r}: use torchvision:NAME or zoo:NAME")
