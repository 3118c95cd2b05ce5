"""The h200 preset's segment costs (NOTE [allocator costs]): a least-squares line through
the per-size medians of alloc_costs1.json and alloc_costs2.json, ns and ns per GiB.

    python traces/h200_alloc/fit.py
"""

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
x, m, f = [], [], []
for n in (1, 2):
    for s in json.loads((HERE / f"alloc_costs{n}.json").read_text())["sizes"]:
        x.append(s["bytes"] / 2**30)
        m.append(s["malloc_us"] * 1e3)
        f.append(s["free_us"] * 1e3)
for name, y in (("segment_malloc", m), ("segment_free", f)):
    slope, fixed = np.polyfit(x, y, 1)
    print(f"{name}_ns: {round(fixed)}\n{name}_ns_per_gib: {round(slope)}")
