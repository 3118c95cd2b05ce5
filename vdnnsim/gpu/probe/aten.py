"""A layer graph of any model, observed op by op on the meta device (``probe_ops``).

NOTE [op probe]
torch.fx cannot trace most transformers models (their forward passes branch on
configuration and shapes, and transformers 5 ships no tracer of its own), so this probe
runs one forward pass and its loss under a TorchDispatchMode on the meta device and makes
every ATen op that returns a tensor a layer: the unit is the op, not the module (a GPT-2
step is some 700 of them). As in NOTE [probe], tensors are matched by storage: an op's
output that shares an input's storage (a view, an in-place op) is an alias and keeps its
base's name, so later ops read the base; what autograd saves comes from saved-tensor hooks.
Only the ops the loss depends on stay (``_live``): an output nothing reads is freed at once
by PyTorch. An in-place op (``x.add_(y)``, an LSTM cell's gates, a ``pos_embed`` added in
place) stays, with its operands' producers, when a later op reads its base: that op reads
what it wrote. A parameter is no tensor but the ``weight_bytes`` of the first op that reads
it among those that stay (tied weights count once). A parameter no such op reads (read only
by dropped ops, or by none) is resident on CUDA all the same, with no gradient and no
optimizer state (the loss does not depend on it: its ``.grad`` stays None and AdamW keeps no
moments for it), so its bytes go to the trace's ``resident_bytes``
(``Probe.resident_weight_bytes``), not to a layer, whose ``weight_bytes`` the engine would
also give a gradient and an optimizer's state. Autograd packs an op's inputs before
the op runs and its outputs after, so a pack is given to the next op when that op reads
it, else to the op before; but an in-place op whose backward needs its input as it was
(``silu_``, ``hardswish_``, ``x.mul_(gate)``) has autograd clone that input first
(``original_self``): a ``clone`` nothing reads, packed before the op, which is given to the
op (held until its backward) and has no gradient (timm's rexnet_100: 18% of its peak was
these copies). Secondary outputs (layer norm's statistics, attention's
log-sum-exp) exist only where saved, as ``extra`` tensors of their op. What this leaves
out: the times (every layer is 0 ns: a memory trace; NOTE [op probe] is not yet in the
kernel model), the temporaries inside a backward kernel, and which SDPA kernel the GPU
would pick (the meta device runs PyTorch's choice for meta tensors).
"""

from __future__ import annotations

import contextlib
from collections import Counter
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from .fx import Probe, ProbeNode, Saved, _nbytes, _sid
from .opfeatures import op_features

# ops whose backward reads their own output (``result`` in PyTorch's derivatives.yaml):
# a pack of that output right after them is theirs (NOTE [op probe]); other outputs
# (layer norm's statistics, dropout's mask, attention's log-sum-exp) always are
SAVES_RESULT = frozenset({
    "_log_softmax", "_softmax", "_safe_softmax", "tanh", "sigmoid", "exp", "relu",
    "threshold", "hardtanh", "elu", "silu_backward", "rsqrt", "sqrt", "native_dropout",
    "native_layer_norm", "native_batch_norm", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention",
    "_native_batch_norm_legit_functional",
    "max_pool2d_with_indices", "tanh_", "sigmoid_", "relu_", "exp_"})


# NOTE [op values]
# The meta device has shapes and no values, so a model whose forward pass reads a value
# (``.item()``, a Python ``if`` on a tensor, ``nonzero``, a boolean mask: transformers' OPT
# asks whether its all-ones attention mask is all ones before it picks SDPA's causal path)
# cannot run there as it is. On the meta device the probe keeps real values beside the
# tensors whose values it can know: the batch (made on the CPU, then moved), anything
# made on the CPU, what a factory op makes (``ones``, ``arange``), and whatever an op
# makes from tensors that all have values. Each such op runs a second time on those CPU
# copies, after its meta run and unrecorded, for outputs of at most VALUE_LIMIT elements
# (a B x S mask, not a B x H x S x S one), so it costs little: a transformer's mask and
# position arithmetic, never its weights or activations, which have no values (random
# weights on the meta device). An op the meta device cannot run (``item``, ``nonzero``,
# ``equal``...) is then answered from the copies, its tensor outputs moved to the meta
# device; an in-place op that writes a tensor with values from one without drops the
# values of every tensor on that storage. A value the probe cannot know (one that comes
# from the weights or the activations) ends the probe in one line naming the op and what
# to do instead (run the model for real on a GPU: ``vdnnsim profile``), as does an op the
# meta device has no kernel for. Random values (the batch's tokens, dropout) are as a
# seeded run's on the CPU: another sample, the same shapes.
VALUE_LIMIT = 1 << 22  # elements of a tensor whose values the probe keeps (16 MiB in fp32)
VALUE_OPS = frozenset({  # ops that exist to read values: the message says so
    "_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_dim",
    "unique_consecutive", "equal", "is_nonzero", "allclose", "bincount", "histc",
    "repeat_interleave", "nonzero_static", "argwhere", "masked_scatter", "item"})


