"""diffusers models built from a config in the repository (``diffusers:NAME``).

NOTE [diffusers models]
``diffusers:NAME`` names a file ``vdnnsim/data/diffusers/NAME.yaml``, and
``diffusers:PATH.yaml`` any file of the same form: ``name``, ``class`` (a diffusers model
class whose training step is written here: UNet2DConditionModel, SD3Transformer2DModel)
and ``config``, the keyword arguments of its ``from_config`` (the hub model's
``config.json``; keys left out take the class's defaults). Nothing is downloaded: the model
is built with random weights, on the meta device for ``trace`` and on the GPU for
``measure`` and ``profile``. ``--model-arg KEY=VALUE`` overrides a config key. The batch
and the loss are each class's training step as diffusers' training scripts write it
(NOTE [diffusion step]); a UNet with extra conditions (SDXL's ``addition_embed_type``, a
class embedding) is refused, as its inputs are not written here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import ConfigError

DATA = Path(__file__).resolve().parents[2] / "data" / "diffusers"
CLASSES = ("UNet2DConditionModel", "SD3Transformer2DModel")
TEXT_TOKENS = 77  # CLIP's context: the text encoder states' default length
EXTRA = "pip install 'vdnnsim[diffusers]'"


def shipped() -> list[str]:
    """The diffusers: names this installation can build offline."""
    return sorted(p.stem for p in DATA.glob("*.yaml"))


def load_spec(name: str) -> dict[str, Any]:
    """The spec file of ``diffusers:NAME`` (or ``diffusers:PATH.yaml``), checked."""
    from .hf import read_spec

    path = Path(name) if name.endswith((".yaml", ".yml")) else DATA / f"{name}.yaml"
    data = read_spec(path, f"diffusers:{name}", shipped(), ("name", "class", "config"),
                     config_required=False)
    if data.get("class") not in CLASSES:
        raise ConfigError(f"{path}: class must be one of {', '.join(CLASSES)} (the diffusers "
                          f"models whose training step vdnnsim writes), got "
                          f"{data.get('class')!r}")
    data.setdefault("name", name)
    data["config"] = dict(data.get("config") or {})
    return data


def _empty_fp32_list(record: Any) -> bool:
    """False for the warning diffusers 0.42 logs on every ``.to(dtype)`` of a model, that
    its modules to be kept in fp32 are cast, where the model names none (``[]``)."""
    return "should be kept in float32: []." not in record.getMessage()


def _class(spec: dict[str, Any]) -> Any:
    import logging
    try:
        import diffusers
    except ImportError as exc:  # diffusers, or one of its own imports (requests)
        what = "" if exc.name in (None, "diffusers") else f"; it needs {exc.name}, missing"
        raise ConfigError(f"diffusers: models need diffusers ({EXTRA}{what})") from None
    log = logging.getLogger("diffusers.models.modeling_utils")
    if _empty_fp32_list not in log.filters:
        log.addFilter(_empty_fp32_list)
    return getattr(diffusers, spec["class"])


def config(name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole config of ``diffusers:NAME``: the class's defaults, the file's keys, then
    ``overrides``; a key the class does not take is an error (from_config would drop it)."""
    import inspect

    spec = load_spec(name)
    params = inspect.signature(_class(spec).__init__).parameters
    given = dict(spec["config"], **(overrides or {}))
    unknown = sorted(set(given) - set(params) - {"self"})
    if unknown:
        raise ConfigError(f"diffusers:{name}: {spec['class']} takes no {', '.join(unknown)}")
    out = {k: p.default for k, p in params.items()
           if k != "self" and p.default is not inspect.Parameter.empty}
    out.update(given)
    return out


def build(name: str, overrides: dict[str, Any] | None = None):
    """(model, spec) for ``diffusers:NAME``; ``overrides`` change config keys."""
    spec = load_spec(name)
    cfg = dict(spec["config"], **(overrides or {}))
    config(name, overrides)  # a key the class does not take
    try:
        model = _class(spec).from_config(cfg)
    except (ValueError, TypeError, KeyError, AssertionError) as exc:
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ConfigError(f"diffusers:{name}: {why}") from None
    return model, dict(spec, config=cfg)


