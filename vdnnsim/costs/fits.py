"""NOTE [calibration fits]
The fits that make constants the package ships, run on measurements committed under the
repository's ``traces/`` (each data set's README.md says how it was made):

- ``host``: the h200 preset's host costs (``layer_*``,
  ``view_*``, ``step_*``, ``runtime_*``), from traces/h200_host_calibration/ (hostcal.json,
  hostcal2.json, measured.json, profiles/). Needs torchvision, for the calibration models'
  parameter tensors (built on the meta device).
- ``segments``: its ``segment_malloc_*``/``segment_free_*``, from
  traces/h200_allocator_costs/ (numpy only).
- ``kernels``: its ``launch_queue`` and ``layer_kernels_fwd``/``_bwd``, from
  traces/h200_host_calibration/kernels.json (standard library only).
- ``cpu_step``: its ``cpu_step_*``, from
  traces/h200_optimizer_offload/cpu_steps.json, and ``cpu_step_copy_share`` from
  traces/h200_optimizer_offload/plans_3b/planned_and_contention/contention*.json (numpy only).
- ``cpu_sweep``: the h100 preset's CPU step and its roofline, from
  traces/h100_cpu_step/host_sweep/cpu_sweep.json (``vdnnsim calibrate --cpu-step`` on the lent
  H100 machine's host), and its ``cpu_step_copy_share`` from contention*.json there
  (numpy only).
- ``published``: the K40's and Titan X's scales
  (vdnnsim/data/calibration/published.json), from traces/published/cnn_benchmarks.json.
  Needs torch and torchvision (the networks are probed on the meta device); a few
  seconds of CPU.

The kernel-time model has its own fit (``python -m vdnnsim.costs.kernel``, on the shipped
vdnnsim/data/calibration/h200_fp32.json). The fits of the h200 preset print values for
vdnnsim/data/gpus.yaml, which is edited by hand; ``--check`` compares them with the
shipped preset (exit 1 on a difference). ``published --write`` writes published.json.

    python -m vdnnsim.costs.fits host|segments|kernels|cpu_step|cpu_sweep|published [--traces DIR]
        [--check] [--write]

``traces/`` is the source checkout's, beside the package (an installed wheel has none:
give ``--traces DIR``). tests/test_calibration_fits.py re-runs each fit on the committed
data and checks that it gives what the package ships.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

from ..errors import VdnnError
from ..units import GiB
from .fitting import nonneg_lstsq

TRACES = Path(__file__).resolve().parents[2] / "traces"
PUBLISHED_JSON = Path(__file__).resolve().parents[1] / "data" / "calibration" / "published.json"
PUBLISHED_METHOD = "python -m vdnnsim.costs.fits published"

Lines = list[str]


def _folder(traces: Path | None, name: str) -> Path:
    root = TRACES if traces is None else Path(traces)
    path = root / name
    if not path.is_dir():
        raise VdnnError(f"{path}: no such data folder (the fits read a source checkout's "
                        "traces/; give --traces DIR)")
    return path


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise VdnnError(f"{path}: cannot read it ({exc})") from None


# -- segments ----------------------------------------------------------------------------

def segment_costs(traces: Path | None = None) -> tuple[dict[str, int], Lines]:
    """A least-squares line through the per-size medians of alloc_costs1.json and
    alloc_costs2.json (bench/alloc_costs.py in two processes): ns, and ns per GiB."""
    import numpy as np

    here = _folder(traces, "h200_allocator_costs")
    x, m, f = [], [], []
    for n in (1, 2):
        for s in _read_json(here / f"alloc_costs{n}.json")["sizes"]:
            x.append(s["bytes"] / GiB)
            m.append(s["malloc_us"] * 1e3)
            f.append(s["free_us"] * 1e3)
    out: dict[str, int] = {}
    for name, y in (("segment_malloc", m), ("segment_free", f)):
        slope, fixed = np.polyfit(x, y, 1)
        out[f"{name}_ns"] = round(fixed)
        out[f"{name}_ns_per_gib"] = round(slope)
    return out, []


# -- host ------------------------------------------------------------------------------------

def _report(name: str, X, y, coef) -> str:
    err = [f"{100 * (p - m) / m:+.0f}%" for p, m in zip(X @ coef, y)]
    return f"{name}: fitted against measured per run: {' '.join(err)}"


def _param_tensors(name: str) -> int:
    """The parameter tensors of torchvision's ``name`` (built on the meta device)."""
    import torch
    import torchvision
    with torch.device("meta"):
        try:
            m = getattr(torchvision.models, name)()
        except (NotImplementedError, RuntimeError):
            m = None
    m = m if m is not None else getattr(torchvision.models, name)()
    return sum(1 for q in m.parameters() if q.requires_grad)


