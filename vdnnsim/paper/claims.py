"""Every number of shared/reference/vdnn_paper.md's "Headline results", and how vdnnsim's
study results measure it.

NOTE [reproduction metrics]
The K40 studies are held against the paper's first version (v1), the Titan X studies
against the published one (v3). Baseline memory is the network-wide baseline with the
fastest algorithms, everything included. A GB of the text is 1000 MiB (``PAPER_GB``): the
text's sizes are the figures' MiB bars over 1000. Memory usage and reductions of a policy
count the memory vDNN manages (no weights, no weight gradients), each reduction against
``baseline_p`` (``reference="class"``: against its own class's baseline). "Loses X%" is
1 - oracle time / iteration time, never a slowdown ratio. The share in host memory is
offloaded / (offloaded + peak GPU memory). Each row names its unit (``unit_label``), so no
column mixes a percentage, a ratio and a size. Why each reading: docs/reproduction.md,
"How each number is measured".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from ..errors import ConfigError
from ..units import MiB

GPUS = {"k40": "v1 (K40)", "titanx_maxwell": "v3 (Titan X)"}
# the network the paper's figures show as its "VGG-16": sixteen CONV layers, VGG's model E
# (vdnnsim/paper/layers.py); claims keep the paper's name
VGG16 = "vgg19"
# and as its "OverFeat": the accurate model, not convnet-benchmarks' fast one (Fig. 4's
# feature maps, NOTE [paper layers])
OVERFEAT = "overfeat_accurate"
SIX = [("alexnet", 128), (OVERFEAT, 128), ("googlenet", 128), (VGG16, 64),
       (VGG16, 128), (VGG16, 256)]
DEEP = ["vgg116", "vgg216", "vgg316", "vgg416"]
Frames = dict[str, pd.DataFrame]


@dataclass(frozen=True)
class Claim:
    id: str
    gpu: str
    what: str
    paper: float
    unit: str  # GB, %, count, yes/no
    tolerance: float  # rel for GB, points for %, exact for count and yes/no
    measure: Callable[[Frames], float]
    note: str = ""

    @property
    def version(self) -> str:
        return GPUS[self.gpu]

    def met(self, value: float) -> bool:
        if self.unit == "GB":
            return abs(value - self.paper) <= self.tolerance * self.paper
        if self.unit == "%":
            return abs(value - self.paper) <= self.tolerance
        if self.unit == "at most GB":
            return value <= self.paper * (1 + self.tolerance)
        return value == self.paper

    @property
    def unit_label(self) -> str:
        """The unit of the claim's row: what a percentage is of, and GB for sizes."""
        if self.unit in ("GB", "at most GB"):
            return "GB"
        if self.unit == "%":
            for key, label in PERCENT_KINDS:
                if key in self.id:
                    return label
            raise ValueError(f"claim {self.id}: say what its percentage is of (PERCENT_KINDS)")
        return self.unit

    def tolerance_text(self) -> str:
        if self.unit == "GB":
            return f"±{self.tolerance:.0%} of paper"
        if self.unit == "%":
            return f"±{self.tolerance:g} pts"
        if self.unit == "at most GB":
            return f"≤ paper +{self.tolerance:.0%}"
        return "exact"


# what a claim's percentage is of, by a part of its id
PERCENT_KINDS = (("loss", "% loss"), ("reduction.", "% cut"), ("host_share", "% on host"))


def row(f: Frames, study: str, net: str, batch: int, gpu: str, policy: str) -> pd.Series:
    df = f[study]
    sel = df[(df.network == net) & (df.batch_size == batch) & (df.gpu == gpu)
             & (df.policy == policy)]
    if len(sel) != 1:
        raise ConfigError(f"{study}.yaml: {len(sel)} runs for {net} ({batch}) on {gpu} under "
                          f"{policy}, not one: the paper's claims need the shipped studies")
    return sel.iloc[0]


