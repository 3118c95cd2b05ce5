"""The op-level kernel model: a training step's time from its ATen ops, for any model the
op probe can run on the meta device, fitted to ``vdnnsim calibrate
--ops``'s microbenchmarks only.

NOTE [op model]
Every op of the probe's forward pass gets a forward time, a backward
time (where its output takes a gradient), and the host's cost of both:

- GEMMs (``mm``, ``addmm``, ``bmm``, ``baddbmm``): the roofline ``max(F / peak, bytes /
  bw)`` over the utilization ``sigmoid(beta . phi)`` (the kernel model's form), ``phi``
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
- A grouped GEMM (a MoE layer's experts, ``_grouped_mm``): its groups as one ``bmm``, or
  where CUDA runs its fallback (any dtype but bf16) one ``mm`` per group (a stand-in).
- Every other op: ``t = a + s * bytes`` per ATen op, precision and pass (bytes: the op
  features'; an embedding's backward ``a + s * output + u * table``: it zeroes the whole
  table's gradient), least squares on the relative error. An op
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
  model's conv would otherwise be extrapolated to absurd times). A 3-D convolution has
  classes of its own (its taps in time among the taps). A kind or format without cases
  takes the other format's class, a 3-D one the 2-D class, then the ``mm`` fit (a
  stand-in the trace's note counts). Batch and group norm,
  pooling, padding and hardtanh are streaming ops like any other.
- A batch norm of a 4-D feature map: ``a + s x bytes``, or the CNN kernel model's form
  ``a + max(channel bytes / k, bytes / b)`` (a block reduces each channel: a few long
  channels run at a rate per channel), whichever cross-validates better on the class's
  cases (5-fold, seeded, median |error|; both scores kept in ``cv``); an op whose input is
  no 4-D map (BiT's weight standardization) takes the affine fit kept beside it.
- Where the GPU has a CNN kernel model (NOTE [kernel model], its ``calibration``; fp32), a
  plain 2-D NCHW convolution (its bias's add and, backward, its weight gradient and, where
  its input takes one, its data gradient)
  and a batch norm of a 4-D map in fp32 take that model's times, as the layer-level
  front-end times them: its grid has 400 convolutions (1x1, stems, k x k, strided and
  grouped kinds, each a class) and batch norms of few long channels, where the op grid's
  60 dense convolutions and 6 batch norms of many short channels left the torchvision
  CNNs 15-45% fast (issue 58; docs/cost-model.md). bf16, channels-last, 3-D and a GPU
  timed by the spec rule keep the op classes.
- Views and other ops that launch nothing (the probe's aliases) cost the host only.
- The optimizer's step: ``a + s * parameter bytes + u * tensors`` (AdamW, SGD).
- Host: per op, the median forward and backward cost per op of the calibration's chains of
  small ops, times the mixed chains' factor of the model's family
  (a CNN where the model has a convolution, else a transformer) where
  the host-only files have mixed chains; per module call, what the same chains cost more
  as one module an op. Every op the probe saw dispatched that is no layer (a weight's transpose,
  mask arithmetic the loss does not need, an op without a tensor output) costs the host
  a view's forward cost, charged to the next layer. A host-bound step's time is then the
  host's, op by op.

A gradient that several ops add up (a residual stream's) costs one ``add`` per extra
reader in the backward pass; the ops that read a tensor after an in-place op on it
(``relu_``) read the in-place op's version, so they count as its readers, not the
tensor's (a conv, batch norm and in-place ReLU chain has no sum).
"""


from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .kernel import for_gpu as cnn_for_gpu, load_fitted, per_byte_scaled
from .kernel import predict_for as cnn_predict_for
from .opfit import fit
from .opforms import (ALIASES, GEMMS, MODEL, SAME_AS, SDPA_OPS, bn_params, bn_time,
                      cnn_conv_params, conv_kind, conv_peak, conv_phi, elem_bytes, gemm_phi,
                      host_class, peak_for, sdpa_phi, util_time)


