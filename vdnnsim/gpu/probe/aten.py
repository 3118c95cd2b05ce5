"""A layer graph of any model, observed op by op on the meta device (``probe_ops``).

NOTE [op probe]
One forward pass and its loss run under a TorchDispatchMode (on the meta device; on a GPU
for the profiler), and every ATen op that returns a tensor is a layer: the unit is the op,
not the module. Tensors are matched by storage, as in the fx probe: an output that shares
an input's storage (a view, an in-place op) is an alias and keeps its base's name. What
autograd saves comes from saved-tensor hooks; a pack goes to the next op when that op
reads it, else to the op before. Only the ops the loss depends on stay (``_live``), and an
in-place op whose base a later op reads. A parameter is the ``weight_bytes`` of the first
kept op that reads it (tied weights once); one that no kept op reads, or a frozen one
(``requires_grad`` off: a LoRA base, NOTE [lora]), is the trace's ``resident_bytes``: held
on the GPU, with no gradient and no optimizer state; an op reading only frozen weights and
tensors that need none makes one that needs none.

Why ops: torch.fx cannot trace most transformers models (their forward passes branch on
configuration and shapes). An in-place op whose backward needs its input as it was
(``silu_``, ``hardswish_``, ``x.mul_(gate)``) has autograd clone that input first
(``original_self``): a ``clone`` nothing reads, packed before the op, given to the op (held
until its backward), with no gradient. Secondary outputs (layer norm's statistics,
attention's log-sum-exp) exist only where saved, as ``extra`` tensors of their op. Not
seen: the temporaries inside a backward kernel. The times are the op-level kernel model's
(op_times.py) where the GPU has one, else 0 (a memory trace).
"""

from __future__ import annotations

import contextlib
import json
import weakref
from typing import Any, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from .blocks import (  # noqa: F401  (importable from here, as callers do)
    BLOCK_SHARE, MIN_BLOCKS, OUTSIDE, block_output, choose_blocks, find_blocks,
    module_paths, tag_blocks)
from .cuda import AUTOCAST_FP32, AUTOCAST_LOW, _as_cuda, _Autocast  # noqa: F401
from .fx import Pack, Probe, ProbeNode, Saved, _nbytes, _sid
from .moe import experts_modules, parse_routing, route
from ..model.stepoptions import recorded, segments
from .opfeatures import op_features
from .values import VALUE_LIMIT, VALUE_OPS, ListIndices, _ValueError, _Values  # noqa: F401


# ops whose backward reads their own output (``result`` in PyTorch's derivatives.yaml):
# a pack of that output right after them is theirs; other outputs
# (layer norm's statistics, dropout's mask, attention's log-sum-exp) always are
SAVES_RESULT = frozenset({
    "_log_softmax", "_softmax", "_safe_softmax", "tanh", "sigmoid", "exp", "relu",
    "threshold", "hardtanh", "elu", "silu_backward", "rsqrt", "sqrt", "native_dropout",
    "native_layer_norm", "native_batch_norm", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention",
    "_native_batch_norm_legit_functional",
    "max_pool2d_with_indices", "tanh_", "sigmoid_", "relu_", "exp_"})


