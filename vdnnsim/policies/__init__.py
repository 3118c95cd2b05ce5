"""Offload/prefetch policies: pure functions from (trace, GPU, capacity, options, context) to
a Plan, looked up by name in a table (registry.py) so that configs can name them. See
docs/policies.md."""

from .context import NO_CONTEXT, PolicyContext
from .plan import Liveness, Plan, find_prefetch_schedule, liveness, offload_sets
from .registry import POLICIES, PolicyFn, get_policy, policy_names

__all__ = ["Liveness", "NO_CONTEXT", "Plan", "POLICIES", "PolicyContext", "PolicyFn",
           "find_prefetch_schedule", "get_policy", "liveness", "offload_sets", "policy_names"]
