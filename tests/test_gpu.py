"""On a CUDA GPU only: the vDNN runtime loses nothing and saves memory. Skipped cleanly
without a GPU (CI has none; the committed measurements are what CPU tests check)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

import torch.nn.functional as F  # noqa: E402

from vdnnsim.gpu.model.build import build_model  # noqa: E402
from vdnnsim.gpu.runtime.vdnn import VDNN  # noqa: E402


def _grads(model, shape, policy, x, y):
    m = copy.deepcopy(model).cuda()
    net = VDNN(m, shape, policy) if policy != "baseline" else m
    torch.manual_seed(1)  # the same dropout masks in every run
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    if isinstance(net, VDNN):
        net.end_iteration()
    torch.cuda.synchronize()
    return [p.grad.detach().clone() for p in m.parameters()], net


@pytest.mark.parametrize("spec", ["zoo:alexnet", "torchvision:resnet18"])
@pytest.mark.parametrize("policy", ["vdnn_all", "vdnn_conv"])
def test_gradients_are_bit_identical(spec, policy):
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    model, shape, _ = build_model(spec)
    x = torch.randn(8, *shape, device="cuda")
    y = torch.randint(0, 1000, (8,), device="cuda")
    base, _ = _grads(model, shape, "baseline", x, y)
    got, net = _grads(model, shape, policy, x, y)
    assert net.stats["offloaded_bytes"] > 0
    assert net.stats["offloaded_bytes"] == net.stats["prefetched_bytes"] + \
        net.stats["on_demand_bytes"]
    assert all(torch.equal(a, b) for a, b in zip(base, got))


def test_offload_lowers_peak_memory():
    from vdnnsim.gpu.measure.harness import measure
    base = measure("zoo:vgg16", 32, "baseline", warmup=1, iters=2)
    conv = measure("zoo:vgg16", 32, "vdnn_conv", warmup=1, iters=2)
    every = measure("zoo:vgg16", 32, "vdnn_all", warmup=1, iters=2)
    assert every["offloaded_bytes"] > conv["offloaded_bytes"] > 0
    assert conv["peak_allocated_bytes"] < base["peak_allocated_bytes"]
    # VGG's peak is in backward, at conv1_2, where vdnn_all and vdnn_conv hold the same
    # buffers; the allocator's rounding differs by about a megabyte between them (H200 runs)
    assert every["peak_allocated_bytes"] <= conv["peak_allocated_bytes"] * 1.01


def test_the_profiler_counts_each_layers_commands_and_the_queue_blocks():
    """NOTE [kernel counts] on the GPU: every convolution launches at least one kernel
    each way; a view none forward; a busy stream's launch queue fills and blocks."""
    from vdnnsim.gpu.profile.kernels import launch_queue_depth
    from vdnnsim.gpu.profile.layers import profile_model
    d = profile_model("torchvision:resnet18", 4, trials=1)
    by = {layer["id"]: layer for layer in d["layers"]}
    convs = [x for x in d["layers"] if x["kind"] == "conv"]
    assert convs and all(x["kernels_fwd"] >= 1 and x["kernels_bwd"] >= 1 for x in convs)
    assert by["flatten"]["kernels_fwd"] == 0
    # NOTE [host probe]: both probes of the profiling host, before the model and after steps
    assert d["source"]["host_probe_ns"] > 0 and d["source"]["host_probe_between_ns"] > 0
    q = launch_queue_depth(launches=4096, trials=1)
    assert 100 < q["same_stream"][0] < 4096 and q["other_stream"] == [None]


def test_measure_probes_the_host_after_each_timed_step_and_keeps_the_cache():
    """NOTE [host probe]: one probe per timed step, their median, each step's host time;
    the probe's tensor is made after the warm-up, so no cache is emptied between steps."""
    from vdnnsim.gpu.measure.harness import measure
    r = measure("torchvision:resnet18", 8, iters=3, warmup=2)
    assert len(r["host_probe_steps_ns"]) == 3 and len(r["host_issue_ms_all"]) == 3
    assert r["host_probe_between_ns"] == sorted(r["host_probe_steps_ns"])[1] > 0
    assert r["allocator"]["num_device_free"] == 0


def test_measure_without_the_step_probe_says_so():
    from vdnnsim.gpu.measure.harness import measure
    r = measure("torchvision:resnet18", 8, iters=2, warmup=1, step_probe=False)
    assert r["step_probe"] is False and "host_probe_steps_ns" not in r


def test_measure_out_of_memory_hands_over_the_segments_there():
    """A run out of memory under its cap, with a history asked for: the snapshot taken
    where it ran out (its segments, none over the cap), and the error's whole first line
    (what was reserved but not allocated is at its end)."""
    from vdnnsim.gpu.measure.harness import measure
    got = []
    cap = 256 << 20
    r = measure("torchvision:resnet50", 64, iters=2, warmup=1, memory_cap_bytes=cap,
                history=got.append)
    assert r["fits"] is False and r["memory_history"]["at"] == "out of memory"
    assert len(got) == 1 and got[0]["segments"]
    assert sum(s["total_size"] for s in got[0]["segments"]) <= cap
    assert "out of memory" in r["error"] and len(r["error"]) > 200
