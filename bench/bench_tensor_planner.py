"""The tensor planner's speed (NOTE [tensor plans]) on a 1B-parameter op trace: hf:llama-1b
(batch 2, 2048 tokens, bf16 autocast, AdamW) traced on the meta device for the H200 (its
op model), planned at 50% and 70% of its uncapped peak, the optimizer's place weighed.
Goal (issue 56): at most 30 s a plan on 2 cores. Prints, per budget, the wall and CPU
time of the plan, the replays it made, the plan and its predicted step beside the block
planner's at the same budget (its time too).

    .venv/bin/python bench/bench_tensor_planner.py [--model hf:llama-1b] [--seq-len 2048]
"""

from __future__ import annotations

import argparse
import time

from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.gpu.probe.aten import memory_trace
from vdnnsim.planners.blocks import plan_blocks
from vdnnsim.planners.tensors import plan_tensors
from vdnnsim.trace import trace_from_dict
from vdnnsim.trace.optimizer import with_optimizer

GiB = 2**30


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="hf:llama-1b")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--dtype", default="autocast-bf16")
    ap.add_argument("--no-blocks", action="store_true", help="leave the block planner out")
    a = ap.parse_args()
    gpu = resolve_gpu("h200")
    d, w, c = timed(lambda: memory_trace(a.model, a.batch, gpu, a.dtype, a.seq_len))
    trace = with_optimizer(trace_from_dict(d, a.model), "adamw")
    eager = run_trace(trace, gpu, "eager", record=False)
    print(f"{a.model} ({a.batch} x {a.seq_len}, {a.dtype}): {len(trace.layers)} ops, traced in "
          f"{w:.1f} s; uncapped {eager.peak_memory_bytes / GiB:.2f} GiB, "
          f"{eager.iteration_time_ns / 1e6:.1f} ms")
    for share in (0.5, 0.7):
        budget = int(share * eager.peak_memory_bytes)
        p, w, c = timed(lambda: plan_tensors(trace, gpu, budget, None))
        what = (f"{len(p.offloaded)} offloaded, {len(p.modules)} checkpointed"
                + (", optimizer on the CPU" if p.optimizer_offload else "")
                + f": {p.iteration_time_ns / 1e6:.1f} ms "
                  f"({p.iteration_time_ns / eager.iteration_time_ns:.2f}x)" if p.fits
                else "no plan fits")
        print(f"  {share:.0%} ({budget / GiB:.2f} GiB): tensors {w:.1f} s wall, {c:.1f} s CPU, "
              f"{p.simulations} replays; {what}")
        if not a.no_blocks:
            b, w, c = timed(lambda: plan_blocks(trace, gpu, budget, None))
            print(f"      blocks {w:.1f} s wall; " + (
                f"{b.blocks} offloaded, {b.recompute} checkpointed, {b.params} parameter "
                f"blocks: {b.iteration_time_ns / 1e6:.1f} ms "
                f"({b.iteration_time_ns / eager.iteration_time_ns:.2f}x)" if b.fits
                else "no plan fits"))


if __name__ == "__main__":
    main()
