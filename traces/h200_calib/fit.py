"""Fit the host costs of the h200 preset (NOTE [host costs] in vdnnsim/hardware.py) on the
calibration runs in hostcal.json and hostcal2.json, which `python3 traces/h200/collect.py
hostcal OUT` and `... hostcal2 OUT` made on the H200 (models kept apart from traces/h200
and traces/h200_heldout). Each run is compared with the eager run of its own round.

    .venv/bin/python traces/h200_calib/fit.py

Eager PyTorch: per layer, the host's time to issue a pass over the layer count, pooled over
the models. The vDNN runtime: what it adds to each pass over eager PyTorch, least squares
over (layers, buffers moved): forward = a * layers + b * offloads, backward = c * layers +
d * fetches.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
rows = [dict(r, round=k) for k, name in enumerate(("hostcal.json", "hostcal2.json"), 1)
        for r in json.loads((HERE / name).read_text())]
base = {(r["round"], r["model"], r["batch_size"]): r for r in rows
        if r["policy"] == "baseline"}
L = sum(r["layers"] for r in base.values())
fwd = sum(r["host_fwd_ms"] for r in base.values()) / L * 1e6
bwd = sum(r["host_bwd_ms"] for r in base.values()) / L * 1e6
X_f, y_f, X_b, y_b = [], [], [], []
for r in rows:
    if r["policy"] == "baseline":
        continue
    b = base[(r["round"], r["model"], r["batch_size"])]
    n = r["layers"]
    X_f.append([n, r["runtime"]["offloads"]])
    y_f.append((r["host_fwd_ms"] - b["host_fwd_ms"]) * 1e6)
    X_b.append([n, r["runtime"]["fetches"]])
    y_b.append((r["host_bwd_ms"] - b["host_bwd_ms"]) * 1e6)
(a, bo), *_ = np.linalg.lstsq(np.array(X_f, float), np.array(y_f), rcond=None)
(c, d), *_ = np.linalg.lstsq(np.array(X_b, float), np.array(y_b), rcond=None)
if c < 0:  # a cost is not negative: the per-fetch term alone (non-negative least squares)
    c, (d,) = 0.0, np.linalg.lstsq(np.array(X_b, float)[:, 1:], np.array(y_b), rcond=None)[0]
if a < 0:
    a, (bo,) = 0.0, np.linalg.lstsq(np.array(X_f, float)[:, 1:], np.array(y_f), rcond=None)[0]
fit = {"layer_fwd_ns": round(fwd), "layer_bwd_ns": round(bwd),
       "runtime_layer_fwd_ns": round(a), "runtime_layer_bwd_ns": round(c),
       "runtime_offload_ns": round(bo), "runtime_fetch_ns": round(d)}
for name, X, y, coef in (("forward", X_f, y_f, (a, bo)), ("backward", X_b, y_b, (c, d))):
    pred = np.array(X, float) @ np.array(coef)
    err = [f"{100 * (p - m) / m:+.0f}%" for p, m in zip(pred, y)]
    print(f"runtime {name} extra: fitted against measured per run: {' '.join(err)}")
print(json.dumps(fit))
