"""NOTE [kernel counts]: what traces/h200_calib/kernels.json (made by `python3
traces/h200/collect.py kernels OUT` on the H200) gives the simulator.

    .venv/bin/python traces/h200_calib/kernels.py          # print the preset's numbers
    .venv/bin/python traces/h200_calib/kernels.py --write  # and write the validation
                                                           # traces' per-layer counts

- The h200 preset's ``launch_queue``: the median, over the probe's trials, of how many
  kernels the host launched onto a busy stream before a launch blocked.
- Its ``layer_kernels_fwd``/``_bwd`` (for traces without counts: the meta device's): the
  mean commands per layer and pass over the calibration models only (the `calibration`
  group: traces/h200_calib/README.md), never over a validation model.
- ``--write``: each validation trace (traces/h200, traces/h200_heldout) gets the counts
  measured on its own model and batch size as ``kernels_fwd``/``kernels_bwd``: a property of
  the workload, as its tensor sizes are, not a fitted number. Every other field is left as
  it was profiled.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).parent
FOLDERS = {"validation": HERE.parent / "h200", "heldout": HERE.parent / "h200_heldout"}


def main(argv: list[str]) -> int:
    data = json.loads((HERE / "kernels.json").read_text())
    q = data["launch_queue"]
    depth = statistics.median(x for x in q["same_stream"] if x is not None)
    print(f"launch queue: blocked after {q['same_stream']} launches on a busy stream "
          f"(median {depth:g}); on an idle second stream after {q['other_stream']}; one "
          f"launch takes {statistics.median(q['launch_ns']) / 1e3:.1f} us")
    cal = [m for m in data["models"] if m["group"] == "calibration"]
    f = [c[0] for m in cal for c in m["layers"].values()]
    b = [c[1] for m in cal for c in m["layers"].values()]
    print(f"calibration: {len(cal)} runs, {len(f)} layers; per layer {statistics.mean(f):.2f} "
          f"commands forward, {statistics.mean(b):.2f} backward")
    for m in data["models"]:
        lf = sum(c[0] for c in m["layers"].values())
        lb = sum(c[1] for c in m["layers"].values())
        print(f"  {m['group']:11s} {m['model']:32s} {m['batch_size']:4d}: {len(m['layers'])} "
              f"layers, {lf} forward, {lb} backward, {m['optimizer']} optimizer")
    if "--write" not in argv:
        return 0
    from vdnnsim.trace.io import load_trace, save_trace
    for m in data["models"]:
        folder = FOLDERS.get(m["group"])
        if folder is None:
            continue
        path = folder / f"{m['model'].split(':')[1]}_b{m['batch_size']}.yaml"
        t = load_trace(path)
        missing = [x.id for x in t.layers if x.id not in m["layers"]]
        if missing:
            print(f"{path}: no counts for {missing}")
            return 1
        layers = tuple(replace(x, kernels_fwd=m["layers"][x.id][0],
                               kernels_bwd=m["layers"][x.id][1]) for x in t.layers)
        save_trace(replace(t, layers=layers), path)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
