"""Predicted against measured: each measured PyTorch run simulated from its profiled trace.

NOTE [validation]
A measurement (``vdnnsim measure``) names a model, batch size, runtime policy and optional
memory cap. Its prediction replays the trace profiled for that model and batch size on the
GPU preset (default h200) under the matching simulator policy: baseline -> eager (PyTorch's
own layer-wise memory), vdnn_all -> vdnn_all_p, vdnn_conv -> vdnn_conv_p (a profiled layer
has one algorithm, so _p and _m agree), with the cap as the pool capacity. Errors are
(predicted - measured) / measured for peak allocated bytes, peak reserved bytes and the
median iteration time (the last two only where the run fits); fits/out-of-memory must agree.
PyTorch's save_on_cpu is measured for comparison only and not predicted.

NOTE [bands]
A record measured in several fresh processes (``vdnnsim measure --repeat``)
holds the median of the processes' medians, which the prediction's error is
taken against as before, and the band those medians span (``iteration_ms_band``,
``peak_reserved_bytes_band``: [min, max]). How far apart fresh processes land is how well
the run can be known, so each prediction is also judged against its band: inside it
(``time_in_band``, ``reserved_in_band``), or how far outside, relative to the nearer edge
(``time_band_err``, ``reserved_band_err``: (predicted - edge) / edge, 0 inside). A record
without a band (one process) has none of these (NaN; ``-`` in the table). The summary
counts the predictions inside their bands.

A measurement records its caching allocator's settings (``allocator_conf``);
the prediction replays those the engine models (expandable segments), and a record made
with
any other setting away from its default is refused (``allocator_supported``) rather than
compared wrongly.

NOTE [host issue]
How long the host took to issue the step (``host_issue_ms`` of a measurement: from the
step's start until its last launch returned, before the synchronisation) is set beside
the replay's (``RunResult.host_issue_time_ns``: the host's clock when the optimizer step is
issued). Where they differ by more than HOST_ISSUE_FACTOR either way, the replayed host
is not the measured one, and what follows from it is suspect: a host held back by the
launch queue or a synchronisation the GPU run did not have (or the reverse) moves the step
time of a host-bound run and how many frees wait for copy events, so the reserved peak of
a vDNN run (a case: ConvNeXt-T (128) in docs/validation.md). Each such run gets a warning
line under the table; nothing is corrected.

NOTE [measurement sets]
A run measured again is judged against its newest record: ``validate`` takes several measurement files,
oldest first, and a later file's record of a run replaces every earlier file's records of
it. A run is its model, batch size, policy, cap, allocator settings, optimizer (and
whether it ran on the CPU), precision, sequence length and plan (``run_key``); the records
of one file are all kept, as before. ``replaced_records`` (an attribute of the table,
``DataFrame.attrs``) says how many older records that would have been judged gave way,
and a line under the table says so, so a set judged through later files is never mistaken
for the set as first measured. A file given twice is an error.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Annotated, Any, Sequence

import pandas as pd

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool,
                      ValidationError, model_validator)

from .. import limits
from ..engine import check_conf, is_default
from ..api import at_host_speed, resolve_gpu, run_trace
from ..engine import KNOWN_SETTINGS
from .repeat import HOST_BOUND
from ..errors import ConfigError, VdnnError
from ..hardware import Capacity
from ..trace import Trace, load_trace
from ..units import GiB
from ..yamlio import misplaced, read_yaml, shown, validation_message

POLICY_MAP = {"baseline": "eager", "vdnn_all": "vdnn_all_p", "vdnn_conv": "vdnn_conv_p"}
TARGETS = {"peak_allocated": (0.03, 0.08), "iteration_time": (0.10, 0.20)}


def load_measurements(path: str | os.PathLike) -> list[dict[str, Any]]:
    p = Path(path)
    if os.path.isdir(p):
        raise ConfigError(f"{shown(p)}: is a folder; expected a JSON file of measurement "
                          "records (a list of vdnnsim measure --json outputs, or one a line)")
    if not os.path.isfile(p):
        raise ConfigError(f"{shown(p)}: no such file")
    try:
        text = p.read_text()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if "Extra data" not in exc.msg:
                raise
            # JSON Lines: one record a line, as `vdnnsim measure --json` runs append them
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        _not_measurements(p)  # a YAML trace or config, say so
        raise ConfigError(f"{shown(p)}: not JSON: {str(exc)[:200]}") from None
    except OSError as exc:
        raise ConfigError(f"{shown(p)}: cannot read: {exc.strerror or exc}") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        wrong = misplaced(data, p, "a list of measurements", ("measurements",))
        raise ConfigError(wrong or f"{shown(p)}: expected a JSON list of measurement records")
    out = []
    for i, r in enumerate(data):
        try:
            rec = Measurement.model_validate(r)
        except ValidationError as exc:
            raise ConfigError(validation_message(f"{shown(p)}: [{i}]", exc, r)) from None
        out.append(rec.model_dump())
    return out


def run_key(m: dict[str, Any]) -> tuple:
    """What makes two records measurements of the same run: the
    model (without its source prefix), batch size, policy, cap, the allocator settings
    away from their defaults, the optimizer and whether it ran on the CPU, the precision,
    the sequence length and a plan's file, each at its default where a record lacks it."""
    conf = {k: v for k, v in (m.get("allocator_conf") or {}).items() if v}
    return (m["model"].split(":")[-1], m["batch_size"], m["policy"],
            m.get("memory_cap_bytes") or None, tuple(sorted(conf.items())),
            m.get("optimizer") or "sgd", bool(m.get("optimizer_offload")),
            m.get("dtype") or "fp32", m.get("seq_len"), m.get("plan"))


