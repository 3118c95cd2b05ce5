"""vDNN for block-structured models: offload whole blocks (``vdnn_blocks``).

NOTE [block offload]
A trace from the op probe tags each op with its region (``attrs['block']``: 0 before the
first block, 1..N the blocks, N + 1 the head and the loss). vDNN's unit there is the block,
as in the runtime (vdnnsim/gpu/runtime/blocks.py): an offloaded block sends what its ops
save for the backward pass (tensors made in the block or last read by it; never the weights,
the batch, what every block reads, or autocast's casts of the weights) to the host at the
last op that reads any of them in the forward pass, and gets them back at the first op of
the next region's backward (one block ahead). As in vDNN_all the earliest blocks go first.
Options: ``blocks`` (how many from the first; default all), or ``budget`` (bytes, or a
capacity like '22 GiB': the fewest that fit, NOTE [block plan]). The runtime's own host
costs are not modelled (plan.runtime is false).

NOTE [block recompute]
The other way to free a block's memory: run it under torch.utils.checkpoint (non-reentrant)
so that its forward pass keeps only its inputs, and run it again when the backward pass
reaches it. Option ``recompute``: the first that many blocks checkpointed (NOTE [recompute]
over each block's own ops, not the ops after it in its region, which run in the parent's
code), nothing offloaded. A block that writes its input in place is never checkpointed
(``block_segments``; the plan file lists the blocks it checkpoints, ``recompute_paths``).
Gradients are the plain step's; a batch norm's running statistics are updated once more by
the recompute, as torch.utils.checkpoint does (docs/validation.md, "Block recompute").

NOTE [block mix]
Both at once: the first ``blocks`` blocks offloaded and the ``recompute`` blocks after them
checkpointed (options ``blocks`` and ``recompute`` together; ``block_mixed_plan``). The
earliest blocks are the ones offloaded because their copies have the rest of the forward
pass to drain and their prefetches the backward of every block above to hide in; the
checkpointed blocks' cost, their forward run again, is the same wherever they are. Nothing
a checkpoint drops or keeps as its input is offloaded (``with_segments``' rule: the
checkpoint holds its input anyway). The planner tries the mixes where
a mix can be faster than both pure plans.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..engine import ParamGroup
from ..errors import ConfigError
from ..hardware import GPU, _capacity
from ..trace.model import Trace
from .builtin import algo_choice, check_options
from .context import NO_CONTEXT, PolicyContext
from .plan import Plan, liveness
from .recompute import with_segments, without_checkpointed


def block_regions(trace: Trace) -> list[list[int]]:
    """Each region's layer indices, region 0 first (empty lists for
    regions with no ops); [] where the trace has no block tags. Worked out once per trace
    (the planners ask for it at every count they replay); the lists are the caller's."""
    return [list(r) for r in trace.memo("block regions", lambda: _block_regions(trace))]


def _block_regions(trace: Trace) -> tuple[tuple[int, ...], ...]:
    tags = [layer.attrs.get("block") for layer in trace.layers]
    if any(not isinstance(t, int) or isinstance(t, bool) or t < 0 for t in tags):
        return ()
    out: list[list[int]] = [[] for _ in range(max(tags) + 1)]
    for i, t in enumerate(tags):
        out[t].append(i)
    return tuple(tuple(r) for r in out)