class _Recorder(TorchDispatchMode):
    values: _Values | None = None  # on the meta device, set by probe_ops
    name = ""  # the model's, for the message
    failed: str | None = None  # the message, once a value was asked for in vain

    def __init__(self, params: dict[int, int], data: dict[int, str], hold_all: bool = True):
        super().__init__()
        self.frozen: set[int] = set()  # storages of frozen weights (of ``params``)
        self.hold_all = hold_all  # False on CUDA: a dead storage leaves ``act`` instead
        self.module = OUTSIDE  # the innermost module now running
        self.finalizers: list[weakref.finalize] = []
        self.params = params  # storage -> bytes
        self.act: dict[int, str] = dict(data)  # storage -> tensor id
        self.size: dict[str, int] = {}
        self.grad: dict[str, bool] = {v: False for v in data.values()}
        self.nodes: list[ProbeNode] = []
        # (storage, bytes, index in ``packs`` or None) packed, not yet given
        self.pending: list[tuple[int, int, int | None]] = []
        self.packs: list[list[Any]] = []  # [tensor, op, shape, dtype, module] (NOTE [pack log])
        self.extra = 0
        self.hold: list[Any] = []  # every tensor made: a freed storage's address is reused
        self.last_outs: set[int] = set()  # the previous op's output storages
        self.last_main = -1
        self.last_op = ""
        self.calls = 0
        self.quiet = False  # in checkpoint's own code: its ops not recorded (NOTE [pack log])

    def same(self, copy: torch.Tensor, original: torch.Tensor) -> None:
        """``copy`` (made unrecorded) stands for ``original``."""
        self.hold.append(copy)
        s = _sid(original)
        if s in self.act:
            self.act[_sid(copy)] = self.act[s]
        elif s in self.params:
            self.params[_sid(copy)] = 0
            if s in self.frozen:
                self.frozen.add(_sid(copy))

    def _dead(self, s: int, name: str) -> None:
        if self.act.get(s) == name:
            del self.act[s]

    # NOTE [pack log]
    # The probe logs each call of autograd's pack hook in its step, in order (Probe.packs):
    # the trace tensor its storage is (the root buffer of a view or an in-place op), the op
    # it is given to, the packed tensor's shape and dtype; a weight's names no tensor.
    # No trace depends on it. A pack given to an op that ``_live`` drops names no op, and
    # keeps its tensor only where the trace keeps that tensor (another op saves it: the
    # runtime must treat every pack of a buffer alike). With ``recompute`` those modules
    # run under non-reentrant checkpoint as the tensor runtime runs them: what they save
    # goes to checkpoint's hooks, not the log, though the recorder still gives it; what
    # checkpoint itself runs is not recorded and what it packs (its inputs) is logged by
    # storage, given to no op. So every id is the plain trace's, whatever torch's version.
    def pack(self, t: torch.Tensor) -> None:
        self.hold.append(t)
        entry = [None, None, tuple(t.shape), dtype_name(t.dtype), self.module]
        self.packs.append(entry)
        if self.quiet:
            entry[0] = self.act.get(_sid(t))
        else:
            self.pending.append((_sid(t), _nbytes(t), len(self.packs) - 1))

    def pack_inner(self, t: torch.Tensor) -> torch.Tensor:
        """A pack inside a checkpointed module: given, not logged (NOTE [pack log])."""
        self.hold.append(t)
        self.pending.append((_sid(t), _nbytes(t), None))
        return t

    def _give(self, node: ProbeNode | None, storages: list[tuple[int, int, int | None]],
              role: str) -> None:
        if node is None:
            return
        for s, nbytes, k in storages:
            if s in self.params:
                continue  # weights are resident: nothing to keep
            tid = self.act.get(s)
            if tid is None:  # a secondary output, made by ``node``: kept only as saved
                self.extra += 1
                tid = f"{node.name}:saved{self.extra}"
                self.act[s] = tid
                self.size[tid] = nbytes
                r = "extra"
            else:
                r = role if tid in node.inputs or tid == node.name else "input"
            if all(x.tensor != tid for x in node.saved):
                node.saved.append(Saved(tid, self.size.get(tid, nbytes), r))
                if r == "input" and tid not in node.inputs and tid != node.name:
                    node.inputs.append(tid)
            if k is not None:
                self.packs[k][:2] = tid, node.name

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.quiet:
            return func(*args, **(kwargs or {}))
        self.calls += 1  # every op the host dispatches, layer or not
        if self.values is None:
            out = func(*args, **(kwargs or {}))
        else:
            try:
                out = self.values.run(func, args, kwargs or {}, self.name)
            except _ValueError as exc:
                self.failed = self.failed or str(exc)
                raise
        if self.hold_all:
            self.hold.append(out)
        ins = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
        if not outs:
            return out
        main = outs[0]
        s = _sid(main)
        if s in self.params:  # a view of a weight (its transpose, say): still the weight
            return out
        inputs, reads = [], []  # reads: the weights' storages, given bytes by _live
        for a in ins:
            sa = _sid(a)
            if sa in self.act and self.act[sa] not in inputs:
                inputs.append(self.act[sa])
            elif sa in self.params and sa not in reads:
                reads.append(sa)
        grad = main.dtype.is_floating_point and (
            any(self.grad.get(t, False) for t in inputs)
            or any(_sid(a) in self.params and _sid(a) not in self.frozen for a in ins))
        name = f"{func.__name__.split('.')[0]}_{len(self.nodes)}"
        alias = self.act.get(s)
        if alias is not None and alias not in inputs:
            alias = None  # a storage made before and not read here: treat as new
        op = func.__name__.split(".")[0]
        # a view shares its base's gradient as flatten does; an
        # in-place op's backward writes a new one
        kind = "flatten" if alias is not None and not op.endswith("_") else op
        node = ProbeNode(name, kind, str(func), inputs,
                         self.size[alias] if alias else _nbytes(main), tuple(main.shape),
                         grad, alias)
        node.attrs["_reads"] = reads  # _live gives their bytes
        node.attrs["module"] = self.module
        node.attrs["_bytes"] = sum(_nbytes(a) for a in ins) + sum(_nbytes(o) for o in outs)
        node.attrs["_dtype"] = main.dtype
        node.attrs["_f"] = op_features(func, args, kwargs, out)
        node.attrs["_seq"] = self.calls
        counter = flop_registry.get(getattr(func, "overloadpacket", None))
        if counter is not None:
            try:
                node.flops = int(counter(*args, **(kwargs or {}), out_val=out))
            except Exception:  # noqa: BLE001  a counter's own shape rules; 0 is honest
                node.flops = 0
        here = {_sid(a) for a in ins}
        before, mine = [], []
        given: set[int] = set()
        for p in self.pending:  # whose pack is it?
            prev_out = p[0] in self.last_outs
            if prev_out and p[0] not in given and (p[0] != self.last_main
                                                   or self.last_op in SAVES_RESULT):
                given.add(p[0])
                before.append(p)
            elif p[0] in here:
                mine.append(p)
            elif p[0] == self.last_main and self.last_op == "clone" and alias is not None \
                    and op.endswith("_") and self.nodes:
                # autograd's copy of an in-place op's input (original_self)
                mine.append(p)
                self.nodes[-1].requires_grad = False  # no gradient flows into the copy
                self.grad[self.nodes[-1].name] = False
            else:
                before.append(p)
        self.pending = []
        self.last_outs = {_sid(o) for o in outs}
        self.last_main = s
        self.last_op = func.__name__.split(".")[0]
        self._give(self.nodes[-1] if self.nodes else None, before, "output")
        self.nodes.append(node)
        if alias is None:
            self.act[s] = name
            if not self.hold_all:  # its address may be reused once it dies
                self.finalizers.append(
                    weakref.finalize(main.untyped_storage(), self._dead, s, name))
        self.size[name] = node.out_nbytes
        self.grad[name] = grad
        self._give(node, mine, "input")
        return out


