"""How well a GPU with no calibration of its own is predicted from its specs (issue 29;
NOTE [spec rule] in vdnnsim/costs/kernel.py): the two rules vdnnsim has, held against data kept
apart from both.

- 'analytic': the roofline cost model with the preset's peaks (docs/cost-model.md, what
  every preset without a `calibration:` uses), each layer's fastest algorithm, Winograd
  offered where the card's cuDNN had it.
- 'donor': `kernelmodel.predict_for(gpu, h200)`, the H200's fitted efficiencies with the
  card's peaks, DRAM bandwidth and SM count.

Against: (1) published cuDNN timings of two old cards (traces/published/cnn_benchmarks.json:
J. Johnson's cnn-benchmarks, Torch7 and cuDNN 5.0.5, batch 16, forward and backward of
VGG-19 and ResNet-18/34/50/101/152; never used to fit either rule); (2) the paper's own
card and library (convnet-benchmarks' Torch7 runs on a Titan X with cuDNN R4: AlexNet,
OverFeat, VGG-A, GoogLeNet at batch 64-128; never used to fit either rule); (3) the H200's own
calibrated kernel model on the validation set's fp32 baselines (traces/h200_torchvision, GPU time of
forward and backward), which is the H200 "predicted from specs alone against its own
calibration". Nothing here is fitted: the script only sums layer times.

    .venv/bin/python experiments/kernel_model/spec_rule.py            # prints the tables (a minute)
    .venv/bin/python experiments/kernel_model/spec_rule.py --write    # and docs/cost-model/spec_rule.json
    .venv/bin/python experiments/kernel_model/spec_rule.py --scale-bandwidth   # 'donor' with the op
        # model's bandwidth scaling too (NOTE [op spec rule]); prints only, writes nothing
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

from vdnnsim.api import resolve_gpu
from vdnnsim.gpu.probe.fx import probe
from vdnnsim.gpu.model.build import build_model
from vdnnsim.costs.fits import _totals
from vdnnsim.gpu.profile.layers import _calibrated, _gradient_sums
from vdnnsim.costs.kernel import for_gpu
from vdnnsim.costs.kernel import predict_for as _predict_for

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "cost-model" / "spec_rule.json"  # the table docs/cost-model.md quotes


def _probe(spec: str, batch: int):
    with torch.device("meta"):
        model, shape, name = build_model(spec)
    return probe(copy.deepcopy(model), shape, batch, "meta", name=name)


def analytic_ms(p, gpu) -> tuple[float, float]:
    """Forward and backward ms: each layer's fastest algorithm by the analytic model (the
    sums the published fit makes, calibration_fits._totals)."""
    return _totals({"net": p}, gpu)["net"]


def kernel_ms(p, km) -> tuple[float, float]:
    """Forward and backward ms by a kernel model, gradient sums included (as a trace)."""
    times = [_calibrated(n, km, "fp32") for n in p.nodes]
    sums = _gradient_sums(p, km, "fp32")
    f = sum(t[0] for t in times)
    b = sum(t[1] for t in times) + sum(extra for extra, _ in sums.values())
    return f / 1e6, b / 1e6


def published_rows() -> list[dict]:
    src = json.loads((ROOT / "traces/published/cnn_benchmarks.json").read_text())
    h200 = resolve_gpu("h200")
    rows = []
    probes = {n: _probe(f"torchvision:{n}", src["batch_size"])
              for n in next(iter(src["gpus"].values()))}
    for g, nets in src["gpus"].items():
        card = replace(resolve_gpu(g), winograd=True)  # cuDNN 5.0.5 had Winograd
        donor = predict_for(card, h200)
        for n, v in nets.items():
            fwd, bwd = v["forward_ms"], v["total_ms"] - v["forward_ms"]
            af, ab = analytic_ms(probes[n], card)
            df, db = kernel_ms(probes[n], donor)
            rows.append({"gpu": g, "network": n, "batch_size": src["batch_size"],
                         "measured_ms": [fwd, round(bwd, 2)],
                         "analytic_ms": [round(af, 2), round(ab, 2)],
                         "donor_ms": [round(df, 2), round(db, 2)]})
    return rows


def _probe_zoo(spec, batch: int):
    """A zoo-convention network (vdnnsim.network.spec.NetworkSpec) probed on the meta device."""
    from vdnnsim.gpu.model.build import ZooModule
    with torch.device("meta"):
        model = ZooModule(spec)
    return probe(copy.deepcopy(model), tuple(spec.input), batch, "meta", name=spec.name)


def paper_era_rows() -> list[dict]:
    """(3) The paper's own card and library: convnet-benchmarks' Torch7 runs on a Titan X
    with cuDNN R4 (vdnnsim/data/reference/convnet_benchmarks_titanx.json, NOTE [cudnn4
    check]), each layer's fastest algorithm, no Winograd (cuDNN 4 had none). The zoo's
    builders of the same benchmark files; VGG-A from vdnnsim.paper.cudnn4. The probe's
    first conv computes no input gradient where Torch's does (a few percent of a step)."""
    from vdnnsim.network.zoo import zoo_network
    from vdnnsim.paper import cudnn4
    card = resolve_gpu("titanx_maxwell")
    donor = predict_for(card, resolve_gpu("h200"))
    rows = []
    for n, v in cudnn4.runs()["cudnn_r4"]["networks"].items():
        p = _probe_zoo(cudnn4.vgg_a() if n == "vgg_a" else zoo_network(n), v["batch_size"])
        af, ab = analytic_ms(p, card)
        df, db = kernel_ms(p, donor)
        rows.append({"gpu": "titanx_maxwell", "network": n, "batch_size": v["batch_size"],
                     "measured_ms": [v["forward"],
                                     round(v["backward_data"] + v["backward_filter"], 2)],
                     "analytic_ms": [round(af, 2), round(ab, 2)],
                     "donor_ms": [round(df, 2), round(db, 2)]})
    return rows


