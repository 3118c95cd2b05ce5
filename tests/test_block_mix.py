"""NOTE [block mix]: the first blocks offloaded and the blocks after them checkpointed, in
one plan: the engine's replay of it, the planner's choice of it, its plan file, and the
block runtime running both (on a CPU its checkpointing and hooks together; the copies on
a CUDA GPU, skipped without one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.errors import ConfigError
from vdnnsim.planners.greedy import block_plan_to_dict, block_paths
from vdnnsim.planners.blocks import plan_blocks
from vdnnsim.policies.blocks import (block_mixed_plan, block_plan, block_recompute_plan,
                                     block_segments)

from .conftest import block_step_grads, run_cli

torch = pytest.importorskip("torch")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30


@pytest.fixture(scope="module")
def vgg(tmp_path_factory):
    """VGG-16 at batch 32, 224 x 224, timed for the H200 by the op model: its blocks are
    its layers by call (NOTE [blocks]); the first ones hold the largest feature maps and
    a ReLU(inplace=True) writes each convolution's output, as in vDNN's networks. Without
    its convolutions' predicted workspaces (NOTE [conv workspaces]): with them the first
    convolutions' workspaces set every plan's peak, and the mix is about feature maps."""
    out = tmp_path_factory.mktemp("vgg") / "vgg16.json"
    r = run_cli(["trace", "--model", "torchvision.models:vgg16", "--input", "image:3,224,224",
                 "-b", "32", "--gpu", "h200", "--dtype", "fp32", "-o", str(out)], cwd=ROOT)
    assert r.returncode == 0, r.stderr
    from vdnnsim.costs.workspaces import has_predicted, without_workspaces
    from vdnnsim.trace import load_trace
    trace = load_trace(out)
    assert has_predicted(trace)
    return without_workspaces(trace)


def test_a_mix_offloads_the_first_blocks_and_checkpoints_the_ones_after(vgg):
    gpu = resolve_gpu("h200")
    plan = block_mixed_plan(vgg, 3, 14)
    segs = block_segments(vgg, 14, start=3)
    assert plan.recompute == tuple(segs.values()) and segs
    paths = block_paths(vgg)
    assert not set(segs) & set(paths[:3])  # none of the offloaded blocks is checkpointed
    from vdnnsim.policies.blocks import block_regions
    assert min(a for a, _ in segs.values()) > max(block_regions(vgg)[3])
    # nothing a checkpoint drops or keeps is offloaded
    from vdnnsim.engine.sim import checkpoint_buffers
    from vdnnsim.policies.plan import liveness
    lv = liveness(vgg)
    held = {b for b in lv.size if b not in lv.producer}
    kept = set()
    for a, b in plan.recompute:
        dropped, inputs = checkpoint_buffers(vgg, lv, a, b, held)
        kept |= dropped | inputs
    moved = {b for o in plan.offload for b in o}
    assert moved and not moved & kept
    # either count 0 is the pure plan of the other
    assert block_mixed_plan(vgg, 3, 0) == block_plan(vgg, 3)
    assert block_mixed_plan(vgg, 0, 14) == block_recompute_plan(vgg, 14)
    # the replay: below both of its halves alone, and the policy's options give it
    mix = run_trace(vgg, gpu, "vdnn_blocks", {"blocks": 3, "recompute": 14}, record=False)
    off = run_trace(vgg, gpu, "vdnn_blocks", {"blocks": 3}, record=False)
    rec = run_trace(vgg, gpu, "vdnn_blocks", {"recompute": 14}, record=False)
    assert mix.peak_memory_bytes < min(off.peak_memory_bytes, rec.peak_memory_bytes)
    assert 0 < mix.offloaded_bytes <= off.offloaded_bytes
    assert mix.prefetched_bytes == mix.offloaded_bytes


def test_the_planner_mixes_where_that_is_faster_than_either_alone(vgg, tmp_path):
    """At 85% of the step's peak: checkpointing alone never fits (a checkpointed
    convolution keeps its input, and a ReLU(inplace=True), which writes its input, cannot
    be checkpointed), offloading alone fits with 13 blocks; offloading the first few and
    checkpointing some after them fits faster. The plan file says both, and the policy's
    budget replays the same plan."""
    gpu = resolve_gpu("h200")
    eager = run_trace(vgg, gpu, "eager", record=False)
    budget = int(0.85 * eager.peak_memory_bytes)
    p = plan_blocks(vgg, gpu, budget)
    assert p.fits and p.blocks > 0 and p.recompute > 0
    assert not any(ok for _, ok, _, _ in p.tried_recompute)
    off = min((k, ns) for k, ok, _, ns in p.tried if ok)
    assert p.iteration_time_ns < off[1] and p.peak_memory_bytes <= budget
    # the fastest of the pairs that fit, each the fewest checkpointed for its count
    # offloaded: every fewer count tried did not fit, as the policy's replay says too
    fit = {(o, r): ns for _, o, r, ok, _, ns in p.tried_mixed if ok}
    assert p.iteration_time_ns == min(fit.values()) == fit[p.blocks, p.recompute]
    for (o, r) in fit:
        assert all(not ok for _, o2, r2, ok, _, _ in p.tried_mixed if o2 == o and r2 < r)
        assert {r2 for _, o2, r2, _, _, _ in p.tried_mixed if o2 == o} == set(range(1, r + 1))
    less = run_trace(vgg, gpu, "vdnn_blocks", {"blocks": p.blocks,
                                               "recompute": p.recompute - 1}, budget,
                     record=False)
    assert not less.fits
    # why counting up and not bisecting: fitting is not monotone in the checkpointed count
    # (docs/beyond-vdnn.md's example: 8 offloaded fit with 2 checkpointed, not with 3 to 8,
    # and again with 9)
    assert [run_trace(vgg, gpu, "vdnn_blocks", {"blocks": 8, "recompute": r}, budget,
                      record=False).fits for r in (2, 3, 8, 9)] == [True, False, False, True]
    via = run_trace(vgg, gpu, "vdnn_blocks", {"budget": budget}, budget, record=False)
    assert via.fits and via.iteration_time_ns == p.iteration_time_ns
    d = block_plan_to_dict(vgg, gpu, budget, p)
    assert (d["blocks"], d["recompute_blocks"]) == (p.blocks, p.recompute)
    assert d["recompute_paths"] == list(block_segments(vgg, p.recompute, p.blocks))
    assert not set(d["recompute_paths"]) & set(d["block_paths"][:p.blocks])
    from vdnnsim.planners.planfile import BlockPlanFile
    BlockPlanFile.model_validate(d)  # the runtime's reading of it


def test_vdnnsim_plan_says_the_mix(vgg, tmp_path):
    trace = tmp_path / "vgg.json"
    from vdnnsim.trace import save_trace
    save_trace(vgg, trace)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"network": str(trace), "batch_size": 32, "gpu": "h200",
                                   "policy": "eager"}))
    eager = run_trace(vgg, resolve_gpu("h200"), "eager", record=False)
    out = tmp_path / "plan.yaml"
    r = run_cli(["plan", str(cfg), "--budget", str(int(0.85 * eager.peak_memory_bytes)),
                 "--method", "blocks", "-o", str(out)], cwd=ROOT)  # (auto: a tensor plan)
    assert r.returncode == 0, r.stderr
    plan = yaml.safe_load(out.read_text())
    assert plan["blocks"] > 0 and plan["recompute_blocks"] > 0
    assert (f"plan: offload the first {plan['blocks']} and checkpoint the "
            f"{plan['recompute_blocks']} after them of {plan['total_blocks']} blocks") \
        in r.stdout
    assert "offloaded, then" in r.stdout


@pytest.mark.parametrize("change, match", [
    ({"blocks": 30, "recompute_blocks": 12}, "are more than the 40 blocks"),
    ({"blocks": 2, "recompute_paths": ["features.1"]}, "one of the 2 offloaded blocks"),
])
def test_a_plan_file_that_offloads_and_checkpoints_one_block_is_refused(change, match):
    from pydantic import ValidationError

    from vdnnsim.planners.planfile import BlockPlanFile
    d = {"format": "vdnnsim-block-plan", "network": "vgg16", "batch_size": 32,
         "gpu": "h200", "budget_bytes": GiB, "blocks": 0, "total_blocks": 40,
         "block_paths": [f"features.{i}" for i in range(31)] + ["avgpool"]
         + [f"classifier.{i}" for i in range(7)] + ["flatten"]}
    with pytest.raises(ValidationError, match=match):
        BlockPlanFile.model_validate({**d, **change})


class _NoStream:
    """A CUDA stream's stand-in for the runtime's construction on a CPU: CPU tensors are
    never packed (``_pack`` returns them), so no copy is issued on it."""


def _resnet_grads(offload: int, recompute: list[str], monkeypatch, events=None):
    from vdnnsim.gpu.runtime.blocks import BlockOffload
    from vdnnsim.gpu.model.workload import build_workload, training_step

    monkeypatch.setattr(torch.cuda, "Stream", _NoStream)
    paths = ["conv1", "bn1", "relu", "maxpool", "layer1.0", "layer1.1", "layer2.0"]
    torch.manual_seed(0)
    work = build_workload("torchvision.models:resnet18", None, "image:3,32,32", {})
    rt = BlockOffload(work.model, offload, paths, recompute) if offload or recompute \
        else None
    if events is not None:  # the backward's prefetch calls, and layer1.0's forward runs
        starts = rt._backward_starts

        def logged(k):
            events.append(("prefetch", k))
            starts(k)
        rt._backward_starts = logged
        work.model.layer1[0].conv1.register_forward_hook(
            lambda *a: events.append(("layer1.0 forward", torch.is_grad_enabled())))
    step = training_step(work, 4, "cpu", "fp32", "sgd")
    step(update=False)  # NOTE [training step]: the gradients, no optimizer step
    out = {n: p.grad.detach().clone() for n, p in work.model.named_parameters()}
    if rt is not None:
        wrapped = {p for p in paths if "forward" in work.model.get_submodule(p).__dict__}
        assert wrapped == set(recompute)
        rt.remove()
    return out


def test_the_runtime_offloads_and_checkpoints_apart_with_the_plain_gradients(monkeypatch):
    """On a CPU the offload hooks see only CPU tensors and pass them through: what is
    checked is that the two mechanisms compose. With the first 4 blocks offloaded and the
    2 after them checkpointed: those 2 wrapped and the others not; in the backward pass
    the first checkpointed block's prefetch of the last offloaded one comes before its
    forward runs again (the copy hides behind the recomputation), the prefetches run down
    the offloaded blocks; and the gradients are the plain step's to the bit."""
    base = _resnet_grads(0, [], monkeypatch)
    events: list = []
    got = _resnet_grads(4, ["layer1.0", "layer1.1"], monkeypatch, events)
    assert set(base) == set(got) and all(torch.equal(base[n], got[n]) for n in base)
    runs = [i for i, e in enumerate(events) if e[0] == "layer1.0 forward"]
    assert len(runs) == 2  # the forward pass, and the recomputation in the backward
    assert events.index(("prefetch", 4)) in range(runs[0] + 1, runs[1])
    assert [e[1] for e in events if e[0] == "prefetch"] == [4, 3, 2, 1, 0]


