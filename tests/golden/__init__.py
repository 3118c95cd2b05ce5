"""Recorded numbers the golden tests compare against, and how they are made.

The tests only read these files. After a change that means to move the numbers, run
    .venv/bin/python -m tests.golden.regen [configs|reproduction|figure_cells|validation]
from the repository root, and say in the commit why they moved.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
CONFIG_KEYS = ("policy", "fits", "peak_memory_bytes", "avg_memory_bytes", "iteration_time_s",
               "slowdown", "offloaded_bytes", "stall_time_s", "oom_layer", "oom_tensor")


def shipped_configs() -> list[Path]:
    return sorted((ROOT / "configs").glob("*.yaml"))


def config_records(path: Path) -> list[dict]:
    from vdnnsim.api import run_config
    from vdnnsim.config import load_config

    cfg, base = load_config(path)
    return [{k: r.summary()[k] for k in CONFIG_KEYS} for r in run_config(cfg, base)]


def reproduction_records(table) -> dict:
    return {f"{r.id}@{r.gpu}": {"vdnnsim": r.vdnnsim, "met": bool(r.met)}
            for r in table.itertuples()}


def figure_cell_records(cells) -> dict:
    """NOTE [figure cells]: every cell of the paper's Figs. 11, 12, 14, 15 with its paper
    value, tolerance, vdnnsim's value and whether it holds."""
    return {r.cell: {"paper": r.paper, "tolerance": r.tolerance, "vdnnsim": r.vdnnsim,
                     "holds": bool(r.holds)} for r in cells.itertuples()}


def validation_summary() -> dict:
    from vdnnsim.measured.validate import summarize, validate

    h200 = ROOT / "traces" / "h200_torchvision"
    held = ROOT / "traces" / "h200_torchvision_heldout"
    return {**summarize(validate(h200, h200 / "measurements.json")),
            "heldout": summarize(validate(held, held / "measurements.json"))}


def read(name: str) -> dict:
    return json.loads((HERE / f"{name}.json").read_text())


def write(name: str, data: dict) -> None:
    (HERE / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
