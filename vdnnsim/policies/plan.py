"""Policies' building blocks: which buffers vDNN offloads, findPrefetchLayer, and the
leaner algorithm a layer moves to when its workspace does not fit (``downgrade``).
The Plan and Liveness types live with the engine that replays them (engine/plan.py)."""

from __future__ import annotations

from ..engine import Liveness, Plan, liveness  # noqa: F401  (re-exported)
from ..trace.model import Trace


def join_view(trace: Trace) -> Trace:
    """NOTE [join as view]
    What the paper's vDNN runtime replays for a network with joins: Torch's nn.Concat copies
    its branches' outputs into a buffer of its own (the baseline's Fig. 4 counts it:
    GoogLeNet's feature maps, 2930 MiB, are vdnnsim's 2945 with the joins' 603), but under
    vDNN_all the paper moves 2340 MiB (Fig. 12), which is every feature map but the joins'
    (2945 - 603 = 2342): its layer-wise runtime lets the branches write into the join, so
    the join holds no bytes of its own and what the next module reads is the branches'
    outputs. This trace is that: each concat's output made empty and its readers reading
    the concat's inputs instead (a join a layer then writes in place keeps its copy).
    Torch7 traces with concats only (PyTorch's torch.cat copies); the vDNN policies run it
    (their plans carry it, ``Plan.trace``), the baselines, checkpointing, the block policies
    and the planner keep the copying join. Worked out once per trace."""
    if trace.pytorch:
        return trace
    view = trace.memo("join view", lambda: _join_view(trace) if any(
        layer.kind == "concat" for layer in trace.layers) else None)
    return trace if view is None else view  # (None: no memo holding the trace itself)


def _join_view(trace: Trace) -> Trace:
    from ..trace.io import trace_from_dict, trace_to_dict
    data = trace_to_dict(trace)
    tensors = {t["id"]: t for t in data["tensors"]}
    aliased = {t.get("alias_of") for t in data["tensors"]}
    parts: dict[str, list[str]] = {}
    for layer in data["layers"]:
        # a join that a layer then writes in place keeps its copy (the write needs a buffer)
        if layer["kind"] == "concat" and not aliased & set(layer["outputs"]):
            for t in layer["outputs"]:
                parts[t] = [x for p in layer["inputs"] for x in parts.get(p, [p])]
                tensors[t]["size_bytes"] = 0
    for layer in data["layers"]:
        if layer["kind"] == "concat" and set(layer["outputs"]) <= set(parts):
            continue
        for key in ("inputs", "saved"):
            if key in layer:
                layer[key] = list(dict.fromkeys(
                    x for t in layer[key] for x in parts.get(t, [t])))
    return trace_from_dict(data, trace.name)


def offload_sets(trace: Trace, lv: Liveness, conv_only: bool) -> tuple[tuple[str, ...], ...]:
    """vDNN's choice: a layer offloads each input buffer it is the last forward reader of,
    if backward needs that buffer (reference counts for forks and joins). A layer never
    offloads a buffer it overwrites in place: the copy would race the write. Under PyTorch
    semantics the network input is never moved: the training loop holds the batch.
    Worked out once per trace where ``lv`` is the trace's own."""
    if lv is liveness(trace):
        return trace.memo(("offload_sets", conv_only), lambda: _offload_sets(trace, lv,
                                                                             conv_only))
    return _offload_sets(trace, lv, conv_only)


def _offload_sets(trace: Trace, lv: Liveness, conv_only: bool
                  ) -> tuple[tuple[str, ...], ...]:
    out = []
    skip = {b for b, t in trace.buffers.items() if t.kind == "input"} if trace.pytorch else set()
    skip |= lv.casts  # held by autocast's cache to the forward's end
    # under the paper's runtime vDNN_conv moves every buffer
    # a conv reads, copied by its last reader whatever that is
    conv_read = {lv.root[t] for layer in trace.layers if layer.is_conv for t in layer.inputs} \
        if conv_only and not trace.pytorch else None
    for i, layer in enumerate(trace.layers):
        if conv_only and conv_read is None and not layer.is_conv:
            out.append(())
            continue
        written = {lv.root[t] for t in layer.outputs}
        picked: list[str] = []
        for t in layer.inputs:
            b = lv.root[t]
            if (lv.fwd_last[b] == i and lv.kept(b) and b not in written and b not in picked
                    and lv.size[b] > 0 and b not in skip
                    and (conv_read is None or b in conv_read)):
                picked.append(b)
        out.append(tuple(picked))
    return tuple(out)


