"""Issue 28: the analysis of probe_scaling.sh's data, written (session 20) before any of it
exists, so that what is judged is fixed first.

The question: does the ratio of the host probes taken after the timed steps (NOTE [host
probe]) carry a host-bound step's time from the process that profiled it to the process
that measured it? For each profiled trace (every draw on every loan given) and each
measured process of the same model and batch (every loan given), the trace is replayed
twice: as profiled, and with every host cost times K = (the process's
host_probe_between_ns / the trace's), as host_scale.py scales them; each prediction
against that process's own median step. A process that measured the step without the
probe (``step_probe: false``) or a trace without one is left out.

    .venv/bin/python experiments/repeat_and_reserved/probe_scaling_check.py DIR [DIR ...]

DIR: a probe_scaling.sh OUT folder (``*_b*_*.yaml`` traces, ``repeat.jsonl`` records).
Prints one line per (trace, process) pair and, per model and overall, the median and
maximum |error| unscaled and scaled. The claim is judged on the overall lines: scaling
helps if its median |error| is lower and its maximum no higher. Nothing here is fitted.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import yaml

from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.trace.io import trace_from_dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_scale import HOST_COSTS, scaled_trace  # noqa: E402

NAME = re.compile(r"(?P<model>.+)_b(?P<batch>\d+)_(?P<draw>\d+)\.yaml$")


def pairs(dirs: list[Path]) -> list[tuple[str, int, str, dict, dict]]:
    """(model, batch, trace file, trace data, process record) for every pair that has both
    probes."""
    traces, procs = [], []
    for d in dirs:
        for f in sorted(d.glob("*_b*_*.yaml")):
            m = NAME.match(f.name)
            data = yaml.safe_load(f.read_text())
            if m and data.get("source", {}).get("host_probe_between_ns"):
                traces.append((m["model"], int(m["batch"]), f"{d.name}/{f.name}", data))
        rec_file = d / "repeat.jsonl"
        for line in rec_file.read_text().splitlines() if rec_file.exists() else ():
            r = json.loads(line)
            if not r.get("fits"):
                continue
            model = r["model"].split(":", 1)[1]
            for p in r.get("processes", []):
                if p.get("fits") and p.get("host_probe_between_ns"):
                    procs.append((model, r["batch_size"], p))
    return [(m, b, name, data, p) for m, b, name, data in traces
            for pm, pb, p in procs if (pm, pb) == (m, b)]


def check(dirs: list[Path]) -> str:
    g = resolve_gpu("h200")
    rows = []
    for model, batch, name, data, p in pairs(dirs):
        k = p["host_probe_between_ns"] / data["source"]["host_probe_between_ns"]
        slow = replace(g, host=replace(g.host, **{f: int(getattr(g.host, f) * k)
                                                  for f in HOST_COSTS}))
        plain = run_trace(trace_from_dict(data), g, "eager", record=False)
        scaled = run_trace(scaled_trace(data, k), slow, "eager", record=False)
        ms = p["iteration_ms"]
        rows.append((model, name, k, ms, plain.iteration_time_ns / 1e6 / ms - 1,
                     scaled.iteration_time_ns / 1e6 / ms - 1))
    if not rows:
        return "no pair of a trace and a process that both carry host_probe_between_ns"
    lines = [f"{'trace':40s} {'K':>5s} {'measured ms':>11s} {'as profiled':>11s} "
             f"{'scaled':>8s}"]
    lines += [f"{name:40s} {k:5.2f} {ms:11.2f} {a:+11.1%} {b:+8.1%}"
              for _, name, k, ms, a, b in rows]
    for label, sel in [(m, [r for r in rows if r[0] == m]) for m in dict.fromkeys(
            r[0] for r in rows)] + [("all", rows)]:
        a, b = [abs(r[4]) for r in sel], [abs(r[5]) for r in sel]
        lines.append(f"{label}: {len(sel)} pairs, |error| as profiled {statistics.median(a):.1%}"
                     f" median, {max(a):.1%} max; scaled {statistics.median(b):.1%}, "
                     f"{max(b):.1%}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: probe_scaling_check.py DIR [DIR ...]", file=sys.stderr)
        return 2
    missing = [a for a in argv if not Path(a).is_dir()]
    if missing:
        print(f"probe_scaling_check.py: not a folder: {missing[0]}", file=sys.stderr)
        return 2
    print(check([Path(a) for a in argv]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
