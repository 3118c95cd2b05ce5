"""Issue 31, session 32: the optimizer on the CPU, measured on the lent H100 machine, against
vdnnsim's prediction from the host's sweep alone (NOTE [cpu step model]). Written before
the second call's runs (the ``-t8`` ones: torch on 8 of the host's 16 threads) were made.

    .venv/bin/python experiments/cpu_step/check.py [DATA]     (DATA: traces/h100_cpu_step/host_sweep)

The host fields come from DATA/cpu_sweep.json (``vdnnsim calibrate --cpu-step``) through
vdnnsim.costs.cpustep.fit, ``cpu_step_copy_share`` from DATA/contention*.json (the median
process's slowdown, as calibration_fits fits the H200's), nothing from the runs. A run on
fewer threads is predicted by the roofline's what-if: ``cpu_threads`` and the bandwidth the
sweep measured on that many threads. Traces: the meta device and the op model on the h100
preset (NOTE [op spec rule]), made here (5 s each). Prints one row per run of
DATA/runs.jsonl: measured (median of 3 fresh processes, band) against predicted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.costs.fits import copy_share
from vdnnsim.costs.cpustep import fit
from vdnnsim.hardware import apply_overrides, gpu_preset, parse_overrides
from vdnnsim.gpu.probe.aten import memory_trace
from vdnnsim.trace import trace_from_dict
from vdnnsim.trace.optimizer import with_optimizer

GiB = 2**30
MODELS = {"1b": ("hf:llama-1b", 2, 2048),  # model, batch, sequence length
          "3b": ("hf:llama-3b", 1, 1024)}
THREADS = {"t8": 8}




def main() -> None:
    data = Path(sys.argv[1] if len(sys.argv) > 1 else "traces/h100_cpu_step/host_sweep")
    sweep = json.loads((data / "cpu_sweep.json").read_text())
    fields, _ = fit(sweep)
    bw = {b["threads"]: b["bytes_per_s"] for b in sweep["bandwidth"]}
    if any(data.glob("contention*.json")):
        fields["cpu_step_copy_share"] = round(copy_share(data)[0], 3)
    print("host:", fields)
    traces = {}  # what `vdnnsim trace --model M -b B --seq-len S --gpu h100 --dtype
    # autocast-bf16 --optimizer adamw` writes, made in this process
    h100 = resolve_gpu("h100")
    for m, (model, batch, seq) in MODELS.items():
        traces[m] = with_optimizer(trace_from_dict(memory_trace(
            model, batch, h100, "autocast-bf16", seq), model), "adamw")
    print(f"{'run':<16}{'measured ms':>12}{'band':>18}{'predicted':>11}{'error':>8}"
          f"{'alloc GiB':>11}{'predicted':>10}{'host GiB':>9}{'predicted':>10}")
    for line in (data / "runs.jsonl").read_text().splitlines():
        r = json.loads(line)
        name = r["name"]
        model, _, rest = name.partition("-")
        if model not in MODELS:  # the 7B's runs: check_7b.py
            continue
        gpu = gpu_preset("h100", {"host": fields})  # the host as its sweep calibrates it
        for tag, n in THREADS.items():
            if name.endswith(tag):  # the what-if over it: n threads, the sweep's bandwidth
                gpu = apply_overrides(gpu, parse_overrides(
                    {"host": {"cpu_threads": n, "cpu_memory_bw_bytes_per_s": bw[n]}}))
        offload = "offload" in rest
        p = run_trace(traces[model], gpu, "eager", {}, None, record=False,
                      optimizer_offload=offload)
        ms, lo, hi = r["iteration_ms"], *r["iteration_ms_band"]
        pm = p.iteration_time_ns / 1e6
        print(f"{name:<16}{ms:>12.1f}{f'{lo:.1f}-{hi:.1f}':>18}{pm:>11.1f}"
              f"{100 * (pm - ms) / ms:>+7.1f}%{r['peak_allocated_bytes'] / GiB:>11.2f}"
              f"{p.peak_memory_bytes / GiB:>10.2f}"
              f"{(r.get('optimizer_pinned_bytes') or 0) / GiB + (r.get('optimizer_state_bytes') or 0) / GiB:>9.2f}"
              f"{(p.optimizer_host_bytes or 0) / GiB:>10.2f}")


if __name__ == "__main__":
    main()
