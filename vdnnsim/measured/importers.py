"""`vdnnsim import FILE`: the artefacts users already have, read as validation data.

NOTE [import]
Two kinds of file, told apart by their first bytes (a ``.gz`` file by its decompressed
ones), never by trusting the name:
- A torch.profiler (Kineto) Chrome trace, JSON (``export_chrome_trace``), read by
  ``gpu.kineto.load_trace`` and split by ``gpu.kineto.attribute`` (NOTE [kineto
  attribution]): per profiled step its wall time, GPU busy time, device total (the
  activities' queued gaps included, their sum beside it), per-module forward/backward
  device and host time, optimizer and zero_grad time, the unattributed share and the
  ``[memory]`` peaks; the record's ``iteration_ms`` is the median step's wall
  time and its peaks the largest over the steps, the keys of a ``vdnnsim measure --json``
  record, so that it stands beside one. A CPU trace's ``[memory]`` events count host
  allocations from the profiler's start, not a device's totals: it gives no peaks.
- A CUDA memory snapshot (``torch.cuda.memory._dump_snapshot``), a pickle. A pickle can
  name any importable callable and have it called while loading, so it is read by an
  unpickler whose ``find_class`` and ``persistent_load`` always refuse (no class, function
  or extension code is ever looked up, hence none runs), from a file of at most
  ``MAX_PICKLE_BYTES``; what it built must be plain data (dict, list, tuple, str, int,
  float, bool, None) and shaped like a snapshot (``segments``, ``device_traces``), else
  one line says what is missing. Per device: the segments now (reserved bytes by segment
  type and by stream), the blocks now (active allocated bytes), and the history
  (``device_traces``): allocated = running sum of ``alloc`` minus ``free_completed``
  sizes (requested bytes: the allocator records those, not its rounded block sizes),
  reserved = ``segment_alloc``/``segment_map`` minus ``segment_free``/``segment_unmap``.
  The history is a ring buffer (``max_entries``) and may start late: memory that the
  record shows was held before its first entry (a free or unmap of what it never saw
  allocated, a live block or segment not allocated within it) is added to every point of
  the history (``held_before_bytes``), and the peaks are then lower bounds (what happened
  before the first entry is gone), which the output says. With no such evidence the
  history is taken as complete. The history's end is checked against the segments and
  blocks of the snapshot; a difference is a warning.
A trace from a Kineto file alone is not built: see docs/gpu.md ("Importing").
"""

from __future__ import annotations

import bisect
import gzip
import io
import json
import os
import pickle
import statistics
import zlib
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..units import GiB, MiB

MAX_PICKLE_BYTES = 2 * GiB  # a snapshot pickle (decompressed, where gzipped)
TAKES = ("vdnnsim import takes a torch.profiler trace (Chrome trace JSON from "
         "export_chrome_trace, .json or .json.gz) or a CUDA memory snapshot pickle "
         "(torch.cuda.memory._dump_snapshot)")
KIND_TRACE = "torch.profiler trace"
KIND_SNAPSHOT = "CUDA memory snapshot"
KIND_SEGMENTS = "CUDA memory snapshot: segments at the peak"
PLAIN = (dict, list, tuple, str, int, float, bool, type(None))
_ALLOC_UP = frozenset({"alloc"})
_ALLOC_DOWN = frozenset({"free_completed"})
_SEG_UP = frozenset({"segment_alloc", "segment_map"})
_SEG_DOWN = frozenset({"segment_free", "segment_unmap"})


def _shown(p: Any) -> str:
    from .kineto import _shown as shown
    return shown(p)


def _reason(exc: BaseException) -> str:
    from .kineto import _reason as reason
    return reason(exc)


# ---------------------------------------------------------------- which file

def import_file(path: str | os.PathLike, segments: bool = False) -> dict[str, Any]:
    """NOTE [import]: the record of a torch.profiler trace or a CUDA memory snapshot;
    ``segments``: a snapshot's segments at its peak (NOTE [snapshot segments])."""
    from .kineto import regular_file
    p = Path(path)
    what = _shown(p)
    regular_file(p, what, f"not a file; {TAKES}", f"; {TAKES}")
    try:
        with open(p, "rb") as f:
            head = f.read(64)
        gz = head[:2] == b"\x1f\x8b"
        if gz:
            with gzip.open(p, "rb") as f:
                head = f.read(64)
    except (OSError, EOFError, zlib.error) as exc:
        raise ConfigError(f"{what}: cannot read: {_reason(exc)}") from None
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
    """NOTE [import]: per profiled step and their median, from a torch.profiler trace."""
    from . import kineto

    what = _shown(path)
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

