"""vDNN for any block-structured model on the GPU: whole blocks offloaded.

NOTE [block runtime]
While an offloaded block runs forward, every tensor autograd saves in it (but a parameter,
autocast's cast of one, or a CPU tensor) is copied whole, once per storage however many
views of it are saved, to pinned host memory on a side stream that first waits for the
compute stream; ``record_stream`` lets the allocator reuse the GPU memory only once the
copy is done. When the backward of block k begins (a pre-hook on the autograd node of its
output), block k - 1's storages are prefetched on a second side stream and block k's own
if not back yet; unpacking a saved tensor waits for its copy and rebuilds the view on the
prefetched storage. A storage is known by its address and a weak reference to it (a freed
address is soon reused). The copies are exact, so gradients are bit-identical to a step
without offload. Which blocks: the first ``offload`` (NOTE [block offload]), and those
named by ``recompute`` checkpointed after them (NOTE [block mix]).

The fx-based runtime (vdnn.py) needs a model torch.fx can trace; this one needs only the
model's blocks (by the module paths the plan names; ``find_blocks`` for a plan without
them) and autograd's saved-tensor hooks, so it runs transformers. The batch is read before
the first block, so no block saves it. Not done: offloading the regions outside the
blocks, offloading a chosen set.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn

from ...planners.planfile import BlockPlanFile
from ..probe.blocks import block_output, find_blocks


def _weight_cast(t: torch.Tensor) -> bool:
    """A cast of a parameter (autocast's): its cache holds it to the end of the forward
    pass, so offloading it would free nothing (the block planner skips it too)."""
    fn = t.grad_fn
    if fn is None or fn.name() != "ToCopyBackward0":
        return False
    nxt = fn.next_functions
    return bool(nxt) and nxt[0][0] is not None and nxt[0][0].name() == \
        "torch::autograd::AccumulateGrad"


class _Entry:
    """One offloaded storage: its host copy and, once prefetched, its GPU copy."""

    __slots__ = ("host", "nbytes", "done", "gpu", "ready", "storage", "__weakref__")

    def __init__(self, host: torch.Tensor, nbytes: int, done: torch.cuda.Event,
                 storage: torch.UntypedStorage):
        self.host, self.nbytes, self.done = host, nbytes, done
        self.storage = weakref.ref(storage)  # which storage: an address is reused
        self.gpu: torch.Tensor | None = None
        self.ready: torch.cuda.Event | None = None


class BlockOffload:
    """Offload the first ``offload`` blocks of ``model``."""

    def __init__(self, model: nn.Module, offload: int, paths: list[str] | None = None,
                 recompute: list[str] = ()):
        if paths is None:  # a plan of an older probe: the largest ModuleList's items
            self.blocks = find_blocks(model)
        else:  # by the paths the plan's trace chose
            self.blocks = []
            for p in paths:
                try:
                    self.blocks.append(model.get_submodule(p))
                except AttributeError:
                    raise ValueError(f"the plan's block {p} is not a module of "
                                     f"{type(model).__name__}") from None
        if not self.blocks:
            raise ValueError(f"{type(model).__name__} has no blocks (no nn.ModuleList of "
                             "layers) to offload")
        if not 0 <= offload <= len(self.blocks):
            raise ValueError(f"offload {offload} blocks: the model has {len(self.blocks)}")
        # the offloaded blocks and the checkpointed ones are apart (an
        # offloaded block's hooks would pack what its checkpoint runs again)
        offloaded = {id(b) for b in self.blocks[:offload]}
        for p in recompute:
            try:
                m = model.get_submodule(p)
            except AttributeError:
                continue  # said below, with every path
            inside = any(m is x for b in self.blocks[:offload] for x in b.modules())
            if inside or any(id(x) in offloaded for x in m.modules()):
                raise ValueError(f"the plan checkpoints {p}, which is in one of the "
                                 f"{offload} offloaded blocks: one or the other")
        self.offload = offload
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        # streams only where something moves: a plan that only recomputes runs on a CPU
        self.d2h = torch.cuda.Stream() if offload else None
        self.h2d = torch.cuda.Stream() if offload else None
        # the ``recompute`` blocks' (paths) forward under torch.utils.checkpoint
        self._wrapped = Checkpointed(model, recompute)
        # block -> storage key -> entry, weakly: an entry lives as long as autograd keeps a
        # tensor packed with it, and its memory (host and GPU copies) goes with it
        self.entries: list[weakref.WeakValueDictionary] = [
            weakref.WeakValueDictionary() for _ in self.blocks]
        self.stats = {"offloaded_bytes": 0, "prefetched_bytes": 0, "late_fetches": 0,
                      "kept_bytes": 0}
        self._ctx: Any = None
        self._hooked: dict[int, Any] = {}
        self.handles = []
        # the checkpointed blocks after the offloaded ones, whose inputs
        # their checkpoints keep on the GPU
        wrapped = {id(b) for b in self._wrapped.modules}
        self._keeps = {k for k, b in enumerate(self.blocks) if k >= offload and id(b) in wrapped}
        for k, b in enumerate(self.blocks):
            self.handles.append(b.register_forward_pre_hook(
                lambda m, a, kw, k=k: self._enter(k, a, kw), with_kwargs=True))
            self.handles.append(b.register_forward_hook(
                lambda m, a, out, k=k: self._exit(k, out)))

    @classmethod
    def from_plan(cls, model: nn.Module, plan: BlockPlanFile) -> "BlockOffload":
        """The block runtime for a block plan file: its offloaded
        count, its blocks by path (the largest ModuleList's where it names none) and its
        checkpointed blocks."""
        if not isinstance(plan, BlockPlanFile):
            raise ValueError(f"the block runtime runs a block plan, not a "
                             f"{type(plan).__name__}")
        return cls(model, plan.blocks, plan.block_paths, plan.recompute_paths)

    # -- forward ----------------------------------------------------------------------------
    def _enter(self, k: int, args: tuple = (), kwargs: dict | None = None) -> None:
        if k in self._keeps and self.offload and torch.is_grad_enabled():
            self._keep(args, kwargs or {})
        if k < self.offload and torch.is_grad_enabled():
            self._ctx = torch.autograd.graph.saved_tensors_hooks(
                lambda t, k=k: self._pack(k, t), self._unpack)
            self._ctx.__enter__()

    def _exit(self, k: int, out: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(None, None, None)
            self._ctx = None
        fn = getattr(block_output(out), "grad_fn", None)
        if fn is not None and k <= self.offload and id(fn) not in self._hooked:
            self._hooked[id(fn)] = fn  # held until the step ends: ids stay unique
            fn.register_prehook(lambda g, k=k: self._backward_starts(k))

    def _pack(self, k: int, t: torch.Tensor) -> Any:
        if not t.is_cuda:
            return t
        storage = t.untyped_storage()
        key = storage.data_ptr()
        # a parameter (by its storage, or as a leaf that needs a gradient: parameter offload
        # gives it a new storage at each fetch) stays
        if key in self.params or (t.is_leaf and t.requires_grad) or storage.nbytes() == 0 \
                or _weight_cast(t):
            return t
        entry = self.entries[k].get(key)
        if entry is not None and entry.storage() is not storage:
            entry = None  # a storage that died, its address given to this one
        if entry is None:
            host = torch.empty(storage.nbytes(), dtype=torch.uint8, pin_memory=True)
            entry = _Entry(host, storage.nbytes(), copy_out(storage, host, self.d2h), storage)
            self.entries[k][key] = entry
            self.stats["offloaded_bytes"] += storage.nbytes()
        return (entry, t.dtype, t.storage_offset(), tuple(t.shape), tuple(t.stride()),
                t.device)

    def _keep(self, args: tuple, kwargs: dict) -> None:
        """A checkpointed block's inputs stay on the GPU (its checkpoint
        keeps them), so an offloaded block's copy of one is never fetched back: its entry
        takes the live storage as its GPU copy, ready now (the engine's plan offloads no
        input of a checkpoint; the copy out, issued when the offloaded block saved it, is
        the one thing the engine does not see)."""
        for t in [*args, *kwargs.values()]:
            if not isinstance(t, torch.Tensor) or not t.is_cuda:
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            for entries in self.entries[:self.offload]:
                entry = entries.get(key)
                if entry is None or entry.storage() is not storage or entry.gpu is not None:
                    continue
                entry.gpu = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
                entry.ready = torch.cuda.Event()
                entry.ready.record()
                self.stats["kept_bytes"] += entry.nbytes

    # -- backward ---------------------------------------------------------------------------
    def _fetch_one(self, entry: _Entry) -> None:
        copy_in(entry, self.h2d)
        self.stats["prefetched_bytes"] += entry.nbytes

    def _fetch(self, k: int) -> None:
        for entry in list(self.entries[k].values()):
            if entry.gpu is None:
                self._fetch_one(entry)

    def _backward_starts(self, k: int) -> None:
        if k < self.offload:
            self._fetch(k)  # should be back already, but for the topmost
        if 0 < k <= self.offload:
            self._fetch(k - 1)

    def _unpack(self, packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        entry, dtype, offset, shape, stride, device = packed
        if entry.gpu is None:  # not prefetched: fetch now (the compute stream waits)
            self.stats["late_fetches"] += 1
            self._fetch_one(entry)
        torch.cuda.current_stream().wait_event(entry.ready)
        return rebuilt(entry.gpu, dtype, offset, shape, stride, device)

    def end_iteration(self) -> None:
        """After a step: every copy done, the step's bookkeeping dropped."""
        if self.d2h is not None:
            torch.cuda.current_stream().wait_stream(self.d2h)
            torch.cuda.current_stream().wait_stream(self.h2d)
        self._hooked.clear()

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        self._wrapped.restore()


class Checkpointed:
    """The modules at ``paths`` of ``model`` run under torch.utils.checkpoint
    (``_checkpointed``, given ``options``) until ``restore()``; every path is checked
    (a ValueError naming the plan's ``what``) before any is wrapped."""

    def __init__(self, model: nn.Module, paths: Any, what: str = "block", **options: Any):
        modules = []
        for p in dict.fromkeys(paths):
            try:
                modules.append(model.get_submodule(p))
            except AttributeError:
                raise ValueError(f"the plan's {what} {p} is not a module of "
                                 f"{type(model).__name__}") from None
        self.modules: list[nn.Module] = list(dict.fromkeys(modules))
        self._own = [m.__dict__.get("forward") for m in self.modules]
        for m in self.modules:
            m.forward = _checkpointed(m.forward, **options)
        # a recomputed block must not extend a KV cache its forward filled (BLOOM's
        # recomputed attention saw twice the keys): the cache off while blocks are
        # checkpointed, as transformers' own gradient_checkpointing_enable does
        self._config = getattr(model, "config", None)
        self._use_cache = getattr(self._config, "use_cache", None) if self.modules else None
        if self._use_cache:
            self._config.use_cache = False

    def restore(self) -> None:
        for m, own in reversed(list(zip(self.modules, self._own))):  # their own forward back
            if own is None:
                del m.forward
            else:
                m.forward = own
        self.modules, self._own = [], []
        if self._use_cache:
            self._config.use_cache = self._use_cache
            self._use_cache = None


def _checkpointed(forward: Any, **options: Any) -> Any:
    """``forward`` run under torch.utils.checkpoint (non-reentrant: its hooks and RNG state
    as PyTorch keeps them; ``options`` its other arguments) when autograd records (in
    no_grad it runs as it is)."""
    from torch.utils.checkpoint import checkpoint

    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **options, **kwargs)
    return run


