"""Batch splitting: a run of layers executed in micro-batches (``split_trace``).

NOTE [batch split]
The widest layers of a CNN (VGG-16's first block at batch 256: 3 GiB a feature map) set a
peak that no offload can lower: a layer's backward pass needs its input, its output's
gradient and its input's gradient at once. Running layers ``first..last`` on ``parts``
slices of the batch, one after the other, divides that peak by ``parts`` at the cost of a
concatenation (and of smaller kernels). As a trace transformation, with the names the
runtime gives the nodes it makes (vdnnsim/gpu/runtime/vdnn.py, the same rewrite of the model's
graph):

- each tensor the segment reads from before it (the batch, say) gets ``parts`` slices,
  views ``{tensor}_chunk{p}`` made by layers of the same name (no kernel, no memory);
- each layer of the segment becomes ``parts`` layers ``{layer}_part{p}``, every tensor of
  it ``1/parts`` of its size, its times and workspaces ``1/parts`` of the whole batch's
  (the H200 traces at batch 128 and 256 agree with that to within 2% for VGG-16's first
  block: traces/h200_torchvision/vgg16_b{128,256}.yaml), its host times and kernel counts unchanged
  (each slice issues the same commands). Its weights are counted once, on the last part:
  autograd runs that part's backward pass first (its nodes are the newest), so it creates
  the weight gradient and the earlier parts add into it;
- each tensor of the segment that a later layer reads is put back together by a concat
  layer that keeps the original layer's name and tensor (a copy: read and write of the
  whole tensor at the GPU's memory bandwidth, and the launch); its backward pass only
  slices the gradient (views, no kernel).

Only layers whose every tensor is batch-proportional can be split: a batch-norm layer
couples the samples and is refused, as is a tensor whose size ``parts`` does not divide.
The forward arithmetic per sample is unchanged; each weight gradient becomes a sum of
``parts`` partial sums added in a different order, so it can differ from the unsplit
run's in the last bits (the runtime's tests bound it).
"""

from __future__ import annotations

from dataclasses import replace

from ..engine import liveness
from ..errors import ConfigError
from ..hardware import GPU
from ..trace.model import Algo, Layer, Tensor, Trace

COUPLED = frozenset({"bn", "lrn", "layer_norm", "softmax", "loss"})


def part_name(name: str, p: int) -> str:
    return f"{name}_part{p}"


def chunk_name(name: str, p: int) -> str:
    return f"{name}_chunk{p}"


