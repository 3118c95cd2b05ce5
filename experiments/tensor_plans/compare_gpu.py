"""The held-out plans' GPU runs (gpu_runs.sh's records) against the engine, on the card that
ran them: each model traced on the meta device for that card's preset (h100 or h200), each
run replayed as it ran (the tensor plan as the tensor runtime runs it, every block
checkpointed, the step without a cap; PyTorch's save_on_cpu has no replay and is shown
measured only) under its cap and allocator settings, and the issue's judgements printed:
ran under its cap, step within 10% of the median of three fresh processes (or inside the
band where the host is the limit), peak allocated within 3%, the tensor plan at least as
fast as the fastest PyTorch-only option that fits.

    python experiments/tensor_plans/compare_gpu.py RUNS.jsonl [--gpu h100] [--no-workspaces]

``--no-workspaces``: the traces' predicted convolution workspaces (NOTE [conv workspaces])
taken out, as the traces were before they had them.

A run whose host issued for at least 90% of its step is marked host-bound: its step is the
host's, whatever the GPU's work. A run of a plan file since made again (its predictions
differ) is shown measured only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vdnnsim.api import resolve_gpu, run_plan, run_trace  # noqa: E402
from vdnnsim.costs.workspaces import without_workspaces  # noqa: E402
from vdnnsim.planners.planfile import read_plan_file  # noqa: E402
from vdnnsim.policies.blocks import block_recompute_plan  # noqa: E402

from experiments.tensor_plans.make_plans import HELDOUT, trace_of  # noqa: E402
from experiments.tensor_plans.records import is_current  # noqa: E402

GiB = 2**30


def predicted(rec: dict, trace, gpu) -> dict | None:
    """The engine's replay of the run ``rec`` names: peak allocated, reserved, step (ns),
    host-bound; None for save_on_cpu."""
    name, allocator = rec["name"], rec.get("allocator_conf") or None
    cap = rec.get("memory_cap_bytes")
    if name.endswith("-tensors"):
        path = rec["plan_file"]
        plan = read_plan_file(path)
        r = run_trace(trace, gpu, "planned", {"file": str(path)}, cap, record=False,
                      allocator=allocator, optimizer_offload=plan.optimizer_offload)
    elif name.endswith("-ckpt") or name.endswith("-blocks"):
        plan = read_plan_file(rec["plan_file"])
        if plan.blocks or plan.param_blocks:
            return None  # a block plan with offloads: compared by make_plans' replay
        p = block_recompute_plan(trace, plan.recompute_blocks)
        r = run_plan(trace, gpu, p, cap, allocator=allocator)
    elif name.endswith("-eager"):
        r = run_trace(trace, gpu, "eager", record=False, allocator=allocator)
    else:
        return None
    return {"fits": r.oom is None, "peak": r.peak_memory_bytes,
            "reserved": r.peak_footprint_bytes, "step_ns": r.iteration_time_ns,
            "host_ns": r.host_issue_time_ns}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", type=Path)
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--plans", type=Path, default=ROOT / "traces/h200_tensor_plans/plans")
    ap.add_argument("--no-workspaces", action="store_true",
                    help="the convolutions' predicted workspaces taken out of each trace")
    a = ap.parse_args()
    gpu = resolve_gpu(a.gpu)
    models = {m["name"]: m for m in yaml.safe_load(HELDOUT.read_text())["models"]}
    budgets = {k: p["budget_bytes"] for k, p in
               json.loads((a.plans.parent / "predicted.json").read_text()).items()}
    recs = [json.loads(line) for line in a.runs.read_text().splitlines() if line.strip()]
    traces: dict[str, object] = {}
    peak_errors: list[float] = []
    print("| run | measured step ms (band) | host ms | predicted ms | step | "
          "measured peak GiB | predicted | peak | reserved GiB (cap) | retries |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rec in recs:
        name = rec["name"]
        model = name.rsplit("-", 2)[0] if name.split("-")[-2].isdigit() else \
            name.rsplit("-", 1)[0]
        key = name.rsplit("-", 1)[0]
        rec["plan_file"] = a.plans / f"{name}.yaml"
        if rec.get("rc") or not rec.get("fits"):
            why = (rec.get("error") or "").strip().splitlines()
            print(f"| {name} | failed: {why[-1][:160] if why else rec.get('rc')} |||||||||")
            continue
        if not is_current(rec, a.plans, budgets):
            name += " (a plan since replaced)"
            print(f"| {name} | {rec['iteration_ms']:.1f} | {rec['host_issue_ms']:.1f} | "
                  f"- | - | {rec['peak_allocated_bytes'] / GiB:.2f} | - | - | - | - |")
            continue
        if model not in traces:
            traces[model] = trace_of(models[model], gpu)
            if a.no_workspaces:
                traces[model] = without_workspaces(traces[model])
        p = predicted(rec, traces[model], gpu)
        step, band = rec["iteration_ms"], rec["iteration_ms_band"]
        host = rec["host_issue_ms"]
        bound = host >= 0.9 * step
        retries = [q.get("allocator", {}).get("num_alloc_retries")
                   for q in rec.get("processes", [])]
        cap = rec.get("memory_cap_bytes")
        res = f"{rec['peak_reserved_bytes'] / GiB:.2f}" + (f" ({cap / GiB:.2f})" if cap else "")
        if p is None:
            print(f"| {name} | {step:.1f} ({band[0]:.1f}-{band[1]:.1f}) | {host:.1f} | - | - | "
                  f"{rec['peak_allocated_bytes'] / GiB:.2f} | - | - | {res} | {retries} |")
            continue
        ps = p["step_ns"] / 1e6
        err = ps / step - 1
        ok = abs(err) <= 0.10 or (bound and band[0] <= ps <= band[1])
        perr = p["peak"] / rec["peak_allocated_bytes"] - 1
        peak_errors.append(perr)
        print(f"| {name}{' (host-bound)' if bound else ''} | {step:.1f} ({band[0]:.1f}-"
              f"{band[1]:.1f}) | {host:.1f} | {ps:.1f}{'' if p['fits'] else ' (OOM)'} | "
              f"{err:+.1%} {'ok' if ok else 'MISS'} | {rec['peak_allocated_bytes'] / GiB:.2f} | "
              f"{p['peak'] / GiB:.2f} | {perr:+.1%} {'ok' if abs(perr) <= 0.03 else 'MISS'} | "
              f"{res}, predicted {p['reserved'] / GiB:.2f} | {retries} |", flush=True)
    if peak_errors:
        e = sorted(abs(x) for x in peak_errors)
        print(f"\npeak allocated: {len(e)} runs replayed, {sum(x <= 0.03 for x in e)} within "
              f"3%, |error| median {statistics.median(e):.1%}, max {e[-1]:.1%}; predicted "
              f"above the card's in {sum(x > 0 for x in peak_errors)}")
    by_key: dict[str, dict[str, float]] = {}
    for rec in recs:
        if rec.get("fits") and not rec.get("rc") and rec["name"].split("-")[-2].isdigit():
            key, kind = rec["name"].rsplit("-", 1)
            by_key.setdefault(key, {})[kind] = rec["iteration_ms"]
    print()
    for key, runs in by_key.items():
        others = {k: v for k, v in runs.items() if k in ("ckpt", "save_on_cpu")}
        if "tensors" in runs and others:
            best = min(others, key=others.get)
            verdict = "ok" if runs["tensors"] <= others[best] else "SLOWER"
            print(f"{key}: tensor plan {runs['tensors']:.1f} ms, the fastest PyTorch option "
                  f"{best} {others[best]:.1f} ms: {verdict}")
        elif others:
            print(f"{key}: no tensor plan ran; PyTorch's options "
                  + ", ".join(f"{k} {v:.1f} ms" for k, v in others.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
