"""The readable table `vdnnsim run` prints. Memory in GB (10^9 bytes: docs/metrics.md; the paper's
text counts 1000 MiB to its GB, which `vdnnsim reproduce` uses)."""

from __future__ import annotations

from typing import Any

from ..results import RunResult
from ..units import GB


# under a table with a run whose times are not modelled (NOTE [memory-only traces])
UNTIMED_NOTE = "memory-only trace: times not modelled"


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _gb(n: float | None) -> str:
    return "-" if _missing(n) else f"{n / GB:.2f}"


def need_times(results, what: str) -> None:
    """A picture of time (a plot over time, a Chrome trace) refuses runs without times,
    in one line."""
    from ..errors import ConfigError
    for r in results:
        if not r.timed:
            raise ConfigError(f"{r.network}: a memory-only trace (every layer 0 ns) has no "
                              f"times, so no {what}; vdnnsim run gives each policy's peak "
                              "memory")


def format_seconds(s: float | None, digits: int = 3) -> str:
    """A time cell: seconds, or '-' where not modelled (NaN, None)."""
    return "-" if _missing(s) else f"{s:.{digits}f}"


def untimed(value: Any) -> bool:
    """A results row's ``timed`` value says memory only: false (a bool, numpy's, or
    'False' read back from a file); absent (results written before the column) or a
    failed run's NaN does not."""
    if isinstance(value, str):
        return value.strip().lower() == "false"
    return not _missing(value) and not bool(value)


def _fit(r: RunResult) -> str:
    if r.fits:
        return "yes"
    reason = r.oom.reason if r.oom else "capacity"
    return {"fragmentation": "no (fragmented)", "host memory": "no (host memory)"}.get(
        reason, "no")


def format_table(results: list[RunResult], title: str | None = None) -> str:
    if not results:
        return ""
    r0 = results[0]
    cap = r0.capacity_bytes
    head = title or f"{r0.network} (batch {r0.batch_size}, {r0.dtype}) on {r0.gpu}"
    oracle = f"{r0.oracle_time_ns / 1e9:.3f} s" if r0.timed else "-"
    lines = [f"{head}: pool {_gb(cap)} GB, oracle iteration {oracle}"]
    cols = ["policy", "fits", "peak GB", "avg GB", "iter s", "slowdown", "offload GB",
            "stall s", "out of memory at"]
    rows = []
    for r in results:
        where = ""
        if r.oom:
            o = r.oom
            what = f"offload of {o.tensor} (host memory full)" if o.kind == "host" else o.tensor
            where = f"{o.layer} {o.phase}: {what}" if o.layer else f"{o.phase}: {what}"
        rows.append([r.policy, _fit(r), _gb(r.peak_memory_bytes),
                     _gb(r.avg_memory_bytes if r.timed else None),
                     format_seconds(r.iteration_time_s), format_slowdown(r.slowdown),
                     _gb(r.offloaded_bytes),
                     format_seconds(r.stall_time_ns / 1e9 if r.timed else None), where])
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    right = {2, 3, 4, 5, 6, 7}

    def fmt(row: list[str]) -> str:
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(row, widths))).rstrip()

    lines += [fmt(cols), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]
    if not all(r.timed for r in results):
        lines.append(UNTIMED_NOTE)
    from ..costs.retime import PREFIX  # the trace's, once (NOTE [retime])
    from ..hostcal import LINE_STARTS  # the host calibration's, once
    shared = [n for n in r0.notes if n.startswith(PREFIX) or n.startswith(LINE_STARTS)
              and all(n in r.notes for r in results)]
    notes = [f"  {n}" for n in shared] + [f"  {r.policy}: {n}" for r in results
                                          for n in r.notes if n not in shared]
    if notes:
        lines += ["notes:"] + notes
    return "\n".join(lines)


def format_rows(df, title: str | None = None) -> str:
    """A study's rows: one line per run."""
    cols = ["network", "batch", "gpu", "policy", "fits", "peak GB", "avg GB", "iter s",
            "slowdown", "offload GB", "error"]
    varying = [c for c in df.columns if c not in ("network", "batch_size", "gpu", "policy")
               and c in ("memory_bytes", "policy_options", "dtype", "link_bw_bytes_per_s",
                         "h2d_bw_bytes_per_s", "d2h_bw_bytes_per_s", "link_latency_ns",
                         "duplex", "peak_flops_scale", "mem_bw_bytes_per_s",
                         "host_memory_bytes")
               and df[c].astype(str).nunique() > 1]
    if varying:
        df = df.assign(policy=[f"{p} {' '.join(f'{c}={r[c]}' for c in varying)}"
                               for p, (_, r) in zip(df.policy, df.iterrows())])
    rows = []
    memory_only = False
    for r in df.itertuples():
        err = getattr(r, "error", None)
        if isinstance(err, str):
            rows.append([str(r.network), str(r.batch_size), str(r.gpu), str(r.policy),
                         "-", "-", "-", "-", "-", "-", err])
            continue
        no_times = untimed(getattr(r, "timed", None))
        memory_only |= no_times
        rows.append([str(r.network), str(r.batch_size), str(r.gpu), str(r.policy),
                     "yes" if r.fits else "no", _gb(r.peak_memory_bytes),
                     _gb(None if no_times else r.avg_memory_bytes),
                     format_seconds(None if no_times else r.iteration_time_s),
                     format_slowdown(float("nan") if no_times else r.slowdown),
                     _gb(r.offloaded_bytes), ""])
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c)
              for i, c in enumerate(cols)]
    right = {5, 6, 7, 8, 9}

    def fmt(row: list[str]) -> str:
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(row, widths))).rstrip()

    head = [title] if title else []
    foot = [UNTIMED_NOTE] if memory_only else []
    foot += host_note(df) + retimed_note(df)
    return "\n".join(head + [fmt(cols), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]
                     + foot)


def format_slowdown(slowdown: float | None) -> str:
    """A slowdown as '1.17x'; '-' where it is undefined (NaN, None): the oracle time is 0,
    or the trace is memory only."""
    return "-" if _missing(slowdown) else f"{slowdown:.2f}x"


def host_note(df) -> list[str]:
    """One line where runs were host-bound (their band between a fast and a slow host in
    two columns), and one where a host calibration scaled the host costs."""
    out = []
    if "iteration_time_fast_host_s" in df:
        n = int(df["iteration_time_fast_host_s"].notna().sum())
        if n:
            out.append(f"note: {n} run(s) host-bound: iteration_time_fast_host_s and "
                       "iteration_time_slow_host_s give the step between a fast and a slow "
                       "host")
    if "host_speed_factor" in df:
        k = sorted({round(float(v), 2) for v in df["host_speed_factor"].dropna()})
        if k:
            out.append("note: host costs times " + ", ".join(f"{v:.2f}" for v in k)
                       + " by the host calibration (host_speed_factor)")
    return out


def retimed_note(df) -> list[str]:
    """One line where runs re-timed their trace for their GPU (NOTE [retime])."""
    from ..costs.retime import PREFIX
    if "notes" not in df:
        return []
    gpus = sorted({str(g) for g, n in zip(df["gpu"], df["notes"])
                   if isinstance(n, str) and PREFIX in n})
    if not gpus:
        return []
    return [f"note: the trace re-timed for {', '.join(gpus)} by the op-level kernel model "
            "(the notes column says from what, and how)"]