def load_measurement_sets(paths: "str | os.PathLike | Sequence[str | os.PathLike]"
                          ) -> tuple[list[tuple[Path, dict[str, Any]]],
                                     list[dict[str, Any]]]:
    """The records of one or several files, each with its file:
    a later file's record of a run replaces the earlier files' records of it. Returns the
    records in file order and the older records replaced. A file given twice is an
    error."""
    files = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not files:
        raise ConfigError("no measurement file given")
    given: dict[Path, Any] = {}
    for f in files:
        real = Path(f).resolve()
        if real in given:
            raise ConfigError(f"{shown(f)}: given twice as measurements (the first: "
                              f"{shown(given[real])})")
        given[real] = f
    kept: list[tuple[Path, dict[str, Any]]] = []
    replaced: list[dict[str, Any]] = []
    for f in files:
        recs = load_measurements(f)
        new = {run_key(m) for m in recs}
        replaced += [m for _, m in kept if run_key(m) in new]
        kept = [(p, m) for p, m in kept if run_key(m) not in new]
        kept += [(Path(f), m) for m in recs]
    return kept, replaced


def _not_measurements(p: Path) -> None:
    """A file that is not JSON may be YAML of another kind."""
    try:
        data = read_yaml(p)
    except VdnnError:
        return
    wrong = misplaced(data, p, "a list of measurements", ("measurements",))
    if wrong:
        raise ConfigError(wrong)


def _positive_finite(value: Any) -> float:
    return limits.in_range(value, 1e-300, 1e300, "a measured value", "a measurement is "
                           "a positive, finite number")


def _allocator_conf(value: Any) -> dict[str, Any]:
    """A recorded ``allocator_conf``, checked as pydantic
    reports it (the record's place in the file named)."""
    try:
        return check_conf(value, "allowed keys and values")
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


