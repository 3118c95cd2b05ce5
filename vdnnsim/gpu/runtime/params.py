"""Parameters on the host, fetched block by block: the runtime of NOTE [parameter offload].

The engine's model of it is vdnnsim/engine/params.py (NOTE [parameter offload]); this is
what runs on the GPU. With the optimizer on the CPU (``CPUOffloadOptimizer``:
NOTE [optimizer offload]) every parameter has a pinned master copy on the host, which the CPU
step updates. For the parameters of the first ``count`` blocks (NOTE [blocks]) the GPU
keeps no copy between the passes that read them: each such parameter's ``data`` is an
empty tensor, except while its block runs.

- Forward: when the model starts, the first block's parameters are fetched; when block k
  starts, the compute stream waits for its fetch (issued then if it was not) and block
  k + 1's is issued (one block ahead). A fetch allocates each parameter on the compute
  stream (the caching allocator's pool of the stream that reads it) and copies it from
  its pinned master on a side stream that first waits for the compute stream (the memory
  may have just been freed by work still queued there); an event marks the copies. When
  block k ends, its parameters' ``data`` are emptied again: the memory goes back to the
  compute stream's pool (autocast's casts of them, what the ops save, stay).
- Backward: when the backward pass reaches the output of block k (a pre-hook on its
  autograd node; for the last block, on the model's output), block k's parameters are
  fetched if they are not yet and block k - 1's are issued. Each parameter's ``data`` is
  emptied again once its gradient is accumulated and handed to the CPU optimizer (a
  post-accumulate-grad hook registered after the optimizer's). A checkpointed block run
  again in the backward pass (NOTE [block recompute]) finds its parameters there and
  fetches nothing.
- The CPU step updates the masters; nothing is copied back for these parameters
  (``CPUOffloadOptimizer.resident`` leaves them out); the next forward pass fetches them.

The bytes are moved exactly, so the step's arithmetic is that of the optimizer on the CPU
without parameter offload (tests/test_param_offload.py). A parameter shared by two blocks
(tied weights) is refused. On a CPU device the copies are plain copies (the tests' case).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...planners.planfile import BlockPlanFile
from ..probe.blocks import block_output, find_blocks
from .cpu_optimizer import CPUOffloadOptimizer


class ParamOffload:
    """The parameters of the first ``count`` of ``blocks`` on
    the host, their masters ``optimizer``'s pinned copies."""

    def __init__(self, model: nn.Module, blocks: list[nn.Module], count: int,
                 optimizer: CPUOffloadOptimizer):
        if not 0 <= count <= len(blocks):
            raise ValueError(f"parameters of {count} blocks on the host: the model has "
                             f"{len(blocks)}")
        self.groups: list[list[nn.Parameter]] = []
        owner: dict[nn.Parameter, int] = {}
        for k, b in enumerate(blocks):
            for p in b.parameters():
                if p in owner:
                    raise ValueError(f"a parameter of block {k} is block {owner[p]}'s too "
                                     "(tied weights): parameter offload moves each once")
                owner[p] = k
        for k in range(count):
            group = [p for p in blocks[k].parameters() if p.requires_grad]
            missing = [p for p in group if p not in optimizer.host]
            if missing:
                raise ValueError(f"block {k}: {len(missing)} parameters the CPU optimizer "
                                 "does not hold")
            self.groups.append(group)
        self.optimizer = optimizer
        self.cuda = optimizer.cuda
        self.stream = torch.cuda.Stream(next(model.parameters()).device) \
            if self.cuda and self.groups else None
        # group -> (the GPU copies, their event) fetched and not yet put in place
        self.pending: dict[int, tuple[list[torch.Tensor], Any]] = {}
        self.on_gpu: set[int] = set()
        self.backward = False  # the backward pass has begun (a recompute fetches nothing)
        self.stats = {"param_fetched_bytes": 0, "param_late_fetches": 0}
        self.handles: list[Any] = []
        self._hooked: dict[int, Any] = {}
        for group in self.groups:
            for p in group:
                optimizer.resident.discard(p)  # the CPU step's result stays on the host
                self._empty(p)
                self.handles.append(p.register_post_accumulate_grad_hook(self._gradient_done))
        if not self.groups:
            return
        self.handles.append(model.register_forward_pre_hook(lambda m, a: self._starts()))
        self.handles.append(model.register_forward_hook(
            lambda m, a, out: self._hook_backward(out, len(blocks))))
        for k, b in enumerate(blocks[:count + 1]):
            self.handles.append(b.register_forward_pre_hook(
                lambda m, a, k=k: self._forward_starts(k)))
            self.handles.append(b.register_forward_hook(
                lambda m, a, out, k=k: self._forward_ends(k, out)))

    @classmethod
    def from_plan(cls, model: nn.Module, plan: BlockPlanFile,
                  optimizer: CPUOffloadOptimizer) -> "ParamOffload":
        """The parameter offload for a block plan file: its ``param_blocks``, its blocks
        by path (the largest ModuleList's where it names none)."""
        paths = plan.block_paths
        blocks = find_blocks(model) if paths is None else [model.get_submodule(p)
                                                           for p in paths]
        return cls(model, blocks, plan.param_blocks, optimizer)

    # -- the moves --------------------------------------------------------------------------
    @staticmethod
    def _empty(p: nn.Parameter) -> None:
        p.data = torch.empty(0, dtype=p.dtype, device=p.device)

    def _fetch(self, k: int) -> None:
        """Issue group ``k``'s copies (nothing where it is there or on its way)."""
        if k >= len(self.groups) or k in self.pending or k in self.on_gpu:
            return
        host = self.optimizer.host
        group = self.groups[k]
        if not self.cuda:
            self.pending[k] = ([host[p].detach().clone() for p in group], None)
        else:
            compute = torch.cuda.current_stream()
            gpu = [torch.empty(host[p].shape, dtype=host[p].dtype, device=p.device)
                   for p in group]  # the compute stream's pool: it reads them
            self.stream.wait_stream(compute)
            with torch.cuda.stream(self.stream):
                for g, p in zip(gpu, group):
                    g.copy_(host[p], non_blocking=True)
                done = torch.cuda.Event()
                done.record()
            self.pending[k] = (gpu, done)
        self.stats["param_fetched_bytes"] += sum(host[p].numel() * host[p].element_size()
                                                 for p in group)

    def _ensure(self, k: int) -> None:
        """Group ``k`` in place for the compute stream (fetched now where it was not)."""
        if k >= len(self.groups) or k in self.on_gpu:
            return
        if k not in self.pending:
            self.stats["param_late_fetches"] += 1
            self._fetch(k)
        gpu, done = self.pending.pop(k)
        if done is not None:
            torch.cuda.current_stream().wait_event(done)
        for g, p in zip(gpu, self.groups[k]):
            p.data = g
        self.on_gpu.add(k)

    # -- forward ----------------------------------------------------------------------------
    def _starts(self) -> None:
        """The model's forward pass begins: a new step (whatever the last one left, a
        parameter that got no gradient, leaves the GPU), and the first block's fetch."""
        self.backward = False
        for k in self.on_gpu:
            for p in self.groups[k]:
                if p.numel():
                    self._empty(p)
        self.on_gpu.clear()
        for _, done in self.pending.values():  # a fetch never used (none should be): its
            if done is not None:  # memory goes back only once the copy has written it
                torch.cuda.current_stream().wait_event(done)
        self.pending.clear()
        self._hooked.clear()
        self._fetch(0)

    def _forward_starts(self, k: int) -> None:
        if self.backward:  # a checkpointed block run again: its parameters are there
            return
        self._ensure(k)
        self._fetch(k + 1)

    def _forward_ends(self, k: int, out: Any) -> None:
        if self.backward:
            return
        if k < len(self.groups):
            for p in self.groups[k]:
                self._empty(p)
            self.on_gpu.discard(k)
        if torch.is_grad_enabled():
            self._hook_backward(out, k)

    def _hook_backward(self, out: Any, k: int) -> None:
        """The backward pass's arrival at block ``k``'s output (``len(blocks)``: the
        model's) starts block ``k``'s fetch (if not yet) and block ``k - 1``'s."""
        fn = getattr(block_output(out), "grad_fn", None)
        if fn is not None and id(fn) not in self._hooked and k - 1 < len(self.groups):
            self._hooked[id(fn)] = fn  # held until the step ends: ids stay unique
            fn.register_prehook(lambda g, k=k: self._backward_starts(k))

    # -- backward ---------------------------------------------------------------------------
    def _backward_starts(self, k: int) -> None:
        self.backward = True
        self._ensure(k)
        if k >= 1:
            self._fetch(k - 1)

    def _gradient_done(self, p: nn.Parameter) -> None:
        """After the optimizer's hook took the gradient: the parameter leaves the GPU."""
        self._empty(p)

    def remove(self, restore: bool = True) -> None:
        """The hooks off, and (``restore``) every parameter back on its device, the
        masters' values (a model about to be dropped needs no such copy)."""
        for h in self.handles:
            h.remove()
        self.handles = []
        if not restore:
            return
        host = self.optimizer.host
        for group in self.groups:
            for p in group:
                p.data = host[p].detach().to(p.device, copy=True)
                self.optimizer.resident.add(p)
