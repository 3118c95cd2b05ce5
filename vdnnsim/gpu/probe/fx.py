"""From an nn.Module to a layer graph, observed by running it once.

NOTE [probe]
The model is traced with torch.fx; every node that yields a tensor is a layer (leaf
modules, and functions such as the residual add, torch.cat, flatten). One forward pass
runs node by node under autograd's saved-tensor hooks, so each layer's ``saved`` list is
what autograd really keeps for its backward pass, not a guess from its type. Tensors are
matched by storage (``untyped_storage()._cdata``), which also works on the meta device:
an in-place op's or a view's output shares its input's storage and becomes an alias; a
saved storage that is neither a layer input nor its output (pool indices, batch-norm
statistics, dropout masks) becomes an ``extra`` tensor of that layer. Parameters are not
tracked as tensors: they are the layer's ``weight_bytes``.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import fx, nn

from ...errors import ConfigError

MODULE_KINDS: dict[type, str] = {
    nn.Conv2d: "conv", nn.Linear: "fc", nn.BatchNorm2d: "bn", nn.ReLU: "relu",
    nn.ReLU6: "relu", nn.SiLU: "relu", nn.Hardswish: "relu", nn.Hardsigmoid: "relu",
    nn.GELU: "relu", nn.Sigmoid: "relu", nn.Threshold: "threshold", nn.MaxPool2d: "maxpool",
    nn.AvgPool2d: "avgpool", nn.AdaptiveAvgPool2d: "avgpool", nn.Dropout: "dropout",
    nn.Flatten: "flatten", nn.LocalResponseNorm: "lrn", nn.Softmax: "softmax",
}
FUNCTION_KINDS: dict[Any, str] = {
    operator.add: "add", operator.iadd: "add", torch.add: "add", torch.cat: "concat",
    torch.flatten: "flatten", F.relu: "relu", torch.relu: "relu", F.relu6: "relu",
    F.adaptive_avg_pool2d: "avgpool", F.avg_pool2d: "avgpool", F.max_pool2d: "maxpool",
    F.dropout: "dropout", operator.mul: "mul", torch.mul: "mul",
}
METHOD_KINDS = {"view": "flatten", "reshape": "flatten", "flatten": "flatten", "relu": "relu",
                "relu_": "relu", "add": "add", "add_": "add", "mean": "avgpool",
                "mul": "mul", "mul_": "mul", "contiguous": "flatten"}


@dataclass
class Saved:
    tensor: str  # tensor id
    nbytes: int
    role: str  # input | output | extra


@dataclass
class ProbeNode:
    name: str
    kind: str
    op: str
    inputs: list[str]  # tensor ids read (layer names or 'data')
    out_nbytes: int
    out_shape: tuple[int, ...]
    requires_grad: bool
    alias_of: str | None
    saved: list[Saved] = field(default_factory=list)
    weight_bytes: int = 0
    module: nn.Module | None = None
    call: Callable[..., Any] | None = None  # re-runs the node on new arguments
    args: tuple = ()  # the node's tensor arguments, as run
    fwd_workspace_bytes: int = 0
    flops: int = 0
    attrs: dict[str, Any] = field(default_factory=dict)


class Pack(NamedTuple):
    """One pack of autograd's saved-tensor hook in the op probe's step, in call order
    (NOTE [pack log] in aten.py)."""

    tensor: str | None  # the trace's tensor (its buffer's root id); None: a weight, or none
    op: str | None  # the trace's op it was given to; None: an op the trace drops
    shape: tuple[int, ...]  # the packed tensor's own (a view's, where a view is packed)
    dtype: str  # as torch names it: float32, bfloat16, bool
    module: str  # the innermost module running when it was packed


@dataclass
class Probe:
    name: str
    batch_size: int
    dtype: torch.dtype
    data_nbytes: int
    data_shape: tuple[int, ...]
    nodes: list[ProbeNode]
    output: str
    resident_weight_bytes: int = 0  # weights no layer reads (no gradient)
    blocks: list[str] = field(default_factory=list)  # their paths, in order
    packs: list[Pack] = field(default_factory=list)  # the op probe's pack log
    # (first, last) op of each call the model checkpoints itself (model/stepoptions.py)
    checkpointed: list[tuple[str, str]] = field(default_factory=list)


def trace_module(model: nn.Module) -> fx.GraphModule:
    try:
        return fx.symbolic_trace(model)
    except Exception as exc:  # fx raises many types; the message is what a user needs
        raise ConfigError(f"cannot trace the model with torch.fx: {exc}") from None


def _sid(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def _kind_of(node: fx.Node, gm: fx.GraphModule) -> tuple[str, str, nn.Module | None]:
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        for cls in type(mod).__mro__:
            if cls in MODULE_KINDS:
                return MODULE_KINDS[cls], type(mod).__name__, mod
        return "other", type(mod).__name__, mod
    if node.op == "call_function":
        name = getattr(node.target, "__name__", str(node.target))
        return FUNCTION_KINDS.get(node.target, "other"), name, None
    return METHOD_KINDS.get(str(node.target), "other"), str(node.target), None


def _runner(node: fx.Node, gm: fx.GraphModule) -> Callable[..., Any]:
    if node.op == "call_module":
        return gm.get_submodule(node.target)
    if node.op == "call_function":
        return node.target
    return lambda self, *a, **k: getattr(self, node.target)(*a, **k)


def _conv_attrs(mod: nn.Conv2d) -> dict[str, Any]:
    return {"kernel": list(mod.kernel_size), "stride": list(mod.stride),
            "padding": list(mod.padding) if not isinstance(mod.padding, str) else mod.padding,
            "groups": mod.groups, "in_channels": mod.in_channels,
            "out_channels": mod.out_channels}


def _flops(kind: str, mod: nn.Module | None, ins: list[torch.Tensor], out: torch.Tensor) -> int:
    n_out = out.numel()
    if kind == "conv" and isinstance(mod, nn.Conv2d):
        kh, kw = mod.kernel_size
        return 2 * n_out * (mod.in_channels // mod.groups) * kh * kw
    if kind == "fc" and isinstance(mod, nn.Linear):
        return 2 * n_out * mod.in_features
    if kind in ("maxpool", "avgpool") and ins:
        return max(ins[0].numel(), n_out)
    return n_out


def fetch_attr(gm: nn.Module, target: str) -> Any:
    """What a graph's ``get_attr`` node names: a parameter, a registered buffer (Swin V2's
    ``relative_coords_table``) or a plain attribute, by its dotted path (as torch.fx's
    Interpreter fetches it; ``get_parameter`` refused buffers)."""
    return functools.reduce(getattr, target.split("."), gm)


def probe(model: nn.Module, input_shape: tuple[int, ...], batch_size: int,
          device: str | torch.device = "meta", dtype: torch.dtype = torch.float32,
          name: str = "model", with_loss: bool = True) -> Probe:
    """Run ``model`` once on ``device`` node by node and record the layer graph."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:  # the allocator's statistics want an index
        dev = torch.device("cuda", torch.cuda.current_device())
    model = model.to(device=dev, dtype=dtype).train()
    gm = trace_module(model)
    params = {_sid(p): p for p in gm.parameters()}
    x = torch.randn(batch_size, *input_shape, device=dev, dtype=dtype) if dev.type != "meta" \
        else torch.empty(batch_size, *input_shape, device=dev, dtype=dtype)
    env: dict[fx.Node, Any] = {}
    owner: dict[int, str] = {}  # storage -> first tensor id that lives in it
    tensor_of: dict[fx.Node, str] = {}
    nodes: list[ProbeNode] = []
    keep: list[torch.Tensor] = []  # hold everything alive: storage ids stay unique
    cuda = dev.type == "cuda"
    current: list[list[torch.Tensor]] = []

    def pack(t: torch.Tensor) -> None:
        if current:
            current[-1].append(t)
        # Not the tensor: a node that saves its own output would hold itself through it, a
        # cycle that Python's collector cannot see, and the probe's memory would outlive it.
        return None

    def unpack(t: None) -> torch.Tensor:
        raise RuntimeError("a probe's autograd graph records what is saved; it has no backward")

    out_node = None
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = x
            owner[_sid(x)] = "data"
            tensor_of[node] = "data"
            continue
        if node.op == "get_attr":
            env[node] = fetch_attr(gm, node.target)
            continue
        if node.op == "output":
            out_node = node.args[0]
            continue
        args = fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n])
        kind, op, mod = _kind_of(node, gm)
        run = _runner(node, gm)
        current.append([])
        if cuda:
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            result = run(*args, **kwargs)
        saved_raw = current.pop()
        env[node] = result
        if not isinstance(result, torch.Tensor):
            continue
        ws = 0
        if cuda:
            ws = max(0, torch.cuda.max_memory_allocated(dev) - torch.cuda.memory_allocated(dev))
        keep.append(result)
        in_nodes = [a for a in node.all_input_nodes if a in tensor_of]
        inputs = [tensor_of[a] for a in in_nodes]
        in_tensors = [env[a] for a in in_nodes]
        sid = _sid(result)
        alias = owner.get(sid)
        tid = node.name
        tensor_of[node] = tid
        if alias is None:
            owner[sid] = tid
        in_sids = {_sid(t): tensor_of[a] for a, t in zip(in_nodes, in_tensors)}
        saved = _saved_of(saved_raw, tid, sid, params, in_sids, owner, keep)
        wbytes = sum(p.numel() * p.element_size() for p in (mod.parameters(recurse=False)
                                                             if mod is not None else ()))
        attrs: dict[str, Any] = {"op": op, "out_shape": list(result.shape)}
        if isinstance(mod, nn.Conv2d):
            attrs.update(_conv_attrs(mod))
        pn = ProbeNode(tid, kind, op, inputs, _nbytes(result), tuple(result.shape),
                       bool(result.requires_grad), alias, saved, wbytes, mod,
                       run, tuple(args), ws, _flops(kind, mod, in_tensors, result), attrs)
        pn.attrs["kwargs"] = {k: v for k, v in kwargs.items()
                              if isinstance(v, (int, float, bool, str))}
        pn.attrs["_kwargs"] = kwargs
        nodes.append(pn)
    if out_node is None or not isinstance(env.get(out_node), torch.Tensor):
        raise ConfigError("the model's output is not a single tensor")
    output = tensor_of[out_node]
    if with_loss:
        nodes.append(_loss_node(env[out_node], output, batch_size, dev, (pack, unpack), current,
                                owner, keep))
        output = "loss"
    return Probe(name, batch_size, dtype, _nbytes(x), tuple(x.shape), nodes, output)


