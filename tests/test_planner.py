"""The planner (NOTE [planner]): engine-checked plans, the plan file, `vdnnsim plan` (run in
this process, conftest.run_cli: what it prints is ``main``'s, and a fresh interpreter
costs seconds of imports)."""

from __future__ import annotations

import pytest
import yaml

from vdnnsim import run_trace
from vdnnsim.api import build_trace, resolve_gpu
from vdnnsim.engine.plan import liveness
from vdnnsim.engine import replay
from vdnnsim.errors import ConfigError
from vdnnsim.planners.greedy import plan_to_dict, search_plan

from .conftest import k40_vgg16_plan, run_cli

GiB = 2**30


@pytest.fixture(scope="module")
def vgg256():
    trace, gpu, _, _ = k40_vgg16_plan()
    return trace, gpu


def test_vgg16_256_in_12_gib_on_the_k40_at_least_as_fast_as_vdnn_dyn(vgg256):
    """Issue 13: the planner's VGG-16 (256) in 12 GB is at least as fast as vDNN_dyn's."""
    trace, gpu = vgg256
    plan, search = k40_vgg16_plan()[2:]  # search_plan(trace, gpu, 12 * GiB), made once
    assert plan is not None and search.simulations > 1
    t = plan.trace if plan.trace is not None else trace  # a batch split reshapes it
    sim = replay(t, gpu, plan, 12 * GiB, liveness(t), record_ops=False)
    dyn = run_trace(trace, gpu, "vdnn_dyn", record=False)
    assert sim.oom is None and sim.peak_live_bytes <= 12 * GiB
    assert sim.end_ns <= dyn.iteration_time_ns
    assert sim.end_ns < 0.95 * dyn.iteration_time_ns  # 1.06x against 1.29x of the oracle


def test_a_plan_file_replays_to_the_same_prediction(vgg256, tmp_path):
    trace, gpu = vgg256
    plan = k40_vgg16_plan()[2]  # search_plan(trace, gpu, 12 * GiB)
    t = plan.trace if plan.trace is not None else trace
    sim = replay(t, gpu, plan, 12 * GiB, liveness(t), record_ops=False)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan_to_dict(trace, gpu, 12 * GiB, plan, {})))
    r = run_trace(trace, gpu, "planned", {"file": str(path)}, record=False)
    assert r.fits and r.iteration_time_ns == sim.end_ns
    assert r.peak_memory_bytes == sim.peak_live_bytes


def test_nothing_fits_is_no_plan():
    gpu = resolve_gpu("k40")
    trace = build_trace("vgg16", 256, gpu)
    plan, _ = search_plan(trace, gpu, 2 * GiB)
    assert plan is None


def test_bad_plan_files_are_clear_errors(vgg256, tmp_path):
    trace, gpu = vgg256
    plan = k40_vgg16_plan()[2]  # search_plan(trace, gpu, 12 * GiB)
    good = plan_to_dict(trace, gpu, 12 * GiB, plan, {})
    cases = [
        ({"format": "x"}, "not a vdnnsim plan file"),
        ({**good, "layers": good["layers"][:-1]}, "its layers are not the trace's"),
        ({**good, "layers": [{**good["layers"][0], "algo": "magic"}, *good["layers"][1:]]},
         "algorithm 'magic' is not one of the trace's"),
        ({**good, "layers": [{**good["layers"][0], "offload": ["nothing"]},
                             *good["layers"][1:]]}, "offload names a buffer"),
        ({**good, "sync": "yes"}, "bad.yaml: sync: Input should be a valid boolean"),
        ({**good, "layers": [{**good["layers"][0], "prefetch": "nowhere"},
                             *good["layers"][1:]]}, "prefetch names no layer of the plan"),
        ({**good, "recompute": [[good["layers"][3]["id"], good["layers"][1]["id"]]]},
         r"recompute \[.*\] is not a run of the plan's layers"),
        ({**good, "note": "mine"}, "bad.yaml: note: unknown key"),
        ({"format": "vdnnsim-block-plan", "network": "vgg16", "batch_size": 256, "gpu": "k40",
          "budget_bytes": 12 * GiB, "blocks": 1, "total_blocks": 2},
         "a block plan .*policy vdnn_blocks"),
    ]
    for data, frag in cases:
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(ConfigError, match=frag):
            run_trace(trace, gpu, "planned", {"file": str(path)})
    with pytest.raises(ConfigError, match="option file"):
        run_trace(trace, gpu, "planned", {})


