"""Issue 58: a host-bound step given as the band between a fast and a slow host
(NOTE [host band]), and a replay at a calibrated host's speed (NOTE [host calibration]),
against every host-bound run measured in fresh processes that replays on a CPU.

    .venv/bin/python experiments/host_costs/host_band.py [--spread] [--set NAME ...]

``--spread``: the band's ends from the noise data alone (traces/h200_host_noise, the
unpinned processes of traces/h200_reserved_heldout/host_speed/cores, the two loans of
traces/h200_reserved_heldout/host_tests_h100/probe-h100): each process's host issue time
over the median of its run's processes, and vdnnsim's HOST_FAST and HOST_SLOW beside them.

Otherwise the check, on runs none of that data is from. A run counts as host-bound where
its measured host issued 80% of the median step or more (HOST_BOUND). Each is replayed as
it ran, once as vdnnsim gives it (the one number and, where the replay is host-bound, the
band), and, where the measuring processes recorded the probe between steps and the trace's
host costs have a reference probe, at k = their median probe over the reference's: what a
host calibration made in the measuring processes would give (a separate `vdnnsim calibrate
--host` process draws its own host speed, so this is its best case). Judged: the measured
median inside the predicted band; the calibrated step inside the measured processes' band
[min, max]. A run whose replay is not host-bound gets no band from vdnnsim; its row shows
the band the two replays would give, marked ``*``. Sets (``--set``): torchvision (H200,
profiled traces, fresh_sets.txt), opmodel (H200, set1 and set2 of issue 29's held-out
transformers and CNNs), opmodel_h100 (the same runs on an H100, the spec rule), tensors
(the tensor plans' runs on an H100), and probe_h100, calibrated only (the band's own
data: each profile draw D of loan L, a row "L.D on loan l", against loan l's processes,
replayed on the h200 preset as probe_scaling_check.py does). Nothing is fitted here.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import sys
from contextlib import redirect_stderr
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim and experiments, from any folder

from vdnnsim.api import resolve_gpu, run_trace  # noqa: E402
from vdnnsim.hostcal import op_model_probe  # noqa: E402
from vdnnsim.hostspeed import HOST_FAST, HOST_SLOW, at_host_speed, band_factors, ms  # noqa: E402
from vdnnsim.measured.repeat import HOST_BOUND  # noqa: E402

T = ROOT / "traces"
NOISE = T / "h200_host_noise" / "hostnoise.json"
CORES = T / "h200_reserved_heldout" / "host_speed" / "cores" / "cores.jsonl"
PROBE_H100 = [T / "h200_reserved_heldout" / "host_tests_h100" / "probe-h100" / m / "repeat.jsonl"
              for m in ("machine1", "machine2")]
OP = ROOT / "experiments" / "op_model"
HELDOUT = T / "h200_op_model_heldout"
SETS = ("torchvision", "opmodel", "opmodel_h100", "tensors", "probe_h100")


def spread() -> int:
    """NOTE [host band]'s ends from the noise data."""
    runs: dict[str, list[float]] = {}
    for r in json.loads(NOISE.read_text()):
        if r["what"] == "measure":
            runs.setdefault(f"h200_host_noise {r['model']}", []).append(r["host_issue_ms"])
    for line in CORES.read_text().splitlines():
        r = json.loads(line)
        if r["pinned"] is None:  # vdnnsim measure never pins a process to a core
            runs.setdefault(f"host_speed/cores {r['model']}", []).append(
                statistics.median(r["host_ms"]))
    for path in PROBE_H100:
        for line in path.read_text().splitlines():
            r = json.loads(line)
            runs.setdefault(f"probe-h100 {r['model']}", []).extend(
                p["host_issue_ms"] for p in r["processes"] if p.get("fits"))
    ratios = []
    print(f"{'run':50s} {'n':>3s}  host issue time / the run's median")
    for name, v in runs.items():
        med = statistics.median(v)
        ratios += [x / med for x in v]
        print(f"{name:50s} {len(v):3d}  " + " ".join(f"{x / med:.2f}" for x in sorted(v)))
    lo, hi = min(ratios), max(ratios)
    print(f"{len(ratios)} processes of {len(runs)} runs: fastest {lo:.3f}, slowest {hi:.3f} "
          f"of their run's median; rounded outward {math.floor(lo * 100) / 100:.2f}, "
          f"{math.ceil(hi * 100) / 100:.2f}; vdnnsim's HOST_FAST, HOST_SLOW: {HOST_FAST}, "
          f"{HOST_SLOW}")
    return 0


