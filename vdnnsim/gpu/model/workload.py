"""What one training step runs: a model with its example batch and loss (``Workload``),
and the step with its optimizer and precision (``training_step``), the one training step
that everything which runs one runs (NOTE [training step]).

NOTE [workloads]
Model specs:
- ``zoo:NAME``, ``torchvision:NAME``: image classifiers (3xHxW images, 1,000 classes,
  cross-entropy on the logits);
- ``hf:NAME`` or ``hf:PATH.yaml``: a transformers model from a config (NOTE [hf models]);
  its task sets the batch (``seq_len`` token ids, images, or as NOTE [seq2seq inputs] says),
  its loss the model's own; the model argument ``lora`` adds LoRA adapters (NOTE [lora]);
- ``diffusers:NAME`` or ``diffusers:PATH.yaml``: NOTE [diffusers models] (``DiffusionWorkload``);
- ``package.module:factory``: any callable returning an nn.Module, called with
  ``model_kwargs``, with ``image:C,H,W[:CLASSES]`` (default 1000) or ``tokens:SEQ:VOCAB``;
  loss: cross-entropy of its one output tensor's last dimension against random labels. A
  factory whose construction reads a tensor's value is built on the CPU (``_call_factory``).

Precision (``precision``): ``fp32``; ``bf16`` or ``fp16``, the model and batch cast to it
("pure"); ``autocast-bf16`` or ``autocast-fp16``, fp32 weights (the master copy) with the
forward pass and the loss under ``torch.autocast`` (which casts each op's inputs and
caches the casts of the weights for the step), and for fp16 a ``torch.amp.GradScaler``
that scales the loss and unscales the gradients before the step.

Optimizers (``optimizer``): ``sgd`` (lr 1e-3, no momentum: no state), ``adam`` and
``adamw`` (PyTorch's defaults, lr 1e-3: two moments per parameter in the parameter's
dtype, allocated at the first step, and the foreach implementation on CUDA).
"""

from __future__ import annotations

