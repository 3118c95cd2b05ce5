"""The paper's Figs. 11, 12, 14 and 15, bar by bar, beside vdnnsim (docs/reproduction.md,
"The paper's figures, cell by cell").

NOTE [paper memory scope]
The paper's memory bars are MiB (its axes say MB), and each figure counts its own scope:
Fig. 4's totals, Fig. 11's baseline bars and Fig. 15's GPU-side bars count the weights once
(not their gradients) with feature maps, gradient maps and workspace (``weights+managed``);
Fig. 11's vDNN bars count only the memory vDNN manages, no weights (``managed``); Fig. 15's
CPU side the pinned host memory (``host``); Fig. 12 the bytes offloaded per iteration under
memory-optimal algorithms (``offloaded``); Fig. 14 oracle time / iteration time (``time``).
A cell's ``paper_peak_bytes`` and ``paper_avg_bytes`` are vdnnsim's peak and time-weighted
average GPU memory under its scope. The evidence, read from the figures themselves:
docs/reproduction.md, "The paper's figures, cell by cell".

NOTE [figure cells]
A cell is one value of Figs. 11, 12, 14 or 15 (192). It holds when vdnnsim's value is
within the cell's tolerance (memory: 10% of the paper's value or 100 MiB, whichever is
larger; normalized performance and the savings markers: 0.05) and vdnnsim's run fits 12 GB
exactly when the paper does not mark it failing (``marked_fails``).
"""

from __future__ import annotations

from importlib import resources
from io import StringIO

import pandas as pd

from ..errors import ConfigError
from ..units import MiB
from .claims import OVERFEAT, VGG16, Frames, row

FIGURES = ("Fig11", "Fig12", "Fig14", "Fig15")
GPU = "titanx_maxwell"
NETWORKS = {"AlexNet": "alexnet", "OverFeat": OVERFEAT, "GoogLeNet": "googlenet",
            "VGG-16": VGG16, "VGG-116": "vgg116", "VGG-216": "vgg216", "VGG-316": "vgg316",
            "VGG-416": "vgg416"}
POLICIES = {"all(m)": "vdnn_all_m", "all(p)": "vdnn_all_p", "conv(m)": "vdnn_conv_m",
            "conv(p)": "vdnn_conv_p", "dyn": "vdnn_dyn", "base(m)": "baseline_m",
            "base(p)": "baseline_p", "base": "baseline_p",
            # Fig. 12: offloaded bytes, the same under either algorithm class
            "all": "vdnn_all_m", "conv": "vdnn_conv_m"}
MEMORY_TOLERANCE_REL = 0.10
MEMORY_TOLERANCE_MIB = 100.0
RATIO_TOLERANCE = 0.05


def figure_values() -> pd.DataFrame:
    """The 395 values read from the paper's figures (vdnnsim/data/reference/README.md)."""
    text = resources.files("vdnnsim").joinpath("data/reference/vdnn_figures.csv").read_text()
    df = pd.read_csv(StringIO(text), dtype={"marked_fails": str})
    df["marked_fails"] = df.marked_fails.fillna("").eq("yes")
    return df


def scope(figure: str, policy: str, quantity: str) -> str:
    """The reading of one cell, under its figure's scope."""
    if figure == "Fig14":
        return "time"
    if figure == "Fig12":
        return "offloaded"
    if "CPU-side" in quantity:
        return "host"
    if figure == "Fig15" or policy.startswith("base"):
        return "weights+managed"
    return "managed"


def paper_bytes(r: pd.Series, scope_: str) -> tuple[float, float]:
    """(peak, time-weighted average) GPU bytes of run ``r`` under ``scope_``. The run's
    ``weight_bytes`` are the weights and their gradients (equal sizes): the paper counts
    the weights once."""
    weights = r.weight_bytes / 2 if scope_ == "weights+managed" else 0.0
    return float(r.peak_managed_bytes + weights), float(r.avg_managed_bytes + weights)