class _ValueError(Exception):
    """NOTE [op values]: the probe cannot go on; the message is the user's line."""


class _Values:
    """NOTE [op values]: CPU copies beside the meta tensors whose values are known."""

    def __init__(self, known: dict[torch.Tensor, torch.Tensor]):
        self.of: dict[int, torch.Tensor] = {}  # id(meta tensor) -> its values on the CPU
        self.on: dict[int, set[int]] = {}  # storage -> ids of the tensors with values on it
        self.hold: list[torch.Tensor] = []  # the meta tensors, so that no id is reused
        for t, v in known.items():
            self._put(t, v)

    def _put(self, t: torch.Tensor, v: torch.Tensor) -> None:
        if t.shape != v.shape or t.dtype != v.dtype:
            return  # the meta kernel and the CPU's disagree: no values, not wrong ones
        self.hold.append(t)
        self.of[id(t)] = v
        self.on.setdefault(_sid(t), set()).add(id(t))

    def get(self, t: torch.Tensor) -> torch.Tensor | None:
        return self.of.get(id(t)) if t.device.type == "meta" else t

    def _drop(self, t: torch.Tensor) -> None:
        for i in self.on.pop(_sid(t), ()):
            self.of.pop(i, None)

    @staticmethod
    def _cpu(a: Any) -> Any:
        return torch.device("cpu") if isinstance(a, torch.device) and a.type == "meta" else a

    def run(self, func, args: tuple, kwargs: dict, name: str) -> Any:
        """``func`` on the meta device, with values where its inputs have them."""
        from torch.utils._pytree import tree_map
        ins = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        known = all(self.get(a) is not None for a in ins)
        cpu_args = cpu_kwargs = None
        if known:
            cpu_args, cpu_kwargs = tree_map(
                lambda a: self.get(a) if isinstance(a, torch.Tensor) else self._cpu(a),
                (args, kwargs))
        try:
            out = func(*args, **kwargs)
        except (RuntimeError, NotImplementedError) as exc:
            if not known:
                raise _ValueError(self._why(func, exc, name)) from None
            # NOTE [op values]: an op the meta device cannot run, answered on the CPU
            try:
                cpu_out = func(*cpu_args, **cpu_kwargs)
            except (RuntimeError, NotImplementedError, ValueError, IndexError) as cpu_exc:
                raise _ValueError(self._why(func, cpu_exc, name)) from None
            stays = str(kwargs.get("device", "meta")) != "meta"  # asked for the CPU
            out = tree_map(lambda c: c if stays or not isinstance(c, torch.Tensor)
                           else c.to("meta"), cpu_out)
            for o, c in zip(tree_leaves(out), tree_leaves(cpu_out)):
                if isinstance(o, torch.Tensor) and o.device.type == "meta":
                    self._put(o, c)
            return out
        outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
        if known and any(o.device.type == "meta" for o in outs) \
                and all(o.numel() <= VALUE_LIMIT for o in outs):
            try:
                cpu_out = func(*cpu_args, **cpu_kwargs)
            except (RuntimeError, NotImplementedError):
                cpu_out = None
            if cpu_out is not None:
                for o, c in zip(tree_leaves(out), tree_leaves(cpu_out)):
                    if isinstance(o, torch.Tensor) and isinstance(c, torch.Tensor) \
                            and o.device.type == "meta":
                        self._put(o, c)
                return out
        schema = getattr(func, "_schema", None)  # a write the copies did not follow
        for arg, a in zip(schema.arguments if schema else (), args):
            if arg.alias_info is not None and arg.alias_info.is_write \
                    and isinstance(a, torch.Tensor):
                self._drop(a)
        for k, a in kwargs.items():
            if isinstance(a, torch.Tensor) and k == "out":
                self._drop(a)
        return out

    @staticmethod
    def _why(func, exc: BaseException, name: str) -> str:
        op = func.__name__.split(".")[0]
        msg = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        if op in VALUE_OPS or any(w in msg for w in ("data-dependent", "item()", "no data",
                                                     "nonzero")):
            return (f"{name}: its forward pass reads a tensor's value (aten::{op}: .item(), "
                    "an if on a tensor, nonzero or a boolean mask) that the meta device "
                    "does not have, as it comes from the weights or the activations (NOTE "
                    "[op values]); trace it on a GPU with vdnnsim profile, or change the "
                    "model to take the value from its config")
        return (f"{name}: the meta device cannot run aten::{op} ({msg}); trace it on a "
                "GPU with vdnnsim profile")


