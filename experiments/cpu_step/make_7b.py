"""Issue 31, session 32: the notebook's 7B question (notebooks/llama_7b.ipynb) on the lent
H100 machine, predicted on a CPU before it runs (run from the repository root:
`.venv/bin/python experiments/cpu_step/make_7b.py`). Llama-2-7B's shape at 1 x 2048, bf16
autocast, AdamW, traced on the meta device for the h100 preset (the op model by the spec
rule, NOTE [op spec rule]; the h100 preset's host: its CPU step from
traces/h100_cpu_step/host_sweep, NOTE [cpu step model]). The optimizer's host copies registered in
one buffer (NOTE [optimizer pinning]): PyTorch's pinned allocator would take 116.2 GiB of
the machine's 125, this 100.4. Writes the 24 GB card's block plan (planned under 22 GiB
with expandable segments, as the notebook's answer) to traces/h100_cpu_step/host_sweep/ and prints
what the engine predicts for each run of experiments/cpu_step/loan.sh's 7b-* steps."""

import subprocess
import sys
import tempfile

from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.planners.greedy import block_plan_to_dict
from vdnnsim.planners.blocks import plan_blocks
from vdnnsim.planners.planfile import write_plan_file
from vdnnsim.trace import load_trace

GiB = 2**30
EXPANDABLE = {"expandable_segments": True}
PLAN = "traces/h100_cpu_step/host_sweep/plan-7b-22g-expandable.yaml"
g = resolve_gpu("h100")
with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([sys.executable, "-m", "vdnnsim", "trace", "--model", "hf:llama-7b", "-b",
                    "1", "--seq-len", "2048", "--gpu", "h100", "--dtype", "autocast-bf16",
                    "--optimizer", "adamw", "-o", f"{tmp}/t.json"], check=True,
                   capture_output=True)
    t = load_trace(f"{tmp}/t.json")


def show(name, r):
    print(f"{name}: fits {r.fits}, allocated {r.peak_memory_bytes / GiB:.2f} GiB, reserved "
          f"{r.peak_footprint_bytes / GiB:.2f} GiB, {r.iteration_time_ns / 1e6:.0f} ms, host "
          f"{r.optimizer_host_bytes / GiB:.2f} GiB (pinned {r.pinned_host_bytes / GiB:.2f}), "
          f"fetched {r.param_fetched_bytes / GiB:.2f} GiB")


for pinning in ("caching", "registered"):
    show(f"7b-offload, 80 GB card, {pinning}", run_trace(
        t, g, "eager", {}, None, record=False, optimizer_offload=True,
        optimizer_pinning=pinning))
show("7b plain (no offload), 80 GB card", run_trace(t, g, "eager", {}, None, record=False))
cap = 22 * GiB
p = plan_blocks(t, g, cap, None, EXPANDABLE)
write_plan_file(PLAN, block_plan_to_dict(t, g, cap, p, EXPANDABLE))
print(f"{PLAN}: optimizer on the CPU {p.optimizer_offload}, parameters of {p.params} blocks "
      f"on the host, {p.recompute} checkpointed, {p.blocks} offloaded")
opts = {"params": p.params, "blocks": p.blocks,  # both: NOTE [block mix]
        "recompute": p.recompute}
for pinning in ("caching", "registered"):
    show(f"7b-plan-22g (under 22 GiB, expandable), {pinning}", run_trace(
        t, g, "vdnn_blocks", opts, cap, record=False, optimizer_offload=p.optimizer_offload,
        allocator=EXPANDABLE, optimizer_pinning=pinning))

# After 7b-plan-22g ran out of memory under its cap on the H100 (call 3: 21.85 GiB allocated
# when a 172 MiB parameter fetch came, against a predicted peak of 21.64): the plan for the
# budget the planner's caution keeps (NOTE [fragmentation caution]: CAUTION_SHARE of the
# budget unallocated), run under the same 22 GiB cap.
from vdnnsim.planners.greedy import CAUTION_SHARE  # noqa: E402

MARGIN = "traces/h100_cpu_step/host_sweep/plan-7b-margin-expandable.yaml"
budget = int(cap * (1 - CAUTION_SHARE))
q = plan_blocks(t, g, budget, None, EXPANDABLE)
write_plan_file(MARGIN, block_plan_to_dict(t, g, budget, q, EXPANDABLE))
print(f"{MARGIN} (planned for {budget / GiB:.2f} GiB): optimizer on the CPU "
      f"{q.optimizer_offload}, parameters of {q.params} blocks on the host, {q.recompute} "
      f"checkpointed, {q.blocks} offloaded")
opts = {"params": q.params, "blocks": q.blocks,  # both: NOTE [block mix]
        "recompute": q.recompute}
show("7b-margin (under the 22 GiB cap, expandable), registered", run_trace(
    t, g, "vdnn_blocks", opts, cap, record=False, optimizer_offload=q.optimizer_offload,
    allocator=EXPANDABLE, optimizer_pinning="registered"))
