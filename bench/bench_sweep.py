"""A 1,000-run sweep over the zoo: 8 networks x 25 batch sizes x 5 policies on the K40
preset, in process and on local worker processes. Median of several repetitions.

    .venv/bin/python bench/bench_sweep.py [--repeat 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from vdnnsim.study import StudySpec, run_study

# the eight networks the zoo had when this benchmark was written (it has grown since), so that
# the sweep stays 1,000 runs and its times stay comparable
NETWORKS = ["alexnet", "overfeat", "googlenet", "vgg16", "vgg116", "vgg216", "vgg316", "vgg416"]
POLICIES = ["baseline_p", "vdnn_all_m", "vdnn_conv_p", "vdnn_all_p", "vdnn_conv_m"]
BATCHES = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224,
           240, 256, 288, 320, 384]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    spec = StudySpec(base={"gpu": "k40"}, sweep={"network": NETWORKS, "batch_size": BATCHES,
                                                 "policy": POLICIES})
    for label, kw in (("in process", {}), (f"{args.workers} workers",
                                           {"workers": args.workers})):
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            df = run_study(spec, **kw)
            times.append(time.perf_counter() - t0)
        if len(df) != 1000 or not df.error.isna().all():
            print(f"{label}: {len(df)} rows, {int(df.error.notna().sum())} with errors, e.g. "
                  f"{df.error.dropna().head(1).tolist()}", file=sys.stderr)
            return 1
        print(f"{label:12s}: 1000 runs in {statistics.median(times):.2f} s (median of "
              f"{args.repeat}; {1000 / statistics.median(times):.0f} runs/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
