"""`vdnnsim import FILE`: the artefacts users already have, read as validation data.

NOTE [import]
Two kinds of file, told apart by their first bytes (a ``.gz`` file by its decompressed
ones), never by trusting the name: a torch.profiler (Kineto) Chrome trace, JSON, and a
CUDA memory snapshot, a pickle. A pickle can name any importable callable and have it
called while loading, so a snapshot is read by an unpickler whose ``find_class`` and
``persistent_load`` always refuse (no class, function or extension code is ever looked
up, hence none runs), from a file of at most ``MAX_PICKLE_BYTES``; what it built must be
plain data (dict, list, tuple, str, int, float, bool, None) shaped like a snapshot
(``segments``, ``device_traces``), else one line says what is missing.

A trace is read by ``measured.tracefile.load_trace`` and split by
``measured.kineto.attribute``: per profiled step its wall time, GPU busy time, device total
(the activities' queued gaps included, their sum beside it), per-module forward/backward
device and host time, optimizer and zero_grad time, the unattributed share and the
``[memory]`` peaks; the record's ``iteration_ms`` is the median step's wall time and its
peaks the largest over the steps, the keys of a ``vdnnsim measure --json`` record, so that
it stands beside one. A CPU trace's ``[memory]`` events count host allocations from the
profiler's start, not a device's totals: it gives no peaks.

A snapshot, per device: the segments now (reserved bytes by segment type and by stream),
the blocks now (active allocated bytes), and the history (``device_traces``): allocated =
running sum of ``alloc`` minus ``free_completed`` sizes (requested bytes: the allocator
records those, not its rounded block sizes), reserved = ``segment_alloc``/``segment_map``
minus ``segment_free``/``segment_unmap``. The history is a ring buffer (``max_entries``)
and may start late: memory that the record shows was held before its first entry (a free
or unmap of what it never saw allocated, a live block or segment not allocated within it)
is added to every point of the history (``held_before_bytes``), and the peaks are then
lower bounds, which the output says. With no such evidence the history is taken as
complete. The history's end is checked against the segments and blocks of the snapshot;
a difference is a warning.
A trace from a Kineto file alone is not built: see docs/gpu.md ("Importing").
"""


from __future__ import annotations

import gzip
import json
import os
import statistics
import zlib
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..units import MiB
from .segments import import_segments
from .snapshot import KIND_SEGMENTS, KIND_SNAPSHOT, KIND_TRACE, TAKES, import_snapshot
from .tracefile import reason, regular_file, shown


# ---------------------------------------------------------------- which file

def import_file(path: str | os.PathLike, segments: bool = False) -> dict[str, Any]:
    """The record of a torch.profiler trace or a CUDA memory snapshot;
    ``segments``: a snapshot's segments at its peak."""
    p = Path(path)
    what = shown(p)
    regular_file(p, what, f"not a file; {TAKES}", f"; {TAKES}")
    try:
        with open(p, "rb") as f:
            head = f.read(64)
        gz = head[:2] == b"\x1f\x8b"
        if gz:
            with gzip.open(p, "rb") as f:
                head = f.read(64)
    except (OSError, EOFError, zlib.error) as exc:
        raise ConfigError(f"{what}: cannot read: {reason(exc)}") from None
    if not head:
        raise ConfigError(f"{what}: {'gzip of an ' if gz else ''}empty file; {TAKES}")
    if head[:1] == b"\x80" or p.name.endswith((".pickle", ".pkl", ".pickle.gz", ".pkl.gz")):
        return import_segments(p) if segments else import_snapshot(p, gz)
    if segments:
        raise ConfigError(f"{what}: --segments reads a CUDA memory snapshot pickle "
                          "(vdnnsim measure --memory-history, "
                          "torch.cuda.memory._dump_snapshot), and this is not one")
    if head.lstrip()[:1] in (b"{", b"["):
        if gz and p.suffix != ".gz":
            raise ConfigError(f"{what}: gzip-compressed JSON without a .gz name; name it "
                              f"{p.name}.gz, or decompress it")
        return import_trace(p)
    raise ConfigError(f"{what}: {_describe(head)}; {TAKES}")


def _describe(head: bytes) -> str:
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (a torch.save checkpoint?)"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return f"binary data (it starts {head[:8]!r})"
    if text.startswith("<"):
        return "XML or HTML text"
    return "text that is not JSON"


