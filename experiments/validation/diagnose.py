"""Where one training step's memory goes, as PyTorch's caching allocator saw it: for checking
the simulator's allocation sequence against the real one.

    python3 experiments/validation/diagnose.py MODEL BATCH POLICY OUT.json

POLICY is baseline, vdnn_conv or vdnn_all (the runtime of vdnnsim.gpu). After two warm-up
steps one step is recorded:
- ``layers``: at the start of each module's forward and of its autograd node's backward,
  the bytes allocated then and the peak since the previous mark (the allocator's own
  statistics, which change when kernels are launched, so no synchronisation is needed);
- ``peak_live``: the blocks allocated at the step's peak, largest first, each with the
  Python frame that allocated it (empty for the autograd engine's own allocations) and
  the ordinal of its allocation among the step's events;
- ``events``: every allocator event of the step (action, size, frame).

The step is NOTE [training step]'s (vdnnsim/gpu/model/workload.py: SGD, cross-entropy of the
logits), with the marks after the loss and after the backward pass read at its marks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's vdnnsim



def _where(e: dict) -> str:
    for f in e.get("frames", []):
        name = f.get("filename", "")
        if name.endswith(".py") and ("torch/nn/modules" in name or "vdnnsim" in name
                                     or "optim" in name):
            return f"{name.split('/')[-1]}:{f['name']}:{f.get('line', '')}"
    return ""


def main() -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("batch", type=int)
    p.add_argument("policy", choices=["baseline", "vdnn_conv", "vdnn_all"])
    p.add_argument("out")
    args = p.parse_args()
    import torch

    from vdnnsim.gpu.runtime.vdnn import VDNN
    from vdnnsim.gpu.model.workload import build_workload, training_step

    spec, batch, policy, out = args.model, args.batch, args.policy, args.out
    torch.backends.cudnn.benchmark = True
    work = build_workload(spec)
    model = work.model.cuda().train()
    net = VDNN(model, work.shape, policy) if policy != "baseline" else None
    train = training_step(work, batch, "cuda", runner=net)
    marks: list[tuple[str, str, int, int]] = []
    recording = [False]

    def mark(phase: str, name: str) -> None:
        if recording[0]:
            marks.append((phase, name, torch.cuda.memory_allocated(),
                          torch.cuda.max_memory_allocated()))
            torch.cuda.reset_peak_memory_stats()

    for name, mod in model.named_modules():
        if next(mod.children(), None) is not None:
            continue
        mod.register_forward_pre_hook(lambda m, a, name=name: mark("fwd", name))

        def post(m, a, o, name=name):
            fn = getattr(o, "grad_fn", None)
            if recording[0] and fn is not None:
                fn.register_prehook(lambda g: mark("bwd", name))
        mod.register_forward_hook(post)

    def at(point: str, loss) -> None:  # NOTE [training step]'s marks
        if point == "forward":
            mark("fwd", "loss_done")
        elif point == "backward":
            mark("bwd", "backward_done")

    def step():
        train(mark=at)
        if net is not None:
            net.end_iteration()

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=500000)
    recording[0] = True
    start = torch.cuda.memory_allocated()
    step()
    recording[0] = False
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events = [e for e in snap["device_traces"][torch.cuda.current_device()]
              if e["action"] in ("alloc", "free_requested")]
    live: dict[int, tuple[int, str, int]] = {}
    cur = best = start
    best_live: dict[int, tuple[int, str, int]] = {}
    for k, e in enumerate(events):
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], _where(e), k)
            cur += e["size"]
            if cur > best:
                best, best_live = cur, dict(live)
        else:  # blocks from before the step are freed too
            cur -= e["size"]
            live.pop(e["addr"], None)
    peak_live = sorted(best_live.values(), reverse=True)
    json.dump({"model": spec, "batch": batch, "policy": policy, "start_allocated": start,
               "peak_allocated": best,
               "layers": marks, "peak_live": peak_live,
               "events": [[e["action"], e["size"], _where(e)] for e in events]},
              open(out, "w"))
    print(spec, batch, policy, f"peak {best / 2**30:.3f} GiB (start {start / 2**30:.3f});",
          "largest live at the peak:",
          ", ".join(f"{s / 2**20:.0f}MiB@{w or 'engine'}#{k}" for s, w, k in peak_live[:8]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
