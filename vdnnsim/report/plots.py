"""Plots (matplotlib, Agg) for runs, sweeps and validation. Each returns a Figure; nothing
is written unless the caller saves it (or ``vdnnsim plot ... -o FILE``)."""

from __future__ import annotations

import matplotlib.pyplot as plt  # matplotlib picks a headless backend where there is no display
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..units import GB
from .table import need_times

COLORS = {"host": "tab:purple", "compute": "tab:blue", "d2h": "tab:orange", "h2d": "tab:green",
          "stall": "tab:red", "wait": "tab:gray"}
TRACKS = ("host", "compute", "d2h", "h2d")
# what each colour of the timeline means (its legend), in the order of the tracks
TIMELINE_LEGEND = (("host", "host issuing work"), ("wait", "host waiting for the GPU"),
                   ("compute", "compute (kernels)"),
                   ("stall", "compute stalled on a copy"),
                   ("d2h", "D2H copy (offload)"), ("h2d", "H2D copy (prefetch)"))
# NOTE [plot legibility]
# Series of a sweep often coincide (vdnn_dyn is vdnn_all_p wherever step 2 picks it; the _m
# and _p policies have the same peak when no workspace matters). Each policy gets its own
# marker and line style, earlier series are drawn wider and larger so that a later one on
# top of them leaves them visible, and a series equal to an earlier one says so in the
# legend. Whether a run fits is in every figure: hollow markers (sweep), "does not fit" in
# the legend (memory) or the title (timeline); a run that does not fit is drawn as if the
# card had the memory (the pool keeps going past its capacity).
MARKERS = "osD^vPX*<>"
STYLES = ("-", "--", "-.", (0, (4, 1, 1, 1, 1, 1)))  # ":" is kept for runs that do not fit
AS_IF = "drawn as if it had the memory"
NOT_FIT = f"does not fit ({AS_IF})"


