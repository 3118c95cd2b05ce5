"""Issue 28, NOTE [host issue]: ConvNeXt-T (128) replayed as profiled and with batch 64's
kernel counts for the three layers whose backward passes the profile counts at 1,060
kernels (a diagnosis of the launch-queue model, nothing kept): step time, when the host
is done issuing, and the reserved peak, per policy.

    .venv/bin/python experiments/h200_issue28/convnext_counts.py
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vdnnsim.api import resolve_gpu, run_trace  # noqa: E402
from vdnnsim.trace.io import trace_from_dict  # noqa: E402

DATA = ROOT / "traces" / "h200_bwdws" / "heldout"


def main() -> int:
    g = resolve_gpu("h200")
    d64 = yaml.safe_load((DATA / "convnext_tiny_b64.yaml").read_text())
    counts = {layer["id"]: layer.get("kernels_bwd") for layer in d64["layers"]}
    data = yaml.safe_load((DATA / "convnext_tiny_b128.yaml").read_text())
    fixed = copy.deepcopy(data)
    moved = []
    for layer in fixed["layers"]:
        if (layer.get("kernels_bwd") or 0) > 1000:
            moved.append(f"{layer['id']} {layer['kernels_bwd']} -> {counts[layer['id']]}")
            layer["kernels_bwd"] = counts[layer["id"]]
    print("batch 64's backward kernel counts for: " + "; ".join(moved))
    print(f"{'trace':12s} {'policy':12s} {'step ms':>8s} {'host done ms':>12s} {'reserved GiB':>12s}")
    for name, d in (("as profiled", data), ("b64 counts", fixed)):
        for policy in ("eager", "vdnn_conv_p", "vdnn_all_p"):
            r = run_trace(trace_from_dict(d), g, policy, record=False)
            print(f"{name:12s} {policy:12s} {r.iteration_time_ns / 1e6:8.1f} "
                  f"{r.host_issue_time_ns / 1e6:12.1f} {r.peak_footprint_bytes / 2**30:12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
