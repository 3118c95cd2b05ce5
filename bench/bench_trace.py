"""Meta-device tracing speed: the wall time of `vdnnsim trace --model torchvision:resnet50
--gpu h200` as a user runs it (a fresh process: Python, torch and torchvision imports, the
model built on the meta device, its probe, the kernel model, the YAML written), median of
several runs, and the share of it that importing torch alone takes (same run).

    .venv/bin/python bench/bench_trace.py [--repeat 5] [--model torchvision:resnet50]
    .venv/bin/python bench/bench_trace.py --model hf:llama-1b --batch 4 --seq-len 512 \
        --dtype autocast-bf16     # issue 29: a 1B transformer, op by op, timed by the op model
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--model", default="torchvision:resnet50")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--dtype", default="fp32")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        out = str(Path(d) / "t.yaml")
        trace = [sys.executable, "-m", "vdnnsim", "trace", "--model", args.model, "-b",
                 str(args.batch), "--gpu", "h200", "--dtype", args.dtype, "-o", out] + (
                     ["--seq-len", str(args.seq_len)] if args.seq_len else [])
        imp = [sys.executable, "-c", "import torch, torchvision"]
        wall(trace)  # warm the file cache
        t = statistics.median(wall(trace) for _ in range(args.repeat))
        i = statistics.median(wall(imp) for _ in range(args.repeat))
    print(f"vdnnsim trace --model {args.model} -b {args.batch} --gpu h200 --dtype {args.dtype}"
          f"{' --seq-len %d' % args.seq_len if args.seq_len else ''}: {t:.2f} s "
          f"(median of {args.repeat}); importing torch and torchvision alone: {i:.2f} s "
          f"({i / t:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
