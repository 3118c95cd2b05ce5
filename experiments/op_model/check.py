"""Issue 29's held-out set (README.md): each run's step time predicted from a meta-device
trace timed by the op-level model (NOTE [op model]; no GPU) and replayed as PyTorch runs it
(policy eager), against the median of three
fresh-process measurements (traces/h200_op_model_heldout/set1/measure.jsonl).

    python experiments/op_model/check.py [--json] [--set set2]

``--set set2`` (or ``set3``): the second (third) held-out set
(experiments/op_model/set2/README.md), its runs and configs there and its measurements
in traces/h200_op_model_heldout/set2/measure.jsonl.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # its loss_type notice
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim (experiments/README.md)
HERE = ROOT / "experiments" / "op_model"
MEASURED = ROOT / "traces" / "h200_op_model_heldout" / "set1" / "measure.jsonl"


def use_set(name: str) -> None:
    """Point HERE and MEASURED at held-out set ``name`` (``set2``)."""
    global HERE, MEASURED
    HERE = ROOT / "experiments" / "op_model" / name
    MEASURED = ROOT / "traces" / "h200_op_model_heldout" / name / "measure.jsonl"


def runs() -> list[tuple[str, str, int, int | None, str, str]]:
    out = []
    for line in (HERE / "runs.txt").read_text().splitlines():
        w = line.split()
        if not w:
            continue
        a = dict(zip(w[2::2], w[3::2]))
        out.append((w[0], w[1], int(a["-b"]), int(a["--seq-len"]) if "--seq-len" in a
                    else None, a["--dtype"], a["--optimizer"]))
    return out


def predict(model: str, batch: int, seq: int | None, dtype: str, opt: str) -> dict:
    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace.optimizer import with_optimizer
    from vdnnsim.trace import trace_from_dict

    gpu = resolve_gpu("h200")
    d = memory_trace(f"hf:{HERE / (model + '.yaml')}", batch, gpu, dtype, seq, {}, None)
    trace = with_optimizer(trace_from_dict(d, model), opt)
    r = run_trace(trace, gpu, "eager")  # PyTorch as it runs: frees at last use
    return {"iteration_ms": r.iteration_time_ns / 1e6, "note": d["source"]["note"],
            "peak_allocated_bytes": r.peak_memory_bytes}


def main(argv: list[str]) -> int:
    if "--set" in argv:
        use_set(argv[argv.index("--set") + 1])
    measured = {}
    for line in MEASURED.read_text().splitlines():
        rec = json.loads(line)
        measured[rec["run"]] = rec
    rows = []
    for name, model, b, s, dt, opt in runs():
        m = measured.get(name)
        if m is None or m.get("rc"):
            continue
        p = predict(model, b, s, dt, opt)
        lo, hi = m["iteration_ms_band"]
        err = p["iteration_ms"] / m["iteration_ms"] - 1
        rows.append({"run": name, "measured_ms": round(m["iteration_ms"], 2),
                     "band": [round(lo, 2), round(hi, 2)],
                     "host_issue_ms": round(m["host_issue_ms"], 2),
                     "predicted_ms": round(p["iteration_ms"], 2), "error": round(err, 4),
                     "inside_band": lo <= p["iteration_ms"] <= hi,
                     "peak_allocated_error": round(p["peak_allocated_bytes"]
                                                   / m["peak_allocated_bytes"] - 1, 4)})
    if "--json" in argv:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'run':18s} {'measured ms':>11s} {'band':>17s} {'host ms':>8s} {'predicted':>9s} "
          f"{'error':>7s} {'alloc':>7s}")
    for r in rows:
        print(f"{r['run']:18s} {r['measured_ms']:11.2f} {r['band'][0]:8.2f}-{r['band'][1]:<8.2f}"
              f" {r['host_issue_ms']:8.2f} {r['predicted_ms']:9.2f} {r['error']:+7.1%}"
              f" {r['peak_allocated_error']:+7.1%}" + ("  in band" if r["inside_band"] else ""))
    errs = [abs(r["error"]) for r in rows]
    alloc = [abs(r["peak_allocated_error"]) for r in rows]
    for label, sel in (("fp32", "fp32"), ("bf16", "bf16"), ("all", "")):
        e = [abs(r["error"]) for r in rows if sel in r["run"]]
        if e:
            print(f"{label}: {len(e)} runs, |error| median {statistics.median(e):.1%}, "
                  f"max {max(e):.1%}")
    if alloc:
        print(f"peak allocated: {len(alloc)} runs, |error| median "
              f"{statistics.median(alloc):.1%}, max {max(alloc):.1%}")
    return 0 if errs else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