def dtype_name(dtype: torch.dtype) -> str:
    """A dtype as torch names it (float32, bfloat16, bool)."""
    return str(dtype).removeprefix("torch.")


def probe_ops(model: torch.nn.Module, batch: dict[str, torch.Tensor], loss_fn, name: str,
              autocast: torch.dtype | None = None,
              values: dict[str, torch.Tensor] | None = None,
              recompute: Sequence[str] = (), as_cuda: bool = True,
              routing: str = "balanced") -> Probe:
    """``model`` and ``batch`` on the meta device, or on a CUDA GPU (the
    profiler: nothing emulated, autocast real); ``loss_fn(model,
    batch)`` the step's forward pass and loss (a Workload's ``loss``). Each op's
    ``attrs['block']`` is its region among the blocks chosen from what the probe saw
    (``Probe.blocks``).
    ``values``: on the meta device, the batch's own values on the CPU, by key; a model
    that reads a value the probe cannot know is a ConfigError. ``recompute``: module paths
    run under checkpoint (NOTE [pack log]); ``as_cuda=False``: on the meta device its own
    choices (a CPU's dropout, SDPA's math path), not CUDA's."""
    from ...errors import ConfigError
    params, frozen = {}, set()
    for p in model.parameters():
        params[_sid(p)] = _nbytes(p)
        if not p.requires_grad:
            frozen.add(_sid(p))
    first = next(iter(batch.values()))
    data = {_sid(first): "data"}
    meta = first.device.type == "meta"
    known = {batch[k]: v for k, v in (values or {}).items()
             if k in batch and v.numel() <= VALUE_LIMIT}
    rec = _Recorder(params, data, hold_all=meta)
    rec.frozen = frozen
    rec.values, rec.name = (_Values(known) if meta else None), name
    rec.size["data"] = _nbytes(first)
    if meta:
        ctx = _Autocast(autocast) if autocast is not None else contextlib.nullcontext()
        emulate = _as_cuda(rec) if as_cuda else contextlib.nullcontext()
        lists = ListIndices(rec.values)
    else:
        ctx = torch.autocast(first.device.type, dtype=autocast) if autocast is not None \
            else contextlib.nullcontext()
        emulate = contextlib.nullcontext()
        lists = contextlib.nullcontext()
    calls: list[tuple[str, int]] = []  # every module call, and its caller
    wrapped = None
    if recompute:
        from ..runtime.blocks import Checkpointed
        wrapped = Checkpointed(model, recompute, "recompute module", preserve_rng_state=False,
                               context_fn=lambda: (_inside(rec), contextlib.nullcontext()))
        for m in wrapped.modules:  # checkpoint's own code quiet, the module's recorded
            m.forward = _quietly(rec, m.forward)
    handles = module_paths(model, lambda path: setattr(rec, "module", path), calls)
    if meta:  # the routing assumed (NOTE [moe routing], NOTE [moe load])
        handles += route(model, rec, routing)
    spans: list[tuple[int, int]] = []  # the model's own checkpointed calls (NOTE [step options])
    try:
        with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda _: None), emulate:
            with rec, ctx, lists, recorded(model, rec.nodes, spans):
                loss = loss_fn(model, batch)
    except ConfigError:
        raise
    except Exception as exc:  # whatever the model made of it, one line
        if rec.failed:
            raise ConfigError(rec.failed) from None
        text = str(exc).splitlines()[0][:200] if str(exc) else ""
        if meta and "meta" in text:  # a value asked for outside ATen (Tensor.numpy())
            raise ConfigError(f"{name}: its forward pass needs what the meta device does not "
                              f"have ({text}); trace it on a GPU with vdnnsim profile") from None
        if not _from_vdnnsim(exc.__traceback__):  # the model refused its input
            raise ConfigError(
                f"{name}: its forward pass failed on a batch of shape {tuple(first.shape)} "
                f"({type(exc).__name__}{': ' + text if text else ''}); check that the input "
                "(--input, --seq-len) is what the model takes"
                + ("; if it runs on a GPU, trace it there with vdnnsim profile" if meta else "")
            ) from None
        raise
    finally:
        for h in handles:
            h.remove()
        if wrapped is not None:
            wrapped.restore()
    if rec.failed:  # the model caught it and went on: a path CUDA would not take
        raise ConfigError(rec.failed)
    rec._give(rec.nodes[-1] if rec.nodes else None, rec.pending, "output")
    for f in rec.finalizers:  # they hold the recorder, which holds the saved tensors
        f.detach()
    rec.hold.clear()
    out = rec.act.get(_sid(loss), rec.nodes[-1].name)
    nodes, resident = _live(rec.nodes, out, params, rec.frozen)
    blocks = choose_blocks(model, calls, nodes)
    tag_blocks(nodes, blocks)
    called = {path for path, _ in calls}
    for n in nodes:  # containers (a ModuleList) on the op's path: no call to checkpoint
        parts = n.attrs["module"].split(".") if n.attrs["module"] != OUTSIDE else []
        uncalled = [q for q in (".".join(parts[:k]) for k in range(1, len(parts)))
                    if q not in called]
        if uncalled:
            n.attrs["uncalled"] = uncalled
    ops = {n.name for n in nodes}  # NOTE [pack log]: what the trace keeps
    kept = ops | {s.tensor for n in nodes for s in n.saved} | {"data"}
    packs = [Pack(t if t in kept else None, op if op in ops else None, shape, dtype, module)
             for t, op, shape, dtype, module in rec.packs]
    return Probe(name, int(first.shape[0]), first.dtype, rec.size["data"],
                 tuple(first.shape), nodes, out, resident_weight_bytes=resident,
                 blocks=blocks, packs=packs, checkpointed=segments(spans, rec.nodes, nodes))


