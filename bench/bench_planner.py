"""Planner speed and quality: the greedy search (NOTE [planner]) against the MILP (NOTE
[milp planner]) on the paper's VGG-16 (256) in a 12 GiB K40 and the H200's profiled
VGG-16 and ResNet-50 (256) under a 12 GiB cap: wall time (median of several runs, in one
process) and each plan's engine-checked step time, so the ratio of the two is read off one
run. With ``--blocks``, the block planner too (NOTE [block plan], [parameter offload]) on the
3.4B Llama's profile under 22 GiB, the optimizer's place weighed, under the default
allocator and under expandable segments (NOTE [planned allocator]): wall time, the plan
(parameter blocks / checkpointed / offloaded) and its predicted step; and VGG-16 (32, the
H200's op model on its meta-device trace, needs torch) at 80% of its step's peak, where
the plan mixes offloaded and checkpointed blocks (NOTE [block mix]), beside the fastest
pure plan that fits.

    .venv/bin/python bench/bench_planner.py [--repeat 3] [--blocks]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from vdnnsim.api import build_trace, resolve_gpu
from vdnnsim.engine import replay
from vdnnsim.planners.greedy import search_plan
from vdnnsim.planners.blocks import plan_blocks
from vdnnsim.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30


def cases():
    k40 = resolve_gpu("k40")
    yield "K40 VGG-16 (256)", build_trace("vgg16", 256, k40), k40
    h200 = resolve_gpu("h200")
    for name in ("vgg16_b256", "resnet50_b256"):
        yield f"H200 {name}", load_trace(ROOT / "traces/h200_torchvision" / f"{name}.yaml"), h200


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--blocks", action="store_true", help="the block planner's case too")
    args = ap.parse_args(argv)
    print(f"{'case':22s} {'method':7s} {'wall s':>7s} {'plan ms':>9s}")
    for label, trace, gpu in cases():
        for method in ("greedy", "milp"):
            walls = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                plan, _ = search_plan(trace, gpu, 12 * GiB, method=method)
                walls.append(time.perf_counter() - t0)
            ms = float("nan")
            if plan is not None:
                sim = replay(plan.trace or trace, gpu, plan, 12 * GiB,
                              record_ops=False)
                ms = sim.end_ns / 1e6
            print(f"{label:22s} {method:7s} {statistics.median(walls):7.2f} {ms:9.1f}")
    if args.blocks:
        trace = load_trace(ROOT / "traces/h200_optimizer_offload/llama-3b_b1_s1024.yaml.gz")
        h200 = resolve_gpu("h200")
        for label, alloc in (("default", None), ("expandable", {"expandable_segments": True})):
            walls = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                p = plan_blocks(trace, h200, 22 * GiB, None, alloc)
                walls.append(time.perf_counter() - t0)
            print(f"{'H200 llama-3b 22 GiB':22s} blocks, {label}: {statistics.median(walls):.2f} s, "
                  f"plan {p.params} / {p.recompute} / {p.blocks}, "
                  f"{p.iteration_time_ns / 1e6:.1f} ms")
        _mix_case(args.repeat)
    return 0


def _mix_case(repeat: int) -> None:
    import subprocess
    import sys
    import tempfile

    from vdnnsim.api import run_trace
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "vdnnsim", "trace", "--model",
                        "torchvision.models:vgg16", "--input", "image:3,224,224", "-b", "32",
                        "--gpu", "h200", "--dtype", "fp32", "-o", f"{tmp}/vgg.json"],
                       check=True, capture_output=True)
        trace = load_trace(f"{tmp}/vgg.json")
    h200 = resolve_gpu("h200")
    budget = int(0.8 * run_trace(trace, h200, "eager", record=False).peak_memory_bytes)
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = plan_blocks(trace, h200, budget)
        walls.append(time.perf_counter() - t0)
    pure = [ns for _, ok, _, ns in p.tried + p.tried_recompute if ok]
    print(f"{'H200 vgg16 (32) 80%':22s} blocks: {statistics.median(walls):.2f} s, plan "
          f"{p.params} / {p.recompute} / {p.blocks}, {p.iteration_time_ns / 1e6:.1f} ms "
          f"(the fastest pure plan: "
          f"{min(pure) / 1e6 if pure else float('nan'):.1f} ms)")


if __name__ == "__main__":
    raise SystemExit(main())
