"""The block runtime (NOTE [block runtime]) on the Llama-style 1.1B at batch 2, 2048 tokens,
bf16 autocast, AdamW, beside the simulator (NOTE [block offload]): the first k blocks
offloaded without a cap (k = 4, 8, 12, 22: peak and step time against the replay of the
profile in traces/h200_llama_22gib/profiles_plans/), and under the 22 GiB cap the plan (8 blocks, NOTE [block plan])
and one block fewer than it. Run after collect.py (it reads that profile):

    python3 experiments/offload_runs/llama_offload_runs.py OUT        # OUT/offload.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's vdnnsim
CAP = 22 * 2**30
RUNS = [(4, None), (8, None), (12, None), (22, None), (8, CAP), (7, CAP)]
if len(sys.argv) > 2:  # a few of them: k:cap_gib|none,...
    RUNS = [(int(k), None if c == 'none' else int(c) * 2**30)
            for k, c in (x.split(':') for x in sys.argv[2].split(','))]


def main() -> int:
    from vdnnsim.gpu.measure.harness import measure
    from vdnnsim.planners.greedy import BLOCK_FORMAT

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for k, cap in RUNS:
        plan = {"format": BLOCK_FORMAT, "network": "llama-1b", "batch_size": 2, "blocks": k}
        rec = measure("hf:llama-1b", 2, "planned", cap, dtype="autocast-bf16",
                      optimizer="adamw", seq_len=2048, plan=plan, warmup=3, iters=5)
        rec.update(batch=2, blocks=k, seq_len=2048)
        with open(out / "offload.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"k={k} cap={cap}: " + (f"{rec['iteration_ms']:.1f} ms, peak allocated "
              f"{rec['peak_allocated_bytes'] / 2**30:.2f} GiB, reserved "
              f"{rec['peak_reserved_bytes'] / 2**30:.2f} GiB, late fetches "
              f"{rec.get('late_fetches')}" if rec["fits"] else "out of memory"), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
