"""The readable table `vdnnsim run` prints. Memory in GB (10^9 bytes), as the paper."""

from __future__ import annotations

from ..results import RunResult
from ..units import GB


def _gb(n: float | None) -> str:
    return "-" if n is None else f"{n / GB:.2f}"


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
    lines = [f"{head}: pool {_gb(cap)} GB, oracle iteration {r0.oracle_time_ns / 1e9:.3f} s"]
    cols = ["policy", "fits", "peak GB", "avg GB", "iter s", "slowdown", "offload GB",
            "stall s", "out of memory at"]
    rows = []
    for r in results:
        where = ""
        if r.oom:
            o = r.oom
            what = f"offload of {o.tensor} (host memory full)" if o.kind == "host" else o.tensor
            where = f"{o.layer} {o.phase}: {what}" if o.layer else f"{o.phase}: {what}"
        rows.append([r.policy, _fit(r), _gb(r.peak_memory_bytes), _gb(r.avg_memory_bytes),
                     f"{r.iteration_time_s:.3f}", format_slowdown(r.slowdown),
                     _gb(r.offloaded_bytes), f"{r.stall_time_ns / 1e9:.3f}", where])
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    right = {2, 3, 4, 5, 6, 7}

    def fmt(row: list[str]) -> str:
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(row, widths))).rstrip()

    lines += [fmt(cols), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]
    notes = [f"  {r.policy}: {n}" for r in results for n in r.notes]
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
    for r in df.itertuples():
        err = getattr(r, "error", None)
        if isinstance(err, str):
            rows.append([str(r.network), str(r.batch_size), str(r.gpu), str(r.policy),
                         "-", "-", "-", "-", "-", "-", err])
            continue
        rows.append([str(r.network), str(r.batch_size), str(r.gpu), str(r.policy),
                     "yes" if r.fits else "no", _gb(r.peak_memory_bytes),
                     _gb(r.avg_memory_bytes), f"{r.iteration_time_s:.3f}",
                     format_slowdown(r.slowdown), _gb(r.offloaded_bytes), ""])
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c)
              for i, c in enumerate(cols)]
    right = {5, 6, 7, 8, 9}

    def fmt(row: list[str]) -> str:
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(row, widths))).rstrip()

    head = [title] if title else []
    return "\n".join(head + [fmt(cols), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def format_slowdown(slowdown: float) -> str:
    """A slowdown as '1.17x'; '-' where the oracle time is 0 and it is undefined (NaN)."""
    return "-" if slowdown != slowdown else f"{slowdown:.2f}x"
