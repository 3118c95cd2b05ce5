"""The Chrome trace export parses strictly and is well formed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import pytest

import vdnnsim
from vdnnsim.report.chrome import chrome_trace


def _strict(text: str):
    def no_constants(c):
        raise ValueError(f"non-standard JSON constant {c}")
    return json.loads(text, parse_constant=no_constants)


def test_trace_is_strict_json_with_streams_memory_lifetimes_and_flows():
    runs = [vdnnsim.simulate("vgg16", 32, "k40", p) for p in ("vdnn_all_p", "vdnn_conv_m")]
    data = _strict(json.dumps(chrome_trace(runs), allow_nan=False))
    ev = data["traceEvents"]
    assert {e["ph"] for e in ev} >= {"M", "X", "C", "b", "e", "s", "f"}
    assert {e["pid"] for e in ev} == {1, 2}
    for e in ev:
        if e["ph"] in "XCbesf":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
    # timestamps in microseconds: the compute stream ends at the iteration time
    x = [e for e in ev if e["ph"] == "X" and e["pid"] == 1 and e["tid"] == 1]
    assert max(e["ts"] + e["dur"] for e in x) == pytest.approx(runs[0].iteration_time_ns / 1000)
    # slices on one thread never overlap
    by = defaultdict(list)
    for e in ev:
        if e["ph"] == "X":
            by[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:]))
    # every flow starts at an offload and ends at a later prefetch of the same buffer
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert starts and starts.keys() == ends.keys()
    assert all(ends[i]["ts"] >= starts[i]["ts"] for i in starts)
    # async lifetimes come in begin/end pairs
    b = {e["id"] for e in ev if e["ph"] == "b"}
    assert b == {e["id"] for e in ev if e["ph"] == "e"}


def test_run_writes_the_trace(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("network: alexnet\nbatch_size: 8\npolicies: [baseline_p, vdnn_dyn]\n")
    out = tmp_path / "t.json"
    r = subprocess.run([sys.executable, "-m", "vdnnsim", "run", str(cfg), "--chrome-trace",
                        str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert len({e["pid"] for e in _strict(out.read_text())["traceEvents"]}) == 2
