"""The discrete-event engine: one entry, :func:`replay` (replay.py), which
returns a frozen :class:`Replayed` record; the simulation (sim.py), its memory behind one
interface (memory_model.py: the allocators of allocator.py and caching.py, unified
memory's pager of uvm.py), the plan it replays (plan.py) and the invariant checker
(invariants.py). Code outside the engine imports from here only (tests/test_imports.py);
docs/architecture.md describes how the parts fit."""

from .allocconf import ALLOWED, ENV, check_conf, effective, env_string, is_default, parse_pairs
from .allocator import aligned
from .caching import KNOWN_SETTINGS, AllocatorSettings, allocator_settings
from .compile import (MOMENTS, PlanError, checkpoint_buffers, free_points, keepers,
                      optimizer_host_bytes, optimizer_pinned_bytes, optimizer_state)
from .invariants import InvariantViolation
from .memory_model import OutOfMemory
from .optimizer_step import cpu_step_calibrated, cpu_step_per_element
from .params import ParamGroup
from .pinned import PINNINGS, registered_bytes
from .plan import Liveness, Plan, liveness
from .replay import replay
from .result import Replayed
from .semantics import semantics_for
from .streams import Op
from .uvm import UvmParams

__all__ = ["ALLOWED", "ENV", "KNOWN_SETTINGS", "MOMENTS", "PINNINGS",
           "AllocatorSettings", "InvariantViolation", "Liveness", "Op", "OutOfMemory",
           "ParamGroup", "Plan", "PlanError", "Replayed", "UvmParams", "aligned",
           "allocator_settings", "check_conf", "checkpoint_buffers", "cpu_step_calibrated",
           "cpu_step_per_element", "effective", "env_string", "free_points", "is_default",
           "keepers", "liveness", "optimizer_host_bytes", "optimizer_pinned_bytes",
           "optimizer_state", "parse_pairs", "registered_bytes", "replay", "semantics_for"]
