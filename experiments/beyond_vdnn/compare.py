"""UVM, vDNN, its later variants, recompute and the planner side by side (docs/beyond-vdnn.md):
the paper's VGG-16 (256) on the K40's 12 GiB, and the H200's profiled ResNet-50 (256) and
VGG-16 (256) under a 12 GiB cap. Prints the table; ``--plot PATH`` also draws it.
Run from the repository root: python experiments/beyond_vdnn/compare.py [--plot PATH]"""

from __future__ import annotations

import argparse
from pathlib import Path

from vdnnsim.api import build_trace, resolve_gpu, run_trace
from vdnnsim.engine.plan import liveness
from vdnnsim.engine import replay
from vdnnsim.planners.greedy import search_plan
from vdnnsim.trace import load_trace

ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30
POLICIES = [  # (label, policy, options)
    ("vDNN_all(m)", "vdnn_all_m", {}), ("vDNN_conv(p)", "vdnn_conv_p", {}),
    ("vDNN_dyn", "vdnn_dyn", {}), ("vDNN_dyn, no sync", "vdnn_dyn", {"sync": False}),
    ("checkpoint", "checkpoint", {}), ("checkpoint + offload", "checkpoint", {"offload": "all"}),
    ("UVM, 4 KiB, 45 us", "uvm_lru", {}), ("UVM, 2 MiB pages", "uvm_lru",
                                           {"prefetch_bytes": 2 * 2**20}),
]


def setups():
    k40 = resolve_gpu("k40")
    yield "K40, VGG-16 (256), 12 GiB", build_trace("vgg16", 256, k40), k40, "baseline_p"
    h200 = resolve_gpu("h200")
    for name in ("resnet50_b256", "vgg16_b256"):
        t = load_trace(ROOT / "traces/h200_torchvision" / f"{name}.yaml")
        yield f"H200, {t.name} ({t.batch_size}), 12 GiB cap", t, h200, "eager"


def rows():
    out = []
    for title, trace, gpu, base in setups():
        ref = run_trace(trace, gpu, base, record=False).iteration_time_ns  # uncapped
        for label, policy, opts in POLICIES:
            r = run_trace(trace, gpu, policy, opts, memory_bytes=12 * GiB, record=False)
            out.append((title, label, r.fits, r.iteration_time_ns / ref,
                        r.peak_memory_bytes / GiB))
        for method in ("greedy", "milp"):
            plan, _ = search_plan(trace, gpu, 12 * GiB, method=method)
            label = f"planner, {'MILP' if method == 'milp' else method}"
            if plan is None:
                out.append((title, label, False, float("nan"), float("nan")))
                continue
            t = plan.trace if plan.trace is not None else trace  # a batch split reshapes it
            sim = replay(t, gpu, plan, 12 * GiB, liveness(t), record_ops=False)
            out.append((title, label, sim.oom is None, sim.end_ns / ref,
                        sim.peak_live_bytes / GiB))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()
    table = rows()
    last = None
    for title, label, fits, slow, peak in table:
        if title != last:
            print(f"{title}  (time against the uncapped baseline)")
            last = title
        shown = f"{slow:6.2f}x" if fits else "  does not fit"
        print(f"  {label:22s} {shown:>14s}  peak {peak:6.2f} GiB")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        titles = list(dict.fromkeys(t for t, *_ in table))
        fig, axes = plt.subplots(1, len(titles), figsize=(5 * len(titles), 4.2), sharey=False)
        for ax, title in zip(axes, titles):
            part = [r for r in table if r[0] == title]
            labels = [r[1] for r in part]
            vals = [r[3] if r[2] else 0 for r in part]
            bars = ax.barh(labels, vals, color=["#4c72b0" if r[2] else "#cccccc" for r in part])
            for b, r in zip(bars, part):  # a plan that does not fit: named at 1x
                ax.text(b.get_width() if r[2] else 0.85, b.get_y() + b.get_height() / 2,
                        f" {r[3]:.1f}x" if r[2] else "does not fit", va="center", fontsize=8,
                        color="black" if r[2] else "#888888")
            ax.set_xscale("log")
            ax.set_xlim(0.8, max(v for v in vals if v) * 4 if any(vals) else 10)
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("iteration time / uncapped baseline (log)")
            ax.invert_yaxis()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
