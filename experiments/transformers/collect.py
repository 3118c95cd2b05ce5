"""Measure transformer training steps on the H200 with vdnnsim's measurement harness
(NOTE [measurement], NOTE [workloads]): issue 14's models at three sizes each, in fp32 and
bf16 autocast, with AdamW; and a held-out set of three models of other shapes.

On the device machine, with simpy/pydantic importable (OUT is relative to the working
directory; the runs are made from the repository root, where the held-out models' specs,
``hf:traces/h200_transformers/heldout/...``, are found):

    python3 experiments/transformers/collect.py OUT [main|heldout|all|extra] [--only NAME]

One process per model (its runs one after another, the cache emptied between them); one
JSON record per run, a line each, in OUT/<set>.jsonl, written as each run ends.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))

HELD = "hf:traces/h200_transformers/heldout"
# (model spec, sizes: seq_len for a language model, batch for an image model, the other)
MAIN = [
    ("hf:gpt2", "seq", (256, 512, 1024), 8),
    ("hf:gpt2-medium", "seq", (256, 512, 1024), 8),
    ("hf:bert-base-uncased", "seq", (128, 256, 512), 16),
    ("hf:google/vit-base-patch16-224", "batch", (32, 64, 128), None),
    ("hf:llama-1b", "seq", (512, 1024, 2048), 4),
]
HELDOUT = [
    (f"{HELD}/roberta-style-base.yaml", "seq", (256, 512), 16),
    (f"{HELD}/qwen2-style-0.5b.yaml", "seq", (512, 1024), 4),
    (f"{HELD}/deit-style-small.yaml", "batch", (64, 256), None),
]
PRECISIONS = ("fp32", "autocast-bf16")
# the precisions issue 14 names beside those (session 9): fp16 autocast with its GradScaler,
# and pure bf16; one size of two main models ("all" leaves them out)
EXTRA = [
    ("hf:gpt2", "seq", (512,), 8),
    ("hf:google/vit-base-patch16-224", "batch", (64,), None),
]
EXTRA_PRECISIONS = ("autocast-fp16", "bf16")


def runs(which: str):
    sets = {"main": MAIN, "heldout": HELDOUT, "extra": EXTRA}
    for name in ("main", "heldout", "extra"):
        if which == name or which == "all" and name != "extra":
            for spec, axis, sizes, other in sets[name]:
                for size in sizes:
                    for precision in EXTRA_PRECISIONS if name == "extra" else PRECISIONS:
                        if axis == "seq":
                            yield name, spec, other, size, precision
                        else:
                            yield name, spec, size, None, precision


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("which", nargs="?", default="all")
    ap.add_argument("--only", default=None, help="one model spec")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    os.chdir(ROOT)  # the held-out specs are paths from the repository root, as recorded
    import torch
    import transformers

    from vdnnsim.gpu.measure.harness import measure

    for name, spec, batch, seq, precision in runs(args.which):
        if args.only and spec != args.only:
            continue
        t0 = time.perf_counter()
        rec = measure(spec, batch, dtype=precision, optimizer="adamw", seq_len=seq,
                      warmup=3, iters=5)
        rec.update(set=name, seq_len=seq, transformers=transformers.__version__,
                   float32_matmul_precision=torch.get_float32_matmul_precision(),
                   wall_s=round(time.perf_counter() - t0, 1))
        with open(out / f"{name}.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"{spec} b{batch} s{seq} {precision}: "
              + (f"{rec['iteration_ms']:.1f} ms, {rec['peak_allocated_bytes'] / 2**30:.2f} "
                 f"GiB" if rec["fits"] else "out of memory") + f" ({rec['wall_s']} s)",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
