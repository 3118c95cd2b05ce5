"""Issue 31 (sessions 23, 24): parameters on the host, predicted against the H200 (CPU).

    .venv/bin/python experiments/offload_runs/param_check.py [FOLDER ...]

FOLDER: traces/h200_optimizer_offload/parameter_offload (the default), plans_3b/prepared_runs, ...; several: one
table.
Every record of the folder's ``runs.jsonl`` (param_loan.sh's) is replayed with the h200
preset on the profile of its model in ``traces/h200_optimizer_offload`` (the 3.4B at 1 x 1024, the
1.1B at 2 x 2048): a block plan's record under ``vdnn_blocks`` with the plan's counts
(offloaded, checkpointed, parameters on the host) and the optimizer where the plan puts
it; PyTorch's ``save_on_cpu`` is not a policy of the engine, so its record shows the
measurement alone. Printed per run: fits measured and predicted, peak allocated and
reserved, the step against the median and band of the fresh processes, the parameters
fetched per step and the host's bytes for the optimizer. A record's allocator settings
(``allocator_conf``: expandable segments) are replayed as measured. Nothing is fitted here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.trace import load_trace

GiB = 2**30
ROOT = Path(__file__).resolve().parents[2]
PROFILES = {("llama-3b", 1): "llama-3b_b1_s1024.yaml.gz",
            ("llama-1b", 2): "llama-1b_b2_s2048.yaml.gz"}


def check(d: Path) -> pd.DataFrame:
    """The table, one row per run of ``d``'s runs.jsonl."""
    gpu = resolve_gpu("h200")
    rows = []
    for line in (d / "runs.jsonl").read_text().splitlines():
        m = json.loads(line)
        name = m["model"].split(":")[-1]
        trace = load_trace(ROOT / "traces" / "h200_optimizer_offload" / PROFILES[name, m["batch_size"]])
        cap = m.get("memory_cap_bytes")
        row = {"run": m["name"], "cap_gib": cap / GiB if cap else None,
               "expandable": bool((m.get("allocator_conf") or {}).get("expandable_segments")),
               "measured_fits": m["fits"]}
        plan = m.get("plan")
        if plan is not None:
            opts = {"blocks": plan["blocks"],  # both: NOTE [block mix]
                    "recompute": plan["recompute_blocks"]}
            if plan.get("param_blocks"):
                opts["params"] = plan["param_blocks"]
            r = run_trace(trace, gpu, "vdnn_blocks", opts, cap, record=False,
                          optimizer_offload=bool(plan.get("optimizer_offload")),
                          allocator=m.get("allocator_conf") or None)
            row.update(predicted_fits=r.fits, predicted_alloc_gib=r.peak_memory_bytes / GiB,
                       predicted_reserved_gib=r.peak_footprint_bytes / GiB,
                       predicted_ms=r.iteration_time_ns / 1e6,
                       predicted_fetched_gib=r.param_fetched_bytes / GiB,
                       predicted_host_gib=r.optimizer_host_bytes / GiB)
        if m["fits"]:
            band = m.get("iteration_ms_band") or [m["iteration_ms"]] * 2
            held = (m.get("optimizer_pinned_bytes") or 0) + (m.get("optimizer_state_bytes") or 0)
            row.update(measured_alloc_gib=m["peak_allocated_bytes"] / GiB,
                       measured_reserved_gib=m["peak_reserved_bytes"] / GiB,
                       measured_ms=m["iteration_ms"], band_min=band[0], band_max=band[1],
                       measured_fetched_gib=m.get("param_fetched_bytes", 0) / GiB,
                       late=m.get("param_late_fetches"), measured_host_gib=held / GiB)
        else:
            row["error"] = m.get("error", "")[:60]
        rows.append(row)
    df = pd.DataFrame(rows)
    for what in ("alloc", "reserved", "ms", "host"):
        a, b = f"predicted_{what}_gib" if what != "ms" else "predicted_ms", \
            f"measured_{what}_gib" if what != "ms" else "measured_ms"
        if a in df and b in df:
            df[f"{what}_err"] = (df[a] - df[b]) / df[b]
    return df


def main(argv: list[str]) -> int:
    folders = [Path(a) for a in argv] or [ROOT / "traces" / "h200_optimizer_offload" / "parameter_offload"]
    df = pd.concat([check(d) for d in folders], ignore_index=True)
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(df.to_string(index=False, float_format="%.3f"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
