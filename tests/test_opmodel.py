"""The op-level kernel model (NOTE [op model]): its fit on the shipped H200 calibration, its
predictions' form, and a meta-device trace of a transformer timed by it."""

import dataclasses
import json
from importlib import resources
from pathlib import Path

import pytest

from vdnnsim.costs import opfit
from vdnnsim.costs import ops as opmodel
from vdnnsim.hardware import gpu_preset

from .conftest import HAS_HF

ROOT = Path(__file__).resolve().parents[1]


def _raws():
    d = resources.files("vdnnsim").joinpath("data", "calibration")
    return [json.loads(d.joinpath(f"h200_ops_{x}.json").read_text())
            for x in ("bf16", "fp32", "host", "host_s28", "cnn_bf16", "cnn_fp32")]


def test_shipped_model_is_the_fit_of_the_shipped_calibration():
    """The model file is what `python -m vdnnsim.costs.ops` makes of the raw files: nothing
    edited by hand, nothing fitted elsewhere."""
    gpu = gpu_preset("h200")
    raws = _raws()
    fitted = opmodel.fit(raws, dict(gpu.peak_flops), gpu.mem_bw_bytes_per_s,
                         raws[0]["gpu"]["sm_count"])
    shipped = opmodel.load(gpu.op_calibration)
    _same(json.loads(json.dumps(fitted)), shipped)


def _same(a, b, where="") -> None:
    """``a == b`` but floats to 1e-9 relative: the fit's least squares may round the last
    digits differently under another numpy or scipy."""
    assert type(a) is type(b) or {type(a), type(b)} <= {int, float}, where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}/{i}")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), where
    else:
        assert a == b, where


def test_h100_shipped_model_is_the_fit_of_its_calibrations():
    """The h100 preset's op model is the fit of the lent H100s' files (docs/cost-model.md,
    "The H100's own op calibration"), in the order its command gives them."""
    cal = ROOT / "traces" / "h200_op_model_heldout" / "h100_sets12" / "cal"
    grids = ROOT / "traces" / "h100_op_calibration"
    files = [cal / "h100_ops_bf16.json", cal / "h100_ops_fp32.json", cal / "host_1.json"] + \
        [grids / f"h100_ops_{x}.json" for x in ("cnn_bf16", "cnn_fp32", "video_fp32",
                                                 "video_bf16")]
    raws = [json.loads(f.read_text()) for f in files]
    gpu = gpu_preset("h100")
    fitted = opmodel.fit(raws, dict(gpu.peak_flops), gpu.mem_bw_bytes_per_s,
                         raws[0]["gpu"]["sm_count"])
    _same(json.loads(json.dumps(fitted)), opmodel.load(gpu.op_calibration))
    assert opmodel.for_gpu(gpu).source == "calibrated" and opmodel.donor_for(gpu).name == "h200"


def test_fit_errors_on_calibration_are_reported_and_bounded():
    shipped = opmodel.load(gpu_preset("h200").op_calibration)
    gemm = [c["fit_error"]["median"] for k, c in shipped["classes"].items()
            if k.split("|")[0] in ("mm", "addmm")]
    assert gemm and max(gemm) < 0.2  # per-kernel medians on its own cases
    assert {"mm|bf16|fwd", "mm|fp32|bwd", "sdpa:flash|bf16|bwd", "native_layer_norm|fp32|fwd",
            "adamw_step|fp32|step", "sgd_step|fp32|step", "convolution:dense|bf16|bwd",
            "convolution:dw_cl|fp32|fwd", "native_batch_norm@bcast|fp32|bwd"} <= set(
        shipped["classes"])
    assert {"conv:autocast", "batch_norm:fp32"} <= set(shipped["host"])


