"""Issue 57's held-out families measured on the GPU: each model of heldout.yaml (its
``hf:`` or ``diffusers:`` spec), in fp32, bf16 and autocast-bf16, as ``vdnnsim measure
--repeat 3`` (three fresh processes, the median and band of their peak allocated memory),
AdamW, the batch, tokens, input and adapters its trace has (trace_heldout.py's flags);
then the step options' cases of steps.yaml (a held-out model with ``--micro-batches`` or
``--grad-checkpointing``, in their dtypes), as resumable as the rest.

    python experiments/model_families/measure_heldout.py OUT [--jobs N] [--seconds S]
        [--only NAME ...] [--dtype D ...] [--dry-run]

Only memory is judged here, so the runs go ``--jobs`` at a time on the one GPU (each
process's peak is its own caching allocator's); their step times are recorded but are
not measurements (processes share the GPU and the host). One line per run in
OUT/families.jsonl and in STATE (FAMILIES_STATE, default /tmp/vdnnsim_families.jsonl,
kept while the machine stays lent): measure's record with ``name``, ``dtype``, ``rc`` and
``gpu``. Resumable: a run recorded with rc 0 in STATE or in
traces/model_families_gpu/measured_CARD.jsonl (earlier calls' lines, copied back) is
skipped; none starts once SECONDS have passed. A run that ran out of memory beside others
(six processes of up to 51 GiB each do not fit one card) is run again alone, after the
others, and first on a later call.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from trace_heldout import DTYPES, all_entries, workload_flags  # noqa: E402

KEPT = ROOT / "traces" / "model_families_gpu"
STEPS = ["--warmup", "2", "--iters", "3"]  # the peak is reached by the second step


def flags(e: dict, dtype: str) -> list[str]:
    """measure's arguments for one entry in one dtype: the trace's (trace_heldout.command)."""
    return [*workload_flags(e), "--dtype", dtype, "--optimizer", "adamw"]


def card() -> str:
    import torch
    name = torch.cuda.get_device_name(0)
    return "h100" if "H100" in name else "h200" if "H200" in name else name


def out_of_memory(r: dict) -> bool:
    """The run ran out of memory (measure's record says ``fits: false``) beside others."""
    return not r.get("alone") and (r.get("fits") is False
                                   or "out of memory" in str(r.get("error", "")).lower())


def done(gpu: str, state: Path) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(the runs recorded with rc 0, those that ran out of memory beside others)."""
    have, oom = set(), set()
    for path in (KEPT / f"measured_{gpu}.jsonl", state):
        if path.is_file():
            for line in path.read_text().splitlines():
                r = json.loads(line)
                if out_of_memory(r):
                    oom.add((r["name"], r["dtype"]))
                elif r.get("rc") == 0:
                    have.add((r["name"], r["dtype"]))
    return have, oom - have


def measure(e: dict, dtype: str, gpu: str, alone: bool = False) -> dict:
    cmd = [sys.executable, "-m", "vdnnsim", "measure", *flags(e, dtype), *STEPS,
           "--repeat", "3", "--warmup-processes", "0", "--json"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    try:
        rec = json.loads(p.stdout)
    except ValueError:
        rec = {"error": p.stderr[-600:]}
    rec.update(name=e["name"], dtype=dtype, rc=p.returncode, gpu=gpu, s=round(time.time() - t0),
               alone=alone)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=540)
    ap.add_argument("--only", nargs="+", metavar="NAME")
    ap.add_argument("--dtype", nargs="+", choices=DTYPES, default=list(DTYPES))
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = ap.parse_args(argv)
    todo = [(e, d) for e in all_entries() if not args.only or e["name"] in args.only
            for d in args.dtype if d in e.get("dtypes", DTYPES)]
    if args.dry_run:
        for e, d in todo:
            print(shlex.join(["vdnnsim", "measure", *flags(e, d), *STEPS, "--repeat", "3"]))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state = Path(os.environ.get("FAMILIES_STATE", "/tmp/vdnnsim_families.jsonl"))
    gpu = card()
    have, oom = done(gpu, state)
    todo = [(e, d) for e, d in todo if (e["name"], d) not in have]
    alone = [(e, d) for e, d in todo if (e["name"], d) in oom]
    todo = [x for x in todo if x not in alone]
    end = time.time() + args.seconds

    def one(item, alone: bool = False):
        e, d = item
        if time.time() > end:
            return None
        rec = measure(e, d, gpu, alone)
        line = json.dumps(rec) + "\n"
        for path in (out / "families.jsonl", state):
            with open(path, "a") as f:
                f.write(line)
        print(f"[{time.strftime('%T')}] {e['name']} {d} rc={rec['rc']} {rec['s']} s",
              flush=True)
        return rec

    results = [one(x, True) for x in alone]  # those that ran out of memory beside others: alone
    with ThreadPoolExecutor(args.jobs) as pool:
        shared = list(pool.map(one, todo))
    results += shared
    again = [x for x, r in zip(todo, shared) if r is not None and out_of_memory(r)]
    results += [one(x, True) for x in again]
    left = sum(r is None for r in results)
    print(f"{len(results) - left} run ({len(again)} again alone), {left} not started (time), "
          f"{len(have)} done before")
    return 0


if __name__ == "__main__":
    sys.exit(main())