class _Recorder(TorchDispatchMode):
    values: _Values | None = None  # NOTE [op values]: on the meta device, set by probe_ops
    name = ""  # the model's, for the message
    failed: str | None = None  # the message, once a value was asked for in vain

    def __init__(self, params: dict[int, int], data: dict[int, str], hold_all: bool = True):
        super().__init__()
        self.hold_all = hold_all  # False on CUDA: a dead storage leaves ``act`` instead
        self.module = OUTSIDE  # NOTE [module paths]: the innermost module now running
        self.finalizers: list[weakref.finalize] = []
        self.params = params  # storage -> bytes
        self.act: dict[int, str] = dict(data)  # storage -> tensor id
        self.size: dict[str, int] = {}
        self.grad: dict[str, bool] = {v: False for v in data.values()}
        self.nodes: list[ProbeNode] = []
        self.pending: list[tuple[int, int]] = []  # (storage, bytes) packed, not yet given
        self.extra = 0
        self.hold: list[Any] = []  # every tensor made: a freed storage's address is reused
        self.last_outs: set[int] = set()  # the previous op's output storages
        self.last_main = -1
        self.last_op = ""
        self.calls = 0

    def same(self, copy: torch.Tensor, original: torch.Tensor) -> None:
        """``copy`` (made unrecorded) stands for ``original``."""
        self.hold.append(copy)
        s = _sid(original)
        if s in self.act:
            self.act[_sid(copy)] = self.act[s]
        elif s in self.params:
            self.params[_sid(copy)] = 0

    def _dead(self, s: int, name: str) -> None:
        if self.act.get(s) == name:
            del self.act[s]

    def pack(self, t: torch.Tensor) -> None:
        self.hold.append(t)
        self.pending.append((_sid(t), _nbytes(t)))

    def _give(self, node: ProbeNode | None, storages: list[tuple[int, int]], role: str) -> None:
        if node is None:
            return
        for s, nbytes in storages:
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

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1  # every op the host dispatches, layer or not (NOTE [op model])
        if self.values is None:
            out = func(*args, **(kwargs or {}))
        else:  # NOTE [op values]
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
            or any(_sid(a) in self.params for a in ins))
        name = f"{func.__name__.split('.')[0]}_{len(self.nodes)}"
        alias = self.act.get(s)
        if alias is not None and alias not in inputs:
            alias = None  # a storage made before and not read here: treat as new
        op = func.__name__.split(".")[0]
        # a view shares its base's gradient as flatten does (NOTE [pytorch semantics]); an
        # in-place op's backward writes a new one
        kind = "flatten" if alias is not None and not op.endswith("_") else op
        node = ProbeNode(name, kind, str(func), inputs,
                         self.size[alias] if alias else _nbytes(main), tuple(main.shape),
                         grad, alias)
        node.attrs["_reads"] = reads  # NOTE [op probe]: _live gives their bytes
        node.attrs["module"] = self.module  # NOTE [module paths]
        node.attrs["_bytes"] = sum(_nbytes(a) for a in ins) + sum(_nbytes(o) for o in outs)
        node.attrs["_dtype"] = main.dtype
        node.attrs["_f"] = op_features(func, args, kwargs, out)  # NOTE [op features]
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
        for p in self.pending:  # NOTE [op probe]: whose pack is it?
            prev_out = p[0] in self.last_outs
            if prev_out and p[0] not in given and (p[0] != self.last_main
                                                   or self.last_op in SAVES_RESULT):
                given.add(p[0])
                before.append(p)
            elif p[0] in here:
                mine.append(p)
            elif p[0] == self.last_main and self.last_op == "clone" and alias is not None \
                    and op.endswith("_") and self.nodes:
                # NOTE [op probe]: autograd's copy of an in-place op's input (original_self)
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


def _math_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """SDPA's math path in fp32, op for op as ATen's ``_scaled_dot_product_attention_math``
    runs it (torch 2.14's, recorded on the meta device), but for its dropout: on a CUDA tensor ``at::dropout`` is the fused ``native_dropout``
    (a bool mask), on the meta device the generic path (a float mask the size of the
    scores: GPT-BigCode's fp32 attention, multi-query with dropout, kept 1.4 GiB too many
    over 20 layers)."""
    import math
    s = math.sqrt(scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    q = q * s
    if is_causal:
        attn_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool,
                               device=q.device).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        neg = torch.scalar_tensor(-math.inf, dtype=q.dtype, device=q.device)
        attn_mask = torch.where(attn_mask, torch.scalar_tensor(0.0, dtype=q.dtype,
                                                               device=q.device), neg)
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        n = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(n, -3), v.repeat_interleave(n, -3)
    attn = q @ (k.transpose(-2, -1) * s)
    if attn_mask is not None:
        attn = attn + attn_mask
    attn = torch.ops.aten._safe_softmax(attn, -1)
    attn = torch.native_dropout(attn, dropout_p, True)[0]
    return attn @ v


