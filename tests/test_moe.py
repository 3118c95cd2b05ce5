"""MoE layers on the meta device (NOTE [moe routing]): the experts' path CUDA takes for the
run's dtype, and the balanced routing the probe assumes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from .conftest import HAS_HF

ROOT = Path(__file__).resolve().parents[1]
TINY = f"hf:{ROOT / 'tests' / 'hf' / 'mixtral-tiny.yaml'}"
pytestmark = pytest.mark.skipif(not HAS_HF, reason="needs transformers")


def _probe(precision: str, impl: str | None = None):
    from vdnnsim.gpu.probe.aten import probe_workload
    args = {"experts_implementation": impl} if impl else None
    return probe_workload(TINY, 2, precision, 8, args)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "autocast-bf16"])
def test_a_moe_lm_traces_in_every_dtype_by_the_grouped_path(precision):
    """fp32 and autocast were refused ("Expected mat_a to be BFloat16"): CUDA runs them by
    its per-expert fallback, bf16 by the grouped kernel; the output is the same either way:
    the tokens' 2 choices of 16 tokens, each 2 x 128 wide (gate and up)."""
    _, p = _probe(precision)
    grouped = [n for n in p.nodes if n.kind == "_grouped_mm"]
    assert [n.out_shape for n in grouped] == [(32, 256), (32, 64)]
    low = precision == "bf16"
    assert all(n.attrs["_dtype"] == (torch.bfloat16 if low else torch.float32) for n in grouped)
    f = grouped[0].attrs["_f"]
    assert (f["b"], f["m"], f["n"], f["k"]) == (4, 8, 256, 64)  # 32 rows over 4 experts
    assert f.get("loop", False) is not low


@pytest.mark.parametrize("impl", ["eager", "batched_mm"])
def test_the_other_experts_paths_follow_the_balanced_routing(impl):
    """The eager loop reads which experts were hit and their tokens (values the router's
    activations would give): under the balanced routing every expert gets 16 x 2 / 4 = 8
    rows."""
    _, p = _probe("fp32", impl)
    experts = [n for n in p.nodes if n.attrs["module"].endswith("mlp.experts")]
    if impl == "eager":
        gemms = [n for n in experts if n.kind == "mm"]
        assert len(gemms) == 8 and all(n.out_shape[0] == 8 for n in gemms)  # 4 experts x 2
    else:
        assert any(n.kind == "bmm" and n.out_shape[0] == 32 for n in experts)


def test_the_balanced_routing():
    from vdnnsim.gpu.probe.moe import balanced
    idx = balanced(10, 2, 4, torch.int64)
    assert torch.bincount(idx.flatten(), minlength=4).tolist() == [5, 5, 5, 5]
    assert all(len(set(row.tolist())) == 2 for row in idx)  # k distinct experts a token


def test_cudas_output_of_a_grouped_gemm_is_the_meta_kernels_where_it_has_one():
    """The fp32 output the probe makes has the layout ATen's bf16 kernel makes (its last
    dimension padded to 16 bytes)."""
    from vdnnsim.gpu.probe.moe import grouped_mm_out
    a = torch.empty(30, 64, device="meta", dtype=torch.bfloat16)
    b = torch.empty(4, 100, 64, device="meta", dtype=torch.bfloat16).transpose(-2, -1)
    offs = torch.empty(4, device="meta", dtype=torch.int32)
    want = torch._grouped_mm(a, b, offs)
    got = grouped_mm_out(a, b, offs)
    assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)
    assert got.stride() == (104, 1)  # 100 bf16 padded to 104, as the kernel's own
    got = grouped_mm_out(a.float(), b.float(), offs)
    assert got.shape == (30, 100) and got.stride() == (100, 1) and got.dtype == torch.float32


def test_the_trace_names_the_path_and_the_routing():
    from vdnnsim.api import resolve_gpu
    from vdnnsim.gpu.probe.aten import memory_trace
    for precision, path in (("bf16", "one grouped GEMM kernel"),
                            ("autocast-bf16", "per-expert fallback")):
        note = memory_trace(TINY, 2, resolve_gpu("h100"), precision, 8)["source"]["note"]
        assert path in note and "routing assumed balanced" in note


