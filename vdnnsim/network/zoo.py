"""The paper's networks, from Facebook's convnet-benchmarks Torch7 definitions
(shared/reference/networks.md gives every row these builders produce).

NOTE [zoo fidelity]
The builders follow the benchmark files, not the original papers: single-column "One Weird
Trick" AlexNet, OverFeat fast at 231x231, GoogLeNet v1 without LRN and with the
post-2015-12-18 padding (stage 4 at 14x14), VGG-16 as model D of ``vgg_a.lua``. The
classifier nonlinearity is ``nn.Threshold`` (not in place); feature ReLUs are in place;
there is no dropout, softmax or loss layer. The first layer computes no input gradient.
``overfeat_accurate`` is the one builder from a paper rather than a benchmark file:
OverFeat's accurate model, which the vDNN paper's figures show, built with the same
conventions.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import UnknownNameError
from .spec import LayerDef, NetworkSpec

_SRC = "soumith/convnet-benchmarks torch7/imagenet_winners/"


def _L(**kw: Any) -> LayerDef:
    return LayerDef(**kw)


def _conv_relu(name: str, out: int, k: int, s: int = 1, p: int = 0,
               inputs: list[str] | None = None, relu: str | None = None) -> list[LayerDef]:
    return [_L(name=name, type="conv", out=out, kernel=k, stride=s, pad=p, inputs=inputs),
            _L(name=relu or f"relu_{name}", type="relu")]


def _classifier(widths: list[int]) -> list[LayerDef]:
    out: list[LayerDef] = [_L(name="view", type="flatten")]
    for i, w in enumerate(widths):
        n = 6 + i
        out.append(_L(name=f"fc{n}", type="fc", out=w))
        if i < len(widths) - 1:
            out.append(_L(name=f"thr{n}", type="threshold"))
    return out


def alexnet() -> NetworkSpec:
    layers = [*_conv_relu("conv1", 64, 11, 4, 2, relu="relu1"),
              _L(name="pool1", type="maxpool", kernel=3, stride=2),
              *_conv_relu("conv2", 192, 5, 1, 2, relu="relu2"),
              _L(name="pool2", type="maxpool", kernel=3, stride=2),
              *_conv_relu("conv3", 384, 3, 1, 1, relu="relu3"),
              *_conv_relu("conv4", 256, 3, 1, 1, relu="relu4"),
              *_conv_relu("conv5", 256, 3, 1, 1, relu="relu5"),
              _L(name="pool5", type="maxpool", kernel=3, stride=2),
              *_classifier([4096, 4096, 1000])]
    return NetworkSpec(name="alexnet", input=(3, 224, 224), batch_size=128, layers=layers,
                       source=_SRC + "alexnet.lua")


def overfeat() -> NetworkSpec:
    layers = [*_conv_relu("conv1", 96, 11, 4, 0, relu="relu1"),
              _L(name="pool1", type="maxpool", kernel=2, stride=2),
              *_conv_relu("conv2", 256, 5, 1, 0, relu="relu2"),
              _L(name="pool2", type="maxpool", kernel=2, stride=2),
              *_conv_relu("conv3", 512, 3, 1, 1, relu="relu3"),
              *_conv_relu("conv4", 1024, 3, 1, 1, relu="relu4"),
              *_conv_relu("conv5", 1024, 3, 1, 1, relu="relu5"),
              _L(name="pool5", type="maxpool", kernel=2, stride=2),
              *_classifier([3072, 4096, 1000])]
    return NetworkSpec(name="overfeat", input=(3, 231, 231), batch_size=128, layers=layers,
                       source=_SRC + "overfeat.lua")


def overfeat_accurate() -> NetworkSpec:
    """OverFeat's "accurate" model (Sermanet et al. 2013, Table 3) at its 221x221 training
    input: what the vDNN paper's figures show as "OverFeat" (NOTE [paper layers])."""
    layers = [*_conv_relu("conv1", 96, 7, 2, 0, relu="relu1"),
              _L(name="pool1", type="maxpool", kernel=3, stride=3),
              *_conv_relu("conv2", 256, 7, 1, 0, relu="relu2"),
              _L(name="pool2", type="maxpool", kernel=2, stride=2),
              *_conv_relu("conv3", 512, 3, 1, 1, relu="relu3"),
              *_conv_relu("conv4", 512, 3, 1, 1, relu="relu4"),
              *_conv_relu("conv5", 1024, 3, 1, 1, relu="relu5"),
              *_conv_relu("conv6", 1024, 3, 1, 1, relu="relu6"),
              _L(name="pool6", type="maxpool", kernel=3, stride=3),
              *_classifier([4096, 4096, 1000])]
    return NetworkSpec(name="overfeat_accurate", input=(3, 221, 221), batch_size=128,
                       layers=layers, source="Sermanet et al. 2013 (OverFeat), Table 3, "
                       "the accurate model; layer conventions as " + _SRC + "overfeat.lua")


_INCEPTION = {  # name: (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj)
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128), "5a": (256, 160, 320, 32, 128, 128),
    "5b": (384, 192, 384, 48, 128, 128),
}


