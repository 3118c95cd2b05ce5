"""A CUDA memory snapshot (``torch.cuda.memory._dump_snapshot``) read as plain data by an
unpickler that refuses every class, checked to be a snapshot and summarized per device."""

from __future__ import annotations

import bisect
import gzip
import io
import os
import pickle
import zlib
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..units import GiB
from .tracefile import reason, shown

MAX_PICKLE_BYTES = 2 * GiB  # a snapshot pickle (decompressed, where gzipped)
TAKES = ("vdnnsim import takes a torch.profiler trace (Chrome trace JSON from "
         "export_chrome_trace, .json or .json.gz) or a CUDA memory snapshot pickle "
         "(torch.cuda.memory._dump_snapshot)")
KIND_TRACE = "torch.profiler trace"
KIND_SNAPSHOT = "CUDA memory snapshot"
KIND_SEGMENTS = "CUDA memory snapshot: segments at the peak"
PLAIN = (dict, list, tuple, str, int, float, bool, type(None))
ALLOC_UP = frozenset({"alloc"})
ALLOC_DOWN = frozenset({"free_completed"})
SEG_UP = frozenset({"segment_alloc", "segment_map"})
SEG_DOWN = frozenset({"segment_free", "segment_unmap"})


class _Refused(pickle.UnpicklingError):
    pass


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain data only; any class or function reference is refused
    before it is looked up, so nothing named in the file is imported or called."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


def load_snapshot(path: str | os.PathLike, gz: bool | None = None) -> Any:
    """A pickle's plain data, through the refusing unpickler, capped at MAX_PICKLE_BYTES."""
    p = Path(path)
    what = shown(p)
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
        raise ConfigError(f"{what}: cannot read: {reason(exc)}") from None
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
                          f"{reason(exc)[:120]}); {TAKES}") from None


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


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _need(d: Any, key: str, where: str, what: str, kind: str = "int") -> Any:
    if not isinstance(d, dict):
        raise ConfigError(f"{what}: {where} is a {type(d).__name__}, not a dict; expected a "
                          "CUDA memory snapshot (torch.cuda.memory._dump_snapshot)")
    v = d.get(key)
    ok = is_int(v) and v >= 0 if kind == "int" else isinstance(v, {"str": str, "list": list}[kind])
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
            if act in ALLOC_UP | ALLOC_DOWN | SEG_UP | SEG_DOWN | {"free_requested"}:
                _need(e, "addr", w, what)
                _need(e, "size", w, what)


def import_snapshot(path: str | os.PathLike, gz: bool | None = None) -> dict[str, Any]:
    """Per device, the segments and blocks now and the history's peaks."""
    what = shown(path)
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
                live[b["address"]] = req if is_int(req) and req >= 0 else b["size"]

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
        if is_int(t):
            times.append(t)
        if act == "oom":
            ooms += 1
            continue
        if act not in ALLOC_UP | ALLOC_DOWN | SEG_UP | SEG_DOWN:
            continue
        addr, size = e["addr"], e["size"]
        if act in ALLOC_UP:
            alloc += size
            out_a[addr] = out_a.get(addr, 0) + size
        elif act in ALLOC_DOWN:
            alloc -= size
            if out_a.get(addr, 0) >= size:
                out_a[addr] -= size
            else:  # freed what the history never saw allocated: held before it
                before_alloc += size - out_a.pop(addr, 0)
        elif act in SEG_UP:
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
