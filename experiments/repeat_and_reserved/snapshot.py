"""GPU: one `vdnnsim measure` run with the caching allocator's history recorded.

    python3 experiments/repeat_and_reserved/snapshot.py OUT.pickle -- MEASURE-ARGS ...

MEASURE-ARGS are `vdnnsim measure`'s (--model, -b, --policy, --dtype, --optimizer,
--seq-len, --memory-cap, --plan). The allocator's history (every alloc, free and segment event;
no stack frames: ``context=None``) is recorded from before the model is built until
`measure` returns, and `torch.cuda.memory._snapshot()` is pickled to OUT.pickle; the
measurement record (of a run that ran out of memory too: the history then ends at the
failure, the segments as the unwound step left them), with `allocator_conf` (PYTORCH_CUDA_ALLOC_CONF as the process saw it)
and the pinned host allocator's statistics where torch has them
(`torch.cuda.host_memory_stats`), is printed as JSON. The allocator settings come from the
environment, as PyTorch reads them at its first CUDA allocation.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's vdnnsim


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = argv[0]
    import torch

    from vdnnsim.cli import build_parser

    args = build_parser().parse_args(["measure", *argv[2:]])
    from vdnnsim.cli.common import memory_cap as _memory_cap, model_kwargs as _model_kwargs
    from vdnnsim.gpu.measure.harness import measure

    torch.cuda.memory._record_memory_history(enabled="all", context=None,
                                              max_entries=4_000_000)
    plan = None
    if args.plan:  # a plan file (its optimizer offload and parameters come with it)
        from vdnnsim.planners.planfile import read_plan_file
        plan, args.policy = read_plan_file(args.plan), "planned"
    rec = measure(args.model, args.batch_size, args.policy, _memory_cap(args), args.warmup,
                  args.iters, args.dtype, plan, args.optimizer, args.seq_len, args.input,
                  _model_kwargs(args.model_arg))
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(snap, f)
    os.replace(tmp, out)
    rec["allocator_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is not None:
        rec["host_memory_stats"] = {k: v for k, v in stats().items()
                                    if isinstance(v, (int, float))}
    print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