def test_vdnnsim_plan_prints_and_writes_a_plan(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("network: vgg16\nbatch_size: 256\ngpu: k40\n")
    out = tmp_path / "plan.yaml"
    r = run_cli(["plan", cfg, "--budget", "12 GiB", "-o", out])
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()
            if line.split() and line.split()[0] in ("planned", "vdnn_dyn")}
    assert rows["planned"][1] == "yes" and float(rows["planned"][3]) < float(rows["vdnn_dyn"][3])
    assert yaml.safe_load(out.read_text())["format"] == "vdnnsim-plan"
    bad = run_cli(["plan", cfg, "--budget", "lots"])
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_resnet50_256_in_12_gib_on_the_h200_recomputes_and_replays(tmp_path):
    """The profiled ResNet-50 (256) under a 12 GiB cap: vDNN_all fits at 7x the uncapped
    step (measured 872 ms against 116 ms, issue 13); the planner's best is checkpointing
    (docs/beyond-vdnn.md), whose segments survive the plan file."""
    from pathlib import Path

    from vdnnsim.trace import load_trace
    root = Path(__file__).resolve().parents[1]
    trace = load_trace(root / "traces/h200_torchvision/resnet50_b256.yaml")
    gpu = resolve_gpu("h200")
    plan, search = search_plan(trace, gpu, 12 * GiB)
    assert plan is not None and plan.recompute
    eager = run_trace(trace, gpu, "eager", record=False)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan_to_dict(trace, gpu, 12 * GiB, plan, {})))
    r = run_trace(trace, gpu, "planned", {"file": str(path)}, record=False)
    assert r.fits and r.peak_memory_bytes <= 12 * GiB
    assert r.iteration_time_ns < 2 * eager.iteration_time_ns  # 1.32x today
    vdnn_all = run_trace(trace, gpu, "vdnn_all_p", memory_bytes=12 * GiB, record=False)
    assert r.iteration_time_ns < vdnn_all.iteration_time_ns / 3


VGG_MILP_MISS = ("the MILP's VGG-16 plan made without the autotune headroom ran 25% slower "
                 "than predicted under the 12 GiB cap (258.6 ms, 206.7 predicted; memory "
                 "exact; 208.3 ms under a 20 GiB cap): NOTE [autotune headroom]")


@pytest.mark.parametrize("model,limit,plan,record", [
    ("vgg16", 1.5, "plan", "planned"), ("resnet50", 2.0, "plan", "planned"),
    ("resnet50", 2.0, "milp", "milp"), ("resnet50", 2.0, "milp", "milp_repeat"),
    ("resnet50", 2.0, "milp-noheadroom", "milp_noheadroom"),
    pytest.param("vgg16", 1.5, "milp-noheadroom", "milp_noheadroom",
                 marks=pytest.mark.xfail(strict=True, reason=VGG_MILP_MISS))])
def test_the_planned_h200_runs_are_predicted_and_meet_issue_13s_targets(model, limit, plan,
                                                                         record):
    """traces/h200_planner_12gib: each plan measured under a 12 GiB cap on the H200 (committed),
    the greedy search's (``plan``) and the MILP's, with and without
    NOTE [autotune headroom]; the simulator replays the same plan file on the profiled trace."""
    import json
    from pathlib import Path

    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.trace import load_trace
    root = Path(__file__).resolve().parent.parent / "traces"
    base = json.loads((root / f"h200_planner_12gib/{model}_baseline.json").read_text())
    got = json.loads((root / f"h200_planner_12gib/{model}_{record}.json").read_text())
    assert got["fits"] and got["memory_cap_bytes"] == 12 * 2**30
    assert got["iteration_ms"] <= limit * base["iteration_ms"]
    r = run_trace(load_trace(root / f"h200_torchvision/{model}_b256.yaml"), resolve_gpu("h200"),
                  "planned", {"file": str(root / f"h200_planner_12gib/{model}_b256_12GiB.{plan}.yaml")},
                  memory_bytes=12 * 2**30, record=False)
    assert r.fits
    assert abs(r.peak_memory_bytes / got["peak_allocated_bytes"] - 1) <= 0.03
    assert abs(r.iteration_time_ns / 1e6 / got["iteration_ms"] - 1) <= 0.10


