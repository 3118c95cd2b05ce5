"""LoRA fine-tuning of an ``hf:`` model through PEFT (``--lora``).

NOTE [lora]
``--lora r=16,alpha=32,targets=q_proj+v_proj[,dropout=0.05][,modules_to_save=score]``
wraps the built model in PEFT's ``get_peft_model(model, LoraConfig(...))``: the base
weights frozen (``requires_grad`` off), a rank-``r`` pair of adapters beside each target
module, trainable, and so is any module named in ``modules_to_save`` (PEFT's copy of a
classifier head). ``targets`` are module names (or name suffixes) joined by ``+``; left
out, PEFT's own default for the model type. The settings travel as the model argument
``lora`` (the text, put in canonical order), so a trace's note, a plan file's
``model_args`` and ``vdnnsim measure`` build the same model. A frozen weight is held and
read but has no gradient and no optimizer state: the op probe counts it in the trace's
``resident_bytes``, not in any layer's ``weight_bytes`` (NOTE [op probe]).
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError

KEY = "lora"  # the model argument that carries the settings
_KEYS = ("r", "alpha", "targets", "dropout", "bias", "modules_to_save", "bits")
_BIASES = ("none", "all", "lora_only")


def parse(text: Any) -> dict[str, Any]:
    """``r=16,alpha=32,targets=q_proj+v_proj`` as LoRA settings, checked (ConfigError)."""
    where = f"--lora {text!r}"
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where}: use r=R,alpha=A,targets=NAME+NAME[,dropout=P]")
    out: dict[str, Any] = {}
    for item in text.split(","):
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq or not value:
            raise ConfigError(f"{where}: {item.strip()!r} is not KEY=VALUE")
        if key not in _KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(_KEYS)})")
        if key in out:
            raise ConfigError(f"{where}: {key} given twice")
        out[key] = value
    if "bits" in out:
        raise ConfigError(f"{where}: a {out['bits']}-bit base (QLoRA, bitsandbytes) is not "
                          "modelled: vdnnsim traces bitsandbytes' quantised weights nowhere; "
                          "leave bits out for a base in the model's dtype")
    try:
        out["r"] = int(out.get("r", 8))
        out["alpha"] = float(out.get("alpha", out["r"]))
        out["dropout"] = float(out.get("dropout", 0.0))
    except ValueError:
        raise ConfigError(f"{where}: r is a whole number, alpha and dropout numbers") from None
    if out["r"] < 1:
        raise ConfigError(f"{where}: r must be at least 1, got {out['r']}")
    if out["alpha"] <= 0:
        raise ConfigError(f"{where}: alpha must be positive, got {out['alpha']:g}")
    if not 0 <= out["dropout"] < 1:
        raise ConfigError(f"{where}: dropout must be in [0, 1), got {out['dropout']:g}")
    out.setdefault("bias", "none")
    if out["bias"] not in _BIASES:
        raise ConfigError(f"{where}: bias is one of {', '.join(_BIASES)}, not {out['bias']!r}")
    for key in ("targets", "modules_to_save"):
        if key in out:
            names = [n.strip() for n in out[key].split("+")]
            if not all(names):
                raise ConfigError(f"{where}: {key} are module names joined by +")
            out[key] = names
    return out


def canonical(text: str) -> str:
    """The settings' text in one order, defaults said: equal settings, equal text."""
    s = parse(text)
    parts = [f"r={s['r']}", f"alpha={s['alpha']:g}"]
    if "targets" in s:
        parts.append("targets=" + "+".join(s["targets"]))
    if s["dropout"]:
        parts.append(f"dropout={s['dropout']:g}")
    if s["bias"] != "none":
        parts.append(f"bias={s['bias']}")
    if "modules_to_save" in s:
        parts.append("modules_to_save=" + "+".join(s["modules_to_save"]))
    return ",".join(parts)


def _matches(names: list[str], target: str) -> bool:
    """Whether a module name is ``target`` or ends in ``.target`` (PEFT's rule)."""
    return any(n == target or n.endswith("." + target) for n in names)


def apply(model: Any, text: str, spec: str) -> Any:
    """``model`` wrapped by PEFT with the LoRA settings ``text``: a PeftModel whose base
    weights are frozen."""
    s = parse(text)
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ConfigError("--lora needs peft (pip install 'vdnnsim[peft]')") from None
    names = [n for n, _ in model.named_modules()]
    for key in ("targets", "modules_to_save"):
        missing = [t for t in s.get(key, ()) if not _matches(names, t)]
        if missing:
            raise ConfigError(f"{spec}: --lora {key} {', '.join(missing)} match no module of "
                              f"{type(model).__name__}")
    config = dict(r=s["r"], lora_alpha=s["alpha"], lora_dropout=s["dropout"], bias=s["bias"],
                  target_modules=s.get("targets"), modules_to_save=s.get("modules_to_save"))
    try:
        return get_peft_model(model, LoraConfig(**config))
    except (ValueError, TypeError, KeyError, NotImplementedError) as exc:
        text = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ConfigError(f"{spec}: --lora: {text}") from None


def settings(spec: str, model_kwargs: dict[str, Any] | None) -> str | None:
    """The LoRA settings of the model ``spec`` with ``model_kwargs``, or None: the argument
    ``lora`` of an ``hf:`` model (a factory's own keyword ``lora`` is the factory's)."""
    if spec.startswith("hf:") and model_kwargs and KEY in model_kwargs:
        return model_kwargs[KEY]
    return None


def frozen_bytes(model: Any) -> int:
    """The bytes of the parameters that need no gradient (``parameters()`` gives a tied one
    once)."""
    return sum(q.numel() * q.element_size() for q in model.parameters() if not q.requires_grad)


def note(spec: str, model_kwargs: dict[str, Any] | None, model: Any) -> str:
    """What a trace's note says of the LoRA settings ("" without them)."""
    text = settings(spec, model_kwargs)
    if text is None:
        return ""
    return (f"; LoRA {canonical(text)} (PEFT): {frozen_bytes(model)} bytes of frozen base "
            "weights resident, with no gradients and no optimizer state")
