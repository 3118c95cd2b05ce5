"""``vdnnsim calibrate``: microbenchmarks of the ops PyTorch training runs, on a CUDA GPU.

NOTE [calibration]
Each case is one op as PyTorch's autograd runs it in training (a module's forward, and
``torch.autograd.grad`` for each backward pass), on a shape drawn from a seeded grid that
looks like CNN layers but is none of them. A conv is timed in three passes: forward,
backward-data (the gradient of the input only) and backward-filter (of the weight only),
each under the algorithm ``cudnn.benchmark`` picks, with PyTorch's default numerics left as
they are (cuDNN convolutions may use TF32 on Ampere and later; matmuls do not unless
asked; both flags are recorded). A pass's time is the GPU's, not the host's: a sleep
kernel holds the stream while the host queues ``reps`` calls between two events, so the
kernels run back to back as they do in a GPU-bound step. A conv pass's workspace is the
peak allocated during one call beyond what it returns.

The launch cost is measured too: the GPU time of a one-element kernel queued back to
back, and the host's time to launch
one. Nothing here is fitted; vdnnsim/costs/kernel.py fits the kernel-time model to the file
this writes (docs/cost-model.md).
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..model.workload import DTYPES
from ..profile.assemble import software

FORMAT = "vdnnsim-calibration"
VERSION = 1
_STAGES = [  # (spatial size, channel choices) of the CNN stages the grid draws from
    (224, [16, 32, 64]), (112, [16, 24, 32, 48, 64, 96, 128]),
    (56, [24, 32, 48, 64, 96, 128, 192, 256]),
    (28, [32, 48, 64, 96, 128, 192, 256, 384, 512]),
    (14, [64, 96, 128, 192, 256, 384, 512, 768, 1024]),
    (7, [128, 192, 256, 384, 512, 768, 1024, 1280, 2048])]
_ACTS = {"relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU, "gelu": nn.GELU,
         "hardswish": nn.Hardswish, "sigmoid": nn.Sigmoid, "hardsigmoid": nn.Hardsigmoid}


def conv_cases(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while len(out) < n:
        if rng.random() < 0.08:  # a stem: the image itself
            b, c, h = rng.choice([16, 32, 64, 128]), 3, rng.choice([224, 227, 299])
            k, s = rng.choice([(3, 2), (7, 2), (11, 4), (3, 1)])
            kk = rng.choice([16, 24, 32, 64, 96])
            g = 1
        else:
            h, chans = rng.choice(_STAGES)
            b = rng.choice([16, 32, 64, 128, 256])
            c = rng.choice(chans)
            u = rng.random()
            if u < 0.2:  # depthwise
                g, kk = c, c
                k = rng.choice([3, 3, 5, 7])
            else:
                k = rng.choice([1, 1, 1, 3, 3, 5])
                kk = max(8, int(c * rng.choice([0.25, 0.5, 1, 1, 2, 4, 6])))
                g = 1
                if u > 0.85 and k == 3:  # grouped (ResNeXt, RegNet)
                    gw = rng.choice([8, 16, 32, 64])
                    if c % gw == 0:
                        g = c // gw
                        kk = c
            s = 2 if rng.random() < 0.15 else 1
        p = k // 2
        ho = (h + 2 * p - k) // s + 1
        if ho < 1:
            continue
        x_b, y_b = b * c * h * h * 4, b * kk * ho * ho * 4
        flops = 2 * b * kk * ho * ho * (c // g) * k * k
        if max(x_b, y_b) > 2**31 or flops > 4e12:
            continue
        out.append(dict(op="conv", batch=b, c=c, h=h, w=h, k_out=kk, kh=k, kw=k, sh=s, sw=s,
                        ph=p, pw=p, groups=g))
    return out


def linear_cases(rng: random.Random, n: int) -> list[dict[str, Any]]:
    dims = [128, 256, 512, 1000, 1024, 1280, 2048, 4096, 9216, 25088]
    return [dict(op="linear", batch=rng.choice([16, 32, 64, 128, 256, 512]),
                 fin=rng.choice(dims), fout=rng.choice(dims[:-2])) for _ in range(n)]


def elementwise_cases(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    ops = ["bn", "add", "mul_bcast", "maxpool3s2", "maxpool2s2", "avgpool2s2", "gap", "cat",
           "dropout", "bias", *_ACTS]
    for i in range(n):
        op = ops[i % len(ops)]
        h, chans = rng.choice(_STAGES)
        out.append(dict(op=op, batch=rng.choice([16, 32, 64, 128, 256]),
                        c=rng.choice(chans), h=h, w=h))
    return out


def loss_cases(rng: random.Random, n: int) -> list[dict[str, Any]]:
    return [dict(op="cross_entropy", batch=rng.choice([16, 32, 64, 128, 256, 512]),
                 classes=rng.choice([10, 100, 1000, 1000, 21843])) for _ in range(n)]


def step_cases(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):  # a model's parameters: many small tensors and a few large ones
        tensors = rng.choice([20, 60, 160, 320])
        total = int(10 ** rng.uniform(6, 8.3))
        out.append(dict(op="sgd_step", tensors=tensors, params=total))
    return out


def grouped_cases(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Grouped 3x3 convs as ResNeXt and RegNet have them: group widths 4-128 channels,
    strides 1 and 2 (the first grid drew only 11)."""
    out: list[dict[str, Any]] = []
    while len(out) < n:
        h, chans = rng.choice(_STAGES[1:])
        b = rng.choice([16, 32, 64, 128, 256])
        gw = rng.choice([4, 8, 16, 24, 32, 48, 64, 128])
        c = gw * rng.choice([2, 4, 8, 16, 32, 64])
        s = 2 if rng.random() < 0.2 else 1
        if c > 2 * max(chans) or b * c * h * h * 4 > 2**31:
            continue
        out.append(dict(op="conv", batch=b, c=c, h=h, w=h, k_out=c, kh=3, kw=3, sh=s, sw=s,
                        ph=1, pw=1, groups=c // gw))
    return out


def token_linear_cases(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Linear layers over many rows: ConvNeXt's pointwise MLPs (batch x pixels rows) and a
    transformer's tokens (batch x sequence); the first grid stopped at 512 rows."""
    dims = [96, 192, 384, 768, 1024, 1536, 2048, 3072, 4096]
    out: list[dict[str, Any]] = []
    while len(out) < n:
        rows = int(2 ** rng.uniform(11, 19))
        fin, fout = rng.choice(dims), rng.choice(dims)
        if rows * max(fin, fout) * 4 <= 2**31 and 2 * rows * fin * fout <= 4e11:
            out.append(dict(op="linear", batch=rows, fin=fin, fout=fout))
    return out


def norm_cases(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Layer norm over the last dimension: ConvNeXt's channels-last feature maps (c per
    pixel) and a transformer's tokens (``h`` = sequence, ``w`` = 1)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i % 2:
            h, chans = rng.choice(_STAGES[2:])
            out.append(dict(op="layer_norm", batch=rng.choice([16, 32, 64, 128]),
                            c=rng.choice(chans), h=h, w=h))
        else:
            out.append(dict(op="layer_norm", batch=rng.choice([1, 4, 8, 16, 32]),
                            c=rng.choice([384, 768, 1024, 2048, 4096]),
                            h=rng.choice([128, 256, 512, 1024, 2048]), w=1))
    return out


def cases(seed: int = 0, scale: float = 1.0) -> list[dict[str, Any]]:
    """The grid. The cases added later draw from a second stream, so the first ones stay
    what they were for a seed."""
    rng, more = random.Random(seed), random.Random(seed + 1)
    k = max(scale, 0.02)
    return (conv_cases(rng, int(320 * k)) + linear_cases(rng, int(60 * k))
            + elementwise_cases(rng, int(17 * 16 * k)) + loss_cases(rng, int(12 * k))
            + step_cases(rng, int(12 * k)) + grouped_cases(more, int(80 * k))
            + norm_cases(more, int(24 * k)) + token_linear_cases(more, int(40 * k)))


class _Clock:
    """GPU time of back-to-back calls: a sleep kernel holds the stream while the host
    queues them."""

    def __init__(self, dev: torch.device):
        self.dev = dev
        torch.cuda._sleep(1000)
        torch.cuda.synchronize(dev)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(2_000_000)
        b.record()
        torch.cuda.synchronize(dev)
        self.cycles_per_ms = 2_000_000 / max(a.elapsed_time(b), 1e-3)

    def time_ms(self, fn: Callable[[], Any], budget_ms: float = 10.0) -> tuple[float, float]:
        """(GPU ms per call, host ms per call)."""
        fn()  # warm-up: cudnn.benchmark's trials, the allocator's blocks
        torch.cuda.synchronize(self.dev)
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize(self.dev)
        one = (time.perf_counter() - t0) * 1e3
        reps = int(min(200, max(3, budget_ms / max(one, 1e-3))))
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        host = (time.perf_counter() - t0) * 1e3  # (it may wait for the GPU: an upper bound)
        torch.cuda.synchronize(self.dev)
        samples = []
        for _ in range(3):
            torch.cuda._sleep(int(min(host * 1.3 + 0.5, 200.0) * self.cycles_per_ms))
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                fn()
            b.record()
            torch.cuda.synchronize(self.dev)
            samples.append(a.elapsed_time(b) / reps)
        return statistics.median(samples), host / reps


def _peak_beyond(fn: Callable[[], Any], dev: torch.device) -> int:
    """Bytes allocated at the peak of one call beyond what the call returns."""
    torch.cuda.synchronize(dev)
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    r = fn()
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev)
    kept = torch.cuda.memory_allocated(dev)
    del r
    return max(0, peak - kept) if kept >= base else max(0, peak - base)


def _passes(case: dict[str, Any], dev: torch.device, dt: torch.dtype
            ) -> dict[str, Callable[[], Any]]:
    """What to time for one case: pass name -> a call."""
    op, b = case["op"], case.get("batch", 1)
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=dev, dtype=dt, generator=g).requires_grad_()

    def fwd_bwd(mod: Callable[..., torch.Tensor], *xs: torch.Tensor,
                params: tuple = ()) -> dict[str, Callable[[], Any]]:
        y = mod(*xs)
        gy = torch.randn_like(y)
        out = {"fwd": lambda: mod(*xs)}
        wrt = [x for x in xs if x.requires_grad] + list(params)
        if wrt and y.grad_fn is not None:
            out["bwd"] = lambda: torch.autograd.grad(y, wrt, gy, retain_graph=True)
        return out

    if op == "conv":
        m = nn.Conv2d(case["c"], case["k_out"], (case["kh"], case["kw"]),
                      (case["sh"], case["sw"]), (case["ph"], case["pw"]),
                      groups=case["groups"], bias=False).to(dev, dt)
        x = rand(b, case["c"], case["h"], case["w"])
        y = m(x)
        gy = torch.randn_like(y)
        return {"fwd": lambda: m(x),
                "bwd_data": lambda: torch.autograd.grad(y, [x], gy, retain_graph=True),
                "bwd_filter": lambda: torch.autograd.grad(y, [m.weight], gy,
                                                          retain_graph=True)}
    if op == "linear":
        m = nn.Linear(case["fin"], case["fout"]).to(dev, dt)
        x = rand(b, case["fin"])
        y = m(x)
        gy = torch.randn_like(y)
        return {"fwd": lambda: m(x),
                "bwd_data": lambda: torch.autograd.grad(y, [x], gy, retain_graph=True),
                "bwd_filter": lambda: torch.autograd.grad(y, [m.weight, m.bias], gy,
                                                          retain_graph=True)}
    if op == "cross_entropy":
        z = rand(b, case["classes"])
        t = torch.randint(0, case["classes"], (b,), device=dev, generator=g)
        return fwd_bwd(lambda z_: F.cross_entropy(z_, t), z)
    if op == "sgd_step":
        n, total = case["tensors"], case["params"]
        sizes = [max(1, int(total * w)) for w in _weights(n)]
        ps = [torch.zeros(s, device=dev, dtype=dt, requires_grad=True) for s in sizes]
        for p in ps:
            p.grad = torch.randn_like(p)
        opt = torch.optim.SGD(ps, lr=1e-3)
        return {"step": opt.step}
    c, h, w = case["c"], case["h"], case["w"]
    if op == "layer_norm":  # over the last dimension, as nn.LayerNorm and ConvNeXt's
        m = nn.LayerNorm(c).to(dev, dt)
        return fwd_bwd(m, rand(b, h, w, c), params=(m.weight, m.bias))
    x = rand(b, c, h, w)
    if op == "bn":
        m = nn.BatchNorm2d(c).to(dev, dt).train()
        return fwd_bwd(m, x, params=(m.weight, m.bias))
    if op in _ACTS:
        return fwd_bwd(_ACTS[op]().to(dev), x)
    if op == "add":
        return fwd_bwd(torch.add, x, rand(b, c, h, w))
    if op == "mul_bcast":  # squeeze-and-excitation's scale
        return fwd_bwd(torch.mul, x, rand(b, c, 1, 1))
    if op == "maxpool3s2":
        return fwd_bwd(nn.MaxPool2d(3, 2, 1), x)
    if op == "maxpool2s2":
        return fwd_bwd(nn.MaxPool2d(2, 2), x)
    if op == "avgpool2s2":
        return fwd_bwd(nn.AvgPool2d(2, 2), x)
    if op == "gap":
        return fwd_bwd(nn.AdaptiveAvgPool2d(1), x)
    if op == "cat":
        return fwd_bwd(lambda a, b_: torch.cat([a, b_], 1), x, rand(b, c, h, w))
    if op == "dropout":
        return fwd_bwd(nn.Dropout(0.5).train(), x)
    if op == "bias":  # a conv's bias: added after cuDNN's kernel; its gradient a reduction
        bias = rand(c)
        return fwd_bwd(lambda x_: x_ + bias.view(1, -1, 1, 1), x.detach(), params=(bias,))
    raise ValueError(f"unknown calibration op {op!r}")


def _weights(n: int) -> list[float]:
    """Shares of a model's parameters over ``n`` tensors: a few large, many small."""
    raw = [1.0 / (1 + i) ** 1.5 for i in range(n)]
    s = sum(raw)
    return [r / s for r in raw]


def launch_costs(dev: torch.device, clock: _Clock) -> dict[str, float]:
    x = torch.zeros(1, device=dev)
    gpu_ms, _ = clock.time_ms(lambda: x.add_(1.0), budget_ms=2.0)
    torch.cuda.synchronize(dev)
    n = 500
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1.0)
    host = (time.perf_counter() - t0) / n
    torch.cuda.synchronize(dev)
    return {"gpu_kernel_ns": gpu_ms * 1e6, "host_launch_ns": host * 1e9}


