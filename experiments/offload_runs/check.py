"""Issue 31 (session 21): the optimizer on the CPU, predicted against the H200 (CPU).

    .venv/bin/python experiments/offload_runs/check.py traces/h200_optimizer_offload

DIR: offload_loan.sh's OUT folder (``*.yaml`` profiles, ``runs.jsonl``). Every record that
ran (plain, or with ``optimizer_offload``, capped or not) is replayed by ``vdnnsim
validate``'s code with the h200 preset (whose ``host.cpu_step_*`` ``python -m
vdnnsim.costs.fits cpu_step`` fits to ``cpu_steps.json``, a microbenchmark kept apart
from these models); printed: peak allocated, step time against the median and band of the
fresh processes, the host's bytes for the optimizer, and whether each run fits."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from vdnnsim.measured.validate import validate


def main(argv: list[str]) -> int:
    d = Path(argv[0])
    recs = [json.loads(x) for x in (d / "runs.jsonl").read_text().splitlines() if x.strip()]
    ran = [r for r in recs if "model" in r and "fits" in r]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(ran, f)
    df = validate(sorted(d.glob("*.yaml*")), f.name)
    cols = ["model", "batch_size", "policy", "cap_gib", "measured_fits", "predicted_fits",
            "measured_alloc_gib", "predicted_alloc_gib", "alloc_err", "measured_ms",
            "predicted_ms", "time_err", "time_band_min", "time_band_max", "time_in_band",
            "measured_host_gib", "predicted_host_gib", "host_err"]
    print(df[[c for c in cols if c in df]].to_string(index=False, float_format="%.3f"))
    for r in recs:
        if "model" not in r:
            print(f"not run: {r.get('job')}: {r.get('error', '')[-200:]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