class _Refused(pickle.UnpicklingError):
    pass


class _PlainUnpickler(pickle.Unpickler):
    """NOTE [import]: builds plain data only; any class or function reference is refused
    before it is looked up, so nothing named in the file is imported or called."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


def load_snapshot(path: str | os.PathLike, gz: bool | None = None) -> Any:
    """A pickle's plain data, through the refusing unpickler, capped at MAX_PICKLE_BYTES."""
    p = Path(path)
    what = _shown(p)
    if gz is None:
        with open(p, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
    try:
        if gz:
            with gzip.open(p, "rb") as f:
                raw = f.read(MAX_PICKLE_BYTES + 1)
            if len(raw) > MAX_PICKLE_BYTES:
                raise ConfigError(f"{what}: more than {MAX_PICKLE_BYTES:,} bytes once "
                                  "decompressed; a snapshot pickle is at most that")
            src: Any = io.BytesIO(raw)
        else:
            size = os.stat(p).st_size
            if size > MAX_PICKLE_BYTES:
                raise ConfigError(f"{what}: {size:,} bytes; a snapshot pickle is at most "
                                  f"{MAX_PICKLE_BYTES:,}")
            src = open(p, "rb")
    except (OSError, EOFError, zlib.error) as exc:
        raise ConfigError(f"{what}: cannot read: {_reason(exc)}") from None
    try:
        with src:
            return _PlainUnpickler(src).load()
    except _Refused as exc:
        raise ConfigError(f"{what}: the pickle references {exc} (a class, function or "
                          "persistent id); a CUDA memory snapshot holds only plain data: "
                          "refused, nothing in it was run") from None
    except MemoryError:
        raise ConfigError(f"{what}: the pickle does not fit in memory") from None
    except Exception as exc:  # a corrupt pickle raises many kinds (EOFError, KeyError, ...)
        raise ConfigError(f"{what}: not a readable pickle ({type(exc).__name__}: "
                          f"{_reason(exc)[:120]}); {TAKES}") from None


def _check_plain(obj: Any, what: str) -> None:
    """Every object reachable is dict/list/tuple/str/int/float/bool/None (a shared or
    cyclic structure is walked once per object)."""
    seen: set[int] = set()
    todo = [obj]
    while todo:
        o = todo.pop()
        if type(o) not in PLAIN:
            raise ConfigError(f"{what}: the pickle holds a {type(o).__name__}; a CUDA memory "
                              "snapshot holds only dicts, lists, tuples, strings, numbers, "
                              "booleans and None")
        if isinstance(o, (dict, list, tuple)):
            if id(o) in seen:
                continue
            seen.add(id(o))
            if isinstance(o, dict):
                todo.extend(o.keys())
                todo.extend(o.values())
            else:
                todo.extend(o)


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _need(d: Any, key: str, where: str, what: str, kind: str = "int") -> Any:
    if not isinstance(d, dict):
        raise ConfigError(f"{what}: {where} is a {type(d).__name__}, not a dict; expected a "
                          "CUDA memory snapshot (torch.cuda.memory._dump_snapshot)")
    v = d.get(key)
    ok = _int(v) and v >= 0 if kind == "int" else isinstance(v, {"str": str, "list": list}[kind])
    if not ok:
        got = "no" if key not in d else f"a bad ({type(v).__name__})"
        noun = {"int": "a non-negative integer", "str": "a string", "list": "a list"}[kind]
        raise ConfigError(f"{what}: {where} has {got} {key!r} ({noun} expected); not a CUDA "
                          "memory snapshot as torch.cuda.memory._dump_snapshot writes")
    return v


def check_snapshot(data: Any, what: str) -> None:
    """The structure the summary reads; one line naming the first thing missing."""
    _check_plain(data, what)
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: a pickle of a {type(data).__name__}, not a CUDA memory "
                          "snapshot (a dict with segments and device_traces, from "
                          "torch.cuda.memory._dump_snapshot)")
    for key in ("segments", "device_traces"):
        if not isinstance(data.get(key), list):
            got = "no" if key not in data else f"a {type(data[key]).__name__} as"
            raise ConfigError(f"{what}: a pickled dict with {got} {key!r} list; expected a "
                              "CUDA memory snapshot (torch.cuda.memory._dump_snapshot)")
    for i, seg in enumerate(data["segments"]):
        w = f"segments[{i}]"
        for key in ("device", "address", "total_size"):
            _need(seg, key, w, what)
        for j, b in enumerate(_need(seg, "blocks", w, what, "list")):
            for key in ("address", "size"):
                _need(b, key, f"{w}.blocks[{j}]", what)
            _need(b, "state", f"{w}.blocks[{j}]", what, "str")
    for d, entries in enumerate(data["device_traces"]):
        if not isinstance(entries, list):
            raise ConfigError(f"{what}: device_traces[{d}] is a {type(entries).__name__}, "
                              "not a list of trace entries; expected a CUDA memory snapshot")
        for k, e in enumerate(entries):
            w = f"device_traces[{d}][{k}]"
            act = _need(e, "action", w, what, "str")
            if act in _ALLOC_UP | _ALLOC_DOWN | _SEG_UP | _SEG_DOWN | {"free_requested"}:
                _need(e, "addr", w, what)
                _need(e, "size", w, what)


