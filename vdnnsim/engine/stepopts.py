"""What a trace's step options change in a replay: its micro-batches (gradient
accumulation) and the segments its model checkpoints itself.

NOTE [accumulation replay]
A trace of ``micro_batches`` N replays N forward and backward passes, then one optimizer
step, as a loop of gradient accumulation runs them: each pass frees its activations before
the next. The first pass's backward allocates each layer's weight gradient (PyTorch
semantics); each later one adds into it, as autograd's AccumulateGrad does: the layer's new
gradient is a temporary of its weight bytes, held through its backward pass, and the adds'
time (``accumulate_ns`` spread over the layers by weight bytes, ``host_accumulate_ns``
equally over the layers with weights) lengthens it. The cuBLAS workspaces and cuDNN's
autotuning come in the first pass only, and the forward time is the first pass's. With the
optimizer on the CPU, or on unified memory, it is not modelled (PlanError).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..trace.model import Trace
from .plan import PlanError

if TYPE_CHECKING:
    from .plan import Plan


# NOTE [own checkpointing]
# A trace's ``checkpointed`` segments are the model's own gradient checkpointing
# (transformers' non-reentrant checkpoint of each decoder layer, say): part of the workload,
# as its layers are, so every plan replays them as NOTE [recompute] replays a policy's,
# beside the plan's own segments. A plan segment that overlaps one of the model's is refused
# (PlanError): checkpoints nested in checkpoints are not modelled. Under network-wide memory
# (everything allocated at the start) only their time is replayed: each segment's forward
# again before its last layer's backward pass. No plan offloads what they drop or keep as
# their inputs (compile.py's ``offload_around_own``, in replay).
def own_segments(trace: Trace, plan: "Plan") -> tuple[tuple[int, int], ...]:
    """The trace's own segments, checked against the plan's (below)."""
    own = trace.checkpointed_segments
    for a, b in plan.recompute:
        for first, last in own:
            if a <= last and first <= b:
                raise PlanError(
                    f"plan {plan.policy}: its checkpointed segment "
                    f"{trace.layers[a].id}..{trace.layers[b].id} overlaps the model's own "
                    f"checkpointing ({trace.layers[first].id}..{trace.layers[last].id}); "
                    "trace the model without it to checkpoint by plan")
    return own


def spread(total: int, weights: list[int]) -> tuple[int, ...]:
    """``total`` split over ``weights`` in proportion, the parts summing to it exactly."""
    whole = sum(weights)
    if not total or not whole:
        return (0,) * len(weights)
    out, acc = [], 0
    for w in weights:
        out.append(total * (acc + w) // whole - total * acc // whole)
        acc += w
    return tuple(out)
