"""Diagnostic, not a calibration: the validation with every layer's workspace set to zero.

The committed traces' workspaces include cuDNN's autotuner trials (the profiler measured the
first call of each conv; fixed since). Dropping workspace entirely shows how much of the
peak-memory error that accounts for and how good the tensor-lifetime model is on its own.

    .venv/bin/python traces/h200/ablation_no_workspace.py
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.validate import POLICY_MAP, load_measurements, load_traces

HERE = Path(__file__).parent


def main() -> None:
    gpu = resolve_gpu("h200")
    traces = load_traces(HERE)
    errs = []
    for m in load_measurements(HERE / "measurements.json"):
        if m["policy"] not in POLICY_MAP or not m["fits"] or m.get("memory_cap_bytes"):
            continue
        t = traces[(m["model"].split(":")[1], m["batch_size"])]
        layers = tuple(dataclasses.replace(layer, algos=tuple(
            dataclasses.replace(a, fwd_workspace_bytes=0, bwd_workspace_bytes=0)
            for a in layer.algos)) for layer in t.layers)
        r = run_trace(dataclasses.replace(t, layers=layers), gpu, POLICY_MAP[m["policy"]])
        e = (r.peak_memory_bytes - m["peak_allocated_bytes"]) / m["peak_allocated_bytes"]
        errs.append(abs(e))
        print(f"{t.name:13s} {t.batch_size:4d} {m['policy']:10s} measured "
              f"{m['peak_allocated_bytes'] / 2**30:6.2f} GiB  predicted without workspace "
              f"{r.peak_memory_bytes / 2**30:6.2f} GiB  {e:+6.1%}")
    print(f"peak allocated without workspace: median |error| {statistics.median(errs):.1%}, "
          f"max {max(errs):.1%} over {len(errs)} runs")


if __name__ == "__main__":
    main()
