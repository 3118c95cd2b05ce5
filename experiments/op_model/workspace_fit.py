"""Convolution workspaces (NOTE [conv workspaces]): fitted on the H100's op calibration
grids, checked on the H200's profiled layer traces, which no fitted case comes from.

- Fit: ``traces/h100_op_calibration/h100_ops_{cnn,video}_{fp32,bf16}.json``, every
  convolution pass's measured workspace (cuDNN 9.19, cudnn.benchmark) over its op bytes,
  the median per class.
- Check: the profiled torchvision traces (``traces/h200_torchvision``, ``_heldout``: the
  same cuDNN, an H200, the same SM architecture as the H100) give every Conv2d's measured
  forward and backward workspace. Per trace: the model's largest workspace and its sum over
  the convolutions' passes against the measured ones. The largest is what a plan must
  leave room for.

    python experiments/op_model/workspace_fit.py            (the fit and the check)
    python experiments/op_model/workspace_fit.py --write    (writes the shipped table)
    python experiments/op_model/workspace_fit.py --check    (the shipped table is the fit)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim (experiments/README.md)

from vdnnsim.costs.workspaces import FORMAT, SHIPPED, fit_ratios, workspace_bytes  # noqa: E402
from vdnnsim.trace.io import load_trace  # noqa: E402

CAL = ROOT / "traces/h100_op_calibration"
FILES = ("h100_ops_cnn_fp32.json", "h100_ops_cnn_bf16.json", "h100_ops_video_fp32.json",
         "h100_ops_video_bf16.json")
CHECK = ("h200_torchvision", "h200_torchvision_heldout")
OUT = ROOT / "vdnnsim/data/calibration" / SHIPPED
MiB = 2**20


def fit() -> dict:
    records, software = [], {}
    for name in FILES:
        d = json.loads((CAL / name).read_text())
        records += d["records"]
        software = d.get("software", software)
    return {"format": FORMAT, "version": 1,
            "source": {"files": [f"traces/h100_op_calibration/{n}" for n in FILES],
                       "gpu": "NVIDIA H100 80GB HBM3", "software": software,
                       "fitted_by": "experiments/op_model/workspace_fit.py"},
            "classes": fit_ratios(records)}


def features(trace, layer) -> dict:
    """A profiled Conv2d layer's op features, as the op probe would record them."""
    a = layer.attrs
    g = a.get("groups", 1)
    size = {t.id: t.size_bytes for t in trace.tensors.values()}
    nbytes = size[layer.inputs[0]] + layer.weight_bytes + size[layer.outputs[0]]
    return {"op": "convolution", "dt": "fp32" if trace.dtype == "fp32" else "bf16",
            "b": g, "n": a["out_channels"] // g, "c": a["in_channels"],
            "kh": a["kernel"][0], "kw": a["kernel"][-1], "stride": a["stride"][0],
            "bytes": nbytes}


def check(classes: dict) -> None:
    print("| trace | convs | measured largest MiB | predicted | measured sum MiB | predicted |")
    print("|---|---|---|---|---|---|")
    errs_max, errs_sum = [], []
    for folder in CHECK:
        for path in sorted((ROOT / "traces" / folder).glob("*.yaml")):
            trace = load_trace(path)
            meas, pred = [], []
            for layer in trace.layers:
                if layer.kind != "conv" or not layer.attrs.get("kernel"):
                    continue
                f = features(trace, layer)
                a = layer.algos[0]
                meas += [a.fwd_workspace_bytes, a.bwd_workspace_bytes]
                pred += [workspace_bytes(f, "fwd", classes) or 0,
                         workspace_bytes(f, "bwd", classes) or 0]
            if not meas or not max(meas):
                continue
            em, es = max(pred) / max(meas) - 1, sum(pred) / sum(meas) - 1
            errs_max.append(em)
            errs_sum.append(es)
            print(f"| {folder.removeprefix('h200_')}/{path.stem} | {len(meas) // 2} | "
                  f"{max(meas) / MiB:.0f} | {max(pred) / MiB:.0f} ({em:+.0%}) | "
                  f"{sum(meas) / MiB:.0f} | {sum(pred) / MiB:.0f} ({es:+.0%}) |")
    for what, e in (("largest", errs_max), ("sum", errs_sum)):
        print(f"{what}: {len(e)} traces, |error| median {statistics.median(map(abs, e)):.0%}, "
              f"signed median {statistics.median(e):+.0%}, "
              f"under by more than 25% in {sum(x < -0.25 for x in e)}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    table = fit()
    if a.check:
        same = json.loads(OUT.read_text())["classes"] == table["classes"]
        print(f"{OUT.name}: {'the fit' if same else 'NOT the fit'}")
        return 0 if same else 1
    if a.write:
        OUT.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print("| class | cases | with a workspace | ratio (median) | p90 |")
    print("|---|---|---|---|---|")
    for cls, c in table["classes"].items():
        print(f"| {cls} | {c['cases']} | {c['with_workspace']} | {c['ratio']:.3f} | "
              f"{c['p90']:.2f} |")
    print()
    check(table["classes"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
