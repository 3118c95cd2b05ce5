"""The ``planned`` policy: replay a plan file that ``vdnnsim plan`` wrote (NOTE [planner]
in planner.py, which searches for the plan and writes the file; this module reads it, so
that the policy table needs nothing of the planner).

A plan file (``format: vdnnsim-plan``) lists per layer its algorithm, its offloads and its
prefetch, the recomputed segments and the batch splits that the plan
runs.
"""

from __future__ import annotations

from typing import Any

from ..engine import allocator_settings
from ..errors import ConfigError
from ..hardware import GPU
from ..limits import short_repr
from ..planners.split import split_trace
from ..trace.model import Trace
from ..planners.planfile import BLOCK_FORMAT, FORMAT, BlockPlanFile, read_plan_file
from .builtin import check_options, common_options
from .context import NO_CONTEXT, PolicyContext
from .plan import Plan, liveness



def plan_from_file(path: str, trace: Trace, gpu: GPU) -> Plan:
    """A plan file for ``trace``: every layer named, in order (after
    its batch splits); algorithms and buffers that the trace has."""
    data = read_plan_file(path)
    if isinstance(data, BlockPlanFile):
        opts = (f"blocks: {data.blocks}, recompute: {data.recompute_blocks}"
                if data.recompute_blocks and data.blocks
                else f"recompute: {data.recompute_blocks}" if data.recompute_blocks
                else f"blocks: {data.blocks}") + (
            f", params: {data.param_blocks} (and the optimizer offloaded)"
            if data.param_blocks else "")
        raise ConfigError(f"{path}: a block plan ({BLOCK_FORMAT}): replay it with policy "
                          f"vdnn_blocks, options {opts} (policy planned replays a layer "
                          f"plan, {FORMAT}), or run it with vdnnsim measure --plan")
    for first, last, parts in data.split:
        try:
            trace = split_trace(trace, gpu, first, last, parts)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    ids = [x.id for x in trace.layers]
    if [r.id for r in data.layers] != ids:
        raise ConfigError(f"{path}: its layers are not the trace's ({trace.name}, "
                          f"{len(ids)} layers)")
    lv = liveness(trace)
    algos, offload, prefetch = [], [], []
    index = {x: i for i, x in enumerate(ids)}
    for layer, r in zip(trace.layers, data.layers):
        names = [a.name for a in layer.algos]
        if r.algo not in names:
            raise ConfigError(f"{path}: layer {layer.id}: algorithm {short_repr(r.algo)}"
                              f" is not one of the trace's ({', '.join(names)})")
        algos.append(names.index(r.algo))
        if any(b not in lv.size for b in r.offload):
            raise ConfigError(f"{path}: layer {layer.id}: offload names a buffer the trace "
                              f"does not have: {short_repr(r.offload)}")
        offload.append(tuple(r.offload))
        prefetch.append(index[r.prefetch] if r.prefetch is not None else -1)
    conf = allocator_settings(data.allocator.conf() if data.allocator else None).conf()
    tensors = data.version >= 3 and data.layer_names == "ops"  # the tensor runtime's plan,
    # paid for per copy as the planner replayed it (NOTE [tensor runtime])
    return Plan("planned", "layer_wise", tuple(algos), tuple(offload), tuple(prefetch),
                data.sync, runtime="tensors" if tensors else True, recompute=data.segments(),
                trace=trace if data.split else None,
                split=tuple((a, b, k) for a, b, k in data.split),
                optimizer_offload=data.optimizer_offload,
                planned_allocator=conf)


def planned(trace: Trace, gpu: GPU, capacity: int | None, options: dict[str, Any],
            ctx: PolicyContext = NO_CONTEXT) -> Plan:
    opts = dict(options)
    common_options("planned", opts, trace)
    path = opts.pop("file", None)
    check_options("planned", opts, {"file"})
    if not isinstance(path, str) or not path:
        raise ConfigError("policy planned: option file (a plan written by vdnnsim plan) is "
                          "required")
    return plan_from_file(path, trace, gpu)
