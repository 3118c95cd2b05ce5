"""How far apart two measurements of one host-bound step are on the device machine, and
where each re-profiled trace's prediction falls among them.

    .venv/bin/python experiments/host_costs/noise_spread.py
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim, from any folder
DATA = ROOT / "traces" / "h200_host_noise"
CASES = [("shufflenet_v2_x1_0", 64), ("regnet_y_800mf", 32)]


def main() -> int:
    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.trace.io import load_trace

    gpu = resolve_gpu("h200")
    rows = json.loads((DATA / "hostnoise.json").read_text())
    for name, batch in CASES:
        mine = [r for r in rows if r["model"] == f"torchvision:{name}"]
        ms = [r["iteration_ms"] for r in mine if r["what"] == "measure"]
        med = statistics.median(ms)
        print(f"{name} ({batch}), eager, {len(ms)} measurements in fresh processes: "
              + ", ".join(f"{x:.1f}" for x in ms)
              + f" ms; median {med:.1f}, max/min {max(ms) / min(ms):.2f}")
        for k in sorted({r["round"] for r in mine if r["what"] == "profile"}):
            trace = load_trace(DATA / f"{name}_b{batch}_r{k}.yaml")
            pred = run_trace(trace, gpu, "eager", record=False).iteration_time_ns / 1e6
            print(f"  trace of round {k}: predicted {pred:.1f} ms, {pred / med - 1:+.1%} "
                  f"from the median, {pred / max(ms) - 1:+.0%} to {pred / min(ms) - 1:+.0%} "
                  "from each measurement")
    return 0


if __name__ == "__main__":
    sys.exit(main())
