"""Writes notebooks/llama_7b.ipynb (stripped: no outputs), issue 31's notebook:
`.venv/bin/python experiments/offload_runs/make_notebook.py`."""

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]

INTRO = """# A 7B Llama full fine-tune on one card: 24 GB and 80 GB

*Does a 7B-shaped Llama full fine-tune (AdamW, bf16 autocast, 1 x 2048 tokens) fit a 24 GB or an
80 GB card, with what mix of activation offload, recompute, the optimizer on the CPU and the
parameters on the host, and at what cost?* The model: `hf:llama-7b` (Llama-2-7B's shape, a
config in the repository, random weights). No GPU is needed: the step is traced on the meta
device and timed by the H200's op-level kernel model (`vdnnsim trace --model hf:llama-7b
--gpu h200`, NOTE [op model]; on six held-out transformer families it was 0-24% off, short in
bf16, docs/cost-model.md), and the CPU's AdamW by the H200 host's fitted step (NOTE
[optimizer offload]). The cards are the H200 preset under a cap: 22 GiB for the 24 GB card and
73 GiB for the 80 GB one (the rest for the CUDA context); the preset's host has 256 GiB. So
the times are the H200's, not a 24 GB card's: the question here is what fits and what each
move costs on the same GPU."""

CELL_TRACE = """from pathlib import Path
import pandas as pd
import matplotlib.pyplot as plt
from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.gpu.probe.aten import memory_trace
from vdnnsim.trace.optimizer import with_optimizer
from vdnnsim.planners.blocks import plan_blocks
from vdnnsim.trace import trace_from_dict

gpu, GiB = resolve_gpu("h200"), 2**30
trace = with_optimizer(trace_from_dict(memory_trace("hf:llama-7b", 1, gpu, "autocast-bf16", 2048),
                                       "hf:llama-7b"), "adamw")
blocks = 32
ways = {"plain": ("eager", {}, False),
        "optimizer on the CPU": ("eager", {}, True),
        "optimizer on the CPU, every block's parameters on the host": ("vdnn_blocks", {"blocks": 0, "params": blocks}, True),
        "the same, every block checkpointed too": ("vdnn_blocks", {"recompute": blocks, "params": blocks}, True)}
rows = []
for name, (policy, opts, cpu) in ways.items():
    r = run_trace(trace, gpu, policy, opts, record=False, optimizer_offload=cpu)
    rows.append({"how": name, "allocated GiB": r.peak_memory_bytes / GiB,
                 "reserved GiB": r.peak_footprint_bytes / GiB, "step s": r.iteration_time_ns / 1e9,
                 "optimizer's host GiB": r.optimizer_host_bytes / GiB,
                 "parameters fetched GiB": r.param_fetched_bytes / GiB})
pd.DataFrame(rows).round(2)"""

MID = """Plain training needs the weights, their gradients and AdamW's two moments on the GPU (16 bytes
a parameter, 100 GiB before activations): no single card of the two holds it. With the
optimizer on the CPU the GPU keeps the weights (fp32 under autocast) and the activations; with
the parameters on the host as well it keeps autocast's bf16 casts of the weights (what the ops
save) and one or two blocks' fp32 weights at a time. The planner (`vdnnsim plan`, NOTE [block
plan]) weighs all of it under each card's budget and keeps the fastest plan that fits. It plans
here under PyTorch's expandable segments (`vdnnsim plan --allocator expandable_segments=true`;
the plan file carries the setting and `vdnnsim measure --plan` runs under it, NOTE [planned
allocator]): at a card's exact budget the default allocator's fragmentation has decided, by
tens of MiB, whether a plan trains (below)."""

CELL_PLAN = """plans = {}
expandable = {"expandable_segments": True}  # the caching allocator's setting planned under
for card, cap in (("24 GB", 22), ("80 GB", 73)):
    p = plans[card] = plan_blocks(trace, gpu, cap * GiB, None, expandable)  # None: the optimizer's place weighed too
    print(f"{card} ({cap} GiB): " + ("no plan fits" if not p.fits else
          f"optimizer on the {'CPU' if p.optimizer_offload else 'GPU'}, parameters of {p.params} "
          f"block(s) on the host, {p.blocks} offloaded, {p.recompute} checkpointed: "
          f"{p.peak_memory_bytes / GiB:.1f} GiB allocated, {p.iteration_time_ns / 1e9:.2f} s a step"))"""

CELL_PLOT = """# the 24 GB card: for each count of blocks whose parameters are on the host, the fastest way
# the planner found to fit (the fewest offloaded or checkpointed blocks that fit with it)
p = plans["24 GB"]
best = {}
for params, how, k, fits, peak, ns in p.tried_params:
    if fits and (params not in best or ns < best[params][2]):
        best[params] = (how, k, ns)
xs = sorted(best)
fig, ax = plt.subplots(figsize=(7, 3.5))
for how, done, marker in (("offload", "offloaded", "o"), ("recompute", "checkpointed", "s")):
    pts = [(x, best[x][2] / 1e9) for x in xs if best[x][0] == how]
    ax.plot([a for a, _ in pts], [b for _, b in pts], marker, label=f"fewest blocks {done} that fit")
ax.axvline(p.params, color="gray", ls="--", lw=1, label=f"the plan: {p.params}")
ax.set(xlabel="blocks whose parameters are on the host", ylabel="step s (predicted)",
       title="hf:llama-7b, 1 x 2048, AdamW, bf16 autocast, 22 GiB, expandable segments")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()"""