def block_plan(trace: Trace, blocks: int, name: str = "vdnn_blocks") -> Plan:
    """The first ``blocks`` blocks offloaded."""
    regions = block_regions(trace)
    if len(regions) < 3:
        raise ConfigError(f"policy {name}: {trace.name} has no blocks (its layers carry no "
                          "block tags: profile or trace it with vdnnsim from a model)")
    lv = liveness(trace)
    n = len(trace.layers)
    skip = {b for b, t in trace.buffers.items() if t.kind == "input"}
    offload: list[list[str]] = [[] for _ in range(n)]
    prefetch = [-1] * n
    taken: set[str] = set()
    region = {i: r for r, idx in enumerate(regions) for i in idx}
    # autocast's casts of the weights: its cache holds them to the end of the forward pass,
    # so an offload would free nothing (the runtime keeps them too)
    skip |= lv.casts
    for r in range(1, min(blocks, len(regions) - 2) + 1):
        # the block's own tensors: made in it, or last read in it (its input); not what
        # every block reads (a rotary table, a mask), which no block's offload can free
        bufs = list(dict.fromkeys(
            b for i in regions[r] for t in trace.layers[i].saved
            if (b := lv.root[t]) not in skip and b not in taken and lv.size[b] and lv.kept(b)
            and r in (region.get(lv.producer.get(b, -1)), region.get(lv.fwd_last[b]))))
        if not bufs:
            continue
        at = max(max(lv.fwd_last[b], lv.producer.get(b, -1)) for b in bufs)
        written = {lv.root[t] for t in trace.layers[at].outputs}
        bufs = [b for b in bufs if b not in written]  # never copy what the layer overwrites
        above = next((regions[q] for q in range(r + 1, len(regions)) if regions[q]), None)
        if not bufs or above is None or max(above) <= at:
            continue
        taken.update(bufs)
        offload[at].extend(bufs)
        prefetch[max(above)] = at  # the first op of the next region's backward pass
    # the block runtime allocates its prefetches on its copy stream
    return Plan(name, "layer_wise", algo_choice(trace, "p"), tuple(tuple(o) for o in offload),
                tuple(prefetch), sync=False, prefetch_stream="h2d")


def param_groups(trace: Trace, params: int) -> tuple[ParamGroup, ...]:
    """The weights of the first ``params`` blocks on the host,
    a group a block: fetched for its forward pass when the block before it starts (the
    runtime's prefetch, one block ahead), and for its backward pass when the backward of
    the region above it starts."""
    regions = block_regions(trace)
    layers = trace.layers
    groups = []
    for r in range(1, min(params, len(regions) - 2) + 1):
        idx = regions[r]
        if not any(layers[i].weight_bytes for i in idx):
            continue
        below = next((regions[q] for q in range(r - 1, -1, -1) if regions[q]), idx)
        above = next((regions[q] for q in range(r + 1, len(regions)) if regions[q]), idx)
        groups.append(ParamGroup(tuple(idx), min(idx), max(idx), min(below), max(above)))
    return tuple(groups)


def block_segments(trace: Trace, recompute: int,
                   start: int = 0) -> dict[str, tuple[int, int]]:
    """Of the ``recompute`` blocks after the first ``start``
    (NOTE [block mix]; 0: from the first block on), those that can be
    checkpointed, by path: their own ops, (first, last) layer index each (a block's region
    without what runs after the block before the next one, a residual add of the parent's,
    which torch.utils.checkpoint on the module does not run again). A block whose input is
    written in place, by the block (a ReLU(inplace=True) module) or by anything after it,
    cannot be: the checkpoint keeps its input to run it again, and the write changes it
    (autograd refuses); it is left as it is. So is every block of a trace whose blocks
    carry no path (an older probe's): the runtime would not know which module to wrap.
    Each block's segment is worked out once per trace."""
    regions = trace.memo("block regions", lambda: _block_regions(trace))
    segs: dict[str, tuple[int, int]] = {}
    for r in range(start + 1, min(start + recompute, len(regions) - 2) + 1):
        seg = trace.memo(("block segment", r), lambda: _block_segment(trace, regions[r]))
        if seg is not None:
            segs[seg[0]] = seg[1]
    return segs


def _block_segment(trace: Trace, idx: tuple[int, ...]) -> tuple[str, tuple[int, int]] | None:
    """The block of region ``idx`` as ``block_segments`` checkpoints it: (path, (first,
    last)), or None where it cannot be."""
    if not idx:
        return None
    path = trace.layers[idx[0]].attrs.get("block_path")
    if not isinstance(path, str):  # a trace of an older probe: no module to wrap
        return None
    own = [i for i in idx if _under(trace.layers[i].attrs.get("module"), path)]
    if not own:
        return None
    lv = liveness(trace)
    a, b = min(own), max(own)
    inputs = {lv.root[t] for i in range(a, b + 1) for t in trace.layers[i].inputs
              if lv.producer.get(lv.root[t], -1) < a}
    if any(trace.layers[i].kind.endswith("_") and any(
            lv.root[t] in inputs for t in trace.layers[i].outputs)
           for i in range(a, len(trace.layers))):
        return None
    return path, (a, b)