def import_snapshot(path: str | os.PathLike, gz: bool | None = None) -> dict[str, Any]:
    """NOTE [import]: per device, the segments and blocks now and the history's peaks."""
    what = _shown(path)
    data = load_snapshot(path, gz)
    check_snapshot(data, what)
    devices = sorted({s["device"] for s in data["segments"]}
                     | {d for d, t in enumerate(data["device_traces"]) if t})
    out = []
    warnings: list[str] = []
    for dev in devices:
        segs = [s for s in data["segments"] if s["device"] == dev]
        trace = data["device_traces"][dev] if dev < len(data["device_traces"]) else []
        rec = _device(dev, segs, trace)
        for w in rec.pop("warnings"):
            warnings.append(f"device {dev}: {w}")
        out.append(rec)
    settings = data.get("allocator_settings")
    rec: dict[str, Any] = {
        "kind": KIND_SNAPSHOT, "file": str(path), "devices": out,
        "allocator_settings": _settings(settings) if isinstance(settings, dict) else None,
        "peak_allocated_bytes": None, "peak_reserved_bytes": None,
        "peaks_are_lower_bounds": None, "warnings": warnings}
    with_history = [d for d in out if d["history"]["entries"]]
    if len(with_history) == 1:
        h = with_history[0]["history"]
        rec.update(peak_allocated_bytes=h["peak_allocated_bytes"],
                   peak_reserved_bytes=h["peak_reserved_bytes"],
                   peaks_are_lower_bounds=h["peaks_are_lower_bounds"])
    if not with_history:
        warnings.append("no history (device_traces empty: recorded without "
                        "torch.cuda.memory._record_memory_history?): no peaks, only the "
                        "state at the snapshot")
    return rec


def _settings(s: dict[str, Any]) -> dict[str, Any]:
    """The allocator settings' scalar entries (and dicts of scalars), as given."""
    out = {}
    for k, v in s.items():
        if isinstance(v, (str, int, float, bool, type(None))):
            out[str(k)] = v
        elif isinstance(v, dict) and all(isinstance(x, (str, int, float, bool, type(None)))
                                         for x in v.values()):
            out[str(k)] = {str(a): b for a, b in v.items()}
    return out