def _study(figure: str) -> str:
    return "deep_vgg" if figure == "Fig15" else "conventional_policies"


def _value(f: Frames, cell: pd.Series) -> tuple[float, float, float, bool, str]:
    """vdnnsim's value of ``cell``, with paper_peak_bytes, paper_avg_bytes, fits, scope."""
    net, policy = NETWORKS[cell.network], POLICIES[cell.policy]
    r = row(f, _study(cell.figure), net, int(cell.batch_size), GPU, policy)
    sc = scope(cell.figure, cell.policy, cell.quantity)
    peak, avg = paper_bytes(r, sc)
    q = cell.quantity
    if sc == "time":
        value = r.oracle_time_s / r.iteration_time_s
    elif sc == "offloaded":
        value = r.offloaded_bytes / MiB
    elif sc == "host":
        value = r.peak_host_bytes / MiB
    elif q.startswith("avg GPU memory"):
        value = avg / MiB
    elif q.startswith("max GPU memory") or q.startswith("GPU-side"):
        value = peak / MiB
    elif q.startswith("avg memory savings"):
        base = row(f, _study(cell.figure), net, int(cell.batch_size), GPU, "baseline_p")
        value = 1 - avg / paper_bytes(base, "weights+managed")[1]
    else:
        raise ConfigError(f"vdnn_figures.csv: {cell.figure} has no reading for {q!r}")
    return float(value), peak, avg, bool(r.fits), sc


def tolerance(unit: str, paper: float) -> float:
    """The absolute tolerance of a cell of ``unit``."""
    if unit == "MB":
        return max(MEMORY_TOLERANCE_REL * abs(paper), MEMORY_TOLERANCE_MIB)
    return RATIO_TOLERANCE


def figure_cells(frames: Frames) -> pd.DataFrame:
    """One row per value of Figs. 11, 12, 14 and 15: the cell, the paper's value,
    vdnnsim's, the tolerance and whether it holds."""
    vals = figure_values()
    vals = vals[vals.figure.isin(FIGURES)]
    rows = []
    for c in vals.itertuples(index=False):
        cell = pd.Series(c._asdict())
        value, peak, avg, fits, sc = _value(frames, cell)
        tol = tolerance(c.unit, c.value)
        within = abs(value - c.value) <= tol
        agrees = fits != bool(c.marked_fails)
        rows.append({
            "cell": f"{c.figure} {c.network} ({int(c.batch_size)}) {c.policy}: {c.quantity}",
            "figure": c.figure, "network": NETWORKS[c.network], "batch_size": int(c.batch_size),
            "policy": POLICIES[c.policy], "paper_policy": c.policy, "quantity": c.quantity,
            "unit": "MiB" if c.unit == "MB" else c.unit, "scope": sc,
            "paper": float(c.value), "vdnnsim": value, "difference": value - c.value,
            "tolerance": tol, "within": bool(within), "marked_fails": bool(c.marked_fails),
            "fits": fits, "fails_agree": bool(agrees), "holds": bool(within and agrees),
            "paper_peak_bytes": peak, "paper_avg_bytes": avg})
    return pd.DataFrame(rows)


def marker_check() -> pd.DataFrame:
    """Fig. 11's savings markers against 1 - avg bar / base(p)'s avg bar, from the paper's
    own values (Fig. 11's markers are 1 - a bar's average / base(p)'s): one row per marker, with the difference."""
    v = figure_values()
    v = v[v.figure == "Fig11"]
    out = []
    for (net, b), g in v.groupby(["network", "batch_size"], sort=False):
        avg = g[g.quantity == "avg GPU memory"].set_index("policy").value
        for m in g[g.quantity.str.startswith("avg memory savings")].itertuples():
            out.append({"network": net, "batch_size": b, "policy": m.policy,
                        "marker": m.value, "from_bars": 1 - avg[m.policy] / avg["base(p)"]})
    df = pd.DataFrame(out)
    df["difference"] = df.from_bars - df.marker
    return df


