"""NOTE [trace cache]: a trace read back from the cache is the trace made afresh; a change
of any argument, of the preset or of an hf: file misses; a broken file is made again."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torch")

from vdnnsim.api import resolve_gpu  # noqa: E402
from vdnnsim.gpu.probe.cache import ENV  # noqa: E402
from vdnnsim.trace import trace_from_dict  # noqa: E402

OPT = Path(__file__).resolve().parent / "hf" / "opt-tiny.yaml"


def _trace(folder, monkeypatch, maker, *args):
    if folder is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, str(folder))
    return maker(*args)


@pytest.mark.parametrize("which", ["memory_trace", "synthesize_model"])
def test_a_hit_is_the_trace_made_afresh(which, tmp_path, monkeypatch):
    if which == "memory_trace":
        pytest.importorskip("transformers")
        from vdnnsim.gpu.probe.aten import memory_trace as maker
        args = (f"hf:{OPT}", 2, resolve_gpu("h200"), "autocast-bf16", 32, {}, None)
    else:
        pytest.importorskip("torchvision")
        from vdnnsim.gpu.profile.synthesize import synthesize_model as maker
        args = ("zoo:alexnet", 2, resolve_gpu("h200"))
    fresh = _trace(None, monkeypatch, maker, *args)
    miss = _trace(tmp_path, monkeypatch, maker, *args)
    assert len(list(tmp_path.glob("*.json"))) == 1  # (and its .lock)
    hit = _trace(tmp_path, monkeypatch, maker, *args)
    assert miss == hit
    a, b = trace_from_dict(fresh, "m"), trace_from_dict(hit, "m")
    assert a == b and a.tensors == b.tensors and a.layers == b.layers
    assert [x.attrs for x in a.layers] == [x.attrs for x in b.layers]  # (compare=False)


def test_what_changes_misses_and_a_broken_file_is_made_again(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from vdnnsim.gpu.probe.aten import memory_trace

    monkeypatch.setenv(ENV, str(tmp_path / "c"))
    h200 = resolve_gpu("h200")
    model = tmp_path / "opt.yaml"
    shutil.copy(OPT, model)
    base = memory_trace(f"hf:{model}", 2, h200, "fp32", 32, {}, None)
    memory_trace(f"hf:{model}", 4, h200, "fp32", 32, {}, None)  # another batch
    memory_trace(f"hf:{model}", 2, replace(h200, memory_bytes=h200.memory_bytes // 2),
                 "fp32", 32, {}, None)  # another preset
    model.write_text(model.read_text() + "\n# the same model, another text\n")
    memory_trace(f"hf:{model}", 2, h200, "fp32", 32, {}, None)
    files = sorted((tmp_path / "c").glob("*.json"))
    assert len(files) == 4
    for f in files:
        f.write_text("{not json")
    model.write_text(OPT.read_text())
    assert memory_trace(f"hf:{model}", 2, h200, "fp32", 32, {}, None) == base
    assert not list((tmp_path / "c").glob("*.part"))
