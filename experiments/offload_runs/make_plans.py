"""Issue 31, session 23: the plan files of traces/h200_optimizer_offload/parameter_offload, made on a CPU from the
committed profiles (run from the repository root: `.venv/bin/python experiments/offload_runs/make_plans.py`):
the block planner's plan for the 3.4B model under 22 GiB, every block's parameters on the host,
every block checkpointed with the optimizer on the GPU (PyTorch's own tool, predicted out of
memory), and the 1.1B model with every block's parameters on the host, uncapped."""
from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.planners.greedy import block_plan_to_dict
from vdnnsim.planners.blocks import plan_blocks
from vdnnsim.planners.planfile import write_plan_file
from vdnnsim.policies.blocks import block_regions
from vdnnsim.planners.blocks import BlockPlan
from vdnnsim.trace import load_trace
GiB = 2**30
g = resolve_gpu("h200")
out = "traces/h200_optimizer_offload/parameter_offload"
t3 = load_trace("traces/h200_optimizer_offload/llama-3b_b1_s1024.yaml.gz")
t1 = load_trace("traces/h200_optimizer_offload/llama-1b_b2_s2048.yaml.gz")
cap = 22 * GiB
p = plan_blocks(t3, g, cap, None)
write_plan_file(f"{out}/plan-3b-22g.yaml", block_plan_to_dict(t3, g, cap, p))
print("3b planned", p.params, p.blocks, p.recompute, p.peak_memory_bytes / GiB, p.iteration_time_ns / 1e6)

def fixed(t, opts, offload, name, budget):
    total = len(block_regions(t)) - 2
    r = run_trace(t, g, "vdnn_blocks", opts, budget, record=False, optimizer_offload=offload)
    bp = BlockPlan(opts.get("blocks", 0), total, r.fits, r.peak_memory_bytes, r.iteration_time_ns,
                   recompute=opts.get("recompute", 0), optimizer_offload=offload,
                   params=opts.get("params", 0))
    write_plan_file(f"{out}/{name}", block_plan_to_dict(t, g, budget, bp))
    print(name, r.fits, r.peak_memory_bytes / GiB, r.peak_footprint_bytes / GiB, r.iteration_time_ns / 1e6)

fixed(t3, {"blocks": 0, "params": 26}, True, "plan-3b-params26.yaml", cap)
fixed(t3, {"recompute": 26}, False, "plan-3b-recompute26.yaml", cap)
fixed(t1, {"blocks": 0, "params": 22}, True, "plan-1b-params22.yaml", 140 * GiB)