import contextlib
import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16", "autocast-bf16", "autocast-fp16")
OPTIMIZERS = ("sgd", "adam", "adamw")
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Workload:
    """A model, what a batch of it is, and its loss."""

    model: nn.Module
    name: str
    kind: str  # 'image' or 'tokens'
    shape: tuple[int, ...]  # per sample: (C, H, W) or (seq_len,)
    classes: int  # classes (image) or vocabulary (tokens)
    hf_task: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    labels: int | None = None  # an encoder-decoder's labels, where not one per input token

    def batch(self, n: int, device, dtype: torch.dtype = torch.float32,
              seed: int = 0) -> dict[str, torch.Tensor]:
        g = torch.Generator(device="cpu").manual_seed(seed)
        if self.kind in ("image", "audio"):  # audio: a mel spectrogram (NOTE [seq2seq inputs])
            x = torch.randn(n, *self.shape, generator=g).to(device, dtype)
            if self.kind == "audio":
                y = torch.randint(0, self.classes, (n, self.labels), generator=g).to(device)
                return {"input_features": x, "labels": y}
            y = torch.randint(0, self.classes, (n,), generator=g).to(device)
            return {"pixel_values" if self.hf_task else "x": x, "labels": y}
        ids = torch.randint(0, self.classes, (n, *self.shape), generator=g).to(device)
        if self.labels is not None or self.hf_task == "sequence_classification":
            shape = (n, self.labels) if self.labels is not None else (n,)
            top = self.classes if self.labels is not None else self.info["num_labels"]
            y = torch.randint(0, top, shape, generator=g).to(device)
            return {"input_ids": ids, "labels": y}
        return {"input_ids": ids, "labels": ids} if self.hf_task else {"x": ids, "labels": ids}

    def note(self, batch_size: int) -> str:
        """What a trace's note adds about the step's inputs and loss ("" where it adds
        nothing)."""
        return ""

    def loss(self, runner: Callable, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.hf_task:
            return runner(**batch).loss
        out = runner(batch["x"])
        if not isinstance(out, torch.Tensor):  # which of its outputs is the loss's
            raise ConfigError(f"{self.name}: the model returned {type(out).__name__}, not a "
                              "tensor of logits, and the loss (cross-entropy over the output's "
                              "last dimension) needs one; make it return one (torchvision's "
                              "inception_v3 and googlenet: --model-arg aux_logits=false)")
        logits = out.reshape(-1, out.shape[-1])
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        return F.cross_entropy(logits, batch["labels"].reshape(-1))


class DiffusionWorkload(Workload):
    """A diffusers model with its noisy latents, conditions and target
    (NOTE [diffusion step]); ``info``: diffusion.prepare's."""

    def batch(self, n: int, device, dtype: torch.dtype = torch.float32,
              seed: int = 0) -> dict[str, torch.Tensor]:
        g = torch.Generator(device="cpu").manual_seed(seed)
        shapes = self.info["inputs"]

        def rand(key: str) -> torch.Tensor:
            return torch.randn(n, *shapes[key], generator=g).to(device, dtype)

        if self.info["class"] == "UNet2DConditionModel":  # the latents first: the probe's
            # input (its "data")
            out = {"sample": rand("latents"),
                   "timestep": torch.randint(0, 1000, (n,), generator=g).to(device),
                   "encoder_hidden_states": rand("text")}
        else:
            out = {"hidden_states": rand("latents"),
                   "timestep": (torch.rand(n, generator=g) * 1000).to(device),
                   "encoder_hidden_states": rand("text"),
                   "pooled_projections": rand("pooled")}
        out["target"] = rand("target")
        return out

    def loss(self, runner: Callable, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = runner(**{k: v for k, v in batch.items() if k != "target"})
        pred = out.sample if hasattr(out, "sample") else out[0]
        return F.mse_loss(pred.float(), batch["target"].float())

    def note(self, batch_size: int) -> str:
        from .diffusion import note
        return note(self.info["class"], self.info["inputs"], batch_size)


_INPUT = re.compile(r"^(image):(\d+)[,x](\d+)[,x](\d+)(?::(\d+))?$|^(tokens):(\d+):(\d+)$")


def parse_input(text: str) -> tuple[str, tuple[int, ...], int]:
    """``image:3,224,224[:1000]`` or ``tokens:SEQ:VOCAB`` -> (kind, shape, classes)."""
    m = _INPUT.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise ConfigError(f"input {text!r}: use image:C,H,W[:CLASSES] or tokens:SEQ:VOCAB")
    if m.group(1):
        shape = tuple(int(m.group(k)) for k in (2, 3, 4))
        classes = int(m.group(5) or 1000)
        kind = "image"
    else:
        shape, classes, kind = (int(m.group(7)),), int(m.group(8)), "tokens"
    if min(shape) < 1 or classes < 1:
        raise ConfigError(f"input {text!r}: sizes must be at least 1")
    return kind, shape, classes


def build_workload(spec: str, seq_len: int | None = None, input_spec: str | None = None,
                   model_kwargs: dict[str, Any] | None = None) -> Workload:
    """The model of ``spec`` with its batch and loss; the model arguments of the step
    (NOTE [step options]) taken out of ``model_kwargs``: its own checkpointing turned on,
    the micro-batches left to the step's caller (``stepoptions.split``)."""
    from . import stepoptions
    n, checkpointing, model_kwargs = stepoptions.split(model_kwargs)
    work = _build(spec, seq_len, input_spec, model_kwargs or None)
    if checkpointing:
        stepoptions.enable(work.model, spec)
    work.info.update(micro_batches=n, grad_checkpointing=checkpointing)
    return work


def _build(spec: str, seq_len: int | None, input_spec: str | None,
           model_kwargs: dict[str, Any] | None) -> Workload:
    kind, _, name = spec.partition(":")
    if kind in ("zoo", "torchvision"):
        from .build import build_model
        if model_kwargs or seq_len or input_spec:
            raise ConfigError(f"{spec}: zoo and torchvision models take no --model-arg, "
                              "--seq-len or --input")
        model, shape, display = build_model(spec)
        return Workload(model, display, "image", tuple(shape), 1000)
    if kind == "hf" and name:
        from . import hf, lora
        if input_spec and hf.load_spec(name)["task"] != "seq2seq_lm":
            raise ConfigError(f"{spec}: an hf: model's input comes from its config; use "
                              "--seq-len for a language model (an encoder-decoder's "
                              "--input: tokens:N;labels:M or mel:BINS,FRAMES;labels:M)")
        adapters = lora.settings(spec, model_kwargs)  # NOTE [lora]
        config_args = {k: v for k, v in (model_kwargs or {}).items() if k != lora.KEY}
        if adapters is not None:
            lora.parse(adapters)  # its errors before the model is built
        model, hspec = hf.build(name, config_args)
        cfg = model.config
        if adapters is not None:
            model = lora.apply(model, adapters, spec)
        if hspec["task"] == "image_classification":
            if seq_len:
                raise ConfigError(f"{spec}: an image model takes no --seq-len")
            # a CNN's config may name no size (it takes any): ImageNet's 224 x 224 then
            size = getattr(cfg, "image_size", None) or 224
            h, w = (size, size) if isinstance(size, int) else (int(size[0]), int(size[-1]))
            chans = getattr(cfg, "num_channels", None) or 3
            return Workload(model, hspec["name"], "image", (chans, h, w),
                            cfg.num_labels, hspec["task"], {"config": hspec["config"]})
        info = {"config": hspec["config"]}
        if hspec["task"] == "seq2seq_lm":  # NOTE [seq2seq inputs]
            ikind, shape, labels = hf.seq2seq_inputs(cfg, spec, seq_len, input_spec)
            return Workload(model, hspec["name"], ikind, shape, cfg.vocab_size,
                            hspec["task"], info, labels)
        if hspec["task"] == "sequence_classification":
            info["num_labels"] = cfg.num_labels
        # a learned or rotary position table bounds the sequence; ALiBi models (BLOOM)
        # have none, and take any length
        most = (getattr(cfg, "max_position_embeddings", None)
                or getattr(cfg, "n_positions", None))
        seq = seq_len or min(512, most or 512)
        if seq < 1 or (most and seq > most):
            bound = f"the model's {most} positions" if most else "any length"
            raise ConfigError(f"{spec}: --seq-len must be from 1 to {bound}, got {seq}")
        return Workload(model, hspec["name"], "tokens", (seq,), cfg.vocab_size,
                        hspec["task"], info)
    if kind == "diffusers" and name:  # NOTE [diffusers models]
        from .diffusion import prepare
        model, info = prepare(spec, name, seq_len, input_spec, model_kwargs)
        return DiffusionWorkload(model, info["name"], "latents", info["inputs"]["latents"], 0,
                                 info=info)
    if kind and name and re.fullmatch(r"[A-Za-z_][\w.]*", kind) and name.isidentifier():
        if input_spec is None:
            raise ConfigError(f"{spec}: a factory's model needs --input image:C,H,W or "
                              "tokens:SEQ:VOCAB")
        ikind, shape, classes = parse_input(input_spec)
        if seq_len:
            raise ConfigError(f"{spec}: give the sequence length in --input tokens:SEQ:VOCAB")
        try:
            module = importlib.import_module(kind)
        except ImportError as exc:
            raise ConfigError(f"{spec}: cannot import {kind} ({exc})") from None
        fn = getattr(module, name, None)
        if not callable(fn):
            raise ConfigError(f"{spec}: {kind} has no callable {name}")
        try:
            model = _call_factory(fn, model_kwargs or {})
        except TypeError as exc:
            raise ConfigError(f"{spec}: {exc}") from None
        except Exception as exc:  # noqa: BLE001  the factory refused its arguments (timm:
            # create_model of an unknown name, or one asked for weights that cannot be had)
            why = str(exc).splitlines()[0][:200] if str(exc) else ""
            raise ConfigError(f"{spec}: {name}() raised {type(exc).__name__}"
                              + (f": {why}" if why else "")) from None
        if not isinstance(model, nn.Module):
            raise ConfigError(f"{spec}: {name}() returned {type(model).__name__}, not an "
                              "nn.Module")
        return Workload(model, f"{kind}.{name}", ikind, shape, classes)
    raise ConfigError(f"model {spec!r}: use torchvision:NAME, zoo:NAME, hf:NAME, "
                      "diffusers:NAME or package.module:factory")


def _call_factory(fn: Any, kwargs: dict[str, Any]) -> Any:
    """A factory's model. Built on the meta device (the probe's), a factory whose
    construction reads tensor values (torchvision's RegNets round widths computed with
    tensors: "Cannot copy out of meta tensor"; an ``item``) is built on the CPU and moved to the meta
    device: the same module, its weights' values dropped."""
    try:
        return fn(**kwargs)
    except (NotImplementedError, RuntimeError) as exc:  # .tolist(), .item() on the meta device
        if "meta tensor" not in str(exc) or torch.get_default_device().type != "meta":
            raise
    with torch.device("cpu"):
        model = fn(**kwargs)
    return model.to("meta") if isinstance(model, nn.Module) else model


def make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    raise ConfigError(f"optimizer {name!r}: one of {', '.join(OPTIMIZERS)}")


# NOTE [training step]
# One training step is written here, once: zero_grad(set_to_none=True), the forward pass and
# the loss (under the step's context and, where the precision asks, torch.autocast), the
# backward pass (of the loss scaled by the GradScaler where there is one) and the optimizer
# step (through the scaler, which unscales the gradients and updates its scale). Everything
# that runs a step runs this one; what it adds goes through the step's options below, not
# a copy of it.
#
# Who runs it: measure's warm-up, timed and last, phase-by-phase steps (the last reads the
# allocator at the marks), the profilers' plain, profiled and memory steps, the per-layer
# profiler's timed steps, the kernel counter's and the experiments' GPU scripts
# (experiments/validation: collect.py's host calibration and cuBLAS check, diagnose.py,
# hostbound.py). The options:
# - ``mark(point, loss)``: called at the start, then after each phase, at POINTS ("start",
#   "zero_grad", "forward", "backward", "step"); at "forward" with the loss, so that a
#   profiler can hook its autograd node before the backward pass; by "backward" the step
#   holds the loss no more. The profilers put their timestamps and markers there;
# - ``update=False``: no optimizer step (a step whose gradients are compared);
# - the loss: a workload's (``Workload.loss``: the model's own, or cross-entropy over the
#   output's last dimension, 16-bit logits in fp32), or for the per-layer profiler's
#   fx-traced models ``logits_loss``, cross-entropy of the logits as the model returns
#   them, which is the op the probe's "loss" layer is (graph.py), in the model's dtype.
POINTS = ("start", "zero_grad", "forward", "backward", "step")


def logits_loss(runner: Callable, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The per-layer profiler's loss, cross-entropy of the logits as
    the model returns them against ``batch["labels"]``."""
    return F.cross_entropy(runner(batch["x"]), batch["labels"])


@dataclass
class Step:
    """One training step, ready to run: ``step()``, or its phases
    one by one."""

    runner: Callable
    optimizer: torch.optim.Optimizer
    batch: dict[str, torch.Tensor]
    loss: Callable[[Callable, dict[str, torch.Tensor]], torch.Tensor]
    autocast: torch.dtype | None = None
    scaler: Any = None
    device_type: str = "cpu"
    context: Callable[[], Any] = contextlib.nullcontext
    workload: Workload | None = None
    micro_batches: int = 1  # forward and backward passes before the update (stepoptions.py)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def forward(self) -> torch.Tensor:
        """Forward pass and loss (under autocast where asked)."""
        with self.context():
            if self.autocast is not None:
                with torch.autocast(self.device_type, dtype=self.autocast):
                    return self.loss(self.runner, self.batch)
            return self.loss(self.runner, self.batch)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def update(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def __call__(self, mark: Callable[[str, torch.Tensor | None], Any] | None = None,
                 update: bool = True) -> None:
        """The phases in order, ``mark`` at each of POINTS (forward and backward once a
        micro-batch: the gradients of each are added to the last's)."""
        if mark is not None:
            mark("start", None)
        self.zero_grad()
        if mark is not None:
            mark("zero_grad", None)
        for _ in range(self.micro_batches):
            loss = self.forward()
            if mark is not None:
                mark("forward", loss)
            self.backward(loss)
            del loss
            if mark is not None:
                mark("backward", None)
        if update:
            self.update()
            if mark is not None:
                mark("step", None)


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype ``precision`` runs the forward pass under autocast in, or
    None (fp32 and the pure precisions)."""
    return DTYPES[precision.split("-")[1]] if precision.startswith("autocast") else None


def training_step(workload: Workload, batch_size: int, device, precision: str = "fp32",
                  optimizer: str = "sgd", runner: Callable | None = None,
                  context: Callable[[], Any] = contextlib.nullcontext,
                  micro_batches: int = 1) -> Step:
    """Move the model to ``device`` in ``precision`` and make its step; ``runner`` wraps
    the model (the vDNN runtime) where given; ``micro_batches`` passes of ``batch_size``
    a step."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer {optimizer!r}: one of {', '.join(OPTIMIZERS)}")
    device = torch.device(device)
    pure = DTYPES.get(precision, torch.float32)
    workload.model.to(device, pure).train()
    auto = autocast_dtype(precision)
    scaler = torch.amp.GradScaler(device.type) if precision == "autocast-fp16" else None
    batch = workload.batch(batch_size, device, pure)
    # the trainable parameters: a frozen one (a LoRA base, NOTE [lora]) never has a gradient,
    # so the optimizer would skip it anyway
    opt = make_optimizer(optimizer, [q for q in workload.model.parameters() if q.requires_grad])
    return Step(runner or workload.model, opt, batch, workload.loss, auto, scaler,
                device.type, context, workload, micro_batches)


def probe_step(model: nn.Module, batch_size: int, shape: tuple[int, ...],
               dtype: torch.dtype) -> Step:
    """The per-layer profiler's step of an fx-traced image model, on the device its
    parameters are on: SGD
    (``make_optimizer``) over its trainable parameters, a random batch of ``batch_size``
    samples of ``shape`` in ``dtype`` made there, class 0 for every target, and
    ``logits_loss``; no autocast."""
    params = [q for q in model.parameters() if q.requires_grad]
    dev = next(iter(model.parameters())).device
    opt = make_optimizer("sgd", params)
    x = torch.randn(batch_size, *shape, device=dev, dtype=dtype)
    y = torch.zeros(batch_size, dtype=torch.long, device=dev)
    return Step(model, opt, {"x": x, "labels": y}, logits_loss, device_type=dev.type)
