"""Issue 31, session 24: the block planner's plan for the 3.4B model under the 24 GB card's
22 GiB, made on a CPU after the fix of autocast's cached casts (NOTE [autocast cache]) and
before anything here ran on a GPU (run from the repository root:
`.venv/bin/python experiments/offload_runs/make_plans24.py`); prints the plan and what the
engine predicts for it under the cap and without one."""
from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.planners.greedy import block_plan_to_dict
from vdnnsim.planners.blocks import plan_blocks
from vdnnsim.planners.planfile import write_plan_file
from vdnnsim.trace import load_trace

GiB = 2**30
g = resolve_gpu("h200")
t3 = load_trace("traces/h200_optimizer_offload/llama-3b_b1_s1024.yaml.gz")
cap = 22 * GiB
p = plan_blocks(t3, g, cap, None)
write_plan_file("traces/h200_optimizer_offload/plans_3b/plan-3b-22g.yaml",
                block_plan_to_dict(t3, g, cap, p))
print(f"planned: parameters of {p.params} blocks on the host, {p.recompute} checkpointed, "
      f"{p.blocks} offloaded")
opts = {"params": p.params, "blocks": p.blocks,  # both: NOTE [block mix]
        "recompute": p.recompute}
for name, budget in (("under 22 GiB", cap), ("no cap", None)):
    r = run_trace(t3, g, "vdnn_blocks", opts, budget, record=False, optimizer_offload=True)
    print(f"{name}: fits {r.fits}, allocated {r.peak_memory_bytes / GiB:.2f} GiB, reserved "
          f"{r.peak_footprint_bytes / GiB:.2f} GiB, {r.iteration_time_ns / 1e6:.1f} ms, "
          f"host {r.optimizer_host_bytes / GiB:.2f} GiB, fetched "
          f"{r.param_fetched_bytes / GiB:.2f} GiB")
