"""NOTE [step options]: gradient accumulation (``--micro-batches``) and the model's own
gradient checkpointing (``--grad-checkpointing``) on trace, profile and measure, and their
replay (NOTE [accumulation replay], NOTE [own checkpointing]). The engine's half runs on a
handwritten trace; the model's half on a two-layer Llama, traced on the meta device and run
for real on the CPU. No number here depends on the machine's speed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.engine.compile import PlanError
from vdnnsim.trace import load_trace, trace_from_dict, trace_to_dict

from .conftest import HAS_HF, run_cli

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "docs" / "examples" / "tiny_trace.yaml"
# a two-layer Llama of width 256 (as tests/test_lora.py's)
SHAPE = {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}
ARGS = [a for k, v in SHAPE.items() for a in ("--model-arg", f"{k}={v}")]
needs_hf = pytest.mark.skipif(not HAS_HF, reason="needs torch and transformers")


def _pytorch(trace, **changes):
    """The handwritten example under PyTorch's semantics, with ``changes``."""
    return replace(trace, source=replace(trace.source, framework="pytorch"), **changes)


# -- the engine -------------------------------------------------------------------------------
def test_micro_batches_replay_the_passes_and_add_the_gradients():
    """Three passes, then one step: the first backward allocates each weight gradient, the
    later two hold a new one of its size through the layer's backward pass (the add), and
    take the adds' time, spread over the layers by weight bytes."""
    gpu = resolve_gpu("h200")
    one = _pytorch(load_trace(TINY))
    three = replace(one, micro_batches=3, accumulate_ns=9000, host_accumulate_ns=0)
    a, b = (run_trace(t, gpu, "eager", record=True) for t in (one, three))
    for r, n in ((a, 1), (b, 3)):
        assert sum(1 for o in r.ops if o.kind == "fwd" and o.layer == "conv1") == n
        assert sum(1 for o in r.ops if o.kind == "bwd" and o.layer == "conv1") == n
    adds = [s for s in b.lifetimes if s[0].startswith("wgrad_add:")]
    weighted = {x.id: x.weight_bytes for x in one.layers if x.weight_bytes}
    assert sorted(s[0] for s in adds) == sorted(f"wgrad_add:{k}" for k in weighted for _ in "ab")
    assert not any(s[0].startswith("wgrad_add:") for s in a.lifetimes)
    # the GPU is the pace here (no host costs): three passes, two of adds, one step
    assert b.iteration_time_ns == 3 * (a.iteration_time_ns - one.step_ns) + one.step_ns + \
        2 * 9000
    assert b.peak_memory_bytes >= a.peak_memory_bytes
    # the oracle: every pass, the adds after the first, one step
    assert three.fastest_time_ns == 3 * (one.fastest_time_ns - one.step_ns) + \
        one.step_ns + 2 * 9000


def test_accumulation_is_refused_where_it_is_not_modelled():
    gpu = resolve_gpu("h200")
    t = replace(_pytorch(load_trace(TINY)), micro_batches=2)
    with pytest.raises(PlanError, match="unified memory with gradient accumulation"):
        run_trace(t, gpu, "uvm_lru", memory_bytes=2 * 2**20)
    with pytest.raises(PlanError, match="optimizer offload with gradient accumulation"):
        run_trace(t, gpu, "eager", optimizer_offload=True)


def test_the_models_own_segments_recompute_under_every_plan():
    """The trace's checkpointed segment runs its forward again before its last layer's
    backward pass (its time, once a micro-batch), drops what only it keeps, and a plan's
    own overlapping segment is refused."""
    gpu = resolve_gpu("h200")
    plain = _pytorch(load_trace(TINY))
    own = replace(plain, checkpointed=(("relu1", "pool1"),))
    fwd = sum(plain.layers[plain.layer_index(x)].algos[0].fwd_ns for x in ("relu1", "pool1"))
    assert own.fastest_time_ns == plain.fastest_time_ns + fwd
    for policy in ("eager", "baseline_p", "vdnn_all_p"):
        r = run_trace(own, gpu, policy, record=True)
        assert [o.layer for o in r.ops if o.kind == "recompute"] == ["relu1", "pool1"]
    with pytest.raises(PlanError, match="overlaps the model's own checkpointing"):
        run_trace(own, gpu, "checkpoint", {"segments": 2})


