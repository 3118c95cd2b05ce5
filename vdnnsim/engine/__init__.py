"""The discrete-event engine: one entry, :func:`replay` (replay.py, NOTE [replay]), the
simulation (sim.py), its allocators (allocator.py, caching.py), the plan it replays
(plan.py), the unified-memory replay (uvm.py) and the invariant checker (invariants.py).
docs/architecture.md describes how they fit."""

from .replay import replay

__all__ = ["replay"]
