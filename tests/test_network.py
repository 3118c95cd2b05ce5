"""The zoo against shared/reference/networks.md, and shape inference rules."""

from __future__ import annotations

import math

import pytest

from vdnnsim.errors import TraceError, UnknownNameError
from vdnnsim.network import infer, network_from_dict, zoo_network

# (rows, parameters) from the summary table of networks.md
REFERENCE = {"alexnet": (19, 61_100_840), "overfeat": (19, 145_920_872),
             "googlenet": (140, 6_998_552), "vgg16": (37, 138_357_544)}


@pytest.mark.parametrize("name", list(REFERENCE))
def test_zoo_matches_reference_rows_and_params(name):
    info = infer(zoo_network(name))
    rows, params = REFERENCE[name]
    assert len(info.layers) == rows
    assert info.params == params


@pytest.mark.parametrize("name,shapes", [
    ("alexnet", {"conv1": (64, 55, 55), "pool1": (64, 27, 27), "pool2": (192, 13, 13),
                 "pool5": (256, 6, 6), "view": (9216,)}),
    ("overfeat", {"conv1": (96, 56, 56), "conv2": (256, 24, 24), "pool5": (1024, 6, 6),
                  "view": (36864,)}),
    ("googlenet", {"conv1/7x7_s2": (64, 112, 112), "pool2/3x3_s2": (192, 28, 28),
                   "3a/output": (256, 28, 28), "4e/output": (832, 14, 14),
                   "5b/output": (1024, 7, 7), "view": (1024,)}),
    ("vgg16", {"conv1_2": (64, 224, 224), "pool4": (512, 14, 14), "view": (25088,)}),
])
def test_zoo_shapes(name, shapes):
    info = {layer.name: layer for layer in infer(zoo_network(name)).layers}
    for layer, shape in shapes.items():
        assert info[layer].out_shape == shape, layer


def test_deep_vggs_add_twenty_convs_per_group_per_hundred_layers():
    for depth in (116, 216, 316, 416):
        info = infer(zoo_network(f"vgg{depth}"))
        convs = [layer for layer in info.layers if layer.type == "conv"]
        fcs = [layer for layer in info.layers if layer.type == "fc"]
        assert len(convs) + len(fcs) == depth
        assert len(convs) == 13 + (depth - 16) // 100 * 20 * 5


def test_first_layer_computes_no_input_gradient():
    info = infer(zoo_network("vgg16"))
    assert not info.layers[0].needs_input_grad
    assert all(layer.needs_input_grad for layer in info.layers[1:])


def test_googlenet_forks_and_joins():
    info = {layer.name: layer for layer in infer(zoo_network("googlenet")).layers}
    branches = [n for n, layer in info.items() if layer.inputs == ("pool2/3x3_s2",)]
    assert branches == ["3a/1x1", "3a/3x3_reduce", "3a/5x5_reduce", "3a/pool"]
    assert info["3a/output"].inputs == ("3a/relu_1x1", "3a/relu_3x3", "3a/relu_5x5",
                                        "3a/relu_pool_proj")


def test_unknown_zoo_name_lists_the_known_ones():
    with pytest.raises(UnknownNameError, match="known: alexnet"):
        zoo_network("resnet9000")


def _net(layers, inp=(3, 8, 8)):
    return network_from_dict({"name": "t", "input": list(inp), "layers": layers})


def test_pool_ceil_mode_and_padding():
    info = infer(_net([{"name": "p", "type": "maxpool", "kernel": 3, "stride": 2,
                        "ceil_mode": True}], (3, 8, 8)))
    assert info.layers[0].out_shape == (3, 4, 4)  # ceil((8-3)/2)+1 = 4; floor gives 3
    info = infer(_net([{"name": "p", "type": "maxpool", "kernel": 3, "stride": 2}]))
    assert info.layers[0].out_shape == (3, 3, 3)


@pytest.mark.parametrize("layers,match", [
    ([{"name": "c", "type": "conv", "out": 4, "kernel": 11}], "smaller than kernel"),
    ([{"name": "c", "type": "conv", "out": 4, "kernel": 3, "inputs": ["nope"]}],
     "not the network input or an earlier layer"),
    ([{"name": "c", "type": "conv", "out": 4, "kernel": 3},
      {"name": "c", "type": "relu"}], "duplicate layer name"),
    ([{"name": "a", "type": "conv", "out": 4, "kernel": 3},
      {"name": "b", "type": "conv", "out": 4, "kernel": 1, "inputs": ["data"]},
      {"name": "j", "type": "add", "inputs": ["a", "b"]}], "add inputs differ"),
    ([{"name": "p", "type": "maxpool", "kernel": 2, "inplace": True}], "cannot run in place"),
])
def test_bad_specs_name_the_layer(layers, match):
    with pytest.raises(TraceError, match=match):
        infer(_net(layers))


def _feature_mib(name: str, batch: int) -> float:
    """Fig. 4's "feature maps": the input and every layer's output but the in-place ones."""
    info = infer(zoo_network(name))
    elems = sum(layer.out_elems for layer in info.layers
                if layer.type not in ("relu", "flatten"))
    return batch * 4 * (math.prod(info.input_shape) + elems) / 2**20


def test_vgg19_is_the_papers_vgg16():
    """NOTE [paper layers]: model E, sixteen convs in groups of 2, 2, 4, 4, 4; its feature
    maps at batch 256 are Fig. 4's 16155 MiB (read to +-20), model D's are not."""
    info = infer(zoo_network("vgg19"))
    convs = [layer.name for layer in info.layers if layer.type == "conv"]
    assert len(convs) == 16 and "conv3_4" in convs and "conv5_4" in convs
    assert info.params == 143_667_240
    assert abs(_feature_mib("vgg19", 256) - 16155) < 20
    assert abs(_feature_mib("vgg16", 256) - 16155) > 1000


def test_overfeat_accurate_is_the_papers_overfeat():
    """NOTE [paper layers]: Sermanet et al.'s Table 3 (221 -> 36 -> 15 -> 5 after layers
    1, 2 and 6; 144 M parameters), whose feature maps at batch 128 are Fig. 4's 1176 MiB
    (read to +-20); the fast model's of convnet-benchmarks are half that."""
    info = {layer.name: layer for layer in infer(zoo_network("overfeat_accurate")).layers}
    for layer, shape in {"conv1": (96, 108, 108), "pool1": (96, 36, 36),
                         "conv2": (256, 30, 30), "pool2": (256, 15, 15),
                         "conv6": (1024, 15, 15), "pool6": (1024, 5, 5),
                         "view": (25600,), "fc8": (1000,)}.items():
        assert info[layer].out_shape == shape, layer
    assert infer(zoo_network("overfeat_accurate")).params == 144_656_488
    assert abs(_feature_mib("overfeat_accurate", 128) - 1176) < 20
    assert abs(_feature_mib("overfeat", 128) - 1176) > 500