def calibrate(dtype: str = "fp32", scale: float = 1.0, seed: int = 0,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every case; returns the calibration file's content."""
    dev = torch.device("cuda", torch.cuda.current_device())
    dt = DTYPES[dtype]
    torch.backends.cudnn.benchmark = True
    props = torch.cuda.get_device_properties(dev)
    clock = _Clock(dev)
    records: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    todo = cases(seed, scale)
    t_start = time.time()
    for i, case in enumerate(todo):
        try:
            calls = _passes(case, dev, dt)
            for name, fn in calls.items():
                gpu, host = clock.time_ms(fn)
                rec = {**case, "pass": name, "time_ns": round(gpu * 1e6, 1),
                       "host_ns": round(host * 1e6, 1)}
                if case["op"] == "conv":
                    rec["workspace_bytes"] = _peak_beyond(fn, dev)
                records.append(rec)
            del calls
        except RuntimeError as exc:  # out of memory, or a shape cuDNN refuses: logged
            skipped.append({**case, "error": str(exc).splitlines()[0][:200]})
            if progress:
                progress(f"case {i} skipped ({skipped[-1]['error']}): {case}")
        torch.cuda.empty_cache()
        if progress and (i % 25 == 0 or i == len(todo) - 1):
            progress(f"{i + 1}/{len(todo)} cases, {time.time() - t_start:.0f} s")
    return {
        "format": FORMAT, "version": VERSION, "dtype": dtype, "seed": seed, "scale": scale,
        "gpu": {"name": props.name, "sm_count": props.multi_processor_count,
                "total_memory_bytes": props.total_memory,
                "capability": f"{props.major}.{props.minor}",
                "sleep_cycles_per_ms": round(clock.cycles_per_ms, 1)},
        "software": software(),
        "numerics": {"cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                     "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                     "cudnn_benchmark": True},
        "launch": launch_costs(dev, clock),
        "made": time.strftime("%Y-%m-%d"),
        "records": records,
        "skipped": skipped,
    }
