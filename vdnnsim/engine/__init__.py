"""The discrete-event engine: one entry, :func:`replay` (replay.py, NOTE [replay]), the
simulation (sim.py), its memory behind one interface (memory_model.py: the allocators of
allocator.py and caching.py, unified memory's pager of uvm.py), the plan it replays
(plan.py) and the invariant checker (invariants.py). docs/architecture.md describes how
they fit."""

from .replay import replay

__all__ = ["replay"]
