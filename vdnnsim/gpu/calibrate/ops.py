"""``vdnnsim calibrate --ops``: microbenchmarks of the ATen ops of today's training steps
(transformers in fp32 and bf16), for the op-level kernel model (NOTE [op model]).

NOTE [op calibration]
Each case is one op on a shape drawn from a seeded grid of transformer-like sizes (rows =
tokens, columns = widths of 256-16384 and vocabularies), none of them a layer of a model
the project validates on. A case runs its forward once under a dispatch mode that records
the ATen ops it issues with their features (``op_features``, NOTE [op features]: the same
function the op probe uses), so a fit keys on the op PyTorch really ran (``F.layer_norm``
is ``native_layer_norm``; ``F.linear`` without bias is ``mm``); a case whose forward issues
more than its one op is recorded with all of them and fitted on its main op. Then the GPU
time of its forward and of its backward (``torch.autograd.grad`` of the inputs that take a
gradient), each back to back behind a sleep kernel (NOTE [calibration]), and the host's
time per call.

In fp32, matmuls run as PyTorch's default leaves them (no TF32,
``float32_matmul_precision`` 'highest'; recorded); bf16 is what autocast dispatches a
matmul, an attention or a norm to. The host's costs per op come from chains of 64 small
ops (GPU time negligible beside the host's), forward and backward, as plain functions and
as one module per op: the host's cost per op and per module call. The optimizer's step is
timed on parameter sets of 20-320 tensors (AdamW and SGD, foreach, fp32 parameters).

The CNN classes (``--classes cnn``; ``all`` runs both grids) come from a grid of CNN-stage
shapes (STAGES_CNN: feature maps of 224 down to 7 a side) of their own seed (the
transformer grid of a seed is unchanged by them): 2-D convolutions, dense (1x1, k x k,
strided, a stem on the image, grouped) and depthwise,
each in NCHW and in channels-last (NHWC, input and weight), under ``cudnn.benchmark`` as
``vdnnsim measure`` runs (cuDNN's TF32 for fp32 convolutions left as PyTorch sets it,
recorded); and the 4-D streaming ops of CNNs: batch norm (training), group norm, max and
average pooling, global average pooling, constant padding, hardtanh (ReLU6), ReLU. The
norms grid (``--classes norms``, in ``all`` too; its own seed) times batch norm and group
norm five times as often, over the same stages and batch sizes: the CNN grid's six batch
norms a precision could not tell a per-channel reduction from a stream. The video grid
(``--classes video``, in ``all`` too; its own seed) times 3-D convolutions of video-CNN
stages (STAGES_VIDEO), NCDHW. A convolution's pass records its workspace too (the peak
allocated during one call beyond what it returns). Nothing here is fitted; vdnnsim/costs/ops.py fits the file this writes. The host's chains: host.py
(NOTE [host mixes]).
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from .host import HOST_CHAINS, MIX_FAMILIES, host_chains, host_mixes  # noqa: F401
from .kernels import _Clock, _peak_beyond, _weights
from .record import _Ops
from ..model.workload import DTYPES
from ..profile.assemble import software

FORMAT = "vdnnsim-op-calibration"
VERSION = 1
DIMS = [256, 384, 512, 640, 768, 1024, 1280, 1536, 2048, 2304, 2560, 3072, 4096, 5120,
        6144, 8192, 11008, 16384]
VOCABS = [30522, 32000, 50257, 51200, 128256, 151936, 262144]
UNARY = ["gelu", "gelu_tanh", "silu", "tanh", "neg", "rsqrt", "pow", "exp", "sigmoid",
         "relu", "mul_scalar", "add_scalar"]
BINARY = ["add", "mul", "sub", "div", "mul_row", "add_row", "where"]
OTHER = ["to_bf16", "to_fp32", "native_dropout", "layer_norm", "mean", "softmax",
         "log_softmax", "nll_loss", "embedding", "cat", "clone"]
CLASSES = ("all", "transformer", "cnn", "norms", "video")
# CNN stages: (feature map side, channel widths) as CNN grids draw them (calibrate.py)
# Grid 1 (the shipped CNN files': a file without "grid" is of grid 1); grid 2 adds 224 (VGG's
# and U-Net's first stage) and 112 x 128 (VGG's second), where grid 1 had 224 only for
# stems (docs/gpu.md, "Evidence behind the GPU side")
_STAGES_1 = [(112, [16, 32, 64]), (56, [24, 48, 64, 96, 128, 256]),
             (28, [40, 64, 128, 192, 256, 512]), (14, [80, 112, 160, 256, 384, 512, 1024]),
             (7, [160, 320, 512, 960, 1280, 2048])]
STAGES_CNN = {1: _STAGES_1, 2: [(224, [32, 64]), (112, [16, 32, 64, 128])] + _STAGES_1[1:]}
GRID = 2  # the CNN and norms grids' version a calibration now draws (recorded as "grid")
# video CNN stages: (frames, side, channel widths), 112- and 224-pixel clips of 8-32 frames
STAGES_VIDEO = [(16, 56, [24, 45, 64, 96, 144]), (8, 56, [64, 192]),
                (8, 28, [128, 192, 230, 256, 288, 480]), (4, 14, [256, 460, 480, 512, 832]),
                (2, 7, [512, 832, 921, 1024]), (32, 28, [64, 128])]
CNN_STREAMING = ["batch_norm", "group_norm", "max_pool", "avg_pool", "adaptive_avg_pool",
                 "pad", "hardtanh", "relu4d"]


def _rows(rng: random.Random, lo: int = 8, hi: int = 17) -> int:
    return int(2 ** rng.uniform(lo, hi))


def op_cases(rng: random.Random, n_each: int, dtype: str) -> list[dict[str, Any]]:
    """The grid: GEMMs, attention, and each streaming op ``n_each`` times."""
    e = 4 if dtype == "fp32" else 2
    out: list[dict[str, Any]] = []
    while sum(c["op"] in ("mm", "addmm") for c in out) < 8 * n_each:
        m = _rows(rng)
        k = rng.choice(DIMS)
        n = rng.choice(VOCABS) if rng.random() < 0.12 else rng.choice(DIMS)
        if 2 * m * n * k <= (1.5e12 if dtype == "fp32" else 2e13) and m * n * e <= 2**32:
            out.append(dict(op=rng.choice(["mm", "addmm"]), m=m, n=n, k=k))
    while sum(c["op"] == "bmm" for c in out) < 2 * n_each:
        b, m, n, k = rng.choice([8, 32, 96, 192, 384, 768]), *(rng.choice(
            [64, 128, 256, 512, 1024, 2048]) for _ in range(2)), rng.choice([32, 64, 128, 256])
        if b * m * n * e <= 2**31:
            out.append(dict(op="bmm", b=b, m=m, n=n, k=k))
    kernels = ["efficient", "efficient_mask"] + (["flash"] if dtype != "fp32" else [])
    for kern in kernels:
        got = 0
        while got < 3 * n_each:
            B, H = rng.choice([1, 2, 4, 8, 16, 32, 64]), rng.choice([4, 6, 8, 12, 16, 32])
            S, D = rng.choice([128, 196, 256, 512, 1024, 2048]), rng.choice([64, 80, 96, 128, 256])
            if kern == "flash" and D > 256 or B * H * S * S * e > 2**31 \
                    or 4 * B * H * S * S * D > 4e12:
                continue
            out.append(dict(op="sdpa", kernel=kern, B=B, H=H, S=S, D=D,
                            causal=kern != "efficient_mask" and rng.random() < 0.5))
            got += 1
    for op in UNARY + BINARY + OTHER:
        for _ in range(n_each):
            rows = _rows(rng)
            cols = rng.choice(VOCABS) if op in ("log_softmax", "nll_loss") else \
                rng.choice([128, 196, 256, 512, 1024, 2048]) if op == "softmax" else \
                rng.choice(DIMS)
            while rows * cols * 4 > 2**31 and rows > 64:
                rows //= 2
            out.append(dict(op=op, rows=rows, cols=cols))
    return out


def cnn_cases(rng: random.Random, n_each: int, dtype: str, grid: int = GRID
              ) -> list[dict[str, Any]]:
    """The CNN grid: ``10 n_each`` dense and ``4 n_each`` depthwise
    convolutions in each memory format, each 4-D streaming op ``n_each`` times."""
    e = 4 if dtype == "fp32" else 2
    out: list[dict[str, Any]] = []
    for cl in (False, True):
        dense = dw = 0
        while dense < 10 * n_each or dw < 4 * n_each:
            b = rng.choice([8, 16, 32, 64, 128, 256])
            if rng.random() < 0.08:  # a stem: the image itself
                c, h, g = 3, 224, 1
                k, st = rng.choice([(3, 2), (7, 2), (4, 4), (3, 1)])
                kk = rng.choice([16, 24, 32, 64, 96])
            else:
                h, chans = rng.choice(STAGES_CNN[grid])
                c = rng.choice(chans)
                st = 2 if rng.random() < 0.15 else 1
                if dw < 4 * n_each and rng.random() < 0.35:
                    g, kk, k = c, c, rng.choice([3, 3, 5, 7])
                else:
                    k = rng.choice([1, 1, 1, 3, 3, 5])
                    kk = max(8, int(c * rng.choice([0.25, 0.5, 1, 1, 2, 4, 6])))
                    g = 1
                    if rng.random() < 0.15 and k == 3:  # grouped (ResNeXt, RegNet)
                        gw = rng.choice([8, 16, 32, 64])
                        g, kk = (c // gw, c) if c % gw == 0 and c > gw else (1, kk)
            depthwise = g > 1 and g == c
            if (depthwise and dw >= 4 * n_each) or (not depthwise and dense >= 10 * n_each):
                continue
            ho = (h + 2 * (k // 2) - k) // st + 1
            if ho < 1 or max(b * c * h * h, b * kk * ho * ho) * e > 2**31 \
                    or 2 * b * kk * ho * ho * (c // g) * k * k > 4e12:
                continue
            out.append(dict(op="conv", batch=b, c=c, h=h, k_out=kk, kh=k, stride=st,
                            groups=g, cl=cl))
            dw, dense = dw + depthwise, dense + (not depthwise)
    return out + _feature_map_cases(rng, CNN_STREAMING, n_each, grid)


def video_cases(rng: random.Random, n_each: int, dtype: str) -> list[dict[str, Any]]:
    """The video grid: ``10 n_each`` 3-D convolutions (NCDHW) as video CNNs have them: full
    3 x 3 x 3 and 1 x 1 x 1, (2+1)-D's 1 x 3 x 3 and 3 x 1 x 1, strided, a stem on the clip."""
    e = 4 if dtype == "fp32" else 2
    out: list[dict[str, Any]] = []
    while len(out) < 10 * n_each:
        b = rng.choice([2, 4, 8, 16, 32, 64])
        if rng.random() < 0.08:  # a stem: the clip itself
            t, h, c = rng.choice([8, 16, 32]), rng.choice([112, 224]), 3
            kt, k, (st, ss) = rng.choice([(3, 7, (1, 2)), (1, 7, (1, 2)), (3, 3, (1, 1))])
            kk = rng.choice([45, 64])
        else:
            t, h, chans = rng.choice(STAGES_VIDEO)
            c = rng.choice(chans)
            kt, k = rng.choice([(3, 3), (3, 3), (1, 1), (1, 3), (3, 1), (1, 1)])
            st = ss = 2 if rng.random() < 0.15 else 1
            kk = max(8, int(c * rng.choice([0.25, 0.5, 1, 1, 2, 4])))
        to, ho = (t + 2 * (kt // 2) - kt) // st + 1, (h + 2 * (k // 2) - k) // ss + 1
        if to < 1 or ho < 1 or max(b * c * t * h * h, b * kk * to * ho * ho) * e > 2**31 \
                or 2 * b * kk * to * ho * ho * c * kt * k * k > 4e12:
            continue
        out.append(dict(op="conv3d", batch=b, c=c, t=t, h=h, k_out=kk, kt=kt, kh=k,
                        st=st, stride=ss))
    return out


def _feature_map_cases(rng: random.Random, ops: list[str], n: int, grid: int = GRID
                       ) -> list[dict[str, Any]]:
    """Each op of ``ops`` ``n`` times on a feature map of a CNN stage (at most 2 GiB)."""
    out = []
    for op in ops:
        for _ in range(n):
            h, chans = rng.choice(STAGES_CNN[grid])
            c, b = rng.choice(chans), rng.choice([8, 16, 32, 64, 128, 256])
            while b * c * h * h * 4 > 2**31 and b > 1:
                b //= 2
            out.append(dict(op=op, batch=b, c=c, h=h))
    return out


def norm_cases(rng: random.Random, n_each: int, dtype: str, grid: int = GRID
               ) -> list[dict[str, Any]]:
    """The norms grid: batch and group norm ``5 n_each`` times each,
    feature maps of CNN stages."""
    return _feature_map_cases(rng, ["batch_norm", "group_norm"], 5 * n_each, grid)


def _cnn_passes(case: dict[str, Any], rand: Callable[..., torch.Tensor],
                fwd_bwd: Callable[..., dict[str, Callable]]) -> dict[str, Callable]:
    """The forward and backward calls of a CNN case."""
    op, b, c, h = case["op"], case["batch"], case["c"], case["h"]
    if op == "conv":
        k, g = case["kh"], case["groups"]
        fmt = torch.channels_last if case["cl"] else torch.contiguous_format
        x = rand(b, c, h, h).detach().contiguous(memory_format=fmt).requires_grad_(c > 3)
        w = rand(case["k_out"], c // g, k, k).detach().contiguous(memory_format=fmt) \
            .requires_grad_()
        return fwd_bwd(lambda x_, w_: F.conv2d(x_, w_, None, case["stride"], k // 2, 1, g),
                       x, w)
    x = rand(b, c, h, h)
    if op == "batch_norm":
        bn = nn.BatchNorm2d(c).to(x.device, x.dtype)
        return fwd_bwd(lambda t: bn(t), x)
    if op == "group_norm":
        w, bias = rand(c), rand(c)
        grp = 32 if c % 32 == 0 else 8 if c % 8 == 0 else 1
        return fwd_bwd(lambda t, w_, b_: F.group_norm(t, grp, w_, b_), x, w, bias)
    if op == "max_pool":
        return fwd_bwd(lambda t: F.max_pool2d(t, 3, 2, 1), x)
    if op == "avg_pool":
        return fwd_bwd(lambda t: F.avg_pool2d(t, 2), x)
    if op == "adaptive_avg_pool":
        return fwd_bwd(lambda t: F.adaptive_avg_pool2d(t, 1), x)
    if op == "pad":  # TensorFlow's "SAME" padding of a strided layer
        return fwd_bwd(lambda t: F.pad(t, (0, 1, 0, 1)), x)
    if op == "hardtanh":
        return fwd_bwd(lambda t: F.hardtanh(t, 0.0, 6.0), x)
    return fwd_bwd(torch.relu, x)  # relu4d


def _passes(case: dict[str, Any], dev: torch.device, dt: torch.dtype
            ) -> dict[str, Callable[[], Any]]:
    """The forward and backward calls of one case."""
    op = case["op"]
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape: int, grad: bool = True, dtype: torch.dtype = dt) -> torch.Tensor:
        return torch.randn(*shape, device=dev, dtype=dtype, generator=g).requires_grad_(grad)

    def fwd_bwd(fn: Callable[..., torch.Tensor], *xs: torch.Tensor) -> dict[str, Callable]:
        y = fn(*xs)
        y = y[0] if isinstance(y, tuple) else y
        gy = torch.randn_like(y)
        wrt = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
        calls: dict[str, Callable] = {"fwd": lambda: fn(*xs)}
        if wrt and y.grad_fn is not None:
            calls["bwd"] = lambda: torch.autograd.grad(y, wrt, gy, retain_graph=True)
        return calls

    if op == "conv3d":
        kt, k = case["kt"], case["kh"]
        x = rand(case["batch"], case["c"], case["t"], case["h"], case["h"]) \
            .detach().requires_grad_(case["c"] > 3)
        w = rand(case["k_out"], case["c"], kt, k, k)
        return fwd_bwd(lambda x_, w_: F.conv3d(x_, w_, None, (case["st"], case["stride"],
                                                              case["stride"]),
                                               (kt // 2, k // 2, k // 2)), x, w)
    if op == "conv" or op in CNN_STREAMING:
        return _cnn_passes(case, rand, fwd_bwd)
    if op in ("mm", "addmm"):
        x, w = rand(case["m"], case["k"]), rand(case["n"], case["k"])
        b = rand(case["n"]) if op == "addmm" else None
        return fwd_bwd(lambda x_, w_: F.linear(x_, w_, b), x, w)
    if op == "bmm":
        return fwd_bwd(torch.bmm, rand(case["b"], case["m"], case["k"]),
                       rand(case["b"], case["k"], case["n"]))
    if op == "sdpa":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        B, H, S, D = case["B"], case["H"], case["S"], case["D"]
        q, k, v = (rand(B, H, S, D) for _ in range(3))
        mask = rand(B, 1, S, S, grad=False) if case["kernel"] == "efficient_mask" else None
        backend = SDPBackend.FLASH_ATTENTION if case["kernel"] == "flash" \
            else SDPBackend.EFFICIENT_ATTENTION

        def attn(q_, k_, v_):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q_, k_, v_, attn_mask=mask,
                                                      is_causal=case["causal"])
        return fwd_bwd(attn, q, k, v)
    r, c = case["rows"], case["cols"]
    x = rand(r, c)
    unary: dict[str, Callable] = {
        "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "silu": F.silu, "tanh": torch.tanh, "neg": torch.neg,
        "pow": lambda t: t.pow(2), "exp": torch.exp, "sigmoid": torch.sigmoid,
        "relu": torch.relu, "mul_scalar": lambda t: t * 0.5, "add_scalar": lambda t: t + 1.0}
    if op == "rsqrt":  # on positive values, as RMS norm takes it
        xp = (x.detach().abs() + 1).requires_grad_()
        return fwd_bwd(torch.rsqrt, xp)
    if op in unary:
        return fwd_bwd(unary[op], x)
    if op in ("add", "mul", "sub", "div"):
        y = rand(r, c)
        if op == "div":
            y = (y.detach().abs() + 1).requires_grad_()
        return fwd_bwd(getattr(torch, op), x, y)
    if op in ("mul_row", "add_row"):  # a norm's weight, a layer scale: broadcast over rows
        return fwd_bwd(getattr(torch, op[:3]), x, rand(c))
    if op == "where":
        cond = torch.rand(r, c, device=dev, generator=g) > 0.5
        return fwd_bwd(lambda a, b_: torch.where(cond, a, b_), x, rand(r, c))
    if op == "to_bf16":
        xf = rand(r, c, dtype=torch.float32)
        return fwd_bwd(lambda t: t.to(torch.bfloat16), xf)
    if op == "to_fp32":
        xb = rand(r, c, dtype=torch.bfloat16)
        return fwd_bwd(lambda t: t.to(torch.float32), xb)
    if op == "native_dropout":
        return fwd_bwd(lambda t: F.dropout(t, 0.1, training=True), x)
    if op == "layer_norm":
        w, b = rand(c), rand(c)
        return fwd_bwd(lambda t, w_, b_: F.layer_norm(t, (c,), w_, b_), x, w, b)
    if op == "mean":
        return fwd_bwd(lambda t: t.mean(-1, keepdim=True), x)
    if op == "softmax":
        return fwd_bwd(lambda t: torch.softmax(t, -1), x)
    if op == "log_softmax":  # the loss's, in fp32 under autocast too
        return fwd_bwd(lambda t: torch.log_softmax(t, -1), rand(r, c, dtype=torch.float32))
    if op == "nll_loss":
        lp = torch.log_softmax(x.detach().float(), -1).requires_grad_()
        tgt = torch.randint(0, c, (r,), device=dev, generator=g)
        return fwd_bwd(lambda t: F.nll_loss(t, tgt), lp)
    if op == "embedding":
        idx = torch.randint(0, max(c, 1000), (r,), device=dev, generator=g)
        table = rand(max(c, 1000), rng_dim(c))
        return fwd_bwd(lambda w: F.embedding(idx, w), table)
    if op == "cat":
        return fwd_bwd(lambda a, b_: torch.cat([a, b_], -1), x, rand(r, c))
    if op == "clone":  # a transposed view made contiguous (attention's heads)
        return fwd_bwd(lambda t: t.view(r, -1, 64 if c % 64 == 0 else c).transpose(0, 1)
                       .contiguous(), x)
    raise ValueError(f"unknown op calibration case {op!r}")


def rng_dim(vocab: int) -> int:
    """An embedding's width for a table of ``vocab`` rows (the grid draws the rows)."""
    return [512, 768, 1024, 2048][vocab % 4]


def _record_ops(fn: Callable[[], Any]) -> list[dict[str, Any]]:
    with _Ops() as mode:
        fn()
    return mode.ops


def host_only(progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``vdnnsim calibrate --ops --host-only``: the host chains alone, in fp32, bf16 and fp32
    under bf16 autocast (a second process on a warm machine)."""
    dev = torch.device("cuda", torch.cuda.current_device())
    variants = ((torch.float32, None), (torch.bfloat16, None), (torch.float32, torch.bfloat16))
    chains = [c for dt, ac in variants for c in host_chains(dev, dt, ac)]
    mixes = [m for dt, ac in variants for m in host_mixes(dev, dt, ac)]
    props = torch.cuda.get_device_properties(dev)
    return {"format": FORMAT, "version": VERSION, "dtype": "host", "host_only": True,
            "gpu": {"name": props.name, "sm_count": props.multi_processor_count,
                    "capability": f"{props.major}.{props.minor}"},
            "software": software(), "made": time.strftime("%Y-%m-%d"), "records": [],
            "host_chains": chains, "host_mixes": mixes, "skipped": []}


def step_cases(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        out.append(dict(op=("adamw_step", "sgd_step")[i % 2],
                        tensors=rng.choice([20, 60, 160, 320]), params=int(10 ** rng.uniform(6, 9))))
    return out


def _step(case: dict[str, Any], dev: torch.device) -> Callable[[], Any]:
    sizes = [max(1, int(case["params"] * w)) for w in _weights(case["tensors"])]
    ps = [torch.zeros(s, device=dev, requires_grad=True) for s in sizes]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(ps, lr=1e-3) if case["op"] == "adamw_step" \
        else torch.optim.SGD(ps, lr=1e-3)
    return opt.step


def calibrate_ops(dtype: str = "bf16", scale: float = 1.0, seed: int = 0,
                  progress: Callable[[str], None] | None = None, dev: torch.device | None = None,
                  clock: Any = None, classes: str = "all") -> dict[str, Any]:
    """Run every case of ``classes`` (all, transformer or cnn); returns the op calibration
    file's content. ``dev`` and ``clock``: a CUDA GPU and its
    ``_Clock`` unless given (the tests run the harness on the CPU with a stand-in clock)."""
    dev = dev or torch.device("cuda", torch.cuda.current_device())
    dt = DTYPES[dtype]
    clock = clock or _Clock(dev)
    gpu_name, sms, cap = "cpu", 0, ""
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        gpu_name, sms, cap = props.name, props.multi_processor_count, \
            f"{props.major}.{props.minor}"
    todo = _todo(classes, scale, seed, dtype)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as vdnnsim measure runs convolutions
    records, skipped = [], []
    t_start = time.time()
    for i, case in enumerate(todo):
        try:
            if case["op"].endswith("_step"):
                fn = _step(case, dev)
                gpu, host = clock.time_ms(fn)
                records.append({**case, "pass": "step", "time_ns": round(gpu * 1e6, 1),
                                "host_ns": round(host * 1e6, 1)})
                continue
            calls = _passes(case, dev, dt)
            ops = _record_ops(calls["fwd"])
            for name, fn in calls.items():
                gpu, host = clock.time_ms(fn)
                ws = {"workspace_bytes": _peak_beyond(fn, dev)} \
                    if case["op"] in ("conv", "conv3d") and dev.type == "cuda" else {}
                records.append({**case, "pass": name, "ops": ops, **ws,
                                "time_ns": round(gpu * 1e6, 1), "host_ns": round(host * 1e6, 1)})
            del calls
        except RuntimeError as exc:  # out of memory, or a kernel refusing the shape: logged
            skipped.append({**case, "error": str(exc).splitlines()[0][:200]})
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        if progress and (i % 50 == 0 or i == len(todo) - 1):
            progress(f"{i + 1}/{len(todo)} cases, {time.time() - t_start:.0f} s")
    chains = host_chains(dev, dt)
    return {
        "format": FORMAT, "version": VERSION, "dtype": dtype, "seed": seed, "scale": scale,
        "grid": GRID,
        "gpu": {"name": gpu_name, "sm_count": sms, "capability": cap},
        "software": software(),
        "classes": classes,
        "numerics": {"float32_matmul_precision": torch.get_float32_matmul_precision(),
                     "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                     "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                     "cudnn_benchmark": torch.backends.cudnn.benchmark},
        "made": time.strftime("%Y-%m-%d"),
        "records": records, "host_chains": chains, "skipped": skipped,
        "minutes": round((time.time() - t_start) / 60, 2),
    }


def _todo(classes: str, scale: float, seed: int, dtype: str, grid: int = GRID
          ) -> list[dict[str, Any]]:
    """The cases of a run: the transformer grid (and the optimizer steps, fp32) of ``seed``,
    the CNN grid of ``seed + 2``, the norms grid of ``seed + 3``, those two of version
    ``grid`` (STAGES_CNN)."""
    if classes not in CLASSES:
        raise ValueError(f"classes must be one of {', '.join(CLASSES)}, got {classes!r}")
    n_each = max(1, int(round(10 * scale)))
    todo: list[dict[str, Any]] = []
    if classes in ("all", "transformer"):
        todo = op_cases(random.Random(seed), n_each, dtype)
        if dtype == "fp32":
            todo += step_cases(random.Random(seed + 1), max(2, int(16 * scale)))
    if classes in ("all", "cnn"):
        todo += cnn_cases(random.Random(seed + 2), n_each, dtype, grid)
    if classes in ("all", "norms"):
        todo += norm_cases(random.Random(seed + 3), n_each, dtype, grid)
    if classes in ("all", "video"):
        todo += video_cases(random.Random(seed + 4), n_each, dtype)
    return todo


def cases_count(scale: float = 1.0, dtype: str = "bf16", classes: str = "all") -> int:
    """How many cases a run has (for a progress line and the tests)."""
    return len(_todo(classes, scale, 0, dtype))