def judge(set_name: str, name: str, rec: dict, trace, gpu, rerun, ref: float | None,
          band: bool = True) -> dict:
    """One measured host-bound run against its replay ``rerun(k)`` (k: every host cost
    times k), its band (unless ``band`` is off), and its calibrated replay where ``ref``
    (the trace's host's probe) and the record's probes allow."""
    r = rerun(1.0)
    med, (mlo, mhi) = rec["iteration_ms"], rec["iteration_ms_band"]
    row = {"set": set_name, "run": name, "measured": med, "band": (mlo, mhi),
           "predicted": r.iteration_time_ns / 1e6, "host_bound": r.host_bound}
    if band:
        fast, slow = (rerun(k) for k in band_factors(trace))
        lo, hi = sorted((fast.iteration_time_ns / 1e6, slow.iteration_time_ns / 1e6))
        row.update(lo=lo, hi=hi, inside=lo <= med <= hi)
    probe = rec.get("host_probe_between_ns")
    if ref and probe:
        c = rerun(probe / ref).iteration_time_ns / 1e6
        row.update(k=probe / ref, calibrated=c, cal_inside=mlo <= c <= mhi)
    return row


def _measured_host_bound(rec: dict) -> bool:
    return bool(rec.get("fits") and rec.get("iteration_ms_band")
                and (rec.get("host_issue_ms") or 0) >= HOST_BOUND * rec["iteration_ms"])


def torchvision() -> list[dict]:
    """The torchvision runs re-measured in fresh processes (issue 28), replayed from the
    re-profiled traces as `vdnnsim validate` pairs them."""
    from vdnnsim.measured.validate import (POLICY_MAP, _simulated_settings,
                                           load_measurement_sets, load_traces)
    bw = T / "h200_backward_workspaces"
    traces = load_traces([bw / "torchvision", bw / "torchvision_heldout",
                          T / "h200_torchvision_heldout" / "wide_resnet50_2_b128.yaml"])
    files = (ROOT / "experiments" / "repeat_and_reserved" / "fresh_sets.txt").read_text()
    records, _ = load_measurement_sets([ROOT / f for f in files.split()])
    gpu, rows = resolve_gpu("h200"), []
    for _, m in records:
        key, policy = (m["model"].split(":")[-1], m["batch_size"]), POLICY_MAP.get(m["policy"])
        if policy is None or key not in traces or not _measured_host_bound(m):
            continue
        trace, cap = traces[key], m.get("memory_cap_bytes")
        alloc = _simulated_settings(m.get("allocator_conf"))

        def rerun(k: float, trace=trace, policy=policy, cap=cap, alloc=alloc):
            return run_trace(*at_host_speed(trace, gpu, k), policy, {}, cap, record=False,
                             allocator=alloc)
        name = f"{key[0]} ({key[1]}) {m['policy']}" + (f" cap {cap / 2**30:.0f} GiB"
                                                        if cap else "")
        rows.append(judge("torchvision", name, m, trace, gpu, rerun, None))
    return rows


def probe_h100() -> list[dict]:
    """The host probe's own test (issue 28: every profile draw of probe-h100 against every
    loan's record of its run, replayed on the h200 preset as probe_scaling_check.py does),
    calibrated only: this data set made the band, which is not judged on it."""
    import re

    from vdnnsim.trace.io import load_trace
    gpu, rows = resolve_gpu("h200"), []
    records = [(loan, json.loads(line)) for loan, path in enumerate(PROBE_H100, 1)
               for line in path.read_text().splitlines()]
    for f in sorted(p for path in PROBE_H100 for p in path.parent.glob("*_b*_*.yaml")):
        model, batch, draw = re.match(r"(.+)_b(\d+)_(\d+)\.yaml$", f.name).groups()
        trace, loan_of_trace = load_trace(f), f.parent.name[-1]
        for loan, m in records:
            if m["model"] != f"torchvision:{model}" or m["batch_size"] != int(batch) \
                    or not _measured_host_bound(m):
                continue

            def rerun(k: float, trace=trace):
                return run_trace(*at_host_speed(trace, gpu, k), "eager", record=False)
            rows.append(judge("probe_h100", f"{model} ({batch}) {loan_of_trace}.{draw} on "
                              f"loan {loan}",
                              m, trace, gpu, rerun, trace.source.host_probe_between_ns,
                              band=False))
    return rows


