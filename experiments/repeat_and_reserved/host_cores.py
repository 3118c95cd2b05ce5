"""Issue 28, session 20: where a host-bound step's process-to-process spread comes from.

On 2026-12-05 (traces/h200_reserved_heldout/host_speed/) three fresh processes of EfficientNet-B0 (32)
ran 25.2, 28.3 and 35.5 ms, each steady within itself (35.4-36.1 ms over five steps in the
slowest), and NOTE [host probe], taken once before the model, did not order them (10.5,
6.9, 10.6 us a launch). This asks whether the spread follows the CPU core a process runs on,
and whether a probe taken between the timed steps follows the step's host time:

    python3 experiments/repeat_and_reserved/host_cores.py OUT.jsonl MODEL BATCH [CORES]

runs one fresh process per configuration (unpinned three times, then pinned to each core
of CORES, default every fourth core, by ``taskset``); each process warms up three steps,
then times eight, and after each step times PROBE launches of ``x.add_(1)`` on a tensor
made before the model (no allocation, no empty_cache between steps). One JSON line per
process: the cores it may run on, each step's GPU ms and host ms, the probe before the
model and each probe's ns per launch. ``--summary OUT.jsonl`` prints the table and the
correlations (docs/validation.md, "How fast the host is"); ``--spreads traces`` how far
every committed fresh-process set's host-bound and GPU-bound runs spread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from statistics import correlation, mean, median, pstdev

from vdnnsim.measured.repeat import HOST_BOUND  # no torch: the parent needs none

PROBE, WARMUP, STEPS = 300, 3, 8


def child(model: str, batch: int) -> dict:
    import torch

    from vdnnsim.gpu.measure.hostprobe import StepProbe
    from vdnnsim.gpu.model.workload import build_workload, training_step

    dev = torch.device("cuda")
    probe = StepProbe(dev, ops=PROBE)  # its tensor made before the model
    with dev:
        work = build_workload(f"torchvision:{model}")
    step = training_step(work, batch, dev)
    first = probe()
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize(dev)
    gpu, host, probes = [], [], []
    for _ in range(STEPS):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        s.record()
        step()
        e.record()
        host.append((time.perf_counter() - t0) * 1e3)
        e.synchronize()
        gpu.append(s.elapsed_time(e))
        probes.append(probe())
    probe.close()
    return {"cpus": sorted(os.sched_getaffinity(0)), "probe_first_ns": first, "gpu_ms": gpu,
            "host_ms": host, "probe_ns": probes}


def summary(path: str) -> str:
    """The processes of a ``host_cores.py`` file, one line each, and per model how far their
    host times spread and how well each probe follows them (Pearson's r over processes)."""
    recs = [json.loads(line) for line in open(path)]
    lines = [f"{'model':18s} {'pinned':>6s} {'step ms':>8s} {'host ms':>8s} "
             f"{'probe before, ns':>16s} {'probe between, ns':>17s}"]
    for r in recs:
        if "error" in r:
            lines.append(f"{r['model']:18s} {r['pinned']!s:>6s} error")
            continue
        lines.append(f"{r['model']:18s} {r['pinned']!s:>6s} {median(r['gpu_ms']):8.2f} "
                     f"{median(r['host_ms']):8.2f} {r['probe_first_ns']:16.0f} "
                     f"{median(r['probe_ns']):17.0f}")
    for model in dict.fromkeys(r["model"] for r in recs):
        ok = [r for r in recs if r["model"] == model and "error" not in r]
        host = [median(r["host_ms"]) for r in ok]
        first = [r["probe_first_ns"] for r in ok]
        between = [median(r["probe_ns"]) for r in ok]
        norm = [h / p for h, p in zip(host, between)]
        lines.append(f"{model}: {len(ok)} processes, host ms {min(host):.1f}-{max(host):.1f} "
                     f"({max(host) / min(host):.2f}x, cv {pstdev(host) / mean(host):.2f}); "
                     f"r with the probe before the model {correlation(host, first):+.2f}, "
                     f"between the steps {correlation(host, between):+.2f}; host / probe "
                     f"between: {max(norm) / min(norm):.2f}x, cv {pstdev(norm) / mean(norm):.2f}")
    return "\n".join(lines)


def spreads(root: str) -> str:
    """Every committed fresh-process record of the H200 under ``root`` (``repeat*.jsonl``)
    that fits and has a band and a host time, by set: how far its processes' medians spread
    (``iteration_ms_spread``), host-bound runs (the host issues for 80% of the step or
    more) apart from the rest."""
    from pathlib import Path
    rows = []
    for f in sorted(Path(root).glob("**/repeat*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if "H200" not in r.get("gpu", "H200"):  # (session 26's H100 sets: another card)
                continue
            if r.get("fits") and "iteration_ms_band" in r and r.get("host_issue_ms"):
                rows.append((str(f.relative_to(root).parent), r["host_issue_ms"] >=
                             HOST_BOUND * r["iteration_ms"], r["iteration_ms_spread"]))

    def part(xs: list[float]) -> str:
        if not xs:
            return f"{'-':>17s}"
        return f"{len(xs):3d} {median(xs):6.1%} {max(xs):6.1%}"
    lines = [f"{'set':32s} {'host-bound: n, median, max':>27s}   {'GPU-bound: n, median, max':>26s}"]
    for name in dict.fromkeys(r[0] for r in rows):
        lines.append(f"{name:32s} {part([x for n, h, x in rows if n == name and h]):>27s}   "
                     f"{part([x for n, h, x in rows if n == name and not h]):>26s}")
    host = [x for _, h, x in rows if h]
    gpu = [x for _, h, x in rows if not h]
    lines.append(f"{'all':32s} {part(host):>27s}   {part(gpu):>26s}")
    lines.append(f"spread over 10%: {sum(x > 0.10 for x in host)} of {len(host)} host-bound runs, "
                 f"{sum(x > 0.10 for x in gpu)} of {len(gpu)} GPU-bound")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--summary":
        print(summary(argv[1]))
        return 0
    if argv and argv[0] == "--spreads":
        print(spreads(argv[1]))
        return 0
    if argv and argv[0] == "--child":
        print(json.dumps(child(argv[1], int(argv[2]))))
        return 0
    out, model, batch = argv[0], argv[1], argv[2]
    n = os.cpu_count() or 1
    cores = [int(c) for c in argv[3].split(",")] if len(argv) > 3 else list(range(0, n, 4))
    configs = [None, None, None] + cores
    with open(out, "a") as f:
        for core in configs:
            cmd = [sys.executable, __file__, "--child", model, batch]
            if core is not None:
                cmd = ["taskset", "-c", str(core)] + cmd
            r = subprocess.run(cmd, capture_output=True, text=True)
            try:
                rec = json.loads(r.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                rec = {"error": r.stderr[-300:]}
            rec.update(model=model, batch=int(batch), pinned=core, t=time.time())
            f.write(json.dumps(rec) + "\n")
            f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
