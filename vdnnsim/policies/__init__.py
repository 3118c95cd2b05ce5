"""Offload/prefetch policies: pure functions from (trace, GPU, options) to a Plan, looked up
by name in a table (registry.py) so that configs can name them. See docs/policies.md."""

from .plan import Liveness, Plan, find_prefetch_schedule, liveness, offload_sets
from .registry import POLICIES, PolicyFn, get_policy, policy_names

__all__ = ["Liveness", "Plan", "POLICIES", "PolicyFn", "find_prefetch_schedule", "get_policy",
           "liveness", "offload_sets", "policy_names"]
