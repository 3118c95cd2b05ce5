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
#
# A larger output of such an op keeps the op, not its values: they are made on the CPU
# when an op that needs them runs (up to MAKE_LIMIT elements, else they are unknown), and
# not kept; a write to a storage drops what is kept for it and what was made from it.
# Example: Longformer's 2-D mask, a slice of the batch-by-length-squared mask transformers
# builds from the batch's. ``torch.tensor(..., device="meta")`` (no ATen op) keeps its data.
VALUE_LIMIT = 1 << 22  # elements of a tensor whose values the probe keeps (16 MiB in fp32)
MAKE_LIMIT = 1 << 26  # elements of a tensor whose values it makes when asked, not kept
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
        # id(meta tensor) -> (op, args, kwargs, output leaf, its storage, the storages it
        # was made from): values made when asked
        self.lazy: dict[int, tuple[Any, tuple, dict, int, int, frozenset[int]]] = {}
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

    def has(self, t: torch.Tensor) -> bool:
        return t.device.type != "meta" or id(t) in self.of or id(t) in self.lazy

    def get(self, t: torch.Tensor) -> torch.Tensor | None:
        if t.device.type != "meta":
            return t
        v = self.of.get(id(t))
        if v is None and id(t) in self.lazy and t.numel() <= MAKE_LIMIT:
            v = self._make(t)
        return v

    def _make(self, t: torch.Tensor) -> torch.Tensor | None:
        """A deferred output's values, made now on the CPU."""
        func, args, kwargs, leaf = self.lazy[id(t)][:4]
        cpu = self._on_cpu(args, kwargs)
        if cpu is None:
            return None
        try:
            v = tree_leaves(func(*cpu[0], **cpu[1]))[leaf]
        except (RuntimeError, NotImplementedError, ValueError, IndexError):
            return None
        ok = isinstance(v, torch.Tensor) and v.shape == t.shape and v.dtype == t.dtype
        return v if ok else None

    def _defer(self, o: torch.Tensor, func: Any, args: tuple, kwargs: dict, leaf: int) -> None:
        deps: set[int] = set()
        for a in tree_leaves((args, kwargs)):
            if isinstance(a, torch.Tensor) and a.device.type == "meta":
                deps.add(_sid(a))
                deps.update(self.lazy.get(id(a), (None,) * 6)[5] or ())
        self.hold.append(o)
        self.lazy[id(o)] = (func, args, kwargs, leaf, _sid(o), frozenset(deps))
        self.on.setdefault(_sid(o), set()).add(id(o))

    def _stale(self, s: int) -> None:
        """A write to storage ``s``: what was deferred on it or made from it is stale."""
        for i, entry in list(self.lazy.items()):
            if entry[4] == s or s in entry[5]:
                del self.lazy[i]

    def _on_cpu(self, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """The arguments with the CPU values of their tensors, or None if one has none."""
        from torch.utils._pytree import tree_map
        missing = []

        def cpu(a: Any) -> Any:
            if not isinstance(a, torch.Tensor):
                return self._cpu(a)
            v = self.get(a)
            if v is None:
                missing.append(a)
            return v
        out = tree_map(cpu, (args, kwargs))
        return None if missing else out

    def _drop(self, t: torch.Tensor) -> None:
        for i in self.on.pop(_sid(t), ()):
            self.of.pop(i, None)
            self.lazy.pop(i, None)
        self._stale(_sid(t))

    @staticmethod
    def _writes(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The tensors ``func`` writes in place."""
        schema = getattr(func, "_schema", None)
        out = [a for arg, a in zip(schema.arguments if schema else (), args)
               if arg.alias_info is not None and arg.alias_info.is_write
               and isinstance(a, torch.Tensor)]
        return out + [a for k, a in kwargs.items() if k == "out" and isinstance(a, torch.Tensor)]

    @staticmethod
    def _cpu(a: Any) -> Any:
        return torch.device("cpu") if isinstance(a, torch.device) and a.type == "meta" else a

    def run(self, func, args: tuple, kwargs: dict, name: str) -> Any:
        """``func`` on the meta device, with values where its inputs have them."""
        from torch.utils._pytree import tree_map
        ins = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        known = all(self.has(a) for a in ins)
        try:
            if func.overloadpacket is torch.ops.aten._grouped_mm and fallback(*args[:2]):
                out = grouped_mm_out(*args, **kwargs)  # CUDA's fallback (NOTE [moe routing])
            else:
                out = _meta_call(func, args, kwargs)
        except (RuntimeError, NotImplementedError) as exc:
            cpu = self._on_cpu(args, kwargs) if known else None
            if cpu is None:
                raise _ValueError(self._why(func, exc, name)) from None
            # an op the meta device cannot run, answered on the CPU
            try:
                cpu_out = func(*cpu[0], **cpu[1])
            except (RuntimeError, NotImplementedError, ValueError, IndexError) as cpu_exc:
                raise _ValueError(self._why(func, cpu_exc, name)) from None
            stays = str(kwargs.get("device", "meta")) != "meta"  # asked for the CPU
            out = tree_map(lambda c: c if stays or not isinstance(c, torch.Tensor)
                           else c.to("meta"), cpu_out)
            for o, c in zip(tree_leaves(out), tree_leaves(cpu_out)):
                if isinstance(o, torch.Tensor) and o.device.type == "meta":
                    self._put(o, c)
            return out
        writes = self._writes(func, args, kwargs)
        for a in writes:
            self._stale(_sid(a))
        outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
        if known and any(o.device.type == "meta" for o in outs):
            if all(o.numel() <= VALUE_LIMIT for o in outs):
                cpu = self._on_cpu(args, kwargs)
                try:
                    cpu_out = func(*cpu[0], **cpu[1]) if cpu is not None else None
                except (RuntimeError, NotImplementedError):
                    cpu_out = None
                if cpu_out is not None:
                    for o, c in zip(tree_leaves(out), tree_leaves(cpu_out)):
                        if isinstance(o, torch.Tensor) and isinstance(c, torch.Tensor) \
                                and o.device.type == "meta":
                            self._put(o, c)
                    return out
            elif not writes:  # kept as the op that makes it
                for i, o in enumerate(tree_leaves(out)):
                    if isinstance(o, torch.Tensor) and o.device.type == "meta":
                        self._defer(o, func, args, kwargs, i)
                return out
        for a in writes:  # a write the copies did not follow
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
    token of each sequence is padding. And ``torch.tensor(data, device="meta")``, which no
    ATen op makes, keeps its data as its values (``values``)."""

    def __init__(self, values: _Values | None = None):
        super().__init__()
        self.values = values

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.__getitem__ and len(args) == 2 \
                and isinstance(args[0], torch.Tensor) and args[0].device.type == "meta":
            args = (args[0], _on_cpu(args[1]))
        out = func(*args, **kwargs)
        if func is torch.tensor and self.values is not None and isinstance(out, torch.Tensor) \
                and out.device.type == "meta" and out.numel() <= VALUE_LIMIT \
                and not any(isinstance(a, torch.Tensor) for a in tree_leaves(args)):
            from torch.utils._python_dispatch import _disable_current_modes
            with _disable_current_modes(), torch._C.DisableTorchFunction():
                try:
                    data = torch.tensor(*args, **dict(kwargs, device="cpu"))
                except (RuntimeError, TypeError, ValueError):
                    return out  # no values: as before
            self.values.put(out, data)
        return out



# NOTE [meta kernel cache]
# A functional op's meta kernel (no view, no in-place write, no out=, tensors out) gives
# outputs that depend only on its inputs' shapes, strides, offsets, dtypes and devices and
# its other arguments: a model's repeated layers ask the same question over and over, and
# torch's Python meta kernels are most of a probe's time. So the outputs' metadata is kept
# per such key, and a repeated call makes fresh tensors of it (empty_strided on the meta
# device), as the kernel would. An op whose output shares an input's storage though its
# schema says no alias (``_unsafe_view``) is never kept; nor is anything else, or a key
# that holds an unhashable value: those run the kernel.
_META: dict[Any, Any] = {}
_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout,
          torch.memory_format)


def _sig(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        if a.device.type != "meta" or a.layout != torch.strided:
            raise TypeError
        return (tuple(a.shape), a.stride(), a.storage_offset(), a.dtype)
    if isinstance(a, (list, tuple)):
        return (type(a).__name__,) + tuple(_sig(x) for x in a)
    if isinstance(a, _PLAIN):
        return (type(a).__name__, a)
    raise TypeError


def _functional(func: Any) -> bool:
    schema = getattr(func, "_schema", None)
    if schema is None or schema.is_mutable or not schema.returns:
        return False
    return all(r.alias_info is None and str(r.type) == "Tensor" for r in schema.returns)


def _meta_call(func: Any, args: tuple, kwargs: dict) -> Any:
    ok = _META.get(func)
    if ok is None:
        ok = _META[func] = _functional(func)
    if not ok:
        return func(*args, **kwargs)
    try:
        key = (func, _sig(args), _sig(tuple(sorted(kwargs.items()))))
    except TypeError:
        return func(*args, **kwargs)
    got = _META.get(key)
    if got is None:
        out = func(*args, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        ins = {_sid(a) for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
        if any(isinstance(o, torch.Tensor) and _sid(o) in ins for o in outs):
            _META[func] = False  # a view its schema does not say (_unsafe_view)
        elif all(isinstance(o, torch.Tensor) and o.device.type == "meta" for o in outs):
            _META[key] = (isinstance(out, tuple),
                          [(tuple(o.shape), o.stride(), o.dtype) for o in outs])
        return out
    many, metas = got
    with torch._C.DisableTorchFunction():  # as the kernel's own outputs: no mode sees them
        made = [torch.empty_strided(sh, st, dtype=dt, device="meta") for sh, st, dt in metas]
    return tuple(made) if many else made[0]
