"""`vdnnsim reproduce`: run the shipped paper studies, measure every claim, write the table
(and figures)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from ..errors import ConfigError
from ..study import load_study, run_study
from .claims import CLAIMS, STUDIES, Frames, build_claims


def default_studies_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / "configs" / "paper"
    return here if here.exists() else Path("configs") / "paper"


def run_paper_studies(studies_dir: str | os.PathLike | None = None,
                      reading: str = "measured") -> Frames:
    """The paper studies; ``reading`` goes to every policy (NOTE [offload marks])."""
    d = Path(studies_dir) if studies_dir else default_studies_dir()
    frames: Frames = {}
    for name in STUDIES:
        path = d / f"{name}.yaml"
        if not os.path.isfile(path):
            raise ConfigError(f"{path}: no such study (give --studies the configs/paper folder)")
        spec, base = load_study(path)
        if reading != "measured":
            opts = {**(spec.base.get("policy_options") or {}), "reading": reading}
            spec = spec.model_copy(update={"base": {**spec.base, "policy_options": opts}})
        df = run_study(spec, base)
        bad = df[df.error.notna()]
        if len(bad):
            raise ConfigError(f"{path}: {bad.error.iloc[0]}")
        frames[name] = df
    return frames


def reproduce(studies_dir: str | os.PathLike | None = None,
              frames: Frames | None = None, reading: str = "measured",
              reference: str = "baseline_p") -> tuple[pd.DataFrame, Frames]:
    """One row per claim: paper value, vdnnsim's, difference, tolerance, met. ``reading``
    (NOTE [offload marks]) and ``reference`` (NOTE [reproduction metrics]) choose the
    readings of the paper; the defaults are the ones its measurements support."""
    frames = frames if frames is not None else run_paper_studies(studies_dir, reading)
    claims = CLAIMS if reference == "baseline_p" else build_claims(reference)
    rows = []
    for c in claims:
        value = float(c.measure(frames))
        rows.append({"id": c.id, "version": c.version, "gpu": c.gpu, "claim": c.what,
                     "unit": c.unit, "paper": c.paper, "vdnnsim": value,
                     "difference": value - c.paper, "tolerance": c.tolerance_text(),
                     "met": c.met(value), "note": c.note})
    return pd.DataFrame(rows), frames


def _fmt(v: float, unit: str) -> str:
    if unit in ("GB", "at most GB"):
        return f"{v:.2f}"
    if unit == "%":
        return f"{v:.1f}"
    if unit == "yes/no":
        return "yes" if v else "no"
    return f"{v:g}"


def table_markdown(table: pd.DataFrame) -> str:
    head = "| claim | paper | vdnnsim | diff | tolerance | met |"
    lines = []
    for version, part in table.groupby("version", sort=False):
        lines += ["", f"**{version}**", "", head, "|---|---:|---:|---:|---|:---:|"]
        for r in part.itertuples():
            unit = {"GB": " GB", "at most GB": " GB", "%": "%"}.get(r.unit, "")
            diff = "" if r.unit in ("yes/no",) else _fmt(r.difference, r.unit)
            lines.append(f"| {r.claim} | {_fmt(r.paper, r.unit)}{unit} | "
                         f"{_fmt(r.vdnnsim, r.unit)}{unit} | {diff} | {r.tolerance} | "
                         f"{'yes' if r.met else '**no**'} |")
    met = int(table.met.sum())
    lines += ["", f"{met} of {len(table)} claims within tolerance."]
    return "\n".join(lines).lstrip()
