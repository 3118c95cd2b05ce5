"""The op model's classes: which ATen ops it knows under which names, and the features
and forms of its utilization, batch-norm and host classes, shared by
the model (``ops.py``) and its fit (``opfit.py``)."""

from __future__ import annotations

import math
from typing import Any

from .kernel import bn_sizes

MODEL = "aten-v1"
FORMAT = "vdnnsim-op-model"
GEMMS = ("mm", "addmm", "bmm", "baddbmm")
SDPA_OPS = {"_scaled_dot_product_flash_attention": "flash",
            "_scaled_dot_product_efficient_attention": "efficient",
            "_scaled_dot_product_cudnn_attention": "flash"}
# the ATen op a calibration case stands for
CASE_OP = {"gelu_tanh": "gelu", "mul_scalar": "mul", "add_scalar": "add", "mul_row": "mul",
           "add_row": "add", "to_bf16": "_to_copy", "to_fp32": "_to_copy",
           "layer_norm": "native_layer_norm", "softmax": "_softmax",
           "log_softmax": "_log_softmax", "nll_loss": "nll_loss_forward",
           "conv": "convolution", "conv3d": "convolution", "batch_norm": "native_batch_norm",
           "group_norm": "native_group_norm", "max_pool": "max_pool2d_with_indices",
           "avg_pool": "avg_pool2d", "adaptive_avg_pool": "mean", "pad": "constant_pad_nd",
           "relu4d": "relu"}
# the form of a binary op a case has (recorded from the shapes)
CASE_FORM = {"mul_scalar": "scalar", "add_scalar": "scalar", "mul_row": "bcast",
             "add_row": "bcast"}
# ops whose name differs from a calibrated one that does the same work
SAME_AS = {"_safe_softmax": "_softmax", "baddbmm": "bmm", "rsub": "sub", "mul_": "mul",
           "add_": "add", "div_": "div", "copy_": "_to_copy", "contiguous": "clone",
           "gelu_": "gelu", "silu_": "silu", "hardtanh_": "hardtanh", "relu_": "relu"}
# one op under the names a device's dispatch gives it (the meta device's batch norm is
# native_batch_norm; CUDA's may be cuDNN's or the update variant): fitted and looked up
# under the first
ALIASES = {"cudnn_batch_norm": "native_batch_norm",
           "_batch_norm_with_update": "native_batch_norm",
           "_native_batch_norm_legit": "native_batch_norm",
           "_native_batch_norm_legit_functional": "native_batch_norm",
           "miopen_batch_norm": "native_batch_norm"}
TILE = 128
# the CNN grid's ops: fitted as classes of their own, but kept out
# of the median class that stands in for an op without one (a transformer's), and the grid's
# cases of ops the transformer grid has (ReLU on a feature map, global average pooling as a
# mean) are not fitted at all: they would move those ops' transformer classes
CNN_OPS = frozenset({"native_batch_norm", "native_group_norm", "max_pool2d_with_indices",
                     "avg_pool2d", "constant_pad_nd", "hardtanh"})
CNN_SHARED = frozenset({"relu4d", "adaptive_avg_pool"})
CONV_CLIP = 3.0  # sd: how far a conv class's utilization follows a feature past its cases


def elem_bytes(dt: str) -> int:
    return 4 if dt == "fp32" else 2


def peak_for(dt: str, peaks: dict[str, float]) -> float:
    return peaks["fp32"] if dt == "fp32" else peaks.get(dt, peaks.get("bf16", peaks["fp32"]))


def gemm_phi(f: dict[str, Any], pass_: str, sms: int, peak: float, bw: float,
             nbytes: float | None = None) -> tuple[list[float], float]:
    """(features, roofline ns) of a GEMM's pass; ``nbytes``: the bytes
    the pass moves where they are not the GEMM's operands (a convolution's)."""
    b, m, n, k = f.get("b", 1), f["m"], f["n"], f["k"]
    e = elem_bytes(f["dt"])
    mult = 1 if pass_ == "fwd" else 2
    flops = 2.0 * b * m * n * k * mult
    if nbytes is None:
        nbytes = (b * (m * k + k * n + m * n)) * e * (1 if pass_ == "fwd" else 2.5)
    roof = max(flops / peak, nbytes / bw) * 1e9
    tiles = b * math.ceil(m / TILE) * math.ceil(n / TILE)
    waves = tiles / sms
    q = waves / math.ceil(waves)
    ln = math.log
    return [1.0, ln(m), ln(n), ln(k), ln(b), ln(max(waves, 1e-3)), q,
            ln(flops / nbytes), ln(roof)], roof