def h200_rows() -> list[dict]:
    meas = json.loads((ROOT / "traces/h200_torchvision/measurements.json").read_text())
    cases = sorted({(r["model"], r["batch_size"]) for r in meas
                    if r["policy"] == "baseline" and r["dtype"] == "fp32"
                    and r.get("memory_cap_bytes") is None})
    gpu = resolve_gpu("h200")
    km = for_gpu(gpu)
    rows = []
    for spec, batch in cases:
        p = _probe(spec, batch)
        af, ab = analytic_ms(p, gpu)
        cf, cb = kernel_ms(p, km)
        rows.append({"gpu": "h200", "network": spec, "batch_size": batch,
                     "calibrated_ms": [round(cf, 2), round(cb, 2)],
                     "analytic_ms": [round(af, 2), round(ab, 2)]})
    return rows


def _err(pred: float, ref: float) -> float:
    return pred / ref - 1


def report(pub: list[dict], h200: list[dict], era: list[dict]) -> list[str]:
    lines = ["Old cards, published cuDNN 5 timings (batch 16), error of each rule, "
             "forward / backward:"]
    groups = [(f"  {g}", [x for x in pub if x["gpu"] == g])
              for g in dict.fromkeys(r["gpu"] for r in pub)]
    groups.append(("  titanx_maxwell, cuDNN 4 (convnet-benchmarks R4, Torch7, batch 64-128):",
                   era))
    for title, rows in groups:
        lines.append(title)
        errs: dict[str, list[float]] = {"analytic": [], "donor": []}
        for r in rows:
            cells = []
            for rule in ("analytic", "donor"):
                e = [_err(p, m) for p, m in zip(r[f"{rule}_ms"], r["measured_ms"])]
                errs[rule] += e
                cells.append(f"{rule} {e[0]:+5.0%} / {e[1]:+5.0%}")
            lines.append(f"    {r['network']:10s} measured {r['measured_ms'][0]:7.1f} / "
                         f"{r['measured_ms'][1]:7.1f} ms   " + "   ".join(cells))
        lines.append("    median |error|: " + ", ".join(
            f"{k} {statistics.median(abs(x) for x in v):.0%} (max {max(abs(x) for x in v):.0%})"
            for k, v in errs.items()))
    lines.append("H200 from specs alone (analytic) against its own calibration, fwd+bwd GPU "
                 "time of the validation set's fp32 baselines:")
    errs_h = []
    for r in h200:
        c, a = sum(r["calibrated_ms"]), sum(r["analytic_ms"])
        errs_h.append(_err(a, c))
        lines.append(f"    {r['network']:26s} ({r['batch_size']:3d}) calibrated {c:7.1f} ms, "
                     f"analytic {a:7.1f} ms ({errs_h[-1]:+.0%})")
    lines.append(f"    median |error| {statistics.median(abs(x) for x in errs_h):.0%} "
                 f"(max {max(abs(x) for x in errs_h):.0%})")
    return lines


SCALE = False  # --scale-bandwidth: the donor rule as the op model's (NOTE [op spec rule])


def predict_for(gpu, donor, dtype: str = "fp32"):
    return _predict_for(gpu, donor, dtype, scale_bandwidth=SCALE)


def main(argv: list[str]) -> int:
    global SCALE
    SCALE = "--scale-bandwidth" in argv
    if SCALE and "--write" in argv:
        print("--write goes without --scale-bandwidth (the JSON is the shipped rule's)",
              file=sys.stderr)
        return 2
    pub, h200, era = published_rows(), h200_rows(), paper_era_rows()
    for line in report(pub, h200, era):
        print(line)
    if "--write" in argv:
        OUT.write_text(json.dumps({"published": pub, "h200": h200, "paper_era": era},
                                  indent=1) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
