"""Whether the ``h100`` preset ships its own op calibration (issue 58), decided on the seen H100
runs only, by a rule written before this script ran and before issue 58's held-out CNNs
were read with the candidate:

- the candidate: every H100 calibration file there is, fitted as ``vdnnsim.costs.ops`` fits
  the H200's (the transformer grids and host chains of
  ``traces/h200_op_model_heldout/h100_sets12/cal/``, the CNN and video grids of
  ``traces/h100_op_calibration/``; video_check.fit_own with the video grid);
- the seen runs: h100_check.py's 22 (transformers, BiT-50, MobileNet V1; fp32 and
  autocast-bf16), video_check.py's 4 video CNNs, cnn_carry.py's fcn_resnet50; each step
  predicted from a meta trace (policy eager) by the rule (the H200's model on the H100's
  specs) and by the candidate;
- ship where, over those runs, the candidate's median |error| is at most 1 point above the
  rule's and its max is not above the rule's. Shipped or not, the spec rule's donor stays the
  H200 for every other GPU (their NeuSight corrections were fitted against it).

    python experiments/op_model/h100_own.py [--workers N] [--write PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim (experiments/README.md)
sys.path.insert(0, str(HERE))
import cnn_carry  # noqa: E402
import h100_check  # noqa: E402
import video_check  # noqa: E402


def predict(job: tuple[str, str, str]) -> tuple[str, str, float]:
    """(run, variant, ms) of one seen run: ``own`` with op calibration ``model_file``."""
    run, which, model_file = job
    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace import trace_from_dict
    from vdnnsim.trace.optimizer import with_optimizer
    gpu = dataclasses.replace(resolve_gpu("h100"),  # the rule: as before the H100 shipped one
                              op_calibration=model_file if which == "own" else "")
    kind, name = run.split(":", 1)
    if kind == "sets12":
        s, model, batch, seq, dtype, opt = h100_check.runs()[name]
        folder = HERE if s == "set1" else HERE / "set2"
        d = memory_trace(f"hf:{folder / (model + '.yaml')}", batch, gpu, dtype, seq, {}, None)
        t = with_optimizer(trace_from_dict(d, model), opt)
    elif kind == "video":
        from experiments.tensor_plans.make_plans import trace_of
        m = next(m for m in yaml.safe_load(video_check.HELDOUT.read_text())["models"]
                 if m["name"] == name)
        t = trace_of(m, gpu)
    else:
        spec, batch, inp, opt, _ = cnn_carry.seen_h100()[name]
        d = memory_trace(spec, batch, gpu, "fp32", None, {}, inp)
        t = with_optimizer(trace_from_dict(d, name), opt)
    want = "aten-v1" if which == "own" else "aten-v1-specs"
    assert t.source.cost_model == want, (run, which, t.source.cost_model)
    return run, which, run_trace(t, gpu, "eager", record=False).iteration_time_ns / 1e6


def measured() -> dict[str, float]:
    """Every seen H100 run's measured step (ms), keyed ``kind:name``."""
    out = {}
    table = h100_check.runs()
    for x in (h100_check.DATA / "measure.jsonl").read_text().splitlines():
        r = json.loads(x)
        if r["run"] in table and not r.get("rc"):
            out[f"sets12:{r['run']}"] = r["iteration_ms"]
    video = {m["name"] for m in yaml.safe_load(video_check.HELDOUT.read_text())["models"]
             if "video CNN" in m["family"]}
    for x in video_check.RUNS.read_text().splitlines():
        r = json.loads(x)
        if r["name"].endswith("-eager") and r["name"][:-6] in video and r.get("rc") == 0 \
                and r.get("iteration_ms"):
            out[f"video:{r['name'][:-6]}"] = r["iteration_ms"]
    out["fcn:fcn_resnet50-fp32"] = cnn_carry.seen_h100()["fcn_resnet50-fp32"][4]
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--write", type=Path, help="also write the candidate's fitted file here")
    a = ap.parse_args(argv)
    meas = measured()
    with tempfile.TemporaryDirectory() as tmp:
        cand = Path(tmp) / "h100_ops.model.json"
        video_check.fit_own(True, cand)
        if a.write:
            a.write.write_text(json.dumps(json.loads(cand.read_text()), indent=1) + "\n")
        jobs = [(run, w, str(cand)) for run in meas for w in ("rule", "own")]
        with ProcessPoolExecutor(a.workers) as pool:
            got = {(r, w): ms for r, w, ms in pool.map(predict, jobs)}
    errs: dict[str, list[float]] = {"rule": [], "own": []}
    print(f"{'run':34s} {'measured':>9s} | {'rule':>7s} {'err':>7s} | {'own':>7s} {'err':>7s}")
    for run, ms in meas.items():
        cells = []
        for w in errs:
            e = got[run, w] / ms - 1
            errs[w].append(e)
            cells.append(f"{got[run, w]:7.1f} {e:+7.1%}")
        print(f"{run:34s} {ms:9.1f} | " + " | ".join(cells))
    med = {w: statistics.median(abs(x) for x in e) for w, e in errs.items()}
    top = {w: max(abs(x) for x in e) for w, e in errs.items()}
    for w in errs:
        print(f"{w:5s} {len(errs[w])} runs: |error| median {med[w]:.1%}, max {top[w]:.1%}")
    ship = med["own"] <= med["rule"] + 0.01 and top["own"] <= top["rule"]
    print(f"the rule: {'ship' if ship else 'do not ship'} the H100's own op calibration")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
