"""The op path's CNN rules (issue 58, NOTE [op model]): fp32 2-D convolutions and batch
norms take the GPU's CNN kernel model where its preset has one, other dtypes and spec-rule
GPUs keep the op classes; an in-place op's later readers read its version (no gradient
sum); the Hopper presets hold the H200's cuBLAS workspaces."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from vdnnsim.costs import ops  # noqa: E402
from vdnnsim.costs.opforms import cnn_conv_params  # noqa: E402
from vdnnsim.gpu.probe.op_times import gradient_readers  # noqa: E402
from vdnnsim.gpu.probe.opfeatures import op_features  # noqa: E402
from vdnnsim.hardware import gpu_preset  # noqa: E402


def conv_features(bias: bool = False) -> dict:
    x = torch.empty(8, 64, 56, 56, device="meta")
    w = torch.empty(128, 64, 3, 3, device="meta")
    b = torch.empty(128, device="meta") if bias else None
    func = torch.ops.aten.convolution.default
    args = (x, w, b, [2, 2], [1, 1], [1, 1], False, [0, 0], 1)
    return op_features(func, args, {}, func(*args))


class Refused:
    def time_ns(self, *a, **k):
        raise AssertionError("the CNN kernel model was asked")


def test_an_fp32_convolution_takes_the_cnn_kernel_models_times_on_the_h200():
    om = ops.for_gpu(gpu_preset("h200"))
    assert om.cnn is not None
    f = conv_features()
    p = cnn_conv_params(f)
    assert p["h"] == 56 and p["sh"] == 2 and p["k_out"] == 128 and p["groups"] == 1
    assert om.time_ns(f, "fwd")[0] == pytest.approx(om.cnn.time_ns("conv", "fwd", p))
    both = om.cnn.time_ns("conv", "bwd_data", p) + om.cnn.time_ns("conv", "bwd_filter", p)
    assert om.time_ns(f, "bwd")[0] == pytest.approx(both)
    # an input that takes no gradient (the first convolution's image): no data gradient
    assert om.time_ns(dict(f, dgrad=False), "bwd")[0] == pytest.approx(
        om.cnn.time_ns("conv", "bwd_filter", p))
    # a bias adds its own pass
    fb = conv_features(bias=True)
    assert om.time_ns(fb, "fwd")[0] > om.time_ns(f, "fwd")[0]


def test_bf16_channels_last_and_spec_rule_gpus_keep_the_op_classes():
    om = dataclasses.replace(ops.for_gpu(gpu_preset("h200")), cnn=Refused())
    f = conv_features()
    with pytest.raises(AssertionError, match="kernel model was asked"):
        om.time_ns(f, "fwd")
    assert om.time_ns(dict(f, dt="bf16"), "fwd")[0] > 0
    assert om.time_ns(dict(f, cl=True), "fwd")[0] > 0
    assert ops.predict_for(gpu_preset("h100")).cnn is None


def test_the_carried_cnn_kernel_model_is_a_what_if_on_the_gpus_specs():
    """NOTE [op spec rule cnn]: cnn=True carries the H200's kernel model with the GPU's
    peaks, SM count and bandwidth (per-byte costs scaled); the default does not."""
    t4 = gpu_preset("t4")
    rule, what_if = ops.predict_for(t4), ops.predict_for(t4, cnn=True)
    assert rule.cnn is None and what_if.cnn is not None
    k = what_if.cnn
    assert k.sms == t4.sm_count and k.mem_bw == what_if.mem_bw != t4.mem_bw_bytes_per_s
    assert k.peaks["fp32"] == pytest.approx(what_if.peaks["fp32"])  # compute_scale in both
    f = conv_features()
    assert what_if.time_ns(f, "fwd")[0] == pytest.approx(
        k.time_ns("conv", "fwd", cnn_conv_params(f)))
    assert what_if.time_ns(f, "fwd")[0] != pytest.approx(rule.time_ns(f, "fwd")[0])
    # the H200's own model, carried to the H200's specs, times it as the H200 does
    h200 = ops.for_gpu(gpu_preset("h200"))
    same = ops.predict_for(dataclasses.replace(gpu_preset("h200"), op_calibration=""),
                           donor=gpu_preset("h200"), cnn=True)
    assert same.time_ns(f, "fwd")[0] == pytest.approx(h200.time_ns(f, "fwd")[0])


def node(name, inputs, kind="op", alias_of=None):
    return SimpleNamespace(name=name, inputs=inputs, kind=kind, alias_of=alias_of,
                           requires_grad=True)


def test_the_readers_after_an_in_place_relu_read_its_version():
    nodes = [node("conv", ["x"]), node("bn", ["conv"]),
             node("relu_", ["bn"], kind="relu_", alias_of="bn"),
             node("conv2", ["bn"]),  # reads the ReLU's version of bn's buffer
             node("add_", ["conv2", "bn"], kind="add_", alias_of="conv2"),
             node("conv3", ["conv2"])]  # reads add_'s version of conv2
    readers, grads = gradient_readers(nodes)
    assert readers["bn"] == 1  # relu_ alone: autograd sums nothing for bn's output
    assert readers["relu_"] == 2  # conv2 and add_: a residual, summed once
    assert readers["conv2"] == 1 and readers["add_"] == 1
    assert grads == {n.name for n in nodes}


@pytest.mark.parametrize("name", ["h100", "h100_pcie", "h100_nvl", "gh200"])
def test_the_hopper_presets_hold_the_h200s_cublas_workspaces(name):
    want = gpu_preset("h200").cublas_workspace_bytes
    assert want == 65 << 20
    assert gpu_preset(name).cublas_workspace_bytes == want
