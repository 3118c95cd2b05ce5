"""NOTE [block offload], NOTE [block plan], NOTE [block runtime]: whole transformer blocks
offloaded, in the simulator (on the committed H200 profiles, anywhere) and on a CUDA GPU
(the runtime; skipped without one)."""

from __future__ import annotations

import contextlib
import gc
from pathlib import Path

import pytest
import yaml

from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.errors import ConfigError
from vdnnsim.planners.greedy import BLOCK_FORMAT
from vdnnsim.planners.blocks import plan_blocks
from vdnnsim.policies.blocks import block_regions
from vdnnsim.trace import load_trace

from .conftest import HAS_HF, block_step_grads, run_cli

ROOT = Path(__file__).resolve().parents[1]
PROFILED = ROOT / "traces" / "h200_transformers" / "profiled"
GiB = 2**30


@pytest.fixture(scope="module")
def gpt2():
    return load_trace(PROFILED / "main-gpt2-b8-s1024-autocast-bf16.yaml.gz")


def test_each_block_offloaded_lowers_the_peak_and_costs_time(gpt2):
    gpu = resolve_gpu("h200")
    assert len(block_regions(gpt2)) == 14  # embeddings, 12 blocks, head
    runs = [run_trace(gpt2, gpu, "vdnn_blocks", {"blocks": k}, record=False)
            for k in (0, 4, 8, 12)]
    eager = run_trace(gpt2, gpu, "eager", record=False)
    assert runs[0].peak_memory_bytes == eager.peak_memory_bytes
    assert runs[0].offloaded_bytes == 0
    peaks = [r.peak_memory_bytes for r in runs]
    assert peaks == sorted(peaks, reverse=True) and peaks[-1] < 0.6 * peaks[0]
    moved = [r.offloaded_bytes for r in runs]
    assert moved == sorted(moved) and all(r.prefetched_bytes == r.offloaded_bytes for r in runs)
    assert runs[-1].iteration_time_ns > runs[0].iteration_time_ns


def test_the_block_plan_is_the_fewest_blocks_that_fit(gpt2):
    gpu = resolve_gpu("h200")
    budget = 9 * GiB
    plan = plan_blocks(gpt2, gpu, budget)
    assert plan.fits and 0 < plan.blocks < plan.total == 12
    assert not run_trace(gpt2, gpu, "vdnn_blocks", {"blocks": plan.blocks - 1}, budget,
                         record=False).fits
    assert run_trace(gpt2, gpu, "vdnn_blocks", {"blocks": plan.blocks}, budget,
                     record=False).fits
    via = run_trace(gpt2, gpu, "vdnn_blocks", {"budget": budget}, budget, record=False)
    assert via.fits and via.iteration_time_ns == plan.iteration_time_ns


def test_block_policy_rejects_bad_options_and_traces(gpt2):
    gpu = resolve_gpu("h200")
    for bad in ({"blocks": -1}, {"blocks": "x"}, {"blocks": True}, {"blocks": 2, "budget": 1},
                {"nope": 1}):
        with pytest.raises(ConfigError):
            run_trace(gpt2, gpu, "vdnn_blocks", bad, record=False)
    from vdnnsim.api import build_trace
    vgg = build_trace("vgg16", 32, gpu)
    with pytest.raises(ConfigError, match="no blocks"):
        run_trace(vgg, gpu, "vdnn_blocks", {}, record=False)


def test_vdnnsim_plan_writes_a_block_plan(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({
        "network": str(PROFILED / "main-gpt2-b8-s1024-autocast-bf16.yaml.gz"),
        "batch_size": 8, "gpu": "h200", "optimizer": "adamw", "policy": "eager"}))
    out = tmp_path / "plan.yaml"
    r = run_cli(["plan", str(cfg), "--budget", "9 GiB", "-o", str(out)], cwd=ROOT)
    assert r.returncode == 0, r.stderr
    plan = yaml.safe_load(out.read_text())
    assert plan["format"] == BLOCK_FORMAT and plan["total_blocks"] == 12
    assert 0 < plan["blocks"] < 12 and plan["optimizer"] == "adamw"
    assert "offload the first" in r.stdout