def conv_kind(f: dict[str, Any]) -> str:
    """A convolution's class: depthwise or dense, 3-D and channels-last apart."""
    dw = f.get("b", 1) > 1 and f.get("n") == 1 and f.get("b") == f.get("c")
    return ("dw" if dw else "dense") + ("3d" if f.get("nd") == 3 else "") + \
        ("_cl" if f.get("cl") else "")


def conv_phi(f: dict[str, Any], pass_: str, sms: int, peak: float, bw: float
             ) -> tuple[list[float], float]:
    """(features, roofline ns) of a convolution's pass: its implicit GEMM's over the bytes
    it really moves (its input, weight and output, twice over in the backward pass: an
    implicit GEMM's unfolded input, ``kh x kw`` times the input, is never in memory), and
    the logs of its kernel taps, stride and input channels per group."""
    nbytes = max(float(f.get("bytes", 0)), 1.0) * (1 if pass_ == "fwd" else 2)
    phi, roof = gemm_phi(f, pass_, sms, peak, bw, nbytes)
    ln = math.log
    return phi + [ln(f.get("kd", 1) * f.get("kh", 1) * f.get("kw", 1)), ln(f.get("stride", 1)),
                  ln(max(f.get("c", 1) // max(f.get("b", 1), 1), 1))], roof


def conv_peak(dt: str, peaks: dict[str, float]) -> float:
    """cuDNN runs an fp32 convolution on TF32 tensor cores (PyTorch's default)."""
    return peaks.get("tf32", peaks["fp32"]) if dt == "fp32" else peak_for(dt, peaks)


def sdpa_phi(f: dict[str, Any], pass_: str, peak: float, bw: float
             ) -> tuple[list[float], float]:
    """(features, roofline ns) of an attention's pass."""
    B, H, S, L, D = f["B"], f["H"], f["S"], f.get("L", f["S"]), f["D"]
    flops = 4.0 * B * H * S * L * D * (0.5 if f.get("causal") else 1.0)
    flops *= 1.0 if pass_ == "fwd" else 2.5
    nbytes = B * H * (2 * S + 2 * L) * D * elem_bytes(f["dt"]) * (1 if pass_ == "fwd" else 2)
    roof = max(flops / peak, nbytes / bw) * 1e9
    ln = math.log
    return [1.0, ln(S), ln(L), ln(D), ln(B * H), float(bool(f.get("causal"))),
            ln(roof)], roof


def bn_params(f: dict[str, Any]) -> dict[str, Any] | None:
    """A batch norm's feature map as the CNN kernel model's form reads it."""
    return dict(batch=f["N"], c=f["C"], h=f["H"], w=f["W"]) if "C" in f else None


def cnn_conv_params(f: dict[str, Any]) -> dict[str, Any] | None:
    """A plain 2-D NCHW convolution as the CNN kernel model's form reads it (None: a 3-D,
    channels-last, transposed or dilated one, or features made before these were kept)."""
    if "H" not in f or f.get("cl") or f.get("nd") == 3:
        return None
    return dict(batch=f["N"], c=f["c"], h=f["H"], w=f["W"], k_out=f["n"] * f["b"],
                kh=f["kh"], kw=f["kw"], sh=f["stride"], sw=f.get("sw", f["stride"]),
                ph=f["ph"], pw=f["pw"], groups=f["b"])


def bn_time(c: dict[str, Any], p: dict[str, Any], e: int) -> float:
    """The CNN kernel model's batch-norm form (``kind: bn``) over feature map ``p``."""
    nb, one = bn_sizes(p, e)
    return c["a"] + max(one / c["k"], nb / c["b"])


def util_time(c: dict[str, Any], phi: list[float], roof: float) -> float:
    """A utilization class's time: the roofline over ``sigmoid(beta . phi)``, times its
    sum scale."""
    lim = c.get("clip")  # a conv class: no feature beyond ``clip`` sd of its cases
    z = sum(b * (min(max((x - m) / s, -lim), lim) if lim else (x - m) / s)
            for b, x, m, s in zip(c["beta"], phi, c["mu"], c["sd"]))
    z = max(min(z, 50.0), -50.0)
    return roof * (1 + math.exp(-z)) * c.get("scale", 1.0)


def host_class(op: str) -> str:
    """The host chain whose cost an op takes."""
    if op in GEMMS:
        return "linear"
    if op in SDPA_OPS:
        return "sdpa"
    op = ALIASES.get(op, op)
    return {"native_layer_norm": "layer_norm", "_to_copy": "cast", "convolution": "conv",
            "native_batch_norm": "batch_norm",
            "native_group_norm": "batch_norm"}.get(op, "pointwise")
