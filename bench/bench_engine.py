"""Engine speed: one simulated iteration of VGG-16 (256) and VGG-416 (32) on the K40
preset, per policy. Reports the median of several repetitions (after one warm-up), the
VGG-416 / VGG-16 ratio measured in the same run, and what the engine's invariant checks
(NOTE [invariants]) cost: the same replay with and without them, as a ratio.

    .venv/bin/python bench/bench_engine.py [--repeat 15] [--json out.json]

Wall time on a shared two-core machine swings about 2x within an hour for the same code;
bench/engine_instructions.py counts instructions instead (NOTE [engine speed]).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from vdnnsim.api import build_trace, resolve_gpu, run_trace
from vdnnsim.engine import replay
from vdnnsim.policies import get_policy, liveness

POLICIES = ["baseline_p", "vdnn_all_m", "vdnn_all_p", "vdnn_conv_p", "vdnn_dyn"]
CASES = [("vgg16", 256), ("vgg416", 32)]


def median_ms(fn, repeat: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    gpu = resolve_gpu("k40")
    rows = []
    for net, batch in CASES:
        trace = build_trace(net, batch, gpu)
        build = median_ms(lambda: build_trace(net, batch, gpu), args.repeat)
        for p in POLICIES:
            ms = median_ms(lambda: run_trace(trace, gpu, p), args.repeat)
            rows.append({"network": net, "batch_size": batch, "layers": len(trace.layers),
                         "policy": p, "median_ms": round(ms, 3),
                         "trace_build_ms": round(build, 3)})
    print(f"{'network':8s} {'layers':>6s} {'policy':12s} {'median ms':>10s} {'build ms':>9s}")
    for r in rows:
        print(f"{r['network']:8s} {r['layers']:6d} {r['policy']:12s} {r['median_ms']:10.2f} "
              f"{r['trace_build_ms']:9.2f}")
    by = {(r["network"], r["policy"]): r["median_ms"] for r in rows}
    print("VGG-416 / VGG-16 time ratio per policy: " + ", ".join(
        f"{p} {by[('vgg416', p)] / by[('vgg16', p)]:.1f}x" for p in POLICIES))
    trace = build_trace("vgg416", 32, gpu)
    lv = liveness(trace)
    costs = []
    for p in ("vdnn_all_p", "vdnn_conv_p"):
        fn, fixed = get_policy(p)
        plan = fn(trace, gpu, gpu.memory_bytes, dict(fixed))
        on, off = (median_ms(lambda c=c: replay(trace, gpu, plan, gpu.memory_bytes, lv,
                                                record_ops=False, checks=c),
                             args.repeat) for c in (True, False))
        costs.append(f"{p} {on:.1f} ms with, {off:.1f} ms without ({on / off - 1:+.1%})")
    print("invariant checks on VGG-416 (32): " + "; ".join(costs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