def test_the_fallback_is_timed_as_one_gemm_per_expert():
    from vdnnsim.api import resolve_gpu
    from vdnnsim.gpu.probe.aten import op_model_for
    om = op_model_for(resolve_gpu("h100"))
    f = {"op": "_grouped_mm", "dt": "fp32", "bytes": 0, "b": 8, "m": 512, "n": 1024,
         "k": 1024, "loop": True}
    one = om.time_ns({"op": "mm", "dt": "fp32", "bytes": 0, "b": 1, "m": 512, "n": 1024,
                      "k": 1024}, "fwd")[0]
    assert om.time_ns(f, "fwd")[0] == pytest.approx(8 * one)
    g = dict(f, dt="bf16", loop=False)
    assert om.time_ns(g, "fwd")[0] == pytest.approx(om.time_ns(dict(g, op="bmm"), "fwd")[0])


# -- NOTE [moe load]: a routing other than the balanced one ---------------------------------
@pytest.mark.parametrize("routing", ["zipf:1", "hot:3", "loads:0,1,2,5", "balanced"])
def test_a_given_load_sets_each_experts_rows(routing):
    """The eager loop's GEMMs (gate-up and down per expert hit, each layer) take each
    expert's count of the 16 tokens' 2 choices; an expert with none is not run."""
    from vdnnsim.gpu.probe.aten import probe_workload
    from vdnnsim.gpu.probe.moe import expert_counts
    counts = expert_counts(routing, 16, 2, 4)
    assert sum(counts) == 32 and max(counts) <= 16
    _, p = probe_workload(TINY, 2, "fp32", 8, {"experts_implementation": "eager",
                                                "routing": routing})
    rows = [n.out_shape[0] for n in p.nodes
            if n.attrs["module"].endswith("mlp.experts") and n.kind == "mm"]
    per_layer = [c for c in counts if c for _ in range(2)]  # gate-up, then down
    assert sorted(rows) == sorted(per_layer * (len(rows) // len(per_layer)))


def test_the_loads_are_shares_of_the_choices_each_at_most_every_token():
    from vdnnsim.gpu.probe.moe import expert_counts, routed
    assert expert_counts("zipf:1", 100, 2, 8) == [74, 37, 25, 18, 15, 12, 10, 9]
    assert expert_counts("hot:3", 100, 2, 8)[0] == 75  # 3 x 200 / 8
    assert expert_counts("hot:40", 100, 2, 8)[0] == 100  # a token picks an expert once
    # 5 and 15 asked; 15 is over the 10 tokens, so its excess goes by the weights left
    assert expert_counts("loads:1,0,0,3", 10, 2, 4) == [10, 0, 0, 10]
    idx = routed("zipf:1.5", 50, 3, 6, torch.int64)
    assert all(len(set(row.tolist())) == 3 for row in idx)  # k distinct experts a token
    assert torch.bincount(idx.flatten(), minlength=6).tolist() == expert_counts(
        "zipf:1.5", 50, 3, 6)


@pytest.mark.parametrize("argv,frag", [
    (["--routing", "zipf:x"], "--routing 'zipf:x': one of balanced, zipf:S"),
    (["--routing", "hot:0.5"], "one of balanced"),
    (["--routing", "loads:1,2"], "2 weights for 4 experts"),
    (["--routing", "zipf:1", "--model-arg", "routing=balanced"], "not both"),
])
def test_a_bad_routing_is_one_line(argv, frag):
    from .conftest import run_cli
    r = run_cli(["trace", "--model", TINY, "-b", "2", "--seq-len", "8", "--gpu", "h200",
                 "-o", "-", *argv])
    assert r.returncode == 2 and frag in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len([x for x in r.stderr.splitlines() if x.startswith("vdnnsim:")]) == 1


def test_routing_is_named_in_the_note_and_refused_without_experts(tmp_path):
    from .conftest import run_cli
    out = tmp_path / "t.yaml"
    r = run_cli(["trace", "--model", TINY, "-b", "2", "--seq-len", "8", "--gpu", "h200",
                 "--dtype", "bf16", "--routing", "zipf:1.20", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    from vdnnsim.trace import load_trace
    assert "routing assumed zipf:1.2 (--routing" in load_trace(out).source.note
    gpt = f"hf:{ROOT / 'tests' / 'hf' / 'roberta-tiny.yaml'}"
    r = run_cli(["trace", "--model", gpt, "-b", "2", "--seq-len", "8", "--gpu", "h200",
                 "--routing", "hot:2", "-o", "-"])
    assert r.returncode == 2 and "goes with mixture-of-experts models" in r.stderr
