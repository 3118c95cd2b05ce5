"""NOTE [plan files]: one model per kind of plan file, one reader, one writer. Every plan
file committed to the repository loads with the meaning it had (checked against the
readers' rules before the model: planner.plan_from_file's and vdnnsim measure's); what
`vdnnsim plan` writes is what it wrote; a bad file is one line naming it and its key. The
`vdnnsim` commands run in this process (conftest.run_cli); a fresh interpreter only where
the point is what importing a module loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vdnnsim.errors import ConfigError
from vdnnsim.planners.planfile import (BLOCK_FORMAT, FORMAT, BlockPlanFile, LayerPlanFile, LayerRow,
                              Predicted, dumps_plan, plan_from_data, read_plan_file,
                              write_plan_file)

from .conftest import k40_vgg16_plan, run_cli

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30


def committed_plan_files() -> list[Path]:
    """Every file in the repository whose format is a plan's (not only those named *plan*:
    the MILP's are *.milp.yaml)."""
    out = subprocess.run(["git", "grep", "-l", "-E", f"^format: ({FORMAT}|{BLOCK_FORMAT})$",
                          "--", "*.yaml"], cwd=ROOT, capture_output=True, text=True)
    return sorted(ROOT / p for p in out.stdout.split())


PLAN_FILES = committed_plan_files()


def test_the_committed_plan_files_are_found():
    names = {p.name for p in PLAN_FILES}
    assert {"vgg16_b256_12GiB.plan.yaml", "resnet50_b256_12GiB.milp.yaml", "plan-b2.yaml",
            "plan_recompute.yaml"} <= names
    found = subprocess.run(["git", "ls-files", "*plan*.yaml"], cwd=ROOT, capture_output=True,
                           text=True).stdout.split()
    plans = [p for p in found if "format: vdnnsim" in (ROOT / p).read_text()[:200]]
    assert {ROOT / p for p in plans} <= set(PLAN_FILES)


@pytest.mark.parametrize("path", PLAN_FILES, ids=[str(p.relative_to(ROOT)) for p in PLAN_FILES])
def test_every_committed_plan_file_loads_with_its_meaning(path: Path):
    raw = yaml.safe_load(path.read_text())
    plan = read_plan_file(path)
    dumped = plan.model_dump(mode="json")
    for key, value in raw.items():  # every key reads back as written
        if key == "layers":
            assert [r.model_dump(mode="json") for r in plan.layers] == value
        else:
            assert dumped[key] == value, key
    if raw["format"] == FORMAT:
        assert isinstance(plan, LayerPlanFile)
        # vdnnsim measure refused only layer_names: ops; planned read sync as True where
        # absent, a row's offload as none, its prefetch as none
        assert (plan.layer_names == "ops") == (raw.get("layer_names") == "ops")
        assert plan.sync is raw.get("sync", True)
        for row, r in zip(plan.layers, raw["layers"]):
            assert row.offload == r.get("offload", []) and row.prefetch == r.get("prefetch")
        assert [list(x) for x in plan.split] == (raw.get("split") or [])
        assert [list(x) for x in plan.recompute] == (raw.get("recompute") or [])
    else:
        assert isinstance(plan, BlockPlanFile)
        # what vdnnsim measure gave the block runtime: int(blocks), block_paths or None,
        # list(recompute_paths or ())
        assert plan.blocks == int(raw["blocks"])
        assert plan.block_paths == raw.get("block_paths")
        assert plan.recompute_paths == list(raw.get("recompute_paths") or ())


def _old_plan_from_file(data: dict, trace, gpu):
    """planner.plan_from_file's reading of a plan before the model (its checks left out):
    the reference for 'identical meaning'."""
    from vdnnsim.engine.plan import Plan
    from vdnnsim.planners.split import split_trace

    splits = data.get("split") or []
    for first, last, parts in splits:
        trace = split_trace(trace, gpu, first, last, parts)
    ids = [x.id for x in trace.layers]
    index = {x: i for i, x in enumerate(ids)}
    rows = data["layers"]
    algos = tuple([a.name for a in x.algos].index(r["algo"]) for x, r in zip(trace.layers, rows))
    offload = tuple(tuple(r.get("offload", [])) for r in rows)
    prefetch = tuple(index[r["prefetch"]] if r.get("prefetch") is not None else -1
                     for r in rows)
    recompute = tuple(sorted((index[a], index[b]) for a, b in data.get("recompute") or []))
    return Plan("planned", "layer_wise", algos, offload, prefetch, data.get("sync", True),
                runtime=True, recompute=recompute, trace=trace if splits else None,
                split=tuple((a, b, k) for a, b, k in splits))


