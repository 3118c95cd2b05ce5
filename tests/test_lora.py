"""NOTE [lora]: an hf: model fine-tuned with PEFT's LoRA adapters, traced on the meta
device. The expected bytes are counted here from the model's shape (transformers builds
the base alone, the adapters are r x in + out x r per target), not from the code under
test. Skipped without torch, transformers or peft."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from vdnnsim.errors import ConfigError  # noqa: E402

from .conftest import HAS_HF, run_cli  # noqa: E402

HAS_PEFT = importlib.util.find_spec("peft") is not None
pytestmark = [pytest.mark.skipif(not HAS_HF, reason="needs transformers"),
              pytest.mark.skipif(not HAS_PEFT, reason="needs peft (pip install "
                                 "'vdnnsim[peft]')")]

# a two-layer Llama of width 256 (grouped-query attention: 4 heads, 2 of them key/value)
SHAPE = {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}
ARGS = [a for k, v in SHAPE.items() for a in ("--model-arg", f"{k}={v}")]
R = 8
LORA = f"r={R},alpha=16,targets=q_proj+v_proj"


def _expected() -> tuple[int, int, int]:
    """(base parameter bytes, adapter bytes, buffer bytes) of the test model, fp32."""
    import transformers
    cfg = transformers.AutoConfig.for_model(
        "llama", **SHAPE, max_position_embeddings=2048, tie_word_embeddings=False)
    with torch.device("meta"):
        base = transformers.AutoModelForCausalLM.from_config(cfg)
    base_bytes = sum(p.numel() * 4 for p in base.parameters())
    buffers = sum(b.numel() * b.element_size() for b in base.buffers())
    h, heads, kv = SHAPE["hidden_size"], SHAPE["num_attention_heads"], SHAPE["num_key_value_heads"]
    q_out, v_out = h, kv * (h // heads)
    per_layer = (R * h + q_out * R) + (R * h + v_out * R)  # lora_A and lora_B of q and v
    return base_bytes, SHAPE["num_hidden_layers"] * per_layer * 4, buffers


def _trace(tmp_path, *extra):
    from vdnnsim.trace import load_trace
    out = tmp_path / f"t{len(list(tmp_path.iterdir()))}.yaml"
    r = run_cli(["trace", "--model", "hf:llama-1b", *ARGS, "-b", "2", "--seq-len", "64",
                 "--optimizer", "adamw", "--gpu", "h200", "-o", str(out), *extra])
    assert r.returncode == 0, r.stderr
    return load_trace(out)


def test_lora_trace_holds_the_base_frozen_and_trains_the_adapters(tmp_path):
    from vdnnsim.api import resolve_gpu, run_trace
    base, adapters, buffers = _expected()
    ws = resolve_gpu("h200").cublas_workspace_bytes
    full = _trace(tmp_path)
    lora = _trace(tmp_path, "--lora", LORA)
    # full fine-tuning: every weight trained, AdamW's two moments of each, one temporary
    assert full.weight_bytes == base
    assert full.resident_bytes == buffers + ws + 2 * base
    assert full.step_workspace_bytes == base
    # LoRA: the adapters are the layers' weights (gradients, moments, the step's
    # temporary); the frozen base is held in resident_bytes with nothing else of its own
    assert lora.weight_bytes == adapters
    assert lora.resident_bytes == buffers + ws + base + 2 * adapters
    assert lora.step_workspace_bytes == adapters
    held = lora.weight_bytes + lora.resident_bytes - buffers - ws - 2 * adapters
    assert held == base + adapters  # the weights on the GPU: base and adapters
    note = lora.source.note
    assert f"LoRA {LORA} (PEFT): {base} bytes of frozen base weights resident" in note
    assert '"lora": "r=8,alpha=16,targets=q_proj+v_proj"' in note  # the model argument
    gpu = resolve_gpu("h200")
    a, b = (run_trace(t, gpu, "eager") for t in (full, lora))
    assert b.peak_footprint_bytes < a.peak_footprint_bytes
    assert b.peak_breakdown.get("weight_grads", 0) <= adapters
    assert a.peak_breakdown.get("weight_grads", 0) > adapters


def test_frozen_activations_need_no_gradient_before_the_first_adapter():
    """The embedding's output reads a frozen table only: no gradient flows into it, as in
    PyTorch, where only the adapters ask for one."""
    from vdnnsim.gpu.probe.aten import probe_workload
    _, p = probe_workload("hf:llama-1b", 2, "fp32", 16, dict(SHAPE, lora=LORA))
    first = p.nodes[0]
    assert first.kind == "embedding" and not first.requires_grad
    assert not first.weight_bytes
    assert p.nodes[-1].requires_grad  # the loss


@pytest.mark.parametrize("lora, says", [
    ("r=8,targets=nope", "--lora targets nope match no module"),
    ("r=8,targets=q_proj+nope", "--lora targets nope match no module"),
    ("r=0", "r must be at least 1"),
    ("r=8,alpha=-1", "alpha must be positive"),
    ("r=8,dropout=1.5", "dropout must be in [0, 1)"),
    ("r=8,rank=3", "unknown key 'rank'"),
    ("r=8,bits=4", "4-bit base (QLoRA, bitsandbytes) is not modelled"),
    ("r=8,bits=8", "8-bit base (QLoRA, bitsandbytes) is not modelled"),
    ("r", "'r' is not KEY=VALUE"),
])
def test_bad_lora_settings_are_one_line_errors(tmp_path, lora, says):
    r = run_cli(["trace", "--model", "hf:llama-1b", *ARGS, "-b", "2", "--seq-len", "16",
                 "--lora", lora, "-o", str(tmp_path / "t.yaml")])
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert not (tmp_path / "t.yaml").exists()


@pytest.mark.parametrize("argv, says", [
    (["trace", "--model", "torchvision:resnet18", "-b", "2", "--lora", "r=8"],
     "--lora goes with hf: models"),
    (["trace", "alexnet", "-b", "2", "--lora", "r=8"], "--lora goes with --model hf:NAME"),
    (["trace", "--model", "hf:gpt2", "-b", "2", "--lora", "r=8", "--model-arg", "lora=r=4"],
     "give --lora or --model-arg lora=..., not both"),
    (["profile", "--model", "hf:gpt2", "-b", "2", "--lora", "r=8,bits=4"],
     "bitsandbytes"),
    (["measure", "--model", "torchvision:resnet18", "-b", "2", "--lora", "r=8"],
     "--lora goes with hf: models"),
])
def test_lora_refused_where_it_does_not_go(tmp_path, argv, says):
    r = run_cli([*argv, "-o", str(tmp_path / "t.yaml")] if argv[0] != "measure" else argv)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr


def test_measure_builds_the_model_the_trace_did():
    """``measure --lora`` and ``measure --repeat``'s children pass the settings as the
    model argument ``lora``, which build_workload turns into the same PeftModel as the
    trace's probe (one builder)."""
    from vdnnsim.gpu.model.lora import canonical
    from vdnnsim.gpu.model.workload import build_workload
    assert canonical("targets=q_proj+v_proj, alpha=16 ,r=8") == LORA
    with torch.device("meta"):
        w = build_workload("hf:llama-1b", 16, None, dict(SHAPE, lora=LORA))
    trainable = {n for n, q in w.model.named_parameters() if q.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert sum(q.numel() * 4 for q in w.model.parameters() if q.requires_grad) == \
        _expected()[1]
    with pytest.raises(ConfigError, match="match no module"):
        with torch.device("meta"):
            build_workload("hf:llama-1b", 16, None, dict(SHAPE, lora="targets=nope"))


def test_the_tensor_runtime_runs_a_plan_of_a_lora_trace_on_the_cpu():
    """A plan of the LoRA model's op trace that offloads saved activations: the tensor
    runtime finds them in the PeftModel's step (its probe built from the plan's model
    arguments, as the trace's was), and the adapters' gradients are the plain step's."""
    from vdnnsim.gpu.model.workload import build_workload, training_step
    from vdnnsim.gpu.probe.aten import probe_workload
    from vdnnsim.gpu.profile.assemble import assemble
    from vdnnsim.gpu.runtime.tensors import TensorOffload

    from .test_tensor_runtime import layer_plan

    # eager attention: on the CPU SDPA takes another path than the meta device's math one
    kwargs, batch, seq = dict(SHAPE, lora=LORA, attn_implementation="eager"), 2, 16
    trace = assemble(probe_workload("hf:llama-1b", batch, "fp32", seq, kwargs,
                                    as_cuda=False)[1])
    saved = dict.fromkeys(t for x in trace["layers"] for t in x["saved"])
    offload = [t for t in saved if t != "data" and ":" not in t][2:5]
    plan = layer_plan(trace, offload, model="hf:llama-1b", batch_size=batch, seq_len=seq,
                      model_args=kwargs)

    def grads(runtime: bool) -> dict:
        torch.manual_seed(0)
        work = build_workload("hf:llama-1b", seq, None, kwargs)
        rt = TensorOffload.from_plan(work.model, plan, model_kwargs=kwargs) if runtime \
            else None
        step = training_step(work, batch, "cpu", "fp32", "sgd",
                             **({"context": rt.context} if rt else {}))
        step(update=False)
        if rt is not None:
            assert rt.stats["offloads"] == len(offload)
            rt.end_iteration()
            rt.remove()
        return {n: q.grad for n, q in work.model.named_parameters() if q.requires_grad}

    plain, offloaded = grads(False), grads(True)
    assert plain.keys() == offloaded.keys() and plain
    assert all(torch.equal(plain[n], offloaded[n]) for n in plain)