def _device(dev: int, segs: list[dict[str, Any]], trace: list[dict[str, Any]]
            ) -> dict[str, Any]:
    warnings: list[str] = []
    by_type: dict[str, dict[str, int]] = {}
    by_stream: dict[str, dict[str, int]] = {}
    reserved_now = 0
    blocks = {"active_allocated": [0, 0], "active_pending_free": [0, 0], "inactive": [0, 0]}
    live: dict[int, int] = {}  # address -> requested bytes of an active block now
    for s in segs:
        n = s["total_size"]
        reserved_now += n
        for key, table in ((str(s.get("segment_type", "unknown")), by_type),
                           (str(s.get("stream", "unknown")), by_stream)):
            row = table.setdefault(key, {"count": 0, "bytes": 0})
            row["count"] += 1
            row["bytes"] += n
        for b in s["blocks"]:
            state = b["state"] if b["state"] in blocks else "inactive"
            blocks[state][0] += 1
            blocks[state][1] += b["size"]
            if state != "inactive":
                req = b.get("requested_size")
                live[b["address"]] = req if _int(req) and req >= 0 else b["size"]

    # the history: running sums, and what the record shows was held before it began
    alloc = res = 0
    peak_alloc = peak_res = 0
    before_alloc = before_res = 0
    out_a: dict[int, int] = {}  # address -> bytes allocated within the history, outstanding
    out_s: dict[int, int] = {}
    ooms = 0
    times = []
    for e in trace:
        act = e["action"]
        t = e.get("time_us")
        if _int(t):
            times.append(t)
        if act == "oom":
            ooms += 1
            continue
        if act not in _ALLOC_UP | _ALLOC_DOWN | _SEG_UP | _SEG_DOWN:
            continue
        addr, size = e["addr"], e["size"]
        if act in _ALLOC_UP:
            alloc += size
            out_a[addr] = out_a.get(addr, 0) + size
        elif act in _ALLOC_DOWN:
            alloc -= size
            if out_a.get(addr, 0) >= size:
                out_a[addr] -= size
            else:  # freed what the history never saw allocated: held before it
                before_alloc += size - out_a.pop(addr, 0)
        elif act in _SEG_UP:
            res += size
            out_s[addr] = out_s.get(addr, 0) + size
        else:
            res -= size
            if out_s.get(addr, 0) >= size:
                out_s[addr] -= size
            else:
                before_res += size - out_s.pop(addr, 0)
        peak_alloc = max(peak_alloc, alloc)
        peak_res = max(peak_res, res)
    # live now, not allocated within the history: held before it (and all along)
    for addr, req in live.items():
        before_alloc += max(0, req - out_a.get(addr, 0))
    mapped = sorted((k, v) for k, v in out_s.items() if v)
    keys = [k for k, _ in mapped]
    for s in segs:  # an expandable segment maps pieces at addresses inside it
        a, n = s["address"], s["total_size"]
        lo, hi = bisect.bisect_left(keys, a), bisect.bisect_left(keys, a + n)
        before_res += max(0, n - sum(v for _, v in mapped[lo:hi]))
    entries = sum(1 for e in trace if e["action"] != "snapshot")
    history: dict[str, Any] = {"entries": len(trace)}
    if trace:
        lower = bool(before_alloc or before_res)
        peak_a, peak_r = before_alloc + peak_alloc, before_res + peak_res
        end_a, end_r = before_alloc + alloc, before_res + res
        history.update(
            first_time_us=min(times) if times else None, last_time_us=max(times) if times
            else None, span_ms=(max(times) - min(times)) / 1e3 if times else None,
            peak_allocated_bytes=peak_a, peak_reserved_bytes=peak_r,
            held_before_allocated_bytes=before_alloc, held_before_reserved_bytes=before_res,
            oom_events=ooms, complete=not lower, peaks_are_lower_bounds=lower)
        if lower:
            warnings.append(
                f"the history starts after memory was in use ({before_alloc:,} bytes "
                f"allocated, {before_res:,} reserved before its first entry: recording began "
                "late, or the ring buffer (max_entries) dropped older entries): its peaks are "
                "lower bounds")
        if end_r != reserved_now and entries:
            warnings.append(f"the history ends at {end_r:,} bytes reserved but the segments "
                            f"hold {reserved_now:,}: history and state disagree")
        now_a = sum(live.values())
        if end_a != now_a and entries:
            warnings.append(f"the history ends at {end_a:,} bytes allocated but the active "
                            f"blocks hold {now_a:,} (requested): history and state disagree")
        if ooms:
            warnings.append(f"{ooms} out-of-memory event(s) in the history")
    return {"device": dev,
            "segments": {"count": len(segs), "reserved_bytes": reserved_now,
                         "by_type": by_type, "by_stream": by_stream},
            "blocks": {"active_allocated_bytes": blocks["active_allocated"][1],
                       "active_allocated_count": blocks["active_allocated"][0],
                       "active_pending_free_bytes": blocks["active_pending_free"][1],
                       "inactive_bytes": blocks["inactive"][1]},
            "history": history, "warnings": warnings}


# ---------------------------------------------------------------- segments at the peak

