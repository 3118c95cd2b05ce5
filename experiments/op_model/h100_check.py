"""The op model on a GPU it was not calibrated on (NOTE [op spec rule]): issue 29's first two
held-out sets as measured on an H100 (traces/h200_op_model_heldout/h100_sets12, session 31), against

- ``rule``: meta traces timed for the ``h100`` preset by the spec rule (the H200's fitted op
  model with the H100's peaks, bandwidth and SM count; nothing of the H100 fitted);
- ``own``: the H100's own op model, fitted here from the H100's transformer and host-only
  calibrations of the same machine (``cal/``; no CNN grid was run there, so a CNN's
  convolutions take the ``mm`` stand-in and its row is left out of ``own``'s summary);
- ``h200``: the H200's measurement of the same run and its op model's prediction, so the
  rule's error splits into the op model's own error on the H200 and the error of the
  ratio the rule predicts between the cards.

Each replayed as PyTorch runs it (policy eager), as check.py does. ``--ablation`` adds the
rule without its bandwidth scaling (every per-byte cost the H200's) and own without its
host-only file's mixed chains (NOTE [host mixes]), run after the blind comparison, to show
what each part does.

    python experiments/op_model/h100_check.py [--json OUT.json] [--workers N] [--ablation]
    python experiments/op_model/h100_check.py --host   # the machines' host chains only
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # its loss_type notice
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim (experiments/README.md)
HERE = ROOT / "experiments" / "op_model"
DATA = ROOT / "traces" / "h200_op_model_heldout" / "h100_sets12"
OWN = DATA / "h100_ops.model.json"
OWN_NOMIX = DATA / "h100_ops_nomix.model.json"  # the ablation's: no mixed chains' factor
H200_MEASURED = {"set1": ROOT / "traces" / "h200_op_model_heldout" / "set1" / "measure.jsonl",
                 "set2": ROOT / "traces" / "h200_op_model_heldout" / "set2" / "measure.jsonl"}
CNNS = ("bit50", "mobilenet")
_SCALED = None  # opmodel.per_byte_scaled, kept while the ablation replaces it


def runs() -> dict[str, tuple[str, str, int, int | None, str, str]]:
    """Every run of the first two sets: name -> (set, model, batch, seq, dtype, optimizer)."""
    out = {}
    for s, folder in (("set1", HERE), ("set2", HERE / "set2")):
        for line in (folder / "runs.txt").read_text().splitlines():
            w = line.split()
            if not w or "--plan" in w:
                continue
            a = dict(zip(w[2::2], w[3::2]))
            out[w[0]] = (s, w[1], int(a["-b"]), int(a["--seq-len"]) if "--seq-len" in a
                         else None, a["--dtype"], a["--optimizer"])
    return out


def fit_own(nomix: bool = False) -> None:
    """The H100's own op model from its calibrations (written once, beside them);
    ``nomix``: without the host-only file's mixed chains (NOTE [host mixes])."""
    from vdnnsim.hardware import gpu_preset
    from vdnnsim.costs.ops import fit
    from vdnnsim.yamlio import write_text_atomic
    raws = [json.loads((DATA / "cal" / f).read_text())
            for f in ("h100_ops_bf16.json", "h100_ops_fp32.json", "host_1.json")]
    if nomix:
        raws[-1] = dict(raws[-1], host_mixes=[])
    gpu = gpu_preset("h100")
    out = fit(raws, dict(gpu.peak_flops), gpu.mem_bw_bytes_per_s, raws[0]["gpu"]["sm_count"])
    write_text_atomic(OWN_NOMIX if nomix else OWN, json.dumps(out, indent=1) + "\n")


def predict(job: tuple[str, str, str, int, int | None, str, str]) -> tuple[str, str, float]:
    name, which, model, batch, seq, dtype, opt = job
    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace.optimizer import with_optimizer
    from vdnnsim.trace import trace_from_dict

    gpu = resolve_gpu("h200" if which == "h200" else "h100")
    if which in ("rule", "unscaled"):  # the spec rule, not the H100's shipped calibration
        gpu = dataclasses.replace(gpu, op_calibration="")
    import vdnnsim.costs.ops as om
    global _SCALED
    _SCALED = _SCALED or om.per_byte_scaled  # a worker runs jobs of every kind: each sets
    om.per_byte_scaled = (lambda fitted, r: fitted) if which == "unscaled" else _SCALED  # its own
    if which in ("own", "own_nomix"):
        gpu = dataclasses.replace(gpu, op_calibration=str(OWN if which == "own" else OWN_NOMIX))
    folder = HERE if runs()[name][0] == "set1" else HERE / "set2"
    d = memory_trace(f"hf:{folder / (model + '.yaml')}", batch, gpu, dtype, seq, {}, None)
    want = {"rule": "aten-v1-specs", "unscaled": "aten-v1-specs"}.get(which, "aten-v1")
    assert d["source"]["cost_model"] == want, (which, d["source"])
    r = run_trace(with_optimizer(trace_from_dict(d, model), opt), gpu, "eager")
    return name, which, r.iteration_time_ns / 1e6


