"""NOTE [diffusers models]: a UNet2DConditionModel and an SD3Transformer2DModel built from
configs (tiny ones in tests/diffusers/), traced on the meta device with the training step
NOTE [diffusion step] states, checked against what a real CPU step saves; their --input
errors, and the error without diffusers. Skipped without torch or diffusers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from .conftest import run_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
UNET = f"diffusers:{ROOT / 'tests' / 'diffusers' / 'unet-tiny.yaml'}"
SD3 = f"diffusers:{ROOT / 'tests' / 'diffusers' / 'sd3-tiny.yaml'}"
HAS_DIFFUSERS = importlib.util.find_spec("diffusers") is not None
pytestmark = pytest.mark.skipif(not HAS_DIFFUSERS, reason="needs diffusers (pip install "
                                "'vdnnsim[diffusers]')")
NOTES = {UNET: "; inputs: noisy latents (2, 4, 16, 16), an integer timestep a sample, text "
               "encoder states (2, 77, 32); loss: MSE of the output against the noise "
               "(epsilon prediction)",
         SD3: "; inputs: noisy latents (2, 4, 16, 16), a timestep a sample, text encoder "
              "states (2, 77, 32), pooled text projections (2, 24); loss: MSE of the output "
              "against noise - latents (flow matching's velocity)"}


def _param_bytes(spec: str, precision: str) -> int:
    from vdnnsim.gpu.model.workload import build_workload
    with torch.device("meta"):
        w = build_workload(spec)
    size = 4 if precision.startswith(("fp32", "autocast")) else 2
    return sum(p.numel() for p in w.model.parameters()) * size


@pytest.mark.parametrize("precision", ["fp32", "bf16", "autocast-bf16"])
@pytest.mark.parametrize("spec", [UNET, SD3])
def test_a_diffusion_model_traces_on_the_meta_device(spec, precision):
    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace import trace_from_dict
    d = memory_trace(spec, 2, resolve_gpu("h100"), precision)
    assert d["source"]["note"].endswith(NOTES[spec])
    trace = trace_from_dict(d, "t")
    assert trace.tensors["data"].size_bytes == 2 * 4 * 16 * 16 * (2 if precision == "bf16"
                                                                  else 4)
    assert trace.layers[-1].kind == "mse_loss"  # the loss, in fp32 whatever the precision
    # every weight trained: the ops read them all, none is left resident
    assert trace.weight_bytes == _param_bytes(spec, precision)
    r = run_trace(trace, resolve_gpu("h100"), "eager", record=False)
    assert r.peak_memory_bytes > trace.weight_bytes and r.iteration_time_ns > 0


def _saved_on_cpu(work, batch) -> int:
    """What autograd keeps at the end of a real forward pass on the CPU: the storages of
    its saved tensors, weights left out, each once."""
    skip = {q.untyped_storage().data_ptr() for q in work.model.parameters()}
    held: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            held[st.data_ptr()] = st.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        work.loss(work.model, batch)
    return sum(held.values())


@pytest.mark.parametrize("spec", [UNET, SD3])
def test_the_meta_trace_is_what_a_cpu_step_saves(spec):
    """The same step run for real on the CPU, probed with real tensors (the profiler's
    path: it records what autograd saves, to the byte), against the meta device's probe:
    they differ only in SDPA's kernel (the CPU's flash against CUDA's memory-efficient one,
    whose log-sum-exp is padded), under 1% in saved bytes and in the replayed peak."""
    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.gpu.model.workload import build_workload
    from vdnnsim.gpu.probe.aten import probe_ops, probe_workload
    from vdnnsim.gpu.profile.assemble import assemble
    from vdnnsim.trace import trace_from_dict

    def saved(p):
        return sum({s.tensor: s.nbytes for n in p.nodes for s in n.saved}.values())

    def peak(p):
        return run_trace(trace_from_dict(assemble(p), "t"), resolve_gpu("h200"), "eager",
                         record=False).peak_memory_bytes

    torch.manual_seed(0)
    work = build_workload(spec)
    batch = work.batch(2, "cpu")
    cpu = probe_ops(work.model, batch, work.loss, work.name)
    assert saved(cpu) == _saved_on_cpu(work, batch)
    _, meta = probe_workload(spec, 2, "fp32")
    assert saved(meta) == pytest.approx(saved(cpu), rel=0.01)
    assert peak(meta) == pytest.approx(peak(cpu), rel=0.01)


@pytest.mark.parametrize("spec", [UNET, SD3])
def test_a_diffusion_model_trains_on_the_cpu(spec):
    from vdnnsim.gpu.model.workload import build_workload, training_step
    w = build_workload(spec, input_spec="latents:4,8,8;text:5")
    step = training_step(w, 2, "cpu", "fp32", "adamw")
    assert next(iter(step.batch.values())).shape == (2, 4, 8, 8)  # the latents first
    assert step.batch["encoder_hidden_states"].shape == (2, 5, 32)
    assert step.batch["target"].shape == (2, 4, 8, 8)
    loss = step.forward()
    step.backward(loss)
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in w.model.parameters())


@pytest.mark.parametrize("spec,argv,frag", [
    (UNET, ["--input", "latents:3,16,16"], "the model takes 4 latent channels (in_channels), "
                                           "not 3"),
    (UNET, ["--input", "latents:4,16"], "the model takes latents:4,H,W;text:SEQ[,32]"),
    (UNET, ["--input", "tokens:8"], "the model takes latents:4,H,W;text:SEQ[,32]"),
    (UNET, ["--input", "text:77,768"], "text states 32 wide (cross_attention_dim), not 768"),
    (UNET, ["--seq-len", "77"], "takes its text length in --input text:SEQ"),
    (UNET, ["--model-arg", "n_layer=2"], "UNet2DConditionModel takes no n_layer"),
    (UNET, ["--model-arg", "addition_embed_type=text_time"], "takes conditions vdnnsim does "
                                                              "not make"),
    (SD3, ["--input", "latents:4,15,16"], "multiples of the patch size, 2"),
    (SD3, ["--input", "latents:4,64,64"], "latents up to 32 x 32 (pos_embed_max_size 16"),
    (SD3, ["--input", "text:9,16"], "text states 32 wide (joint_attention_dim), not 16"),
    (SD3, ["--lora", "r=8"], "--lora goes with hf: models"),
    ("diffusers:nope", [], "diffusers:nope: no such config (shipped: "),
])
def test_a_bad_input_is_one_line(spec, argv, frag):
    r = run_cli(["trace", "--model", spec, "-b", "1", "-o", "-", *argv], cwd=ROOT)
    assert r.returncode == 2 and frag in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len([x for x in r.stderr.splitlines() if x.startswith("vdnnsim:")]) == 1


def test_a_class_without_a_written_step_is_refused(tmp_path):
    spec = tmp_path / "vae.yaml"
    spec.write_text("name: vae\nclass: AutoencoderKL\nconfig: {}\n")
    r = run_cli(["trace", "--model", f"diffusers:{spec}", "-b", "1", "-o", "-"])
    assert r.returncode == 2 and "class must be one of UNet2DConditionModel, " \
        "SD3Transformer2DModel" in r.stderr, r.stderr


def test_without_diffusers_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "diffusers", None)  # import fails
    r = run_cli(["trace", "--model", UNET, "-b", "1", "-o", "-"])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("vdnnsim: error: diffusers: models need diffusers "
                                "(pip install 'vdnnsim[diffusers]')")


def test_the_shipped_specs_are_listed_and_build_the_hub_models():
    """SD 1.5's UNet has 859,520,964 parameters; SD3 Medium's MMDiT is its "2B"."""
    from vdnnsim.gpu.model.workload import build_workload
    r = run_cli(["list", "networks"])
    assert ("diffusers models (vdnnsim measure --model; vdnnsim[diffusers]): "
            "diffusers:sd15-unet, diffusers:sd3-medium-transformer") in r.stdout
    with torch.device("meta"):
        unet = build_workload("diffusers:sd15-unet")
        mmdit = build_workload("diffusers:sd3-medium-transformer")
    assert sum(p.numel() for p in unet.model.parameters()) == 859_520_964
    assert unet.info["inputs"] == {"latents": (4, 64, 64), "text": (77, 768),
                                   "target": (4, 64, 64)}
    assert 2.0e9 < sum(p.numel() for p in mmdit.model.parameters()) < 2.1e9
    assert mmdit.info["inputs"]["pooled"] == (2048,)
    assert mmdit.info["inputs"]["latents"] == (16, 128, 128)


def test_measure_repeat_children_build_the_same_model():
    """measure --repeat's processes get the model's --input and --model-arg."""
    import argparse

    from vdnnsim.measured.repeat import child_argv
    args = argparse.Namespace(model=UNET, batch_size=2, optimizer="adamw", dtype="bf16",
                              warmup=1, iters=1, model_arg=["layers_per_block=2"],
                              input="latents:4,32,32;text:77", seq_len=None, plan=None,
                              policy="baseline")
    argv = child_argv(args, None)
    assert argv[argv.index("--input") + 1] == "latents:4,32,32;text:77"
    assert argv[argv.index("--model-arg") + 1] == "layers_per_block=2"
