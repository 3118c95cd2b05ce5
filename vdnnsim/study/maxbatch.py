"""The largest batch size that fits: a search, not a scan.

NOTE [maxbatch]
Doubling finds a batch size that does not fit, then bisection finds the largest that does,
so a network that fits up to B costs about 2 log2(B) simulations. It assumes that a batch
that fits implies every smaller one fits, which holds for the memory of every policy up to
the pool's fragmentation; ``fits`` at the answer and at the next size are both simulated,
so the answer itself is always a true fit. A batch size whose network is beyond what the
simulator models (over 1 PiB in all, errors.ScaleError) counts as not fitting and
the search goes on below it: the answer is then the largest batch size that fits among
those it can model, and the record names the smallest size found beyond it
(``beyond_scale_at``). Batch size 1 beyond it is an error.

Every answer says what bounds it (``bound``), from the simulated run at the next size
(at batch 1 where nothing fits):
- ``capacity``: that run needs more GPU memory than the pool has;
- ``fragmentation``: its live bytes would fit, but no free block is large enough; a larger batch may then fit again, which the search does not look for;
- ``host memory``: its offloads pin more than the host's memory;
- ``scale``: the next size is beyond what the simulator models;
- ``limit``: ``limit`` itself fits, and is the answer (``at_limit``); the search tries
  no larger size.
The record also gives the answer's pinned host bytes (``peak_host_bytes``) beside the
host's (``host_capacity_bytes``).
"""

from __future__ import annotations

from typing import Any

from ..api import build_trace, resolve_gpu, run_trace
from ..errors import ConfigError, ScaleError

def max_batch(network: str, gpu: str = "k40", policy: str = "vdnn_dyn", *,
              dtype: str = "fp32", gpu_overrides: dict[str, Any] | None = None,
              memory_bytes: int | None = None, policy_options: dict[str, Any] | None = None,
              limit: int = 1 << 16, host_memory_bytes: int | str | None = None
              ) -> dict[str, Any]:
    """``host_memory_bytes``: the host's memory, as the gpu override
    of that name."""
    if host_memory_bytes is not None:
        gpu_overrides = {**(gpu_overrides or {}), "host_memory_bytes": host_memory_bytes}
    g = resolve_gpu(gpu, gpu_overrides)
    tried: dict[int, Any] = {}

    def run(b: int):
        if b not in tried:
            try:
                trace = build_trace(network, b, g, dtype)
            except ScaleError:
                if b == 1:
                    raise
                tried[b] = _BEYOND
                return _BEYOND
            if trace.batch_size != b:
                raise ConfigError(f"{network}: a trace has a fixed batch size")
            tried[b] = run_trace(trace, g, policy, policy_options, memory_bytes)
        return tried[b]

    record: dict[str, Any] = {"network": network, "gpu": g.name, "policy": policy,
                              "dtype": dtype}
    if not run(1).fits:
        return {**record, "max_batch_size": 0, "bound": _bound(run(1)),
                "host_capacity_bytes": g.host_memory_bytes, "simulations": len(tried)}
    result = _search(run, limit)
    result["host_capacity_bytes"] = g.host_memory_bytes
    beyond = [b for b, r in tried.items() if r is _BEYOND]
    if beyond:
        result["beyond_scale_at"] = min(beyond)
    return {**record, **result, "simulations": len(tried) - len(beyond)}


def _search(run, limit: int) -> dict[str, Any]:
    lo, hi = 1, 2
    while hi <= limit and run(hi).fits:
        lo, hi = hi, hi * 2
    if hi > limit:  # every doubling up to the limit fits: the limit itself decides
        if lo == limit or run(limit).fits:
            return {"max_batch_size": limit, "at_limit": True, "bound": "limit",
                    **_facts(run(limit))}
        hi = limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(mid).fits:
            lo = mid
        else:
            hi = mid
    # hi = lo + 1, simulated: the doubling or the bisection found it does not fit
    return {"max_batch_size": lo, "at_limit": False, "bound": _bound(run(hi)),
            **_facts(run(lo))}


def _bound(r) -> str:
    """Why the run ``r`` (one that does not fit) does not."""
    if r is _BEYOND:
        return "scale"
    return r.oom.reason


class _Beyond:
    fits = False


_BEYOND = _Beyond()


def _facts(r) -> dict[str, Any]:
    return {"slowdown": r.slowdown, "iteration_time_s": r.iteration_time_s,
            "peak_memory_bytes": r.peak_memory_bytes, "capacity_bytes": r.capacity_bytes,
            "peak_host_bytes": r.peak_host_bytes}
