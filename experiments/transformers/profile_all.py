"""Profile every transformer run of this folder's sets with ``vdnnsim profile``'s code
(the block profiler then, since replaced by NOTE [module timing]): one trace per run, the run's model, batch, sequence length and
precision, with AdamW as the runs were measured, written to OUT/profiled/<set>-<model>-b<batch>-s<seq>-<precision>.yaml.gz.
The sets' first measurements (collect.py, session 8) were made in other processes on
another day; ``--measure`` measures each run again right after its profile, in the same
process (collect.py's harness and settings), into OUT/<set>.jsonl: a host-bound step's time
depends on the machine's host at the time (docs/validation.md, "Transformers, profiled").

On the device machine, with simpy/pydantic importable (OUT is relative to the working
directory; the runs are made from the repository root, as collect.py's):

    python3 experiments/transformers/profile_all.py OUT [main|heldout|all|extra] [--only SPEC] [--measure]

One process per model, as collect.py's runs are (the loop is the caller's: run_profiles.sh).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]  # the repository
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))


def key(name: str, spec: str, batch: int, seq: int | None, precision: str) -> str:
    model = spec.removeprefix("hf:").split("/")[-1].removesuffix(".yaml")
    return f"{name}-{model}-b{batch}-s{seq or 0}-{precision}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("which", nargs="?", default="all")
    ap.add_argument("--only", default=None, help="one model spec")
    ap.add_argument("--measure", action="store_true", help="measure each run after it")
    args = ap.parse_args()
    base = Path(args.out).resolve()
    os.chdir(ROOT)  # the held-out specs are paths from the repository root, as recorded
    import json

    import torch
    import transformers

    from vdnnsim.gpu.measure.harness import measure

    from collect import runs
    from vdnnsim.gpu.profile.ops import profile_workload
    from vdnnsim.trace import save_trace, trace_from_dict

    out = base / "profiled"
    out.mkdir(parents=True, exist_ok=True)
    for name, spec, batch, seq, precision in runs(args.which):
        if args.only and spec != args.only:
            continue
        t0 = time.perf_counter()
        d = profile_workload(spec, batch, precision, seq, optimizer="adamw")
        k = key(name, spec, batch, seq, precision)
        save_trace(trace_from_dict(d, k), out / f"{k}.yaml.gz")
        torch.cuda.empty_cache()
        print(f"{k}: {len(d['layers'])} layers, {time.perf_counter() - t0:.1f} s; "
              f"{d['source']['note'].split(';', 1)[1]}", flush=True)
        del d
        if args.measure:  # as collect.py measures
            t0 = time.perf_counter()
            rec = measure(spec, batch, dtype=precision, optimizer="adamw", seq_len=seq,
                          warmup=3, iters=5)
            rec.update(set=name, seq_len=seq, transformers=transformers.__version__,
                       float32_matmul_precision=torch.get_float32_matmul_precision(),
                       wall_s=round(time.perf_counter() - t0, 1), after_profile=True)
            with open(base / f"{name}.jsonl", "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"  measured: {rec.get('iteration_ms', 0):.1f} ms, "
                  f"{rec.get('peak_allocated_bytes', 0) / 2**30:.2f} GiB", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
