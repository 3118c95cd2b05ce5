"""Plots (matplotlib, Agg) for runs, sweeps and validation. Each returns a Figure; nothing
is written unless the caller saves it (or ``vdnnsim plot ... -o FILE``)."""

from __future__ import annotations

import matplotlib.pyplot as plt  # matplotlib picks a headless backend where there is no display
import pandas as pd

from .table import need_times

GB = 1e9
COLORS = {"host": "tab:purple", "compute": "tab:blue", "d2h": "tab:orange", "h2d": "tab:green",
          "stall": "tab:red", "wait": "tab:gray"}
TRACKS = ("host", "compute", "d2h", "h2d")


def memory_over_time(results) -> plt.Figure:
    """Live GPU memory over one iteration, one line per run (policy)."""
    need_times(results, "memory over time to draw")
    fig, ax = plt.subplots(figsize=(9, 4))
    for r in results:
        m = r.memory
        t = list(m.time_ns) + [r.iteration_time_ns]
        y = list(m.allocated_bytes) + [m.allocated_bytes.iloc[-1]]
        ax.step([x / 1e6 for x in t], [v / GB for v in y], where="post", label=r.policy)
    if results and results[0].capacity_bytes:
        ax.axhline(results[0].capacity_bytes / GB, color="k", ls="--", lw=0.8, label="capacity")
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
    as horizontal bars (NOTE [host])."""
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
        ax.set_title(f"{r.policy}: {r.iteration_time_s * 1e3:.1f} ms, stalls "
                     f"{r.stall_time_ns / 1e6:.1f} ms, waiting for the host "
                     f"{r.host_bound_time_ns / 1e6:.1f} ms", fontsize=8, loc="left")
    axes[-1, 0].set_xlabel("time (ms)")
    fig.tight_layout()
    return fig


def sweep_curves(df: pd.DataFrame, x: str = "batch_size") -> plt.Figure:
    """Peak memory and slowdown against ``x`` per policy (one panel pair per network and
    GPU); runs that do not fit are hollow markers. A memory-only trace's runs (``timed``
    false, NOTE [memory-only traces]) have no slowdown: their panel says so."""
    from .table import UNTIMED_NOTE, untimed
    df = df[df.get("error").isna()] if "error" in df else df
    if "timed" in df:
        df = df.assign(slowdown=df.slowdown.where(~df.timed.map(untimed)))
    keys = list(dict.fromkeys(zip(df.network, df.gpu)))
    fig, axes = plt.subplots(2, len(keys), figsize=(4.5 * len(keys), 6.5), squeeze=False,
                             sharex="col")
    for col, (net, gpu) in enumerate(keys):
        part = df[(df.network == net) & (df.gpu == gpu)]
        for policy, g in part.groupby("policy", sort=False):
            g = g.sort_values(x)
            line, = axes[0, col].plot(g[x], g.peak_memory_bytes / GB, "-", label=policy)
            for ax, yv in ((axes[0, col], g.peak_memory_bytes / GB), (axes[1, col], g.slowdown)):
                ax.plot(g[x][g.fits], yv[g.fits], "o", color=line.get_color())
                ax.plot(g[x][~g.fits], yv[~g.fits], "o", mfc="none", color=line.get_color())
            axes[1, col].plot(g[x], g.slowdown, "-", color=line.get_color())
        cap = part.capacity_bytes.iloc[0] / GB if len(part) else None
        if cap:
            axes[0, col].axhline(cap, color="k", ls="--", lw=0.8)
        if "timed" in part and part.timed.map(untimed).any():
            axes[1, col].text(0.5, 0.5, UNTIMED_NOTE.replace(": ", ":\n"), ha="center",
                              va="center", transform=axes[1, col].transAxes, color="tab:red")
            if part.timed.map(untimed).all():  # no scale that reads as a slowdown of 0
                axes[1, col].set_yticks([])
        axes[0, col].set_title(f"{net} on {gpu}")
        axes[0, col].set_ylabel("peak GB")
        axes[1, col].set_ylabel("slowdown")
        axes[1, col].set_xlabel(x)
        axes[0, col].legend(fontsize=7)
        for ax in axes[:, col]:
            ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def validation_scatter(df: pd.DataFrame) -> plt.Figure:
    """Predicted against measured peak allocated memory and iteration time."""
    d = df[df.measured_fits]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, (m, p, label) in zip(axes, (("measured_alloc_gb", "predicted_alloc_gb",
                                         "peak allocated (GiB)"),
                                        ("measured_ms", "predicted_ms", "iteration (ms)"))):
        for policy, g in d.groupby("policy"):
            ax.scatter(g[m], g[p], label=policy, s=18)
        hi = max(d[m].max(), d[p].max()) * 1.05
        ax.plot([0, hi], [0, hi], "k--", lw=0.8)
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
