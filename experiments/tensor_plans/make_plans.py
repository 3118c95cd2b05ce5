"""The tensor planner on the held-out set (HELDOUT.md, committed before this was run):
each model traced on the meta device for a preset, planned at 50% and 70% of its uncapped
peak by tensors (NOTE [tensor plans]) and by blocks, the optimizer's place weighed, and
PyTorch's own per-module checkpointing (every block checkpointed) replayed at the same
budget. Writes the plan files a GPU measures (gpu_runs.sh) and prints the CPU judgement:
does the plan fit in the engine, its step against the uncapped one, against the block plan.
Every plan is made, and every run measured, under PyTorch's expandable segments (--allocator):
the first GPU runs under the default allocator ran out of memory near their caps with up to
2.4 GiB reserved but unallocated (docs/beyond-vdnn.md). The tensor and block plans leave
4% of each budget free (--margin, NOTE [plan margin]): planned to fill their caps, the
third loan's plans made the allocator free its cache and synchronise every step. The
traces' convolutions carry their predicted workspaces (NOTE [conv workspaces]); where no
plan fits with them, the plan is made without them, as `vdnnsim plan` does.

    python experiments/tensor_plans/make_plans.py [--gpu h200] [--out DIR] [NAME ...]
        (NAMEs: those models planned again, the others' predictions kept)
    python experiments/tensor_plans/make_plans.py --summary     (the judgement, from DIR)

DIR (default traces/GPU_tensor_plans) gets plans/NAME-PCT-tensors.yaml (the version 3
plan), NAME-PCT-blocks.yaml (the block plan), NAME-PCT-ckpt.yaml (every block
checkpointed) and predicted.json; nothing is measured here.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from contextlib import redirect_stderr
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim and experiments, from any folder

from vdnnsim.api import resolve_gpu, run_trace  # noqa: E402
from vdnnsim.costs.workspaces import without_workspaces  # noqa: E402
from vdnnsim.engine import allocator_settings, replay  # noqa: E402
from vdnnsim.gpu.probe.aten import memory_trace  # noqa: E402
from vdnnsim.planners.blocks import BlockPlan, plan_blocks  # noqa: E402
from vdnnsim.planners.greedy import block_plan_to_dict  # noqa: E402
from vdnnsim.planners.planfile import margin_said, with_run, write_plan_file  # noqa: E402
from vdnnsim.planners.tensors import PLAN_MARGIN, plan_tensors, tensor_plan_to_dict  # noqa: E402
from vdnnsim.policies.blocks import block_recompute_plan, block_regions  # noqa: E402
from vdnnsim.trace import trace_from_dict  # noqa: E402
from vdnnsim.trace.optimizer import with_optimizer  # noqa: E402

GiB = 2**30
HELDOUT = Path(__file__).resolve().parent / "heldout.yaml"


def trace_of(m: dict, gpu):
    with redirect_stderr(io.StringIO()):  # transformers' notes about its configs
        d = memory_trace(m["spec"], m["batch"], gpu, m["dtype"], m.get("seq_len"),
                         m.get("model_args") or {}, m.get("input"))
    return with_optimizer(trace_from_dict(d, m["name"]), "adamw")


def checkpoint_all(trace, gpu, budget: int, allocator=None) -> BlockPlan:
    """PyTorch's per-module checkpointing: every block, under the budget."""
    total = max(0, len(block_regions(trace)) - 2)
    r = replay(trace, gpu, block_recompute_plan(trace, total), budget, record_ops=False,
               allocator=allocator_settings(allocator))
    return BlockPlan(0, total, r.oom is None, r.peak_live_bytes, r.end_ns, recompute=total)


