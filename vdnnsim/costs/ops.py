"""The op-level kernel model: a training step's time from its ATen ops, for any model the
op probe can run on the meta device (NOTE [op probe]), fitted to ``vdnnsim calibrate
--ops``'s microbenchmarks only.

NOTE [op model]
Every op of the probe's forward pass (NOTE [op features]) gets a forward time, a backward
time (where its output takes a gradient), and the host's cost of both:

- GEMMs (``mm``, ``addmm``, ``bmm``, ``baddbmm``): the roofline ``max(F / peak, bytes /
  bw)`` over the utilization ``sigmoid(beta . phi)`` (NOTE [kernel model]'s form), ``phi``
  the logs of ``b, m, n, k``, of the tiles per SM (128 x 128) and of the arithmetic
  intensity, and the last wave's occupancy; fitted per op, precision and pass (the backward
  is the pair of GEMMs of the two gradients, with a bias's reduction for ``addmm``,
  measured as one). Peaks: fp32 on CUDA cores (PyTorch's default matmul precision), bf16
  and fp16 on tensor cores.
- Attention (SDPA's flash, memory-efficient and cuDNN kernels): the same form over the
  attention's FLOPs (``4 B H S L D``, half where causal; the backward 2.5 times the
  forward's: it recomputes the scores), ``phi`` the logs of ``S, L, D`` and ``B H`` and
  causality; fitted per kernel (memory-efficient with a mask apart), precision and pass.
  The cuDNN kernel takes the flash fit.
- Every other op: ``t = a + s * bytes`` per ATen op, precision and pass (bytes: NOTE [op
  features]; an embedding's backward ``a + s * output + u * table``: it zeroes the whole
  table's gradient), least squares on the relative error (NOTE [kernel model]). An op
  the calibration has no case of takes the pooled fit of all streaming ops of its
  precision and pass, and the trace says how many ops did (``source.note``).
- A convolution: its implicit GEMM (``b`` groups of ``N Ho Wo x C_out / g``, reducing over
  ``C_in / g x kh x kw``) by the same utilization form, with the kernel's taps, stride and
  input channels per group among the features; fitted per kind (dense, grouped included,
  or depthwise), memory format (NCHW or channels-last), precision and pass; fp32 against
  the TF32 peak (cuDNN's default), over the bytes it moves (input, weight, output; not the
  implicit GEMM's unfolded input); no conv is faster than its class's fastest case (below
  the grid a conv is launch-bound); no feature counts beyond 3 sd of the class's cases
  (``clip``: a depthwise conv's intensity barely varies over the grid, and a small
  model's conv would otherwise be extrapolated to absurd times). A kind or format without
  cases takes the other format's
  class, then the ``mm`` fit (a stand-in the trace's note counts). Batch and group norm,
  pooling, padding and hardtanh are streaming ops like any other.
- A batch norm of a 4-D feature map: ``a + s x bytes``, or the CNN kernel model's form
  ``a + max(channel bytes / k, bytes / b)`` (a block reduces each channel: a few long
  channels run at a rate per channel), whichever cross-validates better on the class's
  cases (5-fold, seeded, median |error|; both scores kept in ``cv``); an op whose input is
  no 4-D map (BiT's weight standardization) takes the affine fit kept beside it.
- Views and other ops that launch nothing (the probe's aliases) cost the host only.
- The optimizer's step: ``a + s * parameter bytes + u * tensors`` (AdamW, SGD).
- Host: per op, the median forward and backward cost per op of the calibration's chains of
  small ops (NOTE [op calibration]), times the mixed chains' factor of the model's family
  (a CNN where the model has a convolution, else a transformer; NOTE [host mixes]) where
  the host-only files have mixed chains; per module call, what the same chains cost more
  as one module an op. Every op the probe saw dispatched that is no layer (a weight's transpose,
  mask arithmetic the loss does not need, an op without a tensor output) costs the host
  a view's forward cost, charged to the next layer. A host-bound step's time is then the
  host's, op by op.

A gradient that several ops add up (a residual stream's) costs one ``add`` per extra
reader in the backward pass (NOTE [gradient sums]).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .kernel import _bn_sizes as bn_sizes
from .kernel import _fit_bn as fit_bn
from .kernel import _fit_util as fit_util
from .kernel import _nonneg_rel_lstsq as nonneg_rel_lstsq
from .kernel import load_fitted
from .kernel import per_byte_scaled

MODEL = "aten-v1"
FORMAT = "vdnnsim-op-model"
GEMMS = ("mm", "addmm", "bmm", "baddbmm")
SDPA_OPS = {"_scaled_dot_product_flash_attention": "flash",
            "_scaled_dot_product_efficient_attention": "efficient",
            "_scaled_dot_product_cudnn_attention": "flash"}
# the ATen op a calibration case stands for (NOTE [op calibration])
CASE_OP = {"gelu_tanh": "gelu", "mul_scalar": "mul", "add_scalar": "add", "mul_row": "mul",
           "add_row": "add", "to_bf16": "_to_copy", "to_fp32": "_to_copy",
           "layer_norm": "native_layer_norm", "softmax": "_softmax",
           "log_softmax": "_log_softmax", "nll_loss": "nll_loss_forward",
           "conv": "convolution", "batch_norm": "native_batch_norm",
           "group_norm": "native_group_norm", "max_pool": "max_pool2d_with_indices",
           "avg_pool": "avg_pool2d", "adaptive_avg_pool": "mean", "pad": "constant_pad_nd",
           "relu4d": "relu"}
# the form of a binary op a case has (NOTE [op features]: recorded from the shapes)
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
# the CNN grid's ops (NOTE [op calibration]): fitted as classes of their own, but kept out
# of the median class that stands in for an op without one (a transformer's), and the grid's
# cases of ops the transformer grid has (ReLU on a feature map, global average pooling as a
# mean) are not fitted at all: they would move those ops' transformer classes
CNN_OPS = frozenset({"native_batch_norm", "native_group_norm", "max_pool2d_with_indices",
                     "avg_pool2d", "constant_pad_nd", "hardtanh"})
CNN_SHARED = frozenset({"relu4d", "adaptive_avg_pool"})
CONV_CLIP = 3.0  # sd: how far a conv class's utilization follows a feature past its cases


def _e(dt: str) -> int:
    return 4 if dt == "fp32" else 2


def _peak(dt: str, peaks: dict[str, float]) -> float:
    return peaks["fp32"] if dt == "fp32" else peaks.get(dt, peaks.get("bf16", peaks["fp32"]))


def gemm_phi(f: dict[str, Any], pass_: str, sms: int, peak: float, bw: float,
             nbytes: float | None = None) -> tuple[list[float], float]:
    """(features, roofline ns) of a GEMM's pass (NOTE [op model]); ``nbytes``: the bytes
    the pass moves where they are not the GEMM's operands (a convolution's)."""
    b, m, n, k = f.get("b", 1), f["m"], f["n"], f["k"]
    e = _e(f["dt"])
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
    """A convolution's class (NOTE [op model]): depthwise or dense, channels-last apart."""
    dw = f.get("b", 1) > 1 and f.get("n") == 1 and f.get("b") == f.get("c")
    return ("dw" if dw else "dense") + ("_cl" if f.get("cl") else "")


