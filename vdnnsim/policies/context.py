"""What a policy knows of the run it plans for, beyond the trace, the GPU, the capacity and
its options: an explicit argument of every policy (``PolicyFn``), made by its caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..engine import AllocatorSettings

# NOTE [planning allocator]
# A policy that decides by replaying (vDNN_dyn's profiling passes, vdnn_blocks' `budget`)
# replays under the allocator settings its run replays under: a plan chosen under
# PyTorch's defaults for a run under `expandable_segments` chose for another allocator, and
# the run's own replay would then judge a plan made for the wrong one. The caller says the
# settings in the policy's context (``PolicyContext.allocator``); a policy called without
# one plans under PyTorch's defaults.


@dataclass(frozen=True)
class PolicyContext:
    """The run a policy plans for: ``allocator``, the caching allocator's settings its
    replays use (None: PyTorch's defaults); ``plan_blocks``,
    the block planner (planners/blocks.py) that vdnn_blocks' ``budget`` option runs (the
    planner builds on the policy, so the policy is handed it; None: no budget search)."""

    allocator: AllocatorSettings | None = None
    plan_blocks: Callable[..., Any] | None = None


NO_CONTEXT = PolicyContext()