def test_predictions_scale_with_work():
    om = opmodel.for_gpu(gpu_preset("h200"))
    small = {"op": "mm", "dt": "bf16", "b": 1, "m": 1024, "n": 1024, "k": 1024, "bytes": 6 << 20}
    big = dict(small, m=16384)
    t_small, own = om.time_ns(small, "fwd")
    t_big, _ = om.time_ns(big, "fwd")
    assert own and t_big > 4 * t_small
    # fp32 GEMMs run on CUDA cores (no TF32 by default): much slower than bf16
    assert om.time_ns(dict(big, dt="fp32"), "fwd")[0] > 5 * t_big
    assert om.time_ns(big, "bwd")[0] > 1.5 * t_big
    x = {"op": "gelu", "dt": "bf16", "bytes": 1 << 28}
    assert om.time_ns(x, "fwd")[0] > om.time_ns(dict(x, bytes=1 << 24), "fwd")[0]
    unknown, own = om.time_ns({"op": "erfinv", "dt": "bf16", "bytes": 1 << 26}, "fwd")
    assert unknown > 0 and not own
    flash = {"op": "_scaled_dot_product_flash_attention", "dt": "bf16", "B": 8, "H": 16,
             "S": 1024, "L": 1024, "D": 128, "causal": True, "bytes": 0}
    assert om.time_ns(flash, "bwd")[0] > om.time_ns(flash, "fwd")[0]
    assert om.host_ns("mm", "autocast")[0] > om.host_ns(None, "autocast")[0] > 0


def _host_raw(process, mix_fwd, mix_bwd):
    chains = [{"chain": k, "modules": m, "ops": 64, "dtype": "float32", "autocast": None,
               "host_fwd_ns": f, "host_bwd_ns": b, "process": process}
              for k, f, b in (("linear", 40e3, 100e3), ("pointwise", 15e3, 20e3),
                              ("view", 6e3, 10e3), ("conv", 30e3, 50e3))
              for m in (False, True)]
    mixes = [{"family": "transformer", "counts": {"linear": 10, "pointwise": 20, "view": 5},
              "dtype": "float32", "autocast": None, "process": process,
              "host_fwd_ns": mix_fwd * (10 * 40e3 + 20 * 15e3 + 5 * 6e3),
              "host_bwd_ns": mix_bwd * (10 * 100e3 + 20 * 20e3 + 5 * 10e3)}]
    return {"dtype": "host", "host_only": True, "host_chains": chains, "host_mixes": mixes}


def test_host_mix_factor_scales_each_op_of_its_family():
    """NOTE [host mixes]: the factor is the mixed chains' time over what the same process's
    one-op chains give for their ops (median over processes), and the host's cost of an op
    is its chain's times that factor; a family without mixes takes the other's."""
    host = opfit._host([_host_raw(1, 1.4, 1.2), _host_raw(2, 1.6, 1.2),
                          _host_raw(3, 1.5, 1.3)])
    fwd, bwd, n = host["mix"]["fp32"]["transformer"]
    assert (fwd, bwd, n) == (pytest.approx(1.5), pytest.approx(1.2), 3)
    om = opmodel.OpModel({"host": host, "classes": {}}, {}, 1.0, 1, "test")
    assert om.host_ns("mm", "fp32") == (pytest.approx(40e3 * 1.5), pytest.approx(100e3 * 1.2))
    assert om.host_ns("convolution", "fp32")[0] == pytest.approx(30e3 * 1.5)
    # the model's family picks the factor; without CNN mixes a CNN takes the transformer's
    assert om.host_ns("mm", "fp32", "cnn")[0] == pytest.approx(40e3 * 1.5)
    cnn = {"family": "cnn", "counts": {"conv": 10}, "dtype": "float32", "autocast": None,
           "process": 1, "host_fwd_ns": 2.0 * 10 * 30e3, "host_bwd_ns": 10 * 50e3}
    raw = _host_raw(1, 1.4, 1.2)
    both = opfit._host([dict(raw, host_mixes=raw["host_mixes"] + [cnn])])
    om2 = opmodel.OpModel({"host": both, "classes": {}}, {}, 1.0, 1, "test")
    assert om2.host_ns("mm", "fp32", "cnn") == (pytest.approx(80e3), pytest.approx(100e3))
    assert om2.host_ns("mm", "fp32")[0] == pytest.approx(40e3 * 1.4)
    assert om.module_ns == (0.0, 0.0)  # a module call's cost is not the mix's
    plain = opfit._host([dict(_host_raw(1, 1.4, 1.2), host_mixes=[])])
    assert "mix" not in plain
    om1 = opmodel.OpModel({"host": plain, "classes": {}}, {}, 1.0, 1, "test")
    assert om1.host_ns("mm", "fp32") == (40e3, 100e3)


