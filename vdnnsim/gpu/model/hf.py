"""Hugging Face transformers models built from a config in the repository (``hf:NAME``).

NOTE [hf models]
``hf:NAME`` names a file ``vdnnsim/data/hf/NAME.yaml`` (a ``/`` in a hub name is ``__``
in the file name: ``hf:google/vit-base-patch16-224``), and ``hf:PATH.yaml`` any file of
the same form: ``name``, ``task`` (``causal_lm``, ``masked_lm``, ``seq2seq_lm`` or
``image_classification``, ``sequence_classification``) and ``config``, the keyword arguments of the model's
``PretrainedConfig`` with its ``model_type``. The shipped files are the hub models'
``config.json`` written out, so nothing is downloaded: the model is built by
``AutoModelFor<task>.from_config`` with random weights, with PyTorch's SDPA attention
(``attn_implementation='sdpa'``) unless the config names another; a model class without an
SDPA path (a CNN such as BiT or MobileNet, or a model whose attention transformers writes
out) is built with ``'eager'``, the library's own.

The task sets the example batch and the loss: token ids of ``seq_len`` over the vocabulary with the ids as
labels (the model shifts them for a causal LM; a masked LM is scored at every position; an
encoder-decoder takes them as the encoder's input and, shifted right, as the decoder's),
a class per sequence (``sequence_classification``), or images of the config's size
(224 x 224 where it names none: a CNN takes any) with class labels; the loss is the
model's own (``outputs.loss``), as a training script calls it. An encoder-decoder's
input may be stated apart (NOTE [seq2seq inputs]).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import ConfigError

DATA = Path(__file__).resolve().parents[2] / "data" / "hf"
TASKS = ("causal_lm", "masked_lm", "seq2seq_lm", "image_classification",
         "sequence_classification")


def shipped() -> list[str]:
    """The hf: names this installation can build offline."""
    return sorted(p.stem.replace("__", "/") for p in DATA.glob("*.yaml"))


def read_spec(path: Path, label: str, shipped_names: list[str], keys: tuple[str, ...],
              config_required: bool = True) -> dict[str, Any]:
    """A model source's spec file (``label``: ``hf:NAME``, ``diffusers:NAME``): a YAML
    mapping of ``keys`` with a ``config`` mapping, checked; one-line errors."""
    import yaml

    if not path.is_file():
        raise ConfigError(f"{label}: no such config (shipped: {', '.join(shipped_names)}; or "
                          f"give a path to a .yaml with {', '.join(keys[:-1])} and {keys[-1]})")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
    config = data.get("config") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(
            config if config_required else (config or {}), dict):
        raise ConfigError(f"{path}: expected a mapping with {', '.join(keys[:-1])} and "
                          f"{keys[-1]}")
    unknown = set(data) - set(keys)
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    return data


def load_spec(name: str) -> dict[str, Any]:
    """The spec file of ``hf:NAME`` (or ``hf:PATH.yaml``), checked."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else DATA / f"{name.replace('/', '__')}.yaml"
    data = read_spec(path, f"hf:{name}", shipped(), ("name", "task", "config"))
    if data.get("task") not in TASKS:
        raise ConfigError(f"{path}: task must be one of {', '.join(TASKS)}, got "
                          f"{data.get('task')!r}")
    if not isinstance(data["config"].get("model_type"), str):
        raise ConfigError(f"{path}: config needs a model_type (gpt2, bert, vit, llama, ...)")
    data.setdefault("name", name)
    return data


def _supports_sdpa(auto, config) -> bool:
    """Whether the model class ``auto`` builds for ``config`` has an SDPA attention; a model
    without one (a CNN, or attention written out) is built with the library's eager path."""
    try:
        cls = auto._model_mapping[type(config)]
    except (KeyError, AttributeError):
        return True  # let the build say what it does not support
    return bool(getattr(cls, "_supports_sdpa", True))


