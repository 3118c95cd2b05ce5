"""Analytic cost model: synthesizes a Trace (times, workspaces, algorithm options) from a
network's shapes and a GPU preset. Its assumptions are listed in docs/cost-model.md.

NOTE [cost model]
Each kernel takes ``launch + max(flops / (peak * eff), bytes / (dram_bw * MEM_EFF))``: a
roofline with one efficiency per algorithm class. Algorithms that stage data through a
workspace (im2col for GEMM, the transforms of FFT) run those stages as separate,
memory-bound kernels, so their workspace traffic adds to the time instead of
overlapping. The constants below are architecture-wide assumptions, the same for every
network and batch size; none is fitted to a paper result. A preset may replace one class's
efficiency with a value its card's own published timings calibrate (``algo_efficiency``:
the Titan X's implicit GEMM, in vdnnsim/paper/cudnn4.py); ``eff_of`` reads it.

Conv layers get cuDNN-like options: memory-optimal implicit GEMM (no workspace), implicit
GEMM with precomputed indices (a few KB), explicit GEMM (an im2col buffer of the whole
batch), FFT over 32x32 tiles (transformed input tiles and filters), whole-image FFT where
cuDNN allows it, and Winograd on GPUs whose cuDNN has it. Backward = backward-data (only
if the layer's input needs a gradient) + backward-filter, each costed like the forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..hardware import GPU
from ..network.shapes import DTYPE_BYTES, LayerInfo, NetworkInfo
from ..trace.model import Algo, Layer, Source, Tensor, Trace

COST_MODEL = "analytic-v1"

MEM_EFF = 0.70  # share of DRAM bandwidth a streaming kernel reaches
EFF = {  # share of peak FLOP/s each algorithm class reaches on large problems
    "implicit_gemm": 0.30,
    "implicit_precomp_gemm": 0.50,
    "gemm": 0.55,
    "fft": 0.35,  # the batched complex pointwise products
    "fft_tiling": 0.35,
    "winograd": 0.45,
    "fc": 0.75,
    "elementwise": 0.25,
}
FFT_TILE = 32
FFT_MAX_PADDED = 256  # cuDNN: whole-image FFT needs H + 2*pad <= 256
COMPLEX_BYTES = 8  # fp32 complex, whatever the storage dtype


def eff_of(gpu: GPU, algo_class: str) -> float:
    """The share of peak FLOP/s ``algo_class`` reaches on ``gpu``: the preset's calibrated
    ``algo_efficiency`` where it names the class, else the architecture-wide EFF."""
    return gpu.algo_efficiency.get(algo_class, EFF[algo_class])


def _t(gpu: GPU, flops: float, nbytes: float, eff: float, dtype: str,
       staged_bytes: float = 0) -> int:
    bw = gpu.mem_bw_bytes_per_s * MEM_EFF
    compute = flops / (gpu.flops(dtype) * eff)
    seconds = max(compute, nbytes / bw) + staged_bytes / bw
    return gpu.launch_overhead_ns + int(math.ceil(seconds * 1e9))


@dataclass(frozen=True)
class ConvGeometry:
    """A convolution over a whole batch: what the algorithm options depend on."""

    batch: int
    c: int
    h: int
    w: int
    k_out: int
    ho: int
    wo: int
    kh: int
    kw: int
    sh: int = 1
    sw: int = 1
    ph: int = 0
    pw: int = 0
    groups: int = 1
    params: int = 0
    flops: int = 0  # whole batch, forward
    needs_input_grad: bool = True


def conv_algos(info: LayerInfo, batch: int, gpu: GPU, dtype: str,
               seen: dict[ConvGeometry, tuple[Algo, ...]] | None = None) -> tuple[Algo, ...]:
    """``seen``: the algorithms of geometries already timed (a network repeats its shapes:
    ResNet's blocks, a deep chain), so each distinct convolution is costed once."""
    d = info.d
    c, h, w = info.in_shapes[0]
    k_out, ho, wo = info.out_shape
    k = d.kernel or 1
    geo = ConvGeometry(batch, c, h, w, k_out, ho, wo, k, k, d.stride, d.stride, d.pad, d.pad,
                       d.groups, info.params, batch * info.flops, info.needs_input_grad)
    if seen is None:
        return conv_algos_for(geo, gpu, dtype)
    algos = seen.get(geo)
    if algos is None:
        algos = seen[geo] = conv_algos_for(geo, gpu, dtype)
    return algos


def conv_algos_for(geo: ConvGeometry, gpu: GPU, dtype: str) -> tuple[Algo, ...]:
    e = DTYPE_BYTES[dtype]
    batch, c, g, k_out = geo.batch, geo.c, geo.groups, geo.k_out
    x_b, y_b = batch * c * geo.h * geo.w * e, batch * k_out * geo.ho * geo.wo * e
    w_b = geo.params * e
    flops = geo.flops
    passes = 1 + (1 if geo.needs_input_grad else 0)  # backward-data only when needed
    unit_stride = geo.sh == 1 and geo.sw == 1

    def algo(name: str, eff: float, fwd_ws: int, extra_flops_ratio: float = 1.0,
             ws_traffic: int = 0) -> Algo:
        one = _t(gpu, flops * extra_flops_ratio, x_b + y_b + w_b, eff, dtype, 2 * ws_traffic)
        return Algo(name, one, passes * one, fwd_ws, fwd_ws)

    kk = geo.kh * geo.kw
    out = [algo("implicit_gemm", eff_of(gpu, "implicit_gemm"), 0),
           algo("implicit_precomp_gemm", eff_of(gpu, "implicit_precomp_gemm"),
                4 * kk * (c // g) * 2)]
    cols = 0 if (kk == 1 and unit_stride) else batch * (c // g) * kk * geo.ho * geo.wo * e
    out.append(algo("gemm", eff_of(gpu, "gemm"), cols, ws_traffic=cols))
    if unit_stride and kk > 1 and g == 1:
        t = FFT_TILE
        step_h, step_w = t - geo.kh + 1, t - geo.kw + 1
        if step_h > 0 and step_w > 0:
            tiles = math.ceil(geo.ho / step_h) * math.ceil(geo.wo / step_w)
            spec = t * (t // 2 + 1)
            ws = (batch * c * tiles + c * k_out) * spec * COMPLEX_BYTES
            ratio = 8 * c * k_out * tiles * spec * batch / max(flops, 1)
            out.append(algo("fft_tiling", eff_of(gpu, "fft_tiling"), ws, ratio, ws))
        hp = max(geo.h + 2 * geo.ph, geo.w + 2 * geo.pw)
        if hp <= FFT_MAX_PADDED:
            n = _fft_size(hp)
            spec = n * (n // 2 + 1)
            ws = (batch * c + batch * k_out + c * k_out) * spec * COMPLEX_BYTES
            ratio = 8 * c * k_out * spec * batch / max(flops, 1)
            out.append(algo("fft", eff_of(gpu, "fft"), ws, ratio, ws))
    if gpu.winograd and geo.kh == 3 and geo.kw == 3 and unit_stride and g == 1:
        out.append(algo("winograd", eff_of(gpu, "winograd"), 0, 1 / 2.25))
    return tuple(out)


def _fft_size(n: int) -> int:
    """Smallest size >= n whose only prime factors are 2, 3, 5, 7 (cuFFT's fast sizes)."""
    while True:
        m = n
        for p in (2, 3, 5, 7):
            while m % p == 0:
                m //= p
        if m == 1:
            return n
        n += 1


def _simple_algo(info: LayerInfo, batch: int, gpu: GPU, dtype: str) -> Algo:
    e = DTYPE_BYTES[dtype]
    if info.alias:  # a view: no kernel runs
        return Algo("default", 0, 0)
    in_b, out_b = batch * info.in_elems * e, batch * info.out_elems * e
    flops = batch * info.flops
    if info.type == "fc":
        w_b = info.params * e
        fwd = _t(gpu, flops, in_b + out_b + w_b, eff_of(gpu, "fc"), dtype)
        passes = 1 + (1 if info.needs_input_grad else 0)
        return Algo("default", fwd, passes * fwd)
    fwd = _t(gpu, flops, in_b + out_b, eff_of(gpu, "elementwise"), dtype)
    # backward reads dY and what was saved, writes dX
    bwd = _t(gpu, flops, 2 * out_b + in_b, eff_of(gpu, "elementwise"), dtype) \
        if (info.needs_input_grad or info.params) else 0
    return Algo("default", fwd, bwd)


def synthesize(net: NetworkInfo, batch_size: int, gpu: GPU, dtype: str = "fp32") -> Trace:
    """A Trace of ``net`` at ``batch_size`` timed for ``gpu``."""
    e = DTYPE_BYTES[dtype]
    tensors: dict[str, Tensor] = {
        "data": Tensor("data", batch_size * math.prod(net.input_shape) * e, "input", False,
                       None, (batch_size, *net.input_shape))}
    layers: list[Layer] = []
    seen: dict[ConvGeometry, tuple[Algo, ...]] = {}
    simple: dict[tuple, tuple[Algo, ...]] = {}
    for info in net.layers:
        out_id = info.name
        x = info.inputs
        size = batch_size * info.out_elems * e
        alias = x[0] if (info.inplace or info.alias) else None
        tensors[out_id] = Tensor(out_id, size, "activation", info.needs_input_grad or
                                 info.params > 0, alias, (batch_size, *info.out_shape))
        outputs = [out_id]
        t = info.type
        if t in ("conv", "fc", "threshold"):
            saved = [x[0]]
        elif t in ("relu", "softmax"):
            saved = [out_id]
        elif t in ("maxpool", "avgpool", "lrn"):
            saved = [x[0], out_id]
        elif t == "bn":
            stats = f"{out_id}:stats"
            tensors[stats] = Tensor(stats, 2 * info.out_shape[0] * 4, "extra", False)
            outputs.append(stats)
            saved = [x[0], stats]
        elif t == "dropout":
            mask = f"{out_id}:mask"
            tensors[mask] = Tensor(mask, size, "extra", False)
            outputs.append(mask)
            saved = [mask]
        else:  # concat, add, flatten: backward needs no forward tensor
            saved = []
        if t == "conv":
            algos = conv_algos(info, batch_size, gpu, dtype, seen)
        else:  # same inputs, same times: a deep chain costs each kind of layer once
            key = (t, info.alias, info.in_elems, info.out_elems, info.flops, info.params,
                   info.needs_input_grad)
            algos = simple.get(key)
            if algos is None:
                algos = simple[key] = (_simple_algo(info, batch_size, gpu, dtype),)
        attrs = {"out_shape": list(info.out_shape), "flops": batch_size * info.flops,
                 "params": info.params}
        if info.inplace:
            attrs["inplace"] = True
        layers.append(Layer(info.name, t, tuple(x), tuple(outputs), tuple(saved), algos,
                            info.params * e, attrs))
    return Trace(net.name, batch_size, dtype, tensors, tuple(layers),
                 Source("synthesized", "torch7", gpu.name, COST_MODEL))