def _inception(m: str, src: str) -> list[LayerDef]:
    c1, r3, c3, r5, c5, pp = _INCEPTION[m]
    return [*_conv_relu(f"{m}/1x1", c1, 1, inputs=[src], relu=f"{m}/relu_1x1"),
            *_conv_relu(f"{m}/3x3_reduce", r3, 1, inputs=[src], relu=f"{m}/relu_3x3_reduce"),
            *_conv_relu(f"{m}/3x3", c3, 3, 1, 1, relu=f"{m}/relu_3x3"),
            *_conv_relu(f"{m}/5x5_reduce", r5, 1, inputs=[src], relu=f"{m}/relu_5x5_reduce"),
            *_conv_relu(f"{m}/5x5", c5, 5, 1, 2, relu=f"{m}/relu_5x5"),
            _L(name=f"{m}/pool", type="maxpool", kernel=3, stride=1, pad=1, inputs=[src]),
            *_conv_relu(f"{m}/pool_proj", pp, 1, relu=f"{m}/relu_pool_proj"),
            _L(name=f"{m}/output", type="concat",
               inputs=[f"{m}/relu_1x1", f"{m}/relu_3x3", f"{m}/relu_5x5",
                       f"{m}/relu_pool_proj"])]


def googlenet() -> NetworkSpec:
    layers = [*_conv_relu("conv1/7x7_s2", 64, 7, 2, 3, relu="conv1/relu"),
              _L(name="pool1/3x3_s2", type="maxpool", kernel=3, stride=2, pad=1),
              *_conv_relu("conv2/3x3_reduce", 64, 1, relu="conv2/relu_reduce"),
              *_conv_relu("conv2/3x3", 192, 3, 1, 1, relu="conv2/relu"),
              _L(name="pool2/3x3_s2", type="maxpool", kernel=3, stride=2, pad=1)]
    src = "pool2/3x3_s2"
    for m in ("3a", "3b", "4a", "4b", "4c", "4d", "4e", "5a", "5b"):
        layers += _inception(m, src)
        src = f"{m}/output"
        if m in ("3b", "4e"):
            pool = f"pool{3 if m == '3b' else 4}/3x3_s2"
            layers.append(_L(name=pool, type="maxpool", kernel=3, stride=2, pad=1))
            src = pool
    layers += [_L(name="pool5/7x7_s1", type="avgpool", kernel=7, stride=1),
               _L(name="view", type="flatten"),
               _L(name="fc", type="fc", out=1000),
               _L(name="relu_out", type="relu")]
    return NetworkSpec(name="googlenet", input=(3, 224, 224), batch_size=128, layers=layers,
                       source=_SRC + "googlenet.lua (after 7abcd4c, 2015-12-18)")


_VGG_GROUPS = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))
_VGG_GROUPS_E = ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4))


def vgg_layers(groups: tuple[tuple[int, int], ...], extra: int = 0) -> list[LayerDef]:
    """A VGG of ``groups`` ((width, convs), ...), each group's 3x3 convs (``extra`` more
    each) then a 2x2 pool, and the classifier of 4096, 4096, 1000."""
    layers: list[LayerDef] = []
    for g, (width, n) in enumerate(groups, start=1):
        for j in range(1, n + extra + 1):
            layers += _conv_relu(f"conv{g}_{j}", width, 3, 1, 1, relu=f"relu{g}_{j}")
        layers.append(_L(name=f"pool{g}", type="maxpool", kernel=2, stride=2))
    return layers + _classifier([4096, 4096, 1000])


def vgg(depth: int = 16) -> NetworkSpec:
    """VGG-16 (model D), VGG-19 (model E: a fourth conv in groups 3 to 5; what the vDNN
    paper's figures show as its "VGG-16"), or the paper's very deep
    VGG-116/216/316/416: each 100 layers add twenty 3x3 convs of the group's width to each
    of the five groups of model D."""
    if depth != 19 and (depth < 16 or (depth - 16) % 100):
        raise ValueError(f"VGG depth must be 16, 19, 116, 216, ...; got {depth}")
    extra = (depth - 16) // 100 * 20 if depth != 19 else 0
    layers = vgg_layers(_VGG_GROUPS_E if depth == 19 else _VGG_GROUPS, extra)
    return NetworkSpec(name=f"vgg{depth}", input=(3, 224, 224),
                       batch_size=64 if depth in (16, 19) else 32, layers=layers,
                       source=_SRC + "vgg_a.lua, configuration " + ("E" if depth == 19 else "D") +
                       ("" if depth in (16, 19) else f", deepened to {depth} layers as in vDNN"))


ZOO: dict[str, Callable[[], NetworkSpec]] = {
    "alexnet": alexnet, "overfeat": overfeat, "overfeat_accurate": overfeat_accurate,
    "googlenet": googlenet, "vgg16": vgg,
    "vgg19": lambda: vgg(19),
    **{f"vgg{d}": (lambda d=d: vgg(d)) for d in (116, 216, 316, 416)},
}


def zoo_network(name: str) -> NetworkSpec:
    try:
        return ZOO[name]()
    except KeyError:
        raise UnknownNameError("network", name, list(ZOO)) from None
