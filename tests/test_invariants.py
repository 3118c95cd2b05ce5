"""Invariants on every zoo network, and properties of random chains (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vdnnsim import run_trace
from vdnnsim.api import build_trace, oracle_time_ns, resolve_gpu
from vdnnsim.network import ZOO

from .conftest import chain_trace, hand_gpu

K40 = resolve_gpu("k40")
POLICIES = ["baseline_m", "baseline_p", "vdnn_all_m", "vdnn_all_p", "vdnn_conv_m",
            "vdnn_conv_p", "vdnn_dyn"]
BATCH = {"vgg116": 8, "vgg216": 8, "vgg316": 4, "vgg416": 4}


@pytest.fixture(scope="module", params=list(ZOO))
def zoo_runs(request):
    name = request.param
    trace = build_trace(name, BATCH.get(name), K40)
    oracle = oracle_time_ns(trace, K40)
    return name, trace, {p: run_trace(trace, K40, p, oracle_ns=oracle) for p in POLICIES}


def test_offloaded_bytes_equal_prefetched_bytes(zoo_runs):
    _, _, runs = zoo_runs
    for p, r in runs.items():
        assert r.offloaded_bytes == r.prefetched_bytes, p
        if p.startswith("vdnn_all") or p.startswith("vdnn_conv"):
            assert r.offloaded_bytes > 0, p


def test_pool_never_exceeds_capacity_unless_it_reports_oom(zoo_runs):
    _, _, runs = zoo_runs
    for p, r in runs.items():
        assert r.peak_footprint_bytes >= r.peak_memory_bytes, p
        if r.fits:
            assert r.peak_footprint_bytes <= r.capacity_bytes, p
        else:
            assert r.oom is not None, p


def test_oracle_slowdown_is_exactly_one(zoo_runs):
    _, trace, runs = zoo_runs
    assert runs["baseline_p"].slowdown == 1.0
    unlimited = run_trace(trace, K40, "baseline_p", memory_bytes=10**15)
    assert unlimited.fits and unlimited.slowdown == 1.0


def test_vdnn_all_m_never_needs_more_than_vdnn_conv_m(zoo_runs):
    _, _, runs = zoo_runs
    assert runs["vdnn_all_m"].peak_memory_bytes <= runs["vdnn_conv_m"].peak_memory_bytes
    assert runs["vdnn_all_m"].avg_memory_bytes <= runs["vdnn_conv_m"].avg_memory_bytes


def test_no_policy_is_faster_than_the_oracle(zoo_runs):
    _, _, runs = zoo_runs
    for p, r in runs.items():
        assert r.slowdown >= 1.0, p


def test_layer_wise_memory_is_below_network_wide(zoo_runs):
    _, _, runs = zoo_runs
    assert runs["vdnn_all_p"].avg_memory_bytes < runs["baseline_p"].avg_memory_bytes
    assert runs["vdnn_all_m"].peak_memory_bytes < runs["baseline_m"].peak_memory_bytes


def test_deterministic_bit_for_bit():
    t = build_trace("googlenet", 16, K40)
    a = run_trace(t, K40, "vdnn_dyn").summary()
    b = run_trace(build_trace("googlenet", 16, K40), K40, "vdnn_dyn").summary()
    assert a == b


# -- properties on random chains ----------------------------------------------------------
U = 2**20
layer_st = st.fixed_dictionaries({
    "kind": st.sampled_from(["conv", "conv", "relu", "maxpool", "fc"]),
    "size": st.integers(1, 8).map(lambda k: k * U),
    "fwd": st.integers(0, 5_000_000),
    "bwd": st.integers(0, 10_000_000),
})


def _chain(specs):
    layers = []
    for i, d in enumerate(specs):
        d = dict(d, id=f"l{i}")
        if d["kind"] == "relu":
            d.update(inplace=True, saves="y")
        elif d["kind"] == "maxpool":
            d["saves"] = "xy"
        layers.append(d)
    return chain_trace(layers, input_bytes=U)


@settings(max_examples=60, deadline=None)
@given(specs=st.lists(layer_st, min_size=1, max_size=8),
       policy=st.sampled_from(POLICIES), cap=st.integers(2, 40), bw=st.sampled_from([0.1, 1, 10]))
def test_random_chains_keep_the_invariants(specs, policy, cap, bw):
    t = _chain(specs)
    gpu = hand_gpu(memory_bytes=cap * U, bw=bw * U * 1000)
    r = run_trace(t, gpu, policy)
    assert r.offloaded_bytes == r.prefetched_bytes
    assert r.fits == (r.oom is None)
    if r.fits:
        assert r.peak_footprint_bytes <= cap * U
    assert r.iteration_time_ns >= r.oracle_time_ns
    assert r.stall_time_ns <= r.iteration_time_ns - r.oracle_time_ns
    assert r.iteration_time_ns == sum(a.time_ns for layer in t.layers
                                      for a in layer.algos) + r.stall_time_ns
    assert 0 <= r.avg_memory_bytes <= r.peak_memory_bytes
