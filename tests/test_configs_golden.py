"""Golden tests on the shipped configs: every config runs, and its numbers stay as
recorded in tests/golden/configs.json unless a change means to move them.

Regenerate after an intended change with:
    VDNNSIM_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_configs_golden.py
and say in the commit why the numbers moved.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vdnnsim.api import run_config
from vdnnsim.config import load_config

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden" / "configs.json"
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
KEYS = ("policy", "fits", "peak_memory_bytes", "avg_memory_bytes", "iteration_time_s",
        "slowdown", "offloaded_bytes", "stall_time_s", "oom_layer", "oom_tensor")


def _records(path: Path) -> list[dict]:
    cfg, base = load_config(path)
    return [{k: r.summary()[k] for k in KEYS} for r in run_config(cfg, base)]


@pytest.fixture(scope="module")
def golden() -> dict:
    if os.environ.get("VDNNSIM_REGEN_GOLDEN"):
        data = {p.name: _records(p) for p in CONFIGS}
        GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return json.loads(GOLDEN.read_text())


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