def find_prefetch_schedule(trace: Trace, offload: tuple[tuple[str, ...], ...],
                           marked: tuple[bool, ...] | None = None) -> tuple[int, ...]:
    """The paper's findPrefetchLayer, called before each layer's backward pass: scan down
    from the layer below, take the first layer marked as offloaded and not yet prefetched,
    give up at the next CONV layer. ``marked[i]``: layer i carries the offloaded mark; ``None``
    marks exactly the layers that copy something."""
    layers = trace.layers
    n = len(layers)
    if marked is None:
        marked = tuple(bool(o) for o in offload)
    # The scan stops at the first layer below that is marked and not yet prefetched (take
    # it) or a conv (give up). Layers that are neither are skipped by pointers to the next
    # candidate below, compressed as they are followed (a disjoint-set forest), so the
    # whole schedule costs near-linear time instead of a scan per layer. Slot k stands for
    # layer k - 1; slot 0 for "none left".
    up = list(range(n + 1))
    for i in range(n):
        if not (marked[i] or layers[i].is_conv):
            up[i + 1] = i

    def below(k: int) -> int:
        top = k
        while up[k] != k:
            k = up[k]
        while up[top] != k:
            up[top], top = k, up[top]
        return k

    prefetched = [False] * n
    schedule = [-1] * n
    for cur in range(n - 1, -1, -1):
        k = below(cur)
        if k == 0:
            continue
        idx = k - 1
        if marked[idx] and not prefetched[idx]:
            prefetched[idx] = True
            if offload[idx]:
                schedule[cur] = idx
            if not layers[idx].is_conv:
                up[k] = idx  # no longer a candidate: skip it from now on
    return tuple(schedule)


# NOTE [offload marks]
# findPrefetchLayer (the paper's Algorithm) tests a per-layer flag, ``offloaded``, whose
# setting the text does not give. Two readings:
# - 'text': a layer is marked when it copies a buffer to the host (an in-place ReLU never
#   copies, so the scan passes over it);
# - 'measured' (default for Torch7 traces): the policy marks every layer it names (vDNN_all
#   every layer, vDNN_conv every CONV layer); a marked layer that copies nothing is
#   "prefetched" as a no-op, so the scan stops there.
# The paper's measured numbers hold under 'measured' only (docs/policies.md, "Offload
# marks": VGG-16 (256) trains in 12 GB under vDNN_all).
#
# NOTE [conv offload at forks]
# Which buffers vDNN_conv moves where a buffer has several readers, read from the paper's
# Fig. 12: GoogLeNet (128) under vDNN_conv offloads 1361 MiB. Moving the buffers whose last
# forward reader is a conv gives 912 (an inception module's input is read last by its pool
# branch); moving every buffer that some conv reads gives 1367. So under the paper's
# runtime (Torch7 traces) vDNN_conv offloads every buffer a CONV layer reads, copied by its
# last reader as the paper's reference counts say, even where that is a pool; such a layer
# carries the offloaded mark ('measured'). Networks that do not fork are unchanged.
# PyTorch traces keep the last-reader rule: vdnnsim's runtime (gpu/runtime/vdnn.py) offloads
# from the conv modules' hooks.
# PyTorch traces replay vdnnsim's own runtime (vdnnsim/gpu/runtime/vdnn.py), which marks the
# layers that copy: its measured reading is the text's.
READINGS = ("measured", "text")
PLACEMENTS = ("best", "first")


def policy_marks(trace: Trace, which: str, reading: str) -> tuple[bool, ...] | None:
    """The offloaded marks of NOTE [offload marks] for a vDNN policy offloading ``which``
    ('all', 'conv' or 'none') layers; ``None`` for the marks of the layers that copy."""
    if reading == "text" or trace.pytorch or which == "none":
        return None
    if which == "all":
        return (True,) * len(trace.layers)
    # every CONV layer, and a layer that copies what a conv read before it
    copies = offload_sets(trace, liveness(trace), True)
    return tuple(layer.is_conv or bool(c) for layer, c in zip(trace.layers, copies))


def downgrade(trace: Trace, i: int, current: int, deficit: int) -> int | None:
    """Layer ``i``'s algorithm to move to from ``current`` when its workspace overflows by
    ``deficit`` bytes (step 3; the planner's rule too):
    the fastest with a smaller workspace that closes the gap, else the one with the
    smallest workspace; None where no algorithm has a smaller one."""
    layer = trace.layers[i]
    ws_now = layer.algos[current].workspace_bytes
    smaller = [k for k, a in enumerate(layer.algos) if a.workspace_bytes < ws_now]
    if not smaller:
        return None
    enough = [k for k in smaller if layer.algos[k].workspace_bytes <= ws_now - deficit]
    pool = enough or [min(smaller, key=lambda k: (layer.algos[k].workspace_bytes,
                                                  layer.algos[k].time_ns))]
    return min(pool, key=lambda k: (layer.algos[k].time_ns, k))
