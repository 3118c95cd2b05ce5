"""NOTE [kernel counts]: what traces/h200_host_calibration/kernels.json (made by `python3
experiments/validation/collect.py kernels OUT` on the H200) gives the simulator.

    .venv/bin/python experiments/host_costs/kernels.py          # print the preset's numbers
    .venv/bin/python experiments/host_costs/kernels.py --write  # and write the validation
                                                                # traces' per-layer counts

- The h200 preset's ``launch_queue`` and ``layer_kernels_fwd``/``_bwd``: fitted by
  ``kernel_counts`` in vdnnsim/costs/fits.py (``python -m vdnnsim.costs.fits
  kernels --check`` compares them with the preset): the median depth of the launch queue
  over the probe's trials, and the mean commands per layer and pass over the calibration
  models only (the `calibration` group: traces/h200_host_calibration/README.md), never over a
  validation model. Then each model's counts, one line each.
- ``--write``: each validation trace (traces/h200_torchvision, traces/h200_torchvision_heldout) gets the counts
  measured on its own model and batch size as ``kernels_fwd``/``kernels_bwd``: a property of
  the workload, as its tensor sizes are, not a fitted number. Every other field is left as
  it was profiled.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim, from any folder
TRACES = ROOT / "traces"
FOLDERS = {"validation": TRACES / "h200_torchvision", "heldout": TRACES / "h200_torchvision_heldout"}


def main(argv: list[str]) -> int:
    from vdnnsim.costs.fits import kernel_counts

    _, lines = kernel_counts(TRACES)
    print("\n".join(lines))
    data = json.loads((TRACES / "h200_host_calibration" / "kernels.json").read_text())
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