def test_gpu_without_op_calibration_has_no_op_model():
    assert opmodel.for_gpu(gpu_preset("k40")) is None


def _feats():
    """One op of each timed kind: a compute-bound and a memory-bound GEMM, an attention, a
    pointwise op, an embedding's backward (NOTE [op features])."""
    return [({"op": "mm", "dt": "bf16", "m": 8192, "n": 8192, "k": 8192}, "fwd"),
            ({"op": "mm", "dt": "bf16", "m": 8, "n": 8192, "k": 8192}, "fwd"),
            ({"op": "_scaled_dot_product_flash_attention", "dt": "bf16", "B": 8, "H": 16,
              "S": 512, "D": 64, "causal": True}, "bwd"),
            ({"op": "gelu", "dt": "bf16", "bytes": 64 << 20}, "fwd"),
            ({"op": "embedding", "dt": "bf16", "o": 16 << 20, "w": 64 << 20}, "bwd")]


def test_spec_rule_is_the_donor_on_the_donors_specs():
    """NOTE [op spec rule]: a GPU with the donor's specs gets the donor's times exactly."""
    h200 = gpu_preset("h200")
    twin = dataclasses.replace(h200, name="twin", op_calibration="")
    assert opmodel.donor_for(twin).name == "h200"
    own, rule = opmodel.for_gpu(h200), opmodel.predict_for(twin)
    for f, pass_ in _feats():
        assert rule.time_ns(f, pass_) == pytest.approx(own.time_ns(f, pass_))
    assert rule.step_ns("adamw", 1 << 30, 100) == pytest.approx(own.step_ns("adamw", 1 << 30,
                                                                          100))


def test_spec_rule_scales_what_moves_bytes_and_keeps_what_computes():
    """Half the bandwidth: a streaming op's per-byte cost doubles and its fixed cost stays;
    a compute-bound GEMM keeps its time; a memory-bound one and the optimizer step slow."""
    h200 = gpu_preset("h200")
    half = dataclasses.replace(h200, name="half", op_calibration="",
                               mem_bw_bytes_per_s=h200.mem_bw_bytes_per_s / 2)
    own, rule = opmodel.for_gpu(h200), opmodel.predict_for(half, h200)
    big, skinny, _, gelu, emb = _feats()
    c = own.fitted["classes"]["gelu|bf16|fwd"]
    assert rule.time_ns(*gelu)[0] == pytest.approx(c["a"] + 2 * c["s"] * gelu[0]["bytes"])
    e = own.fitted["classes"]["embedding|bf16|bwd"]
    assert rule.time_ns(*emb)[0] == pytest.approx(
        e["a"] + 2 * e["s"] * emb[0]["o"] + 2 * e["u"] * emb[0]["w"])
    assert rule.time_ns(*big)[0] == pytest.approx(own.time_ns(*big)[0], rel=1e-9)
    assert rule.time_ns(*skinny)[0] > 1.3 * own.time_ns(*skinny)[0]
    assert rule.step_ns("adamw", 1 << 30, 1)[0] > 1.8 * own.step_ns("adamw", 1 << 30, 1)[0]
    fresh = json.loads((resources.files("vdnnsim") / "data" / h200.op_calibration).read_text())
    assert c["s"] == fresh["classes"]["gelu|bf16|fwd"]["s"]  # the cached donor untouched
    # a bandwidth what-if on the calibrated preset itself scales the same way
    what_if = opmodel.for_gpu(dataclasses.replace(h200, mem_bw_bytes_per_s=half.mem_bw_bytes_per_s))
    assert what_if.time_ns(*gelu)[0] == pytest.approx(rule.time_ns(*gelu)[0])


