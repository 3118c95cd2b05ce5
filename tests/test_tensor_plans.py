"""NOTE [tensor plans]: a plan of an op-by-op trace at the granularity of saved tensors and
module calls, every answer the engine's; NOTE [tensor prefetch] by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from .conftest import chain_trace, hand_gpu, run_cli
from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.engine import liveness, replay
from vdnnsim.planners.planfile import LayerPlanFile, read_plan_file
from vdnnsim.planners.tensors import (ModuleCall, module_calls, plan_tensors, prefetch_slots,
                                      recompute_order, taken, tensor_plan_to_dict)
from vdnnsim.trace import trace_from_dict
from vdnnsim.trace.optimizer import with_optimizer

MB = 10**6


class _Stage(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
                                  nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(x + self.body(x))


def convnet() -> nn.Module:
    """Six residual stages of 32 channels at full resolution: activations dominate."""
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
                         nn.Sequential(*[_Stage(32) for _ in range(6)]),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


@pytest.fixture(scope="module")
def traced():
    from vdnnsim.gpu.probe.aten import memory_trace
    gpu = resolve_gpu("h200")
    d = memory_trace("tests.test_tensor_plans:convnet", 64, gpu, "fp32", None, {},
                     "image:3,96,96:10")
    trace = with_optimizer(trace_from_dict(d, "convnet"), "adamw")
    return trace, gpu, run_trace(trace, gpu, "eager", record=False)


def _calls(trace):
    return {c.path: c for c in module_calls(trace)}


def test_module_calls_are_the_calls_and_drop_what_their_ops_alone_keep(traced):
    trace, _, _ = traced
    calls = _calls(trace)
    # the stages and their bodies are candidates; the model itself and the container of
    # stages (one call running every stage: over MAX_SHARE of the ops) are not
    assert "2.0" in calls and "2.0.body" in calls and "" not in calls and "2" not in calls
    s0 = calls["2.0"]
    assert len(s0.runs) == 1 and s0.drops >= calls["2.0.body"].drops > 0
    ops = [i for i, x in enumerate(trace.layers) if x.attrs["module"].startswith("2.0.")]
    assert s0.runs[0] == (min(ops), max(ops))
    lv = liveness(trace)
    dropped = sum(lv.size[b] for b, p in lv.producer.items() if min(ops) <= p <= max(ops)
                  and all(min(ops) <= k <= max(ops) for k in
                          [i for i, x in enumerate(trace.layers) if b in
                           {lv.root[t] for t in x.saved}]) and lv.kept(b))
    assert s0.drops == dropped


def test_a_module_replaces_those_inside_it_and_nothing_inside_one_is_taken():
    a = ModuleCall("a", ((0, 9),), 100, 10)
    inner = ModuleCall("a.b", ((2, 3),), 10, 1)
    other = ModuleCall("c", ((12, 15),), 10, 1)
    inside_late = ModuleCall("a.d", ((5, 6),), 10, 1)
    order = recompute_order([inner, other, a, inside_late])
    assert [c.path for c in order] == ["a.b", "c", "a"]
    assert [c.path for c in taken(order, 2)] == ["a.b", "c"]
    assert [c.path for c in taken(order, 3)] == ["c", "a"]


def test_prefetches_start_as_late_as_the_link_allows():
    # four layers of 10 ms backward each; a and b offload 1 MB (1 ms on a 1 GB/s link)
    gpu = hand_gpu(bw=1e9)
    trace = chain_trace([dict(id=k, size=MB, fwd=1_000_000, bwd=10_000_000, saves="x")
                         for k in ("a", "b", "c", "d")], framework="pytorch")
    lv = liveness(trace)
    off = ((), ("a",), ("b",), ())  # b reads a (copied by b, its last reader); c reads b
    slots = prefetch_slots(trace, off, gpu)
    # a is read by b's backward (starting at 20 ms): its copy (1 ms) starts at 19 ms, in
    # c's backward (10..20 ms); b is read by c's backward (10 ms): in d's (0..10 ms)
    assert slots == (-1, -1, 1, 2)
    assert lv.size["a"] == MB


def test_plans_fit_in_the_engine_and_beat_nothing_worse_than_the_block_plan(traced):
    trace, gpu, eager = traced
    for share in (0.5, 0.7):
        budget = int(share * eager.peak_memory_bytes)
        found = plan_tensors(trace, gpu, budget)
        assert found.fits, found.steps
        again = replay(trace, gpu, found.plan, budget, record_ops=False)
        assert again.oom is None and again.peak_live_bytes == found.peak_memory_bytes
        assert found.peak_memory_bytes <= budget
        assert found.iteration_time_ns >= eager.iteration_time_ns * 0.99
        assert found.offloaded or found.modules


def test_the_plan_file_keys_every_offload_and_reads_back(traced, tmp_path):
    trace, gpu, eager = traced
    budget = int(0.5 * eager.peak_memory_bytes)
    found = plan_tensors(trace, gpu, budget)
    d = tensor_plan_to_dict(trace, gpu, budget, found, {"peak_memory_bytes": 1})
    plan = LayerPlanFile.model_validate(d)
    assert plan.version == 3 and plan.runnable and plan.layer_names == "ops"
    assert {t.id for t in plan.tensors} == set(found.offloaded)
    assert plan.recompute_modules == list(found.modules)
    for t in plan.tensors:
        assert trace.tensors[t.id].size_bytes == t.bytes and t.dtype == "float32"
    bad = dict(d, tensors=d["tensors"][1:]) if d["tensors"] else None
    if bad is not None:
        with pytest.raises(ValueError, match="key every offloaded buffer"):
            LayerPlanFile.model_validate(bad)


def _run_config(traced, tmp_path):
    """A run config of the traced convnet, and a budget of 60% of its peak."""
    from vdnnsim.trace import save_trace
    trace, _, eager = traced
    path = tmp_path / "convnet.yaml"
    save_trace(trace, path)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"network: {path}\nbatch_size: 64\ngpu: h200\npolicies: [eager]\n")
    return cfg, int(0.6 * eager.peak_memory_bytes)


def test_vdnnsim_plan_method_tensors_writes_a_version_3_plan(traced, tmp_path):
    cfg, budget = _run_config(traced, tmp_path)
    r = run_cli(["plan", cfg, "--budget", str(budget), "--method", "tensors",
                 "-o", tmp_path / "p.yaml"])
    assert r.returncode == 0, r.stderr
    plan = read_plan_file(tmp_path / "p.yaml")
    assert plan.version == 3 and plan.model == "tests.test_tensor_plans:convnet"
    assert plan.input == "image:3,96,96:10" and plan.dtype == "fp32" and plan.batch_size == 64
    assert "planned" in r.stdout and "cannot run" not in r.stderr
    # its convolutions' workspaces are predicted (NOTE [conv workspaces]): none is unknown
    assert "have no workspace" not in r.stderr and "planned without them" not in r.stdout
    if not torch.cuda.is_available():  # the plan says all a measurement needs
        r = run_cli(["measure", "--plan", tmp_path / "p.yaml"])
        assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr, r.stderr
    r = run_cli(["measure", "--plan", tmp_path / "p.yaml", "--input", "image:3,64,64:10"])
    assert r.returncode == 2 and "with input image:3,96,96:10, not image:3,64,64:10" in \
        r.stderr and r.stderr.count("\n") == 1
    r = run_cli(["plan", cfg, "--budget", str(budget), "-o", tmp_path / "auto.yaml"])
    assert r.returncode == 0, r.stderr  # auto: the tensor plan or the block plan


def test_a_tensor_plan_leaves_its_margin_free_and_its_file_keeps_the_cap(traced, tmp_path):
    """NOTE [plan margin]: planned under the budget less PLAN_MARGIN of it, the file's
    budget is the run's cap and says the margin; --margin 0 plans at the budget, and a
    margin that is not a percentage is refused in one line."""
    from vdnnsim.planners.tensors import PLAN_MARGIN
    cfg, budget = _run_config(traced, tmp_path)
    room = budget - int(budget * PLAN_MARGIN)
    r = run_cli(["plan", cfg, "--budget", str(budget), "--method", "tensors",
                 "-o", tmp_path / "m.yaml"])
    assert r.returncode == 0, r.stderr
    plan = read_plan_file(tmp_path / "m.yaml")
    assert plan.budget_bytes == budget and plan.margin_bytes == budget - room
    assert plan.predicted.peak_memory_bytes <= room
    assert f"{(budget - room) / 2**30:.2f} GiB of it left free" in r.stdout
    r = run_cli(["plan", cfg, "--budget", str(budget), "--method", "tensors", "--margin",
                 "0%", "-o", tmp_path / "z.yaml"])
    assert r.returncode == 0, r.stderr
    assert "margin_bytes" not in (tmp_path / "z.yaml").read_text()
    at_cap = read_plan_file(tmp_path / "z.yaml")
    assert at_cap.margin_bytes == 0 and at_cap.budget_bytes == budget
    r = run_cli(["plan", cfg, "--budget", str(budget), "--method", "tensors", "--margin",
                 "25", "-o", tmp_path / "q.yaml"])  # a margin the plan at the cap breaks
    quarter = read_plan_file(tmp_path / "q.yaml")
    assert r.returncode == 0 and quarter.margin_bytes == int(budget * 0.25)
    assert quarter.predicted.peak_memory_bytes <= budget - quarter.margin_bytes < \
        at_cap.predicted.peak_memory_bytes
    for bad in ("four", "100", "-1%", "nan"):
        r = run_cli(["plan", cfg, "--budget", str(budget), "--margin", bad])
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--margin" in r.stderr


def test_only_timed_op_traces_get_tensor_plans(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("network: vgg16\nbatch_size: 8\ngpu: k40\npolicies: [baseline_p]\n")
    r = run_cli(["plan", cfg, "--budget", "1GiB", "--method", "tensors"])
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "op-by-op" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fcn_resnet50-50", "bart-base-50"])
def test_committed_held_out_plans_match_their_models_as_the_runtime_finds_them(name):
    """experiments/tensor_plans/check_keys.py on two committed plans that offload and
    checkpoint (a factory CNN; an hf encoder-decoder): built on the meta device as the plan
    names it, every key and module is found (the script says ok for all 22)."""
    from pathlib import Path

    from vdnnsim.gpu.probe.aten import probe_workload
    from vdnnsim.gpu.runtime.tensors import check_keys

    root = Path(__file__).resolve().parents[1]
    plan = read_plan_file(root / "traces/h200_tensor_plans/plans" / f"{name}-tensors.yaml")
    assert plan.tensors and plan.recompute_modules
    work, probe = probe_workload(plan.model, plan.batch_size, plan.dtype, plan.seq_len,
                                 plan.model_args or {}, plan.input, plan.recompute_modules)
    for m in plan.recompute_modules:
        work.model.get_submodule(m)
    keys = check_keys(plan, probe, name)
    assert all(keys[t.id]["bytes"] == t.bytes for t in plan.tensors)


# -- the exact program (NOTE [tensor milp]) ---------------------------------------------------

class _Twice(nn.Module):
    """One stage called twice, an op of the caller's between the calls."""

    def __init__(self, c: int):
        super().__init__()
        self.stage = _Stage(c)

    def forward(self, x):
        return self.stage(self.stage(x) * 0.5)


