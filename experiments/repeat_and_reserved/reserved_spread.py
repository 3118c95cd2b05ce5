"""How far a second measurement of the same runs lands from the first: both validation
sets' uncapped runs measured again (``steady_*.json``) against the measurements
``validate`` reads.

    .venv/bin/python experiments/repeat_and_reserved/reserved_spread.py
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
PAIRS = [("committed set", TRACES / "h200_torchvision" / "measurements.json",
          DATA / "steady_validation.json"),
         ("held-out set", TRACES / "h200_torchvision_heldout" / "measurements.json",
          DATA / "steady_heldout.json")]
KEYS = [("peak allocated", "peak_allocated_bytes"), ("peak reserved", "peak_reserved_bytes"),
        ("step time", "iteration_ms")]


def main() -> int:
    for name, first, again in PAIRS:
        old = {(r["model"], r["batch_size"], r["policy"]): r
               for r in json.loads(first.read_text())
               if r.get("memory_cap_bytes") is None and r.get("fits")}
        pairs = [(old[k], r) for r in json.loads(again.read_text())
                 if (k := (r["model"], r["batch_size"], r["policy"])) in old]
        print(f"{name}: {len(pairs)} runs measured twice")
        for label, key in KEYS:
            moved = sorted(((abs(b[key] / a[key] - 1), a, b) for a, b in pairs),
                           key=lambda x: x[0])
            worst, a, b = moved[-1]
            print(f"  {label:14s} moved {statistics.median(m for m, _, _ in moved):6.1%} at the "
                  f"median, {worst:6.1%} at most ({b['model'].split(':')[1]} "
                  f"({b['batch_size']}) {b['policy']}: {a[key]:.4g} then {b[key]:.4g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
