"""Chrome trace JSON (the Trace Event Format that Perfetto and chrome://tracing open).

NOTE [chrome trace]
One process per run; threads: the host (what it spent issuing each layer, where it
waited: NOTE [host]), the compute stream, the D2H and the H2D copy engine, and a track of
tensor lifetimes (async slices, one per allocation). It reads RunResult's public face only. Memory is a counter track.
Each offload has a flow arrow to the prefetch (or on-demand fetch) that brings the same
buffer back. Timestamps are microseconds, as the format requires.
"""

from __future__ import annotations

import json
from typing import Any

from ..units import GB

THREADS = {"host": 0, "compute": 1, "d2h": 2, "h2d": 3}
TENSORS_TID = 4


def _us(ns: int) -> float:
    return ns / 1000.0


def run_events(r, pid: int = 1) -> list[dict[str, Any]]:
    ev: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name",
         "args": {"name": f"{r.network} (batch {r.batch_size}) {r.policy} on {r.gpu}"}}]
    names = {"host": "host", "compute": "compute stream", "d2h": "D2H copy engine",
             "h2d": "H2D copy engine"}
    for stream, tid in THREADS.items():
        ev.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                   "args": {"name": names[stream]}})
    ev.append({"ph": "M", "pid": pid, "tid": TENSORS_TID, "name": "thread_name",
               "args": {"name": "tensor lifetimes"}})
    offloads: dict[str, Any] = {}
    flow = 0
    for op in r.ops:
        tid = THREADS[op.stream]
        ev.append({"ph": "X", "pid": pid, "tid": tid, "name": op.name, "cat": op.kind,
                   "ts": _us(op.start_ns), "dur": _us(op.end_ns - op.start_ns),
                   "args": {"layer": op.layer, "bytes": op.size_bytes}})
        if op.kind == "offload":
            offloads[op.name] = op
        elif op.kind == "prefetch" and op.name in offloads:
            src = offloads.pop(op.name)
            flow += 1
            fid = pid * 1_000_000 + flow
            ev.append({"ph": "s", "pid": pid, "tid": THREADS["d2h"], "id": fid, "cat": "move",
                       "name": f"{op.name} round trip", "ts": _us(src.start_ns)})
            ev.append({"ph": "f", "bp": "e", "pid": pid, "tid": THREADS["h2d"], "id": fid,
                       "cat": "move", "name": f"{op.name} round trip", "ts": _us(op.start_ns)})
    for t, level in zip(*r.memory_steps):
        ev.append({"ph": "C", "pid": pid, "name": "GPU memory", "ts": _us(t),
                   "args": {"allocated GB": level / GB}})
    for k, (key, cat, size, t0, t1) in enumerate(r.lifetimes):
        common = {"pid": pid, "tid": TENSORS_TID, "cat": cat, "name": key,
                  "id": f"{pid}-{k}"}
        ev.append({"ph": "b", "ts": _us(t0), "args": {"bytes": size}, **common})
        ev.append({"ph": "e", "ts": _us(t1), **common})
    return ev


def chrome_trace(results) -> dict[str, Any]:
    from .table import need_times
    need_times(results, "timeline to write")  # NOTE [memory-only traces]
    events: list[dict[str, Any]] = []
    for pid, r in enumerate(results, start=1):
        events += run_events(r, pid)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def dumps(results) -> str:
    return json.dumps(chrome_trace(results))