@pytest.mark.parametrize("change, says", [
    ({"micro_batches": 0}, "micro_batches: Input should be greater than or equal to 1"),
    ({"checkpointed": [["relu1", "nope"]]}, "checkpointed[0][1]: unknown layer 'nope'"),
    ({"checkpointed": [["pool1", "relu1"]]}, "checkpointed[0]: 'pool1' comes after 'relu1'"),
    ({"checkpointed": [["relu1", "pool1"], ["conv1", "relu1"]]},
     "checkpointed[1]: overlaps the segment before it"),
    ({"checkpointed": [["relu1"]]}, "checkpointed[0]"),
])
def test_bad_step_keys_are_one_line(tmp_path, change, says):
    d = trace_to_dict(load_trace(TINY))
    d.update(change)
    with pytest.raises(Exception) as err:
        trace_from_dict(d, "t.yaml")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_step_keys_survive_a_round_trip():
    t = replace(load_trace(TINY), micro_batches=4, accumulate_ns=7, host_accumulate_ns=3,
                checkpointed=(("relu1", "pool1"),))
    d = trace_to_dict(t)
    assert (d["micro_batches"], d["accumulate_ns"], d["host_accumulate_ns"],
            d["checkpointed"]) == (4, 7, 3, [["relu1", "pool1"]])
    assert trace_from_dict(d, "t") == t
    assert "micro_batches" not in trace_to_dict(load_trace(TINY))  # defaults left out


# -- the command line ---------------------------------------------------------------------
@pytest.mark.parametrize("argv, says", [
    (["--micro-batches", "0"], "--micro-batches: a whole number of micro-batches from 1 to "
                               "1,000,000, got 0"),
    (["--micro-batches", "2.5"], "--micro-batches: a whole number of micro-batches"),
    (["--micro-batches", "2", "--model-arg", "micro_batches=2"],
     "give --micro-batches or --model-arg micro_batches=..., not both"),
    (["--model-arg", "grad_checkpointing=3"],
     "model argument grad_checkpointing: true or false, got 3"),
])
def test_bad_values_are_one_line(argv, says):
    r = run_cli(["trace", "--model", "hf:llama-1b", *ARGS, "-b", "2", *argv, "-o", "-"])
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"vdnnsim: error: {says}") and r.stderr.count("\n") == 1


@pytest.mark.parametrize("argv, says", [
    (["trace", "vgg16", "-b", "2", "--micro-batches", "2"], "go with --model hf:NAME"),
    (["trace", "--model", "torchvision:resnet18", "-b", "2", "--grad-checkpointing"],
     "go with --model hf:NAME"),
    (["trace", "--model", "torchvision.models:resnet18", "--input", "image:3,32,32", "-b", "2",
      "--grad-checkpointing"], "--grad-checkpointing is the model's own switch, which hf: "
                               "and diffusers: models have"),
    (["trace", "--model", f"hf:{ROOT / 'tests' / 'hf' / 'mobilenet-tiny.yaml'}", "-b", "2",
      "--grad-checkpointing"], "MobileNetV1ForImageClassification does not support "
                               "gradient checkpointing"),
    (["measure", "--model", "hf:llama-1b", "-b", "2", "--micro-batches", "2",
      "--optimizer-offload"], "gradient accumulation (micro-batches) with the optimizer on "
                              "the CPU is not measured"),
])
def test_refusals_are_one_line(argv, says):
    if not HAS_HF and "hf:" in " ".join(argv):
        pytest.skip("needs transformers")
    r = run_cli(argv + ["-o", "-"] if argv[0] == "trace" else argv)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


# -- the model: traced on the meta device, run on the CPU -------------------------------------
def _trace(b: int, **kw):
    from vdnnsim.gpu.probe.aten import memory_trace
    return trace_from_dict(memory_trace("hf:llama-1b", b, resolve_gpu("h200"), "fp32", 128,
                                        {**SHAPE, **kw}), "t")


