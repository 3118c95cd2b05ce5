"""An encoder-decoder's input stated apart from its labels (NOTE [seq2seq inputs]): Whisper's
mel spectrogram, Pegasus' tokens and labels; and a classifier's task
``sequence_classification`` (NOTE [hf models])."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from .conftest import HAS_HF, run_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WHISPER = f"hf:{ROOT / 'tests' / 'hf' / 'whisper-tiny.yaml'}"
PEGASUS = f"hf:{ROOT / 'tests' / 'hf' / 'pegasus-tiny.yaml'}"
ROBERTA = f"hf:{ROOT / 'tests' / 'hf' / 'roberta-tiny.yaml'}"
pytestmark = pytest.mark.skipif(not HAS_HF, reason="needs transformers")


def _rows(p, kind="_log_softmax"):
    return [n.out_shape for n in p.nodes if n.kind == kind]


@pytest.mark.parametrize("inp,labels", [(None, 32), ("mel:16,100;labels:20", 20)])
def test_an_audio_encoder_decoder_takes_a_mel_spectrogram_and_labels(inp, labels):
    """Whisper built by AutoModelForSpeechSeq2Seq; unstated, its input is the config's mel
    bins by twice its source positions, its labels as many as the decoder's positions."""
    from vdnnsim.gpu.probe.aten import probe_workload
    w, p = probe_workload(WHISPER, 2, "fp32", None, None, inp)
    assert type(w.model).__name__ == "WhisperForConditionalGeneration"
    assert (w.kind, w.shape, w.labels) == ("audio", (16, 100), labels)
    assert _rows(p, "convolution")[0] == (2, 64, 100)  # the encoder's first conv
    assert p.data_shape == (2, 16, 100)
    assert _rows(p) == [(2 * labels, 200)]  # the loss over the decoder's labels


def test_an_audio_encoder_decoder_trains_on_the_cpu():
    from vdnnsim.gpu.model.workload import build_workload, training_step
    w = build_workload(WHISPER, 8)  # --seq-len: its labels
    step = training_step(w, 2, "cpu", "fp32", "adamw")
    assert step.batch["input_features"].shape == (2, 16, 100)
    assert step.batch["labels"].shape == (2, 8)
    loss = step.forward()
    step.backward(loss)
    assert torch.isfinite(loss)
    assert w.model.model.encoder.conv1.weight.grad is not None


@pytest.mark.parametrize("precision", ["fp32", "bf16", "autocast-bf16"])
def test_a_text_encoder_decoder_takes_its_labels_apart(precision):
    from vdnnsim.gpu.probe.aten import probe_workload
    w, p = probe_workload(PEGASUS, 2, precision, None, None, "tokens:32;labels:8")
    assert (w.kind, w.shape, w.labels) == ("tokens", (32,), 8)
    assert _rows(p)[-1][0] == 2 * 8
    assert p.data_shape == (2, 32)


def test_without_input_a_text_encoder_decoder_is_as_before():
    """--seq-len tokens in and as many labels: the ids are both (T5 and BART's traces)."""
    from vdnnsim.gpu.model.workload import build_workload
    with torch.device("meta"):
        w = build_workload(PEGASUS, 16)
    assert (w.shape, w.labels) == ((16,), None)
    b = w.batch(2, "cpu")
    assert b["labels"] is b["input_ids"]


def test_a_sequence_classifier_is_scored_on_one_class_a_sequence():
    from vdnnsim.gpu.model.workload import build_workload, training_step
    w = build_workload(ROBERTA, 16)
    step = training_step(w, 4, "cpu", "fp32", "adamw")
    assert step.batch["labels"].shape == (4,) and int(step.batch["labels"].max()) < 3
    loss = step.forward()
    assert torch.isfinite(loss)


@pytest.mark.parametrize("spec,argv,frag", [
    (WHISPER, ["--input", "mel:80,100"], "the model takes 16 mel bins"),
    (WHISPER, ["--input", "tokens:32"], "an audio encoder takes mel:BINS,FRAMES"),
    (WHISPER, ["--input", "labels:99"], "the decoder takes up to 32 labels"),
    (WHISPER, ["--input", "labels:9", "--seq-len", "9"], "not both"),
    (PEGASUS, ["--input", "mel:16,100"], "a text encoder takes tokens:N"),
    (PEGASUS, ["--input", "tokens:x"], "use tokens:N;labels:M"),
    (PEGASUS, ["--input", "tokens:65"], "up to 64 tokens"),
    (ROBERTA, ["--input", "tokens:8"], "an hf: model's input comes from its config"),
])
def test_a_bad_input_is_one_line(spec, argv, frag):
    r = run_cli(["trace", "--model", spec, "-b", "1", "-o", "-", *argv], cwd=ROOT)
    assert r.returncode == 2 and frag in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len([x for x in r.stderr.splitlines() if x.startswith("vdnnsim:")]) == 1
