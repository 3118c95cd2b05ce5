"""The held-out video CNNs' uncapped steps on an H100 (experiments/tensor_plans/heldout.yaml;
measured three fresh processes each in traces/h200_tensor_plans/runs_h100.jsonl, the
`-eager` rows) against their meta traces timed three ways:

- ``rule``: the ``h100`` preset as shipped (NOTE [op spec rule]: the H200's model with the
  H100's specs; it has no 3-D classes, so each 3-D convolution takes the 2-D class);
- ``own 2-D``: the H100's own op model, fitted from its calibrations (the transformer grids
  and host chains of traces/h200_op_model_heldout/h100_sets12/cal/, the CNN grids of
  traces/h100_op_calibration/) without the video grid: 3-D convolutions on its 2-D class;
- ``own 3-D``: the same with the video grid (3-D convolutions' classes of their own).

No video CNN's step was used to fit anything here: the calibrations are microbenchmarks.

    python experiments/op_model/video_check.py [--workers N]
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim (experiments/README.md)
HELDOUT = ROOT / "experiments" / "tensor_plans" / "heldout.yaml"
RUNS = ROOT / "traces" / "h200_tensor_plans" / "runs_h100.jsonl"
EARLIER = ROOT / "traces" / "h200_op_model_heldout" / "h100_sets12" / "cal"
CAL = ROOT / "traces" / "h100_op_calibration"
VARIANTS = ("rule", "own 2-D", "own 3-D")


def fit_own(video: bool, path: Path) -> None:
    from vdnnsim.costs.ops import fit
    from vdnnsim.hardware import gpu_preset
    files = [EARLIER / "h100_ops_bf16.json", EARLIER / "h100_ops_fp32.json",
             EARLIER / "host_1.json", CAL / "h100_ops_cnn_bf16.json",
             CAL / "h100_ops_cnn_fp32.json"]
    if video:
        files += [CAL / "h100_ops_video_fp32.json", CAL / "h100_ops_video_bf16.json"]
    raws = [json.loads(f.read_text()) for f in files]
    gpu = gpu_preset("h100")
    out = fit(raws, dict(gpu.peak_flops), gpu.mem_bw_bytes_per_s, raws[0]["gpu"]["sm_count"])
    path.write_text(json.dumps(out))


def predict(job: tuple[dict, str, str]) -> tuple[str, str, float, int, str]:
    m, which, model_file = job
    from vdnnsim.api import resolve_gpu, run_trace
    from experiments.tensor_plans.make_plans import trace_of
    gpu = resolve_gpu("h100")  # rule: the spec rule, not the H100's shipped calibration
    gpu = dataclasses.replace(gpu, op_calibration="" if which == "rule" else model_file)
    t = trace_of(m, gpu)
    r = run_trace(t, gpu, "eager", record=False)
    return m["name"], which, r.iteration_time_ns / 1e6, r.peak_memory_bytes, \
        t.source.note or ""


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    models = [m for m in yaml.safe_load(HELDOUT.read_text())["models"]
              if "video CNN" in m["family"]]
    measured = {}
    for line in RUNS.read_text().splitlines():
        r = json.loads(line)
        if r["name"].endswith("-eager") and r.get("rc") == 0 and r.get("iteration_ms"):
            measured[r["name"][:-6]] = r
    with tempfile.TemporaryDirectory() as tmp:
        files = {"own 2-D": Path(tmp) / "own2d.json", "own 3-D": Path(tmp) / "own3d.json"}
        fit_own(False, files["own 2-D"])
        fit_own(True, files["own 3-D"])
        jobs = [(m, w, str(files.get(w, ""))) for m in models for w in VARIANTS]
        with ProcessPoolExecutor(args.workers) as pool:
            got = {(n, w): (ms, peak) for n, w, ms, peak, _ in pool.map(predict, jobs)}
    print(f"{'model':12s} {'dtype':14s} {'H100 ms':>8s} {'band':>13s} {'host':>6s} | "
          + " | ".join(f"{w:>7s} {'err':>6s}" for w in VARIANTS))
    errs: dict[str, list[float]] = {w: [] for w in VARIANTS}
    for m in models:
        r = measured.get(m["name"])
        if r is None:
            print(f"{m['name']:12s} not measured")
            continue
        ms = r["iteration_ms"]
        band = r.get("iteration_ms_band") or [ms, ms]
        cells = []
        for w in VARIANTS:
            p = got[m["name"], w][0]
            errs[w].append(p / ms - 1)
            cells.append(f"{p:7.1f} {p / ms - 1:+6.1%}")
        print(f"{m['name']:12s} {m['dtype']:14s} {ms:8.1f} {band[0]:6.1f}-{band[1]:<6.1f} "
              f"{r.get('host_issue_ms', float('nan')):6.1f} | " + " | ".join(cells))
    for w in VARIANTS:
        e = [abs(x) for x in errs[w]]
        if e:
            print(f"{w:8s} {len(e)} runs: |error| median {statistics.median(e):.1%}, "
                  f"max {max(e):.1%}; signed median {statistics.median(errs[w]):+.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
