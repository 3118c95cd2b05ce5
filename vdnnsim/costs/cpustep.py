"""The CPU optimizer step's model fitted to a host's sweep (the CPU step model of
vdnnsim/hardware.py): ``vdnnsim calibrate --cpu-step`` measures, :func:`fit` turns its
records into the host fields a run config's ``gpu: {host: ...}`` takes, and holds the
model against the thread counts it did not use. numpy only: no torch."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..hardware import CPU_STEP_BYTES, cpu_step_roofline_ns
from .fitting import weighted_lstsq

_DTYPES = {"fp32": ("fp32", "cpu_step_thread_ns_per_element"),
           "bf16": ("16", "cpu_step_thread_ns_per_element_16")}


def per_thread_count(records: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[float, float]]:
    """Per (dtype, threads): the least-squares line of a tensor's step, ns = fixed + numel x
    slope, over the sweep's sizes (each record: ``tensors`` tensors of ``numel`` elements
    stepped in ``ns``)."""
    import numpy as np

    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["dtype"], int(r["threads"])), []).append(r)
    out = {}
    for key, rs in groups.items():
        if len({r["numel"] for r in rs}) < 2:
            raise ConfigError(f"cpu step sweep: {key[0]} on {key[1]} threads needs two sizes "
                              f"or more")
        X = np.array([[1.0, r["numel"]] for r in rs])
        y = np.array([r["ns"] / r["tensors"] for r in rs])
        # weighted by 1/y: each size's relative error counts alike (the small tensors'
        # fixed cost is not drowned by the large ones' milliseconds)
        w = 1 / y
        fixed, slope = weighted_lstsq(X, y, w, np)
        out[key] = (float(fixed), float(slope))
    return out


def fit(data: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The host fields from one sweep, and the check of the
    roofline on every thread count. The step as the runtime runs it is measured, not
    modelled: each precision's line on torch's default threads (its slope the per-element
    time, the fp32 line's intercept the fixed cost per tensor). The roofline that scales it
    to another host takes each precision's one-thread slope (its arithmetic) and the
    streaming add's bandwidth on the default threads. Each row scales the measured step to
    one thread count with that count's measured bandwidth, as a what-if would, against the
    step measured there: the rows other than the default's are what the roofline is judged
    on (the one-thread rows use the slope it was given, not the point it is anchored to)."""
    try:
        records, bandwidth = data["records"], data["bandwidth"]
        top = int(data["default_threads"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError("not a cpu step sweep (vdnnsim calibrate --cpu-step writes one): "
                          "needs records, bandwidth and default_threads") from None
    lines = per_thread_count(records)
    bw = {int(b["threads"]): float(b["bytes_per_s"]) for b in bandwidth}
    _physical(lines, bw)
    for need in ((dt, t) for dt in _DTYPES for t in (1, top)):
        if need not in lines:
            raise ConfigError(f"cpu step sweep: no {need[0]} records on {need[1]} threads")
    if top not in bw:
        raise ConfigError(f"cpu step sweep: no bandwidth on {top} threads")
    fields: dict[str, Any] = {"cpu_threads": top,
                              "cpu_memory_bw_bytes_per_s": round(bw[top], -6),
                              "cpu_step_ns": max(0, round(lines[("fp32", top)][0]))}
    for dt, (_, thread) in _DTYPES.items():
        point = "cpu_step_ns_per_element" + ("" if dt == "fp32" else "_16")
        fields[point] = round(lines[(dt, top)][1], 4)
        fields[thread] = round(lines[(dt, 1)][1], 4)
    rows = []
    for (dt, n), (fixed, slope) in sorted(lines.items()):
        kind, thread = _DTYPES[dt]
        point = fields["cpu_step_ns_per_element" + ("" if dt == "fp32" else "_16")]
        at = bw.get(n, fields["cpu_memory_bw_bytes_per_s"])
        there = cpu_step_roofline_ns(n, at, fields[thread], CPU_STEP_BYTES[kind])
        here = cpu_step_roofline_ns(top, fields["cpu_memory_bw_bytes_per_s"], fields[thread],
                                    CPU_STEP_BYTES[kind])
        model = point * there / here
        rows.append({"dtype": dt, "threads": n, "anchor": n == top,
                     "measured_ns_per_element": round(slope, 4),
                     "model_ns_per_element": round(model, 4),
                     "error": round((model - slope) / slope, 4),
                     "bound": "memory" if there > fields[thread] / n else "arithmetic",
                     "fixed_ns": round(fixed),
                     "bandwidth_gb_s": round(bw[n] / 1e9, 1) if n in bw else None})
    return fields, rows


def _physical(lines: dict[tuple[str, int], tuple[float, float]],
              bw: dict[int, float]) -> None:
    """A sweep timed on a busy host can give a step that does not grow with the tensor
    (a slope of zero or less: two threads beside a parallel test run once fitted -7.6 ns
    per bf16 element) or no bandwidth: such a fit is refused, not written."""
    for (dt, n), (_, slope) in sorted(lines.items()):
        if not slope > 0:
            raise ConfigError(f"cpu step sweep: the {dt} step on {n} threads does not grow "
                              f"with the tensor ({slope:.4g} ns per element): the host was "
                              f"busy while it was timed; run it again on an idle host")
    for n, b in sorted(bw.items()):
        if not b > 0:
            raise ConfigError(f"cpu step sweep: no memory bandwidth measured on {n} threads "
                              f"({b:.4g} bytes/s)")


def what_if_error(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """The roofline's smallest and largest relative error over the rows it was not
    anchored to."""
    errs = [r["error"] for r in rows if not r["anchor"]]
    return (min(errs), max(errs)) if errs else (0.0, 0.0)


def format_fit(fields: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The fit as a person reads it: the check per thread count, then the overrides."""
    out = ["dtype  threads  measured ns/el  model ns/el   error  bound       fixed us  "
           "memory GB/s"]
    for r in rows:
        mark = " (measured: the anchor)" if r["anchor"] else ""
        out.append(f"{r['dtype']:<6} {r['threads']:>7}  {r['measured_ns_per_element']:>14.4f}  "
                   f"{r['model_ns_per_element']:>11.4f}  {100 * r['error']:>+5.1f}%  "
                   f"{r['bound']:<10}  {r['fixed_ns'] / 1e3:>8.1f}  "
                   f"{r['bandwidth_gb_s'] if r['bandwidth_gb_s'] is not None else '-':>11}{mark}")
    lo, hi = what_if_error(rows)
    out.append(f"the roofline scaled to the other thread counts: {100 * lo:+.1f}% to "
               f"{100 * hi:+.1f}%")
    out.append("")
    out.append("gpu:")
    out.append("  host:")
    for k, v in fields.items():
        out.append(f"    {k}: {v}")
    return "\n".join(out)
