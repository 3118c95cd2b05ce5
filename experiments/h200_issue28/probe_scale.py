"""Issue 28: does the host probe carry a host-bound step from the profiling process to the
measuring ones? (NOTE [host probe]; the data: probe_scale.sh.)

    .venv/bin/python experiments/h200_issue28/probe_scale.py DIR

For each run of DIR/runs.jsonl, its trace DIR/NAME_bB.yaml is replayed (h200 preset,
baseline) twice: as profiled (T0), and with every host cost the replay charges (the
trace's per-layer and step host times, the preset's host costs: host_scale.py's list)
multiplied by K = the record's host_probe_between_ns (median of its processes) / the
trace's host_probe_between_ns (T1). Each is judged against the median of the processes'
medians. Per run it also gives the processes' host issue times and those times divided by
each process's own probe between steps (how much of the spread the probe explains).

The rule, written before the data (2026-12-05, session 26): scaling by the probe is worth
building into the replay if, over the set's host-bound runs (host issue >= 80% of the
measured step), the median |error| of T1 is at most two thirds of T0's and no run's
|error| grows by more than 5 points. Otherwise the probe does not carry a step between
processes well enough, and the host-bound target stays judged against unscaled replays.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_scale import HOST_COSTS, scaled_trace  # noqa: E402
from vdnnsim.api import resolve_gpu, run_trace  # noqa: E402
from vdnnsim.validate import POLICY_MAP  # noqa: E402


def cv(v: list[float]) -> float:
    return statistics.pstdev(v) / statistics.mean(v) if len(v) > 1 else 0.0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    folder = Path(argv[0])
    g = resolve_gpu("h200")
    rows = []
    print(f"{'run':24} {'meas ms':>8} {'band':>13} {'host%':>5} {'K':>5} {'T0 ms':>7} "
          f"{'err':>7} {'T1 ms':>7} {'err':>7}  host ms / per-probe (cv)")
    for line in open(folder / "runs.jsonl"):
        r = json.loads(line)
        if r.get("rc") or "error" in r:
            print(f"{r['run']:24} failed: {str(r.get('error', ''))[-120:]}")
            continue
        name, b = r["run"].split(":")[:2]
        data = yaml.safe_load(open(folder / f"{name}_b{b}.yaml"))
        tp = (data.get("source") or {}).get("host_probe_between_ns")
        mp = r.get("host_probe_between_ns")
        if not tp or not mp:
            print(f"{r['run']:24} no probe in the trace or the record")
            continue
        k = mp / tp
        slow = replace(g, host=replace(g.host, **{f: int(getattr(g.host, f) * k)
                                                  for f in HOST_COSTS}))
        t0 = run_trace(scaled_trace(data, 1.0), g, POLICY_MAP["baseline"], record=False).iteration_time_ns / 1e6
        t1 = run_trace(scaled_trace(data, k), slow, POLICY_MAP["baseline"], record=False).iteration_time_ns / 1e6
        m = r["iteration_ms"]
        procs = r["processes"]
        hosts = [p["host_issue_ms"] for p in procs]
        per = [p["host_issue_ms"] / p["host_probe_between_ns"] * 1e3 for p in procs]
        hb = r["host_issue_ms"] >= 0.8 * m
        rows.append((hb, t0 / m - 1, t1 / m - 1))
        lo, hi = r["iteration_ms_band"]
        print(f"{r['run']:24} {m:8.2f} {lo:6.2f}-{hi:6.2f} {100 * r['host_issue_ms'] / m:5.0f} "
              f"{k:5.2f} {t0:7.2f} {100 * (t0 / m - 1):+6.1f}% {t1:7.2f} "
              f"{100 * (t1 / m - 1):+6.1f}%  "
              f"{' '.join(f'{h:.1f}' for h in hosts)} ({cv(hosts):.2f}) / "
              f"{' '.join(f'{q:.2f}' for q in per)} ({cv(per):.2f})")
    hbs = [(a, c) for h, a, c in rows if h]
    if not hbs:
        print("no host-bound run")
        return 0
    e0 = statistics.median(abs(a) for a, _ in hbs)
    e1 = statistics.median(abs(c) for _, c in hbs)
    worse = max(abs(c) - abs(a) for a, c in hbs)
    print(f"host-bound runs: {len(hbs)}; |error| median unscaled {100 * e0:.1f}%, "
          f"scaled {100 * e1:.1f}%; largest growth {100 * worse:+.1f} points")
    ok = e1 <= 2 / 3 * e0 and worse <= 0.05
    print("rule (written before the data): scaling by the probe "
          + ("carries the step: build it" if ok else "does not carry the step well enough"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