def test_spec_rule_takes_the_targets_peaks_and_sms():
    """Half the peaks: a compute-bound GEMM about doubles and attention slows; the SM count
    enters the waves features (a GEMM of 64 tiles fills half a wave of 132 SMs, two of
    33); the memory-bound op keeps its time (the bandwidth is the donor's)."""
    h200 = gpu_preset("h200")
    own = opmodel.for_gpu(h200)
    slow = dataclasses.replace(h200, name="slow", op_calibration="",
                               peak_flops={k: v / 2 for k, v in h200.peak_flops.items()})
    few = dataclasses.replace(h200, name="few", op_calibration="", sm_count=33)
    big, _, attn, gelu, _ = _feats()
    t_own, t_slow = own.time_ns(*big)[0], opmodel.predict_for(slow, h200).time_ns(*big)[0]
    assert 1.6 < t_slow / t_own < 2.4
    assert opmodel.predict_for(slow, h200).time_ns(*attn)[0] > 1.3 * own.time_ns(*attn)[0]
    mid = ({"op": "mm", "dt": "bf16", "m": 1024, "n": 1024, "k": 4096}, "fwd")
    t_few = opmodel.predict_for(few, h200).time_ns(*mid)[0]
    assert abs(t_few / own.time_ns(*mid)[0] - 1) > 0.01
    assert opmodel.predict_for(slow, h200).time_ns(*gelu)[0] == pytest.approx(
        own.time_ns(*gelu)[0])


def test_spec_rule_note_says_where_it_was_measured():
    """`vdnnsim trace` quotes the H100's errors only for a GPU that shares the donor's
    compute (the H100 does); for another it says the rule is not measured there."""
    same = opmodel.spec_rule_note(gpu_preset("h100"))
    assert opmodel.SPEC_RULE_ERROR in same and "h200" in same
    for name in ("k40", "titanx_maxwell", "v100", "a100", "p100"):
        other = opmodel.spec_rule_note(gpu_preset(name))
        assert "not measured" in other and opmodel.SPEC_RULE_ERROR not in other


H100_CHECK = Path(__file__).resolve().parents[1] / "traces/h200_op_model_heldout/h100_sets12/check.json"


def test_spec_rule_error_is_what_the_h100_comparison_gives():
    """What `vdnnsim trace` says of the rule (SPEC_RULE_ERROR) is the committed comparison's
    (experiments/op_model/h100_check.py), and that comparison is of every H100 run."""
    import re
    import statistics
    rows = json.loads(H100_CHECK.read_text())
    measured = H100_CHECK.with_name("measure.jsonl").read_text().splitlines()
    assert sorted(r["run"] for r in rows) == sorted(json.loads(x)["run"] for x in measured)
    said = [float(x) for x in re.findall(r"(\d+\.\d)%", opmodel.SPEC_RULE_ERROR)]
    want = []
    for prec in ("fp32", "bf16"):
        e = [abs(r["rule_error"]) for r in rows if prec in r["run"]]
        want += [round(100 * statistics.median(e), 1), round(100 * max(e), 1)]
    assert said == want


@pytest.mark.skipif(not HAS_HF, reason="needs transformers")
def test_h100_comparison_row_is_todays_rule():
    """One row of the committed comparison, predicted again by today's code."""
    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace.optimizer import with_optimizer
    from vdnnsim.trace import trace_from_dict
    row = next(r for r in json.loads(H100_CHECK.read_text()) if r["run"] == "distilbert-fp32")
    gpu = dataclasses.replace(resolve_gpu("h100"), op_calibration="")  # the rule's H100
    d = memory_trace("hf:experiments/op_model/distilbert-base.yaml", 32, gpu, "fp32", 256,
                     {}, None)
    r = run_trace(with_optimizer(trace_from_dict(d, "d"), "adamw"), gpu, "eager")
    assert r.iteration_time_ns / 1e6 == pytest.approx(row["rule_ms"], abs=0.01)


def test_spec_rule_needs_an_sm_count_and_a_donor():
    k40 = gpu_preset("k40")
    assert opmodel.predict_for(dataclasses.replace(k40, sm_count=0)) is None
    assert opmodel.predict_for(dataclasses.replace(k40, peak_flops={})) is None
    assert opmodel.donor_for(dataclasses.replace(k40, mem_bw_bytes_per_s=0.0)) is None
    assert opmodel.predict_for(k40, gpu_preset("v100")) is None  # no calibration to lend
    assert opmodel.donor_for(gpu_preset("h100")).name == "h200"


torch = pytest.importorskip("torch")


