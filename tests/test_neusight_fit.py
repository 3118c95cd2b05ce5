"""Issue 58: the spec rule fitted on half of NeuSight's public kernel timings and checked on
the other half (experiments/op_model/NEUSIGHT_SPLIT.md, neusight_fit.py)."""

import collections
from pathlib import Path

import pytest

from .conftest import experiment

ROOT = Path(__file__).resolve().parents[1]


def test_the_split_is_deterministic_disjoint_and_by_shape_alone():
    nk = experiment("op_model/neusight_kernels.py")
    recs = nk.records()
    halves = [r[5] for r in recs]
    assert halves == [r[5] for r in nk.records()] and set(halves) == {"train", "test"}
    # a shape lies in one half, whatever the card
    by_shape = collections.defaultdict(set)
    for card, cls, f, _ns, _algo, h in recs:
        by_shape[(cls, tuple(sorted((k, v) for k, v in f.items() if k != "dt")))].add(h)
    assert all(len(v) == 1 for v in by_shape.values())
    # the counts NEUSIGHT_SPLIT.md gives
    n = collections.Counter((nk.CARDS[c][0], cls, h) for c, cls, _f, _n, _a, h in recs)
    assert (n["t4", "conv2d", "train"], n["t4", "conv2d", "test"]) == (2514, 2455)
    assert (n["l4", "linear", "train"], n["l4", "bmm", "test"]) == (541, 1040)
    assert nk.half("linear", dict(B="1", M="512", N="768", K="768")) == \
        nk.half("linear", dict(B="01", M="512", N="768", K="768"))


def _fit_module():
    return experiment("op_model/neusight_fit.py")


def test_the_shipped_corrections_are_the_fit_of_the_train_half():
    """gpus.yaml's spec_rule numbers are what neusight_fit.py fits on the train half alone,
    to the decimals shipped; the presets that carry one are those its shipping rule picks."""
    nf = _fit_module()
    data = nf.by_card()
    for card, preset in nf.PRESETS.items():
        got = nf.shipped(card)
        if got is None:
            continue
        f = nf.fit(card, data[card]["train"])
        assert got == {k: f[k] for k in got}, card
    shipped = {c for c in nf.PRESETS if nf.shipped(c)}
    assert shipped == {"a100_pcie_80g", "a100_pcie_40g", "l4", "t4"}


def test_a_corrected_preset_takes_its_factors_where_the_datasheet_enters():
    """The correction scales the peaks and the bandwidth the rule sees (rooflines and
    per-byte costs), nothing after it; the donor is still chosen on the datasheet."""
    import dataclasses

    from vdnnsim.costs import ops
    from vdnnsim.hardware import gpu_preset
    t4 = gpu_preset("t4")
    fix = t4.spec_rule
    plain = ops.predict_for(dataclasses.replace(t4, spec_rule=None))
    m = ops.predict_for(t4)
    assert m.peaks == {k: v * fix.compute_scale for k, v in plain.peaks.items()}
    assert m.mem_bw == t4.mem_bw_bytes_per_s * fix.bandwidth_scale
    assert "corrected by public kernel measurements" in m.source
    gelu = {"op": "gelu", "dt": "fp32", "bytes": 2**26}
    a = plain.fitted["classes"]["gelu|fp32|fwd"]["a"]
    assert m.time_ns(gelu, "fwd")[0] - a == \
        pytest.approx((plain.time_ns(gelu, "fwd")[0] - a) / fix.bandwidth_scale)
    assert ops.donor_for(t4).name == "h200"
    assert "x0.682" in ops.spec_rule_note(t4) and "not measured" in ops.spec_rule_note(t4)


def test_a_preset_without_a_correction_is_timed_as_before():
    from vdnnsim.costs import ops
    from vdnnsim.hardware import gpu_preset, preset_names, timing_of
    for name in preset_names():
        g = gpu_preset(name)
        if g.spec_rule is None and not g.op_calibration:
            m = ops.predict_for(g)
            assert m.peaks == {k: g.peak_flops.get(k, g.peak_flops["fp32"]) for k in m.peaks}
            assert m.mem_bw == g.mem_bw_bytes_per_s and "corrected" not in m.source
            assert timing_of(g).startswith("spec rule (datasheet numbers only)")
    assert timing_of(gpu_preset("l4")).startswith(
        "spec rule, corrected by public kernel measurements (1390 records)")


def test_a_spec_file_with_a_bad_correction_is_one_line_error(tmp_path):
    import yaml

    from vdnnsim.errors import ConfigError
    from vdnnsim.hardware import gpu_from_file
    entry = yaml.safe_load((ROOT / "vdnnsim/data/gpus.yaml").read_text())["t4"]
    for bad in ({"compute_scale": 0}, {"records": 0}, {"clock": 1.0}):
        (tmp_path / "g.yaml").write_text(yaml.safe_dump(
            dict(entry, spec_rule=dict(entry["spec_rule"], **bad))))
        with pytest.raises(ConfigError) as e:
            gpu_from_file(tmp_path / "g.yaml")
        assert "spec_rule" in str(e.value) and "\n" not in str(e.value).strip()