def twice() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), _Twice(32), _Twice(32),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def test_the_structures_checkpoint_calls_that_do_not_overlap(traced):
    from vdnnsim.planners.tensors import milp_structures
    trace, _, _ = traced
    found = milp_structures(trace)
    assert [name for name, _ in found][:2] == ["none checkpointed", "the blocks"]
    assert len(found) > 3  # module levels beside the blocks
    for name, calls in found:
        runs = sorted(r for c in calls for r in c.runs)
        assert all(a[1] < b[0] for a, b in zip(runs, runs[1:])), name


def test_the_exact_program_is_kept_where_it_is_faster_and_fits(traced):
    trace, gpu, eager = traced
    budget = int(0.5 * eager.peak_memory_bytes)
    heuristic = plan_tensors(trace, gpu, budget, exact=False)
    both = plan_tensors(trace, gpu, budget, exact=True)
    assert any(s.startswith("exact program") for s in both.steps)
    assert not any(s.startswith("exact program") for s in heuristic.steps)
    assert both.fits and both.iteration_time_ns <= heuristic.iteration_time_ns
    again = replay(trace, gpu, both.plan, budget, record_ops=False)
    assert again.oom is None and again.end_ns == both.iteration_time_ns
    assert again.peak_live_bytes == both.peak_memory_bytes <= budget


