"""Fit the host costs of the h200 preset (NOTE [host costs] in vdnnsim/hardware.py) on the
calibration runs in this folder, all made on the H200 with models kept apart from
traces/h200 and traces/h200_heldout (README.md says how each file was made).

    .venv/bin/python traces/h200_calib/fit.py

1. Eager PyTorch, per layer and pass (used only by traces synthesized on the meta device):
   the host's time to issue a pass over the layer count, pooled over the runs of
   hostcal.json and hostcal2.json.
2. What the vDNN runtime adds to a whole step, from measured.json (the calibration models
   through `vdnnsim measure`'s own harness, the harness every validation measurement comes
   from): least squares of (host issue time under the runtime - eager's) against
   (layers, buffers moved), extra = A x layers + B x offloads (each offloaded buffer is
   fetched once).
3. How that splits between the passes, from hostcal*.json, whose harness times each pass
   (forward = a x layers + b x offloads, backward = c x layers + d x fetches): the layer
   cost goes a/(a+c) to the forward pass, the buffer cost b/(b+d) to the offload.
4. The optimizer step (zero_grad and SGD's step, foreach): the host's time for it in
   hostcal*.json, least squares against the model's parameter tensors,
   step = step_ns + step_tensor_ns x tensors (the counts from torchvision's definitions,
   built on the meta device).
5. A layer that launches no kernel (a view): the median of such layers' host times in the
   per-layer profiles of the calibration models (profiles/, `collect.py hostkinds`).
The per-pass harness measures the runtime dearer than measure's harness does on the same
models (resnet101 (16) vdnn_all: 99 ms against 73 ms of extra host time, README.md); step 2
takes measure's, the harness the validation measurements come from.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


def lstsq_nonneg(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with the coefficients held at zero or above (two columns)."""
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    for k in range(X.shape[1]):
        if coef[k] < 0:
            keep = [j for j in range(X.shape[1]) if j != k]
            coef = np.zeros(X.shape[1])
            coef[keep] = np.linalg.lstsq(X[:, keep], y, rcond=None)[0]
            break
    return coef


def report(name: str, X: np.ndarray, y: np.ndarray, coef: np.ndarray) -> None:
    err = [f"{100 * (p - m) / m:+.0f}%" for p, m in zip(X @ coef, y)]
    print(f"{name}: fitted against measured per run: {' '.join(err)}")


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
    X_f.append([r["layers"], r["runtime"]["offloads"]])
    y_f.append((r["host_fwd_ms"] - b["host_fwd_ms"]) * 1e6)
    X_b.append([r["layers"], r["runtime"]["fetches"]])
    y_b.append((r["host_bwd_ms"] - b["host_bwd_ms"]) * 1e6)
a, bo = lstsq_nonneg(np.array(X_f, float), np.array(y_f))
c, d = lstsq_nonneg(np.array(X_b, float), np.array(y_b))
report("per-pass harness, forward", np.array(X_f, float), np.array(y_f), np.array([a, bo]))
report("per-pass harness, backward", np.array(X_b, float), np.array(y_b), np.array([c, d]))

layers = {r["model"]: r["layers"] for r in rows}
meas = json.loads((HERE / "measured.json").read_text())
mbase = {(r["model"], r["batch_size"]): r for r in meas if r["policy"] == "baseline"}
X, y = [], []
for r in meas:
    if r["policy"] == "baseline" or not r.get("fits"):
        continue
    # measure's per-step counts divide the warm-up, timed and phase steps' total by
    # warm-up + timed steps (2 + 5): one step too few; these are per step
    offloads = r["offloads"] * (2 + 5) / (2 + 5 + 1)
    X.append([layers[r["model"]], offloads])
    y.append((r["host_issue_ms"] - mbase[(r["model"], r["batch_size"])]["host_issue_ms"]) * 1e6)
X_m, y_m = np.array(X, float), np.array(y)
A, B = lstsq_nonneg(X_m, y_m)
report("measure's harness, whole step", X_m, y_m, np.array([A, B]))
r_layer = a / (a + c) if a + c else 0.5
r_copy = bo / (bo + d) if bo + d else 0.5
def param_tensors(name: str) -> int:
    import torch
    import torchvision
    with torch.device("meta"):
        try:
            m = getattr(torchvision.models, name)()
        except (NotImplementedError, RuntimeError):
            m = None
    m = m if m is not None else getattr(torchvision.models, name)()
    return sum(1 for q in m.parameters() if q.requires_grad)


tensors = {name: param_tensors(name.split(":")[1]) for name in {r["model"] for r in rows}}
X_s = np.array([[1.0, tensors[r["model"]]] for r in base.values()])
y_s = np.array([r["host_step_ms"] * 1e6 for r in base.values()])
S0, S1 = lstsq_nonneg(X_s, y_s)
report("optimizer step", X_s, y_s, np.array([S0, S1]))
def view_costs() -> tuple[float, float]:
    import yaml
    f, b = [], []
    for path in sorted((HERE / "profiles").glob("*.yaml")):
        for x in yaml.safe_load(path.read_text())["layers"]:
            if x.get("kernels_fwd") == 0 and x.get("kernels_bwd") == 0:
                f.append(x.get("host_fwd_ns", 0))
                b.append(x.get("host_bwd_ns", 0))
    print(f"views: {len(f)} layers without a kernel in the profiles")
    return float(np.median(f)), float(np.median(b))


V_f, V_b = view_costs()
fit = {"layer_fwd_ns": round(fwd), "layer_bwd_ns": round(bwd),
       "view_fwd_ns": round(V_f), "view_bwd_ns": round(V_b),
       "step_ns": round(S0), "step_tensor_ns": round(S1),
       "runtime_layer_fwd_ns": round(A * r_layer), "runtime_layer_bwd_ns": round(A * (1 - r_layer)),
       "runtime_offload_ns": round(B * r_copy), "runtime_fetch_ns": round(B * (1 - r_copy))}
print(f"per-pass harness: {a / 1e3:.0f} + {c / 1e3:.0f} us per layer, {bo / 1e3:.0f} + "
      f"{d / 1e3:.0f} us per buffer; measure's harness: {A / 1e3:.0f} us per layer, "
      f"{B / 1e3:.0f} us per buffer")
print(json.dumps(fit))
