"""A layer's workspaces on CUDA, each measured alone on the probe's own tensors: the
allocator's peak during a pass beyond what stays allocated after it, after a warm-up call."""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

from ..probe.fx import ProbeNode

OUT_OF_PLACE = {operator.iadd: operator.add}


def conv_backward_calls(mod: nn.Module, x: torch.Tensor, grad: torch.Tensor
                        ) -> list[Any]:
    """The calls a Conv2d's backward pass makes one after the
    other, each alone (``aten.convolution_backward`` with one output: backward data where
    the input needs a gradient, then backward filter; ATen's cuDNN convolution allocates a
    workspace in each and frees it before the next); [] where the conv is not a plain one
    (a string or non-zero padding mode)."""
    if not isinstance(mod, nn.Conv2d) or isinstance(mod.padding, str) \
            or mod.padding_mode != "zeros":
        return []
    calls = []
    for mask in ((True, False, False), (False, True, False)):
        if mask[0] and not x.requires_grad:
            continue
        calls.append(lambda m=list(mask): torch.ops.aten.convolution_backward(
            grad, x, mod.weight, None, list(mod.stride), list(mod.padding),
            list(mod.dilation), False, [0, 0], mod.groups, m))
    return calls


def _backward_workspaces(mod: nn.Module, x: Any, grad: torch.Tensor) -> tuple[int, ...]:
    """Each of :func:`conv_backward_calls`' workspaces, measured
    as the pass's (the peak beyond what stays allocated), after a warm-up call."""
    if not isinstance(x, torch.Tensor):
        return ()
    out = []
    for call in conv_backward_calls(mod, x, grad):
        call()  # warm-up: tuned by the backward pass already; its trials must not count
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        held = call()
        out.append(max(0, torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()))
        del held
    return tuple(out)


def _workspace(n: ProbeNode) -> tuple[int, int, tuple[int, ...]]:
    """A layer's forward and backward workspace on CUDA: the allocator's peak during the
    pass beyond what stays allocated after it, on a call after a warm-up call; and a
    convolution's backward workspaces one by one, ()
    elsewhere."""
    mod = n.module
    restore = None
    if mod is not None and getattr(mod, "inplace", False):
        restore, mod.inplace = True, False
    call = OUT_OF_PLACE.get(n.call, n.call)
    kwargs = dict(n.attrs.get("_kwargs", {}))
    if kwargs.get("inplace"):  # F.relu(x, inplace=True): run out of place, as modules
        kwargs["inplace"] = False
    try:
        leaves: list[torch.Tensor] = []

        def fresh(a: Any) -> Any:
            if isinstance(a, torch.Tensor) and a.is_floating_point():
                x = a.detach().requires_grad_(a.requires_grad)
                if a.requires_grad:
                    leaves.append(x)
                return x
            return a

        args = tree_map(fresh, n.args)
        call(*args, **kwargs)  # warm-up: cudnn.benchmark's trials must not count
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        out = call(*args, **kwargs)
        fws = max(0, torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated())
        params = [p for p in (mod.parameters() if mod is not None else ()) if p.requires_grad]
        targets = leaves + params
        bws, split = 0, ()
        if targets and out.requires_grad:
            g = torch.randn_like(out) if out.is_floating_point() else torch.ones_like(out)
            torch.autograd.grad(out, targets, g, retain_graph=True, allow_unused=True)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            held = torch.autograd.grad(out, targets, g, retain_graph=True, allow_unused=True)
            bws = max(0, torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated())
            del held
            split = _backward_workspaces(mod, args[0] if args else None, g)
            if split:  # their largest is the backward's workspace
                bws = max(split)
        return fws, bws, split
    finally:
        if restore:
            mod.inplace = True


