"""Issue 31, session 32: the notebook's 7B question run on the lent H100 machine (calls 3-5
of traces/h100_cpu_step/host_sweep), against what the engine predicts (make_7b.py printed the
same predictions before each ran: predicted_7b.txt).

    .venv/bin/python experiments/cpu_step/check_7b.py [DATA]    (DATA: traces/h100_cpu_step/host_sweep)

Each 7b-* line of DATA/runs.jsonl is one fresh process (vdnnsim measure without --repeat,
after a discarded warm-up process in the same call); the lines of one run are made one by
vdnnsim's own aggregate (NOTE [repeated measurement]: the median and its band), or their
first error where none trained. Predictions: the Llama-2-7B shape at 1 x 2048 traced on
the meta device for the h100 preset, replayed as the run ran (the optimizer on the CPU,
its copies registered, NOTE [optimizer pinning]; the plans' blocks under expandable
segments and the 22 GiB cap)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.measured.repeat import aggregate
from vdnnsim.planners.planfile import read_plan_file
from vdnnsim.gpu.probe.aten import memory_trace
from vdnnsim.trace import trace_from_dict
from vdnnsim.trace.optimizer import with_optimizer

GiB = 2**30
EXPANDABLE = {"expandable_segments": True}
PLANS = {"7b-plan-22g": "plan-7b-22g-expandable.yaml",
         "7b-margin": "plan-7b-margin-expandable.yaml"}


def main() -> None:
    data = Path(sys.argv[1] if len(sys.argv) > 1 else "traces/h100_cpu_step/host_sweep")
    runs: dict[str, list[dict]] = {}
    for line in (data / "runs.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["name"].startswith("7b-"):  # calls 3-4 capped before the model was built,
            late = r.get("memory_cap_after_setup")  # call 5 after (NOTE [cap after setup])
            key = r["name"] + (" (cap after setup)" if late else "")
            runs.setdefault(key, []).append(r)
    g = resolve_gpu("h100")
    # what `vdnnsim trace --model hf:llama-7b -b 1 --seq-len 2048 --gpu h100 --dtype
    # autocast-bf16 --optimizer adamw` writes, made in this process
    t = with_optimizer(trace_from_dict(memory_trace("hf:llama-7b", 1, g, "autocast-bf16",
                                                    2048), "hf:llama-7b"), "adamw")
    for name, recs in runs.items():
        base = name.split(" ")[0]
        if base in PLANS:
            plan = read_plan_file(data / PLANS[base])
            opts = {"params": plan.param_blocks, "blocks": plan.blocks,  # NOTE [block mix]
                    "recompute": plan.recompute_blocks}
            p = run_trace(t, g, "vdnn_blocks", opts, 22 * GiB, record=False,
                          optimizer_offload=True, allocator=EXPANDABLE,
                          optimizer_pinning="registered")
            what = (f"{plan.param_blocks} blocks' parameters on the host, "
                    f"{plan.recompute_blocks} checkpointed, under the 22 GiB cap")
        else:
            p = run_trace(t, g, "eager", {}, None, record=False, optimizer_offload=True,
                          optimizer_pinning="registered")
            what = "the optimizer on the CPU, no cap (the 80 GB card)"
        print(f"{name}: {what}, {len(recs)} processes")
        pred = (f"predicted: fits {p.fits}, {p.iteration_time_ns / 1e6:.0f} ms, allocated "
                f"{p.peak_memory_bytes / GiB:.2f} GiB, reserved "
                f"{p.peak_footprint_bytes / GiB:.2f}, host {p.optimizer_host_bytes / GiB:.2f}")
        trained = [r for r in recs if r.get("fits")]
        if not trained:
            err = recs[0].get("error", "")
            capped = recs[0].get("memory_cap_bytes") and "after setup" not in name
            print(f"  measured: out of memory in every process ({err[:80]}"
                  + (" ... while the model was built on the GPU under the cap)" if capped
                     else ")"))
            print("  " + pred)
            continue
        m = aggregate(trained)
        ms, (lo, hi) = m["iteration_ms"], m["iteration_ms_band"]
        alloc, res = m["peak_allocated_bytes"] / GiB, m["peak_reserved_bytes"] / GiB
        host = (m["optimizer_pinned_bytes"] + m["optimizer_state_bytes"]) / GiB
        print(f"  measured: {ms:.0f} ms ({lo:.0f}-{hi:.0f}), allocated {alloc:.2f} GiB, "
              f"reserved {res:.2f}, host {host:.2f}"
              + (", the cap from after setup" if m.get("memory_cap_after_setup") else ""))
        print("  " + pred)
        pm = p.iteration_time_ns / 1e6
        print(f"  error: time {100 * (pm - ms) / ms:+.1f}% ({'in' if lo <= pm <= hi else 'out of'}"
              f" band), allocated {100 * (p.peak_memory_bytes / GiB - alloc) / alloc:+.1f}%, "
              f"reserved {100 * (p.peak_footprint_bytes / GiB - res) / res:+.1f}%, host "
              f"{100 * (p.optimizer_host_bytes / GiB - host) / host:+.1f}%")


if __name__ == "__main__":
    main()