def cells_summary(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells that hold per figure, and how many fails marks agree (per configuration)."""
    per = cells.groupby("figure").agg(cells=("holds", "size"), hold=("holds", "sum"))
    per.loc["all"] = [len(cells), int(cells.holds.sum())]
    return per.astype(int)


def fails_agreement(cells: pd.DataFrame) -> tuple[int, int]:
    """(configurations whose fits agrees with the paper's mark, configurations): one per
    figure, network, batch and policy."""
    cfg = cells.drop_duplicates(["figure", "network", "batch_size", "paper_policy"])
    return int(cfg.fails_agree.sum()), len(cfg)


def _num(v: float, unit: str) -> str:
    return f"{v:.0f}" if unit == "MiB" else f"{v:.3f}"


def cells_markdown(cells: pd.DataFrame) -> str:
    """The cells as one markdown table per figure, with the counts."""
    lines: list[str] = []
    head = ("| network | policy | quantity | unit | paper | vdnnsim | diff | tolerance | "
            "fails (paper/vdnnsim) | holds |")
    for fig, part in cells.groupby("figure", sort=False):
        lines += ["", f"**{fig}** ({int(part.holds.sum())} of {len(part)} hold)", "", head,
                  "|---|---|---|---|---:|---:|---:|---:|:---:|:---:|"]
        for r in part.itertuples():
            fails = f"{'yes' if r.marked_fails else '-'}/{'-' if r.fits else 'yes'}"
            lines.append(
                f"| {r.network} ({r.batch_size}) | {r.paper_policy} | {r.quantity} | {r.unit} | "
                f"{_num(r.paper, r.unit)} | {_num(r.vdnnsim, r.unit)} | "
                f"{'+' if r.difference > 0 else ''}{_num(r.difference, r.unit)} | "
                f"±{_num(r.tolerance, r.unit)} | {fails} | {'yes' if r.holds else '**no**'} |")
    agree, n = fails_agreement(cells)
    lines += ["", f"{int(cells.holds.sum())} of {len(cells)} figure cells hold; the paper's "
              f"fails marks agree with vdnnsim's fits in {agree} of {n} configurations."]
    return "\n".join(lines).lstrip()


def cells_count_markdown(cells: pd.DataFrame) -> str:
    """The cells that hold, per figure (the full table: ``vdnnsim reproduce --cells``)."""
    per = cells_summary(cells)
    agree, n = fails_agreement(cells)
    lines = ["**v3 (Titan X): the figures, cell by cell** (`vdnnsim reproduce --cells`)", "",
             "| figure | cells | hold |", "|---|---:|---:|"]
    lines += [f"| {fig} | {r.cells} | {r.hold} |" for fig, r in per.iterrows()]
    lines += ["", f"{per.loc['all', 'hold']} of {per.loc['all', 'cells']} figure cells hold "
              "(memory within 10% or 100 MiB, normalized performance and savings within 0.05, "
              f"fits agreeing with the paper's fails marks); fails marks agree in {agree} of "
              f"{n} configurations."]
    return "\n".join(lines)


def reproduction_json(claims: pd.DataFrame, cells: pd.DataFrame) -> dict:
    """`vdnnsim reproduce --json`: the claims and the figure cells, with their counts."""
    import json
    agree, n = fails_agreement(cells)
    per = cells_summary(cells)
    return {
        "claims": json.loads(claims.to_json(orient="records")),
        "claims_met": int(claims.met.sum()), "claims_total": len(claims),
        "figure_cells": json.loads(cells.to_json(orient="records")),
        "cells_hold": int(cells.holds.sum()), "cells_total": len(cells),
        "cells_per_figure": {fig: {"cells": int(r.cells), "hold": int(r.hold)}
                             for fig, r in per.iterrows() if fig != "all"},
        "fails_marks_agree": agree, "fails_marks_total": n,
    }
