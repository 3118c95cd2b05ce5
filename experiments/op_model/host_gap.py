"""GPU (any lent machine; host_study.sh). Issue 29's host gap, session 29: where a
host-bound step's host time goes. For one held-out run already measured (a seen set's model), the
host's time per phase of the training step (zero_grad, forward and loss, backward,
the optimizer's step; ``time.perf_counter`` at each phase's end, no synchronisation inside a
step, median of 8 steps after 6 warm-up steps), then two more steps under torch.profiler
(CPU activity only): the forward pass's top-level ATen ops by name (count, mean
duration) and what of the forward is no ATen op (the model's own Python).

    python3 experiments/op_model/host_gap.py SET MODEL BATCH DTYPE [SEQ|-] [OPTIMIZER]

SET: set1 (experiments/op_model) or set2; MODEL: a config there (no .yaml), or a
workload spec (torchvision:NAME); OPTIMIZER: adamw (default) or sgd. The host probe
(NOTE [host probe]) before the model and after the timed steps says how fast the host
was.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from vdnnsim.gpu.measure.hostprobe import host_probe_ns  # noqa: E402
from vdnnsim.gpu.model.workload import build_workload, training_step  # noqa: E402


def main(argv: list[str]) -> int:
    set_, model, batch, dtype = argv[:4]
    seq = int(argv[4]) if len(argv) > 4 and argv[4] != "-" else None
    opt = argv[5] if len(argv) > 5 else "adamw"
    here = ROOT / "experiments" / "op_model" / ("" if set_ == "set1" else set_)
    spec = model if ":" in model else f"hf:{here / (model + '.yaml')}"
    work = build_workload(spec, seq, None, None)
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: a smoke test only
    probe0 = host_probe_ns(dev)
    step = training_step(work, int(batch), dev, dtype, opt)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    phases = ("zero_grad", "forward", "backward", "step")
    rows = []
    for i in range(14):
        sync()
        t = [time.perf_counter()]
        step(lambda what, _: t.append(time.perf_counter()))
        t_issue = time.perf_counter()
        sync()
        t_end = time.perf_counter()
        if i >= 6:
            d = {p: (t[k + 2] - t[k + 1]) * 1e3 for k, p in enumerate(phases)}
            d["host"] = (t_issue - t[0]) * 1e3
            d["wall"] = (t_end - t[0]) * 1e3
            rows.append(d)
    out = {"run": f"{model} {batch} {dtype} {seq}", "set": set_, "gpu": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
           "torch": torch.__version__, "optimizer": opt, "host_probe_ns_before": probe0,
           "host_ms": {k: statistics.median(r[k] for r in rows) for k in rows[0]}}
    out["host_probe_ns_after"] = host_probe_ns(dev)
    # two steps under the profiler, the forward pass marked
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            step.zero_grad()
            with record_function("vdnnsim_fwd"):
                loss = step.forward()
            with record_function("vdnnsim_bwd"):
                step.backward(loss)
            del loss
            step.update()
            sync()
    ev = prof.profiler.function_events
    fwd = [e for e in ev if e.name == "vdnnsim_fwd"]
    by = defaultdict(lambda: [0, 0.0])
    fwd_us = ops_us = 0.0
    n_top = 0
    for f in fwd:
        fwd_us += f.time_range.end - f.time_range.start
        for c in f.cpu_children:
            if c.name.startswith("aten::") or c.name.startswith("cudnn") or "::" in c.name:
                d = c.time_range.end - c.time_range.start
                by[c.name][0] += 1
                by[c.name][1] += d
                ops_us += d
                n_top += 1
    k = len(fwd)
    out["profiled_forward"] = {
        "forward_ms": fwd_us / k / 1e3, "top_level_ops": n_top // k,
        "in_ops_ms": ops_us / k / 1e3, "outside_ops_ms": (fwd_us - ops_us) / k / 1e3,
        "ops": sorted(([n, c // k, round(s / c, 2)] for n, (c, s) in by.items()),
                      key=lambda r: -r[1] * r[2])[:60]}
    bwd = [e for e in ev if e.name == "vdnnsim_bwd"]
    eng = [e for e in ev if e.name.startswith("autograd::engine::evaluate_function")]
    out["profiled_backward"] = {
        "backward_ms": sum(e.time_range.end - e.time_range.start for e in bwd) / k / 1e3,
        "engine_functions": len(eng) // k,
        "engine_ms": sum(e.time_range.end - e.time_range.start for e in eng) / k / 1e3}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
