"""docs/cost-model/per_class.png: per layer and pass, the calibrated kernel model's time
(meta-device trace, `vdnnsim trace --model ... --gpu h200`) against the time measured in
place on the H200 (the profiled traces of the validation set, traces/h200_torchvision, and of issue 11's
held-out set, traces/h200_torchvision_heldout), one panel per op class, with each class's median
error. The profiled traces were never used to fit the model (NOTE [kernel model]).

    .venv/bin/python experiments/kernel_model/plot_kernel_model.py [CACHE_DIR]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from vdnnsim.api import resolve_gpu  # noqa: E402
from vdnnsim.gpu.profile.layers import synthesize_model  # noqa: E402
from vdnnsim.trace import load_trace, save_trace, trace_from_dict  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SETS = ["traces/h200_torchvision", "traces/h200_torchvision_heldout"]
CLASSES = ["conv", "conv (depthwise)", "linear", "batch norm", "activation", "pooling",
           "add / concat / mul", "other"]


def op_class(layer) -> str:
    k = layer.kind
    if k == "conv":
        g = layer.attrs.get("groups", 1)
        return "conv (depthwise)" if g > 1 and g == layer.attrs.get("in_channels") else "conv"
    return {"fc": "linear", "bn": "batch norm", "relu": "activation", "maxpool": "pooling",
            "avgpool": "pooling", "add": "add / concat / mul", "concat": "add / concat / mul",
            "mul": "add / concat / mul"}.get(k, "other")


def main() -> int:
    cache = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/vdnn_kernel_model")
    gpu = resolve_gpu("h200")
    pts: dict[str, list[tuple[float, float, str]]] = {c: [] for c in CLASSES}
    for d in SETS:
        for f in sorted((ROOT / d).glob("*.yaml")):
            prof = load_trace(f)
            spec = f"torchvision:{prof.name}"
            meta_path = cache / d.replace("/", "_") / f.name
            if not meta_path.exists():
                meta_path.parent.mkdir(parents=True, exist_ok=True)
                save_trace(trace_from_dict(synthesize_model(spec, prof.batch_size, gpu), spec),
                           meta_path)
            meta = {x.id: x for x in load_trace(meta_path).layers}
            for x in prof.layers:
                m = meta.get(x.id)
                if m is None or not x.algos:
                    continue
                a, b = x.algos[0], m.algos[0]
                for meas, pred, pas in ((a.fwd_ns, b.fwd_ns, "fwd"), (a.bwd_ns, b.bwd_ns, "bwd")):
                    if meas > 1000 and pred > 0:  # below 1 us: a view or no kernel
                        pts[op_class(x)].append((meas / 1e3, pred / 1e3, pas))
    fig, axes = plt.subplots(2, 4, figsize=(16, 8))
    for ax, c in zip(axes.flat, CLASSES):
        v = pts[c]
        for pas, col in (("fwd", "tab:blue"), ("bwd", "tab:orange")):
            xs = [m for m, _, p in v if p == pas]
            ys = [p_ for _, p_, p in v if p == pas]
            ax.scatter(xs, ys, s=6, alpha=0.5, color=col, label=pas)
        if v:
            lo = min(min(m, p) for m, p, _ in v)
            hi = max(max(m, p) for m, p, _ in v)
            ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
            med = statistics.median(abs(p / m - 1) for m, p, _ in v)
            tot = sum(p for _, p, _ in v) / sum(m for m, _, _ in v) - 1
            ax.set_title(f"{c}: median |err| {med:.0%}, sum {tot:+.0%} ({len(v)})", fontsize=9)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured in place (us)", fontsize=8)
        ax.set_ylabel("kernel model (us)", fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle("Calibrated kernel model (h200) against per-layer times profiled on the H200 "
                 "(validation and issue 11's held-out sets; fitted on microbenchmarks only)",
                 fontsize=10)
    fig.tight_layout()
    out = ROOT / "docs/cost-model/per_class.png"
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")
    for c in CLASSES:
        v = pts[c]
        if v:
            print(f"{c:20s} n={len(v):5d} median |err| "
                  f"{statistics.median(abs(p / m - 1) for m, p, _ in v):.1%} "
                  f"sum {sum(p for _, p, _ in v) / sum(m for m, _, _ in v) - 1:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