RUN = """**Then run.** Session 32 ran both answers on a lent H100 machine (80 GB; its host 125
GiB, 16 vCPUs; `traces/h100_cpu_step/host_sweep`, `experiments/cpu_step/check_7b.py`), predicted
on a CPU before each ran (`make_7b.py`) for the h100 preset: its GPU timed by the op
model's spec rule (NOTE [op spec rule]), its host's CPU step measured there by `vdnnsim
calibrate --cpu-step` (NOTE [cpu step model]). The optimizer's copies were registered in one
buffer (NOTE [optimizer pinning]): PyTorch's pinned allocator rounds each up to a power of
two, 116 GiB of host memory for this model, more than the machine could hold beside a
process; registered, 100.4 GiB. The 24 GB card is the same GPU under a 22 GiB cap, applied
once the host's blocks have left the GPU (NOTE [cap after setup]: the runtime builds the model
whole on the GPU first, and 7B's fp32 weights alone are 25 GiB), for the plan made under the
budget the planner's caution keeps (20.66 GiB; the plan for exactly 22 GiB was not run under
that cap)."""

CELL_RUN = """import json
from vdnnsim.measured.repeat import aggregate
from vdnnsim.planners.planfile import read_plan_file

data = Path("../traces/h100_cpu_step/host_sweep")
h100 = resolve_gpu("h100")
t100 = with_optimizer(trace_from_dict(memory_trace("hf:llama-7b", 1, h100, "autocast-bf16", 2048),
                                      "hf:llama-7b"), "adamw")
plan = read_plan_file(data / "plan-7b-margin-expandable.yaml")
runs = {"80 GB: the optimizer on the CPU": ("7b-offload", "eager", {}, None, None),
        f"24 GB: {plan.param_blocks} blocks' parameters on the host, {plan.recompute_blocks} checkpointed":
            ("7b-margin", "vdnn_blocks", {"params": plan.param_blocks, "recompute": plan.recompute_blocks},
             22 * GiB, expandable)}
records = [json.loads(line) for line in (data / "runs.jsonl").read_text().splitlines()]
rows = []
for card, (name, policy, opts, cap, alloc) in runs.items():
    m = aggregate([r for r in records if r["name"] == name and r.get("fits")])
    p = run_trace(t100, h100, policy, opts, cap, record=False, optimizer_offload=True,
                  allocator=alloc, optimizer_pinning="registered")
    rows.append({"card": card, "processes": m["repeat"]["processes"],
                 "step s": m["iteration_ms"] / 1e3, "predicted": p.iteration_time_ns / 1e9,
                 "allocated GiB": m["peak_allocated_bytes"] / GiB, "predicted ": p.peak_memory_bytes / GiB,
                 "host GiB": (m["optimizer_pinned_bytes"] + m["optimizer_state_bytes"]) / GiB,
                 "predicted  ": p.optimizer_host_bytes / GiB})
pd.DataFrame(rows).round(2)"""

END = """**What this rests on, and what was measured.** The 24 GB card needs every move at once: the
optimizer and most blocks' parameters on the host and most blocks checkpointed, at several
times the 80 GB card's step, where the optimizer on the CPU alone is enough. The host must
hold the optimizer: AdamW's moments and the pinned masters and gradient buffers, over 100 GiB
for 6.7B parameters. Run (above): the 80 GB answer trained at 1.91 s a step against 1.86
predicted (inside the three processes' band), the predicted allocated peak 3.6% under the measured one, the host's
bytes exact; the 24 GB answer trained under 22 GiB at 2.53 s against 2.36 (6.8% short, out of
band), the predicted allocated peak 1.1% under. The parts were measured on the H200 with smaller models of the same shape
(`traces/h200_optimizer_offload`, docs/beyond-vdnn.md): the optimizer on the CPU for the 1.1B and 3.4B
models, allocated memory within 2.4% and the host's bytes to the byte, the step 4-11% short
(the CPU's AdamW runs slower in place than its microbenchmark, partly from the copies back
beside it, which the model counts); the 3.4B model with every block's parameters on the host
under 22 GiB, where PyTorch's own tools ran out of memory: the step within 0.4% of the
measured median, allocated within 1.0%; and the planner's plan for 21 GiB (parameters on the
host and blocks checkpointed) under 22 GiB: allocated within 0.5%, the step 5.4% short. At
the card's exact budget the allocator decides: the planner's plans for exactly 22 GiB under
the default allocator ran out of memory, their allocated peaks within 0.3% of the prediction
(the failing request's new segment would have ended 18 MiB over the cap, where the engine
fitted it with 45 MiB to spare: the caching allocator's fragmentation at the cap, issue 28),
and the plan made under expandable segments for exactly 22 GiB trained: the step within 0.8%
of the measured median, allocated and reserved within 0.3%. Under the default allocator the
planner's 24 GB answer for the 7B is 24 blocks' parameters on the host and all 32 checkpointed
(21.0 GiB, 2.34 s): plan that one a GiB under the card."""


def main() -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                 "name": "python3"}
    nb.cells = [nbformat.v4.new_markdown_cell(INTRO), nbformat.v4.new_code_cell(CELL_TRACE),
                nbformat.v4.new_markdown_cell(MID), nbformat.v4.new_code_cell(CELL_PLAN),
                nbformat.v4.new_code_cell(CELL_PLOT), nbformat.v4.new_markdown_cell(RUN),
                nbformat.v4.new_code_cell(CELL_RUN), nbformat.v4.new_markdown_cell(END)]
    for i, cell in enumerate(nb.cells):  # the same ids each time: no churn in the diffs
        cell.id = f"llama7b-{i}"
    nbformat.write(nb, ROOT / "notebooks" / "llama_7b.ipynb")


if __name__ == "__main__":
    main()