def test_the_autotune_headroom_tells_the_slow_vgg_plan_from_the_others():
    """NOTE [autotune headroom] against the measured plans: with every workspace at twice
    its size, the VGG-16 plan that ran 25% slow under the cap no longer fits; the plans that
    ran as predicted do. (ResNet-50's MILP plan without headroom fails the check too, and ran
    within 6%: the rule is a sufficient condition, not a necessary one.) The MILP's VGG-16
    plan with the headroom is the greedy search's plan, measured."""
    from pathlib import Path

    import yaml

    from vdnnsim.engine import replay
    from vdnnsim.planners.greedy import plan_from_file, scale_workspaces
    from vdnnsim.trace import load_trace
    root = Path(__file__).resolve().parent.parent / "traces"
    gpu = resolve_gpu("h200")

    def fits_with_headroom(model, plan):
        t = scale_workspaces(load_trace(root / f"h200_torchvision/{model}_b256.yaml"), 2)
        p = plan_from_file(str(root / f"h200_planner_12gib/{model}_b256_12GiB.{plan}.yaml"), t, gpu)
        return replay(p.trace or t, gpu, p, 12 * GiB, record_ops=False).oom \
            is None

    assert not fits_with_headroom("vgg16", "milp-noheadroom")
    assert fits_with_headroom("vgg16", "plan") and fits_with_headroom("resnet50", "milp")
    assert fits_with_headroom("resnet50", "plan")
    files = [yaml.safe_load((root / f"h200_planner_12gib/vgg16_b256_12GiB.{k}.yaml").read_text())
             for k in ("plan", "milp")]
    assert [{k: f[k] for k in ("split", "recompute", "layers")} for f in files] == \
        [{k: files[0][k] for k in ("split", "recompute", "layers")}] * 2


