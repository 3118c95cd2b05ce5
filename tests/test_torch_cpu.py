"""The PyTorch side on the CPU: the probe reads what autograd saves, the runtime loses
nothing, a CPU-timed profile is a trace the simulator replays. Skipped without torch."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from vdnnsim.api import resolve_gpu, run_trace  # noqa: E402
from vdnnsim.gpu.graph import probe  # noqa: E402
from vdnnsim.gpu.models import build_model  # noqa: E402
from vdnnsim.gpu.profile import profile_model, synthesize_model  # noqa: E402
from vdnnsim.gpu.runtime import VDNN  # noqa: E402
from vdnnsim.trace import trace_from_dict  # noqa: E402


def test_probe_sees_what_autograd_saves_on_the_meta_device():
    m, shape, _ = build_model("zoo:vgg16")
    p = probe(m, shape, 2, "meta", with_loss=False)
    by = {n.name: n for n in p.nodes}
    conv = by["layers_conv1_2"]
    assert [(s.tensor, s.role) for s in conv.saved] == [("layers_relu1_1", "input")]
    relu = by["layers_relu1_2"]  # in place: its output is conv1_2's buffer
    assert relu.alias_of == "layers_conv1_2"
    assert [(s.tensor, s.role) for s in relu.saved] == [("layers_relu1_2", "output")]
    pool = by["layers_pool1"]  # max pool keeps its input and its int64 indices
    roles = [s.role for s in pool.saved]
    assert roles == ["input", "extra"]
    assert pool.saved[1].nbytes == 2 * pool.out_nbytes  # int64 indices vs fp32 output
    assert by["layers_view"].alias_of == "layers_pool5"


@pytest.mark.parametrize("spec", ["zoo:alexnet", "zoo:googlenet"])
@pytest.mark.parametrize("policy", ["vdnn_all", "vdnn_conv"])
def test_runtime_gradients_are_identical_on_cpu(spec, policy):
    torch.manual_seed(0)
    m, shape, _ = build_model(spec)
    x, y = torch.randn(2, *shape), torch.randint(0, 1000, (2,))
    ref = copy.deepcopy(m)
    F.cross_entropy(ref(x), y).backward()
    mm = copy.deepcopy(m)
    rt = VDNN(mm, shape, policy)
    F.cross_entropy(rt(x), y).backward()
    rt.end_iteration()
    assert rt.stats["offloaded_bytes"] > 0
    assert rt.stats["offloaded_bytes"] == rt.stats["prefetched_bytes"] + \
        rt.stats["on_demand_bytes"]
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ref.parameters(), mm.parameters()))


def test_runtime_and_simulator_move_the_same_bytes():
    m, shape, _ = build_model("zoo:alexnet")
    rt = VDNN(copy.deepcopy(m), shape, "vdnn_all")
    F.cross_entropy(rt(torch.randn(4, *shape)), torch.zeros(4, dtype=torch.long)).backward()
    moved = rt.stats["offloaded_bytes"]
    rt.end_iteration()
    g = resolve_gpu("h200")
    t = trace_from_dict(synthesize_model("zoo:alexnet", 4, g), "alexnet")
    assert run_trace(t, g, "vdnn_all_p").offloaded_bytes == moved


def test_cpu_profile_is_a_trace_the_simulator_replays():
    data = profile_model("zoo:alexnet", 2, trials=1, device="cpu")
    t = trace_from_dict(data, "alexnet")
    assert t.source.kind == "profiled" and t.pytorch and t.step_ns > 0
    assert all(layer.algos[0].fwd_ns > 0 for layer in t.layers if layer.kind == "conv")
    g = resolve_gpu("h200")
    eager = run_trace(t, g, "eager")
    conv = run_trace(t, g, "vdnn_conv_p")
    assert conv.offloaded_bytes > 0 and conv.peak_memory_bytes <= eager.peak_memory_bytes
    assert eager.peak_footprint_bytes >= eager.peak_memory_bytes  # reserved >= allocated


def test_trace_model_cli_on_the_meta_device(tmp_path):
    out = tmp_path / "a.yaml"
    r = subprocess.run([sys.executable, "-m", "vdnnsim", "trace", "--model", "zoo:alexnet",
                        "-b", "8", "--gpu", "h200", "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"network: {out}\nbatch_size: 8\ngpu: h200\n"
                   "policies: [eager, vdnn_conv_p]\n")
    r = subprocess.run([sys.executable, "-m", "vdnnsim", "run", str(cfg), "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
