"""Memory events of one training step, as the caching allocator saw them (for checking the
simulator's allocation sequence). python3 traces/h200/diagnose.py MODEL BATCH OUT.json"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F

from vdnnsim.gpu.models import build_model


def main() -> int:
    spec, batch, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.backends.cudnn.benchmark = True
    model, shape, _ = build_model(spec)
    model = model.cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, *shape, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=200000)
    step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events = []
    for e in snap["device_traces"][0]:
        frames = [f for f in e.get("frames", []) if f.get("filename", "").endswith(".py")]
        where = next((f"{f['filename'].split('/')[-1]}:{f['name']}" for f in frames
                      if "torch/nn/modules" in f["filename"] or "vdnnsim" in f["filename"]
                      or "optim" in f["filename"]), "")
        events.append([e["action"], e["size"], where])
    json.dump({"model": spec, "batch": batch, "events": events}, open(out, "w"))
    print(spec, batch, len(events), "events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