@contextlib.contextmanager
def _as_cuda(rec: _Recorder | None = None):
    """NOTE [op probe]: dropout and attention as CUDA runs them. On a CUDA tensor PyTorch's
    dropout is the fused ``native_dropout`` (a bool mask, saved for backward); on the meta
    device it takes the generic path (a float mask and a multiply), four times the mask's
    bytes. SDPA on the meta device always takes the math path; where CUDA takes it too
    (no fused kernel fits) with dropout, its dropout is the fused one as well
    (``_math_sdpa``)."""
    import torch.nn.functional as F
    plain = F.dropout

    def fused(x, p=0.5, training=True, inplace=False):
        if not training or p == 0:
            return x
        return torch.native_dropout(x, p, True)[0]

    plain_sdpa = F.scaled_dot_product_attention

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        # NOTE [op probe]: the kernel CUDA's SDPA picks on an H100/H200 (PyTorch 2.11,
        # in priority order): flash (16-bit, no mask), memory-efficient (any float dtype,
        # masks, no grouped-query heads), else the math path (the meta device's own, which
        # keeps the score matrices). Both fused kernels take only 4-D q, k and v of one
        # batch size (sdp_utils' check_tensor_shapes: SAM's ViT passes 3-D ones, batch x
        # heads first, and gets the math path); flash wants one head dim of at most 256 and
        # no causal mask over unequal lengths; memory-efficient wants q's and k's head dims
        # equal and q's and v's multiples of 8 (16-bit) or 4 (fp32)
        auto = _Autocast.active
        if auto is not None:  # autocast's cast, which a Python function does not get
            with torch._C.DisableTorchFunction():
                q, k, v = (auto._cast(t, auto.dtype) for t in (q, k, v))
        fused = q.dim() == k.dim() == v.dim() == 4 and q.shape[0] == k.shape[0] == v.shape[0] \
            and k.shape[1] == v.shape[1]
        gqa = fused and enable_gqa and k.shape[-3] != q.shape[-3]
        low = q.dtype in (torch.float16, torch.bfloat16)
        dq, dk, dv = q.shape[-1], k.shape[-1], v.shape[-1]
        if fused and low and attn_mask is None and dq == dk == dv <= 256 \
                and not (is_causal and q.shape[-2] != k.shape[-2]):
            if gqa:  # flash reads the shared key/value heads in place: repeat them
                # unrecorded, as views of the originals (NOTE [op probe])
                from torch.utils._python_dispatch import _disable_current_modes
                n = q.shape[-3] // k.shape[-3]
                with _disable_current_modes():
                    k2, v2 = k.repeat_interleave(n, -3), v.repeat_interleave(n, -3)
                if rec is not None:
                    rec.same(k2, k)
                    rec.same(v2, v)
                k, v = k2, v2
            return torch.ops.aten._scaled_dot_product_flash_attention(
                q, k, v, dropout_p, is_causal, False, scale=scale)[0]
        align = 8 if low else 4
        if fused and not gqa and k.shape[-3] == q.shape[-3] and dq == dk \
                and dq % align == 0 and dv % align == 0:
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                q, k, v, attn_mask, True, dropout_p, is_causal, scale=scale)[0]
        if dropout_p > 0 and q.dtype == torch.float32 and (scale is None or scale > 0):
            # the math path's dropout as CUDA runs it (NOTE [op probe]; fp32 only: a 16-bit
            # math path computes in fp32 with casts this emulation does not make)
            return _math_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        return plain_sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                          is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

    F.dropout = fused
    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.dropout = plain
        F.scaled_dot_product_attention = plain_sdpa


# NOTE [op probe]: CUDA autocast's op lists (PyTorch's autocast_mode.cpp), the part that
# transformer and CNN training reach: run in the low-precision dtype, or in fp32
AUTOCAST_LOW = frozenset({
    "linear", "matmul", "mm", "bmm", "baddbmm", "addmm", "addbmm", "addmv", "mv", "einsum",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "prelu",
    "scaled_dot_product_attention", "chain_matmul", "linalg_vecdot"})
