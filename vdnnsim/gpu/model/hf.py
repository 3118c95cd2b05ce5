"""Hugging Face transformers models built from a config in the repository (``hf:NAME``).

NOTE [hf models]
``hf:NAME`` names a file ``vdnnsim/data/hf/NAME.yaml`` (a ``/`` in a hub name is ``__``
in the file name: ``hf:google/vit-base-patch16-224``), and ``hf:PATH.yaml`` any file of
the same form: ``name``, ``task`` (``causal_lm``, ``masked_lm``, ``seq2seq_lm`` or
``image_classification``) and ``config``, the keyword arguments of the model's
``PretrainedConfig`` with its ``model_type``. The shipped files are the hub models'
``config.json`` written out, so nothing is downloaded: the model is built by
``AutoModelFor<task>.from_config`` with random weights, with PyTorch's SDPA attention
(``attn_implementation='sdpa'``) unless the config names another; a model class without an
SDPA path (a CNN such as BiT or MobileNet, or a model whose attention transformers writes
out) is built with ``'eager'``, the library's own.

The task sets the example batch and the loss: token ids of ``seq_len`` over the vocabulary with the ids as
labels (the model shifts them for a causal LM; a masked LM is scored at every position; an
encoder-decoder takes them as the encoder's input and, shifted right, as the decoder's),
or images of the config's size (224 x 224 where it names none: a CNN takes any) with
class labels; the loss is the model's own
(``outputs.loss``), as a training script calls it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import ConfigError

DATA = Path(__file__).resolve().parents[2] / "data" / "hf"
TASKS = ("causal_lm", "masked_lm", "seq2seq_lm", "image_classification")


def shipped() -> list[str]:
    """The hf: names this installation can build offline."""
    return sorted(p.stem.replace("__", "/") for p in DATA.glob("*.yaml"))


def load_spec(name: str) -> dict[str, Any]:
    """The spec file of ``hf:NAME`` (or ``hf:PATH.yaml``), checked."""
    import yaml

    path = Path(name) if name.endswith((".yaml", ".yml")) else DATA / f"{name.replace('/', '__')}.yaml"
    if not path.is_file():
        raise ConfigError(f"hf:{name}: no such config (shipped: {', '.join(shipped())}; or "
                          "give a path to a .yaml with name, task and config)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise ConfigError(f"{path}: expected a mapping with name, task and config")
    unknown = set(data) - {"name", "task", "config"}
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
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
            "image_classification": transformers.AutoModelForImageClassification}[spec["task"]]
    if attn is None:
        attn = "sdpa" if _supports_sdpa(auto, config) else "eager"
    try:
        model = auto.from_config(config, attn_implementation=attn)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"hf:{name}: {str(exc).splitlines()[0][:200]}") from None
    spec = dict(spec, config=dict(spec["config"], **(overrides or {})))
    return model, spec
