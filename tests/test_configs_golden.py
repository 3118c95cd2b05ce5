"""Golden tests on the shipped configs: every config runs, and its numbers stay as
recorded in tests/golden/configs.json unless a change means to move them (then
`python -m tests.golden.regen configs`, and say in the commit why they moved).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .golden import CONFIG_KEYS as KEYS
from .golden import ROOT
from .golden import config_records as _records
from .golden import read, shipped_configs

CONFIGS = shipped_configs()


@pytest.fixture(scope="module")
def golden() -> dict:
    return read("configs")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_matches_golden(path: Path, golden: dict):
    got = _records(path)
    want = golden[path.name]
    assert [r["policy"] for r in got] == [r["policy"] for r in want]
    for g, w in zip(got, want):
        for k in KEYS:
            if isinstance(w[k], float):
                assert g[k] == pytest.approx(w[k], rel=1e-9), (path.name, g["policy"], k)
            else:
                assert g[k] == w[k], (path.name, g["policy"], k)


def test_every_config_is_covered(golden: dict):
    assert sorted(golden) == sorted(p.name for p in CONFIGS)


def test_demo_shows_the_papers_28_gb_baseline():
    by = {r["policy"]: r for r in _records(ROOT / "configs" / "demo.yaml")}
    assert 0.9 * 28e9 < by["baseline_p"]["peak_memory_bytes"] < 1.1 * 28e9
    assert not by["baseline_p"]["fits"]
    assert by["baseline_p"]["slowdown"] == 1.0
    assert by["vdnn_all_m"]["peak_memory_bytes"] < 0.6 * by["baseline_m"]["peak_memory_bytes"]
    assert by["vdnn_all_m"]["avg_memory_bytes"] < 0.25 * by["baseline_m"]["avg_memory_bytes"]
    # the paper's headline: vDNN trains VGG-16 (256) in the 12 GB card
    assert by["vdnn_all_m"]["fits"] and by["vdnn_dyn"]["fits"]
    assert by["vdnn_dyn"]["slowdown"] < by["vdnn_all_m"]["slowdown"]
