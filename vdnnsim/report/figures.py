"""Figures in the manner of the vDNN paper's, from study DataFrames (matplotlib, Agg).

Each function returns a matplotlib Figure; nothing is written unless the caller saves it.
Bars of runs that do not fit the card are hatched and faded: they show what the run
would need, which the paper's figures leave out.
"""

from __future__ import annotations

import matplotlib.pyplot as plt  # matplotlib picks a headless backend where there is no display
import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

from ..units import GB

POLICY_ORDER = ["baseline_m", "baseline_p", "vdnn_all_m", "vdnn_all_p", "vdnn_conv_m",
                "vdnn_conv_p", "vdnn_dyn"]

# NOTE [paper points]
# The bars the paper's text gives a value for, drawn as black diamonds over vdnnsim's bars:
# (figure, gpu, network, batch, policy, value in the figure's unit, the claim it states).
# The per-bar values of the paper's Figs. 11, 12, 14 and 15 are held against vdnnsim cell
# by cell in vdnnsim/paper/cells.py (`vdnnsim reproduce --cells`). The paper's "VGG-16" is
# the zoo's vgg19.
PAPER_POINTS: list[tuple[str, str, str, int, str, float, str]] = [
    ("memory_peak", "titanx_maxwell", "vgg19", 128, "vdnn_all_m", 4.8,
     "memory.vgg16_128_all_m_peak (at most)"),
    ("offload", "titanx_maxwell", "vgg19", 256, "vdnn_all_m", 16.0, "offload.vgg16_256_all"),
    ("performance", "titanx_maxwell", "vgg19", 128, "vdnn_all_m", 1 - 0.61,
     "speed.vgg16_128_all_m_loss"),
    ("performance", "titanx_maxwell", "vgg19", 256, "vdnn_dyn", 1 - 0.18,
     "speed.vgg16_256_dyn_loss"),
    ("performance", "k40", "vgg19", 256, "vdnn_dyn", 1 - 0.22, "speed.vgg16_256_dyn_loss"),
]


def _label(net: str, batch: int) -> str:
    return f"{net}\n({batch})"


def _cases(df: pd.DataFrame) -> list[tuple[str, int]]:
    seen: list[tuple[str, int]] = []
    for n, b in zip(df.network, df.batch_size):
        if (n, b) not in seen:
            seen.append((n, int(b)))
    return seen


