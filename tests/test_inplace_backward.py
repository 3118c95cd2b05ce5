"""The backward pass of an in-place op (NOTE [in-place gradients] in
vdnnsim/engine/compile.py), on a hand-made PyTorch trace checked on paper."""

from __future__ import annotations

from vdnnsim import run_trace
from vdnnsim.trace import trace_from_dict

from .test_engine_hand import GPU, MS, U


def conv_relu_conv(kind: str = "relu_"):
    """data -> c1 -> r1 (``kind``, in place on c1) -> c2, each op's output U; as the op
    probe writes it, c2 reads the ReLU's result under its root's name, c1."""
    def layer(lid, kind, inp, saved):
        return {"id": lid, "kind": kind, "inputs": [inp], "outputs": [lid], "saved": [saved],
                "weight_bytes": 0, "fwd_ns": MS, "bwd_ns": MS}
    return trace_from_dict({
        "format": "vdnnsim-trace", "version": 1, "name": "inplace", "batch_size": 1,
        "source": {"framework": "pytorch"},
        "tensors": [{"id": "data", "size_bytes": U, "kind": "input"},
                    {"id": "c1", "size_bytes": U}, {"id": "r1", "size_bytes": U,
                                                   "alias_of": "c1"},
                    {"id": "c2", "size_bytes": U}],
        "layers": [layer("c1", "conv", "data", "data"), layer("r1", kind, "c1", "c1"),
                   layer("c2", "conv", "c1", "c1")]})


def test_relu_backward_makes_its_input_gradient_anew():
    """ReluBackward0 is threshold_backward(grad, result): a new tensor, made while the
    gradient it was given (which c2's backward made under c1's name) lives on to its end.
    Memory (U) at each change: c1's forward 2 (data, c1), c2's 3; c2's backward 4 (c2
    freed at the forward's end, its gradient made then, c1's gradient made now); r1's
    backward 4 (c2's gradient freed, the new one made; 3 where the engine took the one it
    was given as its own); c1's 2, then 1. add_ passes its gradient through: 3 there."""
    r = run_trace(conv_relu_conv(), GPU, "eager")
    assert [lv // U for lv in r.memory_steps[1]] == [2, 3, 4, 4, 2, 1]
    assert [t // MS for t in r.memory_steps[0]] == [0, 2, 3, 4, 5, 6]
    add = run_trace(conv_relu_conv("add_"), GPU, "eager")
    assert [lv // U for lv in add.memory_steps[1]] == [2, 3, 4, 3, 2, 1]
