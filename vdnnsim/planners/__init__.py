"""Planners: searches over what to offload, recompute and which algorithm to run under a memory budget, each answer checked by the engine; and the plan files they write."""
