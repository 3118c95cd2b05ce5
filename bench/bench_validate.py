"""Validation speed: load the H200 validation set (12 profiled traces) and simulate every
measured run in it, as `vdnnsim validate` does. Reports the median of several repetitions
(after one warm-up) for loading, for the whole table, and per model for one simulated
step under each policy, with the DenseNet-121 / VGG-16 ratio from the same run (432
layers against 41).

    .venv/bin/python bench/bench_validate.py [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench_engine import median_ms  # this folder is on sys.path when run as a script
from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.measured.validate import POLICY_MAP, load_traces, validate

ROOT = Path(__file__).resolve().parents[1] / "traces" / "h200_torchvision"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    gpu = resolve_gpu("h200")
    rows = [{"what": "load 12 traces", "ms": median_ms(lambda: load_traces(ROOT), args.repeat)}]
    rows.append({"what": "validate (table of all runs)",
                 "ms": median_ms(lambda: validate(ROOT, ROOT / "measurements.json"),
                                 args.repeat)})
    traces = load_traces(ROOT)
    per_model = {}
    for (name, batch), trace in sorted(traces.items()):
        if batch != max(b for n, b in traces if n == name):
            continue
        for policy in POLICY_MAP.values():
            ms = median_ms(lambda: run_trace(trace, gpu, policy, record=False), args.repeat)
            rows.append({"what": f"{name} ({batch}) {policy}, {len(trace.layers)} layers",
                         "ms": ms})
            per_model.setdefault(name, []).append(ms)
    for r in rows:
        print(f"{r['what']:48s} {r['ms']:9.1f} ms")
    ratio = statistics.median(per_model["densenet121"]) / statistics.median(per_model["vgg16"])
    print(f"densenet121 / vgg16 per simulated step (median over policies): {ratio:.1f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "ratio": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
