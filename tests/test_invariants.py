"""Invariants on every zoo network, and properties of random chains (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vdnnsim import run_trace
from vdnnsim.api import build_trace, resolve_gpu
from vdnnsim.network import ZOO
from vdnnsim.trace import trace_from_dict

from .conftest import chain_trace, hand_gpu

K40 = resolve_gpu("k40")
POLICIES = ["baseline_m", "baseline_p", "vdnn_all_m", "vdnn_all_p", "vdnn_conv_m",
            "vdnn_conv_p", "vdnn_dyn"]
BATCH = {"vgg116": 8, "vgg216": 8, "vgg316": 4, "vgg416": 4}


@pytest.fixture(scope="module", params=list(ZOO))
def zoo_runs(request):
    name = request.param
    trace = build_trace(name, BATCH.get(name), K40)
    return name, trace, {p: run_trace(trace, K40, p) for p in POLICIES}


def test_offloaded_bytes_equal_prefetched_bytes(zoo_runs):
    _, _, runs = zoo_runs
    for p, r in runs.items():
        assert r.offloaded_bytes == r.prefetched_bytes, p
        if p.startswith("vdnn_all") or p.startswith("vdnn_conv"):
            assert r.offloaded_bytes > 0, p


def _fit_facts_hold(r, label) -> None:
    """What 'fits' must mean, checked against numbers it is not defined from."""
    assert r.peak_footprint_bytes >= r.peak_memory_bytes, label
    if r.peak_memory_bytes > r.capacity_bytes:  # more live bytes than the card: cannot fit
        assert not r.fits, label
    if r.fits:
        assert r.peak_footprint_bytes <= r.capacity_bytes, label
    else:  # the recorded failure is a real one
        o = r.oom
        assert o.requested_bytes > o.largest_free_bytes, label
        assert o.fragmented == (o.free_bytes >= o.requested_bytes), label
        assert 0 <= o.time_ns <= r.iteration_time_ns, label


def test_pool_never_exceeds_capacity_unless_it_reports_oom(zoo_runs):
    _, _, runs = zoo_runs
    for p, r in runs.items():
        _fit_facts_hold(r, p)


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
    _fit_facts_hold(r, policy)
    assert r.iteration_time_ns >= r.oracle_time_ns
    assert r.stall_time_ns <= r.iteration_time_ns - r.oracle_time_ns
    assert r.iteration_time_ns == sum(a.time_ns for layer in t.layers
                                      for a in layer.algos) + r.stall_time_ns
    assert 0 <= r.avg_memory_bytes <= r.peak_memory_bytes


# -- properties on random DAGs (forks, joins, in-place layers), both semantics ---------------
@st.composite
def dags(draw):
    """A trace whose layers read earlier tensors: convs, fcs, pools, in-place ReLUs, and
    joins (concat, add) of two earlier tensors, so forks and joins appear."""
    n = draw(st.integers(1, 10))
    tensors = [{"id": "data", "size_bytes": draw(st.integers(1, 4)) * U, "kind": "input"}]
    size = {"data": tensors[0]["size_bytes"]}
    layers = []
    for i in range(n):
        kind = draw(st.sampled_from(["conv", "conv", "fc", "relu", "maxpool", "concat", "add"]))
        avail = [t["id"] for t in tensors]
        out = f"t{i}"
        if kind in ("concat", "add") and len(avail) >= 2:
            a, b = draw(st.lists(st.sampled_from(avail), min_size=2, max_size=2, unique=True))
            ins = [a, b]
            nbytes = size[a] + size[b] if kind == "concat" else max(size[a], size[b])
            saved: list[str] = []
        else:
            kind = "conv" if kind in ("concat", "add") else kind
            x = draw(st.sampled_from(avail))
            ins = [x]
            nbytes = draw(st.integers(0, 6)) * U // 2
            saved = {"conv": [x], "fc": [x], "relu": [out], "maxpool": [x, out]}[kind]
        t = {"id": out, "size_bytes": nbytes}
        if kind == "relu" and ins[0] != "data":
            t = {"id": out, "size_bytes": size[ins[0]], "alias_of": ins[0]}
        tensors.append(t)
        size[out] = t["size_bytes"]
        ws = draw(st.integers(0, 2)) * U
        fast = {"name": "fft", "fwd_ns": draw(st.integers(0, 3_000_000)),
                "bwd_ns": draw(st.integers(0, 6_000_000)), "fwd_workspace_bytes": ws,
                "bwd_workspace_bytes": ws}
        lean = {"name": "implicit_gemm", "fwd_ns": fast["fwd_ns"] * 2 + 1,
                "bwd_ns": fast["bwd_ns"] * 2 + 1}
        layer = {"id": f"l{i}", "kind": kind, "inputs": ins, "outputs": [out], "saved": saved,
                 "weight_bytes": draw(st.integers(0, 2)) * U // 4 if kind in ("conv", "fc")
                 else 0}
        if kind == "conv":
            layer["algos"] = [lean, fast]
        else:
            layer.update(fwd_ns=fast["fwd_ns"], bwd_ns=fast["bwd_ns"])
        layers.append(layer)
    framework = draw(st.sampled_from(["torch7", "pytorch"]))
    return trace_from_dict({"format": "vdnnsim-trace", "version": 1, "name": "dag",
                            "batch_size": 1, "source": {"framework": framework},
                            "tensors": tensors, "layers": layers})


ALL_POLICIES = ["eager", *POLICIES]


@settings(max_examples=300, deadline=None)
@given(t=dags(), policy=st.sampled_from(ALL_POLICIES), cap=st.integers(1, 60),
       bw=st.sampled_from([0.1, 1, 10]), duplex=st.booleans(), sync=st.booleans(),
       prefetch=st.booleans(), reading=st.sampled_from(["measured", "text"]))
def test_random_dags_keep_the_invariants(t, policy, cap, bw, duplex, sync, prefetch, reading):
    """The engine checks NOTE [invariants] itself on every run (a violation raises); on top,
    what the summary must say whatever the shape, semantics, policy and options."""
    gpu = hand_gpu(memory_bytes=cap * U, bw=bw * U * 1000, duplex=duplex)
    r = run_trace(t, gpu, policy, {"sync": sync, "prefetch": prefetch, "reading": reading})
    _fit_facts_hold(r, policy)
    assert r.peak_memory_bytes >= r.weight_bytes
    assert r.prefetched_bytes <= r.offloaded_bytes
    if sync:
        assert r.prefetched_bytes == r.offloaded_bytes
    if not r.offloaded_bytes:
        assert r.stall_time_ns == 0
    # the compute stream runs every layer once, with the algorithm the run reports, and
    # waits only in stalls (for a copy) or for the host (NOTE [host]: here, the caching
    # allocator's synchronisation under the cap): nothing else makes the iteration longer
    chosen = sum(next(a for a in layer.algos if a.name == name).time_ns
                 for layer, name in zip(t.layers, r.algos))
    assert r.iteration_time_ns == (chosen + t.step_ns + r.stall_time_ns
                                   + r.host_bound_time_ns)
    assert r.iteration_time_ns >= r.oracle_time_ns
    assert 0 <= r.avg_memory_bytes <= r.peak_memory_bytes