class Measurement(BaseModel):
    """One record of `vdnnsim measure --json` (the keys validate reads; others pass)."""

    model_config = ConfigDict(extra="allow")
    model: Annotated[str, Field(min_length=1)] = Field(description="torchvision:NAME or zoo:NAME.")
    batch_size: Annotated[int, BeforeValidator(limits.batch_size)] = Field(
        description="Batch size of the run.")
    policy: str = Field(description="baseline, vdnn_conv, vdnn_all or save_on_cpu.")
    fits: StrictBool = Field(description="Whether the run trained without running out.")
    memory_cap_bytes: Capacity | None = Field(None, description="The run's memory cap.")
    peak_allocated_bytes: Annotated[float, BeforeValidator(_positive_finite)] | None = Field(
        None, description="Peak allocated bytes over the timed steps (a run that fits).")
    peak_reserved_bytes: Annotated[float, BeforeValidator(_positive_finite)] | None = Field(
        None, description="Peak reserved bytes over the timed steps (a run that fits).")
    iteration_ms: Annotated[float, BeforeValidator(_positive_finite)] | None = Field(
        None, description="Median step time in milliseconds (a run that fits).")
    reserved_one_step_bytes: Annotated[float, BeforeValidator(_positive_finite)] | None = \
        Field(None, description="One step's reserved peak from an emptied cache; "
              "absent in records made before it was recorded.")

    iteration_ms_band: tuple[Annotated[float, BeforeValidator(_positive_finite)],
                             Annotated[float, BeforeValidator(_positive_finite)]] | None = \
        Field(None, description="[min, max] of the processes' median step times of a run "
              "measured in several processes; absent for one process.")
    peak_reserved_bytes_band: tuple[Annotated[float, BeforeValidator(_positive_finite)],
                                    Annotated[float, BeforeValidator(_positive_finite)]] | \
        None = Field(None, description="[min, max] of the processes' peak reserved bytes; "
                     "absent for one process.")
    reserved_one_step_bytes_band: tuple[
        Annotated[float, BeforeValidator(_positive_finite)],
        Annotated[float, BeforeValidator(_positive_finite)]] | None = Field(
            None, description="[min, max] of the processes' reserved_one_step_bytes; "
            "absent for one process.")
    allocator_conf: Annotated[dict[str, Any], BeforeValidator(_allocator_conf)] | None = Field(
        None, description="The caching allocator's settings the run was measured with; "
        "absent or {}: PyTorch's defaults.")
    host_probe_ns: Annotated[float, BeforeValidator(_positive_finite)] | None = Field(
        None, description="How fast the measuring host was before the model was built; "
        "absent in records made before it was recorded.")
    optimizer_offload: StrictBool = Field(False, description="The optimizer's state and "
                                          "step ran on the CPU.")
    host_probe_between_ns: Annotated[float, BeforeValidator(_positive_finite)] | None = Field(
        None, description="How fast the measuring host was right after each timed step, "
        "the median: what follows the step's host time; absent in "
        "records made before 2026-12-05.")

    @model_validator(mode="after")
    def _measured_if_it_fit(self) -> "Measurement":
        if self.fits:
            for k in ("peak_allocated_bytes", "peak_reserved_bytes", "iteration_ms"):
                if getattr(self, k) is None:
                    raise ValueError(f"a run that fits needs {k}")
        for k, v in (("iteration_ms", self.iteration_ms),
                     ("peak_reserved_bytes", self.peak_reserved_bytes),
                     ("reserved_one_step_bytes", self.reserved_one_step_bytes)):
            band = getattr(self, f"{k}_band")
            if band is not None and not (band[0] <= band[1] and (v is None
                                                                 or band[0] <= v <= band[1])):
                raise ValueError(f"{k}_band {list(band)} must be [min, max] around {k} {v}")
        return self


def allocator_supported(conf: dict[str, Any] | None) -> bool:
    """Whether the simulator models a measurement made
    with the allocator settings ``conf``: every setting is PyTorch's default or one the
    engine replays."""
    return is_default({k: v for k, v in (conf or {}).items() if k not in KNOWN_SETTINGS})


def _simulated_settings(conf: dict[str, Any] | None) -> dict[str, Any]:
    """The settings of ``conf`` the engine replays, as ``run_trace``'s ``allocator``."""
    return {k: v for k, v in (conf or {}).items() if k in KNOWN_SETTINGS}