# ---------------------------------------------------------------- Kineto traces

def _ms(ns: float) -> float:
    return round(ns / 1e6, 6)


def import_trace(path: str | os.PathLike) -> dict[str, Any]:
    """Per profiled step and their median, from a torch.profiler trace."""
    from . import kineto

    what = shown(path)
    data = kineto.load_trace(path)
    try:
        a = kineto.attribute(data)
    except ConfigError as exc:  # attribute names a loaded dict "trace"
        msg = str(exc)
        raise ConfigError(f"{what}:{msg[6:]}" if msg.startswith("trace:") else msg) from None
    cuda_memory = any(isinstance(e, dict) and e.get("name") == "[memory]"
                      and isinstance(e.get("args"), dict)
                      and e["args"].get("Device Type") == 1 for e in data["traceEvents"])
    warnings = list(a.warnings)
    steps = []
    for st in a.steps:
        mods = []
        for path_, mt in st.modules.items():
            mods.append(_module_row(path_ or "<root>", mt))
        mods.append(_module_row(kineto.OUTSIDE, st.outside))
        total = st.device_total_ns
        mem = {str(dev): {"peak_allocated_bytes": m.allocated_bytes,
                          "peak_reserved_bytes": m.reserved_bytes, "events": m.events}
               for dev, m in sorted(st.memory.items(), key=lambda kv: str(kv[0]))}
        steps.append({
            "step": st.index, "name": st.name, "wall_ms": _ms(st.wall_ns),
            "gpu_busy_ms": _ms(st.device_busy_ns), "device_total_ms": _ms(total),
            "gap_ms": _ms(st.gap_ns),
            "activities": st.activities,
            "optimizer_ms": _ms(st.optimizer.device_ns),
            "optimizer_host_ms": _ms(st.optimizer.host_ns),
            "zero_grad_ms": _ms(st.zero_grad.device_ns),
            "zero_grad_host_ms": _ms(st.zero_grad.host_ns),
            "unattributed_ms": _ms(st.unattributed.device_ns),
            "unattributed_share": st.unattributed.device_ns / total if total else 0.0,
            "modules": mods, "memory": mem if cuda_memory else {}})
    if not cuda_memory and any(st.memory for st in a.steps):
        warnings.append("the trace's [memory] events are host (CPU) allocations counted from "
                        "the profiler's start: no device memory peaks")
    devices = sorted({d for s in steps for d in s["memory"]})
    peak_alloc = peak_res = None
    if len(devices) == 1:
        d = devices[0]
        peak_alloc = max(s["memory"][d]["peak_allocated_bytes"] for s in steps if d in s["memory"])
        peak_res = max(s["memory"][d]["peak_reserved_bytes"] for s in steps if d in s["memory"])
        if not peak_res:  # NOTE: a 0 reserved total is no measurement
            peak_res = None
    elif len(devices) > 1:
        warnings.append(f"memory events of {len(devices)} devices ({', '.join(devices)}): "
                        "no single peak; see each step's memory")
    gpus = [d.get("name") for d in data.get("deviceProperties") or [] if isinstance(d, dict)]
    record = {
        "kind": KIND_TRACE, "file": str(path),
        "gpu": gpus[0] if len(set(gpus)) == 1 else (gpus or None),
        "time_source": a.time_source, "steps": steps,
        "median": _median(steps),
        "iteration_ms": round(statistics.median(s["wall_ms"] for s in steps), 6)
        if steps else None,
        "peak_allocated_bytes": peak_alloc, "peak_reserved_bytes": peak_res,
        "outside_steps_ms": _ms(a.outside_steps.device_ns),
        "warnings": warnings}
    return record


def _module_row(name: str, mt: Any) -> dict[str, Any]:
    return {"module": name,
            "forward_ms": _ms(mt.forward.device_ns), "forward_host_ms": _ms(mt.forward.host_ns),
            "backward_ms": _ms(mt.backward.device_ns),
            "backward_host_ms": _ms(mt.backward.host_ns),
            "forward_calls": mt.forward.calls, "backward_ops": mt.backward.calls}


