"""Chrome trace JSON (the Trace Event Format that Perfetto and chrome://tracing open).

NOTE [chrome trace]
One process per run; threads: the host (what it spent issuing each layer, where it
waited), the compute stream, the D2H and the H2D copy engine, and a track of
tensor lifetimes (async slices, one per allocation). It reads RunResult's public face only
(one run's events are ``run_events`` in results.py, beneath the report, so that
``RunResult.chrome_trace()`` imports nothing above it). Memory is a counter track.
Each offload has a flow arrow to the prefetch (or on-demand fetch) that brings the same
buffer back. Timestamps are microseconds, as the format requires.
"""

from __future__ import annotations

import json
from typing import Any

from ..results import TENSORS_TID, THREADS, run_events  # noqa: F401  (re-exported)
from .table import need_times


def chrome_trace(results) -> dict[str, Any]:
    need_times(results, "timeline to write")
    events: list[dict[str, Any]] = []
    for pid, r in enumerate(results, start=1):
        events += run_events(r, pid)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def dumps(results) -> str:
    return json.dumps(chrome_trace(results))