def _never(packed: Any) -> Any:
    raise AssertionError("the probe runs no backward pass")


@contextlib.contextmanager
def _quiet(rec: _Recorder, on: bool):
    was, rec.quiet = rec.quiet, on
    try:
        yield
    finally:
        rec.quiet = was


@contextlib.contextmanager
def _inside(rec: _Recorder):
    """A checkpointed module's own forward pass: recorded, its packs given, not logged."""
    with _quiet(rec, False), torch.autograd.graph.saved_tensors_hooks(rec.pack_inner, _never):
        yield


def _quietly(rec: _Recorder, forward: Any) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        with _quiet(rec, True):
            return forward(*args, **kwargs)
    return run


# who raised it. An exception from the model's own code, or from a torch
# function it called with arguments it refuses (timm's assert that the image is the size
# the model was built for), is the user's input: one line. One from vdnnsim's own code, its
# stand-ins for CUDA (SDPA, dropout, the autocast loss) or the recorder's
# bookkeeping, is vdnnsim's bug and keeps its traceback; the frames that only pass an op on
# (the dispatch and autocast modes, the module hooks) do not count.
_PASSING = frozenset({"__torch_dispatch__", "run", "__torch_function__", "hook", "post",
                      "<lambda>"})


def _from_vdnnsim(tb) -> bool:
    import os
    import traceback
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
    frames = traceback.extract_tb(tb)
    i = 0
    while i < len(frames) and frames[i].filename.startswith(root):
        i += 1  # probe_ops and the workload's loss, which call the model
    inner = frames[i:]
    return not inner or inner[-1].filename.startswith(root) or any(
        f.filename.startswith(root) and f.name not in _PASSING for f in inner)