_STEP_KEYS = ("wall_ms", "gpu_busy_ms", "device_total_ms", "gap_ms", "optimizer_ms",
              "optimizer_host_ms",
              "zero_grad_ms", "zero_grad_host_ms", "unattributed_ms", "unattributed_share")
_MODULE_KEYS = ("forward_ms", "forward_host_ms", "backward_ms", "backward_host_ms")


def _median(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-step numbers' medians; a module absent from a step counts 0 there."""
    if not steps:
        return {}
    out: dict[str, Any] = {k: round(statistics.median(s[k] for s in steps), 6)
                           for k in _STEP_KEYS}
    order: dict[str, None] = {}
    for s in steps:
        for m in s["modules"]:
            order.setdefault(m["module"], None)
    rows = []
    for name in order:
        per = [next((m for m in s["modules"] if m["module"] == name), None) for s in steps]
        rows.append({"module": name, **{k: round(statistics.median(m[k] if m else 0.0
                                                                   for m in per), 6)
                                        for k in _MODULE_KEYS}})
    rows.sort(key=lambda r: (-(r["forward_ms"] + r["backward_ms"]),
                             -(r["forward_host_ms"] + r["backward_host_ms"])))
    out["modules"] = rows
    return out


# ---------------------------------------------------------------- CUDA memory snapshots


def _mib(n: Any) -> str:
    return "-" if n is None else f"{n / MiB:.1f}"


def format_record(rec: dict[str, Any], top: int = 20) -> str:
    if rec["kind"] == KIND_TRACE:
        lines = _format_trace(rec, top)
    elif rec["kind"] == KIND_SEGMENTS:
        lines = _format_segments(rec)
    else:
        lines = _format_snapshot(rec)
    lines += [f"warning: {w}" for w in rec["warnings"]]
    return "\n".join(lines)


def _format_trace(rec: dict[str, Any], top: int) -> list[str]:
    steps = rec["steps"]
    src = ("GPU activities" if rec["time_source"] == "gpu"
           else "cpu_op self times: no GPU activity in the trace")
    gpu = f" on {rec['gpu']}" if isinstance(rec["gpu"], str) else ""
    out = [f"{shown(rec['file'])}: {KIND_TRACE}{gpu}, {len(steps)} step(s); device times "
           f"from {src}; times in ms"]
    out.append(f"{'step':16s} {'wall':>9s} {'GPU busy':>9s} {'device':>9s} {'gaps':>9s} "
               f"{'optimizer':>9s} {'zero_grad':>9s} {'unattrib.':>9s} {'alloc MiB':>9s} "
               f"{'resv MiB':>9s}")

    def row(name: str, s: dict[str, Any], a: Any, r: Any) -> str:
        return (f"{name[:16]:16s} {s['wall_ms']:9.3f} {s['gpu_busy_ms']:9.3f} "
                f"{s['device_total_ms']:9.3f} {s['gap_ms']:9.3f} {s['optimizer_ms']:9.3f} "
                f"{s['zero_grad_ms']:9.3f} "
                f"{s['unattributed_share']:9.1%} {_mib(a):>9s} {_mib(r):>9s}")

    peaks = []
    for s in steps:
        mem = next(iter(s["memory"].values()), {}) if len(s["memory"]) == 1 else {}
        peaks.append((mem.get("peak_allocated_bytes"), mem.get("peak_reserved_bytes") or None))
        out.append(row(s["name"], s, *peaks[-1]))
    if steps:
        med = [None if None in col else statistics.median(col) for col in zip(*peaks)]
        out.append(row("median", rec["median"], *med))
        mods = rec["median"]["modules"]
        out.append("modules, median over the steps, by device time (us; host: CPU time, "
                   "mostly profiler overhead for small ops):")
        out.append(f"  {'module':32s} {'fwd':>9s} {'fwd host':>9s} {'bwd':>9s} {'bwd host':>9s}")
        for m in mods[:top]:
            out.append(f"  {m['module'][:32]:32s} {m['forward_ms'] * 1e3:9.1f} "
                       f"{m['forward_host_ms'] * 1e3:9.1f} {m['backward_ms'] * 1e3:9.1f} "
                       f"{m['backward_host_ms'] * 1e3:9.1f}")
        if len(mods) > top:
            out.append(f"  ... {len(mods) - top} more (--json lists them all)")
    out.append(f"record: iteration_ms {rec['iteration_ms']} (median step), peak_allocated_bytes "
               f"{rec['peak_allocated_bytes']}, peak_reserved_bytes {rec['peak_reserved_bytes']}"
               " (largest over the steps)")
    return out


def _format_snapshot(rec: dict[str, Any]) -> list[str]:
    out = [f"{shown(rec['file'])}: {KIND_SNAPSHOT}, {len(rec['devices'])} device(s)"]
    for d in rec["devices"]:
        sg, bl, h = d["segments"], d["blocks"], d["history"]
        out.append(f"device {d['device']}: {sg['count']} segments, {_mib(sg['reserved_bytes'])} "
                   f"MiB reserved; active blocks {_mib(bl['active_allocated_bytes'])} MiB "
                   f"allocated ({bl['active_allocated_count']} blocks), "
                   f"{_mib(bl['active_pending_free_bytes'])} MiB pending free, "
                   f"{_mib(bl['inactive_bytes'])} MiB inactive")
        for title, table in (("by segment type", sg["by_type"]), ("by stream", sg["by_stream"])):
            out.append(f"  {title}: " + ", ".join(f"{k} {v['count']} ({_mib(v['bytes'])} MiB)"
                                                  for k, v in sorted(table.items())))
        if h["entries"]:
            bound = " (lower bounds)" if h["peaks_are_lower_bounds"] else ""
            span = "" if h["span_ms"] is None else f" over {h['span_ms']:.3f} ms"
            out.append(f"  history: {h['entries']} entries{span}; peak allocated "
                       f"{_mib(h['peak_allocated_bytes'])} MiB, peak reserved "
                       f"{_mib(h['peak_reserved_bytes'])} MiB{bound}; {h['oom_events']} oom")
        else:
            out.append("  history: none")
    s = rec["allocator_settings"]
    if s:
        pairs = ", ".join(f"{k}={v}" for k, v in s.items() if not isinstance(v, dict))
        out.append(f"allocator settings: {pairs}")
    return out


def _format_segments(rec: dict[str, Any]) -> list[str]:
    out = [f"{shown(rec['file'])}: {KIND_SEGMENTS}, {len(rec['devices'])} device(s)"]
    for d in rec["devices"]:
        m = d["peak_moment"]
        when = (f"after entry {m['entry']} of {m['of']}" if m["entry"] < m["of"]
                else "at the snapshot")
        out.append(f"device {d['device']}: peak reserved {_mib(d['peak_reserved_bytes'])} MiB "
                   f"({when}; {_mib(m['allocated_requested_bytes'])} MiB requested then); "
                   f"{d['cuda_malloc']} cudaMalloc, {d['cuda_free']} cudaFree"
                   + (f", {d['segment_map']} map, {d['segment_unmap']} unmap"
                      if d["segment_map"] or d["segment_unmap"] else "")
                   + f" in {d['history_entries']} history entries")
        out.append(f"  {'stream':>16s} {'pool':5s} {'segs':>5s} {'blocks':>6s} "
                   f"{'reserved MiB':>12s} {'alloc MiB':>10s} {'free MiB':>9s} "
                   f"{'mallocs':>7s} {'frees':>6s}  segment MiB (blocks)")
        for p in d["pools"]:
            segs = ", ".join(f"{s['size_bytes'] / MiB:.1f} ({s['blocks']})"
                             for s in sorted(p["segment_list"], key=lambda s: -s["size_bytes"])
                             [:8])
            more = len(p["segment_list"]) - 8
            out.append(f"  {p['stream'][-16:]:>16s} {p['pool']:5s} {p['segments']:5d} "
                       f"{p['blocks']:6d} {_mib(p['reserved_bytes']):>12s} "
                       f"{_mib(p['allocated_bytes']):>10s} {_mib(p['free_bytes']):>9s} "
                       f"{p['cuda_malloc']:7d} {p['cuda_free']:6d}  {segs}"
                       + (f", ... {more} more" if more > 0 else ""))
        if d["estimated_blocks"]:
            out.append(f"  {d['estimated_blocks']} block(s) sized from their request (freed "
                       "before the snapshot)")
    return out


def to_json(rec: dict[str, Any]) -> str:
    return json.dumps(rec, indent=2)