@pytest.mark.parametrize("recompute", [["bn1"], ["layer1.0.conv1"], ["layer1"]])
def test_the_runtime_refuses_a_block_both_offloaded_and_checkpointed(recompute,
                                                                     monkeypatch):
    from vdnnsim.gpu.runtime.blocks import BlockOffload
    from vdnnsim.gpu.model.workload import build_workload

    monkeypatch.setattr(torch.cuda, "Stream", _NoStream)
    work = build_workload("torchvision.models:resnet18", None, "image:3,32,32", {})
    paths = ["conv1", "bn1", "relu", "maxpool", "layer1.0", "layer1.1", "layer2.0"]
    with pytest.raises(ValueError, match="offloaded blocks: one or the other"):
        BlockOffload(work.model, 5, paths, recompute)


@cuda
def test_a_mixed_plan_gives_bit_identical_gradients_on_the_gpu():
    """The copies too: the first blocks offloaded to pinned host memory and prefetched,
    the ones after them checkpointed, the gradients the plain step's to the bit."""
    from vdnnsim.gpu.runtime.blocks import BlockOffload
    from vdnnsim.gpu.model.workload import build_workload

    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    paths = ["conv1", "bn1", "relu", "maxpool", "layer1.0", "layer1.1", "layer2.0"]

    def grads(offload, recompute):
        torch.manual_seed(0)
        with torch.device("cuda"):
            work = build_workload("torchvision.models:resnet18", None, "image:3,64,64", {})
        return block_step_grads(work, BlockOffload(work.model, offload, paths, recompute)
                                if offload else None)

    base, _ = grads(0, [])
    got, stats = grads(4, ["layer1.0", "layer1.1"])
    assert stats["offloaded_bytes"] > 0
    assert stats["prefetched_bytes"] + stats["kept_bytes"] == stats["offloaded_bytes"]
    assert set(base) == set(got) and all(torch.equal(base[n], got[n]) for n in base)