# NOTE [diffusion step]
# What a diffusers model trains on, one sample each (``--input latents:C,H,W;text:SEQ,DIM``
# states the latents and the text encoder's states; DIM may be left out, and unstated they
# are the config's in_channels by sample_size squared and 77 tokens of its text width):
# - UNet2DConditionModel (Stable Diffusion 1.x/2.x): noisy latents (C, H, W), one integer
#   timestep from 0 to 999, the text encoder's hidden states (SEQ, cross_attention_dim);
#   epsilon prediction: loss = MSE(model(...).sample, noise), the noise of the output's shape;
# - SD3Transformer2DModel: noisy latents, the text states (SEQ, joint_attention_dim), the
#   pooled text projections (pooled_projection_dim), one float timestep (sigma x 1000);
#   flow matching: loss = MSE(model(...).sample, noise - latents), the velocity target.
# The noisy input and the target are random tensors of their shapes (the scheduler's
# arithmetic that makes them runs before the model, outside the step). Both outputs are
# cast to fp32 for the loss, as diffusers' training scripts do.
def _parse(spec: str, text: str | None, takes: str) -> dict[str, list[int]]:
    from .hf import input_parts
    return input_parts(text, {"latents": (3,), "text": (1, 2)},
                       f"{spec}: --input {text!r}: the model takes {takes}")


def inputs(cls: str, cfg: Any, spec: str, input_spec: str | None) -> dict[str, Any]:
    """The per-sample shapes of the model's step (NOTE [diffusion step])."""
    unet = cls == "UNet2DConditionModel"
    width_key = "cross_attention_dim" if unet else "joint_attention_dim"
    width = cfg[width_key]
    if not isinstance(width, int):  # a UNet may give one width per block
        raise ConfigError(f"{spec}: a {width_key} per block is not supported; give one int")
    chans, size = cfg["in_channels"], cfg.get("sample_size")
    takes = f"latents:{chans},H,W;text:SEQ[,{width}]"
    parts = _parse(spec, input_spec, takes)
    if "latents" not in parts and not isinstance(size, int):
        raise ConfigError(f"{spec}: its config has no sample_size: give --input "
                          f"latents:{chans},H,W")
    c, h, w = parts.get("latents", [chans, size, size])
    if c != chans:
        raise ConfigError(f"{spec}: the model takes {chans} latent channels (in_channels), "
                          f"not {c}")
    seq, *dim = parts.get("text", [TEXT_TOKENS])
    if dim and dim[0] != width:
        raise ConfigError(f"{spec}: the model takes text states {width} wide ({width_key}), "
                          f"not {dim[0]}")
    out = {"latents": (c, h, w), "text": (seq, width),
           "target": (cfg.get("out_channels") or chans, h, w)}
    if unet:
        for key in ("addition_embed_type", "class_embed_type", "encoder_hid_dim_type"):
            if cfg.get(key) is not None:
                raise ConfigError(f"{spec}: a UNet2DConditionModel with {key} "
                                  f"{cfg[key]!r} takes conditions vdnnsim does not make; "
                                  "supported: latents, a timestep and text states")
        return out
    patch, most = cfg["patch_size"], cfg.get("pos_embed_max_size")
    if h % patch or w % patch:
        raise ConfigError(f"{spec}: the latents' height and width must be multiples of the "
                          f"patch size, {patch}; got {h} x {w}")
    if most and max(h, w) // patch > most:
        raise ConfigError(f"{spec}: the model takes latents up to {most * patch} x "
                          f"{most * patch} (pos_embed_max_size {most} patches of {patch})")
    out["pooled"] = (cfg["pooled_projection_dim"],)
    return out


def note(cls: str, shapes: dict[str, tuple[int, ...]], batch_size: int) -> str:
    """The inputs and the loss of a step of ``batch_size`` samples, for a trace's note."""
    def shape(key: str) -> str:
        return "(" + ", ".join(str(x) for x in (batch_size, *shapes[key])) + ")"

    if cls == "UNet2DConditionModel":
        return (f"; inputs: noisy latents {shape('latents')}, an integer timestep a "
                f"sample, text encoder states {shape('text')}; loss: MSE of the output "
                "against the noise (epsilon prediction)")
    return (f"; inputs: noisy latents {shape('latents')}, a timestep a sample, text "
            f"encoder states {shape('text')}, pooled text projections {shape('pooled')}; "
            "loss: MSE of the output against noise - latents (flow matching's velocity)")


def prepare(spec: str, name: str, seq_len: int | None, input_spec: str | None,
            model_kwargs: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
    """The model of ``diffusers:NAME`` and what its workload (``DiffusionWorkload``) keeps:
    its name, class, config and per-sample input shapes."""
    if seq_len:
        raise ConfigError(f"{spec}: a diffusers: model takes its text length in --input "
                          "text:SEQ, not --seq-len")
    if model_kwargs and "lora" in model_kwargs:
        raise ConfigError(f"{spec}: --lora goes with hf: models")
    dspec = load_spec(name)
    # the inputs checked against the config before the model is built
    shapes = inputs(dspec["class"], config(name, model_kwargs), spec, input_spec)
    model, dspec = build(name, model_kwargs)
    return model, {"name": dspec["name"], "config": dspec["config"],
                   "class": dspec["class"], "inputs": shapes}