def host_costs(traces: Path | None = None,
               param_tensors: Callable[[str], int] | None = None) -> tuple[dict[str, int], Lines]:
    """The h200 preset's host costs, fitted on the calibration runs of traces/h200_host_calibration/,
    all made on the H200 with models kept apart from traces/h200_torchvision and traces/h200_torchvision_heldout:

    1. Eager PyTorch, per layer and pass (used only by traces synthesized on the meta
       device): the host's time to issue a pass over the layer count, pooled over the runs
       of hostcal.json and hostcal2.json.
    2. What the vDNN runtime adds to a whole step, from measured.json (the calibration
       models through `vdnnsim measure`'s own harness, the harness every validation
       measurement comes from): least squares of (host issue time under the runtime -
       eager's) against (layers, buffers moved), extra = A x layers + B x offloads (each
       offloaded buffer is fetched once).
    3. How that splits between the passes, from hostcal*.json, whose harness times each
       pass (forward = a x layers + b x offloads, backward = c x layers + d x fetches): the
       layer cost goes a/(a+c) to the forward pass, the buffer cost b/(b+d) to the offload.
    4. The optimizer step (zero_grad and SGD's step, foreach): the host's time for it in
       hostcal*.json, least squares against the model's parameter tensors, step = step_ns
       + step_tensor_ns x tensors (``param_tensors``; default: torchvision's definitions,
       built on the meta device).
    5. A layer that launches no kernel (a view): the median of such layers' host times in
       the per-layer profiles of the calibration models (profiles/, `collect.py
       hostkinds`).

    The per-pass harness measures the runtime dearer than measure's harness does on the
    same models (resnet101 (16) vdnn_all: 99 ms against 73 ms of extra host time,
    traces/h200_host_calibration/README.md); step 2 takes measure's, the harness the validation
    measurements come from."""
    import numpy as np
    import yaml

    from ..yamlio import _LOADER  # libyaml's parser where PyYAML has it: the same data

    here = _folder(traces, "h200_host_calibration")
    lines: Lines = []
    rows = [dict(r, round=k) for k, name in enumerate(("hostcal.json", "hostcal2.json"), 1)
            for r in _read_json(here / name)]
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
    a, bo = nonneg_lstsq(np.array(X_f, float), np.array(y_f), np)
    c, d = nonneg_lstsq(np.array(X_b, float), np.array(y_b), np)
    lines.append(_report("per-pass harness, forward", np.array(X_f, float), np.array(y_f),
                         np.array([a, bo])))
    lines.append(_report("per-pass harness, backward", np.array(X_b, float), np.array(y_b),
                         np.array([c, d])))

    layers = {r["model"]: r["layers"] for r in rows}
    meas = _read_json(here / "measured.json")
    mbase = {(r["model"], r["batch_size"]): r for r in meas if r["policy"] == "baseline"}
    X, y = [], []
    for r in meas:
        if r["policy"] == "baseline" or not r.get("fits"):
            continue
        # measure's per-step counts divide the warm-up, timed and phase steps' total by
        # warm-up + timed steps (2 + 5): one step too few; these are per step
        offloads = r["offloads"] * (2 + 5) / (2 + 5 + 1)
        X.append([layers[r["model"]], offloads])
        y.append((r["host_issue_ms"]
                  - mbase[(r["model"], r["batch_size"])]["host_issue_ms"]) * 1e6)
    X_m, y_m = np.array(X, float), np.array(y)
    A, B = nonneg_lstsq(X_m, y_m, np)
    lines.append(_report("measure's harness, whole step", X_m, y_m, np.array([A, B])))
    r_layer = a / (a + c) if a + c else 0.5
    r_copy = bo / (bo + d) if bo + d else 0.5

    count = param_tensors or _param_tensors
    tensors = {name: count(name.split(":")[1]) for name in {r["model"] for r in rows}}
    X_s = np.array([[1.0, tensors[r["model"]]] for r in base.values()])
    y_s = np.array([r["host_step_ms"] * 1e6 for r in base.values()])
    S0, S1 = nonneg_lstsq(X_s, y_s, np)
    lines.append(_report("optimizer step", X_s, y_s, np.array([S0, S1])))

    vf, vb = [], []
    for path in sorted((here / "profiles").glob("*.yaml")):
        for x in yaml.load(path.read_text(), Loader=_LOADER)["layers"]:
            if x.get("kernels_fwd") == 0 and x.get("kernels_bwd") == 0:
                vf.append(x.get("host_fwd_ns", 0))
                vb.append(x.get("host_bwd_ns", 0))
    lines.append(f"views: {len(vf)} layers without a kernel in the profiles")
    V_f, V_b = float(np.median(vf)), float(np.median(vb))

    fit = {"layer_fwd_ns": round(fwd), "layer_bwd_ns": round(bwd),
           "view_fwd_ns": round(V_f), "view_bwd_ns": round(V_b),
           "step_ns": round(S0), "step_tensor_ns": round(S1),
           "runtime_layer_fwd_ns": round(A * r_layer),
           "runtime_layer_bwd_ns": round(A * (1 - r_layer)),
           "runtime_offload_ns": round(B * r_copy), "runtime_fetch_ns": round(B * (1 - r_copy))}
    lines.append(f"per-pass harness: {a / 1e3:.0f} + {c / 1e3:.0f} us per layer, "
                 f"{bo / 1e3:.0f} + {d / 1e3:.0f} us per buffer; measure's harness: "
                 f"{A / 1e3:.0f} us per layer, {B / 1e3:.0f} us per buffer")
    return fit, lines