def _under(module: Any, path: str) -> bool:
    return isinstance(module, str) and (module == path or module.startswith(path + "."))


def block_recompute_plan(trace: Trace, recompute: int, name: str = "vdnn_blocks") -> Plan:
    """The first ``recompute`` blocks checkpointed, nothing moved."""
    regions = block_regions(trace)
    if len(regions) < 3:
        raise ConfigError(f"policy {name}: {trace.name} has no blocks (its layers carry no "
                          "block tags: profile or trace it with vdnnsim from a model)")
    segs = tuple(block_segments(trace, recompute).values())
    return with_segments(trace, segs, "none", algo_choice(trace, "p"), sync=False, name=name)


def block_mixed_plan(trace: Trace, blocks: int, recompute: int,
                     name: str = "vdnn_blocks") -> Plan:
    """The first ``blocks`` blocks offloaded, the ``recompute`` after them
    checkpointed; either count 0 is the pure plan of the other."""
    if not recompute:
        return block_plan(trace, blocks, name)
    if not blocks:
        return block_recompute_plan(trace, recompute, name)
    plan = block_plan(trace, blocks, name)
    segs = tuple(block_segments(trace, recompute, blocks).values())
    if not segs:
        return plan
    offload = without_checkpointed(trace, segs, plan.offload)
    prefetch = tuple(p if p < 0 or offload[p] else -1 for p in plan.prefetch)
    return replace(plan, offload=offload, prefetch=prefetch, recompute=segs)


def vdnn_blocks(trace: Trace, gpu: GPU, capacity: int | None, options: dict[str, Any],
                ctx: PolicyContext = NO_CONTEXT) -> Plan:
    opts = dict(options)
    params = opts.pop("params", 0)
    if isinstance(params, bool) or not isinstance(params, int) or not 0 <= params <= 10**6:
        raise ConfigError(f"policy vdnn_blocks: option params must be a count of blocks "
                          f"from 0, got {params!r}")
    plan = _vdnn_blocks(trace, gpu, capacity, opts, ctx)
    # the first ``params`` blocks' weights on the host
    return replace(plan, params=param_groups(trace, params)) if params else plan


def _vdnn_blocks(trace: Trace, gpu: GPU, capacity: int | None, opts: dict[str, Any],
                 ctx: PolicyContext) -> Plan:
    blocks = opts.pop("blocks", None)
    budget_bytes = opts.pop("budget", None)
    recompute = opts.pop("recompute", None)
    check_options("vdnn_blocks", opts, set())
    if blocks is not None and budget_bytes is not None:
        raise ConfigError("policy vdnn_blocks: give blocks or budget, not both")
    if recompute is not None:
        if budget_bytes is not None:
            raise ConfigError("policy vdnn_blocks: recompute does not go with budget (the "
                              "budget's plan chooses both counts)")
        if isinstance(recompute, bool) or not isinstance(recompute, int) or \
                not 0 <= recompute <= 10**6:
            raise ConfigError(f"policy vdnn_blocks: option recompute must be a count of "
                              f"blocks from 0, got {recompute!r}")
        if blocks is None:
            return block_recompute_plan(trace, recompute)
        _count("blocks", blocks)
        return block_mixed_plan(trace, blocks, recompute)
    regions = block_regions(trace)
    total = max(0, len(regions) - 2)
    if budget_bytes is not None:
        try:
            budget_bytes = _capacity(budget_bytes)
        except ValueError as exc:
            raise ConfigError(f"policy vdnn_blocks: option budget: {exc}") from None
        if ctx.plan_blocks is None:
            raise ConfigError("policy vdnn_blocks: option budget needs the block planner, "
                              "which the caller hands the policy in its context")
        p = ctx.plan_blocks(trace, gpu, budget_bytes,
                            allocator=ctx.allocator)
        return block_mixed_plan(trace, p.blocks, p.recompute)
    if blocks is None:
        blocks = total
    _count("blocks", blocks)
    return block_plan(trace, blocks)


def _count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10**6:
        raise ConfigError(f"policy vdnn_blocks: option {name} must be a count of blocks "
                          f"from 0, got {value!r}")