def reduction(f: Frames, net: str, batch: int, gpu: str, policy: str, what: str,
              reference: str = "baseline_p") -> float:
    """Percent cut of peak ('peak') or time-weighted average ('avg') managed memory (the
    weights and their gradients left out) against ``reference``: 'baseline_p', or 'class'
    for the baseline of the policy's own algorithm class."""
    if reference == "class":
        base_policy = "baseline_m" if policy.endswith("_m") else "baseline_p"
    else:
        base_policy = reference
    r = row(f, "conventional_policies", net, batch, gpu, policy)
    b = row(f, "conventional_policies", net, batch, gpu, base_policy)
    key = ("peak" if what == "peak" else "avg") + "_managed_bytes"
    return 100 * (1 - r[key] / b[key])


def loss(r: pd.Series) -> float:
    return 100 * (1 - 1 / r.slowdown)


# the unit of the text's sizes: 1000 of the figures' MB, which are MiB
PAPER_GB = 1000 * MiB


def _gb(x: float) -> float:
    return x / PAPER_GB


def build_claims(reference: str = "baseline_p") -> list[Claim]:
    """Every claim; ``reference`` is the baseline reductions are taken against."""
    out: list[Claim] = []
    add = out.append
    bm = "baseline_memory"
    for g in GPUS:
        for net, b, gb in [("alexnet", 128, 1.1), (VGG16, 128, 15.0), (VGG16, 256, 28.0),
                           (VGG16, 32, 4.9), ("vgg416", 32, 67.1)]:
            if g == "k40" and not (net == VGG16 and b == 256):
                continue  # v1 states only the VGG-16 (256) figure
            name = "vgg16" if net == VGG16 else net
            add(Claim(f"baseline.{name}_{b}", g, f"{name} ({b}) baseline memory", gb, "GB", 0.10,
                      lambda f, net=net, b=b, g=g:
                      _gb(row(f, bm, net, b, g, "baseline_p").peak_memory_bytes)))
    g = "titanx_maxwell"
    add(Claim("baseline.not_fitting", g, "networks of the ten that do not fit 12 GB", 6,
              "count", 0, lambda f: float((~f[bm][(f[bm].gpu == g)
                                                  & ~((f[bm].network == VGG16)
                                                      & (f[bm].batch_size == 32))].fits).sum())))
    add(Claim("baseline.vgg16_only_64_fits", g, "VGG-16: of batch 64/128/256 only 64 fits 12 GB",
              1, "yes/no", 0, lambda f: float(
                  bool(row(f, bm, VGG16, 64, g, "baseline_p").fits)
                  and not row(f, bm, VGG16, 128, g, "baseline_p").fits
                  and not row(f, bm, VGG16, 256, g, "baseline_p").fits)))

    for g, nets in [("k40", [("alexnet", 61), ("overfeat", 83)]),
                    ("titanx_maxwell", [("alexnet", 89), ("overfeat", 91), ("googlenet", 95)])]:
        for label, pct in nets:
            net = OVERFEAT if label == "overfeat" else label
            add(Claim(f"reduction.{label}_avg", g, f"{label} (128) average memory cut, vDNN_all(m)",
                      pct, "%", 5, lambda f, net=net, g=g:
                      reduction(f, net, 128, g, "vdnn_all_m", "avg", reference=reference)))
    g = "titanx_maxwell"
    add(Claim("reduction.vgg16_256_dyn_avg", g, "VGG-16 (256) average memory cut, vDNN_dyn", 90,
              "%", 5, lambda f: reduction(f, VGG16, 256, g, "vdnn_dyn", "avg", reference=reference)))
    for policy, mx, av in [("vdnn_all_m", 73, 93), ("vdnn_all_p", 64, 90),
                           ("vdnn_conv_p", 52, 76), ("vdnn_dyn", 49, 69)]:
        for what, pct in (("peak", mx), ("avg", av)):
            add(Claim(f"reduction.six_{policy}_{what}", g,
                      f"{policy}: {'maximum' if what == 'peak' else 'average'} memory cut, "
                      "mean of six networks", pct, "%", 5,
                      lambda f, policy=policy, what=what: sum(
                          reduction(f, n, b, g, policy, what, reference=reference) for n, b in SIX) / 6))

    cp = "conventional_policies"
    for policy, avg, worst in [("vdnn_all_m", 58, 65), ("vdnn_conv_m", 55, 63),
                               ("vdnn_dyn", 3, 18)]:
        add(Claim(f"speed.six_{policy}_mean_loss", g, f"{policy}: mean performance loss, six "
                  "networks", avg, "%", 10, lambda f, policy=policy: sum(
                      loss(row(f, cp, n, b, g, policy)) for n, b in SIX) / 6))
        add(Claim(f"speed.six_{policy}_worst_loss", g, f"{policy}: worst performance loss, six "
                  "networks", worst, "%", 10, lambda f, policy=policy: max(
                      loss(row(f, cp, n, b, g, policy)) for n, b in SIX)))
    for g, pct in (("k40", 22), ("titanx_maxwell", 18)):
        add(Claim("speed.vgg16_256_dyn_loss", g, "VGG-16 (256) performance loss, vDNN_dyn", pct,
                  "%", 10, lambda f, g=g: loss(row(f, cp, VGG16, 256, g, "vdnn_dyn"))))
        add(Claim("fit.vgg16_256_dyn", g, "vDNN_dyn trains VGG-16 (256) in 12 GB", 1, "yes/no",
                  0, lambda f, g=g: float(bool(row(f, cp, VGG16, 256, g, "vdnn_dyn").fits))))
    g = "titanx_maxwell"
    add(Claim("speed.vgg16_128_all_m_loss", g, "VGG-16 (128) performance loss, vDNN_all(m)",
              61, "%", 10, lambda f: loss(row(f, cp, VGG16, 128, g, "vdnn_all_m")),
              note="the paper: '61% slower', read as a loss like its other performance numbers"))
    add(Claim("memory.vgg16_128_all_m_peak", g, "VGG-16 (128) vDNN_all(m) uses at most 4.8 GB",
              4.8, "at most GB", 0.10,
              lambda f: _gb(row(f, cp, VGG16, 128, g, "vdnn_all_m").peak_managed_bytes),
              note="managed memory (without weights)"))
    add(Claim("offload.vgg16_256_all", g, "vDNN_all offloads up to 16 GB for VGG-16 (256)", 16,
              "GB", 0.10,
              lambda f: _gb(row(f, cp, VGG16, 256, g, "vdnn_all_p").offloaded_bytes)))

    dv = "deep_vgg"
    add(Claim("deep.dyn_trains_all", g, "vDNN_dyn trains all four very deep VGGs (32)", 4,
              "count", 0, lambda f: float(sum(bool(row(f, dv, n, 32, g, "vdnn_dyn").fits)
                                              for n in DEEP))))
    add(Claim("deep.dyn_max_gpu", g, "very deep VGGs under vDNN_dyn use at most 4.2 GB", 4.2,
              "at most GB", 0.10, lambda f: max(
                  _gb(row(f, dv, n, 32, g, "vdnn_dyn").peak_managed_bytes) for n in DEEP),
              note="managed memory: VGG-416's weights and their gradients alone are 4.4 GB"))
    for what, pct, agg in (("min", 81, min), ("max", 92, max)):
        add(Claim(f"deep.host_share_{what}", g, f"share of allocations in host memory, {what} "
                  "over the very deep VGGs", pct, "%", 5, lambda f, agg=agg: agg(
                      100 * r.offloaded_bytes / (r.offloaded_bytes + r.peak_memory_bytes)
                      for r in (row(f, dv, n, 32, g, "vdnn_dyn") for n in DEEP))))
    add(Claim("deep.dyn_worst_loss", g, "very deep VGGs: no noticeable loss under vDNN_dyn", 0,
              "%", 5, lambda f: max(loss(row(f, dv, n, 32, g, "vdnn_dyn")) for n in DEEP),
              note="'no noticeable' read as 0% ± 5 points"))
    return out


CLAIMS: list[Claim] = build_claims()
STUDIES = ("baseline_memory", "conventional_policies", "deep_vgg")
