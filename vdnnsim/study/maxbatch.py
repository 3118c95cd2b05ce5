"""The largest batch size that fits: a search, not a scan.

NOTE [maxbatch]
Doubling finds a batch size that does not fit, then bisection finds the largest that does,
so a network that fits up to B costs about 2 log2(B) simulations. It assumes that a batch
that fits implies every smaller one fits, which holds for the memory of every policy up to
the pool's fragmentation; ``fits`` at the answer and at the next size are both simulated,
so the answer itself is always a true fit.
"""

from __future__ import annotations

from typing import Any

from ..api import build_trace, resolve_gpu, run_trace
from ..errors import ConfigError


def max_batch(network: str, gpu: str = "k40", policy: str = "vdnn_dyn", *,
              dtype: str = "fp32", gpu_overrides: dict[str, Any] | None = None,
              memory_bytes: int | None = None, policy_options: dict[str, Any] | None = None,
              limit: int = 1 << 16) -> dict[str, Any]:
    g = resolve_gpu(gpu, gpu_overrides)
    tried: dict[int, Any] = {}

    def run(b: int):
        if b not in tried:
            trace = build_trace(network, b, g, dtype)
            if trace.batch_size != b:
                raise ConfigError(f"{network}: a trace has a fixed batch size")
            tried[b] = run_trace(trace, g, policy, policy_options, memory_bytes)
        return tried[b]

    record: dict[str, Any] = {"network": network, "gpu": g.name, "policy": policy,
                              "dtype": dtype}
    if not run(1).fits:
        return {**record, "max_batch_size": 0, "simulations": len(tried)}
    lo, hi = 1, 2
    while hi <= limit and run(hi).fits:
        lo, hi = hi, hi * 2
    if hi > limit:
        best = run(lo)
        return {**record, "max_batch_size": lo, "at_limit": True, "simulations": len(tried),
                **_facts(best)}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(mid).fits:
            lo = mid
        else:
            hi = mid
    return {**record, "max_batch_size": lo, "at_limit": False, "simulations": len(tried),
            **_facts(run(lo))}


def _facts(r) -> dict[str, Any]:
    return {"slowdown": r.slowdown, "iteration_time_s": r.iteration_time_s,
            "peak_memory_bytes": r.peak_memory_bytes, "capacity_bytes": r.capacity_bytes}
