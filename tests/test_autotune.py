"""NOTE [cudnn benchmark]: cuDNN's autotuner in the first step."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import pytest

from vdnnsim import run_trace
from vdnnsim.engine import autotune
from vdnnsim.engine.autotune import autotuned
from vdnnsim.engine.caching import CachingPool
from vdnnsim.engine.compile import steady_state
from vdnnsim.engine.semantics import PYTORCH

from .conftest import chain_trace, hand_gpu

M = 2**20


def _conv(cin: int, cout: int, hw: int, groups: int = 1, stride: int = 1) -> dict:
    return {"op": "Conv2d", "out_shape": [8, cout, hw // stride, hw // stride],
            "kernel": [3, 3], "stride": [stride, stride], "padding": [1, 1],
            "groups": groups, "in_channels": cin, "out_channels": cout}


def _convs(attrs: list[dict], dtype: str = "fp32", **layer):
    """A PyTorch chain of convolutions with these attributes (14 MiB outputs)."""
    t = chain_trace([{"id": f"c{k}", "size": 14 * M, "fwd": 10**6, "bwd": 10**6,
                      "weight": M, **layer} for k in range(len(attrs))],
                    input_bytes=14 * M, framework="pytorch")
    shapes = {"data": (8, attrs[0]["in_channels"], 32, 32)}
    layers, tensors = [], dict(t.tensors)
    for x, a in zip(t.layers, attrs):
        layers.append(replace(x, attrs=a))
        tensors[x.outputs[0]] = replace(tensors[x.outputs[0]], shape=tuple(a["out_shape"]))
    tensors["data"] = replace(tensors["data"], shape=shapes["data"])
    return replace(t, layers=tuple(layers), tensors=tensors, dtype=dtype, step_ns=10**6)


@pytest.fixture
def tuned(monkeypatch):
    monkeypatch.setattr(autotune, "REPLAY", True)


def test_each_cudnn_configuration_is_tuned_once_and_fp32_depthwise_never(tuned):
    same = _conv(16, 16, 32)
    t = _convs([_conv(3, 16, 32), same, same, _conv(16, 16, 32, groups=16), same])
    assert autotuned(t) == ((True, True), (True, True), (False, False), (False, False),
                            (False, False))
    half = replace(t, dtype="fp16")  # ATen sends fp16 depthwise of 32+ channels to cuDNN
    assert autotuned(half)[3] == (False, False)  # (16 channels: its own kernel)
    assert steady_state(t, PYTORCH) == 1  # a warm-up step, in which the tuning happens
    plain = chain_trace([{"id": "c", "size": M}], framework="pytorch")
    assert autotuned(plain) == ((False, False),)  # a conv without its parameters: unknown
    assert steady_state(replace(plain, step_ns=1), PYTORCH) == 0


def test_replays_do_not_model_the_tuning_unless_asked():
    t = _convs([_conv(3, 16, 32), _conv(16, 16, 32)])
    assert not autotune.REPLAY  # NOTE [cudnn benchmark]: off, as it says why
    assert steady_state(t, PYTORCH) == 0


def test_the_first_step_empties_the_cache_at_each_tuned_pass_and_only_then(tuned):
    t = _convs([_conv(3, 16, 32), _conv(16, 16, 32), _conv(16, 16, 32)])
    calls = []
    real = CachingPool.empty_cache

    def spy(pool):
        calls.append(pool.reserved_bytes)
        real(pool)
    with mock.patch.object(CachingPool, "empty_cache", spy):
        r = run_trace(t, hand_gpu(), "eager")
    # two configurations, each tuned in its forward and its backward pass, in the warm-up
    # step only (the run reported is the next one)
    assert len(calls) == 4
    assert r.fits


def test_empty_cache_gives_back_the_free_segments_and_is_not_a_release_under_a_cap():
    p = CachingPool(None)
    p.alloc("a", 30 * M, "activations", 0)
    p.alloc("b", 30 * M, "activations", 0)
    p.free("a", 1)
    assert p.reserved_bytes == 60 * M
    p.empty_cache()
    assert p.reserved_bytes == 30 * M and "b" in p
    assert (p.released, p.released_bytes) == (0, 0)  # NOTE [allocator costs]