def summary(out: Path) -> None:
    """The CPU judgement from DIR/predicted.json alone (no tracing, no planning): per case
    the tensor plan's and the block plan's step against the uncapped one, which ``vdnnsim
    plan``'s auto keeps (the faster that fits), and the counts the issue asks for."""
    pred = json.loads((out / "predicted.json").read_text())
    print("| model | budget | tensors | blocks | checkpoint all | auto |")
    print("|---|---|---|---|---|---|")
    fit = auto_fit = within = faster = 0
    for key, p in pred.items():
        base = p["eager"]["iteration_time_ns"]
        cell = {k: f"{p[k]['iteration_time_ns'] / base:.2f}x" if p[k]["fits"] else "-"
                for k in ("tensors", "blocks", "ckpt")}
        fits = [k for k in ("tensors", "blocks") if p[k]["fits"]]
        best = min(fits, key=lambda k: p[k]["iteration_time_ns"]) if fits else None
        fit += p["tensors"]["fits"]
        auto_fit += best is not None
        within += best is not None and p[best]["iteration_time_ns"] <= 1.3 * base
        faster += p["tensors"]["fits"] and (not p["blocks"]["fits"] or p["tensors"][
            "iteration_time_ns"] <= p["blocks"]["iteration_time_ns"])
        print(f"| {p['model']} | {p['share']:.0%} ({p['budget_bytes'] / GiB:.2f} GiB) | "
              f"{cell['tensors']} | {cell['blocks']} | {cell['ckpt']} | "
              f"{best or 'none fits'} |")
    n = len(pred)
    print(f"{n} cases: a tensor plan fits in {fit}, a plan (tensors or blocks) in {auto_fit}, "
          f"at most 1.3x uncapped in {within}; the tensor plan as fast as the block plan or "
          f"faster in {faster}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--allocator", default="expandable_segments:True",
                    help="the caching allocator's settings every plan is made and run under")
    ap.add_argument("--margin", type=float, default=PLAN_MARGIN,
                    help="the share of each budget the tensor and block plans leave free "
                    "(NOTE [plan margin]); PyTorch's checkpointing is judged at the budget")
    ap.add_argument("--summary", action="store_true",
                    help="only the judgement of the plans already made (DIR/predicted.json)")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    if a.summary:
        summary(a.out or ROOT / "traces" / f"{a.gpu}_tensor_plans")
        return
    spec = yaml.safe_load(HELDOUT.read_text())
    gpu = resolve_gpu(a.gpu)
    out = a.out or ROOT / "traces" / f"{a.gpu}_tensor_plans"
    (out / "plans").mkdir(parents=True, exist_ok=True)
    predicted = {}
    print("| model | budget | eager GiB, ms | tensor plan | block plan | checkpoint all |")
    print("|---|---|---|---|---|---|")
    for m in spec["models"]:
        if a.names and m["name"] not in a.names:
            continue
        trace = trace_of(m, gpu)
        eager = run_trace(trace, gpu, "eager", record=False)
        base = eager.iteration_time_ns
        for share in spec["budgets"]:
            budget = int(share * eager.peak_memory_bytes)
            key = f"{m['name']}-{round(share * 100)}"
            room = budget - int(budget * a.margin)
            t = plan_tensors(trace, gpu, room, None, a.allocator)
            b = plan_blocks(trace, gpu, room, None, a.allocator)
            lean = without_workspaces(trace)  # where nothing fits with the workspaces, as
            t_trace = trace  # vdnnsim plan does (NOTE [conv workspaces])
            if not t.fits and lean is not trace:
                t, t_trace = plan_tensors(lean, gpu, room, None, a.allocator), lean
            if not b.fits and lean is not trace:
                b = plan_blocks(lean, gpu, room, None, a.allocator)
            c = checkpoint_all(trace, gpu, budget, a.allocator)
            said = margin_said((budget, room))
            for kind in ("tensors", "blocks", "ckpt"):  # none left of an earlier plan
                (out / "plans" / f"{key}-{kind}.yaml").unlink(missing_ok=True)
            if t.fits:
                pred = {"peak_memory_bytes": t.peak_memory_bytes,
                        "iteration_time_ns": t.iteration_time_ns}
                write_plan_file(out / "plans" / f"{key}-tensors.yaml", with_run(
                    tensor_plan_to_dict(t_trace, gpu, budget, t, pred, a.allocator), trace)
                    | said)
            if b.fits:
                write_plan_file(out / "plans" / f"{key}-blocks.yaml", with_run(
                    block_plan_to_dict(trace, gpu, budget, b, a.allocator), trace) | said)
            if c.fits:
                write_plan_file(out / "plans" / f"{key}-ckpt.yaml",
                                with_run(block_plan_to_dict(trace, gpu, budget, c, a.allocator), trace))

            def cell(p, extra=""):
                return (f"{p.iteration_time_ns / base:.2f}x, {p.peak_memory_bytes / GiB:.2f} "
                        f"GiB{extra}" if p.fits else "does not fit")
            tx = (f" ({len(t.offloaded)} off, {len(t.modules)} ckpt"
                  + (", opt CPU" if t.optimizer_offload else "")
                  + (", no workspaces" if t_trace is not trace else "") + ")")
            bx = (f" ({b.blocks} off, {b.recompute} ckpt, {b.params} param"
                  + (", opt CPU" if b.optimizer_offload else "") + ")")
            print(f"| {m['name']} | {share:.0%}, {budget / GiB:.2f} GiB | "
                  f"{eager.peak_memory_bytes / GiB:.2f}, {base / 1e6:.1f} | {cell(t, tx)} | "
                  f"{cell(b, bx)} | {cell(c)} |", flush=True)
            predicted[key] = {
                "model": m["name"], "share": share, "budget_bytes": budget,
                "margin_bytes": budget - room,
                "allocator": a.allocator,
                "eager": {"peak_memory_bytes": eager.peak_memory_bytes, "iteration_time_ns": base},
                **{k: {"fits": p.fits, "peak_memory_bytes": p.peak_memory_bytes,
                       "iteration_time_ns": p.iteration_time_ns}
                   for k, p in (("tensors", t), ("blocks", b), ("ckpt", c))}}
    if a.names and (out / "predicted.json").exists():  # the other models' kept, in order
        kept = json.loads((out / "predicted.json").read_text())
        predicted = {k: predicted.get(k, v) for k, v in kept.items()} | predicted
    (out / "predicted.json").write_text(json.dumps(predicted, indent=1) + "\n")


if __name__ == "__main__":
    main()