# -- kernels ---------------------------------------------------------------------------------

def kernel_counts(traces: Path | None = None) -> tuple[dict[str, float], Lines]:
    """From traces/h200_host_calibration/kernels.json: ``launch_queue``, the median over the probe's
    trials of how many kernels the host launched onto a busy stream before a launch
    blocked; ``layer_kernels_fwd``/``_bwd`` (for traces without counts: the meta device's),
    the mean commands per layer and pass over the calibration models only (the
    `calibration` group), never over a validation model."""
    data = _read_json(_folder(traces, "h200_host_calibration") / "kernels.json")
    q = data["launch_queue"]
    depth = statistics.median(x for x in q["same_stream"] if x is not None)
    cal = [m for m in data["models"] if m["group"] == "calibration"]
    f = [c[0] for m in cal for c in m["layers"].values()]
    b = [c[1] for m in cal for c in m["layers"].values()]
    lines = [f"launch queue: blocked after {q['same_stream']} launches on a busy stream "
             f"(median {depth:g}); on an idle second stream after {q['other_stream']}; one "
             f"launch takes {statistics.median(q['launch_ns']) / 1e3:.1f} us",
             f"calibration: {len(cal)} runs, {len(f)} layers; per layer "
             f"{statistics.mean(f):.2f} commands forward, {statistics.mean(b):.2f} backward"]
    return {"launch_queue": int(depth), "layer_kernels_fwd": round(statistics.mean(f), 2),
            "layer_kernels_bwd": round(statistics.mean(b), 2)}, lines


# -- published -------------------------------------------------------------------------------

SCALES = [round(0.2 * 1.08 ** i, 4) for i in range(40)]  # 0.2 .. about 3.8
MEM_MAX = 1 / 0.70  # the model's DRAM rate is MEM_EFF (0.70) x peak: at most the peak


def _shapes(probes: dict) -> tuple[list[Any], dict[str, list[int]]]:
    """The distinct layers (``analytic_layers``' ConvGeometry or SimpleLayer) of all the
    probes, and per network its layers in order as indices into them: networks repeat
    their shapes (ResNet's blocks) and share them, and a shape's time depends on the GPU
    alone, so each is timed once per GPU. Made once for a fit that times many GPUs."""
    from ..gpu.profile.synthesize import analytic_layers
    index: dict[Any, int] = {}
    order = {net: [index.setdefault(what, len(index)) for _, what in analytic_layers(p)]
             for net, p in probes.items()}
    return list(index), order


