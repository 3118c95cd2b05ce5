"""The calibrated kernel-time model: per-op times from tile, wave and shape features against
the roofline, fitted to ``vdnnsim calibrate``'s microbenchmarks only.

NOTE [kernel model]
Every op of a training step belongs to a class (a conv's forward, backward-data or
backward-filter, depthwise apart; a linear layer's three passes; batch norm, each
activation, pooling, add, concat, dropout, a conv's bias, layer norm, cross-entropy, the
SGD step), and
each class has a few constants fitted to the calibration file (docs/cost-model.md):

- GEMM-like classes (convs, linear layers): the pass is an implicit GEMM of ``M x N``
  outputs reducing over ``K`` in ``G`` groups; its roofline is ``max(F / peak, bytes /
  bw)``. The time is ``roofline / u`` with the utilization ``u = sigmoid(beta . phi)``,
  ``phi`` the logs of M, N, K, G, kernel size, stride, arithmetic intensity, tiles per SM
  (128x128 tiles, split along K where fewer tiles than SMs), the roofline and the input
  channels per group, and the last wave's occupancy. ``beta``: ridge regression on
  ``logit(roofline / measured)``, weighted by ``sqrt(time)`` (NeuSight's idea with a
  linear model).
- Batch norm: ``t = a + max(channel bytes / k, bytes / b)`` (a block reduces each channel).
- Layer norm: ``t = a + s * bytes + u * rows`` (a row, the normalized vector, is one
  block's work: ConvNeXt's rows of 48-96 channels run far below bandwidth).
- Other streaming classes: ``t = a + s * bytes`` (bytes: the input tensor's), least squares
  on the relative error weighted by ``sqrt(time)``, coefficients non-negative.
- The SGD step: ``t = a + s * parameter bytes + u * tensors``.

A conv's workspace per pass is ``w * max(input, output bytes)`` with ``w`` the median of
the class's measured ratios (cuDNN's ``benchmark`` choice is not predictable from the
shape; the median keeps a network's total right where single layers miss).

Peaks: a conv in fp32 runs on TF32 tensor cores where the calibration says cuDNN allowed it
(``peak_flops['tf32']``), a linear layer in fp32 on CUDA cores (PyTorch's default), fp16
and bf16 on tensor cores. A GPU without a calibration file borrows another's fitted
efficiencies and takes its own peaks, bandwidth and SM count from its preset
(``predict_for``): a prediction from specs, documented as such.

NOTE [conv kinds]
Dense convs are fitted per kind as well as pooled: 1x1, a stem, k x k at stride 1, strided,
grouped (``workspace_class``); cuDNN runs different kernels for each. A kind with fewer
than ``SUBCLASS_MIN`` calibration cases falls back to the pooled class. On the H200's
file, five-fold cross-validation over its own cases took the median error of
backward-data from 30% to 19%, backward-filter from 30% to 19% and forward from 21% to
18% (docs/cost-model.md).

NOTE [sum scale]
The utilization and batch-norm fits minimize errors of logs, which leaves the sum of the
predictions short of the sum of the times (the mean of a ratio whose log is centred is
above one: on the H200's file conv classes were 4-6% short in sum). A step is a sum, so
each such class then takes one factor, ``scale``: its calibration cases' measured total
over the fitted total (Duan's smearing estimate). Fitted on the calibration file only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

MODEL = "calibrated-v1"
SPLIT_K_MIN = 512  # a split-K slice reduces over at least this many elements


def conv_class(p: dict[str, Any]) -> str:
    """A conv's class: depthwise (one channel per group) or not (NOTE [kernel model])."""
    g, c = p.get("groups", 1), p["c"]
    return "conv_dw" if g > 1 and g == c else "conv"


def workspace_class(p: dict[str, Any]) -> str:
    """A conv's workspace class: depthwise, grouped, or dense by its kernel: 1x1, a stem
    (reads the image: 4 channels or fewer), strided, or stride 1."""
    g, c = p.get("groups", 1), p["c"]
    if g > 1:
        return "conv_dw" if g == c else "conv_grp"
    if p["kh"] == 1 and p["kw"] == 1:
        return "conv_1x1"
    if c <= 4:
        return "conv_stem"
    return "conv_kxk_s1" if p["sh"] == 1 and p["sw"] == 1 else "conv_kxk_s2"


