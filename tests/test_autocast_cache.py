"""Autocast's cached casts of the weights (NOTE [autocast cache]) on a hand-made trace:
neither a checkpointed segment nor an offload frees them before the forward pass ends."""

from __future__ import annotations

from vdnnsim import run_trace
from vdnnsim.engine.compile import free_points, recompute_sets
from vdnnsim.engine.plan import liveness
from vdnnsim.trace import trace_from_dict

from .test_engine_hand import GPU, MS, U


def cast_trace(cast_kind: str = "_to_copy"):
    """data -> mm0 (reads w0, the cast of a weight) -> mm1 (reads w1) -> loss; each mm
    saves its input and its cast weight. ``cast_kind`` other than _to_copy: the same
    buffers made by ordinary ops (what the engine did with casts before the fix)."""
    tensors = [{"id": "data", "size_bytes": U, "kind": "input"}]
    layers = []
    prev = "data"
    for i in range(2):
        tensors += [{"id": f"w{i}", "size_bytes": U}, {"id": f"a{i}", "size_bytes": U}]
        layers.append({"id": f"cast{i}", "kind": cast_kind, "inputs": [], "outputs": [f"w{i}"],
                       "saved": [], "weight_bytes": 2 * U, "fwd_ns": MS, "bwd_ns": MS})
        layers.append({"id": f"mm{i}", "kind": "mm", "inputs": [prev, f"w{i}"],
                       "outputs": [f"a{i}"], "saved": [prev, f"w{i}"], "fwd_ns": MS,
                       "bwd_ns": MS})
        prev = f"a{i}"
    tensors.append({"id": "loss", "size_bytes": 0})
    layers.append({"id": "loss", "kind": "loss", "inputs": [prev], "outputs": ["loss"],
                   "saved": [prev], "fwd_ns": MS, "bwd_ns": MS})
    return trace_from_dict({"format": "vdnnsim-trace", "version": 1, "name": "casts",
                            "batch_size": 1, "source": {"framework": "torch7"},
                            "tensors": tensors, "layers": layers})


def test_liveness_names_the_casts_and_the_forward_end():
    lv = liveness(cast_trace())
    assert lv.casts == {"w0", "w1"} and lv.fwd_end == 4
    assert liveness(cast_trace("conv")).casts == frozenset()


def test_a_checkpointed_segment_keeps_its_casts_to_the_forward_end():
    """Segment cast0-mm0: it drops w0 (only mm0 keeps it). An ordinary buffer goes after
    its last forward reader (mm0, layer 1); autocast's cache holds a cast to the end of
    the forward pass (the loss, layer 4)."""
    for kind, at in (("_to_copy", 4), ("conv", 1)):
        t = cast_trace(kind)
        lv = liveness(t)
        fwd_free, bwd_free = free_points(lv, set())
        segs = recompute_sets(t, lv, ((0, 1),), set(), fwd_free, bwd_free)
        assert segs == {1: (0, frozenset({"w0"}))}
        assert [i for i, bs in fwd_free.items() if "w0" in bs] == [at]


def fwd_levels(r) -> list[int]:
    """Memory (U) at each change during the forward pass (before the loss's ends)."""
    end = next(o.end_ns for o in r.ops if o.name == "loss:fwd")
    return [lv // U for t, lv in zip(*r.memory_steps) if t < end]


def test_the_cast_counts_in_the_forward_of_a_checkpointed_run():
    """Memory (U) from the start (weights 4, data 1, what the run holds before its first
    op: 10) as each forward op starts, segment cast0-mm0 checkpointed: w0 11, a0 12, w1
    13 with the cast held, as eager holds it; 12 where w0 goes after mm0."""
    held = run_trace(cast_trace(), GPU, "checkpoint", {"segments": 2})
    plain = run_trace(cast_trace("conv"), GPU, "checkpoint", {"segments": 2})
    eager = run_trace(cast_trace(), GPU, "eager")
    assert fwd_levels(held) == fwd_levels(eager) == [10, 11, 12, 13]
    assert fwd_levels(plain) == [10, 11, 11, 12]


def test_no_offload_moves_a_cast():
    """vDNN's layer-wise offload copies each input a layer reads last and its backward
    keeps: mm0 data and w0, mm1 a0 and w1, the loss a1; a cast stays (its copy would
    free nothing: the cache holds it)."""
    assert run_trace(cast_trace(), GPU, "vdnn_all_p").offloaded_bytes == 3 * U
    assert run_trace(cast_trace("conv"), GPU, "vdnn_all_p").offloaded_bytes == 5 * U


def test_a_cast_nothing_keeps_lives_to_the_forward_end_and_only_casts_that_need_grads():
    """A cast read by an op that saves nothing (w2, into an add) is freed at the forward's
    end, not after its reader; a tied weight's cast (the probe gives its bytes to the
    weight's first reader, so none here) is a cast; a frozen weight's (no gradient) is
    not: autocast does not cache it."""
    tensors = [{"id": "data", "size_bytes": U, "kind": "input"},
               {"id": "w2", "size_bytes": U}, {"id": "w3", "size_bytes": U},
               {"id": "f", "size_bytes": U, "requires_grad": False},
               {"id": "s", "size_bytes": U}, {"id": "t", "size_bytes": U},
               {"id": "u", "size_bytes": U}]
    layers = [
        {"id": "cast2", "kind": "_to_copy", "inputs": [], "outputs": ["w2"], "saved": [],
         "weight_bytes": 2 * U},
        {"id": "add", "kind": "add", "inputs": ["data", "w2"], "outputs": ["s"],
         "saved": []},
        {"id": "cast3", "kind": "_to_copy", "inputs": [], "outputs": ["w3"], "saved": []},
        {"id": "castf", "kind": "_to_copy", "inputs": [], "outputs": ["f"], "saved": []},
        {"id": "mm", "kind": "mm", "inputs": ["s", "w3", "f"], "outputs": ["t"],
         "saved": ["s", "w3"]},
        {"id": "loss", "kind": "loss", "inputs": ["t"], "outputs": ["u"], "saved": ["t"]}]
    for layer in layers:
        layer.update(fwd_ns=MS, bwd_ns=MS)
    t = trace_from_dict({"format": "vdnnsim-trace", "version": 1, "name": "casts2",
                         "batch_size": 1, "source": {"framework": "pytorch"},
                         "tensors": tensors, "layers": layers})
    lv = liveness(t)
    assert lv.casts == {"w2", "w3"} and lv.fwd_end == 5
    fwd_free, _ = free_points(lv, set())
    assert [i for i, bs in fwd_free.items() if "w2" in bs] == [5]
    assert [i for i, bs in fwd_free.items() if "f" in bs] == [4]  # after its reader