@dataclass(frozen=True)
class OpModel:
    """A fitted op model bound to a GPU's peaks, bandwidth and SM count."""

    fitted: dict[str, Any]
    peaks: dict[str, float]
    mem_bw: float
    sms: int
    source: str
    cnn: Any = None  # the GPU's CNN kernel model (fp32), where it has one

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
        peak = peak_for(dt, self.peaks)
        if op in SDPA_OPS:
            kern = SDPA_OPS[op]
            for key in ([f"sdpa:{kern}_mask"] if f.get("mask") else []) + \
                    [f"sdpa:{kern}", "sdpa:efficient"]:
                c = self._cls(f"{key}|{look}|{pass_}") or self._cls(f"{key}|fp32|{pass_}")
                if c is not None:
                    phi, roof = sdpa_phi(f, pass_, peak, self.mem_bw)
                    return util_time(c, phi, roof), mine
        op = ALIASES.get(op, op)
        base = SAME_AS.get(op, op) or op
        if self.cnn is not None and dt == "fp32" and op in ("convolution", "native_batch_norm"):
            t = self._cnn_ns(f, op, pass_)
            if t is not None:
                return t, True
        if op == "convolution" and "m" in f:
            kind = conv_kind(f)
            other = kind[:-3] if kind.endswith("_cl") else kind + "_cl"
            flat = [k.replace("3d", "") for k in (kind, other)] if "3d" in kind else []
            # the other memory format's class, a 3-D conv's 2-D class, then a stand-in
            for k in [kind, other] + flat:
                c = self._cls(f"convolution:{k}|{look}|{pass_}")
                if c is not None:
                    phi, roof = conv_phi(f, pass_, self.sms, conv_peak(dt, self.peaks),
                                         self.mem_bw)
                    return max(util_time(c, phi, roof), c.get("floor", 0.0)), mine and k == kind
        if op == "_grouped_mm" and "m" in f:  # a MoE layer's experts (NOTE [moe routing])
            loop = f.get("loop")
            t, _ = self.time_ns(dict(f, op="mm" if loop else "bmm", b=1 if loop else f["b"]),
                                pass_)
            return t * (f["b"] if loop else 1), False
        if op in GEMMS + ("convolution",) and "m" in f:
            # a convolution without conv classes: its implicit GEMM by the mm fit (a stand-in)
            keys = [op, base, "mm"] if op != "convolution" else ["mm"]
            c = next((self._cls(f"{k}|{look}|{pass_}") for k in keys
                      if self._cls(f"{k}|{look}|{pass_}")), None)
            if c is not None:
                phi, roof = gemm_phi(f, pass_, self.sms, peak, self.mem_bw)
                return util_time(c, phi, roof), mine and op != "convolution"
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
            p = bn_params(f)
            if p is None:  # no 4-D feature map: the affine fit kept beside it
                c = c["own"]
            else:
                return bn_time(c, p, elem_bytes(dt)), own
        if c["kind"] == "embedding":
            return c["a"] + c["s"] * f.get("o", 0) + c["u"] * f.get("w", 0), own
        return c["a"] + c["s"] * f["bytes"], own

    def _cnn_ns(self, f: dict[str, Any], op: str, pass_: str) -> float | None:
        """The CNN kernel model's time of a 2-D convolution or 4-D batch norm (fp32), as
        the layer-level front-end sums it; None where that model does not apply."""
        t = self.cnn.time_ns
        if op == "native_batch_norm":
            p = bn_params(f)
            return None if p is None else t("bn", pass_, p)
        p = cnn_conv_params(f)
        if p is None:
            return None
        out = {"batch": 1, "c": 1, "h": 1, "w": f["m"] * f["n"] * f["b"]}  # the bias's add
        if pass_ == "fwd":
            return t("conv", "fwd", p) + (t("bias", "fwd", out) if f.get("bias") else 0.0)
        return (t("conv", "bwd_data", p) if f.get("dgrad", True) else 0.0) + \
            t("conv", "bwd_filter", p) + (t("bias", "bwd", out) if f.get("bias") else 0.0)

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
        autocast) in a model of ``family`` (``cnn``: one with a convolution); op None: a
        view."""
        h = self.fitted["host"]
        cls = "view" if op is None else host_class(op)
        mix = h.get("mix", {})
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
    spec rule scales them."""
    cal = getattr(gpu, "op_calibration", "")
    if not cal:
        return None
    fitted = load(cal)
    r = fitted["mem_bw_bytes_per_s"] / gpu.mem_bw_bytes_per_s
    if abs(r - 1) > 1e-9:
        fitted = per_byte_scaled(fitted, r)
    peaks = {k: gpu.peak_flops.get(k, v) for k, v in fitted["peaks"].items()}
    return OpModel(fitted, peaks, gpu.mem_bw_bytes_per_s, fitted["sm_count"], "calibrated",
                   cnn_for_gpu(gpu, "fp32"))


