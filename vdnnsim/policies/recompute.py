"""Activation checkpointing (NOTE [recompute] in vdnnsim/engine/sim.py) as a policy,
alone or with vDNN's offload: ``checkpoint``.

Options: ``segments`` (default: the square root of the layer count, rounded), split as
``torch.utils.checkpoint.checkpoint_sequential`` splits: ``segments`` chunks of
``n // segments`` layers, every chunk but the last checkpointed; ``offload`` ('none', the
default, 'conv' or 'all': vDNN's choice of buffers among those the checkpointing keeps,
segment inputs excepted); ``algo`` ('p' or 'm'); and the options every policy takes."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ..engine import checkpoint_buffers
from ..errors import ConfigError
from ..hardware import GPU
from ..limits import short_repr
from ..trace.model import Trace
from .builtin import (algo_choice, check_options, common_options, distance_schedule,
                      vdnn_plan)
from .context import NO_CONTEXT, PolicyContext
from .plan import Plan, find_prefetch_schedule, liveness, policy_marks


def sequential_segments(n: int, segments: int) -> tuple[tuple[int, int], ...]:
    """checkpoint_sequential's split of ``n`` layers: (first, last) of each checkpointed
    chunk (all but the last of ``segments`` chunks of ``n // segments``)."""
    size = n // segments
    if size < 1:
        return ()
    return tuple((s, s + size - 1) for s in range(0, size * (segments - 1), size))


def checkpoint(trace: Trace, gpu: GPU, capacity: int | None, options: dict[str, Any],
               ctx: PolicyContext = NO_CONTEXT) -> Plan:
    name = "checkpoint"
    opts = dict(options)
    c = common_options(name, opts, trace)
    n = len(trace.layers)
    segments = opts.pop("segments", max(1, round(math.sqrt(n))))
    if isinstance(segments, bool) or not isinstance(segments, int) or not 1 <= segments <= n:
        raise ConfigError(f"policy {name}: option segments must be an integer from 1 to the "
                          f"layer count ({n}), got {short_repr(segments)}")
    which = opts.pop("offload", "none")
    if which not in ("none", "conv", "all"):
        raise ConfigError(f"policy {name}: option offload must be none, conv or all, got "
                          f"{short_repr(which)}")
    algo = opts.pop("algo", "p")
    if algo not in ("m", "p"):
        raise ConfigError(f"policy {name}: option algo must be m or p, got {short_repr(algo)}")
    check_options(name, opts, {"segments", "offload", "algo"})
    segs = sequential_segments(n, segments)
    plan = with_segments(trace, segs, which, algo_choice(trace, algo), c.sync, name,
                         c.prefetch, c.reading, c.distance, c.placement)
    return replace(plan, notes=(f"{len(segs)} checkpointed segment(s) of {n // segments} "
                                f"layers, offload {which}",))


def without_checkpointed(trace: Trace, segs: tuple[tuple[int, int], ...],
                          offload: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...]:
    """``offload`` (per layer, the buffers it offloads) less what the checkpointed ``segs``
    drop or keep as their inputs: an offload of those frees nothing."""
    lv = liveness(trace)
    held = {b for b in lv.size if b not in lv.producer} if trace.pytorch else set()
    skip: set[str] = set()
    for first, last in segs:
        dropped, inputs = checkpoint_buffers(trace, lv, first, last, held)
        skip |= dropped | inputs
    return tuple(tuple(b for b in o if b not in skip) for o in offload)


def with_segments(trace: Trace, segs: tuple[tuple[int, int], ...], which: str,
                  algos: tuple[int, ...], sync: bool = True, name: str = "checkpoint",
                  prefetch: bool = True, reading: str = "measured", distance: int = 0,
                  placement: str = "best") -> Plan:
    """Checkpointed ``segs`` with vDNN's offload of ``which`` ('none',
    'conv' or 'all') among the buffers the checkpointing keeps."""
    n = len(trace.layers)
    plan = vdnn_plan(trace, which, algos, sync, name, prefetch, reading, distance, placement)
    if which != "none" and segs:  # never offload what the checkpointing drops or rereads
        offload = without_checkpointed(trace, segs, plan.offload)
        if not prefetch:
            schedule = (-1,) * n
        elif distance:
            schedule = distance_schedule(offload, distance)
        else:
            schedule = find_prefetch_schedule(trace, offload,
                                              policy_marks(trace, which, reading))
        plan = replace(plan, offload=offload, prefetch=schedule)
    return replace(plan, recompute=segs, runtime=which != "none")