def conv_phi(f: dict[str, Any], pass_: str, sms: int, peak: float, bw: float
             ) -> tuple[list[float], float]:
    """(features, roofline ns) of a convolution's pass: its implicit GEMM's over the bytes
    it really moves (its input, weight and output, twice over in the backward pass: an
    implicit GEMM's unfolded input, ``kh x kw`` times the input, is never in memory), and
    the logs of its kernel taps, stride and input channels per group (NOTE [op model])."""
    nbytes = max(float(f.get("bytes", 0)), 1.0) * (1 if pass_ == "fwd" else 2)
    phi, roof = gemm_phi(f, pass_, sms, peak, bw, nbytes)
    ln = math.log
    return phi + [ln(f.get("kh", 1) * f.get("kw", 1)), ln(f.get("stride", 1)),
                  ln(max(f.get("c", 1) // max(f.get("b", 1), 1), 1))], roof


def _conv_peak(dt: str, peaks: dict[str, float]) -> float:
    """cuDNN runs an fp32 convolution on TF32 tensor cores (PyTorch's default)."""
    return peaks.get("tf32", peaks["fp32"]) if dt == "fp32" else _peak(dt, peaks)


def sdpa_phi(f: dict[str, Any], pass_: str, peak: float, bw: float
             ) -> tuple[list[float], float]:
    """(features, roofline ns) of an attention's pass (NOTE [op model])."""
    B, H, S, L, D = f["B"], f["H"], f["S"], f.get("L", f["S"]), f["D"]
    flops = 4.0 * B * H * S * L * D * (0.5 if f.get("causal") else 1.0)
    flops *= 1.0 if pass_ == "fwd" else 2.5
    nbytes = B * H * (2 * S + 2 * L) * D * _e(f["dt"]) * (1 if pass_ == "fwd" else 2)
    roof = max(flops / peak, nbytes / bw) * 1e9
    ln = math.log
    return [1.0, ln(S), ln(L), ln(D), ln(B * H), float(bool(f.get("causal"))),
            ln(roof)], roof


FOLDS = 5


def _bn_params(f: dict[str, Any]) -> dict[str, Any] | None:
    """A batch norm's feature map as the CNN kernel model's form reads it."""
    return dict(batch=f["N"], c=f["C"], h=f["H"], w=f["W"]) if "C" in f else None


def _bn_time(c: dict[str, Any], p: dict[str, Any], e: int) -> float:
    """The CNN kernel model's batch-norm form (``kind: bn``) over feature map ``p``."""
    nb, one = bn_sizes(p, e)
    return c["a"] + max(one / c["k"], nb / c["b"])


def _cv(n: int, fit_predict) -> float:
    """5-fold cross-validation (seeded): the median |error| of ``fit_predict(train,
    test)``'s relative errors over the held-out folds."""
    import random

    idx = list(range(n))
    random.Random(0).shuffle(idx)
    errs: list[float] = []
    for k in range(FOLDS):
        test = idx[k::FOLDS]
        errs += fit_predict([i for i in idx if i not in test], test)
    return statistics.median(errs)


def _fit_batch_norm(recs, t, affine: dict[str, Any], np) -> tuple[dict[str, Any], list]:
    """NOTE [op model]: a batch norm class's form by cross-validation, (class, its
    predictions)."""
    A = np.array([[1.0, f["bytes"]] for f, _ in recs])
    ps = [_bn_params(f) for f, _ in recs]
    if len(recs) < 2 * FOLDS or any(p is None for p in ps):
        return affine, (A @ np.array([affine["a"], affine["s"]])).tolist()
    e = _e(recs[0][0]["dt"])

    def own(train, test):
        a, s_ = _lstsq(A[train], t[train], np)
        return [abs((a + s_ * A[i, 1]) / t[i] - 1) for i in test]

    def reduction(train, test):
        c = fit_bn([ps[i] for i in train], t[train], e, np)
        return [abs(_bn_time(c, ps[i], e) / t[i] - 1) for i in test]

    cv = {"affine": round(_cv(len(recs), own), 4), "bn": round(_cv(len(recs), reduction), 4)}
    if cv["bn"] >= cv["affine"]:
        return dict(affine, cv=cv), (A @ np.array([affine["a"], affine["s"]])).tolist()
    c = fit_bn(ps, t, e, np)
    return dict(c, cv=cv, own=affine), [_bn_time(c, p, e) for p in ps]


def _case_geometry(f: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """A batch-norm case's op features with the feature map its case record gives (files
    made before the probe recorded it)."""
    if f["op"] == "native_batch_norm" and "C" not in f and "batch" in r:
        return dict(f, N=r["batch"], C=r["c"], H=r["h"], W=r["h"])
    return f


def _fit_util(rows, t, np) -> dict[str, Any]:
    """NOTE [kernel model]'s utilization fit, with its sum scale (NOTE [sum scale])."""
    c = fit_util(rows, t, np)
    pred = np.array([_util(c, f, r) for f, r in rows])
    c["scale"] = float(t.sum() / pred.sum())
    return c


def _util(c: dict[str, Any], phi: list[float], roof: float) -> float:
    lim = c.get("clip")  # a conv class: no feature beyond ``clip`` sd of its cases
    z = sum(b * (min(max((x - m) / s, -lim), lim) if lim else (x - m) / s)
            for b, x, m, s in zip(c["beta"], phi, c["mu"], c["sd"]))
    z = max(min(z, 50.0), -50.0)
    return roof * (1 + math.exp(-z)) * c.get("scale", 1.0)


_lstsq = nonneg_rel_lstsq  # NOTE [kernel model]'s least squares on the relative error


def _main_op(rec: dict[str, Any]) -> dict[str, Any] | None:
    """The recorded ATen op a case stands for."""
    want = CASE_OP.get(rec["op"], rec["op"])
    if rec["op"] == "sdpa":
        return next((o for o in rec["ops"] if o["op"] in SDPA_OPS), None)
    f = next((o for o in rec["ops"] if ALIASES.get(o["op"], o["op"]) == want), None)
    return dict(f, op=want) if f is not None else None


def _err(pred, t, np) -> dict[str, Any]:
    rel = np.abs(np.array(pred) / t - 1)
    return {"n": int(len(t)), "median": round(float(np.median(rel)), 4),
            "p90": round(float(np.quantile(rel, 0.9)), 4)}


def fit(raws: list[dict[str, Any]], peaks: dict[str, float], bw: float, sms: int
        ) -> dict[str, Any]:
    """The model's constants from calibration files (NOTE [op model])."""
    import numpy as np

    groups: dict[str, list[tuple[dict, float]]] = {}
    steps: dict[str, list[dict]] = {}
    for raw in raws:
        for r in raw["records"]:
            if r["op"] in CNN_SHARED:  # NOTE [op model]: kept out of the transformer classes
                continue
            if r["op"].endswith("_step"):
                steps.setdefault(r["op"], []).append(r)
                continue
            f = _main_op(r)
            if f is None or r["time_ns"] <= 0:
                continue
            f = _case_geometry(f, r)
            if f["op"] in SDPA_OPS:
                kern = SDPA_OPS[f["op"]] + ("_mask" if f.get("mask") else "")
                key = f"sdpa:{kern}|{f['dt']}|{r['pass']}"
            elif f["op"] == "convolution":
                key = f"convolution:{conv_kind(f)}|{f['dt']}|{r['pass']}"
            else:
                form = CASE_FORM.get(r["op"], f.get("form", ""))
                key = f"{f['op']}{'@' + form if form else ''}|{f['dt']}|{r['pass']}"
            groups.setdefault(key, []).append((f, r["time_ns"]))
    classes: dict[str, Any] = {}
    pooled: dict[str, list[tuple[dict, float]]] = {}
    for key, recs in sorted(groups.items()):
        op, dt, pass_ = key.split("|")
        t = np.array([x for _, x in recs])
        if op in GEMMS or op.startswith(("sdpa:", "convolution:")):
            peak = _conv_peak(dt, peaks) if op.startswith("convolution:") else _peak(dt, peaks)
            rows = [gemm_phi(f, pass_, sms, peak, bw) if op in GEMMS
                    else conv_phi(f, pass_, sms, peak, bw) if op.startswith("convolution:")
                    else sdpa_phi(f, pass_, peak, bw) for f, _ in recs]
            c = _fit_util(rows, t, np)
            if op.startswith("convolution:"):
                # a conv class's features barely vary in some directions (a depthwise conv's
                # arithmetic intensity, its last wave): a model's small conv is many sd away,
                # and its utilization must not be extrapolated from there (NOTE [op model])
                c["clip"] = CONV_CLIP
                # and no faster than the fastest case of its class: below the grid a conv
                # is launch-bound, which the utilization form (no intercept) cannot say
                c["floor"] = float(t.min())
            pred = [max(_util(c, phi, roof), c.get("floor", 0.0)) for phi, roof in rows]
        elif op == "embedding" and pass_ == "bwd":
            A = np.array([[1.0, f["o"], f["w"]] for f, _ in recs])
            a, s, u = _lstsq(A, t, np)
            c = {"kind": "embedding", "a": a, "s": s, "u": u}
            pred = (A @ np.array([a, s, u])).tolist()
        else:
            A = np.array([[1.0, f["bytes"]] for f, _ in recs])
            a, s = _lstsq(A, t, np)
            c = {"kind": "affine", "a": a, "s": s}
            pred = (A @ np.array([a, s])).tolist()
            if op != "embedding" and op.split("@")[0] not in CNN_OPS:
                pooled.setdefault(f"{dt}|{pass_}", []).extend(recs)
            if op.split("@")[0] == "native_batch_norm":
                c, pred = _fit_batch_norm(recs, t, c, np)
        c["fit_error"] = _err(pred, t, np)
        classes[key] = c
    for key, recs in pooled.items():  # the fallback of an op without cases: the median
        dt, pass_ = key.split("|")    # streaming class of its precision and pass
        own = [c for k, c in classes.items() if c["kind"] == "affine"
               and k.endswith(f"|{dt}|{pass_}") and "@" not in k
               and k.split("|")[0] not in CNN_OPS]
        if not own:  # (only broadcast forms calibrated: no median class to stand in)
            continue
        a = statistics.median(c["a"] for c in own)
        s = statistics.median(c["s"] for c in own)
        t = np.array([x for _, x in recs])
        pred = [a + s * f["bytes"] for f, _ in recs]
        classes[f"*|{key}"] = {"kind": "affine", "a": a, "s": s,
                               "fit_error": _err(pred, t, np)}
    for op, recs in steps.items():
        t = np.array([r["time_ns"] for r in recs])
        A = np.array([[1.0, r["params"] * 4.0, r["tensors"]] for r in recs])
        a, s, u = _lstsq(A, t, np)
        ht = np.array([r["host_ns"] for r in recs])
        ha, _, hu = _lstsq(A, ht, np)
        classes[f"{op}|fp32|step"] = {
            "kind": "step", "a": a, "s": s, "u": u, "host_a": ha, "host_u": hu,
            "fit_error": _err((A @ np.array([a, s, u])).tolist(), t, np)}
    host = _host(raws)
    raw0 = raws[0]
    return {"format": FORMAT, "model": MODEL, "gpu": raw0["gpu"]["name"], "sm_count": sms,
            "peaks": peaks, "mem_bw_bytes_per_s": bw, "software": raw0.get("software", {}),
            "numerics": {r["dtype"]: r.get("numerics", {}) for r in raws},
            "calibrations": [f"{r['dtype']}: {r.get('made', '')}, {len(r['records'])} "
                             "passes" for r in raws],
            "host": host, "classes": classes}


def host_class(op: str) -> str:
    """The host chain (NOTE [op calibration]) whose cost an op takes."""
    if op in GEMMS:
        return "linear"
    if op in SDPA_OPS:
        return "sdpa"
    op = ALIASES.get(op, op)
    return {"native_layer_norm": "layer_norm", "_to_copy": "cast", "convolution": "conv",
            "native_batch_norm": "batch_norm",
            "native_group_norm": "batch_norm"}.get(op, "pointwise")


def _host(raws: list[dict[str, Any]]) -> dict[str, Any]:
    """NOTE [op model]: the host's cost per op (by chain and precision: fp32, bf16, or
    ``autocast``) and per module call, the median over the host-only files' processes
    (the op calibration's own chains where there is no such file)."""
    only = [r for r in raws if r.get("host_only")]
    plain: dict[str, list[tuple[float, float]]] = {}
    mods: list[tuple[float, float]] = []
    for raw in only or raws:
        per_link = raw.get("pointwise_ops_per_link", 1)  # the first files' chain: 4
        by = {}
        for c in raw.get("host_chains", []):
            by[(c["chain"], c["modules"], _variant(c, raw["dtype"]), c.get("process", 0))] = c
        for (chain, modules, variant, proc), c in by.items():
            k = per_link if chain == "pointwise" else 1
            if not modules:
                plain.setdefault(f"{chain}:{variant}", []).append(
                    (c["host_fwd_ns"] / k, c["host_bwd_ns"]))
            elif (chain, False, variant, proc) in by and chain != "pointwise":
                p = by[(chain, False, variant, proc)]
                mods.append((c["host_fwd_ns"] - p["host_fwd_ns"],
                             c["host_bwd_ns"] - p["host_bwd_ns"]))
    med = statistics.median
    out: dict[str, Any] = {key: [med(x[0] for x in v), med(x[1] for x in v)]
                           for key, v in sorted(plain.items())}
    out["module"] = [max(0.0, med(x[0] for x in mods)), max(0.0, med(x[1] for x in mods))] \
        if mods else [0.0, 0.0]
    mix = _mix_factors(only or raws)
    if mix:
        out["mix"] = mix
    return out


def _variant(c: dict[str, Any], default: str) -> str:
    return "autocast" if c.get("autocast") else \
        {"float32": "fp32", "bfloat16": "bf16"}.get(c.get("dtype"), default)


def _mix_factors(raws: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """NOTE [host mixes]: per variant and family, the median over the mixed chains of
    their host time over what the same process's chains of one op give for their ops,
    forward and backward."""
    ratios: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for raw in raws:
        per_link = raw.get("pointwise_ops_per_link", 1)  # as _host divides it
        one = {}
        for c in raw.get("host_chains", []):
            if not c["modules"]:
                k = per_link if c["chain"] == "pointwise" else 1
                one[(c["chain"], _variant(c, raw["dtype"]), c.get("process", 0))] = \
                    (c["host_fwd_ns"] / k, c["host_bwd_ns"])
        for m in raw.get("host_mixes", []):
            v, proc = _variant(m, raw["dtype"]), m.get("process", 0)
            try:
                ef = sum(n * one[(k, v, proc)][0] for k, n in m["counts"].items())
                eb = sum(n * one[(k, v, proc)][1] for k, n in m["counts"].items())
            except KeyError:  # a kind without its chain in that process: no ratio
                continue
            if ef > 0 and eb > 0:
                ratios.setdefault((v, m["family"]), []).append(
                    (m["host_fwd_ns"] / ef, m["host_bwd_ns"] / eb))
    out: dict[str, dict[str, list[float]]] = {}
    for (v, fam), r in sorted(ratios.items()):
        out.setdefault(v, {})[fam] = [statistics.median(x[0] for x in r),
                                      statistics.median(x[1] for x in r), len(r)]
    return out


@dataclass(frozen=True)
class OpModel:
    """A fitted op model bound to a GPU's peaks, bandwidth and SM count."""

    fitted: dict[str, Any]
    peaks: dict[str, float]
    mem_bw: float
    sms: int
    source: str

    def _cls(self, key: str) -> dict[str, Any] | None:
        return self.fitted["classes"].get(key)

    def time_ns(self, f: dict[str, Any], pass_: str) -> tuple[float, bool]:
        """(ns, whether the op had a class of its own) of one pass of one op. fp16 takes
        bf16's classes (the same tensor-core peak and bytes; no fp16 calibration: a
        stand-in); a GEMM or an attention falls back only to another GEMM or attention
        class, a streaming op to its op in the other precision, then to the median class."""
        op, dt = f["op"], f["dt"]
        look = "bf16" if dt == "fp16" else dt
        mine = dt != "fp16"
        peak = _peak(dt, self.peaks)
        if op in SDPA_OPS:
            kern = SDPA_OPS[op]
            for key in ([f"sdpa:{kern}_mask"] if f.get("mask") else []) + \
                    [f"sdpa:{kern}", "sdpa:efficient"]:
                c = self._cls(f"{key}|{look}|{pass_}") or self._cls(f"{key}|fp32|{pass_}")
                if c is not None:
                    phi, roof = sdpa_phi(f, pass_, peak, self.mem_bw)
                    return _util(c, phi, roof), mine
        op = ALIASES.get(op, op)
        base = SAME_AS.get(op, op) or op
        if op == "convolution" and "m" in f:
            kind = conv_kind(f)
            other = kind[:-3] if kind.endswith("_cl") else kind + "_cl"
            for k in (kind, other):  # the other memory format's class, then a stand-in
                c = self._cls(f"convolution:{k}|{look}|{pass_}")
                if c is not None:
                    phi, roof = conv_phi(f, pass_, self.sms, _conv_peak(dt, self.peaks),
                                         self.mem_bw)
                    return max(_util(c, phi, roof), c.get("floor", 0.0)), mine and k == kind
        if op in GEMMS + ("convolution",) and "m" in f:
            # a convolution without conv classes: its implicit GEMM by the mm fit (a stand-in)
            keys = [op, base, "mm"] if op != "convolution" else ["mm"]
            c = next((self._cls(f"{k}|{look}|{pass_}") for k in keys
                      if self._cls(f"{k}|{look}|{pass_}")), None)
            if c is not None:
                phi, roof = gemm_phi(f, pass_, self.sms, peak, self.mem_bw)
                return _util(c, phi, roof), mine and op != "convolution"
        form = f.get("form")
        c = (self._cls(f"{op}@{form}|{look}|{pass_}") if form else None) \
            or self._cls(f"{op}|{look}|{pass_}") or self._cls(f"{base}|{look}|{pass_}") \
            or (None if form else self._cls(f"{op}@bcast|{look}|{pass_}"))
        # (an op calibrated only with an operand broadcast, batch norm's weight: the same
        # kernel without one, as BiT's weight standardization calls it)
        own = c is not None and mine
        if c is None:
            other = "fp32" if look != "fp32" else "bf16"
            c = self._cls(f"{op}|{other}|{pass_}") or self._cls(f"{base}|{other}|{pass_}")
            own = c is not None and mine
            if c is not None and c["kind"] not in ("affine", "embedding", "bn"):
                c, own = None, False
            c = c or self._cls(f"*|{look}|{pass_}") or self._cls(f"*|fp32|{pass_}")
        if c is None:
            return 0.0, False
        if c["kind"] == "bn":
            p = _bn_params(f)
            if p is None:  # no 4-D feature map: the affine fit kept beside it
                c = c["own"]
            else:
                return _bn_time(c, p, _e(dt)), own
        if c["kind"] == "embedding":
            return c["a"] + c["s"] * f.get("o", 0) + c["u"] * f.get("w", 0), own
        return c["a"] + c["s"] * f["bytes"], own

    def step_ns(self, optimizer: str, param_bytes: int, tensors: int) -> tuple[float, float]:
        """(GPU ns, host ns) of the optimizer's step over ``param_bytes`` of parameters."""
        c = self._cls(f"{'adamw' if optimizer in ('adam', 'adamw') else 'sgd'}_step|fp32|step")
        if c is None:
            return 0.0, 0.0
        return (c["a"] + c["s"] * param_bytes + c["u"] * tensors,
                c["host_a"] + c["host_u"] * tensors)

    def host_ns(self, op: str | None, variant: str = "fp32", family: str = "transformer"
                ) -> tuple[float, float]:
        """The host's (forward, backward) cost of an op under ``variant`` (fp32, bf16 or
        autocast) in a model of ``family`` (``cnn``: one with a convolution; NOTE [host
        mixes]); op None: a view."""
        h = self.fitted["host"]
        cls = "view" if op is None else host_class(op)
        mix = h.get("mix", {})  # NOTE [host mixes]
        fams = mix.get(variant) or mix.get("fp32") or {}
        k = fams.get(family) or fams.get("transformer" if family == "cnn" else "cnn") \
            or [1.0, 1.0]
        for key in (f"{cls}:{variant}", f"{cls}:fp32", f"pointwise:{variant}",
                    "pointwise:fp32"):
            if key in h:
                return (h[key][0] * k[0], h[key][1] * k[1])
        return (0.0, 0.0)

    @property
    def module_ns(self) -> tuple[float, float]:
        return tuple(self.fitted["host"]["module"])


load = load_fitted  # a fitted file, by path relative to vdnnsim/data or absolute


def for_gpu(gpu: Any) -> OpModel | None:
    """The op model of a GPU preset: its own calibration (``op_calibration``), else None. A
    preset whose bandwidth is overridden (a what-if) has its per-byte costs scaled as the
    spec rule scales them (NOTE [op spec rule])."""
    cal = getattr(gpu, "op_calibration", "")
    if not cal:
        return None
    fitted = load(cal)
    r = fitted["mem_bw_bytes_per_s"] / gpu.mem_bw_bytes_per_s
    if abs(r - 1) > 1e-9:
        fitted = per_byte_scaled(fitted, r)
    peaks = {k: gpu.peak_flops.get(k, v) for k, v in fitted["peaks"].items()}
    return OpModel(fitted, peaks, gpu.mem_bw_bytes_per_s, fitted["sm_count"], "calibrated")


# NOTE [op spec rule]
# A GPU without an op calibration of its own is timed by a donor's: the calibrated preset
# nearest to it in specs (bandwidth and bf16 peak, on a log scale; today the H200 alone).
# The donor's GEMM, attention and convolution classes are rooflines over a fitted
# utilization, so they take this GPU's peaks, bandwidth and SM count as they stand (their
# features, the roofline's and the waves', move with them). Every other class is a time
# per op: its time per byte (``s`` of ``a + s x bytes``, an embedding's ``s`` and ``u``, the
# optimizer step's ``s``) is scaled by the donor's bandwidth over this GPU's, batch norm's
# rates by the inverse; its fixed cost ``a`` (a launch and its latency, the same CUDA stack)
# and a conv class's floor are kept. The host's costs are the donor machine's: a host is no
# GPU spec. Nothing is fitted to the GPU it predicts. Where measured: an H100, 22 runs of
# the held-out sets, predicted blind (docs/cost-model.md, "The op model on a GPU it was not
# calibrated on"). The H100 has the H200's compute peaks and SM count and 70% of its
# bandwidth, so that measures the bandwidth half of the rule only; for a GPU whose peaks
# or SM count differ, the rule is unmeasured, and ``vdnnsim trace`` says which case a GPU
# is (``spec_rule_note``). A trace it times says so (``cost_model: aten-v1-specs``).
SPEC_MODEL = MODEL + "-specs"
# what ``vdnnsim trace`` says of the rule's error where the GPU differs from the donor in
# bandwidth alone (tests/test_opmodel.py holds it to the committed comparison)
SPEC_RULE_ERROR = ("measured on an H100, blind (22 runs of seen transformers and CNNs): fp32 "
                   "2.4% median, 11.4% max; autocast-bf16 10.6% / 20.9% (host-bound: the host "
                   "costs are the H200 machine's)")


def _specs_known(gpu: Any) -> bool:
    peaks = getattr(gpu, "peak_flops", {}) or {}
    return bool(getattr(gpu, "sm_count", 0)) and peaks.get("fp32", 0) > 0 and \
        getattr(gpu, "mem_bw_bytes_per_s", 0) > 0


def donor_for(gpu: Any) -> Any:
    """The calibrated preset whose specs are nearest ``gpu``'s (NOTE [op spec rule]); None
    where none is calibrated or ``gpu``'s specs are incomplete."""
    from ..hardware import gpu_preset, preset_names
    if not _specs_known(gpu):
        return None
    cands = [gpu_preset(n) for n in preset_names()]
    cands = [g for g in cands if g.op_calibration and g.sm_count]

    def dist(g: Any) -> float:
        return abs(math.log(g.mem_bw_bytes_per_s / gpu.mem_bw_bytes_per_s)) + \
            abs(math.log(_peak("bf16", g.peak_flops) / _peak("bf16", gpu.peak_flops)))
    return min(cands, key=lambda g: (dist(g), g.name), default=None)


def predict_for(gpu: Any, donor: Any = None) -> OpModel | None:
    """A GPU without an op calibration: ``donor``'s (default ``donor_for(gpu)``) fitted op
    model with this GPU's peaks, bandwidth and SM count (NOTE [op spec rule]); None where
    no donor is calibrated or the GPU's SM count, fp32 peak or bandwidth is unknown."""
    if not _specs_known(gpu):
        return None
    donor = donor if donor is not None else donor_for(gpu)
    if donor is None or not donor.op_calibration:
        return None
    base = load(donor.op_calibration)
    fitted = per_byte_scaled(base, base["mem_bw_bytes_per_s"] / gpu.mem_bw_bytes_per_s)
    peaks = {k: gpu.peak_flops.get(k, gpu.peak_flops["fp32"]) for k in fitted["peaks"]}
    return OpModel(fitted, peaks, gpu.mem_bw_bytes_per_s, gpu.sm_count,
                   f"from specs, {donor.name}'s efficiencies ({donor.op_calibration})")


def spec_rule_note(gpu: Any) -> str:
    """What is known of the spec rule's error for ``gpu`` (NOTE [op spec rule]): measured
    where it differs from its donor in bandwidth alone, else not."""
    donor = donor_for(gpu)
    if donor is None:
        return "no calibrated GPU to time it from"
    same = gpu.sm_count == donor.sm_count and all(
        gpu.peak_flops.get(k) == donor.peak_flops.get(k) for k in ("fp32", "tf32", "bf16", "fp16"))
    if same:
        return f"from {donor.name}, whose compute it shares; {SPEC_RULE_ERROR}"
    return (f"from {donor.name}, whose compute peaks or SM count it does not share: not "
            "measured (the rule's one measurement, an H100, differs from the H200 in bandwidth "
            "alone; the CNN kernel model's like rule was 38-67% median off on older "
            "architectures, docs/cost-model.md)")


def main(argv: list[str] | None = None) -> int:
    """python -m vdnnsim.costs.ops PRESET OUT RAW...: fit the op calibrations RAW against
    PRESET's specs (NOTE [op model])."""
    import sys

    from ..errors import VdnnError
    from ..hardware import gpu_preset
    from ..yamlio import write_text_atomic
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3:
        print("usage: python -m vdnnsim.costs.ops PRESET OUT.json CALIBRATION.json...",
              file=sys.stderr)
        return 2
    try:
        raws = []
        for a in args[2:]:
            try:
                raw = json.loads(Path(a).read_text())
            except (OSError, ValueError) as exc:
                raise VdnnError(f"{a}: cannot read an op calibration ({exc})") from None
            if not isinstance(raw, dict) or raw.get("format") != "vdnnsim-op-calibration":
                raise VdnnError(f"{a}: not a file of vdnnsim calibrate --ops")
            raws.append(raw)
        gpu = gpu_preset(args[0])
        out = fit(raws, dict(gpu.peak_flops), gpu.mem_bw_bytes_per_s, raws[0]["gpu"]["sm_count"])
        write_text_atomic(args[1], json.dumps(out, indent=1) + "\n")
    except VdnnError as exc:
        print(f"vdnnsim: error: {exc}", file=sys.stderr)
        return 2
    for key, c in out["classes"].items():
        fe = c["fit_error"]
        print(f"{key:44s} n={fe['n']:3d} median {fe['median']:.1%} p90 {fe['p90']:.1%}")
    print("host (fwd, bwd ns):", {k: [round(x) for x in v] for k, v in out["host"].items()
                                  if k != "mix"})
    if "mix" in out["host"]:  # NOTE [host mixes]
        print("host mixes (fwd, bwd factor, sequences):", out["host"]["mix"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