AUTOCAST_FP32 = frozenset({
    "layer_norm", "group_norm", "softmax", "log_softmax", "nll_loss",
    "mse_loss", "l1_loss", "smooth_l1_loss", "kl_div", "binary_cross_entropy_with_logits",
    "exp", "log", "pow", "rsqrt", "reciprocal", "softplus", "norm", "cumsum", "sum", "prod",
    "logsumexp", "cosine_similarity"})


class _Autocast(torch.overrides.TorchFunctionMode):
    """NOTE [op probe]: CUDA's autocast, which the meta device (and a machine without a
    GPU) does not run: each listed function's floating-point tensor arguments are cast
    (``.to``, differentiable, as autocast's casts are), the low-precision casts of
    parameters cached for the forward pass as autocast caches them."""

    active: _Autocast | None = None

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype
        self.cache: dict[int, torch.Tensor] = {}

    def __enter__(self):
        _Autocast.active = self
        return super().__enter__()

    def __exit__(self, *exc):
        _Autocast.active = None
        return super().__exit__(*exc)

    def _cross_entropy(self, func, args: tuple, kwargs: dict) -> Any:
        """NOTE [op probe]: autocast has no policy for cross_entropy, a composite op; it
        sees the ops inside: log_softmax, called with the input's own dtype (which
        autocast's fp32_set_opt_dtype policy leaves alone), runs in bf16/fp16, and
        nll_loss (an fp32 op) casts the log-probabilities to fp32 (a 16-bit logits tensor:
        a 16-bit log_softmax saved, an fp32 copy saved by nll_loss; measured on the H200,
        BERT-base's masked-LM loss). Class-index targets without label smoothing only; any
        other call runs as it is."""
        import torch.nn.functional as F
        names = ("input", "target", "weight", "size_average", "ignore_index", "reduce",
                 "reduction", "label_smoothing")
        bound = dict(zip(names, args), **kwargs)
        x, target = bound.get("input"), bound.get("target")
        with torch._C.DisableTorchFunction():
            if not (isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16)
                    and isinstance(target, torch.Tensor) and not target.is_floating_point()
                    and not bound.get("label_smoothing")):
                return func(*args, **kwargs)
            logp = torch.log_softmax(x, 1 if x.dim() > 1 else 0, dtype=x.dtype)
            weight = bound.get("weight")
            return F.nll_loss(logp.float(), target,
                              weight.float() if weight is not None else None,
                              ignore_index=bound.get("ignore_index", -100),
                              reduction=bound.get("reduction", "mean"))

    def _cast(self, a: Any, dtype: torch.dtype) -> Any:
        if not (isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != dtype):
            return a
        if isinstance(a, torch.nn.Parameter) and dtype == self.dtype:
            c = self.cache.get(id(a))
            if c is None:
                c = self.cache[id(a)] = a.to(dtype)
            return c
        return a.to(dtype)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "cross_entropy":
            return self._cross_entropy(func, args, kwargs)
        if name in AUTOCAST_LOW:
            target = self.dtype
        elif name in AUTOCAST_FP32:
            target = torch.float32
        else:
            return func(*args, **kwargs)
        with torch._C.DisableTorchFunction():
            args = tuple(self._cast(a, target) for a in args)
            kwargs = {k: self._cast(v, target) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def probe_ops(model: torch.nn.Module, batch: dict[str, torch.Tensor], loss_fn, name: str,
              autocast: torch.dtype | None = None,
              values: dict[str, torch.Tensor] | None = None) -> Probe:
    """NOTE [op probe]: ``model`` and ``batch`` on the meta device, or on a CUDA GPU (the
    profiler, NOTE [module timing]: nothing emulated, autocast real); ``loss_fn(model,
    batch)`` the step's forward pass and loss (a Workload's ``loss``). Each op's
    ``attrs['block']`` is its region among the blocks chosen from what the probe saw
    (NOTE [blocks], ``Probe.blocks``).
    ``values``: on the meta device, the batch's own values on the CPU, by key (NOTE [op
    values]); a model that reads a value the probe cannot know is a ConfigError."""
    from ...errors import ConfigError
    params = {}
    for p in model.parameters():
        params[_sid(p)] = _nbytes(p)
    first = next(iter(batch.values()))
    data = {_sid(first): "data"}
    meta = first.device.type == "meta"
    known = {batch[k]: v for k, v in (values or {}).items()
             if k in batch and v.numel() <= VALUE_LIMIT}
    rec = _Recorder(params, data, hold_all=meta)
    rec.values, rec.name = (_Values(known) if meta else None), name
    rec.size["data"] = _nbytes(first)
    if meta:
        ctx = _Autocast(autocast) if autocast is not None else contextlib.nullcontext()
        emulate = _as_cuda(rec)
    else:
        ctx = torch.autocast(first.device.type, dtype=autocast) if autocast is not None \
            else contextlib.nullcontext()
        emulate = contextlib.nullcontext()
    calls: list[tuple[str, int]] = []  # NOTE [blocks]: every module call, and its caller
    handles = module_paths(model, lambda path: setattr(rec, "module", path), calls)
    try:
        with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda _: None), emulate:
            with rec, ctx:
                loss = loss_fn(model, batch)
    except ConfigError:
        raise
    except Exception as exc:  # NOTE [op values]: whatever the model made of it, one line
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
    if rec.failed:  # the model caught it and went on: a path CUDA would not take
        raise ConfigError(rec.failed)
    rec._give(rec.nodes[-1] if rec.nodes else None, rec.pending, "output")
    for f in rec.finalizers:  # they hold the recorder, which holds the saved tensors
        f.detach()
    rec.hold.clear()
    out = rec.act.get(_sid(loss), rec.nodes[-1].name)
    nodes, resident = _live(rec.nodes, out, params)
    blocks = choose_blocks(model, calls, nodes)
    tag_blocks(nodes, blocks)
    return Probe(name, int(first.shape[0]), first.dtype, rec.size["data"],
                 tuple(first.shape), nodes, out, resident_weight_bytes=resident,
                 blocks=blocks)