torch = pytest.importorskip("torch")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _grads(offload: int | None, precision: str = "fp32"):
    from vdnnsim.gpu.runtime.blocks import BlockOffload
    from vdnnsim.gpu.model.workload import build_workload, training_step

    torch.manual_seed(0)
    kw = {"n_layer": 4, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    with torch.device("cuda"):
        work = build_workload("hf:gpt2", 256, None, kw)
    rt = BlockOffload(work.model, offload) if offload is not None else None
    step = training_step(work, 8, "cuda", precision, "sgd")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step.optimizer.zero_grad(set_to_none=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    # fp32 SDPA takes the memory-efficient kernel, whose backward is not deterministic (two
    # plain steps differed on the H200): the math kernel's is
    with sdpa_kernel(SDPBackend.MATH) if precision == "fp32" else contextlib.nullcontext():
        step.backward(step.forward())
    if rt is not None:
        rt.end_iteration()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    grads = {n: p.grad.detach().clone() for n, p in work.model.named_parameters()
             if p.grad is not None}
    stats = dict(rt.stats) if rt is not None else {}
    if rt is not None:
        rt.remove()
    del work, step, rt
    gc.collect()
    torch.cuda.empty_cache()
    return grads, peak, stats


@cuda
def test_offloaded_blocks_give_bit_identical_gradients_in_fp32():
    torch.backends.cuda.matmul.allow_tf32 = False
    base, peak0, _ = _grads(None)
    again, _, _ = _grads(None)
    same = all(torch.equal(base[n], again[n]) for n in base)
    assert same, "two plain steps differ: the kernels are not deterministic here"
    off, peak4, stats = _grads(4)
    assert stats["offloaded_bytes"] > 0 and stats["late_fetches"] <= stats["offloaded_bytes"]
    assert set(off) == set(base)
    assert all(torch.equal(base[n], off[n]) for n in base)
    assert peak4 < peak0


@cuda
def test_offloaded_blocks_run_under_autocast():
    base, _, _ = _grads(None, "autocast-bf16")
    off, _, stats = _grads(2, "autocast-bf16")
    assert stats["offloaded_bytes"] > 0
    assert all(torch.equal(base[n], off[n]) for n in base)


@cuda
def test_blocks_by_path_of_a_factory_cnn_give_identical_gradients():
    """NOTE [blocks]: a CNN with no ModuleList of blocks (timm's CSPResNet: stages of
    Sequential blocks, found by its calls) offloads its blocks by the paths its meta-device
    trace names, and its gradients are the plain step's to the bit."""
    pytest.importorskip("timm")
    from vdnnsim.api import resolve_gpu
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.gpu.runtime.blocks import BlockOffload
    from vdnnsim.gpu.model.workload import build_workload
    from vdnnsim.planners.greedy import block_paths
    from vdnnsim.trace import trace_from_dict

    kw = {"model_name": "cspresnet50"}
    d = memory_trace("timm:create_model", 8, resolve_gpu("h200"), "fp32", None, kw,
                     "image:3,64,64")
    paths = block_paths(trace_from_dict(d, "cspresnet50"))
    assert paths and "stages.0.blocks.0" in paths
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False

    def grads(offload):
        torch.manual_seed(0)
        with torch.device("cuda"):
            work = build_workload("timm:create_model", None, "image:3,64,64", kw)
        return block_step_grads(work, BlockOffload(work.model, offload, paths)
                                if offload else None)

    base, _ = grads(0)
    off, stats = grads(len(paths) // 2)
    assert stats["offloaded_bytes"] > 0
    assert set(off) == set(base) and all(torch.equal(base[n], off[n]) for n in base)


# NOTE [block recompute] ---------------------------------------------------------------

RESNET = ("torchvision.models:resnet18", "image:3,32,32")


@pytest.fixture(scope="module")
def resnet_trace():
    """A factory CNN's meta-device trace: its blocks by call (NOTE [blocks])."""
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace import trace_from_dict
    d = memory_trace(RESNET[0], 8, resolve_gpu("h200"), "fp32", None, {}, RESNET[1])
    return trace_from_dict(d, "resnet18")


def test_checkpointed_blocks_lower_the_peak_and_their_segments_are_their_own_ops(
        resnet_trace):
    from vdnnsim.planners.greedy import block_paths
    from vdnnsim.policies.blocks import block_segments
    paths = block_paths(resnet_trace)
    # the root's calls in order: the root's ReLU and pooling are called once, so blocks
    assert paths[:6] == ["conv1", "bn1", "relu", "maxpool", "layer1.0", "layer1.1"]
    segs = block_segments(resnet_trace, 6)
    # the root's ReLU writes bn1's output in place: never checkpointed
    assert list(segs) == ["conv1", "bn1", "maxpool", "layer1.0", "layer1.1"]
    for path, (a, b) in segs.items():
        mods = {x.attrs["module"] for x in resnet_trace.layers[a:b + 1]}
        assert all(m == path or m.startswith(path + ".") for m in mods)
    # layer1.0's residual add and ReLU run in the block (BasicBlock.forward): its own
    gpu = resolve_gpu("h200")
    eager = run_trace(resnet_trace, gpu, "eager", record=False)
    rec = run_trace(resnet_trace, gpu, "vdnn_blocks", {"recompute": 6}, record=False)
    assert rec.peak_memory_bytes < eager.peak_memory_bytes and rec.offloaded_bytes == 0
    with pytest.raises(ConfigError, match="recompute does not go with budget"):
        run_trace(resnet_trace, gpu, "vdnn_blocks", {"recompute": 2, "budget": 10**9})


def test_the_block_plan_checkpoints_where_that_is_faster():
    """On the H200 profile of cspresnet50 at batch 256 (session 11), a 12 GiB budget: the
    first 7 of 30 blocks offloaded fit at 4.7x the step; checkpointing 11 fits far faster,
    and the plan file says which (the runtime checkpoints those modules)."""
    t = load_trace(ROOT / "traces/h200_timm_heldout/measured_planned/plan256/cspresnet50.b256.yaml.gz")
    gpu = resolve_gpu("h200")
    p = plan_blocks(t, gpu, 12 * GiB)
    off = next(x for x in p.tried if x[1])
    assert p.fits and p.recompute > 0 and p.blocks == 0
    assert p.iteration_time_ns < off[3] / 2
    from vdnnsim.planners.greedy import block_plan_to_dict
    d = block_plan_to_dict(t, gpu, 12 * GiB, p)
    assert d["recompute_blocks"] == p.recompute and d["blocks"] == 0
    assert 0 < len(d["recompute_paths"]) <= p.recompute
    assert d["block_paths"][0] == "stem"


def test_checkpointed_blocks_give_identical_gradients_on_a_cpu():
    """The runtime's checkpointing of the first blocks (by path), gradients to the bit,
    and the model's own forward back after remove()."""
    from vdnnsim.gpu.runtime.blocks import BlockOffload
    from vdnnsim.gpu.model.workload import build_workload, training_step

    paths = ["conv1", "bn1", "relu", "maxpool", "layer1.0", "layer1.1", "layer2.0"]

    def grads(recompute: list[str]):
        torch.manual_seed(0)
        work = build_workload(RESNET[0], None, RESNET[1], {})
        rt = BlockOffload(work.model, 0, paths, recompute) if recompute else None
        step = training_step(work, 4, "cpu", "fp32", "sgd")
        step(update=False)  # NOTE [training step]: the gradients, no optimizer step
        out = {n: p.grad.detach().clone() for n, p in work.model.named_parameters()}
        if rt is not None:
            assert "forward" in work.model.conv1.__dict__  # wrapped
            rt.remove()
            assert "forward" not in work.model.conv1.__dict__  # its own again
        return out

    base = grads([])
    for rec in (["conv1", "bn1"], ["conv1", "bn1", "maxpool", "layer1.0", "layer1.1"]):
        got = grads(rec)
        assert set(base) == set(got) and all(torch.equal(base[n], got[n]) for n in base)
    # why block_segments leaves a block that writes its input in place alone: autograd
    # refuses the checkpoint of the root's ReLU(inplace=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        grads(["relu"])
    with pytest.raises(ValueError, match="one or the other"):
        BlockOffload(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2),
                                         torch.nn.Linear(2, 2)), 1, ["0", "1", "2"], ["0"])


@pytest.mark.skipif(not HAS_HF, reason="needs transformers")
def test_checkpointed_transformer_blocks_run_without_a_kv_cache():
    """A checkpointed block's recomputation must not extend a KV cache its forward filled:
    BLOOM's recomputed attention saw twice the keys (the H200's planned run of issue 28's
    bloom-560m failed so). The runtime turns the cache off as transformers' own gradient
    checkpointing does, gradients stay those of the plain step, and remove() restores it."""
    from vdnnsim.gpu.runtime.blocks import BlockOffload
    from vdnnsim.gpu.model.workload import build_workload, training_step

    spec = f"hf:{ROOT / 'tests/hf/bloom-tiny.yaml'}"

    def grads(checkpoint: bool):
        torch.manual_seed(0)
        work = build_workload(spec, 16)
        assert work.model.config.use_cache
        blocks = ["transformer.h.0", "transformer.h.1"]
        rt = BlockOffload(work.model, 0, blocks, blocks) if checkpoint else None
        step = training_step(work, 2, "cpu", "fp32", "sgd")
        step(update=False)
        out = {n: p.grad.detach().clone() for n, p in work.model.named_parameters()}
        if rt is not None:
            rt.remove()
            assert work.model.config.use_cache  # the model's own setting back
        return out

    # one intra-op thread, so both steps sum in one order: the comparison is bit for bit,
    # and it failed once under a loaded parallel run (cause not shown; a BLAS whose
    # threading follows the machine's load would do it)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        base, got = grads(False), grads(True)
    finally:
        torch.set_num_threads(threads)
    assert set(base) == set(got) and all(torch.equal(base[n], got[n]) for n in base)
