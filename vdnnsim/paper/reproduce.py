"""`vdnnsim reproduce`: run the shipped paper studies, measure every claim, write the table
(and figures)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import ConfigError
from ..study import load_study, run_study
from .claims import CLAIMS, STUDIES, Frames, build_claims


def default_studies_dir() -> Path:
    """The paper studies shipped in the package (vdnnsim/data/paper; the repository's
    configs/paper links there), so that an installed wheel reproduces the paper too."""
    return Path(__file__).resolve().parents[1] / "data" / "paper"


COSTS = ("preset", "published")


def published_scales() -> dict[str, dict[str, float]]:
    """The K40's and Titan X's compute and DRAM scales fitted to published timings.

    NOTE [published costs]
    ``costs='published'`` times the paper's GPUs with compute and DRAM rates fitted to
    published cuDNN timings of networks the paper does not judge (vdnnsim/costs/fits.py on
    traces/published/, shipped as vdnnsim/data/calibration/published.json), so that no
    number of the paper itself tunes the model that is judged against it.
    """
    from importlib import resources
    text = resources.files("vdnnsim").joinpath("data/calibration/published.json").read_text()
    return json.loads(text)["gpus"]


def _with_costs(spec: Any, costs: str) -> Any:
    """``spec`` with each paper GPU replaced by the preset under its published scales."""
    if costs == "preset":
        return spec
    from ..hardware import gpu_preset
    scales = published_scales()

    def gpu(g: Any) -> Any:
        if isinstance(g, str) and g in scales:
            s = scales[g]
            return {"preset": g, "peak_flops_scale": s["peak_flops_scale"],
                    "mem_bw_bytes_per_s": gpu_preset(g).mem_bw_bytes_per_s * s["mem_bw_scale"]}
        return g

    def section(d: dict[str, Any], many: bool) -> dict[str, Any]:
        if "gpu" not in d:
            return d
        return {**d, "gpu": [gpu(g) for g in d["gpu"]] if many else gpu(d["gpu"])}

    return spec.model_copy(update={
        "base": section(spec.base, False), "sweep": section(spec.sweep, True),
        "zip": section(spec.zip, True), "runs": [section(r, False) for r in spec.runs]})


def run_paper_studies(studies_dir: str | os.PathLike | None = None,
                      reading: str = "measured", costs: str = "preset") -> Frames:
    """The paper studies; ``reading`` goes to every policy (NOTE [offload marks]);
    ``costs='published'`` times the paper's GPUs with their published calibration."""
    if costs not in COSTS:
        raise ConfigError(f"costs must be one of {', '.join(COSTS)}, got {costs!r}")
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
        spec = _with_costs(spec, costs)
        df = run_study(spec, base)
        df["gpu"] = [g["preset"] if isinstance(g, dict) else g for g in df["gpu"]]
        bad = df[df.error.notna()]
        if len(bad):
            raise ConfigError(f"{path}: {bad.error.iloc[0]}")
        frames[name] = df
    return frames


AVERAGES = ("time", "layer")


def with_average(frames: Frames, average: str = "time") -> Frames:
    """The frames with the paper's averages read ``average``: 'time' (the time-weighted
    mean, the default) or 'layer' (the mean over the layer passes, ``layer_avg_managed_bytes``),
    which the claims and cells then read as ``avg_*``."""
    if average not in AVERAGES:
        raise ConfigError(f"average must be one of {', '.join(AVERAGES)}, got {average!r}")
    if average == "time":
        return frames
    return {k: v.assign(avg_memory_bytes=v.layer_avg_memory_bytes,
                        avg_managed_bytes=v.layer_avg_managed_bytes) for k, v in frames.items()}


def reproduce(studies_dir: str | os.PathLike | None = None,
              frames: Frames | None = None, reading: str = "measured",
              reference: str = "baseline_p", costs: str = "preset", average: str = "time"
              ) -> tuple[pd.DataFrame, Frames]:
    """One row per claim: paper value, vdnnsim's, difference, tolerance, met. ``reading``
    and ``reference`` choose the readings of the paper; the defaults are the ones its
    measurements support. ``costs``: the presets' analytic costs, or the paper GPUs'
    published calibration. ``average``: how the paper's averages are read
    (``with_average``); the frames returned are so read."""
    frames = frames if frames is not None else run_paper_studies(studies_dir, reading, costs)
    frames = with_average(frames, average)
    claims = CLAIMS if reference == "baseline_p" else build_claims(reference)
    rows = []
    for c in claims:
        value = float(c.measure(frames))
        rows.append({"id": c.id, "version": c.version, "gpu": c.gpu, "claim": c.what,
                     "unit": c.unit, "unit_label": c.unit_label, "paper": c.paper, "vdnnsim": value,
                     "difference": value - c.paper, "tolerance": c.tolerance_text(),
                     "met": c.met(value), "note": c.note})
    return pd.DataFrame(rows), frames


def _fmt(v: float, unit: str, signed: bool = False) -> str:
    sign = "+" if signed and v else ""
    if unit in ("GB", "at most GB"):
        return f"{v:{sign}.2f}"
    if unit == "%":
        return f"{v:{sign}.1f}"
    if unit == "yes/no":
        return "yes" if v else "no"
    return f"{v:{sign}g}"


UNITS_LEGEND = ("Units: GB = 1000 MiB, the paper's (its text's GB are its figures' MiB over "
                "1000); % loss = 1 - oracle time / iteration time (a "
                "performance loss, never a slowdown ratio); % cut = memory saved against the "
                "baseline; % on host = offloaded / (offloaded + GPU peak); a difference of "
                "percentages is in points (pts).")


def table_markdown(table: pd.DataFrame) -> str:
    """One table per paper version; each row carries its unit, so the paper, vdnnsim and
    diff columns hold numbers of that one unit."""
    head = "| claim | unit | paper | vdnnsim | diff | tolerance | met |"
    lines = []
    for version, part in table.groupby("version", sort=False):
        lines += ["", f"**{version}**", "", head, "|---|---|---:|---:|---:|---|:---:|"]
        for r in part.itertuples():
            diff = "" if r.unit == "yes/no" else _fmt(r.difference, r.unit, signed=True) + (
                " pts" if r.unit == "%" else "")
            lines.append(f"| {r.claim} | {r.unit_label} | {_fmt(r.paper, r.unit)} | "
                         f"{_fmt(r.vdnnsim, r.unit)} | {diff} | {r.tolerance} | "
                         f"{'yes' if r.met else '**no**'} |")
    met = int(table.met.sum())
    lines += ["", UNITS_LEGEND, "", f"{met} of {len(table)} claims within tolerance."]
    return "\n".join(lines).lstrip()