def split_trace(trace: Trace, gpu: GPU, first: str, last: str, parts: int) -> Trace:
    """NOTE [batch split]: ``trace`` with layers ``first..last`` run in ``parts`` slices."""
    try:
        a, b = trace.layer_index(first), trace.layer_index(last)
    except KeyError as exc:
        raise ConfigError(f"split: no layer {exc.args[0]!r} in {trace.name}") from None
    if a > b:
        raise ConfigError(f"split: {first} comes after {last}")
    if trace.checkpoints_any(a, b):
        raise ConfigError(f"split: the model checkpoints layers of {first}..{last} itself "
                          "(its own gradient checkpointing): they run unsplit")
    if isinstance(parts, bool) or not isinstance(parts, int) or not 2 <= parts <= \
            trace.batch_size or trace.batch_size % parts:
        raise ConfigError(f"split: parts must be an integer from 2 that divides the batch "
                          f"size ({trace.batch_size}), got {parts!r}")
    seg = trace.layers[a:b + 1]
    inside = {t for x in seg for t in x.outputs}
    tensors = dict(trace.tensors)
    for x in seg:
        if x.kind in COUPLED:
            raise ConfigError(f"split: layer {x.id} ({x.kind}) couples the samples of a "
                              f"batch; it cannot run in slices")
        for t in (*x.outputs, *x.saved, *x.inputs):
            if tensors[t].size_bytes % parts:
                raise ConfigError(f"split: tensor {t} ({tensors[t].size_bytes} bytes) does "
                                  f"not divide into {parts} parts")
    outside_in = []  # tensors the segment reads that are made before it
    for x in seg:
        for t in x.inputs:
            if t not in inside and t not in outside_in:
                outside_in.append(t)
    later = {t for x in trace.layers[b + 1:] for t in x.inputs}
    made = [t for x in seg for t in x.outputs]
    out_of_seg = [t for t in made if t in later] or list(seg[-1].outputs)

    def scaled(t: Tensor, new_id: str, alias: str | None) -> Tensor:
        shape = t.shape
        if shape:
            shape = (shape[0] // parts, *shape[1:])
        return Tensor(new_id, t.size_bytes // parts, t.kind, t.requires_grad, alias, shape)

    roots = trace.roots
    new_layers: list[Layer] = list(trace.layers[:a])
    for p in range(parts):
        names = {}
        for t in outside_in:
            c = chunk_name(t, p)
            src = tensors[t]  # a view: the alias of the whole buffer (its gradient too)
            tensors[c] = Tensor(c, tensors[roots[t]].size_bytes, "activation", src.requires_grad,
                                t, src.shape and (src.shape[0] // parts, *src.shape[1:]))
            names[t] = c
            new_layers.append(Layer(c, "flatten", (t,), (c,), (), (Algo("default", 0, 0),),
                                    host_fwd_ns=gpu.host.view_fwd_ns,
                                    host_bwd_ns=gpu.host.view_bwd_ns, kernels_fwd=0,
                                    kernels_bwd=0))
        for x in seg:
            for t in (*x.outputs, *x.saved):
                if t in names:
                    continue
                names[t] = part_name(t, p)
                src = tensors[t]
                alias = src.alias_of
                tensors[names[t]] = scaled(src, names[t],
                                           names.get(alias, alias) if alias else None)
            algos = tuple(replace(al, fwd_ns=al.fwd_ns // parts, bwd_ns=al.bwd_ns // parts,
                                  fwd_workspace_bytes=al.fwd_workspace_bytes // parts,
                                  bwd_workspace_bytes=al.bwd_workspace_bytes // parts)
                          for al in x.algos)
            new_layers.append(replace(
                x, id=part_name(x.id, p), inputs=tuple(names[t] for t in x.inputs),
                outputs=tuple(names[t] for t in x.outputs),
                saved=tuple(names[t] for t in x.saved), algos=algos,
                weight_bytes=x.weight_bytes if p == parts - 1 else 0))
    producer = {t: x for x in seg for t in x.outputs}
    for t in out_of_seg:
        size = tensors[t].size_bytes
        ns = int(2 * size / gpu.mem_bw_bytes_per_s * 1e9) + gpu.launch_overhead_ns
        x = producer[t]
        # the whole tensor is made again by the concat: its own buffer, no longer an alias
        tensors[t] = replace(tensors[t], alias_of=None)
        new_layers.append(Layer(x.id if t == x.outputs[0] else f"{t}_cat", "concat",
                                tuple(part_name(t, p) for p in range(parts)), (t,), (),
                                (Algo("default", ns, 0),), host_fwd_ns=x.host_fwd_ns,
                                host_bwd_ns=gpu.host.view_bwd_ns, kernels_fwd=1,
                                kernels_bwd=0))
    new_layers.extend(trace.layers[b + 1:])
    for x in seg:  # the whole-batch tensors of the segment are gone, but those put back
        for t in (*x.outputs, *x.saved):
            if t not in out_of_seg and t not in outside_in:
                tensors.pop(t, None)
    return replace(trace, tensors=tensors, layers=tuple(new_layers))


# -- where the planners try a split (the greedy search's and the MILP's) ----------------------
def split_candidates(trace: Trace) -> list[tuple[str, str]]:
    """NOTE [planner], step 5: where a batch split may pay: from the first layer to each
    of the first three layers that shrink their input (the pools that close the widest
    blocks), while no layer couples the batch's samples."""
    out = []
    lv = liveness(trace)
    for j, x in enumerate(trace.layers):
        if x.kind in COUPLED:
            break
        size_in = max((lv.size[lv.root[t]] for t in x.inputs), default=0)
        size_out = max((lv.size[lv.root[t]] for t in x.outputs), default=0)
        if 0 < size_out < size_in:
            out.append((trace.layers[0].id, x.id))
            if len(out) == 3:
                break
    return out


def split_structures(trace: Trace, gpu: GPU):
    """NOTE [planner], step 5, and NOTE [milp planner]'s structures: per split candidate
    and slice count, ((first, last, parts), the split trace, each slice's (first, last)
    layer index in it, the index of the first layer after the slices: the concat, then
    the unsplit layers)."""
    for first, last in split_candidates(trace):
        for parts in (2, 4):
            if trace.batch_size % parts:
                continue
            try:
                st = split_trace(trace, gpu, first, last, parts)
            except ConfigError:
                continue
            size = trace.layer_index(last) - trace.layer_index(first) + 1
            starts = [st.layer_index(part_name(first, p)) for p in range(parts)]
            yield ((first, last, parts), st, tuple((s0, s0 + size - 1) for s0 in starts),
                   st.layer_index(last) + 1)