def _live(nodes: list[ProbeNode], out: str, params: dict[int, int],
          frozen: set[int] = frozenset()) -> tuple[list[ProbeNode], int]:
    """The ops the loss depends on or whose outputs autograd keeps, and
    the bytes of the weights that none of them reads (resident: no gradient, no optimizer
    state). An output nothing reads is freed at once in PyTorch, where the trace would hold
    it as a network output until the backward pass. An in-place op (``alias_of``, not a
    view) keeps its base's name, so no later op names it: it is kept when a later op reads
    its base, for it wrote what that op reads. An op that saves a tensor that stays stays
    too (so a thrown-away head on a live activation is kept: an overestimate, left as it
    was). Each weight's bytes go to the first kept op that reads it (tied weights once); a
frozen weight's (``frozen``, its storages) to none: resident."""
    keep = {out}
    for n in reversed(nodes):
        if n.name in keep or any(s.tensor in keep for s in n.saved) or \
                any(s.role == "extra" for s in n.saved) and n.saved or \
                n.alias_of in keep and n.kind != "flatten":
            keep.add(n.name)
            keep.update(n.inputs)
            if n.alias_of:
                keep.add(n.alias_of)
        for s in n.saved:
            if n.name in keep:
                keep.add(s.tensor)
    live = [n for n in nodes if n.name in keep]
    given: set[int] = set()
    for n in live:
        fresh = [s for s in n.attrs.get("_reads", ()) if s not in given and s not in frozen]
        given.update(fresh)
        n.weight_bytes = sum(params[s] for s in fresh)
    return live, sum(params.values()) - sum(n.weight_bytes for n in live)