@needs_hf
def test_accumulation_peaks_between_its_micro_batch_and_its_global_batch():
    """Four micro-batches of 4 hold the gradients through every pass after the first: more
    than one batch of 4, less than one batch of 16; the step is four passes' time, the adds
    and one optimizer step."""
    gpu = resolve_gpu("h200")
    one, acc, big = _trace(4), _trace(4, micro_batches=4), _trace(16)
    assert (acc.batch_size, acc.micro_batches) == (4, 4)
    assert acc.accumulate_ns > 0 and acc.host_accumulate_ns > 0
    assert "4 micro-batches of 4 a step (gradient accumulation, a global batch of 16): " \
           "batch_size is the micro-batch's" in acc.source.note
    assert [x.id for x in acc.layers] == [x.id for x in one.layers]  # one micro-batch traced
    a, b, c = (run_trace(t, gpu, "eager") for t in (one, acc, big))
    assert a.peak_memory_bytes < b.peak_memory_bytes < c.peak_memory_bytes
    assert b.peak_breakdown["weight_grads"] == acc.weight_bytes  # all held, and one being
    assert a.peak_breakdown.get("weight_grads", 0) < acc.weight_bytes  # added (below)
    passes = a.iteration_time_ns - one.step_ns
    assert 4 * passes < b.iteration_time_ns <= 4 * passes + one.step_ns + 3 * (
        acc.accumulate_ns + acc.host_accumulate_ns)
    assert b.oracle_time_ns == 4 * (a.oracle_time_ns - one.step_ns) + one.step_ns + \
        3 * acc.accumulate_ns


@needs_hf
def test_re_timing_gives_the_adds_of_tracing_for_that_gpu():
    from vdnnsim.costs.retime import retime
    from vdnnsim.gpu.probe.aten import memory_trace
    made = trace_from_dict(memory_trace("hf:llama-1b", 4, resolve_gpu("h100"), "fp32", 128,
                                        {**SHAPE, "micro_batches": 4}), "t")
    again = retime(_trace(4, micro_batches=4), resolve_gpu("h100"))
    assert (again.accumulate_ns, again.host_accumulate_ns) == (made.accumulate_ns,
                                                               made.host_accumulate_ns)
    assert again.micro_batches == 4


@needs_hf
def test_gradient_checkpointing_is_the_plain_trace_recomputed_by_decoder_layer():
    """The checkpointed model traces as the plain one (transformers' use_cache off, as
    checkpointing sets it) with a segment a decoder layer; its replay recomputes those ops
    in the backward pass and holds less."""
    gpu = resolve_gpu("h200")
    plain, ck = _trace(4, use_cache=False), _trace(4, grad_checkpointing=True)
    assert [(x.id, x.saved) for x in ck.layers] == [(x.id, x.saved) for x in plain.layers]
    assert "the model's own gradient checkpointing (non-reentrant): 2 segments recomputed" \
        in ck.source.note
    assert len(ck.checkpointed) == 2
    inside = set()
    for k, (first, last) in enumerate(ck.checkpointed_segments):
        mods = {ck.layers[j].attrs["module"] for j in range(first, last + 1)}
        assert all(m.startswith(f"model.layers.{k}") for m in mods), mods
        inside.update(range(first, last + 1))
    assert all(j in inside for j, x in enumerate(ck.layers)
               if x.attrs["module"].startswith("model.layers."))
    a, b = (run_trace(t, gpu, "eager", record=True) for t in (plain, ck))
    again = [o.layer for o in b.ops if o.kind == "recompute"]
    assert again == [ck.layers[j].id for first, last in reversed(ck.checkpointed_segments)
                     for j in range(first, last + 1)]  # the last layer's first, backward
    assert not any(o.kind == "recompute" for o in a.ops)
    assert b.peak_memory_bytes < a.peak_memory_bytes
    assert b.oracle_time_ns == a.oracle_time_ns + sum(
        ck.layers[j].algos[0].fwd_ns for j in sorted(inside))