# NOTE [op values]: who raised it. An exception from the model's own code, or from a torch
# function it called with arguments it refuses (timm's assert that the image is the size
# the model was built for), is the user's input: one line. One from vdnnsim's own code, its
# stand-ins for CUDA (NOTE [op probe]: SDPA, dropout, the autocast loss) or the recorder's
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


# NOTE [module paths]
# Every op of the probe carries the path of the innermost module whose forward pass it ran
# in (``attrs['module']``: ``layer1.0.conv1``, ``model.layers.3.self_attn``; "" is the
# model's own forward, OUTSIDE what runs outside it, the loss), the name a user knows it by
# and the unit that profiles (torch.profiler ranges named by the same paths) and plans are
# to speak in. A module called twice tags the ops of both calls; a module shared under two
# names (tied or re-entrant) has the first name ``named_modules`` gives it; a submodule
# whose weights a parent uses without calling it (MultiheadAttention's ``out_proj``) has no
# ops of its own, they are the parent's. The hooks run whether or not the forward pass
# raises (``always_call``), so the path is never left stale.
OUTSIDE = "<outside>"


def module_paths(model: torch.nn.Module, enter, calls: list | None = None) -> list[Any]:
    """NOTE [module paths]: call ``enter(path)`` whenever the innermost running module
    changes (``OUTSIDE`` once the model's forward pass has returned); append each module
    call to ``calls`` as (path, index in ``calls`` of the call it ran in, -1 for none)
    (NOTE [blocks]). Returns the hook handles."""
    stack: list[tuple[str, int]] = []

    def pre(path: str):
        def hook(m, args):
            k = -1
            if calls is not None:
                k = len(calls)
                calls.append((path, stack[-1][1] if stack else -1))
            stack.append((path, k))
            enter(path)
        return hook

    def post(m, args, out):
        if stack:
            stack.pop()
        enter(stack[-1][0] if stack else OUTSIDE)

    handles = []
    for path, m in model.named_modules():
        handles.append(m.register_forward_pre_hook(pre(path)))
        handles.append(m.register_forward_hook(post, always_call=True))
    return handles


# NOTE [blocks]
# The unit of block offload (NOTE [block offload]), of block plans and of the block runtime
# is a *block*: a module the forward pass calls once, in sequence with the other blocks,
# named by its module path. They are chosen from what the probe saw (``choose_blocks``):
# every module call (``module_paths`` records them) and the ops each ran. A transformer's
# blocks are the items of its largest ModuleList when that list holds at least half the
# model's parameters (GPT-2's ``h``, Llama's ``layers``; two items are enough there), each
# item called once and in order. Any other model (a CNN built by a
# factory, a DLA tree; a list that holds less, like res2net's per-block ``convs``) is cut
# along its call tree: start from the calls the root makes; while the unit with the most
# ops holds more than 1/BLOCK_SHARE of the step's ops, open it into the calls it makes,
# provided each of those modules is called once in the whole step (a module called twice,
# such as a shared activation or ALBERT's one layer, cannot be hooked as one block); units
# with no op are dropped. Fewer than MIN_BLOCKS units: no blocks. Each op is then tagged
# with its region (``attrs['block']``: 0 before the first block, block k's ops and
# whatever runs after them before the next block region k + 1, the head and the loss
# after the last block N + 1) and the first op of a region with its block's path
# (``attrs['block_path']``), which block plans carry and the runtime hooks by
# (``get_submodule``). The blocks' order is the order the probe saw them called in, so a
# block runs in the runtime where it ran in the probe. An op of a module shared with an
# earlier block (named by its first path, NOTE [module paths]) stays in the region running
# when it ran: regions never go back. Time is measured per module (NOTE
# [module timing]); blocks are only the unit of offload.
MIN_BLOCKS = 3  # fewer units offload nothing worth a plan
BLOCK_SHARE = 16  # a unit with more than 1/16 of the ops is opened into its calls