def _op_runs(folder: Path) -> dict[str, tuple]:
    """runs.txt's runs: name -> (model config, batch, seq, dtype, optimizer)."""
    out = {}
    for line in (folder / "runs.txt").read_text().splitlines():
        w = line.split()
        if not w or "--plan" in w:
            continue
        a = dict(zip(w[2::2], w[3::2]))
        out[w[0]] = (folder / f"{w[1]}.yaml", int(a["-b"]), int(a["--seq-len"]) if
                     "--seq-len" in a else None, a["--dtype"], a["--optimizer"])
    return out


def opmodel(h100: bool = False) -> list[dict]:
    """Issue 29's first two held-out sets: meta traces timed by the op model (on the H100,
    the h100 preset's spec rule), replayed as PyTorch runs them (eager)."""
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace import trace_from_dict
    from vdnnsim.trace.optimizer import with_optimizer

    gpu = resolve_gpu("h100" if h100 else "h200")
    runs = {**_op_runs(OP), **_op_runs(OP / "set2")}
    files = [HELDOUT / "h100_sets12" / "measure.jsonl"] if h100 else \
        [HELDOUT / "set1" / "measure.jsonl", HELDOUT / "set2" / "measure.jsonl"]
    ref, rows = op_model_probe(gpu), []
    for f in files:
        for line in f.read_text().splitlines():
            m = json.loads(line)
            if m.get("rc") or m.get("run") not in runs or not _measured_host_bound(m):
                continue
            cfg, b, seq, dtype, opt = runs[m["run"]]
            with redirect_stderr(io.StringIO()):
                d = memory_trace(f"hf:{cfg}", b, gpu, dtype, seq, {}, None)
            trace = with_optimizer(trace_from_dict(d, m["run"]), opt)

            def rerun(k: float, trace=trace):
                return run_trace(*at_host_speed(trace, gpu, k), "eager", record=False)
            rows.append(judge("opmodel_h100" if h100 else "opmodel", m["run"], m, trace, gpu,
                              rerun, ref))
    return rows


def tensors() -> list[dict]:
    """The tensor plans' held-out runs on an H100 (compare_gpu.py's replays of the plans
    as they are now), each at its cap and allocator settings."""
    import yaml

    from experiments.tensor_plans.make_plans import HELDOUT as MODELS, trace_of
    from experiments.tensor_plans.records import is_current
    from vdnnsim.planners.planfile import read_plan_file
    from vdnnsim.policies.blocks import block_recompute_plan
    from vdnnsim.api import run_plan

    data = T / "h200_tensor_plans"
    gpu, plans = resolve_gpu("h100"), data / "plans"
    models = {m["name"]: m for m in yaml.safe_load(MODELS.read_text())["models"]}
    budgets = {k: p["budget_bytes"] for k, p in
               json.loads((data / "predicted.json").read_text()).items()}
    ref, rows, traces = op_model_probe(gpu), [], {}
    for line in (data / "runs_h100.jsonl").read_text().splitlines():
        m = json.loads(line)
        name = m["name"]
        if not _measured_host_bound(m) or m["policy"] == "save_on_cpu" \
                or not is_current(m, plans, budgets):
            continue
        model = name.rsplit("-", 2)[0] if name.split("-")[-2].isdigit() else \
            name.rsplit("-", 1)[0]
        if model not in traces:
            traces[model] = trace_of(models[model], gpu)
        trace, cap, alloc = traces[model], m.get("memory_cap_bytes"), m.get("allocator_conf")
        path = plans / f"{name}.yaml"
        plan = read_plan_file(path) if path.exists() else None
        if not name.endswith("-tensors") and plan is not None and (plan.blocks
                                                                  or plan.param_blocks):
            continue  # a block plan with offloads: compare_gpu.py leaves it out too

        def rerun(k: float, trace=trace, cap=cap, alloc=alloc, name=name, plan=plan,
                  path=path):
            t, g = at_host_speed(trace, gpu, k)
            if name.endswith("-tensors"):
                return run_trace(t, g, "planned", {"file": str(path)}, cap, record=False,
                                 allocator=alloc, optimizer_offload=plan.optimizer_offload)
            if plan is not None:  # every block checkpointed
                return run_plan(t, g, block_recompute_plan(t, plan.recompute_blocks), cap,
                                allocator=alloc)
            return run_trace(t, g, "eager", record=False, allocator=alloc)
        rows.append(judge("tensors", name, m, trace, gpu, rerun, ref))
    return rows