# -- the copies, shared with the tensor runtime (tensors.py) ---------------------------------
def copy_out(storage: torch.UntypedStorage, host: torch.Tensor,
             d2h: torch.cuda.Stream) -> torch.cuda.Event:
    """``storage`` copied whole into pinned ``host`` bytes on ``d2h``, after the work queued
    on the compute stream; its memory is reused only after the copy (``record_stream``).
    Returns the copy's event."""
    raw = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    d2h.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(d2h):
        host.copy_(raw, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
    raw.record_stream(d2h)
    return done


def copy_in(entry: _Entry, h2d: torch.cuda.Stream) -> None:
    """``entry``'s host copy back to a new GPU buffer on ``h2d`` (``entry.gpu``, its event
    ``entry.ready``)."""
    # allocated on the copy stream, which waits only for the entry's offload: the
    # prefetch overlaps the compute it was issued behind. (Allocating for the compute
    # stream instead, the copy waiting for all work queued before it, was tried on the
    # H200: reserved 25.5 against 27.2 GiB at Llama-1B batch 2 with 8 blocks offloaded,
    # but 253 against 208 ms, and 32.6 GiB allocated with 12 blocks: not kept.)
    h2d.wait_event(entry.done)
    with torch.cuda.stream(h2d):
        gpu = torch.empty(entry.nbytes, dtype=torch.uint8, device="cuda")
        gpu.copy_(entry.host, non_blocking=True)
        entry.ready = torch.cuda.Event()
        entry.ready.record()
    gpu.record_stream(torch.cuda.current_stream())  # the compute stream reads it
    entry.gpu = gpu


def rebuilt(raw: torch.Tensor, dtype: torch.dtype, offset: int, shape: tuple[int, ...],
            stride: tuple[int, ...], device: Any) -> torch.Tensor:
    """The saved view (``dtype``, ``offset``, ``shape``, ``stride``) on the bytes ``raw``."""
    return torch.empty(0, dtype=dtype, device=device).set_(
        raw.untyped_storage(), offset, shape, stride)
