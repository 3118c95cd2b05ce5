"""Issue 28: how a replay's reserved peak and step time move with the host's speed.

Every host cost the replay charges (the trace's per-layer and step host times, NOTE [host
timing]; the preset's eager and vDNN-runtime costs, NOTE [host costs]) is multiplied by K,
as if the host were K times slower, and each run of a fresh-process set is replayed at 1
and at K against its measurement (a sensitivity, not a fit: nothing here is kept):

    .venv/bin/python experiments/repeat_and_reserved/host_scale.py traces/h200_backward_workspaces/smallest/repeat.jsonl 1.25
"""

from __future__ import annotations

import copy
import glob
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import yaml

from vdnnsim.api import HOST_COSTS, resolve_gpu, run_trace  # (HOST_COSTS: NOTE [host speed])
from vdnnsim.trace.io import trace_from_dict
from vdnnsim.measured.validate import POLICY_MAP

ROOT = Path(__file__).resolve().parents[2]


def scaled_trace(data: dict, k: float):
    d = copy.deepcopy(data)
    for layer in d["layers"]:
        for f in ("host_fwd_ns", "host_bwd_ns"):
            if f in layer:
                layer[f] = int(layer[f] * k)
    if "host_step_ns" in d:
        d["host_step_ns"] = int(d["host_step_ns"] * k)
    return trace_from_dict(d)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    src, k = argv[0], float(argv[1])
    g = resolve_gpu("h200")
    slow = replace(g, host=replace(g.host, **{f: int(getattr(g.host, f) * k)
                                              for f in HOST_COSTS}))
    rows = []
    for line in open(src):
        r = json.loads(line)
        m, b, p = r["model"].split(":")[1], r["batch_size"], r["policy"]
        data = yaml.safe_load(open(glob.glob(str(ROOT / f"traces/h200_backward_workspaces/*/{m}_b{b}.yaml"))[0]))
        errs = []
        for gpu, kk in ((g, 1.0), (slow, k)):
            res = run_trace(scaled_trace(data, kk), gpu, POLICY_MAP[p], record=False)
            errs.append((res.peak_footprint_bytes / r["peak_reserved_bytes"] - 1,
                         res.iteration_time_ns / 1e6 / r["iteration_ms"] - 1))
        rows.append(errs)
        print(f"{m:20s} {b:4d} {p:10s} reserved {errs[0][0]:+6.1%} -> {errs[1][0]:+6.1%}"
              f"   time {errs[0][1]:+6.1%} -> {errs[1][1]:+6.1%}")
    for j, name in ((0, "reserved"), (1, "step time")):
        for i, kk in enumerate((1.0, k)):
            e = [abs(o[i][j]) for o in rows]
            print(f"{name} at host x{kk:g}: median |error| {statistics.median(e):.1%}, "
                  f"max {max(e):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
