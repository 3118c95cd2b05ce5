"""Issue 58's held-out library CNNs (README.md here): each run's step time predicted without a
GPU (a meta-device trace of the timm model timed by the op-level model for the card's preset,
replayed as PyTorch runs it, policy eager) against the median of three fresh-process
measurements (device.sh's records), with the issue's targets (8% median, 20% max over the
fp32 runs). Needs torch and timm (the `timm` extra).

    python experiments/step_time/cnn_heldout/check.py predict [--gpu h200]   predictions only
    python experiments/step_time/cnn_heldout/check.py MEASURE.jsonl [--json]   today's and blind

``predict`` prints the predictions of every run of runs.txt for a preset (h200, h100), as
written to predicted_GPU.json before any measurement was read. With MEASURE.jsonl, the
card is each record's (its `gpu`), and the prediction is made again with today's code.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim (experiments/README.md)

from vdnnsim.api import at_host_speed, host_said, resolve_gpu, run_trace  # noqa: E402
from vdnnsim.gpu.probe.aten import memory_trace  # noqa: E402
from vdnnsim.measured.repeat import HOST_BOUND  # noqa: E402
from vdnnsim.trace import trace_from_dict  # noqa: E402
from vdnnsim.trace.optimizer import with_optimizer  # noqa: E402

TARGET_MEDIAN, TARGET_MAX = 0.08, 0.20  # issue 58, library CNNs


def runs() -> dict[str, tuple[str, int, str]]:
    """run name -> (timm model name, batch, dtype), from runs.txt."""
    out = {}
    for line in (HERE / "runs.txt").read_text().splitlines():
        w = line.split()
        if w:
            a = dict(zip(w[2::2], w[3::2]))
            out[w[0]] = (w[1], int(a["-b"]), a["--dtype"])
    return out


def predict(model: str, batch: int, dtype: str, gpu_name: str, band: bool = False) -> dict:
    gpu = resolve_gpu(gpu_name)
    d = memory_trace("timm:create_model", batch, gpu, dtype, None,
                     {"model_name": model}, "image:3,224,224")
    trace = with_optimizer(trace_from_dict(d, model), "sgd")  # measure's default optimizer
    r = run_trace(trace, gpu, "eager")  # as PyTorch runs it: frees at last use
    out = {"iteration_ms": round(r.iteration_time_ns / 1e6, 3),
           "peak_allocated_bytes": r.peak_memory_bytes}
    if not band:
        return out
    # the host's issue time, and where host-bound the band between a fast and a slow host
    # (NOTE [host band]), as `vdnnsim run` says them
    r = host_said(r, trace, lambda k: run_trace(*at_host_speed(trace, gpu, k), "eager"))
    out["host_issue_ms"] = round(r.host_issue_time_ns / 1e6, 3)
    out["host_band_ms"] = [round(x / 1e6, 3) for x in r.host_band_ns] if r.host_band_ns \
        else None
    return out


def preset_of(card: str) -> str:
    for name in ("h100", "h200"):
        if name in card.lower():
            return name
    raise SystemExit(f"check.py: no preset for the card {card!r}")


def compare(path: Path) -> list[dict]:
    spec = runs()
    rows = []
    for line in path.read_text().splitlines():
        m = json.loads(line)
        if m.get("rc") or m["run"] not in spec:
            continue
        model, batch, dtype = spec[m["run"]]
        gpu = preset_of(m["gpu"])
        p = predict(model, batch, dtype, gpu, band=True)
        lo, hi = m["iteration_ms_band"]
        blind = json.loads((HERE / f"predicted_{gpu}.json").read_text())[m["run"]]
        rows.append({"run": m["run"], "gpu": gpu, "measured_ms": round(m["iteration_ms"], 2),
                     "band": [round(lo, 2), round(hi, 2)],
                     "host_issue_ms": round(m.get("host_issue_ms", 0.0), 2),
                     "host_bound": m.get("host_issue_ms", 0.0) >= HOST_BOUND * m["iteration_ms"],
                     "predicted_ms": p["iteration_ms"],
                     "predicted_host_ms": p["host_issue_ms"],
                     "predicted_band": p["host_band_ms"],
                     "error": round(p["iteration_ms"] / m["iteration_ms"] - 1, 4),
                     "blind_error": round(blind["iteration_ms"] / m["iteration_ms"] - 1, 4),
                     "peak_allocated_error": round(p["peak_allocated_bytes"]
                                                   / m["peak_allocated_bytes"] - 1, 4)})
    return rows


def report(rows: list[dict]) -> None:
    print(f"{'run':18s} {'gpu':4s} {'measured ms':>11s} {'band':>17s} {'host ms':>8s} "
          f"{'predicted':>9s} {'error':>7s} {'host ms':>8s} {'host band':>15s} {'alloc':>7s}")
    for r in rows:
        b = r["predicted_band"]
        hb = f"{b[0]:.1f}-{b[1]:.1f}" if b else "not host-bound"
        print(f"{r['run']:18s} {r['gpu']:4s} {r['measured_ms']:11.2f} "
              f"{r['band'][0]:8.2f}-{r['band'][1]:<8.2f} {r['host_issue_ms']:8.2f} "
              f"{r['predicted_ms']:9.2f} {r['error']:+7.1%} {r['predicted_host_ms']:8.2f} "
              f"{hb:>15s} {r['peak_allocated_error']:+7.1%}")
    print("(measured: the median of 3 fresh processes, the band of their medians, the host's"
          " issue time;\n predicted: the step, the host's issue time, and the band between a"
          " fast and a slow host where host-bound)")
    bound = [r for r in rows if r["host_bound"]]
    if bound:
        inside = [r for r in bound if r["predicted_band"]
                  and r["predicted_band"][0] <= r["measured_ms"] <= r["predicted_band"][1]]
        print(f"host-bound as measured (host >= {HOST_BOUND:.0%} of the step): {len(bound)} "
              f"runs, {sum(1 for r in bound if r['predicted_band'])} predicted host-bound, "
              f"{len(inside)} inside their predicted band")
    for label, key in (("fp32", "error"), ("bf16", "error"), ("fp32, blind", "blind_error"),
                       ("bf16, blind", "blind_error")):
        e = [abs(r[key]) for r in rows if r["run"].endswith(label.split(",")[0])]
        if e:
            verdict = ""
            if label.startswith("fp32"):
                ok = statistics.median(e) <= TARGET_MEDIAN and max(e) <= TARGET_MAX
                verdict = f" (target {TARGET_MEDIAN:.0%} / {TARGET_MAX:.0%}: " \
                          f"{'met' if ok else 'not met'})"
            print(f"{label}: {len(e)} runs, |error| median {statistics.median(e):.1%}, "
                  f"max {max(e):.1%}{verdict}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("measured", help="`predict`, or device.sh's measure.jsonl")
    ap.add_argument("--gpu", default="h200", help="predict: the preset (h200, h100)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.measured == "predict":
        preds = {n: predict(m, b, dt, a.gpu) for n, (m, b, dt) in runs().items()}
        print(json.dumps(preds, indent=1))
        return 0
    rows = compare(Path(a.measured))
    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        report(rows)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
