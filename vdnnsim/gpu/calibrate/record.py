"""The ATen ops a call issues, with their features (``op_features``, as the op probe
records them)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..probe.opfeatures import op_features


class _Ops(TorchDispatchMode):
    """Records the ATen ops a call issues."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[dict[str, Any]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(isinstance(o, torch.Tensor) for o in torch.utils._pytree.tree_leaves(out)):
            self.ops.append(op_features(func, args, kwargs, out))
        return out