# NOTE [snapshot segments]
# What the engine's caching allocator must reproduce, read from a snapshot with a history
# (``vdnnsim measure --memory-history``; ``snapshot_segments``): per device, per stream
# and pool (small: the 2 MiB segments that serve requests of at most 1 MiB; large: the
# rest), the segments at the moment of peak reserved memory, each with its size, how many
# blocks it is split into (allocated ones and free ones) and its allocated, requested and
# free bytes; the cudaMalloc and cudaFree calls of the history (``segment_alloc`` and
# ``segment_free``; ``segment_map``/``segment_unmap`` for expandable segments, counted
# apart); and the peak reserved bytes. The state is replayed backwards from the snapshot's
# own segments and blocks, which are exact, undoing the history's entries one by one
# (undo an alloc: the block was not there; undo a free_completed: it was; likewise for
# segments), so a history that starts late (recording began after the warm-up, or the
# ring buffer dropped entries) still gives the exact state at every moment it covers; the
# peak is the largest reserved total of those moments, and of the moments at that peak the
# one with the most allocated is shown (the tightest packing). A block's size is exact
# where it lived on to the snapshot; otherwise it is its request rounded up to 512 bytes
# as the allocator rounds (PyTorch's default settings), and in a large segment a free gap
# of at most 1 MiB right after such a block is taken as that block's unsplit tail (the
# allocator splits a large block only when more than 1 MiB would remain): those blocks are
# counted (``estimated_blocks``).
SMALL_REQUEST_BYTES = MiB  # kSmallSize: requests up to this are served by the small pool
SMALL_SEGMENT_BYTES = 2 * MiB  # kSmallBuffer: the small pool's segment size
BLOCK_ROUND_BYTES = 512  # kMinBlockSize: every block is a multiple of this


