# Writes notebooks/llama_24gb.ipynb (stripped), from any folder:
#   python experiments/offload_runs/llama24_notebook.py
from pathlib import Path

import nbformat
from nbformat.v4 import new_notebook, new_markdown_cell, new_code_cell
cells = []
cells.append(new_markdown_cell("""# Llama-style 1B at 2048 tokens on a 24 GB card

*Will this model fine-tune at sequence length 2048 on a 24 GB card, and what does offloading
activations cost?* The model: `hf:llama-1b` (a Llama-style 1.1B config in the repository,
random weights), bf16 autocast, AdamW. The card: 22 GiB for PyTorch's allocator (24 GB is
22.35 GiB; the rest for the CUDA context). The traces were profiled on the H200
(`vdnnsim profile --model hf:llama-1b --seq-len 2048 -b B --dtype autocast-bf16 --optimizer adamw`);
the runs below were measured there under a 22 GiB cap (`traces/h200_llama_22gib/README.md` says how)."""))
cells.append(new_code_cell("""from pathlib import Path
import json
import pandas as pd
import matplotlib.pyplot as plt
from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.planners.blocks import plan_blocks
from vdnnsim.trace import load_trace

root = Path("..") / "traces" / "h200_llama_22gib"
gpu, GiB, cap = resolve_gpu("h200"), 2**30, 22 * 2**30
traces = {b: load_trace(root / "profiles_plans" / f"llama-1b-b{b}-s2048-bf16.yaml.gz") for b in (1, 2, 4)}
rows = []
for b, t in traces.items():
    plain = run_trace(t, gpu, "eager", record=False)
    plan = plan_blocks(t, gpu, cap)  # NOTE [block plan]: the fewest offloaded blocks that fit
    rows.append({"batch": b, "peak GiB (no cap)": plain.peak_memory_bytes / GiB,
                 "step ms (no cap)": plain.iteration_time_ns / 1e6,
                 "fits 22 GiB": plan.fits, "blocks offloaded": plan.blocks if plan.fits else None,
                 "step ms (22 GiB)": plan.iteration_time_ns / 1e6 if plan.fits else None,
                 "slowdown": plan.iteration_time_ns / plain.iteration_time_ns if plan.fits else None})
answer = pd.DataFrame(rows).round(2)
answer"""))
cells.append(new_markdown_cell("""The simulator's answer: batch 1 fits as it is; batch 2 fits with the first 8 of the 22
blocks offloaded (their saved activations to host memory in the forward pass, back one block
ahead in the backward pass), at about 1.65x the step; batch 4 does not fit at all, because the
weights, gradients, AdamW's moments and its step temporary alone take 20.55 GiB at the step.

What the H200 said, beside the prediction:"""))
cells.append(new_code_cell("""def load(name, allocator):
    return [dict(json.loads(l), allocator=allocator) for l in (root / name).read_text().splitlines()]

# the plain runs, and the block runtime's (the plan rows of runs.jsonl are of faulty code: README)
measured = [r for r in load("profiles_plans/runs.jsonl", "default") if r["case"].startswith("plain")]
measured += load("profiles_plans/offload.jsonl", "default")
measured += load("runtime_variants/offload-expandable.jsonl", "expandable segments")
out = []
for r in measured:
    t = traces[r["batch"]]
    k = r.get("blocks") or 0
    cap_r = r["memory_cap_bytes"]
    sim = run_trace(t, gpu, "vdnn_blocks", {"blocks": k}, cap_r, record=False)
    out.append({"batch": r["batch"], "blocks": k, "cap GiB": cap_r and cap_r / GiB,
                "allocator": r["allocator"],
                "fits pred/meas": f"{'yes' if sim.fits else 'no'}/{'yes' if r['fits'] else 'no'}",
                "step ms pred": sim.iteration_time_ns / 1e6, "step ms meas": r.get("iteration_ms"),
                "peak GiB pred": sim.peak_memory_bytes / GiB,
                "peak GiB meas": r.get("peak_allocated_bytes", 0) / GiB or None,
                "reserved GiB meas": r.get("peak_reserved_bytes", 0) / GiB or None})
runs = pd.DataFrame(out).round(2)
runs"""))
cells.append(new_markdown_cell("""Read with `traces/h200_llama_22gib/README.md`: the plain batch-4 run was measured after two
out-of-memory runs in the same process and reads 4.35 GiB high (the same run elsewhere:
35.44 GiB); the other rows are clean.

- **Peak allocated memory** is predicted within 0.2% for every run that fit (plain, and 4 to
  22 blocks offloaded).
- **The plain step at batch 1** is host-bound: 131 ms predicted, 107-111 ms measured (the
  profile's own steps took longer than the measurement's: docs/validation.md on how such
  steps repeat).
- **Step time** is under-predicted by 7-20% with blocks offloaded: the runtime's own host work
  (a Python pack and unpack per saved tensor) and the prefetches it issues late are not in
  the model (NOTE [block offload]).
- **Whether it fits**: the simulator says the 8-block plan fits 22 GiB; with PyTorch's default
  allocator it ran out of memory, which reserved 27 GiB for 21.5 GiB allocated (the
  prefetched copies come from the copy stream's own pool). With
  `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` the same plan ran under the cap:
  244 ms a step, 1.96x the uncapped plain step (124.7 ms), against the 1.65x predicted.

So: **yes at batch 1 (no offload needed), yes at batch 2 with 8 blocks offloaded and expandable
segments, at about twice the step time; no at batch 4.**"""))
cells.append(new_code_cell("""t = traces[2]
ks = list(range(0, 23, 2))
sims = [run_trace(t, gpu, "vdnn_blocks", {"blocks": k}, record=False) for k in ks]
fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
a.plot(ks, [s.peak_memory_bytes / GiB for s in sims], "o-", label="predicted")
b.plot(ks, [s.iteration_time_ns / 1e6 for s in sims], "o-", label="predicted")
m = runs[(runs.batch == 2) & runs["step ms meas"].notna() & runs["cap GiB"].isna()]
a.plot(m.blocks, m["peak GiB meas"], "s", label="measured (no cap)")
b.plot(m.blocks, m["step ms meas"], "s", label="measured (no cap)")
a.axhline(22, color="gray", ls="--", lw=1, label="the 22 GiB card")
a.set(xlabel="blocks offloaded", ylabel="peak allocated GiB", title="Llama-1B, batch 2, 2048 tokens")
b.set(xlabel="blocks offloaded", ylabel="step ms")
a.legend(); b.legend()
plt.tight_layout()
plt.show()"""))
nb = new_notebook(cells=cells, metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}})
nbformat.write(nb, str(Path(__file__).resolve().parents[2] / "notebooks" / "llama_24gb.ipynb"))
