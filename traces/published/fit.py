"""The paper's GPUs (K40, Titan X Maxwell) calibrated from published timings of cuDNN on
those cards, kept apart from everything `vdnnsim reproduce` judges.

Source: Justin Johnson, cnn-benchmarks (github.com/jcjohnson/cnn-benchmarks, README at
commit 0367b1f): Torch7 with cuDNN 5.0.5 (5005), batch 16, 224x224, forward and
forward+backward milliseconds per network on a "GeForce GTX TITAN X" (Maxwell) and a
"Tesla K40c". (That README's Backward column repeats the Forward one; backward is Total
minus Forward.) Used: VGG-19 and ResNet-18, -34, -50, -101, -152. Not used: AlexNet and
VGG-16, which the paper's figures judge.

The analytic cost model (docs/cost-model.md) has two GPU-wide knobs a calibration can set
without touching any per-algorithm constant: the compute rate (the preset's peak, scaled:
the `peak_flops_scale` override) and the DRAM rate (`mem_bw_bytes_per_s`). For each GPU
this grid-searches both scales for the least squared log error of the forward and
backward totals (12 numbers), the DRAM rate kept at or below the preset's peak, each
network's layers timed with their fastest algorithm (cuDNN's benchmark mode), Winograd
offered as cuDNN 5 did. The paper ran cuDNN 4, without Winograd: `vdnnsim reproduce
--costs published` applies the two scales to the presets as they are (no Winograd), so
the scales stand for the hardware, not the library version.

    .venv/bin/python traces/published/fit.py [--write]

``--write`` stores the result in vdnnsim/data/calibration/published.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ("J. Johnson, cnn-benchmarks, github.com/jcjohnson/cnn-benchmarks README (commit "
          "0367b1f): Torch7, cuDNN 5005, batch 16; VGG-19, ResNet-18/34/50/101/152")
DATA = {  # network: (forward ms, total ms)
    "k40": {"vgg19": (325.18, 1129.65), "resnet18": (51.07, 168.30),
            "resnet34": (95.11, 303.80), "resnet50": (129.21, 449.90),
            "resnet101": (220.92, 797.89), "resnet152": (319.80, 1146.73)},
    "titanx_maxwell": {"vgg19": (93.83, 323.40), "resnet18": (16.97, 53.84),
                       "resnet34": (28.72, 91.94), "resnet50": (56.42, 171.02),
                       "resnet101": (88.30, 260.12), "resnet152": (125.69, 366.97)},
}
SCALES = [round(0.2 * 1.08 ** i, 4) for i in range(40)]  # 0.2 .. about 3.8
MEM_MAX = 1 / 0.70  # the model's DRAM rate is MEM_EFF (0.70) x peak: at most the peak


def totals(probes: dict, gpu) -> dict[str, tuple[float, float]]:
    from vdnnsim.gpu.profile import analytic_algos
    out = {}
    for net, p in probes.items():
        algos = analytic_algos(p, gpu)
        f = sum(min(a["fwd_ns"] for a in opts) for opts in algos.values()) / 1e6
        b = sum(min(a["bwd_ns"] for a in opts) for opts in algos.values()) / 1e6
        out[net] = (f, b)
    return out


def main(argv=None) -> int:
    import torch
    from vdnnsim.api import resolve_gpu
    from vdnnsim.gpu.graph import probe
    from vdnnsim.gpu.models import build_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    probes = {}
    for net in DATA["k40"]:
        with torch.device("meta"):
            model, shape, name = build_model(f"torchvision:{net}")
        probes[net] = probe(copy.deepcopy(model), shape, 16, "meta", name=name)
    result = {"source": SOURCE, "method": "traces/published/fit.py", "gpus": {}}
    for g, data in DATA.items():
        base = replace(resolve_gpu(g), winograd=True)
        best = (math.inf, 1.0, 1.0, {})
        for a in SCALES:
            for m in [x for x in SCALES if x <= MEM_MAX]:
                gpu = replace(base, peak_flops={k: v * a for k, v in base.peak_flops.items()},
                              mem_bw_bytes_per_s=base.mem_bw_bytes_per_s * m)
                t = totals(probes, gpu)
                err = sum(math.log(t[n][0] / f) ** 2 + math.log(t[n][1] / (tot - f)) ** 2
                          for n, (f, tot) in data.items())
                if err < best[0]:
                    best = (err, a, m, t)
        _, a, m, t = best
        plain = totals(probes, base)
        print(f"{g}: compute x{a}, memory x{m}")
        for n, (f, tot) in data.items():
            print(f"  {n:10s} measured fwd {f:7.1f} bwd {tot - f:7.1f} ms | analytic "
                  f"{plain[n][0]:6.1f} {plain[n][1]:6.1f} | calibrated {t[n][0]:6.1f} "
                  f"{t[n][1]:6.1f} ({t[n][0] / f - 1:+.0%} {t[n][1] / (tot - f) - 1:+.0%})")
        result["gpus"][g] = {"peak_flops_scale": a, "mem_bw_scale": m,
                             "fit": {n: {"measured_ms": [f, round(tot - f, 2)],
                                         "calibrated_ms": [round(t[n][0], 2),
                                                           round(t[n][1], 2)]}
                                     for n, (f, tot) in data.items()}}
    if args.write:
        out = ROOT / "vdnnsim/data/calibration/published.json"
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