def _totals(probes: dict, gpu, shapes: tuple | None = None) -> dict[str, tuple[float, float]]:
    """Per network: (forward, backward) ms, each layer timed with its fastest algorithm,
    summed in the layers' order (``shapes``: ``_shapes(probes)``, made once by a caller
    that times the same probes for many GPUs)."""
    from ..gpu.profile.synthesize import analytic_options
    unique, order = _shapes(probes) if shapes is None else shapes
    fwd, bwd = [], []
    for what in unique:
        opts = analytic_options(what, gpu)
        fwd.append(min(a.fwd_ns for a in opts))
        bwd.append(min(a.bwd_ns for a in opts))
    return {net: (sum(map(fwd.__getitem__, order[net])) / 1e6,
                  sum(map(bwd.__getitem__, order[net])) / 1e6) for net in probes}


def published(traces: Path | None = None) -> tuple[dict[str, Any], Lines]:
    """The paper's GPUs (K40, Titan X Maxwell) calibrated from published timings of cuDNN
    on those cards (traces/published/cnn_benchmarks.json: J. Johnson's cnn-benchmarks,
    Torch7 with cuDNN 5.0.5, batch 16, forward and forward+backward ms of VGG-19 and
    ResNet-18/34/50/101/152), kept apart from everything `vdnnsim reproduce` judges (not
    AlexNet or VGG-16, which the paper's figures judge).

    The analytic cost model (docs/cost-model.md) has two GPU-wide knobs a calibration can
    set without touching any per-algorithm constant: the compute rate (the preset's peak,
    scaled: the `peak_flops_scale` override) and the DRAM rate (`mem_bw_bytes_per_s`). For
    each GPU this grid-searches both scales for the least squared log error of the forward
    and backward totals (12 numbers), the DRAM rate kept at or below the preset's peak,
    each network's layers timed with their fastest algorithm (cuDNN's benchmark mode),
    Winograd offered as cuDNN 5 did. The paper ran cuDNN 4, without Winograd: `vdnnsim
    reproduce --costs published` applies the two scales to the presets as they are (no
    Winograd), so the scales stand for the hardware, not the library version. The result
    is published.json's content."""
    import copy
    from dataclasses import replace

    import torch

    from ..api import resolve_gpu
    from ..gpu.probe.fx import probe
    from ..gpu.model.build import build_model

    src = _read_json(_folder(traces, "published") / "cnn_benchmarks.json")
    batch = src["batch_size"]
    data = {g: {n: (v["forward_ms"], v["total_ms"]) for n, v in nets.items()}
            for g, nets in src["gpus"].items()}
    probes = {}
    for net in next(iter(data.values())):
        with torch.device("meta"):
            model, shape, name = build_model(f"torchvision:{net}")
        probes[net] = probe(copy.deepcopy(model), shape, batch, "meta", name=name)
    shapes = _shapes(probes)  # read once: only the GPU changes across the grid
    result: dict[str, Any] = {"source": src["source"], "method": PUBLISHED_METHOD, "gpus": {}}
    lines: Lines = []
    for g, meas in data.items():
        base = replace(resolve_gpu(g), winograd=True)
        best = (math.inf, 1.0, 1.0, {})
        for a in SCALES:
            for m in [x for x in SCALES if x <= MEM_MAX]:
                gpu = replace(base, peak_flops={k: v * a for k, v in base.peak_flops.items()},
                              mem_bw_bytes_per_s=base.mem_bw_bytes_per_s * m)
                t = _totals(probes, gpu, shapes)
                err = sum(math.log(t[n][0] / f) ** 2 + math.log(t[n][1] / (tot - f)) ** 2
                          for n, (f, tot) in meas.items())
                if err < best[0]:
                    best = (err, a, m, t)
        _, a, m, t = best
        plain = _totals(probes, base, shapes)
        lines.append(f"{g}: compute x{a}, memory x{m}")
        for n, (f, tot) in meas.items():
            lines.append(
                f"  {n:10s} measured fwd {f:7.1f} bwd {tot - f:7.1f} ms | analytic "
                f"{plain[n][0]:6.1f} {plain[n][1]:6.1f} | calibrated {t[n][0]:6.1f} "
                f"{t[n][1]:6.1f} ({t[n][0] / f - 1:+.0%} {t[n][1] / (tot - f) - 1:+.0%})")
        result["gpus"][g] = {"peak_flops_scale": a, "mem_bw_scale": m,
                             "fit": {n: {"measured_ms": [f, round(tot - f, 2)],
                                         "calibrated_ms": [round(t[n][0], 2),
                                                           round(t[n][1], 2)]}
                                     for n, (f, tot) in meas.items()}}
    return result, lines