@needs_hf
def test_a_cpu_step_accumulates_and_recomputes_what_the_trace_says():
    """The training step measure runs, for real on the CPU: three micro-batches of the same
    batch leave three times one's gradients; with the model's checkpointing each decoder
    layer runs forward twice (its recompute, the segments the trace names) and the
    gradients are the plain step's."""
    import torch

    from vdnnsim.gpu.model import stepoptions
    from vdnnsim.gpu.model.workload import build_workload, training_step
    torch.manual_seed(0)
    work = build_workload("hf:llama-1b", 16, None, {**SHAPE, "grad_checkpointing": True})
    assert work.info == {**work.info, "micro_batches": 1, "grad_checkpointing": True}

    def grads(n: int) -> list:
        step = training_step(work, 2, "cpu", "fp32", "sgd", micro_batches=n)
        step(update=False)
        out = [q.grad.clone() for q in work.model.parameters()]
        step.zero_grad()
        return out
    calls: dict[int, int] = {}
    hooks = [layer.register_forward_pre_hook(  # (a forward hook misses the recompute,
        lambda m, i, k=k: calls.update({k: calls.get(k, 0) + 1}))  # which stops early)
        for k, layer in enumerate(work.model.model.layers)]
    ck1 = grads(1)
    assert calls == {0: 2, 1: 2}  # forward, then again in the backward pass
    ck3 = grads(3)
    assert calls == {0: 8, 1: 8}
    stepoptions.switch(work.model, "hf:llama-1b", False)
    plain = grads(1)
    assert calls == {0: 9, 1: 9}
    for h in hooks:
        h.remove()
    for a, b, c in zip(ck1, ck3, plain):
        assert torch.allclose(b, 3 * a, rtol=1e-5, atol=1e-7)
        assert torch.allclose(a, c, rtol=1e-5, atol=1e-7)


@needs_hf
def test_profile_on_the_cpu_writes_the_step_options(tmp_path):
    out = tmp_path / "p.yaml"
    r = run_cli(["profile", "--model", "hf:llama-1b", *ARGS, "--seq-len", "32", "-b", "2",
                 "--device", "cpu", "--trials", "1", "--micro-batches", "3",
                 "--grad-checkpointing", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    t = load_trace(out)
    assert t.micro_batches == 3 and t.accumulate_ns > 0 and t.host_accumulate_ns > 0
    assert len(t.checkpointed) == 2
    assert "3 micro-batches of 2 a step" in t.source.note
    assert "timed without its checkpointing" in t.source.note


def test_measure_repeat_children_get_the_step_options():
    """measure --repeat's fresh processes build the step the parent was asked for: the
    options travel as model arguments."""
    import argparse

    from vdnnsim.cli.common import fold_step_options
    from vdnnsim.measured.repeat import child_argv
    args = argparse.Namespace(model="hf:llama-1b", batch_size=2, optimizer="adamw",
                              dtype="bf16", warmup=1, iters=1, model_arg=["vocab_size=1000"],
                              input=None, seq_len=64, plan=None, policy="baseline",
                              micro_batches="4", grad_checkpointing=True)
    fold_step_options(args)
    argv = child_argv(args, None)
    given = [argv[k + 1] for k, a in enumerate(argv) if a == "--model-arg"]
    assert given == ["vocab_size=1000", "micro_batches=4", "grad_checkpointing=true"]


@needs_hf
def test_the_planners_plan_around_the_step_options():
    """Every planner plans a trace of micro-batches with the optimizer on the GPU (the CPU
    optimizer with accumulation is not modelled) and a trace of the model's own
    checkpointing without checkpointing or splitting it again."""
    from vdnnsim.planners.blocks import plan_blocks
    from vdnnsim.planners.greedy import search_plan
    from vdnnsim.planners.tensors import plan_tensors
    gpu = resolve_gpu("h200")
    acc, ck = _trace(4, micro_batches=4), _trace(4, grad_checkpointing=True)
    for t in (acc, ck):
        budget = int(0.9 * run_trace(t, gpu, "eager", record=False).peak_memory_bytes)
        b = plan_blocks(t, gpu, budget, None)
        assert not b.optimizer_offload or t.micro_batches == 1
        assert not (t.checkpointed and (b.recompute or b.tried_recompute))
        p = plan_tensors(t, gpu, budget, None)
        assert not p.optimizer_offload or t.micro_batches == 1
        assert p.plan is None or not any(t.checkpoints_any(a, z) for a, z in p.plan.recompute)
        g, _ = search_plan(t, gpu, budget)  # the greedy search, and the MILP's
        assert g is None or not any(t.checkpoints_any(a, z) for a, z in g.recompute)