def op_model_for(gpu: Any) -> Any:
    """The GPU's op-level model, else one from its specs and a calibrated
    preset's, else None (then a memory trace)."""
    from ...costs.ops import for_gpu, predict_for
    return for_gpu(gpu) or predict_for(gpu)


def memory_trace(spec: str, batch_size: int, gpu: Any, precision: str = "fp32",
                 seq_len: int | None = None, model_kwargs: dict[str, Any] | None = None,
                 input_spec: str | None = None) -> dict[str, Any]:
    """The trace file (a dict) of a workload built on
    the meta device: every op a layer, its memory as PyTorch's on CUDA would be, its times
    the op model's for ``gpu`` where it has one, else 0 (a memory trace). ``precision``:
    fp32, bf16/fp16 (pure) or autocast-bf16/fp16. Kept by NOTE [trace cache]."""
    from .cache import cached

    args = dict(batch_size=batch_size, precision=precision, seq_len=seq_len,
                model_kwargs=model_kwargs, input_spec=input_spec)
    return cached("memory_trace", spec, args, gpu, lambda: _memory_trace(
        spec, batch_size, gpu, precision, seq_len, model_kwargs, input_spec))


def probe_workload(spec: str, batch_size: int, precision: str = "fp32",
                   seq_len: int | None = None, model_kwargs: dict[str, Any] | None = None,
                   input_spec: str | None = None, recompute: Sequence[str] = (),
                   as_cuda: bool = True) -> tuple[Any, Probe]:
    """The workload of ``spec`` built on the meta device and its step's probe, as
    memory_trace makes it; ``recompute`` and ``as_cuda`` as probe_ops takes them."""
    from ...errors import ConfigError
    from ..model.workload import DTYPES, PRECISIONS, autocast_dtype, build_workload

    if precision not in PRECISIONS:
        raise ConfigError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    kwargs = dict(model_kwargs or {})  # a routing is the probe's, not the model's
    routing = parse_routing(kwargs.pop("routing", "balanced"))
    with torch.device("meta"):
        work = build_workload(spec, seq_len, input_spec, kwargs or None)
    pure = DTYPES.get(precision, torch.float32)
    work.model.to(pure).train()
    values = work.batch(batch_size, "cpu", pure)  # the batch's values
    moved: dict[int, torch.Tensor] = {}  # a tensor under two keys (ids as labels) stays one
    batch = {k: moved[id(v)] if id(v) in moved else moved.setdefault(id(v), v.to("meta"))
             for k, v in values.items()}
    if routing != "balanced" and not experts_modules(work.model):
        raise ConfigError(f"{spec}: --routing goes with mixture-of-experts models (this one "
                          "has no experts layers)")
    work.info["routing"] = routing
    return work, probe_ops(work.model, batch, work.loss, work.name, autocast_dtype(precision),
                           values, recompute, as_cuda, routing)