def test_transformer_meta_trace_is_timed_on_h200():
    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace import trace_from_dict

    gpu = resolve_gpu("h200")
    d = memory_trace("hf:tests/hf/opt-tiny.yaml", 2, gpu, "autocast-bf16", 32, {}, None)
    assert d["source"]["cost_model"] == opmodel.MODEL
    layers = d["layers"]
    timed = [x for x in layers if x["fwd_ns"] > 0]
    assert len(timed) > len(layers) // 2
    assert all(x["host_fwd_ns"] > 0 for x in layers)
    assert d["step_ns"] > 0
    trace = trace_from_dict(d, "opt-tiny")
    assert trace.timed
    r = run_trace(trace, gpu, "baseline_p")
    assert r.iteration_time_ns > sum(x["fwd_ns"] + x["bwd_ns"] for x in layers)
    # a preset without an op calibration is timed from its specs (NOTE [op spec rule]) and
    # says so; a GPU whose SM count is unknown keeps the memory trace (times 0)
    h100 = memory_trace("hf:tests/hf/opt-tiny.yaml", 2, resolve_gpu("a100"), "autocast-bf16",
                        32, {}, None)
    assert h100["source"]["cost_model"] == opmodel.SPEC_MODEL
    assert "op-level kernel model from specs" in h100["source"]["note"] and \
        "h200" in h100["source"]["note"]
    assert sum(x["fwd_ns"] for x in h100["layers"]) > sum(x["fwd_ns"] for x in layers)
    unknown = dataclasses.replace(resolve_gpu("k40"), sm_count=0)
    k40 = memory_trace("hf:tests/hf/opt-tiny.yaml", 2, unknown, "fp32", 32, {}, None)
    assert k40["source"]["cost_model"] == "none"
    assert all(x["fwd_ns"] == 0 for x in k40["layers"])


def test_calibrated_optimizer_steps_survive_io_and_are_taken():
    """NOTE [optimizer state]: a trace with optimizer_steps takes AdamW's calibrated step
    (GPU and host) instead of SGD's scaled by bytes; one without scales as before."""
    from dataclasses import replace

    from vdnnsim.trace.optimizer import ADAM_BYTES, SGD_BYTES, with_optimizer
    from vdnnsim.trace import trace_from_dict, trace_to_dict

    d = {"format": "vdnnsim-trace", "version": 1, "name": "t", "batch_size": 1,
         "tensors": [{"id": "x", "size_bytes": 64, "kind": "input"},
                     {"id": "y", "size_bytes": 64}],
         "layers": [{"id": "y", "kind": "fc", "inputs": ["x"], "outputs": ["y"],
                     "weight_bytes": 1024, "fwd_ns": 10, "bwd_ns": 20}],
         "step_ns": 300, "host_step_ns": 50,
         "optimizer_steps": {"sgd": [300, 50], "adamw": [2100, 900]}}
    t = trace_from_dict(d, "t")
    assert trace_from_dict(trace_to_dict(t), "t").optimizer_steps == t.optimizer_steps
    a = with_optimizer(t, "adamw")
    assert (a.step_ns, a.host_step_ns, a.optimizer) == (2100, 900, "adamw")
    plain = with_optimizer(replace(t, optimizer_steps=()), "adamw")
    assert plain.step_ns == round(300 * ADAM_BYTES / SGD_BYTES) and plain.host_step_ns == 50


def test_other_precisions_take_stand_ins_not_a_crash():
    """fp16 (autocast-fp16) has no calibration: bf16's classes stand in and are counted as
    such; an integer op takes a streaming class; nothing raises."""
    om = opmodel.for_gpu(gpu_preset("h200"))
    g = {"op": "addmm", "dt": "fp16", "b": 1, "m": 4096, "n": 4096, "k": 4096, "bytes": 1 << 26}
    t16, own16 = om.time_ns(g, "fwd")
    tb, ownb = om.time_ns(dict(g, dt="bf16"), "fwd")
    assert t16 == tb and ownb and not own16
    a = {"op": "_scaled_dot_product_flash_attention", "dt": "fp16", "B": 2, "H": 8, "S": 512,
         "L": 512, "D": 64, "causal": False, "bytes": 0}
    assert om.time_ns(a, "bwd")[0] > 0
    assert om.time_ns({"op": "mm", "dt": "int64", "m": 8, "n": 8, "k": 8, "bytes": 1536},
                      "fwd")[0] > 0
    assert om.time_ns({"op": "arange", "dt": "int64", "bytes": 4096}, "fwd")[0] > 0