def build(name: str, overrides: dict[str, Any] | None = None):
    """(model, spec) for ``hf:NAME``; ``overrides`` change config keys (``n_layer: 2``)."""
    try:
        import transformers
    except ImportError:
        raise ConfigError("hf: models need transformers (pip install 'vdnnsim[hf]')") from None
    spec = load_spec(name)
    cfg = dict(spec["config"])
    cfg.update(overrides or {})
    model_type = cfg.pop("model_type")
    attn = cfg.pop("attn_implementation", None)
    try:
        config = transformers.AutoConfig.for_model(model_type, **cfg)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"hf:{name}: {str(exc).splitlines()[0][:200]}") from None
    auto = {"causal_lm": transformers.AutoModelForCausalLM,
            "masked_lm": transformers.AutoModelForMaskedLM,
            "seq2seq_lm": transformers.AutoModelForSeq2SeqLM,
            "image_classification": transformers.AutoModelForImageClassification,
            "sequence_classification": transformers.AutoModelForSequenceClassification,
            }[spec["task"]]
    if spec["task"] == "seq2seq_lm" and audio(config):  # Whisper: a speech encoder-decoder
        auto = transformers.AutoModelForSpeechSeq2Seq
    if attn is None:
        attn = "sdpa" if _supports_sdpa(auto, config) else "eager"
    try:
        model = auto.from_config(config, attn_implementation=attn)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"hf:{name}: {str(exc).splitlines()[0][:200]}") from None
    spec = dict(spec, config=dict(spec["config"], **(overrides or {})))
    return model, spec


def audio(config: Any) -> bool:
    """Whether an encoder-decoder's encoder takes a spectrogram (Whisper's num_mel_bins)."""
    return isinstance(getattr(config, "num_mel_bins", None), int)


# NOTE [seq2seq inputs]
# An encoder-decoder (task ``seq2seq_lm``) takes the encoder's input and the decoder's
# labels (shifted right by the model as its decoder input). ``--input`` states them:
# ``tokens:N;labels:M`` (a text encoder), ``mel:BINS,FRAMES;labels:M`` (an audio
# encoder, Whisper's: BINS the config's num_mel_bins, FRAMES twice its
# max_source_positions, 3000, as its feature extractor pads every clip to 30 s); each part
# may be left out. Unstated, a text encoder takes ``--seq-len`` tokens and as many labels
# (as before); an audio encoder the config's mel bins and frames and ``--seq-len`` labels,
# up to the decoder's positions (448 for Whisper). The mel input is random, in the model's
# dtype; the labels are random token ids.
def input_parts(text: str | None, sizes: dict[str, tuple[int, ...]], bad: str
                ) -> dict[str, list[int]]:
    """``--input``'s ``KEY:N[,N...]`` parts separated by ``;``, each key once, with as many
    positive numbers as ``sizes`` allows it; ``bad``: the one-line error otherwise."""
    parts: dict[str, list[int]] = {}
    for item in (text or "").split(";"):
        key, _, value = (x.strip() for x in item.partition(":"))
        if not key and not value:
            continue
        try:
            nums = [int(v) for v in value.replace("x", ",").split(",")]
        except ValueError:
            nums = []
        if len(nums) not in sizes.get(key, ()) or min(nums) < 1 or key in parts:
            raise ConfigError(bad)
        parts[key] = nums
    return parts


def seq2seq_inputs(config: Any, spec: str, seq_len: int | None, input_spec: str | None
                   ) -> tuple[str, tuple[int, ...], int | None]:
    """(kind, encoder input's shape per sample, labels or None: as many as the input's
    tokens) of an encoder-decoder (NOTE [seq2seq inputs])."""
    parts = input_parts(input_spec, {"tokens": (1,), "labels": (1,), "mel": (2,)},
                        f"{spec}: --input {input_spec!r}: use tokens:N;labels:M or "
                        "mel:BINS,FRAMES;labels:M")
    if audio(config):
        if "tokens" in parts:
            raise ConfigError(f"{spec}: an audio encoder takes mel:BINS,FRAMES, not tokens")
        if seq_len and "labels" in parts:
            raise ConfigError(f"{spec}: give the labels in --input or --seq-len, not both")
        bins, frames = parts.get("mel", [config.num_mel_bins,
                                         2 * config.max_source_positions])
        if bins != config.num_mel_bins:
            raise ConfigError(f"{spec}: the model takes {config.num_mel_bins} mel bins "
                              f"(num_mel_bins), not {bins}")
        most = config.max_target_positions
        labels = parts.get("labels", [seq_len or min(512, most)])[0]
        kind, shape = "audio", (bins, frames)
    else:
        if "mel" in parts:
            raise ConfigError(f"{spec}: a text encoder takes tokens:N, not mel")
        if seq_len and "tokens" in parts:
            raise ConfigError(f"{spec}: give the tokens in --input or --seq-len, not both")
        most = getattr(config, "max_position_embeddings", None)
        seq = parts.get("tokens", [seq_len or min(512, most or 512)])[0]
        if most and seq > most:
            raise ConfigError(f"{spec}: the encoder takes up to {most} tokens, got {seq}")
        labels = parts["labels"][0] if "labels" in parts else None
        kind, shape = "tokens", (seq,)
    if labels is not None and most and labels > most:
        raise ConfigError(f"{spec}: the decoder takes up to {most} labels, got {labels}")
    return kind, shape, labels