def _saved_of(saved_raw: list[torch.Tensor], tid: str, sid: int, params: dict[int, Any],
              in_sids: dict[int, str], owner: dict[int, str], keep: list[torch.Tensor]
              ) -> list[Saved]:
    """What autograd saved for the layer ``tid`` (output storage ``sid``): its output, an
    input (or an earlier layer's output), else an extra tensor of its own; weights skipped."""
    saved: list[Saved] = []
    seen: set[int] = set()
    for k, t in enumerate(saved_raw):
        s = _sid(t)
        if s in params or s in seen:
            continue
        seen.add(s)
        keep.append(t)
        if s == sid:
            saved.append(Saved(tid, _nbytes(t), "output"))
        elif s in in_sids:
            saved.append(Saved(in_sids[s], _nbytes(t), "input"))
        elif s in owner:  # an earlier layer's output reached by another path
            saved.append(Saved(owner[s], _nbytes(t), "input"))
        else:
            ex = f"{tid}:saved{k}"
            owner[s] = ex
            saved.append(Saved(ex, _nbytes(t), "extra"))
    return saved


def _loss_node(logits: torch.Tensor, output: str, batch_size: int, dev: torch.device,
               hooks: tuple[Callable[..., Any], Callable[..., Any]],
               current: list[list[torch.Tensor]], owner: dict[int, str],
               keep: list[torch.Tensor]) -> ProbeNode:
    """The cross-entropy loss of ``logits`` (the layer ``output``) as the last layer."""
    target = torch.zeros(batch_size, dtype=torch.long, device=dev)
    current.append([])
    with torch.autograd.graph.saved_tensors_hooks(*hooks):
        loss = F.cross_entropy(logits, target)
    raw = current.pop()
    saved = []
    seen = set()
    for k, t in enumerate(raw):
        s = _sid(t)
        if s in seen:
            continue
        seen.add(s)
        keep.append(t)
        if s in owner:
            saved.append(Saved(owner[s], _nbytes(t), "input"))
        else:
            owner[s] = f"loss:saved{k}"
            saved.append(Saved(f"loss:saved{k}", _nbytes(t), "extra"))
    return ProbeNode("loss", "loss", "cross_entropy", [output], _nbytes(loss),
                     tuple(loss.shape), True, None, saved, 0,
                     None, lambda z, tg=target: F.cross_entropy(z, tg), (logits,),
                     0, logits.numel() * 4, {"op": "cross_entropy"})