def _conv_raw(dtype, rng):
    """A made-up calibration of convolutions: each kind and format at its own utilization,
    as ``vdnnsim calibrate --ops --classes cnn`` records them (NOTE [op features])."""
    recs = []
    util = {"dense": 0.6, "dw": 0.05, "dense_cl": 0.5, "dw_cl": 0.1}
    for i in range(160):
        kind = ["dense", "dw", "dense_cl", "dw_cl"][i % 4]
        b, c, h = rng.choice([16, 64]), rng.choice([32, 64, 128, 256]), rng.choice([14, 28, 56])
        dw = kind.startswith("dw")
        k = 3 if dw else rng.choice([1, 3])
        n = 1 if dw else rng.choice([64, 128, 256])
        g = c if dw else 1
        f = {"op": "convolution", "dt": dtype, "bytes": 4 * b * c * h * h * 2,
             "b": g, "m": b * h * h, "n": n, "k": (c // g) * k * k, "c": c, "kh": k, "kw": k,
             "stride": 1}
        if kind.endswith("_cl"):
            f["cl"] = True
        assert opmodel.conv_kind(f) == kind
        for pass_ in ("fwd", "bwd"):
            peak = 494.7e12 if dtype == "fp32" else 989e12
            _, roof = opmodel.conv_phi(f, pass_, 132, peak, 4.8e12)
            recs.append({"op": "conv", "pass": pass_, "ops": [f],
                         "time_ns": roof / util[kind] * rng.uniform(0.95, 1.05)})
    return {"dtype": dtype, "gpu": {"name": "test", "sm_count": 132}, "records": recs,
            "host_chains": []}


def test_convolutions_are_fitted_per_kind_and_memory_format():
    """NOTE [op model]: a convolution is timed by its own kind's and format's class (fp32
    against the TF32 peak); a format without cases takes the other format's class, counted
    as a stand-in; a depthwise conv is far from a dense one of the same bytes."""
    import random

    rng = random.Random(0)
    peaks = {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989e12}
    fitted = opmodel.fit([_conv_raw("fp32", rng), _conv_raw("bf16", rng)], peaks, 4.8e12, 132)
    for dt in ("fp32", "bf16"):
        for kind in ("dense", "dw", "dense_cl", "dw_cl"):
            c = fitted["classes"][f"convolution:{kind}|{dt}|fwd"]
            assert c["fit_error"]["median"] < 0.05
    om = opmodel.OpModel(fitted, peaks, 4.8e12, 132, "test")
    dense = {"op": "convolution", "dt": "bf16", "bytes": 1 << 26, "b": 1, "m": 64 * 28 * 28,
             "n": 128, "k": 128 * 9, "c": 128, "kh": 3, "kw": 3, "stride": 1}
    _, roof = opmodel.conv_phi(dense, "fwd", 132, 989e12, 4.8e12)
    t, own = om.time_ns(dense, "fwd")
    assert own and t == pytest.approx(roof / 0.6, rel=0.1)
    t_cl, own_cl = om.time_ns(dict(dense, cl=True), "fwd")
    assert own_cl and t_cl == pytest.approx(roof / 0.5, rel=0.1)
    # without channels-last classes: the NCHW class stands in, and says so
    nchw_only = dict(fitted, classes={k: v for k, v in fitted["classes"].items()
                                      if "_cl|" not in k})
    t2, own2 = opmodel.OpModel(nchw_only, peaks, 4.8e12, 132, "test").time_ns(
        dict(dense, cl=True), "fwd")
    assert t2 == pytest.approx(t) and not own2
    dw = dict(dense, b=128, n=1, k=9)
    _, roof_dw = opmodel.conv_phi(dw, "fwd", 132, 989e12, 4.8e12)
    assert om.time_ns(dw, "fwd")[0] == pytest.approx(roof_dw / 0.05, rel=0.1)
    # far below the grid (a 1 x 1 map, two images): no faster than the class's fastest case
    tiny = dict(dw, m=2, bytes=2 * 128 * 4 * 2)
    c_dw = fitted["classes"]["convolution:dw|bf16|fwd"]
    assert om.time_ns(tiny, "fwd")[0] >= c_dw["floor"] > 0
    # and a feature far outside the cases does not run away (clip): within 100x the floor
    huge_taps = dict(dw, kh=31, kw=31, k=961)
    assert om.time_ns(huge_taps, "fwd")[0] < 100 * om.time_ns(dw, "fwd")[0]


def test_batch_norm_under_its_cuda_names_is_fitted_and_looked_up_as_native_batch_norm():
    """CUDA dispatches a training batch norm as cuDNN's or the update variant, the meta
    device as native_batch_norm (ALIASES): a case recorded under either name is the same
    class, and a probe's op under either name finds it."""
    f = {"op": "cudnn_batch_norm", "dt": "fp32", "bytes": 1 << 20, "form": "bcast"}
    main = opfit._main_op({"op": "batch_norm", "ops": [{"op": "empty", "dt": "fp32",
                                                          "bytes": 0}, f]})
    assert main["op"] == "native_batch_norm"
    om = opmodel.for_gpu(gpu_preset("h200"))
    a = om.time_ns(dict(f, op="_batch_norm_with_update"), "fwd")
    b = om.time_ns(dict(f, op="native_batch_norm"), "fwd")
    assert a == b and a[1]


def test_batch_norm_takes_the_reduction_form_where_it_cross_validates_better():
    """NOTE [op model]: batch-norm cases whose time follows a per-channel reduction (few
    long channels slow) choose the CNN model's form over ``a + s x bytes``, and predict a
    long-channel map far slower than a stream of its bytes; an input that is no 4-D map
    takes the affine fit kept beside it."""
    import random

    rng = random.Random(1)
    recs = []
    for _ in range(40):
        n, c, h = rng.choice([8, 64, 256]), rng.choice([16, 64, 512, 2048]), rng.choice([7, 28, 112])
        per_channel = n * h * h * 4
        t = 3000 + max(per_channel / 2.0, per_channel * c / 3000.0)
        f = {"op": "native_batch_norm", "dt": "fp32", "bytes": 2 * per_channel * c,
             "form": "bcast"}
        recs.append({"op": "batch_norm", "batch": n, "c": c, "h": h, "pass": "fwd",
                     "ops": [f], "time_ns": t * rng.uniform(0.97, 1.03)})
    raw = {"dtype": "fp32", "gpu": {"name": "test", "sm_count": 132}, "records": recs,
           "host_chains": []}
    peaks = {"fp32": 67e12, "bf16": 989e12}
    fitted = opmodel.fit([raw], peaks, 4.8e12, 132)
    c = fitted["classes"]["native_batch_norm@bcast|fp32|fwd"]
    assert c["kind"] == "bn" and c["cv"]["bn"] < c["cv"]["affine"] and c["own"]["kind"] == "affine"
    om = opmodel.OpModel(fitted, peaks, 4.8e12, 132, "test")
    few = {"op": "native_batch_norm", "dt": "fp32", "form": "bcast", "N": 256, "C": 16,
           "H": 112, "W": 112, "bytes": 2 * 256 * 16 * 112 * 112 * 4}
    many = dict(few, C=2048, H=7, W=7 + 3)  # about the same bytes, many short channels
    many["bytes"] = 2 * 256 * 2048 * 7 * 10 * 4
    assert om.time_ns(few, "fwd")[0] > 2 * om.time_ns(many, "fwd")[0]
    flat = {"op": "native_batch_norm", "dt": "fp32", "form": "bcast", "bytes": 1 << 20}
    t_flat, own = om.time_ns(flat, "fwd")
    assert own and t_flat == pytest.approx(c["own"]["a"] + c["own"]["s"] * (1 << 20))


def test_a_3d_convolution_has_classes_of_its_own_and_takes_the_2d_class_without_them():
    """NOTE [op model]: a 3-D convolution's features count its taps in time and key a class
    of their own; where the calibration has no 3-D case (the shipped H200 model), the 2-D
    class of its kind times it, counted as a stand-in."""
    import random

    import torch
    from vdnnsim.gpu.probe.opfeatures import op_features

    x, w = torch.empty(2, 8, 4, 14, 14, device="meta"), torch.empty(16, 8, 3, 1, 1,
                                                                    device="meta")
    y = torch.nn.functional.conv3d(x, w, None, (1, 2, 2), (1, 0, 0))
    f = op_features(torch.ops.aten.convolution.default, (x, w, None, [1, 2, 2], [1, 0, 0], [1, 1, 1], False,
                                    [0, 0, 0], 1), {}, (y,))
    assert (f["nd"], f["kd"], f["kh"], f["kw"], f["stride"]) == (3, 3, 1, 1, 2)
    assert opmodel.conv_kind(f) == "dense3d" and f["k"] == 8 * 3
    rng = random.Random(0)
    peaks = {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989e12}
    fitted = opmodel.fit([_conv_raw("fp32", rng), _conv_raw("bf16", rng)], peaks, 4.8e12, 132)
    om = opmodel.OpModel(fitted, peaks, 4.8e12, 132, "test")
    conv3d = {"op": "convolution", "dt": "bf16", "bytes": 1 << 26, "b": 1,
              "m": 64 * 8 * 28 * 28, "n": 128, "k": 128 * 27, "c": 128, "kd": 3, "kh": 3,
              "kw": 3, "stride": 1, "nd": 3}
    t, own = om.time_ns(conv3d, "fwd")
    flat = {k: v for k, v in conv3d.items() if k != "nd"}
    assert not own and t == pytest.approx(om.time_ns(flat, "fwd")[0])
    # the taps in time count: a 3 x 3 x 3 kernel's features are not a 3 x 3 one's
    assert opmodel.conv_phi(conv3d, "fwd", 132, 989e12, 4.8e12)[0] != \
        opmodel.conv_phi(dict(conv3d, kd=1), "fwd", 132, 989e12, 4.8e12)[0]
    with_3d = dict(fitted, classes={**fitted["classes"], **{
        k.replace(":dense|", ":dense3d|"): v for k, v in fitted["classes"].items()
        if k.startswith("convolution:dense|")}})
    t3, own3 = opmodel.OpModel(with_3d, peaks, 4.8e12, 132, "test").time_ns(conv3d, "fwd")
    assert own3 and t3 == pytest.approx(t)


def test_gemms_whose_operands_differ_in_size_are_fitted_as_gemms_not_broadcasts():
    """A GEMM's operands differ in size, which the op features mark as a broadcast form
    (a binary op's); the fit keys GEMMs without it, so the model finds its GEMM classes.
    (An H100 calibration fitted before this had its GEMMs filed as per-byte
    ``mm@bcast`` classes.)"""
    import random

    rng = random.Random(1)
    recs = []
    for i in range(60):
        op = ("mm", "addmm", "bmm")[i % 3]
        b = 8 if op == "bmm" else 1
        m, n, k = (rng.choice([256, 1024, 4096]) for _ in range(3))
        f = {"op": op, "dt": "bf16", "bytes": 2 * b * (m * k + k * n + m * n), "b": b,
             "m": m, "n": n, "k": k, "form": "bcast"}
        for pass_ in ("fwd", "bwd"):
            _, roof = opmodel.gemm_phi(f, pass_, 132, 989e12, 4.8e12)
            recs.append({"op": op, "pass": pass_, "ops": [f],
                         "time_ns": roof / 0.7 * rng.uniform(0.95, 1.05)})
    raw = {"dtype": "bf16", "gpu": {"name": "test", "sm_count": 132}, "records": recs,
           "host_chains": []}
    fitted = opmodel.fit([raw], {"fp32": 67e12, "bf16": 989e12}, 4.8e12, 132)
    keys = set(fitted["classes"])
    assert {f"{op}|bf16|{p}" for op in ("mm", "addmm", "bmm") for p in ("fwd", "bwd")} <= keys
    assert not [k for k in keys if "@" in k]
    assert all(fitted["classes"][f"{op}|bf16|fwd"]["fit_error"]["median"] < 0.1
               for op in ("mm", "addmm", "bmm"))