def choose_blocks(model: torch.nn.Module, calls: list[tuple[str, int]],
                  nodes: list[ProbeNode]) -> list[str]:
    """NOTE [blocks]: the blocks' paths in call order; ``calls`` is every module call of
    the step as (path, index of the call it was made in, -1 for none)."""
    count = Counter(path for path, _ in calls)
    kids: dict[int, list[int]] = {}
    for i, (_, parent) in enumerate(calls):
        kids.setdefault(parent, []).append(i)
    ops: dict[str, int] = {}
    for n in nodes:
        m = n.attrs.get("module", OUTSIDE)
        if m == OUTSIDE:
            continue
        parts = m.split(".") if m else []
        for k in range(len(parts) + 1):
            p = ".".join(parts[:k])
            ops[p] = ops.get(p, 0) + 1
    total = len(nodes)
    params = sum(p.numel() for p in model.parameters())
    best, most = _largest_module_list(model)
    if best and 2 * most >= params and all(count[p] == 1 for p in best):
        listed = set(best)
        if [path for path, _ in calls if path in listed] == best:
            return [p for p in best if ops.get(p)]
    roots = [i for i, (path, parent) in enumerate(calls) if parent == -1]
    units = [c for r in roots for c in kids.get(r, [])]
    done: set[int] = set()
    while True:
        open_ = [u for u in units if u not in done]
        if not open_:
            break
        u = max(open_, key=lambda i: ops.get(calls[i][0], 0))
        if ops.get(calls[u][0], 0) * BLOCK_SHARE <= total:
            break
        ch = kids.get(u, [])
        if not ch or any(count[calls[c][0]] != 1 for c in ch) or count[calls[u][0]] != 1:
            done.add(u)
            continue
        k = units.index(u)
        units[k:k + 1] = ch
    # the root's own calls may include a module called twice: no block
    paths = [p for p in (calls[u][0] for u in units) if count[p] == 1 and ops.get(p)]
    return paths if len(paths) >= MIN_BLOCKS else []


def _largest_module_list(model: torch.nn.Module) -> tuple[list[str], int]:
    """The paths of the items of the model's ModuleList (of two or more) with the most
    parameters, and that count; ([], 0) where it has none."""
    best: list[str] = []
    most = 0
    for path, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) >= 2:
            k = sum(p.numel() for p in m.parameters())
            if k > most:
                best, most = [f"{path}.{j}" if path else str(j) for j in range(len(m))], k
    return best, most


