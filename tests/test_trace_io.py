"""Trace files: round trip, and the graph checks name the place."""

from __future__ import annotations

import pytest
import yaml

from vdnnsim import run_trace
from vdnnsim.api import build_trace, resolve_gpu
from vdnnsim.errors import TraceError
from vdnnsim.trace import load_trace, save_trace, trace_from_dict, trace_to_dict

K40 = resolve_gpu("k40")


def test_synthesized_trace_round_trips(tmp_path):
    t = build_trace("googlenet", 4, K40)
    save_trace(t, tmp_path / "g.yaml")
    back = load_trace(tmp_path / "g.yaml")
    assert back == t
    a, b = run_trace(t, K40, "vdnn_dyn"), run_trace(back, K40, "vdnn_dyn")
    assert a.summary() == b.summary()


def _base():
    return {"format": "vdnnsim-trace", "version": 1, "name": "t", "batch_size": 1,
            "tensors": [{"id": "x", "size_bytes": "1 MiB", "kind": "input"},
                        {"id": "a", "size_bytes": 1024},
                        {"id": "r", "size_bytes": 1024, "alias_of": "a"}],
            "layers": [{"id": "a", "kind": "conv", "inputs": ["x"], "outputs": ["a"],
                        "saved": ["x"], "fwd_ns": 5, "bwd_ns": 10},
                       {"id": "r", "kind": "relu", "inputs": ["a"], "outputs": ["r"],
                        "saved": ["r"], "fwd_ns": 1, "bwd_ns": 1}]}


def test_sizes_accept_units_and_aliases_share_a_buffer():
    t = trace_from_dict(_base())
    assert t.tensors["x"].size_bytes == 2**20
    assert t.root("r") == "a"
    assert not t.tensors["x"].requires_grad and t.tensors["a"].requires_grad


def _mutate(fn):
    d = _base()
    fn(d)
    return d


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d["tensors"][1].update(size_bytes=-4), r"tensors\[1\]\.size_bytes"),
    (lambda d: d["tensors"][1].update(size_bytes="lots"), r"tensors\[1\]\.size_bytes"),
    (lambda d: d["tensors"].append({"id": "a", "size_bytes": 1}), "duplicate tensor id 'a'"),
    (lambda d: d["layers"][1].update(id="a"), "duplicate layer id 'a'"),
    (lambda d: d["layers"][0]["inputs"].append("ghost"),
     r"layers\[0\] \(a\)\.inputs\[1\]: unknown tensor 'ghost'"),
    (lambda d: d["layers"][0].update(speed=3), r"layers\[0\]\.speed: unknown key"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d["tensors"][2].update(size_bytes=512), "alias 'r' has 512 bytes"),
    (lambda d: d["layers"][1]["saved"].append("x"), "neither an input nor an output"),
    (lambda d: d["layers"][0].update(algos=[]), "at least one algorithm"),
])
def test_bad_traces_name_the_place(mutate, match):
    with pytest.raises(TraceError, match=match):
        trace_from_dict(_mutate(mutate), "t.yaml")


def test_cycle_is_named():
    d = _base()
    d["layers"][0]["inputs"] = ["r"]
    d["layers"][0]["saved"] = ["r"]
    with pytest.raises(TraceError, match=r"cycle: a -> r -> a"):
        trace_from_dict(d, "t.yaml")


def test_out_of_order_is_named():
    d = _base()
    d["layers"].reverse()
    with pytest.raises(TraceError, match=r"reads 'a' before .* writes it"):
        trace_from_dict(d, "t.yaml")


def test_written_yaml_is_readable_by_people(tmp_path):
    t = build_trace("alexnet", 2, K40)
    save_trace(t, tmp_path / "a.yaml")
    data = yaml.safe_load((tmp_path / "a.yaml").read_text())
    assert data["format"] == "vdnnsim-trace" and data["version"] == 1
    assert data["source"] == {"kind": "synthesized", "gpu": "k40", "cost_model": "analytic-v1"}
    conv1 = data["layers"][0]
    assert [a["name"] for a in conv1["algos"]][0] == "implicit_gemm"
    assert trace_to_dict(load_trace(tmp_path / "a.yaml")) == data


def test_a_settled_file_read_again_is_the_trace_it_gave(tmp_path, monkeypatch):
    """vdnnsim/trace/io.py: an unchanged trace file whose times are older than a clock's
    tick could hide a rewrite in is read once in a process; a file just written is read
    each time; a settled file changed (of the same length) is read again."""
    import os

    from vdnnsim.trace import io as trace_io

    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(_base()))
    assert load_trace(path) is not load_trace(path)  # just written: read each time
    monkeypatch.setattr(trace_io, "_SETTLED_NS", 0)  # (its change time cannot be set back)
    os.utime(path, ns=(10**18, 10**18))
    first = load_trace(path)
    assert load_trace(path) is first and load_trace(str(path)) is first
    d = _base()
    d["tensors"][1]["size_bytes"] = d["tensors"][2]["size_bytes"] = 2048  # the same length
    path.write_text(yaml.safe_dump(d))
    os.utime(path, ns=(10**18 + 1, 10**18 + 1))
    again = load_trace(path)
    assert again is not first and again.tensors["a"].size_bytes == 2048