def _pm(x: float) -> str:
    return ms(x * 1e6)


def report(rows: list[dict]) -> None:
    """One line a run (ms), then per set the counts."""
    print(f"{'set':12s} {'run':40s} {'measured':>8s} {'(processes)':>13s} {'predicted':>9s} "
          f"{'band':>12s} {'in':>3s} {'calibrated':>10s} {'k':>4s} {'in':>3s}")
    for r in rows:
        band = (f"{_pm(r['lo'])}-{_pm(r['hi'])}{'' if r['host_bound'] else '*'}"
                if "lo" in r else "-")
        inside = ("yes" if r["inside"] else "no") if "lo" in r else "-"
        cal = (f"{_pm(r['calibrated']):>10s} {r['k']:4.2f} "
               f"{'yes' if r['cal_inside'] else 'no':>3s}" if "k" in r else
               f"{'-':>10s} {'-':>4s} {'-':>3s}")
        print(f"{r['set']:12s} {r['run'][:40]:40s} {_pm(r['measured']):>8s} "
              f"{'(' + _pm(r['band'][0]) + '-' + _pm(r['band'][1]) + ')':>13s} "
              f"{_pm(r['predicted']):>9s} {band:>12s} {inside:>3s} "
              f"{cal}")
    for s in dict.fromkeys(r["set"] for r in rows):
        every = [r for r in rows if r["set"] == s]
        sel = [r for r in every if "lo" in r]  # judged by the band
        hb = [r for r in sel if r["host_bound"]]
        widths = [r["hi"] / r["lo"] for r in hb]
        if sel:
            print(f"{s}: {len(sel)} host-bound runs measured, {len(hb)} replayed host-bound, "
                  f"their medians inside vdnnsim's band: {sum(r['inside'] for r in hb)} of "
                  f"{len(hb)}" + (f" (slow end / fast end: median "
                                  f"{statistics.median(widths):.2f}x)" if widths else "")
                  + f"; inside the two replays' band, every run: "
                  f"{sum(r['inside'] for r in sel)} of {len(sel)}; the one number within "
                  f"10%: {sum(abs(r['predicted'] / r['measured'] - 1) <= 0.1 for r in sel)} "
                  f"of {len(sel)}")
        cal = [r for r in every if "k" in r]
        if cal:
            err = [abs(r["calibrated"] / r["measured"] - 1) for r in cal]
            plain = [abs(r["predicted"] / r["measured"] - 1) for r in cal]
            print(f"{s}: calibrated by the processes' probe ({len(cal)} runs): inside the "
                  f"processes' band {sum(r['cal_inside'] for r in cal)} of {len(cal)}, "
                  f"|error| median {statistics.median(err):.1%}, max {max(err):.1%} "
                  f"(uncalibrated {statistics.median(plain):.1%}, {max(plain):.1%})")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="host_band.py")
    ap.add_argument("--spread", action="store_true")
    ap.add_argument("--set", action="append", choices=SETS, default=None)
    a = ap.parse_args(argv)
    if a.spread:
        return spread()
    make = {"torchvision": torchvision, "opmodel": opmodel,
            "opmodel_h100": lambda: opmodel(h100=True), "tensors": tensors,
            "probe_h100": probe_h100}
    rows = [r for s in (a.set or SETS) for r in make[s]()]
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
