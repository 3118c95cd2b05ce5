"""NOTE [calibration fits]: each fit of a constant the package ships, re-run on the
measurements committed under traces/, gives what the package ships (the h200 preset's host
block in vdnnsim/data/gpus.yaml, vdnnsim/data/calibration/published.json). The kernel-time
model's own fit is checked in tests/test_kernelmodel.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vdnnsim.costs import fits as cf

ROOT = Path(__file__).resolve().parents[1]


def test_the_module_imports_without_torch():
    code = ("import sys; import vdnnsim.costs.fits as m; "
            "m.segment_costs(); m.kernel_counts(); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_segment_costs_are_the_presets():
    fitted, _ = cf.segment_costs()
    assert fitted == {"segment_malloc_ns": 65762, "segment_malloc_ns_per_gib": 88766,
                      "segment_free_ns": 47488, "segment_free_ns_per_gib": 326466}
    assert cf.differences("segments", fitted) == []


def test_the_launch_queue_and_kernels_per_layer_are_the_presets():
    fitted, _ = cf.kernel_counts()
    assert fitted == {"launch_queue": 1021, "layer_kernels_fwd": 1.70, "layer_kernels_bwd": 2.40}
    assert cf.differences("kernels", fitted) == []


@pytest.mark.slow
def test_the_host_costs_are_the_presets():
    pytest.importorskip("torchvision")
    fitted, lines = cf.host_costs()
    assert cf.differences("host", fitted) == []
    assert set(fitted) == set(cf.shipped("host")) and len(fitted) == 10
    assert "views: 5 layers without a kernel in the profiles" in lines


def test_a_changed_measurement_shows_as_a_difference(tmp_path):
    """The check can fail: a calibration file edited by 10% moves the fit off the preset."""
    src = ROOT / "traces" / "h200_allocator_costs"
    (tmp_path / "h200_allocator_costs").mkdir()
    for n in (1, 2):
        d = json.loads((src / f"alloc_costs{n}.json").read_text())
        for s in d["sizes"]:
            s["malloc_us"] *= 1.1
        (tmp_path / "h200_allocator_costs" / f"alloc_costs{n}.json").write_text(json.dumps(d))
    fitted, _ = cf.segment_costs(tmp_path)
    diff = cf.differences("segments", fitted)
    assert [d.split(":")[0] for d in diff] == ["segment_malloc_ns", "segment_malloc_ns_per_gib"]


def test_the_published_timings_are_those_published_json_was_fitted_to():
    """The data the published fit reads are the numbers published.json sets beside its
    calibrated times (quick; the fit itself is the slow test below)."""
    src = json.loads((ROOT / "traces" / "published" / "cnn_benchmarks.json").read_text())
    have = cf.shipped("published")
    assert have["source"] == src["source"] and have["method"] == cf.PUBLISHED_METHOD
    for g, nets in src["gpus"].items():
        assert list(have["gpus"][g]["fit"]) == list(nets)
        for n, v in nets.items():
            assert have["gpus"][g]["fit"][n]["measured_ms"] == [
                v["forward_ms"], round(v["total_ms"] - v["forward_ms"], 2)]


@pytest.mark.slow
def test_the_published_scales_are_published_json():
    pytest.importorskip("torchvision")
    fitted, _ = cf.published()
    assert cf.differences("published", fitted) == []
    assert fitted == cf.shipped("published")


def test_the_command_checks_and_refuses_in_one_line(tmp_path):
    run = [sys.executable, "-m", "vdnnsim.costs.fits"]
    r = subprocess.run([*run, "segments", "--check"], cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "as the package ships it", r.stderr
    r = subprocess.run([*run, "kernels", "--traces", str(tmp_path)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("vdnnsim: error: ") and "h200_host_calibration" in r.stderr
    r = subprocess.run([*run, "segments", "--write"], capture_output=True, text=True)
    assert r.returncode == 2 and "--write is for published only" in r.stderr
