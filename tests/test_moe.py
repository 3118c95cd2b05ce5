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