def host_ratios() -> tuple[float, float, int]:
    """(forward, backward, chains): the median over the host chains both machines timed of
    this H100 machine's cost over the shipped H200 files' (each side's median over its
    processes per chain: kind, as modules or not, dtype, autocast)."""
    def per_chain(files: list[Path]) -> dict[tuple, tuple[float, float]]:
        got: dict[tuple, list[tuple[float, float]]] = {}
        for f in files:
            for c in json.loads(f.read_text())["host_chains"]:
                key = (c["chain"], c["modules"], c["dtype"], c["autocast"])
                got.setdefault(key, []).append((c["host_fwd_ns"], c["host_bwd_ns"]))
        return {k: (statistics.median(x for x, _ in v), statistics.median(y for _, y in v))
                for k, v in got.items()}
    cal = ROOT / "vdnnsim" / "data" / "calibration"
    h100 = per_chain([DATA / "cal" / "host_1.json"])
    h200 = per_chain([cal / "h200_ops_host.json", cal / "h200_ops_host_s28.json"])
    both = [k for k in h100 if k in h200]
    return (statistics.median(h100[k][0] / h200[k][0] for k in both),
            statistics.median(h100[k][1] / h200[k][1] for k in both), len(both))


def _med(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.1%}, max {max(xs):.1%}" if xs else "-"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ablation", action="store_true")
    ap.add_argument("--host", action="store_true", help="only the two machines' host chains")
    args = ap.parse_args(argv)
    if args.host:
        f, b, n = host_ratios()
        print(f"H100 machine's host chains over the shipped H200 files', median over {n} "
              f"chains: forward x{f:.3f}, backward x{b:.3f}")
        return 0
    if not OWN.exists():
        fit_own()
    if args.ablation and not OWN_NOMIX.exists():
        fit_own(nomix=True)
    table = runs()
    h100 = {json.loads(x)["run"]: json.loads(x)
            for x in (DATA / "measure.jsonl").read_text().splitlines()}
    h200 = {}
    for f in H200_MEASURED.values():
        for x in f.read_text().splitlines():
            h200[json.loads(x)["run"]] = json.loads(x)
    names = [n for n in table if n in h100 and not h100[n].get("rc")]
    kinds = ("rule", "own", "h200") + (("unscaled", "own_nomix") if args.ablation else ())
    jobs = [(n, w, *table[n][1:]) for n in names for w in kinds
            if w != "own_nomix" or n.split("-")[0] not in CNNS]
    pred: dict[tuple[str, str], float] = {}
    with ProcessPoolExecutor(args.workers) as pool:
        for name, which, ms in pool.map(predict, jobs):
            pred[name, which] = ms
    rows = []
    for n in names:
        m, m2 = h100[n], h200[n]
        lo, hi = m["iteration_ms_band"]
        rows.append({
            "run": n, "set": table[n][0], "measured_ms": round(m["iteration_ms"], 2),
            "band": [round(lo, 2), round(hi, 2)], "host_issue_ms": round(m["host_issue_ms"], 2),
            "rule_ms": round(pred[n, "rule"], 2),
            "rule_error": round(pred[n, "rule"] / m["iteration_ms"] - 1, 4),
            "rule_in_band": lo <= pred[n, "rule"] <= hi,
            "own_ms": round(pred[n, "own"], 2),
            "own_error": round(pred[n, "own"] / m["iteration_ms"] - 1, 4),
            "cnn": n.split("-")[0] in CNNS,
            "h200_measured_ms": round(m2["iteration_ms"], 2),
            "h200_error": round(pred[n, "h200"] / m2["iteration_ms"] - 1, 4),
            "ratio_measured": round(m["iteration_ms"] / m2["iteration_ms"], 4),
            "ratio_predicted": round(pred[n, "rule"] / pred[n, "h200"], 4)})
        if args.ablation:
            rows[-1]["unscaled_error"] = round(pred[n, "unscaled"] / m["iteration_ms"] - 1, 4)
            if (n, "own_nomix") in pred:
                rows[-1]["own_nomix_error"] = round(pred[n, "own_nomix"] / m["iteration_ms"]
                                                    - 1, 4)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    print(f"{'run':17s} {'H100 ms':>8s} {'band':>15s} {'host':>6s} | {'rule':>7s} {'err':>6s} | "
          f"{'own':>7s} {'err':>6s} | {'H200 ms':>8s} {'err':>6s} | ratio meas/pred")
    for r in rows:
        print(f"{r['run']:17s} {r['measured_ms']:8.2f} {r['band'][0]:7.2f}-{r['band'][1]:<7.2f}"
              f" {r['host_issue_ms']:6.1f} | {r['rule_ms']:7.2f} {r['rule_error']:+6.1%} | "
              f"{r['own_ms']:7.2f} {r['own_error']:+6.1%}{'*' if r['cnn'] else ' '}| "
              f"{r['h200_measured_ms']:8.2f} {r['h200_error']:+6.1%} | "
              f"{r['ratio_measured']:.3f} / {r['ratio_predicted']:.3f}")
    for label, sel in (("fp32", "fp32"), ("bf16", "bf16"), ("all", "")):
        sub = [r for r in rows if sel in r["run"]]
        print(f"{label:5s} {len(sub):2d} runs: rule {_med([abs(r['rule_error']) for r in sub])}"
              f"; own (no CNN) {_med([abs(r['own_error']) for r in sub if not r['cnn']])}"
              f"; H200 model on the H200 {_med([abs(r['h200_error']) for r in sub])}"
              f"; ratio {_med([abs(r['ratio_predicted'] / r['ratio_measured'] - 1) for r in sub])}")
    if args.ablation:
        for label, sel in (("fp32", "fp32"), ("bf16", "bf16"), ("all", "")):
            sub = [abs(r["unscaled_error"]) for r in rows if sel in r["run"]]
            print(f"{label:5s} the rule without its bandwidth scaling: {_med(sub)}")
            sub = [abs(r["own_nomix_error"]) for r in rows
                   if sel in r["run"] and "own_nomix_error" in r]
            print(f"{label:5s} own without the mixed chains' factor (no CNN): {_med(sub)}")
    print("(*: a CNN, whose convolutions the H100's own transformer-only calibration times "
          "by the mm stand-in)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
