"""The H200 validation tables, recomputed from the committed traces and measurements
(traces/h200_torchvision/, and the held-out set of issue 11 in traces/h200_torchvision_heldout/). Targets the model meets must stay met; the misses are pinned to their
recorded values (tests/golden/validation.json) so that a change that moves them is seen.
Regenerate after an intended change: python -m tests.golden.regen validation
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vdnnsim.measured.validate import summarize, validate

ROOT = Path(__file__).resolve().parents[1] / "traces" / "h200_torchvision"
GOLDEN = Path(__file__).parent / "golden" / "validation.json"


@pytest.fixture(scope="module")
def table():
    return validate(ROOT, ROOT / "measurements.json")


@pytest.fixture(scope="module")
def summary(table):
    return summarize(table)


def test_the_validation_set_covers_the_issue(table):
    assert set(table.model) == {"vgg16", "resnet50", "densenet121", "mobilenet_v2"}
    for model, g in table.groupby("model"):
        assert g.batch_size.nunique() >= 3, model
        assert set(g.policy) == {"baseline", "vdnn_conv", "vdnn_all"}, model
    capped = table[table.cap_gib.notna()]
    assert capped.measured_fits.any() and not capped.measured_fits.all()


def test_fit_or_out_of_memory_is_predicted_right_in_every_capped_case(table, summary):
    """24 of 24. (From the host in the loop until session 23, one capped run was called out
    of memory that fit at exactly its 12 GiB cap, MobileNetV2 (256) vdnn_all: blocks a
    buffer's offload retired while its prefetched copy was retired again were lost to the
    engine's books, NOTE [deferred free].) Pinned, so that a change either way is seen."""
    f = summary["fit"]
    assert f["capped_n"] >= 10
    assert table.fit_right.all()
    assert f["capped_right"] == f["capped_n"] and f["right"] == f["n"]


def test_peak_allocated_memory_is_within_target(summary):
    assert summary["peak_allocated"]["median_abs"] <= 0.03
    assert summary["peak_allocated"]["max_abs"] <= 0.08
    assert summary["peak_allocated"]["target_met"]


def test_iteration_time_median_error_is_within_target(summary):
    assert summary["iteration_time"]["median_abs"] <= 0.10



def test_numbers_stay_as_recorded(summary):
    golden = json.loads(GOLDEN.read_text())
    for metric in ("peak_allocated", "peak_reserved", "iteration_time"):
        for k in ("median_abs", "max_abs"):
            assert summary[metric][k] == pytest.approx(golden[metric][k], rel=1e-6), (metric, k)
        if golden[metric].get("target_met"):
            assert summary[metric]["target_met"], metric


HELD = ROOT.parent / "h200_torchvision_heldout"


@pytest.fixture(scope="module")
def held_summary():
    return summarize(validate(HELD, HELD / "measurements.json"))


def test_the_heldout_set_has_its_models_and_caps():
    t = validate(HELD, HELD / "measurements.json")
    assert set(t.model) == {"efficientnet_b0", "convnext_tiny", "shufflenet_v2_x1_0",
                            "regnet_y_800mf", "wide_resnet50_2"}
    capped = t[t.cap_gib.notna()]
    assert len(capped) == 25 and not capped.measured_fits.all()


@pytest.mark.parametrize("which", ["h200", "heldout"])
def test_fits_and_reserved_memory_with_the_host_in_the_loop(which, summary, held_summary):
    """Issue 11: peak reserved memory within 5% at the median on both sets
    (NOTE [deferred free]); every capped run's fit right on the held-out set (vdnn_conv capped just above
    and just below its measured reserved peak included). Both maxima (target 20%) are
    missed and pinned: see docs/validation.md."""
    s = summary if which == "h200" else held_summary
    if which == "heldout":
        assert s["fit"]["right"] == s["fit"]["n"]
        assert s["fit"]["capped_right"] == s["fit"]["capped_n"]
    assert s["peak_reserved"]["median_abs"] <= 0.05
    golden = json.loads(GOLDEN.read_text())
    g = golden if which == "h200" else golden["heldout"]
    for metric in ("peak_allocated", "peak_reserved", "iteration_time"):
        for k in ("median_abs", "max_abs"):
            assert s[metric][k] == pytest.approx(g[metric][k], rel=1e-6), (metric, k)


def test_reserved_memory_against_one_steps_own_peak(tmp_path):
    """`validate --reserved one-step` holds the prediction against one step's reserved peak
    from an emptied cache (traces/h200_reserved_remeasured/); a record measured before that number
    existed is a one-line error (exit 2), not a traceback."""
    from .conftest import run_cli
    res = ROOT.parent / "h200_reserved_remeasured" / "measurements.json"
    one = validate(ROOT, res, reserved="one-step")
    timed = validate(ROOT, res)
    assert len(one) == len(timed) == 5  # the committed set's runs of that file
    recs = {(r["model"].split(":")[1], r["batch_size"], r["policy"]): r
            for r in json.loads(res.read_text())}
    for row in one.itertuples():
        r = recs[(row.model, row.batch_size, row.policy)]
        assert row.measured_reserved_gib == r["reserved_one_step_bytes"] / 2**30
    assert (one.predicted_reserved_gib == timed.predicted_reserved_gib).all()
    p = run_cli(["validate", ROOT, ROOT / "measurements.json", "--reserved", "one-step"])
    assert p.returncode == 2 and "has no reserved_one_step_bytes" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_the_capped_runs_that_ran_out_of_memory_did_so_by_tens_of_mib():
    """Issue 28's two capped-fit misses (the default allocator under 22 GiB: the 3.4B
    Llama's plan of session 24, the 1.1B's batch-4 plan of 18 offloaded blocks), measured
    again with the allocator's history from the process's start
    (traces/h200_reserved_heldout/remeasure_queue/capped_oom_h100, on an H100: the same failures, to the MiB of
    their error messages): each failing request needed a new segment that would have
    ended 18 and 22 MiB over the cap, where the engine fits the plan with 45 MiB to spare
    (0.2% of the cap): the miss is the reserved model's, by 0.3% of the cap."""
    from pathlib import Path

    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.trace import load_trace

    from .conftest import experiment
    root = Path(__file__).resolve().parents[1]
    mod = experiment("repeat_and_reserved/oom_state.py")
    d = root / "traces/h200_reserved_heldout/remeasure_queue/capped_oom_h100"
    gib = 2**30
    three = mod.state(str(d / "plan24-3b-22g-default-full.pickle.gz"), 22 * gib)
    one = mod.state(str(d / "llama1b-b4-k18-22g-default-full.pickle.gz"), 22 * gib)
    assert (three["request_mib"], one["request_mib"]) == (125.0, 1000.0)  # the logits
    assert 0 < three["over_cap_mib"] < 32 and 0 < one["over_cap_mib"] < 32
    trace = load_trace(root / "traces/h200_optimizer_offload/llama-3b_b1_s1024.yaml.gz")
    r = run_trace(trace, resolve_gpu("h200"), "vdnn_blocks", {"params": 3, "recompute": 7},
                  22 * gib, record=False, optimizer_offload=True)
    assert r.fits and 0 < 22 * gib - r.peak_footprint_bytes < 64 << 20


def test_a_fit_at_the_edge_of_its_cap_says_so():
    """NOTE [cap edge]: a PyTorch run the engine fits with under 0.5% of its cap to spare
    (default allocator) carries a note, the fit kept. The evidence the note rests on: the
    nine committed capped CNN runs fitted that close all trained; of the five Llama runs
    under 22 GiB fitted that close, the two that ran out of memory (session 24's 3.4B plan,
    the 1.1B at batch 4 with 18 blocks offloaded) and three that trained."""
    from pathlib import Path

    import pandas as pd

    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.trace import load_trace
    from vdnnsim.measured.validate import validate

    root = Path(__file__).resolve().parents[1]
    df = pd.concat([validate([root / d], root / d / "measurements.json")
                    for d in ("traces/h200_torchvision", "traces/h200_torchvision_heldout")])
    capped = df[df.cap_gib.notna() & df.predicted_fits]
    edge = capped[(capped.cap_gib - capped.predicted_reserved_gib) / capped.cap_gib < 0.005]
    assert len(edge) == 9 and edge.measured_fits.all()
    gpu, gib = resolve_gpu("h200"), 2**30
    three = load_trace(root / "traces/h200_optimizer_offload/llama-3b_b1_s1024.yaml.gz")
    one = {b: load_trace(root / f"traces/h200_llama_22gib/profiles_plans/llama-1b-b{b}-s2048-bf16.yaml.gz")
           for b in (2, 4)}
    runs = {  # measured under 22 GiB, default allocator: trained?
        "3.4B plan24": (three, {"params": 3, "recompute": 7}, True, False),
        "3.4B plan 21 GiB": (three, {"params": 5, "recompute": 4}, True, True),
        "1.1B b4 K18": (one[4], {"blocks": 18}, False, False),
        "1.1B b2 K12": (one[2], {"blocks": 12}, False, True),
        "1.1B b2 K22": (one[2], {"blocks": 22}, False, True)}
    for name, (trace, opts, cpu, trained) in runs.items():
        r = run_trace(trace, gpu, "vdnn_blocks", opts, 22 * gib, record=False,
                      optimizer_offload=cpu)
        assert r.fits and any("cap to spare" in n for n in r.notes), name
    assert sum(not x[3] for x in runs.values()) == 2
    exp = run_trace(three, gpu, "vdnn_blocks", {"params": 3, "recompute": 5}, 22 * gib,
                    record=False, optimizer_offload=True,
                    allocator={"expandable_segments": True})
    room = run_trace(three, gpu, "vdnn_blocks", {"params": 26, "blocks": 0}, 22 * gib,
                     record=False, optimizer_offload=True)
    assert not any("cap edge" in n for r in (exp, room) for n in r.notes)
