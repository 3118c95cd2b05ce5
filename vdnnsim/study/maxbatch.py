"""The largest batch size that fits: a search, not a scan.

NOTE [maxbatch]
Doubling finds a batch size that does not fit, then bisection finds the largest that does,
so a network that fits up to B costs about 2 log2(B) simulations. It assumes that a batch
that fits implies every smaller one fits, which holds for the memory of every policy up to
the pool's fragmentation; ``fits`` at the answer and at the next size are both simulated,
so the answer itself is always a true fit. A batch size whose network is beyond what the
simulator models (over 1 PiB in all, NOTE [simulated scale]) counts as not fitting and
the search goes on below it: the answer is then the largest batch size that fits among
those it can model, and the record names the smallest size found beyond it
(``beyond_scale_at``). Batch size 1 beyond it is an error.
"""

from __future__ import annotations

from typing import Any

from ..api import build_trace, resolve_gpu, run_trace
from ..errors import ConfigError, ScaleError


def max_batch(network: str, gpu: str = "k40", policy: str = "vdnn_dyn", *,
              dtype: str = "fp32", gpu_overrides: dict[str, Any] | None = None,
              memory_bytes: int | None = None, policy_options: dict[str, Any] | None = None,
              limit: int = 1 << 16) -> dict[str, Any]:
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
        return {**record, "max_batch_size": 0, "simulations": len(tried)}
    result = _search(run, limit)
    beyond = [b for b, r in tried.items() if r is _BEYOND]
    if beyond:
        result["beyond_scale_at"] = min(beyond)
    return {**record, **result, "simulations": len(tried) - len(beyond)}


def _search(run, limit: int) -> dict[str, Any]:
    lo, hi = 1, 2
    while hi <= limit and run(hi).fits:
        lo, hi = hi, hi * 2
    if hi > limit:
        return {"max_batch_size": lo, "at_limit": True, **_facts(run(lo))}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(mid).fits:
            lo = mid
        else:
            hi = mid
    return {"max_batch_size": lo, "at_limit": False, **_facts(run(lo))}


class _Beyond:
    fits = False


_BEYOND = _Beyond()


def _facts(r) -> dict[str, Any]:
    return {"slowdown": r.slowdown, "iteration_time_s": r.iteration_time_s,
            "peak_memory_bytes": r.peak_memory_bytes, "capacity_bytes": r.capacity_bytes}