def test_a_module_called_twice_is_checkpointed_in_both_calls_or_neither():
    from vdnnsim.engine import allocator_settings
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.planners.tensor_milp import solve_calls
    gpu = resolve_gpu("h200")
    d = memory_trace("tests.test_tensor_plans:twice", 64, gpu, "fp32", None, {},
                     "image:3,96,96:10")
    from vdnnsim.costs.workspaces import without_workspaces
    # without the predicted workspaces: the rule is under test, not the room they take
    trace = with_optimizer(without_workspaces(trace_from_dict(d, "twice")), "adamw")
    eager = run_trace(trace, gpu, "eager", record=False)
    calls = [c for c in module_calls(trace) if c.path in ("2.stage", "3.stage")]
    assert [len(c.runs) for c in calls] == [2, 2]
    seen = set()
    for share in (0.5, 0.6, 0.7):
        got = solve_calls(trace, gpu, int(share * eager.peak_memory_bytes),
                          [("the stages", calls)], False, allocator_settings(None))
        assert got.plan is not None, got.steps
        for c in calls:
            inside = [r in got.plan.recompute for r in c.runs]
            assert all(inside) or not any(inside), (share, c.path, got.plan.recompute)
            if all(inside):
                seen.add(c.path)
                assert c.path in got.modules
    assert seen  # some budget checkpoints a stage: the rule was put to the test


def test_a_tensor_plan_file_replays_to_its_own_prediction(traced, tmp_path):
    """Policy planned reads a version 3 plan as the tensor runtime's (paid per copy, no
    synchronisation), as the planner replayed it: its time and peak to the nanosecond and
    byte (the layer runtime's costs gave another time)."""
    from vdnnsim.planners.planfile import write_plan_file
    from vdnnsim.policies.planned import plan_from_file
    trace, gpu, eager = traced
    budget = int(0.5 * eager.peak_memory_bytes)
    found = plan_tensors(trace, gpu, budget)
    path = tmp_path / "t.yaml"
    write_plan_file(path, tensor_plan_to_dict(trace, gpu, budget, found, {
        "peak_memory_bytes": found.peak_memory_bytes,
        "iteration_time_ns": found.iteration_time_ns}))
    plan = plan_from_file(str(path), trace, gpu)
    assert plan.runtime == "tensors" and plan.sync is False
    again = replay(trace, gpu, plan, budget, record_ops=False)
    assert (again.end_ns, again.peak_live_bytes) == (found.iteration_time_ns,
                                                     found.peak_memory_bytes)