LAYER_PLANS = [p for p in PLAN_FILES if p.parent.name == "h200_planner_12gib"]


@pytest.mark.parametrize("path", LAYER_PLANS, ids=[p.name for p in LAYER_PLANS])
def test_the_committed_layer_plans_replay_as_before(path: Path):
    from vdnnsim.api import resolve_gpu
    from vdnnsim.planners.greedy import plan_from_file
    from vdnnsim.trace import load_trace

    model = path.name.split("_")[0]
    trace = load_trace(ROOT / f"traces/h200_torchvision/{model}_b256.yaml")
    gpu = resolve_gpu("h200")
    got = plan_from_file(str(path), trace, gpu)
    want = _old_plan_from_file(yaml.safe_load(path.read_text()), trace, gpu)
    for field in ("algos", "offload", "prefetch", "sync", "recompute", "split"):
        assert getattr(got, field) == getattr(want, field), field
    assert (got.trace is None) == (want.trace is None)
    if got.trace is not None:
        assert [x.id for x in got.trace.layers] == [x.id for x in want.trace.layers]


def test_vdnnsim_plan_writes_what_it_wrote_before(tmp_path):
    """The writer goes through the model and writes the same bytes as the plain dump of
    the planner's dict did (rows without empty offloads or prefetches of none)."""
    from vdnnsim.planners.greedy import plan_to_dict
    from vdnnsim.policies import get_policy

    # search_plan(VGG-16 (256), the K40, 12 GiB): a batch split and checkpointed segments
    trace, gpu, split, _ = k40_vgg16_plan()
    fn, fixed = get_policy("vdnn_conv_p")  # offloads and prefetches
    moving = fn(trace, gpu, gpu.memory_bytes, dict(fixed))
    for plan in (split, moving):
        d = plan_to_dict(trace, gpu, 12 * GiB, plan,
                         {"peak_memory_bytes": 1, "iteration_time_ns": 2})
        out = tmp_path / "p.yaml"
        write_plan_file(out, d)
        assert out.read_text() == yaml.safe_dump(d, sort_keys=False)
        assert read_plan_file(out).model_dump(mode="json")["layers"] == d["layers"]
    assert split.split and split.recompute
    assert any("offload" in r for r in d["layers"]) and any("prefetch" in r for r in d["layers"])
    assert any("offload" not in r for r in d["layers"])
    block = yaml.safe_load((ROOT / "traces/h200_timm_heldout/measured_planned/plan256/"
                            "plan_recompute.yaml").read_text())
    assert dumps_plan(block) == yaml.safe_dump(block, sort_keys=False)


def test_a_plan_a_reader_would_refuse_is_not_written(tmp_path):
    from pydantic import ValidationError
    with pytest.raises(ValidationError):
        write_plan_file(tmp_path / "p.yaml", {"format": BLOCK_FORMAT, "blocks": -1})
    assert not (tmp_path / "p.yaml").exists()


BLOCK = {"format": BLOCK_FORMAT, "network": "gpt2", "batch_size": 8, "gpu": "h200",
         "budget_bytes": 9 * GiB, "blocks": 2, "total_blocks": 3,
         "block_paths": ["h.0", "h.1", "h.2"]}


