"""NOTE [cudnn benchmark]: cuDNN's autotuner in the first step."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest

from vdnnsim import run_trace
from vdnnsim.api import resolve_gpu
from vdnnsim.engine import autotune, memory
from vdnnsim.engine.autotune import autotuned
from vdnnsim.engine.caching import CachingPool
from vdnnsim.engine.compile import steady_state
from vdnnsim.engine.semantics import PYTORCH
from vdnnsim.trace import load_trace

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
    assert autotune.REPLAY is None  # NOTE [cudnn benchmark]: by the trace, as it says why
    assert steady_state(t, PYTORCH) == 0  # only the largest backward workspace: off


def _per_call(t):
    """``t`` with each layer's backward workspaces one by one (NOTE [backward workspaces])."""
    return replace(t, layers=tuple(replace(x, algos=tuple(
        replace(a, bwd_workspace_bytes=3 * M, bwd_workspaces=(2 * M, 3 * M))
        for a in x.algos)) for x in t.layers))


def test_a_trace_with_its_backward_workspaces_one_by_one_replays_the_tuning(monkeypatch):
    t = _per_call(_convs([_conv(3, 16, 32), _conv(16, 16, 32)]))
    assert autotune.replays_tuning(t) and steady_state(t, PYTORCH) == 1
    monkeypatch.setattr(autotune, "REPLAY", False)  # asked not to: one step
    assert not autotune.replays_tuning(t) and steady_state(t, PYTORCH) == 0


def test_vgg16_baseline_reserves_what_its_first_step_leaves_cached():
    """traces/h200_backward_workspaces's VGG-16 (64) against its timed peak reserved in fresh processes
    (traces/h200_fresh_processes, run 4: 11444158464 bytes, the same in all three): the first step's
    tuning (its empty_caches) and the cuBLAS workspaces made at its first matmuls
    (NOTE [cublas workspaces]) leave the cache the timed steps grow from."""
    root = Path(__file__).resolve().parents[1] / "traces"
    measured = next(r for r in map(json.loads, (root / "h200_fresh_processes" / "repeat.jsonl")
                                   .read_text().splitlines()) if r["run"] == 4)
    assert (measured["model"], measured["policy"]) == ("torchvision:vgg16", "baseline")
    t = load_trace(root / "h200_backward_workspaces" / "vgg16_b64.yaml")
    gpu = resolve_gpu("h200")
    r = run_trace(t, gpu, "eager", record=False)
    assert r.peak_footprint_bytes / measured["peak_reserved_bytes"] - 1 == \
        pytest.approx(0.006, abs=0.003)  # 10.72 GiB against 10.66
    with mock.patch.object(memory, "cublas_workspaces", lambda *a: None):  # before the step
        early = run_trace(t, gpu, "eager", record=False).peak_footprint_bytes
    assert early / measured["peak_reserved_bytes"] - 1 == pytest.approx(-0.136, abs=0.003)
    with mock.patch.object(autotune, "REPLAY", False):  # one step, no tuning
        one = run_trace(t, gpu, "eager", record=False).peak_footprint_bytes
    assert one / measured["reserved_one_step_bytes"] - 1 == pytest.approx(-0.003, abs=0.003)


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
