"""Name -> policy function. A policy takes the trace, the GPU, the pool capacity and its
options and returns a Plan; it may run profiling passes (simulations) to decide, as
vDNN_dyn does."""

from __future__ import annotations

from typing import Any, Callable

from ..errors import UnknownNameError
from ..hardware import GPU
from ..trace.model import Trace
from .plan import Plan

PolicyFn = Callable[[Trace, GPU, "int | None", dict[str, Any]], Plan]
POLICIES: dict[str, tuple[PolicyFn, dict[str, Any], str]] = {}


def register(name: str, fn: PolicyFn, doc: str, **fixed: Any) -> None:
    POLICIES[name] = (fn, fixed, doc)


def policy_names() -> list[str]:
    _load()
    return list(POLICIES)


def get_policy(name: str) -> tuple[PolicyFn, dict[str, Any]]:
    _load()
    try:
        fn, fixed, _ = POLICIES[name]
    except KeyError:
        raise UnknownNameError("policy", name, list(POLICIES)) from None
    return fn, fixed


def _load() -> None:
    from . import blocks, builtin, recompute, uvm  # noqa: F401  (register the built-in policies)
    from .. import planner  # noqa: F401  (and the planned one)