def _out(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


def gemm_shape(op: str, pass_: str, p: dict[str, Any], e: int
               ) -> tuple[int, int, int, int, float, float]:
    """(M, N, K, G, FLOPs, bytes) of one pass of a conv or linear op (NOTE [kernel model])."""
    if op == "linear":
        b, fi, fo = p["batch"], p["fin"], p["fout"]
        x, y, w = b * fi * e, b * fo * e, fi * fo * e
        flops = 2.0 * b * fi * fo
        if pass_ == "fwd":
            return b, fo, fi, 1, flops, x + y + w
        if pass_ == "bwd_data":
            return b, fi, fo, 1, flops, y + w + x
        return fo, fi, b, 1, flops, x + y + w
    b, c, h, w_, k = p["batch"], p["c"], p["h"], p["w"], p["k_out"]
    g = p.get("groups", 1)
    kh, kw = p["kh"], p["kw"]
    ho, wo = _out(h, kh, p["sh"], p["ph"]), _out(w_, kw, p["sw"], p["pw"])
    x, y, wt = b * c * h * w_ * e, b * k * ho * wo * e, k * (c // g) * kh * kw * e
    flops = 2.0 * b * k * ho * wo * (c // g) * kh * kw
    if pass_ == "fwd":
        return b * ho * wo, k // g, (c // g) * kh * kw, g, flops, x + y + wt
    if pass_ == "bwd_data":
        return b * h * w_, c // g, (k // g) * kh * kw, g, flops, y + wt + x
    return k // g, (c // g) * kh * kw, b * ho * wo, g, flops, x + y + wt


def waves(m: int, n: int, k: int, g: int, tile: tuple[int, int], sms: int
          ) -> tuple[float, float]:
    """(q, K per split) of NOTE [kernel model]: the last wave's occupancy, and the reduction
    length each tile walks once a GEMM with fewer tiles than SMs is split along K."""
    tiles = g * math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    if tiles < sms:
        split = max(1, min(sms // tiles, k // SPLIT_K_MIN))
        tiles *= split
        k = k / split
    q = tiles / (math.ceil(tiles / sms) * sms)
    return q, k


def streaming_bytes(op: str, p: dict[str, Any], e: int) -> float:
    """The nominal bytes a streaming class scales with: its input tensor's."""
    if op == "cross_entropy":
        return p["batch"] * p["classes"] * e
    return p["batch"] * p["c"] * p["h"] * p["w"] * e


def _bn_sizes(p: dict[str, Any], e: int) -> tuple[float, float]:
    """(bytes, bytes of one channel) of a batch norm pass."""
    per_channel = p["batch"] * p["h"] * p["w"] * e
    return per_channel * p["c"], per_channel


def _fit_bn(recs, t, e: int, np) -> dict[str, Any]:
    """Batch norm: ``t = a + max(channel bytes / k, bytes / b)``. A block reduces each
    channel, so a few long channels run at a rate per channel (``k``), many at a share of
    DRAM bandwidth (``b``). Grid search on the squared log error, long kernels weighted."""
    sizes = np.array([_bn_sizes(r, e) for r in recs])
    logt, wt = np.log(t), np.sqrt(t) / np.sqrt(t).sum()
    ks = np.logspace(-0.5, 1.5, 41)[:, None, None]  # bytes/ns of one channel
    bs = np.logspace(1.5, 3.7, 45)[None, :, None]  # bytes/ns of the whole tensor
    best = (np.inf, {})
    for a in (0.0, 1000.0, 2000.0, 3000.0, 4500.0, 6500.0):
        pred = a + np.maximum(sizes[:, 1] / ks, sizes[:, 0] / bs)
        loss = (((np.log(pred) - logt) ** 2) * wt).sum(axis=2)
        i, j = np.unravel_index(np.argmin(loss), loss.shape)
        if loss[i, j] < best[0]:
            best = (float(loss[i, j]), {"kind": "bn", "a": a, "k": float(ks[i, 0, 0]),
                                        "b": float(bs[0, j, 0])})
    return best[1]


def class_of(rec: dict[str, Any]) -> str:
    op = rec["op"]
    if op == "conv":
        return f"{conv_class(rec)}.{rec['pass']}"
    return f"{op}.{rec['pass']}"


def peak_key(op: str, dtype: str, numerics: dict[str, Any]) -> str:
    if dtype != "fp32":
        return dtype
    if op == "conv" and numerics.get("cudnn_allow_tf32", False):
        return "tf32"
    if op == "linear" and numerics.get("matmul_allow_tf32", False):
        return "tf32"
    return "fp32"


# -- fitting (numpy, offline) --------------------------------------------------------------
def fit(raw: dict[str, Any], peaks: dict[str, float], mem_bw: float) -> dict[str, Any]:
    """Fit every class of a calibration file (``vdnnsim calibrate``'s output) against the
    GPU's ``peaks`` (FLOP/s per key of :func:`peak_key`) and DRAM bandwidth."""
    import numpy as np

    e = {"fp32": 4, "fp16": 2, "bf16": 2}[raw["dtype"]]
    sms = raw["gpu"]["sm_count"]
    numerics = raw.get("numerics", {})
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in raw["records"]:
        if r["time_ns"] > 0:
            groups.setdefault(class_of(r), []).append(r)
            if r["op"] == "conv" and conv_class(r) == "conv":  # NOTE [conv kinds]
                groups.setdefault(f"conv/{workspace_class(r)}.{r['pass']}", []).append(r)
    for cls in [c for c, v in groups.items() if "/" in c and len(v) < SUBCLASS_MIN]:
        del groups[cls]  # too few cases of its own: the pooled class times it
    classes: dict[str, Any] = {}
    workspace: dict[str, float] = {}
    for cls, recs in sorted(groups.items()):
        op = recs[0]["op"]
        t = np.array([r["time_ns"] for r in recs], dtype=float)
        if op in ("conv", "linear"):
            pk = peak_key(op, raw["dtype"], numerics)
            classes[cls] = _fit_gemm(recs, t, e, sms, peaks[pk], mem_bw, np) | {"peak": pk}
            if op == "conv":
                by: dict[str, list[float]] = {}
                for r in recs:
                    by.setdefault(f"{workspace_class(r)}.{r['pass']}", []).append(
                        r["workspace_bytes"] / _xy(r, e))
                workspace.update({k: float(np.median(v)) for k, v in by.items()})
        elif op == "sgd_step":
            nb = np.array([r["params"] * e for r in recs], dtype=float)
            nt = np.array([r["tensors"] for r in recs], dtype=float)
            a, s, u = _nonneg_rel_lstsq(np.stack([np.ones_like(t), nb, nt], 1), t, np)
            classes[cls] = {"kind": "step", "a": a, "s": s, "u": u}
        elif op == "bn":
            classes[cls] = _fit_bn(recs, t, e, np)
        elif op == "layer_norm":
            nb = np.array([streaming_bytes(op, r, e) for r in recs], dtype=float)
            rows = np.array([r["batch"] * r["h"] * r["w"] for r in recs], dtype=float)
            a, s, u = _nonneg_rel_lstsq(np.stack([np.ones_like(t), nb, rows], 1), t, np)
            classes[cls] = {"kind": "rows", "a": a, "s": s, "u": u}
        else:
            nb = np.array([streaming_bytes(op, r, e) for r in recs], dtype=float)
            a, s = _nonneg_rel_lstsq(np.stack([np.ones_like(t), nb], 1), t, np)
            classes[cls] = {"kind": "affine", "a": a, "s": s}
    for cls, c in classes.items():  # NOTE [sum scale]: the class's total made right
        if c["kind"] in ("util", "bn"):
            recs = groups[cls]
            pred = np.array([_predict_class(c, r, e, sms, peaks, mem_bw) for r in recs])
            c["scale"] = float(sum(r["time_ns"] for r in recs) / pred.sum())
    for cls, c in classes.items():  # how far the fit is from its own data
        recs = groups[cls]
        pred = np.array([_predict_class(c, r, e, sms, peaks, mem_bw) for r in recs])
        t = np.array([r["time_ns"] for r in recs], dtype=float)
        err = np.abs(pred / t - 1)
        c["fit_error"] = {"n": len(recs), "median": round(float(np.median(err)), 4),
                          "p90": round(float(np.quantile(err, 0.9)), 4)}
    return {"model": MODEL, "gpu": raw["gpu"]["name"], "sm_count": sms, "dtype": raw["dtype"],
            "numerics": numerics, "software": raw.get("software", {}),
            "peaks": {k: peaks[k] for k in sorted(set(c.get("peak", "fp32")
                                                      for c in classes.values()))},
            "mem_bw_bytes_per_s": mem_bw, "launch": raw.get("launch", {}),
            "classes": classes, "workspace": workspace,
            "made_from": {"records": len(raw["records"]), "made": raw.get("made", "")}}


def _xy(r: dict[str, Any], e: int) -> float:
    """max(input, output) bytes of a conv case."""
    ho, wo = _out(r["h"], r["kh"], r["sh"], r["ph"]), _out(r["w"], r["kw"], r["sw"], r["pw"])
    return max(r["batch"] * r["c"] * r["h"] * r["w"], r["batch"] * r["k_out"] * ho * wo) * e


def _nonneg_rel_lstsq(A, t, np) -> list[float]:
    """Least squares on the relative error weighted by sqrt(time) (long kernels weigh more:
    a step is their sum), coefficients clipped at 0 (refit without)."""
    w = 1.0 / np.sqrt(t)
    active = list(range(A.shape[1]))
    coef = np.zeros(A.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(A[:, active] * w[:, None], t * w, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            break
        active = [j for j, v in zip(active, sol) if v > 0]
    return [float(v) for v in coef]


def gemm_features(op: str, pass_: str, p: dict[str, Any], e: int, sms: int, peak: float,
                  bw: float) -> tuple[list[float], float]:
    """(features, roofline ns) of one pass of a GEMM-like op (NOTE [kernel model])."""
    m, n, k, g, flops, nbytes = gemm_shape(op, pass_, p, e)
    q, _ = waves(m, n, k, g, (128, 128), sms)
    tiles = g * math.ceil(m / 128) * math.ceil(n / 128)
    roof = max(flops / peak, nbytes / bw) * 1e9
    kh, s = (p["kh"], p["sh"]) if op == "conv" else (1, 1)
    cin = p["c"] // g if op == "conv" else p["fin"]
    ln = math.log
    return [1.0, ln(m), ln(n), ln(k), ln(g), ln(kh), ln(s), ln(flops / nbytes),
            ln(tiles / sms), q, ln(roof), ln(cin)], roof


SUBCLASS_MIN = 20  # calibration cases a conv kind needs to be fitted on its own
RIDGE = 1.0  # shrinkage of the utilization model's coefficients (not the intercept)


def _fit_gemm(recs, t, e: int, sms: int, peak: float, bw: float, np) -> dict[str, Any]:
    rows = [gemm_features(r["op"], r["pass"], r, e, sms, peak, bw) for r in recs]
    return _fit_util(rows, t, np)


def _fit_util(rows, t, np) -> dict[str, Any]:
    """The utilization model: logit(roofline / time) linear in the features, by ridge
    regression weighted toward long kernels (NOTE [kernel model])."""
    X = np.array([f for f, _ in rows])
    roof = np.array([r for _, r in rows])
    u = np.clip(roof / t, 1e-4, 0.999)
    y = np.log(u / (1 - u))
    w = np.sqrt(t) / np.sqrt(t).mean()  # long kernels weigh more: a step is their sum
    mu, sd = X.mean(0), X.std(0)
    sd[sd == 0] = 1.0
    mu[0], sd[0] = 0.0, 1.0
    Z = (X - mu) / sd
    reg = RIDGE * np.eye(Z.shape[1])
    reg[0, 0] = 0.0
    beta = np.linalg.solve(Z.T @ (Z * w[:, None]) + reg, Z.T @ (w * y))
    return {"kind": "util", "beta": [float(b) for b in beta], "mu": [float(v) for v in mu],
            "sd": [float(v) for v in sd]}


# -- prediction ------------------------------------------------------------------------------
def _predict_class(c: dict[str, Any], p: dict[str, Any], e: int, sms: int,
                   peaks: dict[str, float], bw: float, op: str | None = None,
                   pass_: str | None = None) -> float:
    op = op or p["op"]
    pass_ = pass_ or p["pass"]
    if c["kind"] == "util":
        f, roof = gemm_features(op, pass_, p, e, sms, peaks[c.get("peak", "fp32")], bw)
        z = sum(b * (x - m) / sd for b, x, m, sd in zip(c["beta"], f, c["mu"], c["sd"]))
        return roof * (1 + math.exp(-z)) * c.get("scale", 1.0)  # roof / sigmoid(z)
    if c["kind"] == "bn":
        nb, one = _bn_sizes(p, e)
        return (c["a"] + max(one / c["k"], nb / c["b"])) * c.get("scale", 1.0)
    if c["kind"] == "rows":
        return c["a"] + c["s"] * streaming_bytes(op, p, e) + c["u"] * p["batch"] * p["h"] * p["w"]
    if c["kind"] == "step":
        return c["a"] + c["s"] * p["params"] * e + c["u"] * p["tensors"]
    return c["a"] + c["s"] * streaming_bytes(op, p, e)


@dataclass(frozen=True)
class KernelModel:
    """A fitted model bound to a GPU's peaks, bandwidth and SM count."""

    fitted: dict[str, Any]
    peaks: dict[str, float]
    mem_bw: float
    sms: int
    source: str  # 'calibrated' (this GPU's own file) or 'from specs of <gpu>'

    def time_ns(self, op: str, pass_: str, p: dict[str, Any], dtype: str = "fp32") -> float:
        e = {"fp32": 4, "fp16": 2, "bf16": 2}[dtype]
        classes = self.fitted["classes"]
        if op == "conv":
            cls = f"{conv_class(p)}.{pass_}"
            kind = f"conv/{workspace_class(p)}.{pass_}"  # NOTE [conv kinds]
            cls = kind if kind in classes else cls
        else:
            cls = f"{op}.{pass_}"
        c = classes.get(cls)
        if c is None:
            raise KeyError(cls)
        return _predict_class(c, p, e, self.sms, self.peaks, self.mem_bw, op, pass_)

    def workspace_bytes(self, pass_: str, p: dict[str, Any], dtype: str = "fp32") -> int:
        e = {"fp32": 4, "fp16": 2, "bf16": 2}[dtype]
        cls = f"{workspace_class(p)}.{pass_}"
        return int(self.fitted["workspace"].get(cls, 0.0) * _xy(p, e))

    def has(self, op: str, pass_: str = "fwd") -> bool:
        return f"{op}.{pass_}" in self.fitted["classes"]


@lru_cache(maxsize=8)
def load_fitted(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_absolute():
        return json.loads(resources.files("vdnnsim").joinpath("data", path).read_text())
    return json.loads(p.read_text())


def for_gpu(gpu: Any, dtype: str = "fp32") -> KernelModel | None:
    """The kernel model of a GPU preset: its own calibration, else None."""
    cal = getattr(gpu, "calibration", "")
    if not cal:
        return None
    fitted = load_fitted(cal)
    if fitted.get("dtype") != dtype:
        return None
    peaks = {k: gpu.peak_flops.get(k, v) for k, v in fitted["peaks"].items()}
    return KernelModel(fitted, peaks, gpu.mem_bw_bytes_per_s, fitted["sm_count"], "calibrated")


# NOTE [spec rule]
# A GPU with no calibration is timed from its specs: by the analytic cost model (what its
# preset uses), or by ``predict_for`` below. experiments/kernel_model/spec_rule.py holds both
# against data neither was fitted to (published cuDNN 5 timings of the K40 and Titan X;
# the H200's own calibration): median errors of 17-62%, maxima up to 93%
# (docs/cost-model.md, "How far either rule is from measurements"). A calibration is the
# remedy; a trace names the model that timed it (source.cost_model).
def per_byte_scaled(fitted: dict[str, Any], r: float) -> dict[str, Any]:
    """``fitted`` (a kernel or op model) with every class's time per byte times ``r`` and
    every rate in bytes per ns over ``r``; fixed costs, per-tensor costs and utilization
    fits as they are (NOTE [op spec rule]). The original is left untouched."""
    def one(c: dict[str, Any]) -> dict[str, Any]:
        c = dict(c)
        kind = c.get("kind")
        if kind in ("affine", "rows", "step", "embedding"):
            c["s"] = c["s"] * r
            if kind == "embedding":  # its table's bytes (a row's u counts rows, a step's
                c["u"] = c["u"] * r  # tensors: neither is bytes)
        elif kind == "bn":
            c["k"], c["b"] = c["k"] / r, c["b"] / r
        if isinstance(c.get("own"), dict):  # a batch norm's affine fit kept beside it
            c["own"] = one(c["own"])
        return c
    return dict(fitted, classes={k: one(c) for k, c in fitted["classes"].items()})


def predict_for(gpu: Any, donor: Any, dtype: str = "fp32", scale_bandwidth: bool = False
                ) -> KernelModel | None:
    """A GPU with no calibration of its own: the ``donor``'s fitted efficiencies with this
    GPU's peaks, bandwidth and SM count (NOTE [kernel model], NOTE [spec rule]);
    ``scale_bandwidth``: also every per-byte cost by the bandwidths' ratio, as the op
    model's rule does (NOTE [op spec rule]; not this rule's default: docs/cost-model.md)."""
    base = for_gpu(donor, dtype)
    if base is None or not getattr(gpu, "sm_count", 0):
        return None
    fitted = (per_byte_scaled(base.fitted, donor.mem_bw_bytes_per_s / gpu.mem_bw_bytes_per_s)
              if scale_bandwidth else base.fitted)
    peaks = {k: gpu.peak_flops.get(k, gpu.peak_flops["fp32"]) for k in base.fitted["peaks"]}
    return KernelModel(fitted, peaks, gpu.mem_bw_bytes_per_s, gpu.sm_count,
                       f"from specs, efficiencies of {donor.name}")


def main(argv: list[str] | None = None) -> int:
    """python -m vdnnsim.costs.kernel RAW PRESET OUT: fit RAW against PRESET's specs."""
    import sys

    from ..hardware import gpu_preset
    from ..errors import VdnnError
    from ..yamlio import write_text_atomic
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3:
        print("usage: python -m vdnnsim.costs.kernel CALIBRATION.json PRESET OUT.json",
              file=sys.stderr)
        return 2
    try:
        try:
            raw = json.loads(Path(args[0]).read_text())
        except (OSError, ValueError) as exc:
            raise VdnnError(f"{args[0]}: cannot read a calibration file ({exc})") from None
        if not isinstance(raw, dict) or raw.get("format") != "vdnnsim-calibration":
            raise VdnnError(f"{args[0]}: not a file of vdnnsim calibrate")
        gpu = gpu_preset(args[1])
        try:
            out = fit(raw, dict(gpu.peak_flops), gpu.mem_bw_bytes_per_s)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            raise VdnnError(f"{args[0]}: a record lacks what the fit needs ({exc!r})") from None
        write_text_atomic(args[2], json.dumps(out, indent=1) + "\n")
    except VdnnError as exc:
        print(f"vdnnsim: error: {exc}", file=sys.stderr)
        return 2
    for cls, c in out["classes"].items():
        fe = c["fit_error"]
        extra = {"util": "", "bn": f"a={c.get('a')} k={c.get('k', 0):.3g} b={c.get('b', 0):.3g}"
                 }.get(c["kind"], f"a={c.get('a', 0):.0f} s={c.get('s', 0):.3g}")
        print(f"{cls:26s} n={fe['n']:3d} median {fe['median']:.1%} p90 {fe['p90']:.1%}  {extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
