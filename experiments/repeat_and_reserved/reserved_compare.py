"""The worst reserved-memory runs of both validation sets, measured again in fresh
processes: the predicted reserved peak against the original measurement, the new one, and
one step's own reserved peak (from an emptied cache, NOTE [measurement]).

    .venv/bin/python experiments/repeat_and_reserved/reserved_compare.py
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim, from any folder
TRACES = ROOT / "traces"
DATA = TRACES / "h200_reserved_remeasured"
GIB = 2**30


def main() -> int:
    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.trace.io import load_trace
    from vdnnsim.measured.validate import POLICY_MAP

    gpu = resolve_gpu("h200")
    first = {}
    for folder in ("h200_torchvision", "h200_torchvision_heldout"):
        for r in json.loads((TRACES / folder / "measurements.json").read_text()):
            key = (r["model"], r["batch_size"], r["policy"], r.get("memory_cap_bytes"))
            first[key] = (r, folder)
    print(f"{'model':18s} {'batch':>5s} {'policy':9s} {'cap':>4s} {'predicted':>9s} "
          f"{'first':>15s} {'again':>15s} {'one step':>15s}  (GiB, error of the prediction)")
    moved, errs_first, errs_step = [], [], []
    for r in json.loads((DATA / "measurements.json").read_text()):
        cap = r.get("memory_cap_bytes")
        old, folder = first[(r["model"], r["batch_size"], r["policy"], cap)]
        name = r["model"].split(":")[1]
        trace = load_trace(TRACES / folder / f"{name}_b{r['batch_size']}.yaml")
        p = run_trace(trace, gpu, POLICY_MAP[r["policy"]], memory_bytes=cap,
                      record=False).peak_footprint_bytes
        cols = [old["peak_reserved_bytes"], r["peak_reserved_bytes"],
                r["reserved_one_step_bytes"]]
        cells = " ".join(f"{c / GIB:6.2f} ({p / c - 1:+6.1%})" for c in cols)
        print(f"{name:18s} {r['batch_size']:5d} {r['policy']:9s} "
              f"{'-' if cap is None else f'{cap / GIB:.0f}':>4s} {p / GIB:9.2f} {cells}")
        moved.append(abs(cols[1] / cols[0] - 1))
        errs_first.append(abs(p / cols[0] - 1))
        errs_step.append(abs(p / cols[2] - 1))
    print(f"the same run measured twice differs by {statistics.median(moved):.1%} at the "
          f"median, {max(moved):.1%} at most; the prediction's error: {statistics.median(errs_first):.1%}"
          f" median, {max(errs_first):.1%} max against the first measurement, "
          f"{statistics.median(errs_step):.1%} and {max(errs_step):.1%} against one step's own")
    return 0


if __name__ == "__main__":
    sys.exit(main())