def load_traces(path: "str | os.PathLike | Sequence[str | os.PathLike]"
                ) -> dict[tuple[str, int], Trace]:
    """The traces of a folder (its ``*.yaml``), of one file, or of several of either; one
    model at one batch size in two files is an error (which would be judged?)."""
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    out: dict[tuple[str, int], Trace] = {}
    where: dict[tuple[str, int], Path] = {}
    for p in map(Path, paths):
        files = sorted(p.glob("*.yaml")) if os.path.isdir(p) else [p]
        if not files or not os.path.exists(files[0]):
            raise ConfigError(f"{shown(p)}: no trace files")
        for f in files:
            t = load_trace(f)
            key = (t.name, t.batch_size)
            if key in where:
                raise ConfigError(f"{shown(f)}: a second trace of {t.name} at batch "
                                  f"{t.batch_size} (the first: {shown(where[key])})")
            out[key], where[key] = t, f
    return out


RESERVED = {"timed": "peak_reserved_bytes", "one-step": "reserved_one_step_bytes"}


def validate(traces: "str | os.PathLike | Sequence[str | os.PathLike]",
             measurements: "str | os.PathLike | Sequence[str | os.PathLike]",
             gpu: str = "h200", reserved: str = "timed",
             scale_host: bool = False) -> pd.DataFrame:
    """``measurements``: one file of records, or several, oldest first (a later file's
    record of a run replaces the earlier ones). ``reserved``: which measured reserved peak
    the prediction is held against: 'timed' (over the timed steps, with what the warm-up
    cached) or 'one-step' (one step from an emptied cache). ``scale_host``: replay each run
    whose record and trace both have the probe between timed steps on a host slower or
    faster by their ratio (``host_scaled``: the factor, NaN where not scaled)."""
    if reserved not in RESERVED:
        raise ConfigError(f"reserved must be one of {', '.join(RESERVED)}, got {reserved!r}")
    tr = load_traces(traces)
    g = resolve_gpu(gpu)
    rows = []
    records, gone = load_measurement_sets(measurements)
    replaced = sum(1 for m in gone if POLICY_MAP.get(m["policy"]) and
                   (m["model"].split(":")[-1], m["batch_size"]) in tr)
    for src_file, m in records:
        name = m["model"].split(":")[-1]
        key = (name, m["batch_size"])
        policy = POLICY_MAP.get(m["policy"])
        row: dict[str, Any] = {"model": name, "batch_size": key[1], "policy": m["policy"],
                               "cap_gib": (m.get("memory_cap_bytes") or 0) / GiB or None,
                               "measured_fits": bool(m["fits"])}
        if policy is None or key not in tr:
            continue
        if not allocator_supported(m.get("allocator_conf")):
            from ..engine import env_string
            raise ConfigError(f"{shown(src_file)}: {m['model']} batch {m['batch_size']} "
                              f"{m['policy']} was measured with allocator settings "
                              f"{env_string(m['allocator_conf'])!r}, which the simulator "
                              f"does not model (it models {', '.join(KNOWN_SETTINGS)} and "
                              "PyTorch's defaults): not compared")
        trace = tr[key]
        offload = bool(m.get("optimizer_offload"))
        # how much slower the measuring host was than the profiling one,
        # by the probes after the timed steps where both have them (they follow the steps'
        # host time), else by those before the model
        src = trace.source
        pairs = (("after the steps", m.get("host_probe_between_ns"),
                  src.host_probe_between_ns),
                 ("before the model", m.get("host_probe_ns"), src.host_probe_ns))
        kind, a, b = next((p for p in pairs if None not in p[1:]), ("", None, None))
        row["host_ratio"] = a / b if a is not None else float("nan")
        row["host_probe"] = kind
        # replayed on the measuring host, by the probes between steps
        k = row["host_ratio"] if scale_host and kind == "after the steps" else None
        run, rg = at_host_speed(trace, g, k) if k else (trace, g)
        row["host_scaled"] = k or float("nan")
        r = run_trace(run, rg, policy, {}, m.get("memory_cap_bytes"),
                      allocator=_simulated_settings(m.get("allocator_conf")),
                      optimizer_offload=offload,  # as it ran
                      optimizer_pinning=m.get("optimizer_pinning") or "caching"
                      if offload else "caching")
        if offload:
            row["policy"] = f"{m['policy']}+optimizer on CPU"
        row.update(predicted_fits=r.fits, fit_right=r.fits == bool(m["fits"]))
        if m["fits"]:
            pa, ma = r.peak_memory_bytes, m["peak_allocated_bytes"]
            pr, mr = r.peak_footprint_bytes, m[RESERVED[reserved]]
            if mr is None:
                raise ConfigError(f"{shown(src_file)}: {m['model']} batch "
                                  f"{m['batch_size']} {m['policy']} has no "
                                  f"{RESERVED[reserved]} (measured before it was recorded)")
            pt, mt = r.iteration_time_s * 1e3, m["iteration_ms"]  # NaN: memory only
            row.update(measured_alloc_gib=ma / GiB, predicted_alloc_gib=pa / GiB,
                       alloc_err=(pa - ma) / ma, measured_reserved_gib=mr / GiB,
                       predicted_reserved_gib=pr / GiB, reserved_err=(pr - mr) / mr,
                       measured_ms=mt, predicted_ms=pt, time_err=(pt - mt) / mt)
            host = m.get("host_issue_ms")  # whose time the host sets
            known = isinstance(host, (int, float)) and 0 < host < float("inf")
            row["host_bound"] = host >= HOST_BOUND * mt if known else None
            # the replayed host's issue time beside the measured one
            row["measured_host_ms"] = host if known else float("nan")
            row["predicted_host_ms"] = (r.host_issue_time_ns / 1e6 if trace.timed and
                                        trace.pytorch and r.fits and r.host_issue_time_ns > 0
                                        else float("nan"))
            held = [m.get(k) for k in ("optimizer_pinned_bytes", "optimizer_state_bytes")]
            if offload and all(isinstance(x, (int, float)) for x in held):
                # what the host holds for the optimizer
                mh, ph = sum(held), r.optimizer_host_bytes
                row.update(measured_host_gib=mh / GiB, predicted_host_gib=ph / GiB,
                           host_err=(ph - mh) / mh)
            row.update(_band("time", pt, m.get("iteration_ms_band"), 1.0))
            row.update(_band("reserved", pr, m.get(f"{RESERVED[reserved]}_band"), GiB))
        rows.append(row)
    if not rows:
        raise ConfigError(f"{_names(measurements)}: no measurement matched a trace in "
                          f"{_names(traces)} (model name and batch size)")
    df = pd.DataFrame(rows)
    df.attrs["replaced_records"] = replaced
    return df


