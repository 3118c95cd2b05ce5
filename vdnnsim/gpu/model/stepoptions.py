"""The run options of a training step beside its model (``--micro-batches``,
``--grad-checkpointing``): checked, carried as model arguments, applied.

NOTE [step options]
``--micro-batches N`` makes a step N forward and backward passes of ``--batch-size`` samples
each (the micro-batch, a trace's ``batch_size``), the gradients accumulated, then one
optimizer step: a global batch of N x batch-size. ``--grad-checkpointing`` turns on the
model's own checkpointing: transformers' ``gradient_checkpointing_enable`` (non-reentrant),
diffusers' ``enable_gradient_checkpointing``; a model without it is refused. Both travel as
model arguments (``micro_batches``, ``grad_checkpointing``), as ``routing`` and ``lora`` do,
so a trace's note, a plan's ``model_args`` and measure carry them. The op probe traces one
micro-batch and runs the model's checkpointed calls plainly, each recorded as a segment; the
engine replays the rest (engine/stepopts.py). Measure runs the step itself.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from ...errors import ConfigError

MICRO = "micro_batches"  # the model arguments that carry them
CHECKPOINTING = "grad_checkpointing"
MAX_MICRO_BATCHES = 10**6


def micro_batches(value: Any, where: str = "--micro-batches") -> int:
    """A count of micro-batches, checked (ConfigError)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or \
            not 1 <= value <= MAX_MICRO_BATCHES:
        raise ConfigError(f"{where}: a whole number of micro-batches from 1 to "
                          f"{MAX_MICRO_BATCHES:,}, got {value!r}")
    return value


def split(model_kwargs: dict[str, Any] | None) -> tuple[int, bool, dict[str, Any]]:
    """(micro-batches, the model's own checkpointing, the model's other arguments) of
    ``model_kwargs``, checked."""
    rest = dict(model_kwargs or {})
    n = micro_batches(rest.pop(MICRO, 1), f"model argument {MICRO}")
    on = rest.pop(CHECKPOINTING, False)
    if not isinstance(on, bool):
        raise ConfigError(f"model argument {CHECKPOINTING}: true or false, got {on!r}")
    return n, on, rest


def enable(model: Any, spec: str) -> None:
    """The model's own gradient checkpointing on (the note above); a model without it
    is refused in one line."""
    kind = spec.partition(":")[0]
    if kind == "hf":
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT
        if not getattr(base, "supports_gradient_checkpointing", False):
            raise ConfigError(f"{spec}: {type(base).__name__} does not support gradient "
                              "checkpointing (transformers' supports_gradient_checkpointing "
                              "is off); leave --grad-checkpointing out, or checkpoint by "
                              "policy (checkpoint, vdnn_blocks' recompute)")
        if getattr(base.config, "use_cache", False):  # as transformers sets it when the
            base.config.use_cache = False  # checkpointed layers run (and says so on stderr)
        try:
            base.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        except ValueError as exc:
            raise ConfigError(f"{spec}: --grad-checkpointing: "
                              f"{str(exc).splitlines()[0][:200]}") from None
    elif kind == "diffusers":
        if not getattr(model, "_supports_gradient_checkpointing", False):
            raise ConfigError(f"{spec}: {type(model).__name__} does not support gradient "
                              "checkpointing (diffusers' _supports_gradient_checkpointing is "
                              "off); leave --grad-checkpointing out")
        model.enable_gradient_checkpointing()
    else:
        raise ConfigError(f"{spec}: --grad-checkpointing is the model's own switch, which "
                          "hf: and diffusers: models have; checkpoint this one by policy "
                          "(checkpoint, vdnn_blocks' recompute)")


def switch(model: Any, spec: str, on: bool) -> None:
    """The model's own checkpointing on or off again, where it has it on (``enable``):
    the profiler times its steps without it."""
    kind = spec.partition(":")[0]
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if kind == "hf" and getattr(base, "is_gradient_checkpointing", False) != on:
        if on:
            base.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            base.gradient_checkpointing_disable()
    elif kind == "diffusers" and getattr(model, "is_gradient_checkpointing", False) != on:
        (model.enable_gradient_checkpointing if on else model.disable_gradient_checkpointing)()


@contextlib.contextmanager
def recorded(model: Any, nodes: list[Any], spans: list[tuple[int, int]]) -> Iterator[None]:
    """While it is open, each call the model makes through its own checkpointing function
    runs plainly, without torch.utils.checkpoint, and the ops it records (``nodes`` grows)
    are a span (start, end) in ``spans``: an outermost call's only."""
    patched = [m for m in model.modules() if "_gradient_checkpointing_func" in vars(m)]
    depth = [0]

    def run(function: Any, *args: Any, **kwargs: Any) -> Any:
        start = len(nodes)
        depth[0] += 1
        try:
            return function(*args, **kwargs)
        finally:
            depth[0] -= 1
            if not depth[0] and len(nodes) > start:
                spans.append((start, len(nodes)))

    saved = [vars(m)["_gradient_checkpointing_func"] for m in patched]
    for m in patched:
        m._gradient_checkpointing_func = run
    try:
        yield
    finally:
        for m, f in zip(patched, saved):
            m._gradient_checkpointing_func = f


def segments(spans: list[tuple[int, int]], nodes: list[Any], kept: list[Any]
             ) -> list[tuple[str, str]]:
    """Each span's first and last op that the trace keeps (``kept``, in order), by name; a
    span with none kept is no segment."""
    where = {n.name: k for k, n in enumerate(kept)}
    out = []
    for start, end in spans:
        at = [where[n.name] for n in nodes[start:end] if n.name in where]
        if at:
            out.append((kept[min(at)].name, kept[max(at)].name))
    return out


def note(n: int, checkpointing: bool, batch_size: int, segments_: int) -> str:
    """What a trace's note says of the step options ("" without them)."""
    out = ""
    if n > 1:
        out += (f"; {n} micro-batches of {batch_size} a step (gradient accumulation, a global "
                f"batch of {n * batch_size}): batch_size is the micro-batch's")
    if checkpointing:
        out += (f"; the model's own gradient checkpointing (non-reentrant): {segments_} "
                "segments recomputed in the backward pass")
    return out
