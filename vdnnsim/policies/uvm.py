"""Page-based unified memory as policies: ``uvm_lru`` and ``uvm_lfu`` (NOTE [uvm] in
vdnnsim/engine/uvm.py). Options: ``page_bytes`` (4096), ``fault_ns`` (45000),
``fault_batch`` (1), ``prefetch_bytes`` (0: no prefetcher) and ``algo`` ('p' or 'm')."""

from __future__ import annotations

from typing import Any

from ..engine import UvmParams
from ..errors import ConfigError
from ..hardware import GPU
from ..limits import short_repr
from ..trace.model import Trace
from ..units import GiB
from .builtin import _whole_or_none, algo_choice, check_options, common_options
from .context import NO_CONTEXT, PolicyContext
from .plan import Plan

_INTS = {  # option: (default, least, most)
    "page_bytes": (4096, 512, GiB), "fault_ns": (45_000, 0, 10**9),
    "fault_batch": (1, 1, 10**6), "prefetch_bytes": (0, 0, GiB)}


def uvm(trace: Trace, gpu: GPU, capacity: int | None, options: dict[str, Any],
        ctx: PolicyContext = NO_CONTEXT) -> Plan:
    opts = dict(options)
    eviction = opts.pop("eviction")
    name = f"uvm_{eviction}"
    common_options(name, opts, trace)  # accepted so one option set serves every policy
    algo = opts.pop("algo", "p")
    if algo not in ("m", "p"):
        raise ConfigError(f"policy {name}: option algo must be m or p, got {short_repr(algo)}")
    values = {}
    for key, (default, lo, hi) in _INTS.items():
        given = opts.pop(key, default)
        v = _whole_or_none(given)
        if v is None or not lo <= v <= hi:
            raise ConfigError(f"policy {name}: option {key} must be an integer from {lo} to "
                              f"{hi}, got {short_repr(given)}")
        values[key] = v
    check_options(name, opts, set(_INTS) | {"algo"})
    n = len(trace.layers)
    return Plan(name, "uvm", algo_choice(trace, algo), ((),) * n, (-1,) * n,
                uvm=UvmParams(eviction=eviction, **values))