def _names(paths: Any) -> str:
    """One path, or several joined, for a one-line message."""
    if isinstance(paths, (str, os.PathLike)):
        return shown(paths)
    return ", ".join(shown(p) for p in paths)


def _band(name: str, predicted: float, band: Any, unit: float) -> dict[str, Any]:
    """The band's edges (in the table's unit), whether ``predicted`` lies
    inside, and how far outside relative to the nearer edge (0 inside)."""
    nan = float("nan")
    if band is None or predicted != predicted:  # no band, or no prediction (memory only)
        return {f"{name}_band_min": nan if band is None else band[0] / unit,
                f"{name}_band_max": nan if band is None else band[1] / unit,
                f"{name}_in_band": None, f"{name}_band_err": nan}
    lo, hi = band
    p = predicted  # in the band's unit (ms, bytes)
    err = 0.0 if lo <= p <= hi else (p - lo) / lo if p < lo else (p - hi) / hi
    return {f"{name}_band_min": lo / unit, f"{name}_band_max": hi / unit,
            f"{name}_in_band": err == 0.0, f"{name}_band_err": err}


def summarize(df: pd.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for col, name in (("alloc_err", "peak_allocated"), ("reserved_err", "peak_reserved"),
                      ("time_err", "iteration_time")):
        errs = [abs(x) for x in df.get(col, pd.Series(dtype=float)).dropna()]
        if errs:
            out[name] = {"median_abs": statistics.median(errs), "max_abs": max(errs),
                         "n": len(errs)}
            if name in TARGETS:
                med, mx = TARGETS[name]
                out[name]["target_met"] = statistics.median(errs) <= med and max(errs) <= mx
    for name in ("time", "reserved"):
        col = df.get(f"{name}_in_band", pd.Series(dtype=object))
        judged = [bool(v) for v in col if v is not None and v == v]
        if judged:
            out.setdefault("bands", {})[name] = {"inside": sum(judged), "n": len(judged)}
    if "host_bound" in df and "time_err" in df:
        timed = df[df.time_err.notna()]
        for kind, rows in (("host", timed[timed.host_bound == True]),  # noqa: E712
                           ("gpu", timed[timed.host_bound == False]),  # noqa: E712
                           ("unknown", timed[timed.host_bound.isna()])):  # no host time
            errs = [abs(x) for x in rows.time_err]
            if errs:
                band = [bool(v) for v in rows.get("time_in_band", pd.Series(dtype=object))
                        if v is not None and v == v]
                out.setdefault("time_by_bound", {})[kind] = {
                    "median_abs": statistics.median(errs), "max_abs": max(errs),
                    "n": len(errs), "in_band": sum(band), "banded": len(band)}
    capped = df[df.cap_gib.notna()]
    out["fit"] = {"right": int(df.fit_right.sum()), "n": len(df),
                  "capped_right": int(capped.fit_right.sum()), "capped_n": len(capped)}
    out["replaced_records"] = int(df.attrs.get("replaced_records", 0))
    if "host_scaled" in df:
        out["host_scaled"] = int(df.host_scaled.notna().sum())
    return out


def _ms(v: float) -> str:  # NaN: a memory-only trace's
    return f"{'-':>8s}" if v != v else f"{v:8.1f}"


def _pct(v: float) -> str:
    return f"{'-':>6s}" if v != v else f"{v:+6.1%}"


def _in_band(r: Any, name: str) -> str:
    """NOTE [bands]: ``in``, how far outside (``+3.1%``), or ``-`` without a band."""
    inside = getattr(r, f"{name}_in_band", None)
    if inside is None or inside != inside:
        return "-"
    return "in" if inside else f"{getattr(r, f'{name}_band_err'):+.1%}"


def format_validation(df: pd.DataFrame) -> str:
    lines = ["model        batch  policy     cap GiB  fits (meas/pred)  alloc GiB meas/pred   err"
             "   reserved GiB meas/pred   err     ms meas/pred        err  band ms/resv"]
    for r in df.itertuples():
        capped = isinstance(r.cap_gib, float) and r.cap_gib == r.cap_gib  # not NaN
        cap = f"{r.cap_gib:.0f}" if capped else "-"
        fits = f"{'yes' if r.measured_fits else 'no'}/{'yes' if r.predicted_fits else 'no'}"
        fits += "" if r.fit_right else " MISS"
        if r.measured_fits:
            lines.append(f"{r.model:12s} {r.batch_size:5d}  {r.policy:9s}  {cap:>7s}  {fits:16s}"
                         f"  {r.measured_alloc_gib:7.2f} / {r.predicted_alloc_gib:7.2f}"
                         f"  {r.alloc_err:+6.1%}   {r.measured_reserved_gib:7.2f} / "
                         f"{r.predicted_reserved_gib:7.2f}  {r.reserved_err:+6.1%}"
                         f"  {r.measured_ms:8.1f} / {_ms(r.predicted_ms)}  {_pct(r.time_err)}"
                         f"  {_in_band(r, 'time'):>6s}/{_in_band(r, 'reserved')}")
        else:
            lines.append(f"{r.model:12s} {r.batch_size:5d}  {r.policy:9s}  {cap:>7s}  {fits}")
    s = summarize(df)
    for name in ("peak_allocated", "peak_reserved", "iteration_time"):
        if name in s:
            v = s[name]
            target = ""
            if name in TARGETS:
                med, mx = TARGETS[name]
                target = (f" (target {med:.0%} / {mx:.0%}: "
                          f"{'met' if v['target_met'] else 'MISSED'})")
            lines.append(f"{name}: median |error| {v['median_abs']:.1%}, max {v['max_abs']:.1%}"
                         f" over {v['n']} runs{target}")
    split = s.get("time_by_bound", {})
    if "host" in split:  # host-bound truth repeats less
        parts = [f"{what} {v['median_abs']:.1%} / {v['max_abs']:.1%} over {v['n']}" +
                 (f" ({v['in_band']} of {v['banded']} inside their bands)" if v["banded"]
                  else "")
                 for what, v in (("host-bound", split["host"]), ("GPU-bound", split.get("gpu")),
                                 ("no host time recorded", split.get("unknown"))) if v]
        lines.append("iteration_time, median / max |error|: " + "; ".join(parts) +
                     f" (host-bound: host issue {HOST_BOUND:.0%} of the step or more)")
    for name, what in (("time", "iteration time"), ("reserved", "peak reserved")):
        if name in s.get("bands", {}):
            b = s["bands"][name]
            lines.append(f"{what}: {b['inside']} of {b['n']} predictions inside the band of "
                         "their fresh processes' medians")
    f = s["fit"]
    lines.append(f"fits / out of memory right: {f['right']} of {f['n']} "
                 f"({f['capped_right']} of {f['capped_n']} capped runs)")
    if s.get("host_scaled"):
        lines.append(f"host costs scaled by the probes' ratio in {s['host_scaled']} of "
                     f"{f['n']} runs (--scale-host; the rest had no probe between steps "
                     "in the trace or the record)")
    if s["replaced_records"]:
        lines.append(f"judged against the newest measurements: {s['replaced_records']} "
                     "older records replaced by later files' records of the same runs")
    lines += host_warnings(df)
    return "\n".join(lines)


HOST_PROBE_TOLERANCE = 0.10  # the fresh processes' own spread is 6-8%
HOST_ISSUE_FACTOR = 2.0  # host times of fresh processes span up to 1.9x


def host_warnings(df: pd.DataFrame) -> list[str]:
    """A line for each run whose measuring host was more than HOST_PROBE_TOLERANCE
    faster or slower than its trace's profiling host; one for each run whose replayed host
    issued the step more than HOST_ISSUE_FACTOR faster or slower than the measured host."""
    out = []
    if "predicted_host_ms" in df:
        for r in df.itertuples():
            p, m = r.predicted_host_ms, r.measured_host_ms
            if p == p and m == m and p > 0 and max(p / m, m / p) > HOST_ISSUE_FACTOR:
                cap = f" (cap {r.cap_gib:.2f} GiB)" if r.cap_gib == r.cap_gib and r.cap_gib else ""
                out.append(f"warning: {r.model} {r.batch_size} {r.policy}{cap}: the replayed "
                           f"host issued the step in {p:.1f} ms, the measured one in {m:.1f} "
                           "ms: the replay's host is not the measured one (a host of "
                           "another speed, or the trace's kernel counts, launch queue or "
                           "waits), so its time and a vDNN run's reserved peak are suspect")
    if "host_ratio" not in df:
        return out
    for r in df.itertuples():
        k = r.host_ratio
        if k == k and abs(k - 1) > HOST_PROBE_TOLERANCE:
            weak = " (the probes before the model, which hardly follow a step's host time)" \
                if r.host_probe == "before the model" else ""
            out.append(f"warning: {r.model} {r.batch_size} {r.policy}: the measuring host "
                       f"took {k:.2f}x the profiling host's time per launch, probed "
                       f"{r.host_probe}{weak}: a host-bound time, and a vDNN run's reserved "
                       "peak, compare two hosts")
    return out