def memory_over_time(results) -> plt.Figure:
    """Live GPU memory over one iteration, one line per run (policy)."""
    need_times(results, "memory over time to draw")
    fig, ax = plt.subplots(figsize=(9, 4))
    for k, r in enumerate(results):
        m = r.memory
        t = list(m.time_ns) + [r.iteration_time_ns]
        y = list(m.allocated_bytes) + [m.allocated_bytes.iloc[-1]]
        label = r.policy if r.fits else f"{r.policy}: {NOT_FIT}"
        ax.step([x / 1e6 for x in t], [v / GB for v in y], where="post", label=label,
                ls=STYLES[k % len(STYLES)] if r.fits else ":", lw=max(2.2 - 0.4 * k, 1.0),
                color=f"C{k % 10}")
    if results and results[0].capacity_bytes:
        cap = results[0].capacity_bytes / GB
        ax.axhline(cap, color="k", ls="--", lw=0.8, label=f"pool capacity {cap:.2f} GB")
    ax.set_xlabel("time in the iteration (ms)")
    ax.set_ylabel("allocated GB")
    r0 = results[0]
    ax.set_title(f"{r0.network} (batch {r0.batch_size}) on {r0.gpu}: memory over an iteration")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def stream_timeline(results) -> plt.Figure:
    """The host (issuing in colour, waiting in grey), compute, D2H, H2D and stalls per run,
    as horizontal bars."""
    need_times(results, "timeline to draw")
    fig, axes = plt.subplots(len(results), 1, figsize=(10, 1.3 * len(results) + 0.8),
                             sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        tl = r.timeline
        top = len(TRACKS) - 1
        for row, stream in enumerate(TRACKS):
            part = tl[tl.stream == stream]
            odd = "wait" if stream == "host" else "stall"
            for kind, color in ((odd, COLORS[odd]), (None, COLORS[stream])):
                sel = part[part.kind == odd] if kind else part[part.kind != odd]
                ax.broken_barh([(s / 1e6, d / 1e6) for s, d in zip(sel.start_ns, sel.dur_ns)],
                               (top - row - 0.4, 0.8), color=color)
        ax.set_yticks([3, 2, 1, 0], ["host", "compute", "D2H", "H2D"], fontsize=7)
        o = r.oom
        where = "" if o is None else (f"{o.layer} {o.phase}: {o.tensor}" if o.layer
                                      else f"{o.phase}: {o.tensor}")  # as the run table says
        fit = "" if r.fits else f"; DOES NOT FIT: out of memory at {where} ({AS_IF})"
        ax.set_title(f"{r.policy}: {r.iteration_time_s * 1e3:.1f} ms, stalls "
                     f"{r.stall_time_ns / 1e6:.1f} ms, waiting for the host "
                     f"{r.host_bound_time_ns / 1e6:.1f} ms{fit}", fontsize=8, loc="left",
                     color="black" if r.fits else "tab:red")
    axes[-1, 0].set_xlabel("time (ms)")
    fig.legend(handles=[Patch(color=COLORS[k], label=label) for k, label in TIMELINE_LEGEND],
               loc="upper center", ncol=3, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    return fig


def sweep_curves(df: pd.DataFrame, x: str = "batch_size") -> plt.Figure:
    """Peak memory and slowdown against ``x`` per policy (one panel pair per network and
    GPU), NOTE [plot legibility]; the dashed line is the pool's capacity. A memory-only
    trace's runs (``timed`` false) have no slowdown: their panel says so."""
    from .table import UNTIMED_NOTE, untimed
    df = df[df.get("error").isna()] if "error" in df else df
    if "timed" in df:
        df = df.assign(slowdown=df.slowdown.where(~df.timed.map(untimed)))
    keys = list(dict.fromkeys(zip(df.network, df.gpu)))
    fig, axes = plt.subplots(2, len(keys), figsize=(5 * len(keys), 7), squeeze=False,
                             sharex="col")
    for col, (net, gpu) in enumerate(keys):
        part = df[(df.network == net) & (df.gpu == gpu)]
        handles, seen = [], {}
        for k, (policy, g) in enumerate(part.groupby("policy", sort=False)):
            g = g.sort_values(x)
            peak, slow = g.peak_memory_bytes / GB, g.slowdown.astype(float)
            key = (tuple(g[x]), tuple(np.round(peak, 6)), tuple(np.round(slow.fillna(-1), 6)),
                   tuple(g.fits))
            label = policy if key not in seen else f"{policy} (same as {seen[key]})"
            seen.setdefault(key, policy)
            color = f"C{k % 10}"
            style = dict(color=color, marker=MARKERS[k % len(MARKERS)], zorder=2 + k,
                         ms=max(9.0 - 1.5 * k, 4.5), lw=max(3.0 - 0.6 * k, 1.3))
            for ax, yv in ((axes[0, col], peak), (axes[1, col], slow)):
                ax.plot(g[x], yv, ls=STYLES[k % len(STYLES)], lw=style["lw"], color=color,
                        zorder=style["zorder"], alpha=0.9)
                fits = g.fits.astype(bool)
                ax.plot(g[x][fits], yv[fits], ls="none", **{**style, "lw": 0})
                ax.plot(g[x][~fits], yv[~fits], ls="none", mfc="white", mew=1.5,
                        **{**style, "lw": 0})
            handles.append(Line2D([], [], ls=STYLES[k % len(STYLES)], label=label,
                                  **{**style, "ms": 6.0, "lw": 1.5}))
        handles.append(Line2D([], [], color="0.3", marker="o", ls="none", label="fits"))
        handles.append(Line2D([], [], color="0.3", marker="o", ls="none", mfc="white",
                              label=NOT_FIT.replace(" (", "\n(")))
        caps = sorted({c / GB for c in part.capacity_bytes if c}) if len(part) else []
        for cap in caps:
            axes[0, col].axhline(cap, color="k", ls="--", lw=0.8, zorder=1)
        if caps:
            shown = (", ".join(f"{c:.2f}" for c in caps) + " GB" if len(caps) <= 3
                     else f"({len(caps)} values, {caps[0]:.2f}-{caps[-1]:.2f} GB)")
            handles.append(Line2D([], [], color="k", ls="--", lw=0.8,
                                  label=f"pool capacity {shown}"))
        if "timed" in part and part.timed.map(untimed).any():
            axes[1, col].text(0.5, 0.5, UNTIMED_NOTE.replace(": ", ":\n"), ha="center",
                              va="center", transform=axes[1, col].transAxes, color="tab:red")
            if part.timed.map(untimed).all():  # no scale that reads as a slowdown of 0
                axes[1, col].set_yticks([])
        axes[0, col].set_title(f"{net} on {gpu}")
        axes[0, col].set_ylabel("peak GB")
        axes[1, col].set_ylabel("slowdown (iteration / oracle)")
        axes[1, col].set_xlabel(x)
        axes[0, col].legend(handles=handles, fontsize=7, loc="upper left", framealpha=0.85)
        for ax in axes[:, col]:
            ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def validation_scatter(df: pd.DataFrame) -> plt.Figure:
    """Predicted against measured peak allocated memory and iteration time; a measured
    time's band (the fresh processes' medians, min to max) as an error bar."""
    d = df[df.measured_fits]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    left_out = len(df) - len(d)
    for ax, (m, p, label) in zip(axes, (("measured_alloc_gib", "predicted_alloc_gib",
                                         "peak allocated (GiB)"),
                                        ("measured_ms", "predicted_ms", "iteration (ms)"))):
        banded = False
        for k, (policy, g) in enumerate(d.groupby("policy")):
            if m == "measured_ms" and "time_band_min" in g:
                b = g[g.time_band_min.notna()]
                if len(b):
                    banded = True
                    ax.errorbar(b[m], b[p], xerr=[b[m] - b.time_band_min,
                                                  b.time_band_max - b[m]],
                                fmt="none", ecolor=f"C{k}", elinewidth=0.8, capsize=2)
            fit = g.predicted_fits.astype(bool) if "predicted_fits" in g else g[m] == g[m]
            ax.scatter(g[m][fit], g[p][fit], label=policy, s=18, color=f"C{k}",
                       marker=MARKERS[k % len(MARKERS)])
            ax.scatter(g[m][~fit], g[p][~fit], s=18, facecolors="none",
                       edgecolors=f"C{k}", marker=MARKERS[k % len(MARKERS)])
        hi = max(d[m].max(), d[p].max()) * 1.05
        ax.plot([0, hi], [0, hi], "k--", lw=0.8, label="predicted = measured")
        ax.scatter([], [], s=18, facecolors="none", edgecolors="0.3",
                   label="predicted not to fit")
        if banded:
            ax.errorbar([], [], xerr=[], fmt="none", ecolor="0.3", elinewidth=0.8, capsize=2,
                        label="measured band (fresh processes)")
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"runs that fit on the GPU ({len(d)} of {len(df)}; {left_out} ran out of "
                 "memory and have no measured peak or time)", fontsize=9)
    fig.tight_layout()
    return fig