def _round_block(n: int) -> int:
    return max(BLOCK_ROUND_BYTES, -(-n // BLOCK_ROUND_BYTES) * BLOCK_ROUND_BYTES)


class _Ranges:
    """The segments (or mapped pieces of expandable ones) live at one moment, by address."""

    def __init__(self) -> None:
        self.r: dict[int, dict[str, Any]] = {}

    def add(self, addr: int, size: int, stream: Any, pool: str | None, expandable: bool
            ) -> None:
        if pool is None:  # a segment the snapshot does not show: its neighbour's, or by size
            near = [v for a, v in self.r.items() if a + v["size"] == addr or addr + size == a]
            pool = near[0]["pool"] if near else (
                "small" if size <= SMALL_SEGMENT_BYTES else "large")
        self.r[addr] = {"size": size, "stream": stream, "pool": pool,
                        "expandable": expandable}

    def remove(self, addr: int, size: int) -> dict[str, Any] | None:
        """Take [addr, addr + size) out of the range holding it; that range, or None."""
        for a, v in self.r.items():
            if a <= addr < a + v["size"]:
                del self.r[a]
                if addr > a:
                    self.r[a] = {**v, "size": addr - a}
                end = a + v["size"]
                if addr + size < end:
                    self.r[addr + size] = {**v, "size": end - addr - size}
                return v
        return None

    def segments(self) -> list[dict[str, Any]]:
        """The ranges as segments: an expandable segment's contiguous pieces are one."""
        out: list[dict[str, Any]] = []
        for a in sorted(self.r):
            v = self.r[a]
            last = out[-1] if out else None
            if (last and v["expandable"] and last["expandable"]
                    and last["address"] + last["size"] == a
                    and (last["stream"], last["pool"]) == (v["stream"], v["pool"])):
                last["size"] += v["size"]
            else:
                out.append({"address": a, **v})
        return out


def snapshot_segments(data: Any, what: str = "snapshot") -> list[dict[str, Any]]:
    """NOTE [snapshot segments]: per device of a snapshot (plain data, as ``load_snapshot``
    gives it), the segment-level facts at its peak reserved moment, as plain data."""
    check_snapshot(data, what)
    devices = sorted({s["device"] for s in data["segments"]}
                     | {d for d, t in enumerate(data["device_traces"]) if t})
    return [_device_segments(d, [s for s in data["segments"] if s["device"] == d],
                             data["device_traces"][d] if d < len(data["device_traces"])
                             else []) for d in devices]


def _device_segments(dev: int, segs: list[dict[str, Any]], trace: list[dict[str, Any]]
                     ) -> dict[str, Any]:
    ranges = _Ranges()
    blocks: dict[int, list[Any]] = {}  # address -> [requested, exact size or None]
    for s in segs:
        ranges.add(s["address"], s["total_size"], s.get("stream", "unknown"),
                   s.get("segment_type") if s.get("segment_type") in ("small", "large")
                   else None, bool(s.get("is_expandable")))
        for b in s["blocks"]:
            if b["state"] != "inactive":
                req = b.get("requested_size")
                blocks[b["address"]] = [req if _int(req) and req > 0 else b["size"], b["size"]]
    entries = [e for e in trace if e["action"] in _ALLOC_UP | _ALLOC_DOWN | _SEG_UP | _SEG_DOWN]
    # reserved and allocated at each moment k (after the first k entries), backwards from
    # the snapshot's state
    reserved = [0] * (len(entries) + 1)
    allocated = [0] * (len(entries) + 1)
    reserved[-1] = sum(s["total_size"] for s in segs)
    allocated[-1] = sum(r for r, _ in blocks.values())
    for k in range(len(entries) - 1, -1, -1):
        e = entries[k]
        act, size = e["action"], e["size"]
        reserved[k] = reserved[k + 1] - (size if act in _SEG_UP else -size if act in _SEG_DOWN
                                         else 0)
        allocated[k] = allocated[k + 1] - (size if act in _ALLOC_UP else -size
                                           if act in _ALLOC_DOWN else 0)
    peak = max(reserved)
    at = max((k for k in range(len(reserved)) if reserved[k] == peak),
             key=lambda k: (allocated[k], -k))
    warnings = []
    lost = 0
    calls: dict[tuple[str, str], list[int]] = {}  # (stream, pool) -> [mallocs, frees]
    kept = (dict(ranges.r), dict(blocks))
    for k in range(len(entries) - 1, -1, -1):  # undo every entry; keep the moment ``at``
        e = entries[k]
        act, addr, size = e["action"], e["addr"], e["size"]
        if act in _ALLOC_UP:
            lost += blocks.pop(addr, None) is None
        elif act in _ALLOC_DOWN:
            blocks[addr] = [size, None]
        elif act in _SEG_UP:
            v = ranges.remove(addr, size)
            lost += v is None
            if act == "segment_alloc" and v is not None:
                calls.setdefault((str(v["stream"]), v["pool"]), [0, 0])[0] += 1
        else:
            ranges.add(addr, size, e.get("stream", "unknown"), None, act == "segment_unmap")
            if act == "segment_free":
                v = ranges.r[addr]
                calls.setdefault((str(v["stream"]), v["pool"]), [0, 0])[1] += 1
        if k == at:
            kept = (dict(ranges.r), dict(blocks))
    ranges.r, blocks = kept
    if lost:
        warnings.append(f"{lost} history entries undo what the snapshot does not hold: "
                        "history and state disagree")
    segments = ranges.segments()
    starts = [s["address"] for s in segments]
    per_seg: list[list[tuple[int, int, int | None]]] = [[] for _ in segments]
    outside = 0
    for addr, (req, exact) in blocks.items():
        i = bisect.bisect_right(starts, addr) - 1
        if i < 0 or addr >= starts[i] + segments[i]["size"]:
            outside += 1
            continue
        per_seg[i].append((addr, req, exact))
    if outside:
        warnings.append(f"{outside} allocated block(s) lie in no segment: history and state "
                        "disagree")
    estimated = 0
    pools: dict[tuple[str, str], dict[str, Any]] = {}

    def pool_of(key: tuple[str, str]) -> dict[str, Any]:
        return pools.setdefault(key, {"stream": key[0], "pool": key[1], "segments": 0,
                                      "reserved_bytes": 0, "allocated_bytes": 0,
                                      "requested_bytes": 0, "free_bytes": 0, "blocks": 0,
                                      "cuda_malloc": 0, "cuda_free": 0,
                                      "segment_list": []})
    for s, bl in zip(segments, per_seg):
        row = _segment_row(s, sorted(bl))
        estimated += row.pop("estimated")
        pool = pool_of((str(s["stream"]), s["pool"]))
        pool["segments"] += 1
        for k in ("allocated_bytes", "requested_bytes", "free_bytes", "blocks"):
            pool[k] += row[k]
        pool["reserved_bytes"] += row["size_bytes"]
        pool["segment_list"].append(row)
    for key, (mallocs, frees) in calls.items():
        pool = pool_of(key)
        pool["cuda_malloc"], pool["cuda_free"] = mallocs, frees
    count = {a: sum(e["action"] == a for e in entries)
             for a in ("segment_alloc", "segment_free", "segment_map", "segment_unmap")}
    times = [e.get("time_us") for e in entries[:at]] if at else []
    return {"device": dev, "history_entries": len(entries),
            "peak_reserved_bytes": peak, "peak_moment": {
                "entry": at, "of": len(entries),
                "time_us": times[-1] if times and _int(times[-1]) else None,
                "allocated_requested_bytes": allocated[at]},
            "cuda_malloc": count["segment_alloc"], "cuda_free": count["segment_free"],
            "segment_map": count["segment_map"], "segment_unmap": count["segment_unmap"],
            "estimated_blocks": estimated,
            "pools": [pools[k] for k in sorted(pools)], "warnings": warnings}


def _segment_row(seg: dict[str, Any], blocks: list[tuple[int, int, int | None]]
                 ) -> dict[str, Any]:
    """One segment at a moment: its allocated blocks (address, requested, exact size or
    None) and the free pieces between them (NOTE [snapshot segments])."""
    start, end = seg["address"], seg["address"] + seg["size"]
    cursor, free_pieces, alloc_bytes, estimated = start, 0, 0, 0
    sizes: list[int] = []
    for addr, req, exact in blocks:
        if addr > cursor:
            gap = addr - cursor
            if (sizes and sizes[-1] < 0 and seg["pool"] == "large"
                    and gap <= SMALL_REQUEST_BYTES):
                alloc_bytes += gap  # the estimated block before it kept its tail
            else:
                free_pieces += 1
        size = exact if exact is not None else _round_block(req)
        estimated += exact is None
        sizes.append(size if exact is not None else -size)
        alloc_bytes += size
        cursor = max(cursor, addr + size)
    if end > cursor:
        gap = end - cursor
        if sizes and sizes[-1] < 0 and seg["pool"] == "large" and gap <= SMALL_REQUEST_BYTES:
            alloc_bytes += gap
        else:
            free_pieces += 1
    alloc_bytes = min(alloc_bytes, seg["size"])
    return {"address": start, "size_bytes": seg["size"], "expandable": seg["expandable"],
            "blocks": len(blocks) + free_pieces, "allocated_blocks": len(blocks),
            "allocated_bytes": alloc_bytes,
            "requested_bytes": sum(r for _, r, _ in blocks),
            "free_bytes": seg["size"] - alloc_bytes, "estimated": estimated}


def import_segments(path: str | os.PathLike) -> dict[str, Any]:
    """NOTE [snapshot segments]: ``vdnnsim import FILE --segments``'s record."""
    what = _shown(path)
    data = load_snapshot(path)
    devices = snapshot_segments(data, what)
    warnings = [f"device {d['device']}: {w}" for d in devices for w in d.pop("warnings")]
    if not any(d["history_entries"] for d in devices):
        warnings.append("no history (recorded without torch.cuda.memory."
                        "_record_memory_history?): the segments are the snapshot's own, "
                        "at its moment, not at a peak")
    return {"kind": KIND_SEGMENTS, "file": str(path), "devices": devices,
            "warnings": warnings}


# ---------------------------------------------------------------- the readable form

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
    out = [f"{_shown(rec['file'])}: {KIND_TRACE}{gpu}, {len(steps)} step(s); device times "
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
    out = [f"{_shown(rec['file'])}: {KIND_SNAPSHOT}, {len(rec['devices'])} device(s)"]
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
        shown = ", ".join(f"{k}={v}" for k, v in s.items() if not isinstance(v, dict))
        out.append(f"allocator settings: {shown}")
    return out


def _format_segments(rec: dict[str, Any]) -> list[str]:
    out = [f"{_shown(rec['file'])}: {KIND_SEGMENTS}, {len(rec['devices'])} device(s)"]
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
                       "before the snapshot; NOTE [snapshot segments])")
    return out


def to_json(rec: dict[str, Any]) -> str:
    return json.dumps(rec, indent=2)
