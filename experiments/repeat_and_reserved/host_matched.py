"""Issue 28: how much of the re-measured sets' reserved miss is the replayed host's speed.

A diagnosis, not a prediction (it reads each run's measured host time, which a prediction
does not have; nothing here is kept): every uncapped run of the re-measured torchvision
sets (the traces and fresh-process files as `vdnnsim validate` takes them) is replayed as
profiled, then with every host cost times K (NOTE [host speed], `api.at_host_speed`), K
found by three fixed-point steps K <- K * measured / replayed host issue time, so that the
replayed host issues the step in about the time the measured one did. Prints each run's
reserved and time errors both ways, and the medians and maxima. With ``--processes``: each
vDNN run's fresh processes one by one instead, each replayed with the host matched to its
own host issue time and held against its own reserved peak (does the replay follow the
reserved peak from one process to the next as the host's speed changes?):

    .venv/bin/python experiments/repeat_and_reserved/host_matched.py traces/h200_backward_workspaces/torchvision \\
        traces/h200_backward_workspaces/torchvision_heldout traces/h200_torchvision_heldout/wide_resnet50_2_b128.yaml \\
        $(cat experiments/repeat_and_reserved/fresh_sets.txt)
"""

from __future__ import annotations

import statistics
import sys

from vdnnsim.api import at_host_speed, resolve_gpu, run_trace
from vdnnsim.cli.data import split_measurements
from vdnnsim.measured.validate import (POLICY_MAP, _simulated_settings, load_measurement_sets,
                              load_traces)

STEPS = 3


def replay(trace, g, policy: str, k: float, allocator: dict):
    t, gk = at_host_speed(trace, g, k) if k != 1.0 else (trace, g)
    return run_trace(t, gk, policy, {}, None, allocator=allocator)


def matched(trace, g, policy: str, host_ms: float, alloc: dict, start=None):
    """K and the replay with the host's issue time matched to ``host_ms``; ``start``: the
    replay as profiled (K = 1), where the caller has it already."""
    k, r = 1.0, start or replay(trace, g, policy, 1.0, alloc)
    for _ in range(STEPS):
        k *= host_ms / (r.host_issue_time_ns / 1e6)
        r = replay(trace, g, policy, k, alloc)
    return k, r


def per_process(tr, g, records) -> int:
    as_is, same = [], []
    for _, m in records:
        key = (m["model"].split(":")[-1], m["batch_size"])
        policy = POLICY_MAP.get(m["policy"])
        if (policy is None or m["policy"] == "baseline" or key not in tr
                or m.get("memory_cap_bytes") or not m["fits"] or not m.get("processes")):
            continue
        alloc = _simulated_settings(m.get("allocator_conf"))
        r0 = replay(tr[key], g, policy, 1.0, alloc)
        cells = []
        for p in m["processes"]:
            if not (p.get("host_issue_ms") and p.get("peak_reserved_bytes")):
                continue
            k, r = matched(tr[key], g, policy, p["host_issue_ms"], alloc, r0)
            mr = p["peak_reserved_bytes"]
            as_is.append(abs(r0.peak_footprint_bytes / mr - 1))
            same.append(abs(r.peak_footprint_bytes / mr - 1))
            cells.append(f"{p['host_issue_ms']:6.1f} ms {mr / 2**30:6.2f}/"
                         f"{r.peak_footprint_bytes / 2**30:6.2f}")
        print(f"{key[0] + ' ' + str(key[1]) + ' ' + m['policy']:34s} as profiled "
              f"{r0.peak_footprint_bytes / 2**30:6.2f} GiB | host, reserved GiB measured/"
              f"host-matched replay: " + " | ".join(cells))
    print(f"vDNN processes ({len(same)}), reserved: as profiled "
          f"{statistics.median(as_is):.1%} / {max(as_is):.1%}, each host matched "
          f"{statistics.median(same):.1%} / {max(same):.1%}")
    return 0


def main(argv: list[str]) -> int:
    procs = "--processes" in argv
    argv = [a for a in argv if a != "--processes"]
    traces, meas = split_measurements(argv)
    if not traces or not meas:
        print("usage: host_matched.py [--processes] TRACES... MEASUREMENTS...",
              file=sys.stderr)
        return 2
    tr = load_traces(traces)
    g = resolve_gpu("h200")
    records, _ = load_measurement_sets(meas)
    if procs:
        return per_process(tr, g, records)
    rows = []
    print(f"{'run':34s} {'host meas/replay ms':>20s} {'K':>5s} {'reserved':>16s} "
          f"{'time':>16s}")
    for _, m in records:
        key = (m["model"].split(":")[-1], m["batch_size"])
        policy = POLICY_MAP.get(m["policy"])
        host = m.get("host_issue_ms")
        if (policy is None or key not in tr or m.get("memory_cap_bytes") or not m["fits"]
                or not host):
            continue
        trace = tr[key]
        alloc = _simulated_settings(m.get("allocator_conf"))  # as validate replays it
        r0 = replay(trace, g, policy, 1.0, alloc)
        k, r = matched(trace, g, policy, host, alloc, r0)
        mr, mt = m["peak_reserved_bytes"], m["iteration_ms"]
        errs = [(x.peak_footprint_bytes / mr - 1, x.iteration_time_ns / 1e6 / mt - 1)
                for x in (r0, r)]
        rows.append((m["policy"], errs))
        tag = " expandable" if alloc.get("expandable_segments") else ""
        print(f"{key[0] + ' ' + str(key[1]) + ' ' + m['policy'] + tag:34s} "
              f"{host:8.1f} / {r0.host_issue_time_ns / 1e6:7.1f} {k:5.2f} "
              f"{errs[0][0]:+6.1%} -> {errs[1][0]:+6.1%} {errs[0][1]:+6.1%} -> {errs[1][1]:+6.1%}")
    for group, sel in (("vDNN runs", lambda p: p != "baseline"),
                       ("baselines", lambda p: p == "baseline")):
        part = [e for p, e in rows if sel(p)]
        if not part:
            continue
        for j, name in ((0, "reserved"), (1, "time")):
            a = [abs(e[0][j]) for e in part]
            b = [abs(e[1][j]) for e in part]
            print(f"{group} ({len(part)}), {name}: as profiled {statistics.median(a):.1%} / "
                  f"{max(a):.1%}, host matched {statistics.median(b):.1%} / {max(b):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