def _grouped(ax, df: pd.DataFrame, value, policies: list[str], ylabel: str,
             figure: str = "", gpu: str = "") -> None:
    cases = _cases(df)
    width = 0.8 / len(policies)
    x = np.arange(len(cases))
    any_misfit = False
    for k, p in enumerate(policies):
        vals, fits = [], []
        for n, b in cases:
            sel = df[(df.network == n) & (df.batch_size == b) & (df.policy == p)]
            vals.append(value(sel.iloc[0]) if len(sel) else np.nan)
            fits.append(bool(sel.iloc[0].fits) if len(sel) and "fits" in sel else True)
        bars = ax.bar(x + (k - (len(policies) - 1) / 2) * width, vals, width, label=p)
        for bar, ok in zip(bars, fits):
            if not ok:  # what the run would need, had the card been large enough
                bar.set_hatch("///")
                bar.set_alpha(0.45)
        any_misfit |= not all(fits)
    if any_misfit:  # the legend says what hatching means (a proxy of no size)
        ax.add_patch(Rectangle((x[0], 0), 0, 0, facecolor="white", edgecolor="0.3",
                               hatch="///", label="hatched, faded: does not fit (what it "
                               "would need)"))
    points = [(x[cases.index((n, b))] + (policies.index(p) - (len(policies) - 1) / 2) * width,
               v) for f, g, n, b, p, v, _ in PAPER_POINTS
              if f == figure and g == gpu and (n, b) in cases and p in policies]
    if points:
        ax.plot(*zip(*points), "kD", ms=6, label="paper (text)")
    ax.set_xticks(x, [_label(n, b) for n, b in cases], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def memory_per_policy(df: pd.DataFrame, gpu: str) -> plt.Figure:
    """Maximum and average managed memory per policy per network (the paper's Fig. 10)."""
    d = df[df.gpu == gpu]
    fig, axes = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    _grouped(axes[0], d, lambda r: r.peak_managed_bytes / GB, POLICY_ORDER,
             "maximum GB (no weights)", "memory_peak", gpu)
    _grouped(axes[1], d, lambda r: r.avg_managed_bytes / GB, POLICY_ORDER,
             "average GB (no weights)")
    axes[0].set_title(f"Memory per policy on {gpu} (weights and weight gradients excluded)")
    axes[0].legend(ncol=4, fontsize=8)
    fig.tight_layout()
    return fig


def offload_traffic(df: pd.DataFrame, gpu: str) -> plt.Figure:
    d = df[df.gpu == gpu]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    _grouped(ax, d, lambda r: r.offloaded_bytes / GB, ["vdnn_all_m", "vdnn_conv_m", "vdnn_dyn"],
             "offloaded GB per iteration", "offload", gpu)
    ax.set_title(f"Offload traffic on {gpu}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def normalized_performance(df: pd.DataFrame, gpu: str) -> plt.Figure:
    d = df[df.gpu == gpu]
    fig, ax = plt.subplots(figsize=(11, 4.6))
    _grouped(ax, d, lambda r: 1 / r.slowdown, POLICY_ORDER,
             "performance / oracle", "performance", gpu)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylim(0, 1.1)
    ax.set_title(f"Normalized performance on {gpu} (oracle: fastest algorithms, "
                 "enough memory)")
    ax.legend(ncol=5, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16))  # not on bars
    fig.tight_layout()
    return fig


def deep_vgg_growth(df: pd.DataFrame, gpu: str) -> plt.Figure:
    d = df[df.gpu == gpu]
    nets = list(dict.fromkeys(d.network))
    base = [d[(d.network == n) & (d.policy == "baseline_p")].iloc[0] for n in nets]
    dyn = [d[(d.network == n) & (d.policy == "vdnn_dyn")].iloc[0] for n in nets]
    x = np.arange(len(nets))
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(x - 0.2, [r.peak_memory_bytes / GB for r in base], 0.4, label="baseline (p)")
    ax.bar(x + 0.2, [r.peak_memory_bytes / GB for r in dyn], 0.4, label="vDNN_dyn on the GPU")
    ax.axhline(12.88, color="r", lw=0.8, ls="--", label="12 GiB card")
    ax.set_xticks(x, nets)
    ax.set_ylabel("GB")
    ax2 = ax.twinx()
    share = [100 * r.offloaded_bytes / (r.offloaded_bytes + r.peak_memory_bytes) for r in dyn]
    ax2.plot(x, share, "ko-", label="host share (%)")
    ax2.set_ylim(0, 100)
    ax2.set_ylabel("% of allocations in host memory")
    ax.set_title(f"Very deep VGGs at batch 32 on {gpu}")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


# NOTE [paper beside]
# Every value of the paper's Figs. 11, 12, 14 and 15 beside vdnnsim's, in the paper's
# layout (networks along the axis, its policies in its order within each): the paper's bar
# is grey (cross-hatched where the paper marks the run failing), vdnnsim's follows it in its
# policy's colour, hatched and faded where the run does not fit 12 GB; a red cross above a
# pair marks a cell outside its tolerance. Drawn from the figure-cells table, so it shows
# what `vdnnsim reproduce --cells` judges and nothing else.
PAPER_PANELS = {
    "Fig11": [("max GPU memory", "maximum MiB"), ("avg GPU memory", "average MiB")],
    "Fig12": [("offloaded to pinned host", "MiB offloaded per iteration")],
    "Fig14": [("performance normalized to baseline", "performance / oracle")],
    "Fig15": [("GPU-side allocation", "MiB"), ("CPU-side allocation", "MiB")],
}
PAPER_TITLES = {
    "Fig11": "Fig. 11: maximum and average GPU memory (vDNN bars: no weights)",
    "Fig12": "Fig. 12: bytes offloaded to pinned host memory",
    "Fig14": "Fig. 14: performance normalized to the oracle",
    "Fig15": "Fig. 15: very deep VGGs (32) under vDNN_dyn",
}


def paper_beside(cells: pd.DataFrame, figure: str) -> plt.Figure:
    """The paper's ``figure`` bar by bar, each of its bars with vdnnsim's beside it;
    ``cells`` is vdnnsim/paper/cells.figure_cells's table."""
    panels = PAPER_PANELS[figure]
    d = cells[cells.figure == figure]
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.6 * len(panels)), squeeze=False)
    colours = dict(zip(dict.fromkeys(d.paper_policy), plt.rcParams["axes.prop_cycle"]
                       .by_key()["color"]))
    for ax, (quantity, ylabel) in zip(axes[:, 0], panels):
        q = d[d.quantity.str.startswith(quantity)]
        groups = list(dict.fromkeys(zip(q.network, q.batch_size)))
        pos, ticks = 0.0, []
        for n, b in groups:
            g = q[(q.network == n) & (q.batch_size == b)]
            start = pos
            for r in g.itertuples(index=False):
                ax.bar(pos, r.paper, 0.4, color="0.75", edgecolor="0.3", lw=0.5,
                       hatch="xx" if r.marked_fails else None)
                bar = ax.bar(pos + 0.4, r.vdnnsim, 0.4, color=colours[r.paper_policy],
                             label=r.paper_policy)[0]
                if not r.fits:
                    bar.set_hatch("///")
                    bar.set_alpha(0.45)
                if not r.holds:
                    ax.plot(pos + 0.2, max(r.paper, r.vdnnsim) * 1.04, "rx", ms=5)
                pos += 1.0
            ticks.append(((start + pos - 0.6) / 2, _label(n, b)))
            pos += 0.6
        ax.set_xticks([t for t, _ in ticks], [lab for _, lab in ticks], fontsize=8)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
        held = int(q.holds.sum())
        ax.set_title(f"{quantity}: {held} of {len(q)} cells hold", fontsize=9)
    proxies = [Rectangle((0, 0), 1, 1, color="0.75", ec="0.3", lw=0.5)]
    names = ["paper"]
    for p, c in colours.items():
        proxies.append(Rectangle((0, 0), 1, 1, color=c))
        names.append(f"vdnnsim {p}")
    proxies += [Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="0.3", hatch="///"),
                plt.Line2D([], [], color="r", marker="x", ls="")]
    proxies.insert(1, Rectangle((0, 0), 1, 1, facecolor="0.75", edgecolor="0.3", hatch="xx"))
    names.insert(1, "paper: marked failing")
    names += ["vdnnsim: does not fit 12 GB", "outside its tolerance"]
    fig.legend(proxies, names, ncol=6, fontsize=7, loc="lower center")  # below, off the bars
    fig.suptitle(PAPER_TITLES[figure] + " on titanx_maxwell: the paper (grey) and vdnnsim",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.1 / len(panels) + 0.03, 1, 1))
    return fig