# NOTE [op spec rule]
# A GPU without an op calibration of its own is timed by a donor's: the DONORS preset
# nearest to it in specs (bandwidth and bf16 peak, log scale): the H200 alone, against which
# the rule was measured and the cards' corrections fitted (the H100's times the H100). The
# donor's GEMM, attention and convolution classes are rooflines over a fitted
# utilization, so they take this GPU's peaks, bandwidth and SM count as they stand (their
# features, the roofline's and the waves', move with them). Every other class is a time
# per op: its time per byte (``s`` of ``a + s x bytes``, an embedding's ``s`` and ``u``, the
# optimizer step's ``s``) is scaled by the donor's bandwidth over this GPU's, batch norm's
# rates by the inverse; its fixed cost ``a`` (a launch and its latency, the same CUDA stack)
# and a conv class's floor are kept. The host's costs are the donor machine's: a host is no
# GPU spec. Nothing is fitted to the GPU it predicts; a trace it times says so
# (``cost_model: aten-v1-specs``), and ``spec_rule_note`` what is measured of its error.
SPEC_MODEL = MODEL + "-specs"
DONORS = ("h200",)

# NOTE [op spec rule fit]
# A preset may carry a correction of the rule fitted to public per-kernel measurements of
# its own card (``spec_rule`` in gpus.yaml: NeuSight's fp32 GEMMs and convolutions, fitted on
# a fixed half of them, checked on the other: experiments/op_model/NEUSIGHT_SPLIT.md and
# neusight_fit.py). ``compute_scale`` multiplies every peak the rule takes (a sustained
# clock acts on every unit; only fp32 was measured), ``bandwidth_scale`` the bandwidth
# (rooflines and per-byte costs alike). Datasheet peaks are boost-clock numbers, and cards
# sustain different shares of them. The donor is still chosen on the datasheet; a preset
# without the field is timed exactly as before.
# what ``vdnnsim trace`` says of the rule's error where the GPU differs from the donor in
# bandwidth alone (tests/test_opmodel.py holds it to the committed comparison)
SPEC_RULE_ERROR = ("measured on an H100, blind (22 runs of seen transformers and CNNs): fp32 "
                   "2.4% median, 11.4% max; autocast-bf16 10.5% / 20.9% (host-bound: the host "
                   "costs are the H200 machine's)")


def _specs_known(gpu: Any) -> bool:
    peaks = getattr(gpu, "peak_flops", {}) or {}
    return bool(getattr(gpu, "sm_count", 0)) and peaks.get("fp32", 0) > 0 and \
        getattr(gpu, "mem_bw_bytes_per_s", 0) > 0


def donor_for(gpu: Any) -> Any:
    """The donor preset (DONORS) whose specs are nearest ``gpu``'s; None
    where none is calibrated or ``gpu``'s specs are incomplete."""
    from ..hardware import gpu_preset, preset_names
    if not _specs_known(gpu):
        return None
    cands = [gpu_preset(n) for n in preset_names() if n in DONORS]
    cands = [g for g in cands if g.op_calibration and g.sm_count]

    def dist(g: Any) -> float:
        return abs(math.log(g.mem_bw_bytes_per_s / gpu.mem_bw_bytes_per_s)) + \
            abs(math.log(peak_for("bf16", g.peak_flops) / peak_for("bf16", gpu.peak_flops)))
    return min(cands, key=lambda g: (dist(g), g.name), default=None)