def _memory_trace(spec: str, batch_size: int, gpu: Any, precision: str,
                  seq_len: int | None, model_kwargs: dict[str, Any] | None,
                  input_spec: str | None) -> dict[str, Any]:
    from ..profile.assemble import assemble
    from ..model.workload import DTYPES

    from ..model.lora import frozen_bytes, note
    from ..model.stepoptions import note as steps_note
    from .moe import note as moe_note
    from .ssm import note as ssm_note

    work, p = probe_workload(spec, batch_size, precision, seq_len, model_kwargs, input_spec)
    pure = DTYPES.get(precision, torch.float32)
    dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(pure, "fp32")
    unread = p.resident_weight_bytes - frozen_bytes(work.model)  # frozen ones: note()'s
    extra = (f"; {unread} bytes of weights that no op the loss depends on "
             "reads are resident_bytes" if unread else "") + note(spec, model_kwargs, work.model) \
        + moe_note(work.model, precision, work.info["routing"]) + ssm_note(work.model) \
        + work.note(batch_size) + steps_note(work.info["micro_batches"],
                                             work.info["grad_checkpointing"], batch_size,
                                             len(p.checkpointed))
    om = op_model_for(gpu)
    params = [q for q in work.model.parameters() if q.requires_grad]
    rec = {"variant": "autocast" if precision.startswith("autocast") else dtype,
           "param_bytes": sum(q.numel() * q.element_size() for q in params),
           "param_tensors": len(params)}  # what re-timing it needs (NOTE [retime])
    if om is None:
        d = assemble(p, dtype=dtype, features=True, source={
            "kind": "synthesized", "gpu": gpu.name, "cost_model": "none", "retime": rec,
            "note": f"memory only: every layer 0 ns; {spec}, {precision}"})
    else:
        from ...costs.ops import MODEL, SPEC_MODEL
        from .op_times import pooled_note, time_probe
        from ..profile.assemble import software
        ot = time_probe(p, om, rec["param_bytes"], rec["param_tensors"], rec["variant"])
        d = assemble(p, times=ot.times, dtype=dtype, hosts=ot.hosts, kernels=ot.kernels,
                     step_ns=ot.step_ns, host_step_ns=ot.host_step_ns, features=True, source={
                         "kind": "synthesized", "gpu": gpu.name, "retime": rec,
                         "cost_model": MODEL if gpu.op_calibration else SPEC_MODEL,
                         "software": software(),
                         "note": f"{spec}, {precision}"
                                 + (f", seq_len {seq_len}" if seq_len else "")
                                 + (f", input {input_spec}" if input_spec else "")
                                 + (f", args {json.dumps(model_kwargs, sort_keys=True)}"
                                    if model_kwargs else "")
                                 + ": meta device, op-level kernel model "
                                 + (f"fitted to {gpu.op_calibration} ({om.source})"
                                    if gpu.op_calibration else
                                    f"{om.source}")
                                 + pooled_note(ot.pooled)})
        d["optimizer_steps"] = ot.steps
        if work.info["micro_batches"] > 1:  # the adds of a later micro-batch
            d["accumulate_ns"], d["host_accumulate_ns"] = ot.accumulate
    if work.info["micro_batches"] > 1:
        d["micro_batches"] = work.info["micro_batches"]
    from ...costs.workspaces import note as ws_note, predict_into
    d["source"]["note"] += ws_note(*predict_into(d)) + extra  # NOTE [conv workspaces]
    buffers = sum(b.numel() * b.element_size() for b in work.model.buffers())
    matmul = any(n.kind in ("mm", "addmm", "bmm", "baddbmm") for n in p.nodes)
    ws = gpu.cublas_workspace_bytes if matmul else 0
    d["resident_bytes"] = buffers + ws + p.resident_weight_bytes  # held, no gradient, no
    if ws:  # optimizer state; the GPU's workspaces, which re-timing swaps (NOTE [retime])
        d["source"]["retime"]["workspace_bytes"] = ws
    return d
