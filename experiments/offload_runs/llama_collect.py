"""Issue 14's single-GPU question, on the H200: will the Llama-style 1.1B model
(vdnnsim/data/hf/llama-1b.yaml, random weights) fine-tune at 2048 tokens on a 24 GB card
(22 GiB for PyTorch's allocator, the rest for the CUDA context), with AdamW in bf16
autocast, and what does offloading activations cost?

For each batch (1, 2, 4), in one process on the device machine (simpy/pydantic importable;
OUT relative to the working directory):

1. profile the step (``vdnnsim profile``'s code, NOTE [module timing]) into
   OUT/llama-1b-b{B}-s2048-bf16.yaml.gz;
2. plan it for 22 GiB (NOTE [block plan]: the fewest offloaded blocks that fit), written to
   OUT/plan-b{B}.yaml when one fits;
3. measure (NOTE [measurement]): the plain step without a cap, the plain step under the
   22 GiB cap, and the plan under the cap (NOTE [block runtime]); where no plan fits, every
   block offloaded under the cap, to see the "no" happen.

    python3 experiments/offload_runs/llama_collect.py OUT

Records: OUT/runs.jsonl, one a line (case, batch, the plan's blocks, and what measure
returns).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))

CAP = 22 * 2**30
SPEC, SEQ, PRECISION, OPT = "hf:llama-1b", 2048, "autocast-bf16", "adamw"


def main() -> int:
    import torch
    import yaml

    from vdnnsim.api import resolve_gpu
    from vdnnsim.gpu.measure.harness import measure
    from vdnnsim.gpu.profile.ops import profile_workload
    from vdnnsim.planners.greedy import block_plan_to_dict
    from vdnnsim.planners.blocks import plan_blocks
    from vdnnsim.trace import save_trace, trace_from_dict

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    gpu = resolve_gpu("h200")

    def record(case: str, batch: int, blocks, rec: dict) -> None:
        rec.update(case=case, batch=batch, blocks=blocks, seq_len=SEQ)
        with open(out / "runs.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"b{batch} {case} (blocks {blocks}): " + (
            f"{rec['iteration_ms']:.1f} ms, peak allocated "
            f"{rec['peak_allocated_bytes'] / 2**30:.2f} GiB, reserved "
            f"{rec['peak_reserved_bytes'] / 2**30:.2f} GiB" if rec["fits"]
            else f"out of memory ({rec.get('error', '')[:80]})"), flush=True)

    for batch in (1, 2, 4):
        t0 = time.perf_counter()
        d = profile_workload(SPEC, batch, PRECISION, SEQ, optimizer=OPT)
        trace = trace_from_dict(d, f"llama-1b-b{batch}")
        save_trace(trace, out / f"llama-1b-b{batch}-s2048-bf16.yaml.gz")
        del d
        torch.cuda.empty_cache()
        plan = plan_blocks(trace, gpu, CAP)
        print(f"b{batch}: profiled in {time.perf_counter() - t0:.1f} s; plan: "
              f"{plan.blocks} of {plan.total} blocks, fits {plan.fits}", flush=True)
        kw = dict(dtype=PRECISION, optimizer=OPT, seq_len=SEQ, warmup=3, iters=5)
        record("plain", batch, 0, measure(SPEC, batch, **kw))
        record("plain, 22 GiB cap", batch, 0, measure(SPEC, batch, memory_cap_bytes=CAP, **kw))
        p = block_plan_to_dict(trace, gpu, CAP, plan)
        if plan.fits:
            (out / f"plan-b{batch}.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
        record("plan, 22 GiB cap" if plan.fits else "every block, 22 GiB cap", batch,
               plan.blocks, measure(SPEC, batch, "planned", CAP, plan=p, **kw))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