# -- cpu_step ------------------------------------------------------------------------------

def cpu_step(traces: Path | None = None) -> tuple[dict[str, Any], Lines]:
    """The h200 preset's ``cpu_step_*``: the CPU optimizer's step as CPUOffloadOptimizer runs
    it (one fused AdamW per tensor), from traces/h200_optimizer_offload/cpu_steps.json
    (``time_cpu_steps``: ``tensors`` tensors of ``numel`` elements stepped one after
    another, the median of five steps). Least squares of ns = tensors x (cpu_step_ns +
    numel x per element), the fixed part from the fp32 records, the per-element slope of the
    16-bit records with that fixed part (numpy only)."""
    import numpy as np

    recs = _read_json(_folder(traces, "h200_optimizer_offload") / "cpu_steps.json")["records"]
    lines: Lines = []
    by = {dt: [r for r in recs if r["dtype"] == dt] for dt in ("fp32", "bf16")}
    if not by["fp32"] or not by["bf16"]:
        raise VdnnError("cpu_steps.json: needs fp32 and bf16 records")
    f = by["fp32"]
    X = np.array([[r["tensors"], r["tensors"] * r["numel"]] for r in f], float)
    y = np.array([r["ns"] for r in f], float)
    coef = nonneg_lstsq(X, y, np)
    lines.append(_report("cpu_step fp32", X, y, coef))
    b = by["bf16"]
    Xb = np.array([[r["tensors"] * r["numel"]] for r in b], float)
    yb = np.array([r["ns"] - r["tensors"] * coef[0] for r in b], float)
    slope16 = float(np.linalg.lstsq(Xb, yb, rcond=None)[0][0])
    pred = [r["tensors"] * (coef[0] + slope16 * r["numel"]) for r in b]
    lines.append("cpu_step bf16: fitted against measured per size: " + " ".join(
        f"{100 * (p - r['ns']) / r['ns']:+.0f}%" for p, r in zip(pred, b)))
    # the runtime's step with the parameters copied back after each
    # tensor against without, per fresh process (plans_3b/planned_and_contention/contention*.json); the share
    # is the median process's slowdown (every step but the first runs beside a copy)
    share, ratios = copy_share(_folder(traces, "h200_optimizer_offload") / "plans_3b" / "planned_and_contention")
    lines.append("cpu_step_copy_share: the step with copies back / without, per process: "
                 + " ".join(f"{r:.3f}" for r in ratios) + f"; median - 1 = {share:.4f}")
    return {"cpu_step_ns": round(float(coef[0])),
            "cpu_step_ns_per_element": round(float(coef[1]), 4),
            "cpu_step_ns_per_element_16": round(slope16, 4),
            "cpu_step_copy_share": round(share, 3)}, lines


def copy_share(folder: Path) -> tuple[float, list[float]]:
    """The share, from experiments/offload_runs/cpu_contention.py's
    records in ``folder`` (contention*.json, one a fresh process): the median process's
    step with the copies back over without, less 1; and each process's ratio."""
    import numpy as np

    cont = sorted(folder.glob("contention*.json"))
    if not cont:
        raise VdnnError(f"{folder}: no contention*.json records")
    ratios = sorted(ns["copy"] / ns["nocopy"] for ns in (_read_json(c)["ns"] for c in cont))
    return float(np.median(ratios)) - 1, ratios