@cuda
def test_a_checkpoints_input_saved_by_an_offloaded_block_is_not_fetched_back():
    """The boundary (NOTE [block mix]): the last offloaded block saves its output (a
    tanh's), which the checkpointed block after it takes as its input and keeps; the
    runtime copies it out when it is saved, but takes the live tensor back instead of a
    second copy, as the engine's plan never offloads it."""
    from torch import nn

    from vdnnsim.gpu.runtime.blocks import BlockOffload

    def grads(mix: bool):
        torch.manual_seed(0)
        model = nn.Sequential(*(nn.Sequential(nn.Linear(256, 256), nn.Tanh())
                                for _ in range(4))).cuda()
        rt = BlockOffload(model, 2, ["0", "1", "2", "3"], ["2", "3"]) if mix else None
        model(torch.randn(64, 256, device="cuda")).sum().backward()
        if rt is not None:
            rt.end_iteration()
        torch.cuda.synchronize()
        out = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        stats = dict(rt.stats) if rt is not None else {}
        if rt is not None:
            rt.remove()
        return out, stats

    base, _ = grads(False)
    got, stats = grads(True)
    assert stats["kept_bytes"] == 64 * 256 * 4  # block 1's output, block 2's input
    assert stats["prefetched_bytes"] + stats["kept_bytes"] == stats["offloaded_bytes"]
    assert all(torch.equal(base[n], got[n]) for n in base)


def test_the_policy_refuses_a_budget_with_a_count():
    gpu = resolve_gpu("h200")
    from vdnnsim.api import build_trace
    t = build_trace("vgg16", 8, gpu)
    with pytest.raises(ConfigError, match="recompute does not go with budget"):
        run_trace(t, gpu, "vdnn_blocks", {"recompute": 1, "budget": GiB}, record=False)