def find_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The items of the model's ModuleList with the most parameters: the blocks of a plan
    written before NOTE [blocks] chose them by call (it names no paths)."""
    return [model.get_submodule(p) for p in _largest_module_list(model)[0]]


def tag_blocks(nodes: list[ProbeNode], paths: list[str]) -> None:
    """NOTE [blocks]: each op's region by the module path it ran in, and each block's path
    on the first op of its region."""
    where = {p: k + 1 for k, p in enumerate(paths)}
    last = 0
    for n in nodes:
        m = n.attrs.get("module", OUTSIDE)
        r = None
        if m != OUTSIDE:
            parts = m.split(".") if m else []
            for k in range(len(parts), 0, -1):
                r = where.get(".".join(parts[:k]))
                if r is not None:
                    break
        if r is not None and r < last:
            # a module shared with an earlier block (its first path names it): it ran in
            # the block now running, or between blocks after it, never back in that one
            r = None
        if r is None:  # between blocks: the region of the block before; after the last
            r = len(paths) + 1 if last == len(paths) and paths else last
        elif r != last:
            n.attrs["block_path"] = paths[r - 1]
        n.attrs["block"] = r
        last = max(last, r)


def block_output(out: Any) -> torch.Tensor | None:
    """NOTE [blocks]: the hidden state a block returns (a tensor, a tuple's first
    tensor, a model output's ``last_hidden_state``)."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return next((o for o in out if isinstance(o, torch.Tensor)), None)
    if isinstance(out, dict):
        return next((o for o in out.values() if isinstance(o, torch.Tensor)), None)
    return getattr(out, "last_hidden_state", None)


def _live(nodes: list[ProbeNode], out: str, params: dict[int, int]
          ) -> tuple[list[ProbeNode], int]:
    """NOTE [op probe]: the ops the loss depends on or whose outputs autograd keeps, and
    the bytes of the weights that none of them reads (resident: no gradient, no optimizer
    state). An output nothing reads is freed at once in PyTorch, where the trace would hold
    it as a network output until the backward pass. An in-place op (``alias_of``, not a
    view) keeps its base's name, so no later op names it: it is kept when a later op reads
    its base, for it wrote what that op reads. An op that saves a tensor that stays stays
    too (so a thrown-away head on a live activation is kept: an overestimate, left as it
    was). Each weight's bytes go to the first kept op that reads it (tied weights once)."""
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
        fresh = [s for s in n.attrs.get("_reads", ()) if s not in given]
        given.update(fresh)
        n.weight_bytes = sum(params[s] for s in fresh)
    return live, sum(params.values()) - sum(n.weight_bytes for n in live)


def op_model_for(gpu: Any) -> Any:
    """NOTE [op model]: the GPU's op-level model, else one from its specs and a calibrated
    preset's (NOTE [op spec rule]), else None (then a memory trace)."""
    from ...costs.ops import for_gpu, predict_for
    return for_gpu(gpu) or predict_for(gpu)


def memory_trace(spec: str, batch_size: int, gpu: Any, precision: str = "fp32",
                 seq_len: int | None = None, model_kwargs: dict[str, Any] | None = None,
                 input_spec: str | None = None) -> dict[str, Any]:
    """NOTE [op probe]: the trace file (a dict) of a workload (NOTE [workloads]) built on
    the meta device: every op a layer, its memory as PyTorch's on CUDA would be, its times
    0 (a memory trace). ``precision``: fp32, bf16/fp16 (pure) or autocast-bf16/fp16."""
    from ...errors import ConfigError
    from ..profile.layers import assemble
    from ..model.workload import DTYPES, PRECISIONS, autocast_dtype, build_workload

    if precision not in PRECISIONS:
        raise ConfigError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    with torch.device("meta"):
        work = build_workload(spec, seq_len, input_spec, model_kwargs)
    pure = DTYPES.get(precision, torch.float32)
    work.model.to(pure).train()
    values = work.batch(batch_size, "cpu", pure)  # NOTE [op values]: the batch's values
    moved: dict[int, torch.Tensor] = {}  # a tensor under two keys (ids as labels) stays one
    batch = {k: moved[id(v)] if id(v) in moved else moved.setdefault(id(v), v.to("meta"))
             for k, v in values.items()}
    p = probe_ops(work.model, batch, work.loss, work.name, autocast_dtype(precision), values)
    dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(pure, "fp32")
    extra = (f"; {p.resident_weight_bytes} bytes of weights that no op the loss depends on "
             "reads are resident_bytes" if p.resident_weight_bytes else "")
    om = op_model_for(gpu)
    if om is None:
        d = assemble(p, dtype=dtype, source={
            "kind": "synthesized", "gpu": gpu.name, "cost_model": "none",
            "note": f"memory only (NOTE [op probe]): every layer 0 ns; {spec}, {precision}"
                    + extra})
    else:  # NOTE [op model]
        from ...costs.ops import MODEL, SPEC_MODEL
        from .op_times import pooled_note, time_probe
        from ..profile.layers import software
        params = [q for q in work.model.parameters() if q.requires_grad]
        variant = "autocast" if precision.startswith("autocast") else dtype
        ot = time_probe(p, om, sum(q.numel() * q.element_size() for q in params), len(params),
                        variant)
        d = assemble(p, times=ot.times, dtype=dtype, hosts=ot.hosts, kernels=ot.kernels,
                     step_ns=ot.step_ns, host_step_ns=ot.host_step_ns, source={
                         "kind": "synthesized", "gpu": gpu.name,
                         "cost_model": MODEL if gpu.op_calibration else SPEC_MODEL,
                         "software": software(),
                         "note": f"{spec}, {precision}: meta device, op-level kernel model "
                                 + (f"fitted to {gpu.op_calibration} ({om.source})"
                                    if gpu.op_calibration else
                                    f"{om.source} (NOTE [op spec rule])")
                                 + pooled_note(ot.pooled) + extra})
        d["optimizer_steps"] = ot.steps
    buffers = sum(b.numel() * b.element_size() for b in work.model.buffers())
    matmul = any(n.kind in ("mm", "addmm", "bmm", "baddbmm") for n in p.nodes)
    d["resident_bytes"] = buffers + (gpu.cublas_workspace_bytes if matmul else 0) + \
        p.resident_weight_bytes  # NOTE [op probe]: held, no gradient, no optimizer state
    return d
