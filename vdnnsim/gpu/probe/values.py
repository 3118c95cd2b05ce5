"""The values the meta device can know, kept beside the probe's meta tensors (NOTE [op values])."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from .fx import _sid
from .moe import fallback, grouped_mm_out


# NOTE [op values]
# The meta device has shapes and no values, so a forward pass that reads a value
# (``.item()``, an ``if`` on a tensor, ``nonzero``, a boolean mask) cannot run there as it
# is. The probe keeps CPU copies beside the tensors whose values it can know: the batch,
# anything made on the CPU or by a factory op, and what an op makes from tensors that all
# have values, re-run on the copies for outputs of at most VALUE_LIMIT elements (masks and
# positions, never weights or activations). An op the meta device cannot run is answered
# from the copies; an in-place write from a tensor without values drops that storage's
# values. A value the probe cannot know, or an op with no meta kernel, ends the probe in one
# line naming the op and what to do instead (``vdnnsim profile`` on a GPU).
#
# Random values (the batch's tokens, dropout) are as a seeded run's on the CPU: another
# sample, the same shapes. Example: transformers' OPT asks whether its all-ones attention
# mask is all ones before it picks SDPA's causal path.
VALUE_LIMIT = 1 << 22  # elements of a tensor whose values the probe keeps (16 MiB in fp32)
VALUE_OPS = frozenset({  # ops that exist to read values: the message says so
    "_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_dim",
    "unique_consecutive", "equal", "is_nonzero", "allclose", "bincount", "histc",
    "repeat_interleave", "nonzero_static", "argwhere", "masked_scatter", "item"})


class _ValueError(Exception):
    """The probe cannot go on; the message is the user's line."""


class _Values:
    """CPU copies beside the meta tensors whose values are known."""

    def __init__(self, known: dict[torch.Tensor, torch.Tensor]):
        self.of: dict[int, torch.Tensor] = {}  # id(meta tensor) -> its values on the CPU
        self.on: dict[int, set[int]] = {}  # storage -> ids of the tensors with values on it
        self.hold: list[torch.Tensor] = []  # the meta tensors, so that no id is reused
        for t, v in known.items():
            self._put(t, v)

    def _put(self, t: torch.Tensor, v: torch.Tensor) -> None:
        if t.shape != v.shape or t.dtype != v.dtype:
            return  # the meta kernel and the CPU's disagree: no values, not wrong ones
        self.hold.append(t)
        self.of[id(t)] = v
        self.on.setdefault(_sid(t), set()).add(id(t))

    def put(self, t: torch.Tensor, v: torch.Tensor) -> None:
        """``v`` (on the CPU) as the values of the meta tensor ``t``."""
        self._put(t, v)

    def get(self, t: torch.Tensor) -> torch.Tensor | None:
        return self.of.get(id(t)) if t.device.type == "meta" else t

    def _drop(self, t: torch.Tensor) -> None:
        for i in self.on.pop(_sid(t), ()):
            self.of.pop(i, None)

    @staticmethod
    def _cpu(a: Any) -> Any:
        return torch.device("cpu") if isinstance(a, torch.device) and a.type == "meta" else a

    def run(self, func, args: tuple, kwargs: dict, name: str) -> Any:
        """``func`` on the meta device, with values where its inputs have them."""
        from torch.utils._pytree import tree_map
        ins = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        known = all(self.get(a) is not None for a in ins)
        cpu_args = cpu_kwargs = None
        if known:
            cpu_args, cpu_kwargs = tree_map(
                lambda a: self.get(a) if isinstance(a, torch.Tensor) else self._cpu(a),
                (args, kwargs))
        try:
            if func.overloadpacket is torch.ops.aten._grouped_mm and fallback(*args[:2]):
                out = grouped_mm_out(*args, **kwargs)  # CUDA's fallback (NOTE [moe routing])
            else:
                out = func(*args, **kwargs)
        except (RuntimeError, NotImplementedError) as exc:
            if not known:
                raise _ValueError(self._why(func, exc, name)) from None
            # an op the meta device cannot run, answered on the CPU
            try:
                cpu_out = func(*cpu_args, **cpu_kwargs)
            except (RuntimeError, NotImplementedError, ValueError, IndexError) as cpu_exc:
                raise _ValueError(self._why(func, cpu_exc, name)) from None
            stays = str(kwargs.get("device", "meta")) != "meta"  # asked for the CPU
            out = tree_map(lambda c: c if stays or not isinstance(c, torch.Tensor)
                           else c.to("meta"), cpu_out)
            for o, c in zip(tree_leaves(out), tree_leaves(cpu_out)):
                if isinstance(o, torch.Tensor) and o.device.type == "meta":
                    self._put(o, c)
            return out
        outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
        if known and any(o.device.type == "meta" for o in outs) \
                and all(o.numel() <= VALUE_LIMIT for o in outs):
            try:
                cpu_out = func(*cpu_args, **cpu_kwargs)
            except (RuntimeError, NotImplementedError):
                cpu_out = None
            if cpu_out is not None:
                for o, c in zip(tree_leaves(out), tree_leaves(cpu_out)):
                    if isinstance(o, torch.Tensor) and isinstance(c, torch.Tensor) \
                            and o.device.type == "meta":
                        self._put(o, c)
                return out
        schema = getattr(func, "_schema", None)  # a write the copies did not follow
        for arg, a in zip(schema.arguments if schema else (), args):
            if arg.alias_info is not None and arg.alias_info.is_write \
                    and isinstance(a, torch.Tensor):
                self._drop(a)
        for k, a in kwargs.items():
            if isinstance(a, torch.Tensor) and k == "out":
                self._drop(a)
        return out

    @staticmethod
    def _why(func, exc: BaseException, name: str) -> str:
        op = func.__name__.split(".")[0]
        msg = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        if op in VALUE_OPS or any(w in msg for w in ("data-dependent", "item()", "no data",
                                                     "nonzero")):
            return (f"{name}: its forward pass reads a tensor's value (aten::{op}: .item(), "
                    "an if on a tensor, nonzero or a boolean mask) that the meta device "
                    "does not have, as it comes from the weights or the activations; trace "
                    "it on a GPU with vdnnsim profile, or change the "
                    "model to take the value from its config")
        return (f"{name}: the meta device cannot run aten::{op} ({msg}); trace it on a "
                "GPU with vdnnsim profile")


def _ints(index: Any) -> bool:
    """A (nested) list of ints, no bools: an index PyTorch turns into a long tensor."""
    if isinstance(index, list):
        return bool(index) and all(_ints(i) for i in index)
    return isinstance(index, int) and not isinstance(index, bool)


def _on_cpu(index: Any) -> Any:
    if isinstance(index, list) and _ints(index):
        return torch.tensor(index, dtype=torch.long)
    if isinstance(index, tuple):
        return tuple(_on_cpu(i) for i in index)
    return index


class ListIndices(torch.overrides.TorchFunctionMode):
    """NOTE [op values]: a list in an index (``ids[:, [-1, 0]]``) becomes a long tensor that
    PyTorch makes on the indexed tensor's device out of the probe's sight, so on the meta
    device it has no values. Made here on the CPU instead, it keeps them (a CUDA run makes
    the same few bytes on the GPU). Example: transformers asks whether the last or first
    token of each sequence is padding."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__getitem__ and len(args) == 2 \
                and isinstance(args[0], torch.Tensor) and args[0].device.type == "meta":
            args = (args[0], _on_cpu(args[1]))
        return func(*args, **(kwargs or {}))