def cpu_sweep(traces: Path | None = None) -> tuple[dict[str, Any], Lines]:
    """The h100 preset's CPU step: ``vdnnsim calibrate --cpu-step``'s
    sweep on the lent H100 machine's host, traces/h100_cpu_step/host_sweep/cpu_sweep.json, fitted
    by vdnnsim.costs.cpustep.fit (numpy only)."""
    from .cpustep import fit, format_fit
    data = _folder(traces, "h100_cpu_step") / "host_sweep"
    fields, rows = fit(_read_json(data / "cpu_sweep.json"))
    lines = format_fit(fields, rows).split("\n")[:len(rows) + 2]
    # as cpu_step's share, from the same experiment on this host
    share, ratios = copy_share(data)
    fields["cpu_step_copy_share"] = round(share, 3)
    lines.append("cpu_step_copy_share: the step with copies back / without, per process: "
                 + " ".join(f"{r:.3f}" for r in ratios))
    return fields, lines


# -- what the package ships ------------------------------------------------------------------

FITS = {"host": host_costs, "segments": segment_costs, "kernels": kernel_counts,
        "published": published, "cpu_step": cpu_step, "cpu_sweep": cpu_sweep}


def shipped(what: str) -> dict[str, Any]:
    """What the package ships for a fit: the h200 preset's host fields, or published.json."""
    if what == "published":
        return json.loads(PUBLISHED_JSON.read_text())
    from dataclasses import asdict

    from ..hardware import gpu_preset
    host = asdict(gpu_preset("h100" if what == "cpu_sweep" else "h200").host)
    keys = {"host": ("layer_", "view_", "step_", "runtime_"), "segments": ("segment_",),
            "kernels": ("launch_queue", "layer_kernels_"),
            "cpu_step": ("cpu_step_ns", "cpu_step_copy_share"),
            "cpu_sweep": ("cpu_step_", "cpu_threads", "cpu_memory_bw")}[what]
    return {k: v for k, v in host.items() if k.startswith(keys)
            and (what != "host" or not k.startswith("layer_kernels_"))}


def differences(what: str, fitted: dict[str, Any]) -> Lines:
    """Where ``fitted`` and what the package ships differ (nothing: they agree)."""
    have = shipped(what)
    if what == "published":
        diff = [f"{k}: shipped {have.get(k)!r}, fitted {fitted.get(k)!r}"
                for k in ("source", "method") if have.get(k) != fitted.get(k)]
        for g in sorted(set(have.get("gpus", {})) | set(fitted["gpus"])):
            a, b = have.get("gpus", {}).get(g), fitted["gpus"].get(g)
            if a != b:
                diff.append(f"{g}: shipped {a and {k: a[k] for k in a if k != 'fit'}}, "
                            f"fitted {b and {k: b[k] for k in b if k != 'fit'}}"
                            + ("" if (a and b and a.get("fit") == b.get("fit")) else
                               " (and the per-network times)"))
        return diff
    return [f"{k}: shipped {have.get(k)}, fitted {v}" for k, v in fitted.items()
            if have.get(k) != v] + [f"{k}: shipped {v}, not fitted" for k, v in have.items()
                                    if k not in fitted]


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m vdnnsim.costs.fits",
                                 description="Re-run a fit of the constants the package ships "
                                 "on the committed measurements.")
    ap.add_argument("what", choices=sorted(FITS))
    ap.add_argument("--traces", type=Path, default=None,
                    help="the data folders' parent (default: the checkout's traces/)")
    ap.add_argument("--check", action="store_true",
                    help="compare with what the package ships; exit 1 where they differ")
    ap.add_argument("--write", action="store_true",
                    help="published only: write vdnnsim/data/calibration/published.json")
    args = ap.parse_args(argv)
    if args.write and args.what != "published":
        ap.error("--write is for published only (edit vdnnsim/data/gpus.yaml by hand)")
    try:
        fitted, lines = FITS[args.what](args.traces)
    except VdnnError as exc:
        print(f"vdnnsim: error: {exc}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    if args.what == "published":
        if args.write:
            PUBLISHED_JSON.write_text(json.dumps(fitted, indent=1) + "\n")
            print(f"wrote {PUBLISHED_JSON}")
    else:
        for k, v in fitted.items():
            print(f"{k}: {v}")
    if args.check:
        diff = differences(args.what, fitted)
        for line in diff:
            print(line)
        print("differs from what the package ships" if diff else "as the package ships it")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
