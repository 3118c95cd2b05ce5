"""What the op-level kernel model (NOTE [op model], vdnnsim/costs/ops.py) reads of one ATen
op as it runs: the same function describes an op of a model on the meta device (the op
probe, NOTE [op probe]) and an op of ``vdnnsim calibrate --ops``'s microbenchmarks, so
the features a fit saw are the features a prediction gets.

NOTE [op features]
Per op: ``op`` (the ATen name without overload), ``dt`` (the output's dtype: fp32, bf16,
fp16, or what else), ``bytes`` (every tensor argument's and output's storage bytes, as the
op probe counts them), and by kind (below). The op model keys on these and nothing else.

By kind: a GEMM (``mm``, ``addmm``, ``bmm``, ``baddbmm``) its
``b, m, n, k`` (batch, rows, columns, reduction); scaled-dot-product attention its
``B, H, S, L, D`` (batch, query heads, query and key length, head size), ``causal`` and
``mask`` (an additive bias given); a binary op's ``form`` where it is not elementwise
between equal shapes (``bcast``: an operand broadcast, ``scalar``: a one-element operand);
an embedding its table's bytes (``w``) and its output's
(``o``); a convolution its implicit GEMM's ``b, m, n, k`` (groups; output pixels; output
channels and input channels times kernel taps per group), its input channels ``c``, kernel
``kh, kw``, ``stride``, and ``cl`` where its input is
channels-last (NHWC in memory, not also NCHW-contiguous), and where it is a plain 2-D one
(not transposed, not dilated) its input's ``N, H, W``, padding ``ph, pw``, column stride
``sw`` and ``bias`` (one given): what the CNN kernel model reads; a batch norm of a 4-D input its
``N, C, H, W``; a grouped GEMM (``_grouped_mm``, a MoE layer's experts) its groups ``b``,
each group's rows ``m`` (an equal share: the balanced routing of NOTE [moe routing]),
``n, k``, and ``loop`` where CUDA runs it as a GEMM per group (any dtype but bf16).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_leaves

DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
GEMMS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
SDPA = {"_scaled_dot_product_flash_attention": "flash",
        "_scaled_dot_product_efficient_attention": "efficient",
        "_scaled_dot_product_cudnn_attention": "cudnn"}


def _nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def op_features(func: Any, args: tuple, kwargs: dict | None, out: Any) -> dict[str, Any]:
    """The op features of one dispatched ATen op."""
    kwargs = kwargs or {}
    op = func.__name__.split(".")[0]
    ins = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
    main = outs[0] if outs else (ins[0] if ins else None)
    dt = DTYPE_NAMES.get(main.dtype, str(main.dtype).replace("torch.", "")) \
        if main is not None else "fp32"
    f: dict[str, Any] = {"op": op, "dt": dt,
                         "bytes": sum(_nbytes(a) for a in ins) + sum(_nbytes(o) for o in outs)}
    if main is not None and len(ins) > 1:  # a binary op's form: its backward differs
        n = main.numel()
        if any(1 < a.numel() < n for a in ins):
            f["form"] = "bcast"  # a row or a column broadcast: its gradient is a reduction
        elif any(a.numel() == 1 for a in ins):
            f["form"] = "scalar"
    try:
        if op in ("mm", "bmm"):
            a, b = args[0], args[1]
            f.update(_gemm(a.shape, b.shape))
        elif op in ("addmm", "baddbmm"):
            a, b = args[1], args[2]
            f.update(_gemm(a.shape, b.shape))
        elif op in SDPA:
            q, k = args[0], args[1]
            causal = kwargs.get("is_causal")
            if causal is None:  # flash: (q, k, v, dropout_p, is_causal, ...); the others:
                # (q, k, v, attn_bias, compute_log_sumexp, dropout_p, is_causal, ...)
                pos = 4 if op == "_scaled_dot_product_flash_attention" else 6
                causal = bool(args[pos]) if len(args) > pos else False
            mask = op != "_scaled_dot_product_flash_attention" and len(args) > 3 \
                and isinstance(args[3], torch.Tensor)
            f.update(B=int(q.shape[0]), H=int(q.shape[1]), S=int(q.shape[2]),
                     L=int(k.shape[2]), D=int(q.shape[3]), causal=bool(causal),
                     mask=bool(mask), kernel=SDPA[op])
        elif op == "convolution" and outs:  # as an implicit GEMM
            x, w, y = args[0], args[1], outs[0]
            groups = int(args[8]) if len(args) > 8 else 1
            f.update(b=groups, m=int(y.shape[0]) * int(y[0, 0].numel()),
                     n=int(w.shape[0]) // groups, k=int(w[0].numel()), c=int(x.shape[1]),
                     kh=int(w.shape[2]) if w.dim() > 2 else 1,
                     kw=int(w.shape[3]) if w.dim() > 3 else 1,
                     stride=int(args[3][0]) if len(args) > 3 and len(args[3]) else 1)
            if x.dim() == 4 and not x.is_contiguous() \
                    and x.is_contiguous(memory_format=torch.channels_last):
                f["cl"] = True
            dil = args[5] if len(args) > 5 else [1]
            if x.dim() == 4 and w.dim() == 4 and not (len(args) > 6 and args[6]) \
                    and all(int(d) == 1 for d in dil):  # the CNN kernel model's shape
                pad = args[4] if len(args) > 4 and len(args[4]) else [0, 0]
                f.update(N=int(x.shape[0]), H=int(x.shape[2]), W=int(x.shape[3]),
                         ph=int(pad[0]), pw=int(pad[-1]), sw=int(args[3][-1]),
                         bias=isinstance(args[2], torch.Tensor))
            if w.dim() == 5:  # a 3-D convolution: its taps in time, then as a 2-D one's
                f.update(nd=3, kd=int(w.shape[2]), kh=int(w.shape[3]), kw=int(w.shape[4]),
                         stride=int(args[3][-1]) if len(args) > 3 and len(args[3]) else 1)
        elif op.endswith("batch_norm") or op.startswith("_batch_norm"):  # its feature map
            x = args[0]
            if x.dim() == 4:
                f.update(N=int(x.shape[0]), C=int(x.shape[1]), H=int(x.shape[2]),
                         W=int(x.shape[3]))
        elif op == "_grouped_mm":
            f.update(_grouped(args[0], args[1]))
        elif op == "embedding":
            f.update(w=_nbytes(args[0]), o=_nbytes(outs[0]))
    except (IndexError, AttributeError, TypeError):  # an overload of another signature
        pass
    return f


def _gemm(a: torch.Size, b: torch.Size) -> dict[str, int]:
    if len(a) == 3:
        return {"b": int(a[0]), "m": int(a[1]), "k": int(a[2]), "n": int(b[2])}
    return {"b": 1, "m": int(a[0]), "k": int(a[1]), "n": int(b[1])}


def _grouped(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    """A grouped GEMM as a batch of equal GEMMs: the forward's (tokens x K) by (experts x K x
    N), or a batched one (3-D by 3-D)."""
    if a.dim() == 2 and b.dim() == 3:
        g = int(b.shape[0])
        f: dict[str, Any] = {"b": g, "m": -(-int(a.shape[0]) // g), "k": int(a.shape[1]),
                             "n": int(b.shape[2])}
    elif a.dim() == 3 and b.dim() == 3:
        f = _gemm(a.shape, b.shape)
    else:
        return {}
    if a.dtype != torch.bfloat16:
        f["loop"] = True
    return f
