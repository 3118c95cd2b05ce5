"""Convolution workspaces for op traces (NOTE [conv workspaces])."""

from __future__ import annotations

import dataclasses

import pytest

from vdnnsim.api import plan_config, resolve_gpu, run_trace
from vdnnsim.costs import workspaces as ws
from vdnnsim.trace import trace_from_dict
from vdnnsim.trace.optimizer import with_optimizer


def _f(**k):
    return {"op": "convolution", "dt": "fp32", "b": 1, "n": 64, "c": 64, "kh": 3, "kw": 3,
            "stride": 1, "bytes": 1000} | k


@pytest.mark.parametrize("feat,pass_,cls", [
    (_f(), "fwd", "kxk.fwd.fp32"),
    (_f(kh=1, kw=1), "bwd", "1x1.bwd.fp32"),
    (_f(stride=2), "fwd", "strided.fwd.fp32"),
    (_f(b=4, n=16), "fwd", "grouped.fwd.fp32"),
    (_f(b=64, n=1, c=64), "bwd", "dw.bwd.fp32"),
    (_f(nd=3, kd=3), "fwd", "kxk_3d.fwd.fp32"),
    (_f(cl=True, dt="bf16"), "bwd", "kxk_cl.bwd.half"),
])
def test_a_convolution_falls_in_its_class(feat, pass_, cls):
    assert ws.conv_class(feat, pass_) == cls


def test_the_ratio_is_the_class_median_and_missing_classes_borrow():
    recs = [{"pass": "fwd", "workspace_bytes": w, "ops": [_f(bytes=100)]} for w in (0, 90, 100)]
    recs.append({"pass": "fwd", "ops": [_f()]})  # no workspace recorded: not a case
    classes = ws.fit_ratios(recs)
    assert classes == {"kxk.fwd.fp32": {"ratio": 0.9, "cases": 3, "with_workspace": 2,
                                        "p90": 1.0}}
    assert ws.workspace_bytes(_f(bytes=1000), "fwd", classes) == 900
    # channels-last and 3-D take the plain 2-D class where they have none of their own
    assert ws.workspace_bytes(_f(bytes=1000, cl=True, nd=3, kd=3), "fwd", classes) == 900
    assert ws.workspace_bytes(_f(), "bwd", classes) is None  # no class at all


def test_the_shipped_table_is_the_fit_of_the_h100_grids():
    from experiments.op_model.workspace_fit import fit
    assert ws.shipped()["classes"] == fit()["classes"]
    # a dense k x k convolution in NCHW needs about one copy of its tensors (the layout
    # transforms), channels-last almost none
    c = ws.shipped()["classes"]
    assert 0.9 <= c["kxk.fwd.fp32"]["ratio"] <= 1.1 and c["kxk_cl.fwd.fp32"]["ratio"] < 0.1


@pytest.fixture(scope="module")
def convnet():
    from vdnnsim.gpu.probe.aten import memory_trace
    gpu = resolve_gpu("h200")
    d = memory_trace("tests.test_tensor_plans:convnet", 16, gpu, "fp32", None, {},
                     "image:3,64,64:10")
    return with_optimizer(trace_from_dict(d, "convnet"), "adamw"), gpu


def test_an_op_trace_carries_its_convolutions_predicted_workspaces(convnet):
    trace, gpu = convnet
    convs = [x for x in trace.layers if ws.is_conv_op(x)]
    assert len(convs) == 13 and ws.unknown_workspaces(trace) == 0
    ratio = ws.shipped()["classes"]["kxk.fwd.fp32"]["ratio"]
    for x in convs:
        (a,) = x.algos
        assert a.name == "default" and x.attrs["workspaces"] == "predicted"  # the name a
        # plan file made before names
        assert a.fwd_workspace_bytes == int(ratio * x.attrs["op"]["bytes"])
    assert "13 convolutions' workspaces predicted from cuDNN 9.19's on an H100" in \
        trace.source.note
    lean = ws.without_workspaces(trace)
    assert not ws.has_predicted(lean) and ws.has_predicted(trace)
    with_ws = run_trace(trace, gpu, "eager", record=False)
    without = run_trace(lean, gpu, "eager", record=False)
    assert with_ws.peak_memory_bytes > without.peak_memory_bytes
    assert with_ws.iteration_time_ns == without.iteration_time_ns  # times unchanged
    # a trace made before workspaces were predicted gets them back, the same ones
    assert ws.unknown_workspaces(_bare(trace)) == 13
    again, given = ws.with_workspaces(_bare(trace))
    assert given == 13 and [x.algos for x in again.layers] == [x.algos for x in trace.layers]
    assert [x.attrs for x in again.layers] == [x.attrs for x in trace.layers]


def _bare(trace):
    """``trace`` as tracing made it before workspaces were predicted."""
    return dataclasses.replace(trace, layers=tuple(
        dataclasses.replace(x, algos=(dataclasses.replace(x.algos[0], fwd_workspace_bytes=0,
                                                          bwd_workspace_bytes=0),),
                            attrs={k: v for k, v in x.attrs.items() if k != "workspaces"})
        if ws.is_conv_op(x) else x for x in trace.layers))


def _config(trace, tmp_path):
    from vdnnsim.config import config_from_dict
    from vdnnsim.trace import save_trace
    save_trace(trace, tmp_path / "t.yaml")
    return config_from_dict({"network": str(tmp_path / "t.yaml"), "batch_size": 16,
                             "gpu": "h200", "policies": ["eager"]})


def test_plans_leave_the_workspaces_room_or_say_they_could_not(convnet, tmp_path,
                                                               monkeypatch):
    trace, gpu = convnet
    peak = run_trace(trace, gpu, "eager", record=False).peak_memory_bytes
    budget = int(0.8 * peak)
    r = plan_config(_config(trace, tmp_path), tmp_path, budget, method="tensors")
    assert r.plan is not None and ws.has_predicted(r.trace)
    assert "planned without them" not in (r.caution or "")
    assert r.planned.peak_memory_bytes <= budget
    # workspaces no plan can leave room for: planned without them, and said so
    table = ws.shipped()
    big = {k: dict(v, ratio=40.0) for k, v in table["classes"].items()}
    monkeypatch.setattr(ws, "shipped", lambda: dict(table, classes=big))
    huge, given = ws.with_workspaces(_bare(trace))
    assert given == 13
    r = plan_config(_config(huge, tmp_path), tmp_path, budget, method="tensors")
    assert r.plan is not None and not ws.has_predicted(r.trace)
    assert "no plan fits with the convolutions' predicted workspaces" in r.caution
    assert r.planned.peak_memory_bytes <= budget