def test_a_layer_plan_of_an_op_by_op_trace_is_marked_and_refused_by_measure(tmp_path, capsys):
    """NOTE [plan layer names]: a plan naming the op probe's ATen ops says so, and
    vdnnsim measure --plan refuses it in one line before building the model (it ran the
    model and failed with 'no such run of layers'); an fx-named plan is not marked."""
    pytest.importorskip("torch")
    import dataclasses

    import yaml

    from vdnnsim.cli import main
    from vdnnsim.engine.plan import Plan
    from vdnnsim.planners.greedy import OP_LAYERS, layer_names, plan_to_dict

    from .conftest import chain_trace, hand_gpu
    fx = chain_trace([{"id": "c1", "fwd": 10, "bwd": 20}, {"id": "c2", "fwd": 10, "bwd": 20}],
                     framework="pytorch")
    ops = dataclasses.replace(fx, layers=tuple(
        dataclasses.replace(x, attrs={**x.attrs, "module": f"features.{k}"})
        for k, x in enumerate(fx.layers)))
    assert layer_names(fx) == "fx" and layer_names(ops) == OP_LAYERS
    gpu = hand_gpu()
    n = len(ops.layers)
    plan = Plan("planned", "layer_wise", (0,) * n, ((),) * n, (-1,) * n)
    assert plan_to_dict(fx, gpu, 2**30, plan, {})["layer_names"] == "fx"
    d = plan_to_dict(ops, gpu, 2**30, plan, {"peak_memory_bytes": 0, "iteration_time_ns": 0})
    assert d["layer_names"] == OP_LAYERS
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(d))
    capsys.readouterr()
    rc = main(["measure", "--model", "torch.nn:Linear", "--model-arg", "in_features=2",
               "--model-arg", "out_features=2", "--input", "image:1,1,2:2", "-b", "1",
               "--plan", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot find in its fx graph" in err and len(err.splitlines()) == 1


def test_a_plan_near_its_budget_is_cautioned():
    """NOTE [fragmentation caution]: a PyTorch trace's plan that leaves less than 6.1% of
    its budget unallocated gets the line (plans the replay fitted have run out of memory
    with up to that left on the H200); with more left, or a Torch7 trace, none."""
    from vdnnsim.planners.greedy import CAUTION_SHARE, fragmentation_caution

    from .conftest import chain_trace
    torch_trace = chain_trace([{"id": "c1", "size": 1 << 20}], framework="pytorch")
    torch7 = chain_trace([{"id": "c1", "size": 1 << 20}])
    budget = 100 << 30
    near = budget - int(0.05 * budget)
    line = fragmentation_caution(torch_trace, budget, near)
    assert CAUTION_SHARE == 0.061 and line.startswith("caution: the plan leaves 5.00 GiB (5.0%)")
    assert fragmentation_caution(torch_trace, budget, budget - int(0.07 * budget)) is None
    assert fragmentation_caution(torch7, budget, near) is None


def _spy_replays(monkeypatch, modules) -> list:
    """The allocator settings of every replay the modules make, in order."""
    seen: list = []

    def spy(real):
        def replay(*a, **k):
            seen.append(k.get("allocator"))
            return real(*a, **k)
        return replay
    for mod in modules:
        monkeypatch.setattr(mod, "replay", spy(mod.replay))
    return seen


def test_plans_are_checked_and_written_under_the_allocator_given(tmp_path, monkeypatch):
    """NOTE [planned allocator]: every replay a planner makes is under the settings given
    (the block planner's, the greedy search's and the MILP's), the plan file says them,
    a reader takes them back, and the defaults go unsaid; the caution of
    NOTE [fragmentation caution] is the default allocator's."""
    from vdnnsim.engine import caching
    from vdnnsim.planners.planfile import plan_from_data
    from vdnnsim.planners.blocks import plan_blocks
    from vdnnsim.planners.greedy import (block_plan_to_dict, fragmentation_caution,
                                         plan_to_dict, search_plan)
    from vdnnsim.planners import blocks as blocks_mod
    from vdnnsim.planners import greedy as planner_mod
    from vdnnsim.planners import milp as milp_mod

    from .test_param_offload import CPU, U, blocks

    seen = _spy_replays(monkeypatch, (blocks_mod, planner_mod, milp_mod))
    exp = {"expandable_segments": True}
    t = blocks(3, 16 * U)
    budget = 80 * U
    # the plans differ: the default allocator fits the step with nothing moved; a 20 MiB
    # expandable segment's granularity needs every block's parameters on the host
    assert plan_blocks(t, CPU, budget, True).params == 0 and all(s.default for s in seen)
    seen.clear()
    p = plan_blocks(t, CPU, budget, True, exp)
    assert p.fits and p.params == 3 and seen and all(s.expandable_segments for s in seen)
    d = block_plan_to_dict(t, CPU, budget, p, exp)
    assert d["allocator"] == exp and plan_from_data(d).allocator.expandable_segments
    assert "allocator" not in block_plan_to_dict(t, CPU, budget, p)
    seen.clear()  # the layer planners (the optimizer on the GPU): 100U fits only by default
    assert search_plan(t, CPU, 100 * U)[0] is not None
    assert search_plan(t, CPU, 100 * U, allocator=exp)[0] is None
    seen.clear()
    plan, search = search_plan(t, CPU, 120 * U, method="auto", allocator=exp)
    assert plan is not None and search.simulations and seen
    assert all(s is not None and s.expandable_segments for s in seen)
    d = plan_to_dict(t, CPU, 120 * U, plan, {}, exp)
    assert plan_from_data(d).allocator.conf() == exp
    near = budget - 1
    assert fragmentation_caution(t, budget, near) is not None
    assert fragmentation_caution(t, budget, near, exp) is None
    assert fragmentation_caution(t, budget, near, caching.AllocatorSettings()) is not None


def test_policies_that_replay_to_decide_replay_under_the_run_s_allocator(monkeypatch):
    """NOTE [planning allocator]: vdnn_dyn's profiling passes and vdnn_blocks' budget
    search replay under the settings the run replays under. Under expandable segments at a
    100U cap this step does not fit even with everything offloaded; vdnn_dyn, planning
    under PyTorch's defaults, had chosen "offload none" for a run that then ran out of
    memory, and now says what the run shows."""
    from vdnnsim.planners import blocks as blocks_mod
    from vdnnsim.policies import blocks as policy_mod, dyn as dyn_mod
    from vdnnsim.policies.context import PolicyContext

    from .test_param_offload import CPU, U, blocks

    seen = _spy_replays(monkeypatch, (blocks_mod, dyn_mod))
    exp = {"expandable_segments": True}
    t = blocks(3, 16 * U)
    r = run_trace(t, CPU, "vdnn_dyn", {}, 100 * U, allocator=exp)
    assert seen and all(s is not None and s.expandable_segments for s in seen)
    assert not r.fits and r.notes[0].startswith("step 1: even vDNN_all")
    seen.clear()
    d = run_trace(t, CPU, "vdnn_dyn", {}, 100 * U)  # the defaults: it fits, offloading none
    assert d.fits and d.notes[0] == "step 2: fastest algorithms, offload none"
    assert seen and all(s is None or s.default for s in seen)
    seen.clear()
    run_trace(t, CPU, "vdnn_blocks", {"budget": 100 * U}, allocator=exp)
    assert seen and all(s is not None and s.expandable_segments for s in seen)
    seen.clear()  # a context without settings: the policy plans under the defaults
    policy_mod.vdnn_blocks(t, CPU, None, {"budget": 100 * U},
                           PolicyContext(plan_blocks=blocks_mod.plan_blocks))
    assert seen and all(s is None or s.default for s in seen)


def test_a_layer_plan_replayed_under_other_allocator_settings_says_so(tmp_path):
    """NOTE [planned allocator]: policy ``planned`` replays a plan file under the run's
    settings; where the plan was made under others, the result's notes say so."""
    from vdnnsim.planners.greedy import plan_to_dict, search_plan
    from vdnnsim.planners.planfile import write_plan_file

    from .test_param_offload import CPU, U, blocks
    t = blocks(3, 16 * U)
    exp = {"expandable_segments": True}
    plan, _ = search_plan(t, CPU, 120 * U, allocator=exp)
    write_plan_file(tmp_path / "p.yaml", plan_to_dict(t, CPU, 120 * U, plan, {}, exp))
    opts = {"file": str(tmp_path / "p.yaml")}
    same = run_trace(t, CPU, "planned", opts, 120 * U, allocator=exp)
    other = run_trace(t, CPU, "planned", opts, 120 * U)
    assert not any("allocator" in n for n in same.notes)
    assert any("made under the allocator settings expandable_segments:True; this run "
               "replays it under the defaults" in n for n in other.notes)


def test_the_layer_planners_plan_with_the_optimizer_on_the_cpu(tmp_path):
    """NOTE [optimizer offload] with the layer planners (``--optimizer-offload on``): every
    candidate of the greedy search and the MILP is replayed with AdamW's state and step on
    the CPU, so a budget that the step's state does not fit with it on the GPU gets a plan;
    the plan says so, its file too, and policy planned replays it so."""
    from vdnnsim.trace.optimizer import with_optimizer
    from vdnnsim.planners.planfile import read_plan_file, write_plan_file
    from vdnnsim.planners.greedy import plan_to_dict, search_plan
    from vdnnsim.trace import save_trace

    from .conftest import chain_trace
    from .test_param_offload import CPU, U, blocks
    t = with_optimizer(blocks(3, 16 * U), "adamw")  # weights 48U, AdamW's moments 96U
    # the plain step reserves 248U with the optimizer on the GPU, 104U with it on the CPU;
    # the MILP's program leaves the moments out and counts each weight gradient only to the
    # next layer's backward pass
    budget = 100 * U
    for method in ("milp", "greedy", "auto"):
        assert search_plan(t, CPU, budget, method=method)[0] is None
        plan, _ = search_plan(t, CPU, budget, method=method, optimizer_offload=True)
        assert plan is not None and plan.optimizer_offload
    from vdnnsim.planners.milp import Account
    on, off = Account(t, optimizer_offload=True), Account(t)
    assert sum(b for b, _, _ in off.const) - sum(b for b, _, _ in on.const) == 96 * U
    d = plan_to_dict(t, CPU, budget, plan, {})
    assert d["optimizer_offload"] is True
    write_plan_file(tmp_path / "p.yaml", d)
    assert read_plan_file(tmp_path / "p.yaml").optimizer_offload
    r = run_trace(t, CPU, "planned", {"file": str(tmp_path / "p.yaml")}, budget)
    assert r.fits and r.optimizer_host_bytes > 0
    torch7 = chain_trace([{"id": "c1", "size": U}])
    with pytest.raises(ConfigError, match="optimizer offload runs PyTorch traces"):
        search_plan(torch7, CPU, budget, optimizer_offload=True)
    # the command: on for a layer planner, said in its first line and in the file
    save_trace(blocks(3, 16 * U), tmp_path / "t.yaml")
    (tmp_path / "c.yaml").write_text("network: t.yaml\ngpu: h200\noptimizer: adamw\n")
    out = run_cli(["plan", "c.yaml", "--budget", "100MiB", "--method", "greedy",
                   "--optimizer-offload", "on", "-o", "q.yaml"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "budget 0.10 GiB, optimizer on the CPU" in out.stdout
    assert read_plan_file(tmp_path / "q.yaml").optimizer_offload


def test_a_layer_plan_with_the_optimizer_on_the_cpu_is_measured_so():
    """NOTE [optimizer offload]: ``measure`` of a layer plan whose file says
    optimizer_offload runs the optimizer on the CPU, as for a block plan (here told by the
    refusal of fp16 autocast, which it checks before it touches the GPU)."""
    pytest.importorskip("torch")
    from vdnnsim.gpu.measure.harness import measure

    plan = {"format": "vdnnsim-plan", "network": "resnet18", "batch_size": 2, "gpu": "h200",
            "budget_bytes": 1 << 30, "optimizer_offload": True,
            "layers": [{"id": "conv1", "algo": "a"}]}
    with pytest.raises(ValueError, match="optimizer offload runs without a GradScaler"):
        measure("torchvision:resnet18", 2, "planned", dtype="autocast-fp16", plan=plan)
