"""Whether the op spec rule should carry the donor's CNN kernel model (NOTE [op spec rule
cnn]) to a GPU without a calibration, decided on data kept apart before it was looked at.

On the H200 the op path times fp32 2-D convolutions by the CNN kernel model (NOTE [op
model]), which took the library CNNs from 25% to 8% median; a GPU timed by the spec rule
gets the op model's convolution classes instead. Two checks, neither fitting anything:

- ``kernels``: NeuSight's per-kernel fp32 convolutions (``traces/neusight_kernels/``; the
  A100 PCIe 80 GB, P100, P4, T4 and V100 PCIe, forward only, the halves of
  NEUSIGHT_SPLIT.md, records measured at least 0.5 ms), each card timed as its preset
  (with its ``spec_rule`` where shipped) by the op classes and by the carried kernel model.
  The A100's records against the fp32 peak (NeuSight ran them with TF32 off), both ways.
- ``models``: the seen H100 whole-model CNN runs (fp32: BiT-50 and MobileNet V1 of
  ``traces/h200_op_model_heldout/h100_sets12``, the uncapped fcn_resnet50 of
  ``traces/h200_tensor_plans/runs_h100.jsonl``), each step predicted from a meta trace for
  the ``h100`` preset both ways, against the median of their fresh processes.

The rule, written before either check was run: carry the kernel model to an architecture
where its test half's conv2d median |error| falls by 2 points or more and its max does not
rise by more than 10 points; to Hopper (no NeuSight convolutions) where the seen H100 runs'
median |error| falls. Issue 58's held-out CNNs are read only after the decision.

    python experiments/op_model/cnn_carry.py [kernels|models|all]
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim (experiments/README.md)
sys.path.insert(0, str(HERE))
import neusight_kernels as nk  # noqa: E402

MIN_NS = 0.5e6
_RULE = None  # ops.predict_for, kept while a job replaces it


def conv_features(r: dict[str, str]) -> dict:
    """nk.conv_features with the feature map's shape, as opfeatures records it today."""
    f = nk.conv_features(r)
    n, s, p = int(r["batch"]), int(r["size"]), int(r["padding"])
    return dict(f, N=n, H=s, W=s, ph=p, pw=p, sw=f["stride"], bias=False)


def kernels() -> list[dict]:
    import csv
    from vdnnsim.costs.ops import predict_for
    key = {k: name for name, (k, _, _) in nk.CARDS.items()}
    models: dict[str, tuple] = {}
    errs: dict[tuple, list[float]] = {}
    with open(nk.DATA / "conv.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            ns = float(r["latency_ms"]) * 1e6
            if ns < MIN_NS:
                continue
            name = key[r["device"]]
            if name not in models:
                g = nk.gpu_for(name)
                both = (predict_for(g, cnn=False), predict_for(g, cnn=True))
                models[name] = tuple(dataclasses.replace(  # fp32 math (TF32 off)
                    m, peaks=dict(m.peaks, tf32=m.peaks["fp32"]), cnn=m.cnn and
                    dataclasses.replace(m.cnn, peaks=dict(m.cnn.peaks, tf32=m.cnn.peaks["fp32"])))
                    for m in both)
            f = conv_features(r)
            for label, m in zip(("op classes", "kernel model"), models[name]):
                t, _ = m.time_ns(f, "fwd")
                errs.setdefault((nk.CARDS[name][0], nk.half("conv2d", r), label),
                                []).append((t - ns) / ns)
    rows = []
    for (card, half, label), e in sorted(errs.items()):
        a = [abs(x) for x in e]
        rows.append(dict(card=card, half=half, model=label, n=len(e),
                         median=statistics.median(a), max=max(a),
                         signed=statistics.median(e)))
    return rows


# the seen H100 CNN runs (fp32): name -> (model, batch, input, optimizer, measured record)
SETS12 = ROOT / "traces" / "h200_op_model_heldout" / "h100_sets12" / "measure.jsonl"
PLANS = ROOT / "traces" / "h200_tensor_plans" / "runs_h100.jsonl"


def seen_h100() -> dict[str, tuple[str, int, str | None, str, float]]:
    """run -> (model spec, batch, input, optimizer, measured ms)."""
    out = {}
    for ln in SETS12.read_text().splitlines():
        r = json.loads(ln)
        if r.get("run") in ("bit50-fp32", "mobilenet-fp32"):
            spec = "hf:" + str(HERE / "set2" / Path(r["model"]).name)
            out[r["run"]] = (spec, r["batch_size"], None, r["optimizer"], r["iteration_ms"])
    for ln in PLANS.read_text().splitlines():
        r = json.loads(ln)
        if r.get("policy") == "baseline" and r["model"].endswith(":fcn_resnet50"):
            shape = ",".join(str(x) for x in r["input_shape"])
            out["fcn_resnet50-fp32"] = (r["model"], r["batch_size"], f"image:{shape}",
                                        r["optimizer"], r["iteration_ms"])
    return out


def predict(job: tuple[str, bool]) -> tuple[str, bool, float]:
    run, carry = job
    import vdnnsim.costs.ops as om
    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace import trace_from_dict
    from vdnnsim.trace.optimizer import with_optimizer
    global _RULE
    _RULE = _RULE or om.predict_for  # a worker runs jobs of both kinds: each sets its own
    om.predict_for = functools.partial(_RULE, cnn=carry)
    spec, batch, inp, opt, _ = seen_h100()[run]
    gpu = dataclasses.replace(resolve_gpu("h100"), op_calibration="")  # the spec rule
    d = memory_trace(spec, batch, gpu, "fp32", None, {}, inp)
    r = run_trace(with_optimizer(trace_from_dict(d, run), opt), gpu, "eager")
    return run, carry, r.iteration_time_ns / 1e6


def models() -> list[dict]:
    from concurrent.futures import ProcessPoolExecutor
    seen = seen_h100()
    jobs = [(run, carry) for run in seen for carry in (False, True)]
    with ProcessPoolExecutor(2) as ex:
        got = {(run, carry): ms for run, carry, ms in ex.map(predict, jobs)}
    return [dict(run=run, measured=seen[run][4], op_classes=got[run, False],
                 kernel_model=got[run, True]) for run in seen]


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "all"
    if what in ("kernels", "all"):
        print("NeuSight fp32 conv2d, forward, records >= 0.5 ms: (predicted - measured) / "
              "measured\n")
        print("| card | half | timed by | n | median abs | max abs | median signed |")
        print("|---|---|---|---:|---:|---:|---:|")
        for r in kernels():
            print(f"| {r['card']} | {r['half']} | {r['model']} | {r['n']} | "
                  f"{r['median']:.1%} | {r['max']:.1%} | {r['signed']:+.1%} |")
    if what in ("models", "all"):
        print("\nthe seen H100 CNN runs (fp32), step predicted from a meta trace for h100 "
              "(policy eager) against the measured median\n")
        print("| run | measured ms | op classes | kernel model carried |")
        print("|---|---:|---:|---:|")
        errs: dict[str, list[float]] = {"op_classes": [], "kernel_model": []}
        for r in models():
            cells = []
            for k in errs:
                e = (r[k] - r["measured"]) / r["measured"]
                errs[k].append(abs(e))
                cells.append(f"{r[k]:.1f} ({e:+.1%})")
            print(f"| {r['run']} | {r['measured']:.1f} | " + " | ".join(cells) + " |")
        print("| median abs | | " + " | ".join(f"{statistics.median(v):.1%}"
                                                for v in errs.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
