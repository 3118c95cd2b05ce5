"""The analytic cost model: algorithm options behave as their class should."""

from __future__ import annotations

from vdnnsim.api import build_trace, resolve_gpu
from vdnnsim.units import GiB

K40, H200 = resolve_gpu("k40"), resolve_gpu("h200")


def _convs(trace):
    return [layer for layer in trace.layers if layer.kind == "conv"]


def test_every_conv_has_a_memory_optimal_implicit_gemm():
    for layer in _convs(build_trace("googlenet", 32, K40)):
        assert layer.algos[0].name == "implicit_gemm" and layer.algos[0].workspace_bytes == 0
        lean = layer.algos[layer.leanest_algo()]
        assert lean.workspace_bytes == 0  # a 1x1 conv's explicit GEMM needs none either
        fast = layer.algos[layer.fastest_algo()]
        assert fast.time_ns <= lean.time_ns


def test_fft_only_for_stride_one_and_winograd_only_where_the_gpu_has_it():
    for layer in _convs(build_trace("alexnet", 32, K40)):
        names = {a.name for a in layer.algos}
        assert "winograd" not in names  # cuDNN 4 had none
        if layer.id == "conv1":  # 11x11 stride 4
            assert not names & {"fft", "fft_tiling"}
    h200 = {layer.id: {a.name for a in layer.algos}
            for layer in _convs(build_trace("vgg16", 8, H200))}
    assert all("winograd" in names for names in h200.values())


def test_times_scale_with_batch_and_first_conv_skips_backward_data():
    small, big = build_trace("vgg16", 32, K40), build_trace("vgg16", 64, K40)
    for a, b in zip(_convs(small)[1:], _convs(big)[1:]):
        ia, ib = a.algos[0], b.algos[0]
        assert 1.8 < ib.fwd_ns / ia.fwd_ns < 2.1
        assert ia.bwd_ns == 2 * ia.fwd_ns  # backward data + backward filter
    first = _convs(small)[0].algos[0]
    assert first.bwd_ns == first.fwd_ns  # backward filter only


def test_vgg16_256_baseline_needs_about_28_gb():
    trace = build_trace("vgg16", 256, K40)
    acts = sum(t.size_bytes for t in trace.tensors.values() if t.alias_of is None)
    assert 15.5e9 < acts < 15.7e9  # 60.8 MB of feature maps per image
    ws = max(layer.algos[layer.fastest_algo()].workspace_bytes for layer in trace.layers)
    assert 2 * GiB < ws < 8 * GiB


def test_a_newer_gpu_is_faster():
    k40 = build_trace("vgg16", 64, K40)
    h200 = build_trace("vgg16", 64, H200)
    t = lambda tr: sum(layer.algos[layer.fastest_algo()].time_ns for layer in tr.layers)
    assert t(h200) * 10 < t(k40)