@pytest.mark.parametrize("data, message", [
    (None, "p.yaml: not a vdnnsim plan file (format: vdnnsim-plan or vdnnsim-block-plan)"),
    ({"format": "x"}, "p.yaml: not a vdnnsim plan file"),
    ({"format": "vdnnsim-trace", "version": 1}, "p.yaml: this is a vdnnsim trace, not a "
     "vdnnsim plan file"),
    ({**BLOCK, "blocks": -1}, "p.yaml: blocks: Input should be greater than or equal to 0"),
    ({**BLOCK, "blocks": True}, "p.yaml: blocks: expected a whole number, got a boolean"),
    ({**BLOCK, "blocks": 4}, "blocks 4 is more than the 3 blocks of total_blocks"),
    ({**BLOCK, "block_paths": "h"}, "p.yaml: block_paths: Input should be a valid list"),
    ({**BLOCK, "block_paths": ["h.0"]}, "block_paths names 1 blocks, not the 3"),
    ({**BLOCK, "recompute_paths": [3]}, "p.yaml: recompute_paths[0]: Input should be a "
     "valid string"),
    ({**BLOCK, "budget_bytes": "lots"}, "p.yaml: budget_bytes: 'lots' is not a byte count"),
    ({k: v for k, v in BLOCK.items() if k != "total_blocks"},
     "p.yaml: total_blocks: required key is missing"),
    ({**BLOCK, "blcks": 1}, "p.yaml: blcks: unknown key"),
    ({"format": FORMAT, "network": "n", "batch_size": 1, "gpu": "k40", "budget_bytes": 1,
      "layers": [{"id": "a", "algo": "x"}, {"id": "a", "algo": "x"}]},
     "p.yaml: layer a is listed twice"),
    ({"format": FORMAT, "network": "n", "batch_size": 1, "gpu": "k40", "budget_bytes": 1,
      "layers": [{"id": "a", "algo": "x", "offload": "a"}]},
     "p.yaml: layers[0].offload: Input should be a valid list"),
    ({"format": FORMAT, "network": "n", "batch_size": 1, "gpu": "k40", "budget_bytes": 1,
      "layer_names": "aten", "layers": [{"id": "a", "algo": "x"}]},
     "p.yaml: layer_names: Input should be 'fx' or 'ops'"),
    ({"format": FORMAT, "network": "n", "batch_size": 1, "gpu": "k40", "budget_bytes": 1,
      "split": [["a", "a"]], "layers": [{"id": "a", "algo": "x"}]}, "p.yaml: split[0]"),
])
def test_a_bad_plan_file_is_one_line_naming_the_file_and_key(tmp_path, data, message):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        read_plan_file(path)
    text = str(err.value)
    assert len(text.splitlines()) == 1 and message in text, text
    assert text.startswith(str(path)) or text.startswith("p.yaml") or str(path) in text


def test_vdnnsim_measure_refuses_a_bad_plan_in_one_line(tmp_path):
    """Before it builds the model or looks for a GPU."""
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({**BLOCK, "blocks": "two"}))
    r = run_cli(["measure", "--model", "hf:gpt2", "-b", "8", "--plan", "p.yaml"],
                cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == ("vdnnsim: error: p.yaml: blocks: expected a whole number, got "
                        "'two'\n")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(BLOCK))
    r = run_cli(["measure", "--model", "hf:gpt2", "-b", "4", "--plan", "p.yaml"],
                cwd=tmp_path)
    assert r.returncode == 2 and r.stderr == ("vdnnsim: error: p.yaml: planned for batch 8, "
                                              "not 4\n")


def test_the_runtimes_take_only_their_own_kind_of_plan():
    torch = pytest.importorskip("torch")
    from vdnnsim.gpu.runtime.blocks import BlockOffload
    from vdnnsim.gpu.runtime.vdnn import VDNN

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    block = plan_from_data({**BLOCK, "blocks": 1, "total_blocks": 2, "block_paths": ["0", "1"]})
    with pytest.raises(ValueError, match="runs a layer plan"):
        VDNN(model, (2,), "planned", plan=block)
    layer = plan_from_data({"format": FORMAT, "network": "n", "batch_size": 1, "gpu": "k40",
                            "budget_bytes": 1, "layers": [{"id": "a", "algo": "x"}]})
    with pytest.raises(ValueError, match="runs a block plan"):
        BlockOffload.from_plan(model, layer)
    rt = BlockOffload.from_plan(model, plan_from_data({**BLOCK, "blocks": 0, "total_blocks": 2,
                                                       "block_paths": ["0", "1"],
                                                       "recompute_paths": ["1"]}))
    assert rt.blocks == [model[0], model[1]] and rt.offload == 0
    rt.remove()


