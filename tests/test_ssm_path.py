"""A Mamba-style LM's trace names the path its mixers took (NOTE [ssm path])."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import HAS_HF

ROOT = Path(__file__).resolve().parents[1]
TINY = f"hf:{ROOT / 'tests' / 'hf' / 'mamba-tiny.yaml'}"
pytestmark = pytest.mark.skipif(not HAS_HF, reason="needs transformers")


def test_the_trace_names_the_pytorch_scan():
    from vdnnsim.api import resolve_gpu
    from vdnnsim.gpu.probe.aten import memory_trace
    d = memory_trace(TINY, 2, resolve_gpu("h100"), "bf16", 16)
    note = d["source"]["note"]
    assert "SSM: 2 MambaMixer layers by transformers' PyTorch path" in note
    assert "a loop, one step a position" in note and "fused kernels" in note
    # the loop: one step's ops per position and layer (16 x 2 exp of the discretised A)
    assert sum(x["kind"] == "mul" for x in d["layers"]) >= 2 * 16


def test_with_the_kernels_installed_the_note_says_the_trace_is_not_their_path(monkeypatch):
    from vdnnsim.gpu.model.workload import build_workload
    from vdnnsim.gpu.probe import ssm
    import torch
    with torch.device("meta"):
        w = build_workload(TINY, 16)
    monkeypatch.setattr(ssm, "installed", lambda name: name == "mamba_ssm")
    assert "mamba_ssm installed" in ssm.note(w.model)
    assert ssm.note(torch.nn.Linear(2, 2)) == ""