def predict_for(gpu: Any, donor: Any = None, cnn: bool = False) -> OpModel | None:
    """A GPU without an op calibration: ``donor``'s (default ``donor_for(gpu)``) fitted op
    model with this GPU's peaks, bandwidth and SM count; None where
    no donor is calibrated or the GPU's SM count, fp32 peak or bandwidth is unknown.
    ``cnn``: carry the donor's CNN kernel model too (a what-if, the note below)."""
    if not _specs_known(gpu):
        return None
    donor = donor if donor is not None else donor_for(gpu)
    if donor is None or not donor.op_calibration:
        return None
    base = load(donor.op_calibration)
    fix = getattr(gpu, "spec_rule", None)  # NOTE [op spec rule fit]
    bw = gpu.mem_bw_bytes_per_s * fix.bandwidth_scale if fix else gpu.mem_bw_bytes_per_s
    fitted = per_byte_scaled(base, base["mem_bw_bytes_per_s"] / bw)
    peaks = {k: gpu.peak_flops.get(k, gpu.peak_flops["fp32"]) for k in fitted["peaks"]}
    source = f"from specs, {donor.name}'s efficiencies ({donor.op_calibration})"
    if fix:
        peaks = {k: v * fix.compute_scale for k, v in peaks.items()}
        source += (f", corrected by public kernel measurements of this card (compute x"
                   f"{fix.compute_scale:g}, bandwidth x{fix.bandwidth_scale:g})")
    kern = _carried_cnn(gpu, donor, peaks, bw) if cnn else None
    if kern is not None:
        source += f", its CNN kernel model ({donor.calibration}) carried the same way"
    return OpModel(fitted, peaks, bw, gpu.sm_count, source, kern)


# NOTE [op spec rule cnn]
# The rule does not carry the donor's CNN kernel model (NOTE [op model]); ``cnn=True`` is
# the what-if that does: this GPU's peaks (times ``compute_scale``), SM count and
# bandwidth, per-byte costs scaled as above. Decided before held-out data were read
# (experiments/op_model/cnn_carry.py): on NeuSight's kept-apart fp32 convolutions of five
# pre-Hopper cards it is 11-31 points worse in median than the op classes but on the T4
# (3 better, its max 62 points worse); on the seen H100 CNNs 4.8% against 2.5% median.
def _carried_cnn(gpu: Any, donor: Any, peaks: dict[str, float], bw: float) -> Any:
    seen = replace(gpu, peak_flops=peaks, mem_bw_bytes_per_s=bw)  # as the op rule sees it
    return cnn_predict_for(seen, donor, "fp32", scale_bandwidth=True)


def spec_rule_note(gpu: Any) -> str:
    """What is known of the spec rule's error for ``gpu``: measured where it differs from
    its donor in bandwidth alone, per kernel where it is corrected, else not."""
    donor = donor_for(gpu)
    if donor is None:
        return "no calibrated GPU to time it from"
    same = gpu.sm_count == donor.sm_count and all(
        gpu.peak_flops.get(k) == donor.peak_flops.get(k) for k in ("fp32", "tf32", "bf16", "fp16"))
    if same:
        return f"from {donor.name}, whose compute it shares; {SPEC_RULE_ERROR}"
    fix = getattr(gpu, "spec_rule", None)
    if fix:
        return (f"from {donor.name}, its peaks x{fix.compute_scale:g} and bandwidth "
                f"x{fix.bandwidth_scale:g} as fitted to {fix.records} public kernel timings "
                "of this card (fp32 GEMMs and convolutions; the errors on those kept apart: "
                "docs/cost-model.md); whole models on it not measured")
    return (f"from {donor.name}, whose compute peaks or SM count it does not share: not "
            "measured (the rule's one measurement, an H100, differs from the H200 in bandwidth "
            "alone; the CNN kernel model's like rule was 38-67% median off on older "
            "architectures, docs/cost-model.md)")


def main(argv: list[str] | None = None) -> int:
    """python -m vdnnsim.costs.ops PRESET OUT RAW...: fit the op calibrations RAW against
    PRESET's specs."""
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
    if "mix" in out["host"]:
        print("host mixes (fwd, bwd factor, sequences):", out["host"]["mix"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