def test_the_plan_file_module_needs_neither_torch_nor_the_engine():
    code = ("import sys, vdnnsim.planners.planfile; "
            "assert not {'torch', 'vdnnsim.engine', 'vdnnsim.planners.greedy'} & set(sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_field_of_the_plan_file_models_is_described():
    for model in (LayerPlanFile, BlockPlanFile, LayerRow, Predicted):
        assert model.model_config.get("extra") == "forbid", model
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"


def test_vdnnsim_plan_plans_under_the_allocator_given_and_says_so(tmp_path):
    """NOTE [planned allocator]: ``--allocator`` (or the run config's ``allocator:``)
    reaches the plan's report and its file; what the engine does not model, or a Torch7
    trace (CNMeM's pool), is one line and exit code 2."""
    from vdnnsim.trace import save_trace

    from .test_param_offload import blocks
    save_trace(blocks(3), tmp_path / "t.yaml")
    (tmp_path / "c.yaml").write_text("network: t.yaml\ngpu: h200\n")
    (tmp_path / "e.yaml").write_text("network: t.yaml\ngpu: h200\n"
                                     "allocator: {expandable_segments: true}\n")

    def plan(*args: str) -> subprocess.CompletedProcess:
        return run_cli(["plan", *args], cwd=tmp_path)
    for args in (("c.yaml", "--allocator", "expandable_segments=true"), ("e.yaml",)):
        r = plan(*args, "--budget", "1GiB", "-o", "p.yaml")
        assert r.returncode == 0, r.stderr
        assert "budget 1.00 GiB, allocator expandable_segments:True" in r.stdout
        assert read_plan_file(tmp_path / "p.yaml").allocator.expandable_segments
    r = plan("e.yaml", "--allocator", "expandable_segments=false", "--budget", "1GiB",
             "-o", "p.yaml")
    assert r.returncode == 0 and read_plan_file(tmp_path / "p.yaml").allocator is None
    assert "allocator" not in (tmp_path / "p.yaml").read_text()
    r = plan("c.yaml", "--allocator", "max_split_size_mb=128", "--budget", "1GiB")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "max_split_size_mb is not modelled" in r.stderr
    (tmp_path / "z.yaml").write_text("network: vgg16\nbatch_size: 8\ngpu: k40\n")
    r = plan("z.yaml", "--allocator", "expandable_segments=true", "--budget", "12GiB")
    assert r.returncode == 2 and "apply to PyTorch traces" in r.stderr
    assert r.stderr.count("\n") == 1


def test_a_measurement_of_a_plan_runs_under_the_plan_s_allocator(capsys):
    """NOTE [planned allocator]: ``vdnnsim measure --plan`` takes the plan's settings
    where --allocator gives none, and says so on stderr where --allocator differs."""
    from vdnnsim.cli.gpu import _plan_allocator

    exp = plan_from_data({**BLOCK, "allocator": {"expandable_segments": True}})
    plain = plan_from_data(BLOCK)
    assert _plan_allocator(exp, {}, "p.yaml") == {"expandable_segments": True}
    assert _plan_allocator(plain, {}, "p.yaml") == {}
    assert _plan_allocator(None, {"expandable_segments": True}, None) == \
        {"expandable_segments": True}
    assert capsys.readouterr().err == ""
    assert _plan_allocator(exp, {"expandable_segments": True}, "p.yaml") == \
        {"expandable_segments": True}
    assert _plan_allocator(plain, {"expandable_segments": False}, "p.yaml") == \
        {"expandable_segments": False}
    assert capsys.readouterr().err == ""  # the same settings, said or not
    assert _plan_allocator(exp, {"expandable_segments": False}, "p.yaml") == \
        {"expandable_segments": False}
    assert "p.yaml was planned under the allocator settings expandable_segments=True" in \
        capsys.readouterr().err
    _plan_allocator(plain, {"max_split_size_mb": 128}, "p.yaml")
    assert "planned under the allocator settings PyTorch's defaults" in capsys.readouterr().err


PLAN_V2 = {**BLOCK, "version": 2, "optimizer": "adamw", "model": "hf:gpt2",
           "dtype": "autocast-bf16", "seq_len": 1024}


def _measure_args(*flags: str):
    from vdnnsim.cli import build_parser
    return build_parser().parse_args(["measure", *flags])


def test_measure_takes_the_run_from_the_plan():
    """``vdnnsim measure --plan PLAN`` with no other flag runs the plan as planned: its
    model, batch, dtype, optimizer and sequence length (the cap and the allocator settings
    are cmd_measure's, from the same file)."""
    from vdnnsim.cli.gpu import MeasuredRun, measured_run
    plan = plan_from_data(PLAN_V2)
    args = _measure_args("--plan", "p.yaml")
    assert measured_run(args, plan) == MeasuredRun("hf:gpt2", 8, "autocast-bf16", "adamw",
                                                   1024, "planned", plan.budget_bytes)
    same = _measure_args("--plan", "p.yaml", "--optimizer", "adamw", "-b", "8",
                         "--model", "hf:gpt2", "--dtype", "autocast-bf16")
    assert measured_run(same, plan) == measured_run(args, plan)
    # a plan of version 1 names no model: --model gives it, the rest is the plan's
    old = plan_from_data({**BLOCK, "optimizer": "adamw"})
    run = measured_run(_measure_args("--plan", "p.yaml", "--model", "hf:gpt2"), old)
    assert run == MeasuredRun("hf:gpt2", 8, "fp32", "adamw", None, "planned",
                              old.budget_bytes)
    with pytest.raises(ConfigError, match="--model is needed"):
        measured_run(_measure_args("--plan", "p.yaml"), old)
    # without a plan: the defaults
    run = measured_run(_measure_args("--model", "zoo:alexnet", "-b", "2"), None)
    assert run == MeasuredRun("zoo:alexnet", 2, "fp32", "sgd", None, "baseline")


def test_measure_caps_a_plan_at_its_budget(capsys):
    """The plan's budget is the cap unless --memory-cap says otherwise, which is measured
    with a warning on stderr."""
    from vdnnsim.cli.gpu import measured_run
    plan = plan_from_data(PLAN_V2)
    assert measured_run(_measure_args("--plan", "p.yaml"), plan).memory_cap_bytes == \
        plan.budget_bytes
    assert capsys.readouterr().err == ""
    other = measured_run(_measure_args("--plan", "p.yaml", "--memory-cap", "20GiB"), plan)
    assert other.memory_cap_bytes == 20 * 2**30
    assert "was planned for a budget of" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--optimizer", "sgd"], "p.yaml: planned with optimizer adamw, not sgd"),
    (["-b", "4"], "p.yaml: planned for batch 8, not 4"),
    (["--dtype", "fp32"], "p.yaml: planned in autocast-bf16, not fp32"),
    (["--model", "hf:llama-1b"], "p.yaml: planned for model hf:gpt2, not hf:llama-1b"),
    (["--seq-len", "512"], "p.yaml: planned for sequence length 1024, not 512"),
    (["--optimizer-offload"], "p.yaml: planned with the optimizer on the GPU, not "
     "--optimizer-offload"),
])
def test_measure_refuses_a_flag_that_contradicts_the_plan(tmp_path, monkeypatch, capsys,
                                                           flags, message):
    """Refused in one line, exit 2, before anything runs (no GPU needed to be told)."""
    from vdnnsim.cli import main
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(PLAN_V2))
    monkeypatch.chdir(tmp_path)
    assert main(["measure", "--plan", "p.yaml", *flags]) == 2
    assert capsys.readouterr().err == f"vdnnsim: error: {message}\n"


def test_a_plan_file_of_version_2_says_the_run(tmp_path):
    """The plan file carries what a run needs; the old files still load (version 1, no
    version key in a block plan), and one written back reads the same."""
    plan = plan_from_data(PLAN_V2)
    assert (plan.model, plan.dtype, plan.seq_len, plan.optimizer) == \
        ("hf:gpt2", "autocast-bf16", 1024, "adamw")
    text = dumps_plan(plan)
    assert plan_from_data(yaml.safe_load(text)) == plan
    assert "version" not in dumps_plan(plan_from_data(BLOCK))
    with pytest.raises(ConfigError, match="version"):
        plan_from_data({**PLAN_V2, "version": 3})
    for path in sorted(Path(__file__).resolve().parents[1].glob("traces/**/*plan*.yaml")):
        plan_from_data(yaml.safe_load(path.read_text()), path)
