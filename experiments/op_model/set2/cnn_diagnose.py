"""Where the op path's CNN error comes from (issue 58): each run of cnn_check.py traced
twice on the meta device, by the op path (``torchvision.models:NAME``, one layer per ATen
op, the op model) and by the layer-level front-end (``torchvision:NAME``, the CNN kernel
model, 3.7% median on these runs), and each trace's GPU time summed by class
(convolutions split by kind, fwd and bwd; batch norm; pooling; pointwise and the rest) and
its host time; where the run has a profiled trace (traces/h200_torchvision) the measured
per-layer times are summed the same way. Nothing is fitted.

    python experiments/op_model/set2/cnn_diagnose.py [--json OUT] [MODEL ...]

Prints per run the step measured and predicted by each path, then per class the op path's
GPU time minus the layer path's (ms), and the medians over runs as a share of the
measured step.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cnn_check import baseline_runs  # noqa: E402

CLASSES = ("conv1x1", "convkxk", "convstrided", "convgrouped", "convdw", "bn", "pool",
           "linear", "pointwise")


def conv_class(groups: int, cin: int, k: int, stride: int) -> str:
    if groups > 1:
        return "convdw" if groups == cin else "convgrouped"
    if stride > 1:
        return "convstrided"
    return "conv1x1" if k == 1 else "convkxk"


def op_class(layer: dict) -> str:
    f = layer.get("attrs", {}).get("op") or {}
    op = f.get("op", layer["kind"])
    if op == "convolution":
        return conv_class(f.get("b", 1), f.get("c", 1), f.get("kh", 1) * f.get("kw", 1),
                          f.get("stride", 1))
    if "batch_norm" in op:
        return "bn"
    if "pool" in op or op == "mean":
        return "pool"
    if op in ("mm", "addmm", "bmm"):
        return "linear"
    return "pointwise"


def fx_class(layer: dict) -> str:
    a, kind = layer.get("attrs", {}), layer["kind"]
    if kind == "conv":
        k = a.get("kernel", [1, 1])
        return conv_class(a.get("groups", 1), a.get("in_channels", 1), k[0] * k[-1],
                          max(a.get("stride", [1]) or [1]))
    if kind == "bn":
        return "bn"
    if "pool" in kind:
        return "pool"
    if kind in ("linear", "fc"):
        return "linear"
    return "pointwise"


def times(layer: dict) -> tuple[float, float]:
    src = layer["algos"][0] if layer.get("algos") else layer
    return src.get("fwd_ns", 0) or 0, src.get("bwd_ns", 0) or 0


def summed(d: dict, cls) -> dict:
    """GPU ms by (class, pass), host ms and kernels by pass, of one trace dict."""
    out: dict = defaultdict(float)
    for layer in d["layers"]:
        c = cls(layer)
        f, b = times(layer)
        out[f"{c}|fwd"] += f / 1e6
        out[f"{c}|bwd"] += b / 1e6
        out["gpu"] += (f + b) / 1e6
        out["host|fwd"] += layer.get("host_fwd_ns", 0) / 1e6
        out["host|bwd"] += layer.get("host_bwd_ns", 0) / 1e6
        out[f"host:{c}"] += (layer.get("host_fwd_ns", 0) + layer.get("host_bwd_ns", 0)) / 1e6
        out[f"kernels:{c}"] += layer.get("kernels_fwd", 0) + layer.get("kernels_bwd", 0)
        out["kernels|fwd"] += layer.get("kernels_fwd", 0)
        out["kernels|bwd"] += layer.get("kernels_bwd", 0)
        out[f"layers:{c}"] += 1
    out["step"] = d.get("step_ns", 0) / 1e6
    return dict(out)


def profiled(name: str, batch: int) -> dict | None:
    for folder in ("h200_torchvision", "h200_torchvision_heldout"):
        p = ROOT / "traces" / folder / f"{name}_b{batch}.yaml"
        if p.exists():
            return summed(yaml.safe_load(p.read_text()), fx_class)
    for p in (ROOT / "traces").glob(f"h200_*/{name}_b{batch}.yaml.gz"):
        return summed(yaml.safe_load(gzip.open(p).read()), fx_class)
    return None


def swapped(dop: dict, dfx: dict, classes: set, host: bool) -> tuple[dict, float]:
    """``dop`` with the GPU times of its ops of ``classes`` (and, ``host``, every matched
    op's host times) the layer path's for the same module; and the share of those ops
    matched."""
    fx = {l["id"]: l for l in dfx["layers"]}
    out = json.loads(json.dumps(dop))
    seen = hit = 0
    used: set = set()
    for layer in out["layers"]:
        c = op_class(layer)
        mod = layer.get("attrs", {}).get("module") or ""
        other = fx.get(mod.replace(".", "_").replace("-", "_"))
        if other is None or fx_class(other) != c:
            seen += c in classes or host
            continue
        seen += c in classes or host
        hit += c in classes or host
        if c in classes:
            f, b = times(other)
            tgt = layer["algos"][0] if layer.get("algos") else layer
            tgt["fwd_ns"], tgt["bwd_ns"] = f, b
        if host and other["id"] not in used:  # a module's first op: the layer's host
            used.add(other["id"])
            layer["host_fwd_ns"], layer["host_bwd_ns"] = other["host_fwd_ns"], \
                other["host_bwd_ns"]
    return out, hit / max(seen, 1)


def profiled_conv_host() -> dict[str, tuple[float, float]]:
    """Per convolution kind, the median host (fwd, bwd ns) of the profiled torchvision
    traces' layers (traces/h200_torchvision*/*.yaml: 9 models, 27 traces)."""
    import statistics as st
    hs: dict = defaultdict(lambda: ([], []))
    for p in sorted(ROOT.glob("traces/h200_torchvision*/*.yaml")):
        for layer in yaml.safe_load(p.read_text())["layers"]:
            if layer["kind"] == "conv":
                c = fx_class(layer)
                hs[c][0].append(layer.get("host_fwd_ns", 0))
                hs[c][1].append(layer.get("host_bwd_ns", 0))
    return {c: (st.median(f), st.median(b)) for c, (f, b) in hs.items()}


def conv_host(dop: dict, med: dict) -> dict:
    """``dop`` with each convolution's host cost the profiles' median for its kind (a
    what-if of the host's part: nothing of the model changes)."""
    out = json.loads(json.dumps(dop))
    for layer in out["layers"]:
        c = op_class(layer)
        if c in med:
            layer["host_fwd_ns"], layer["host_bwd_ns"] = (round(x) for x in med[c])
    return out


def replay(d: dict, name: str, gpu) -> tuple[float, float]:
    from vdnnsim.api import run_trace
    from vdnnsim.trace import trace_from_dict
    from vdnnsim.trace.optimizer import with_optimizer
    r = run_trace(with_optimizer(trace_from_dict(d, name), "sgd"), gpu, "eager", record=False)
    return r.iteration_time_ns / 1e6, r.host_issue_time_ns / 1e6


CONV_HOST: dict = {}
CONVS = {"conv1x1", "convkxk", "convstrided", "convgrouped", "convdw"}
SWAPS = {"conv": (CONVS, False), "bn": ({"bn"}, False), "conv+bn": (CONVS | {"bn"}, False),
         "gpu": (set(CLASSES), False), "host": (set(), True),
         "conv+bn+host": (CONVS | {"bn"}, True), "gpu+host": (set(CLASSES), True)}


def one(name: str, batch: int, gpu) -> dict:
    from vdnnsim.api import run_trace
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.gpu.profile.layers import synthesize_model
    from vdnnsim.trace import trace_from_dict
    from vdnnsim.trace.optimizer import with_optimizer
    dop = memory_trace(f"torchvision.models:{name}", batch, gpu, "fp32", None, {},
                       "image:3,224,224:1000")
    rop = run_trace(with_optimizer(trace_from_dict(dop, name), "sgd"), gpu, "eager",
                    record=False)
    dfx = synthesize_model(f"torchvision:{name}", batch, gpu)
    rfx = run_trace(trace_from_dict(dfx, name), gpu, "eager", record=False)
    swaps = {}
    for k, (cls, host) in SWAPS.items():
        d, share = swapped(dop, dfx, cls, host)
        ms, hms = replay(d, name, gpu)
        swaps[k] = {"ms": ms, "host_ms": hms, "matched": share}
    ms, hms = replay(conv_host(dop, CONV_HOST), name, gpu)
    swaps["conv host (profiles)"] = {"ms": ms, "host_ms": hms, "matched": 1.0}
    return {"op": summed(dop, op_class), "fx": summed(dfx, fx_class), "swaps": swaps,
            "prof": profiled(name, batch),
            "op_ms": rop.iteration_time_ns / 1e6, "fx_ms": rfx.iteration_time_ns / 1e6,
            "op_host_ms": rop.host_issue_time_ns / 1e6,
            "fx_host_ms": rfx.host_issue_time_ns / 1e6}


def main(argv: list[str]) -> int:
    global CONV_HOST
    from vdnnsim.api import resolve_gpu
    CONV_HOST = profiled_conv_host()
    print("profiled host per convolution kind (fwd, bwd us):",
          {c: (round(f / 1e3, 1), round(b / 1e3, 1)) for c, (f, b) in CONV_HOST.items()})
    gpu = resolve_gpu("h200")
    out_json = argv[argv.index("--json") + 1] if "--json" in argv else None
    only = [a for a in argv if not a.startswith("--") and a != out_json]
    rows = []
    for _, m in baseline_runs():
        name = m["model"].split(":")[1]
        if only and name not in only:
            continue
        r = one(name, m["batch_size"], gpu)
        r.update(model=name, batch=m["batch_size"], measured_ms=m["iteration_ms"],
                 host_issue_ms=m.get("host_issue_ms"))
        rows.append(r)
        gd = {c: sum(r["op"].get(f"{c}|{p}", 0) - r["fx"].get(f"{c}|{p}", 0)
                     for p in ("fwd", "bwd")) for c in CLASSES}
        print(f"{name:20s} {m['batch_size']:4d} meas {m['iteration_ms']:7.2f} op "
              f"{r['op_ms']:7.2f} ({r['op_ms'] / m['iteration_ms'] - 1:+6.1%}) fx "
              f"{r['fx_ms']:7.2f} ({r['fx_ms'] / m['iteration_ms'] - 1:+6.1%}) host op "
              f"{r['op_host_ms']:6.2f} fx {r['fx_host_ms']:6.2f} meas "
              f"{r['host_issue_ms'] or 0:6.2f} | op-fx GPU ms "
              + " ".join(f"{c}:{v:+.2f}" for c, v in gd.items() if abs(v) >= 0.05),
              flush=True)
    report(rows)
    if out_json:
        Path(out_json).write_text(json.dumps(rows, indent=1))
    return 0


def report(rows: list[dict]) -> None:
    def med(xs):
        return statistics.median(xs) if xs else float("nan")
    print("\nper class and pass: op path GPU ms, layer path GPU ms, profiled (where any); "
          "op/layer ratio of the sums, and (op - layer) summed over runs over their measured "
          "steps")
    for c in CLASSES:
        for p in ("fwd", "bwd"):
            k = f"{c}|{p}"
            ops = [r["op"].get(k, 0) for r in rows]
            fxs = [r["fx"].get(k, 0) for r in rows]
            if not any(ops) and not any(fxs):
                continue
            share = sum(r["op"].get(k, 0) - r["fx"].get(k, 0) for r in rows) / \
                sum(r["measured_ms"] for r in rows)
            pr = [(r["op"].get(k, 0), r["prof"].get(k, 0)) for r in rows if r["prof"]]
            print(f"{k:18s} op {sum(ops):8.1f} layer {sum(fxs):8.1f} ratio "
                  f"{sum(ops) / max(sum(fxs), 1e-9):5.2f}  (op - layer) / measured {share:+6.1%}"
                  + (f"  (profiled runs: op {sum(a for a, _ in pr):7.1f} measured "
                     f"{sum(b for _, b in pr):7.1f})" if pr else ""))
    for k in ("gpu", "host|fwd", "host|bwd", "kernels|fwd", "kernels|bwd", "step"):
        ops = sum(r["op"].get(k, 0) for r in rows)
        fxs = sum(r["fx"].get(k, 0) for r in rows)
        pr = [(r["op"].get(k, 0), r["prof"].get(k, 0)) for r in rows if r["prof"]]
        print(f"{k:18s} op {ops:8.1f} layer {fxs:8.1f}"
              + (f"  (profiled runs: op {sum(a for a, _ in pr):7.1f} measured "
                 f"{sum(b for _, b in pr):7.1f})" if pr else ""))
    print("\nthe op trace replayed with some classes' GPU times (or every matched op's host "
          "times) the layer path's, same module: |error| median, signed median, host/measured")
    hb = [r for r in rows if r["host_issue_ms"]]
    for k in list(SWAPS) + ["conv host (profiles)"]:
        e = [r["swaps"][k]["ms"] / r["measured_ms"] - 1 for r in rows]
        h = [r["swaps"][k]["host_ms"] / r["host_issue_ms"] for r in hb]
        print(f"{k:20s} {med([abs(x) for x in e]):6.1%} {med(e):+6.1%}  host {med(h):.2f}  "
              f"ops matched to a layer: median {med([r['swaps'][k]['matched'] for r in rows]):.0%}"
              f", min {min(r['swaps'][k]['matched'] for r in rows):.0%}")
    pr = [r for r in rows if r["prof"]]
    if pr:
        print(f"\nhost (fwd + bwd ms) and kernels by class over the {len(pr)} profiled runs: op "
              "path, layer path, measured in the profile (a module's ops summed)")
        for c in CLASSES:
            h = [sum(r[w].get(f"host:{c}", 0) for r in pr) for w in ("op", "fx", "prof")]
            k = [sum(r[w].get(f"kernels:{c}", 0) for r in pr) for w in ("op", "prof")]
            n = [sum(r[w].get(f"layers:{c}", 0) for r in pr) for w in ("op", "prof")]
            if any(h):
                print(f"{c:12s} host {h[0]:7.1f} {h[1]:7.1f} {h[2]:7.1f}  kernels {k[0]:6.0f} "
                      f"{k[1]:6.0f}  layers {n[0]:5.0f} {n[1]:5.0f}")
    e_op = [r["op_ms"] / r["measured_ms"] - 1 for r in rows]
    e_fx = [r["fx_ms"] / r["measured_ms"] - 1 for r in rows]
    print(f"{len(rows)} runs: op path |error| median {med([abs(e) for e in e_op]):.1%}, "
          f"signed {med(e_op):+.1%}; layer path |error| median "
          f"{med([abs(e) for e in e_fx]):.1%}, signed {med(e_fx):+.1%}")
    hb = [r for r in rows if r["host_issue_ms"]]
    if hb:
        print(f"host issue, {len(hb)} runs with a measured one: op/measured median "
              f"{med([r['op_host_ms'] / r['host_issue_ms'] for r in hb]):.2f}, layer/measured "
              f"{med([r['fx_host_ms'] / r['host_issue_ms'] for r in hb]):.2f}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
