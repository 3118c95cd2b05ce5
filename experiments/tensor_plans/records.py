"""Which of gpu_runs.sh's records measured the plans made now: a case planned again (a fix
to the probe, a new budget) must be measured again, the runs of its unchanged plans not.

    python experiments/tensor_plans/records.py DIR < RUNS.jsonl    (the names done)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ALIGN = 512  # the tensor runtime's pool slots (vdnnsim.gpu.runtime.tensors.ALIGN)


def plan_now(plans: Path, name: str) -> dict | None:
    """What a record of run ``name`` ran, as the plan file there now has it: its checkpointed
    modules and offloaded buffers (the pool's bytes) for a tensor plan, its blocks for a
    block plan; None for a run without a plan file."""
    path = plans / f"{name}.yaml"
    if not path.exists():
        return None
    d = yaml.safe_load(path.read_text())
    if d.get("layer_names") == "ops":
        return {"recompute_modules": d.get("recompute_modules") or [],
                "host_pool_bytes": sum(-(-t["bytes"] // ALIGN) * ALIGN
                                       for t in d.get("tensors") or [])}
    return {k: d.get(k) for k in ("blocks", "recompute_blocks", "param_blocks")}


def is_current(rec: dict, plans: Path, budgets: dict[str, int]) -> bool:
    """``rec`` ran (out of memory included) under its case's present budget, and the plan
    it ran is the plan file's now."""
    key = rec["name"].rsplit("-", 1)[0]
    if rec.get("rc") != 0 or rec.get("memory_cap_bytes") not in (None, budgets.get(key)):
        return False
    now = plan_now(plans, rec["name"])
    if now is None:
        return True
    ran = dict(rec.get("plan") or {}, host_pool_bytes=rec.get("host_pool_bytes", 0))
    return all((ran.get(k) or 0) == (v or 0) for k, v in now.items())


def main() -> None:
    d = Path(sys.argv[1])
    budgets = {k: p["budget_bytes"] for k, p in
               json.loads((d / "predicted.json").read_text()).items()}
    for line in sys.stdin:
        if line.strip():
            rec = json.loads(line)
            if is_current(rec, d / "plans", budgets):
                print(rec["name"])


if __name__ == "__main__":
    main()
