"""CUDA's choices that the meta device does not make, emulated for the op probe: fused
dropout, the SDPA kernel CUDA's gates pick, and CUDA autocast (NOTE [op probe])."""

from __future__ import annotations

import contextlib
from typing import Any

import torch


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
def _as_cuda(rec: Any = None):
    """Dropout and attention as CUDA runs them. On a CUDA tensor PyTorch's
    dropout is the fused ``native_dropout`` (a bool mask, saved for backward); on the meta
    device it takes the generic path (a float mask and a multiply), four times the mask's
    bytes. In-place dropout (``inplace=True``, ``at::dropout_``) takes the generic path on
    CUDA too (an H100 saved torchvision MViT's head dropout mask as fp32). SDPA on the meta device always takes the math path; where CUDA takes it too
    (no fused kernel fits) with dropout, its dropout is the fused one as well
    (``_math_sdpa``)."""
    import torch.nn.functional as F
    plain = F.dropout

    def fused(x, p=0.5, training=True, inplace=False):
        if inplace:  # ``at::dropout_`` is the generic path on CUDA too: a mask of x's dtype
            return plain(x, p, training, inplace)
        if not training or p == 0:
            return x
        return torch.native_dropout(x, p, True)[0]

    plain_sdpa = F.scaled_dot_product_attention

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        # the kernel CUDA's SDPA picks on an H100/H200 (PyTorch 2.11,
        # in priority order): flash (16-bit, no mask), memory-efficient (any float dtype,
        # masks, no grouped-query heads), else the math path (the meta device's own, which
        # keeps the score matrices). Both fused kernels take only 4-D q, k and v of one
        # batch size (sdp_utils' check_tensor_shapes: SAM's ViT passes 3-D ones, batch x
        # heads first, and gets the math path), each with its last dim's stride 1
        # (check_last_dim_stride_equals_1_dense: DDPM's pixel attention, q a transposed
        # view, took the math path on an H100); flash wants one head dim of at most 256 and
        # no causal mask over unequal lengths; memory-efficient wants q's and k's head dims
        # equal and q's and v's multiples of 8 (16-bit) or 4 (fp32)
        auto = _Autocast.active
        if auto is not None:  # autocast's cast, which a Python function does not get
            with torch._C.DisableTorchFunction():
                q, k, v = (auto._cast(t, auto.dtype) for t in (q, k, v))
        fused = q.dim() == k.dim() == v.dim() == 4 and q.shape[0] == k.shape[0] == v.shape[0] \
            and k.shape[1] == v.shape[1] and all(t.stride(-1) == 1 or t.shape[-1] == 1
                                                 for t in (q, k, v))
        gqa = fused and enable_gqa and k.shape[-3] != q.shape[-3]
        low = q.dtype in (torch.float16, torch.bfloat16)
        dq, dk, dv = q.shape[-1], k.shape[-1], v.shape[-1]
        if fused and low and attn_mask is None and dq == dk == dv <= 256 \
                and not (is_causal and q.shape[-2] != k.shape[-2]):
            if gqa:  # flash reads the shared key/value heads in place: repeat them
                # unrecorded, as views of the originals
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
            # the math path's dropout as CUDA runs it (fp32 only: a 16-bit
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


# CUDA autocast's op lists (PyTorch's autocast_mode.cpp), the part that
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
    """CUDA's autocast, which the meta device (and a machine without a
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
        """Autocast has no policy for cross_entropy, a composite op; it
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
