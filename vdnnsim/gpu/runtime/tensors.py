"""Any model's step under a tensor-granular plan: the buffers a version 3 plan of an
op-by-op trace names, offloaded and prefetched, and its modules checkpointed
(``TensorOffload``).

NOTE [tensor runtime]
Before any step, ``from_plan`` probes the step again on the meta device with the plan's
``recompute_modules`` checkpointed as the step runs them: its pack log (NOTE [pack log]) is
the packs the step's hook will see, and each of the plan's keys must be found in it, else a
one-line ValueError. In the step the k-th pack must have the log's k-th shape and dtype (an
empty tensor that is not the log's next holds no bytes and is passed by); an offloaded
buffer is copied once (by storage, however many views are packed) into its slot of one pool
made for the plan. Unpacking a saved tensor of op u issues every prefetch planned at u or
later in forward order; one not issued by then is fetched when unpacked. The copies are
exact: the gradients are the plain step's. On a CUDA GPU they run on two side streams, to
pinned memory, as NOTE [block runtime] copies; on a CPU, plain copies into a host pool.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Iterator

import torch
from torch import nn

from ...planners.planfile import LayerPlanFile
from ..probe.aten import dtype_name, probe_workload
from ..probe.blocks import OUTSIDE
from ..probe.fx import Pack, Probe
from .blocks import Checkpointed, _Entry, copy_in, copy_out, rebuilt
from .cpu_optimizer import _unregister

ALIGN = 512  # each buffer's slot in the pool starts at a multiple of this many bytes
KEY_FIELDS = ("module", "shape", "dtype", "bytes")


def probe_keys(probe: Probe) -> dict[str, dict[str, Any]]:
    """Every tensor of the probe's trace as a plan's ``TensorKey`` describes it: ``module``,
    the path of the module running when the op that makes it ran (an extra's: the op that
    saves it); ``shape`` and ``dtype``, its op's main output's (an extra's: as first
    packed); ``bytes``, its buffer's; and ``root``, the buffer whose storage it is (itself
    but for a view or an in-place op's output). The batch is ``data``."""
    keys = {"data": dict(module=OUTSIDE, shape=list(probe.data_shape),
                         dtype=dtype_name(probe.dtype), bytes=probe.data_nbytes, root="data")}
    for n in probe.nodes:
        module = n.attrs.get("module", OUTSIDE)
        keys[n.name] = dict(module=module, shape=list(n.out_shape),
                            dtype=dtype_name(n.attrs["_dtype"]), bytes=n.out_nbytes,
                            root=n.alias_of or n.name)
        for s in n.saved:
            if s.role == "extra":
                keys[s.tensor] = dict(module=module, shape=None, dtype=None, bytes=s.nbytes,
                                      root=s.tensor)
    for p in probe.packs:
        key = keys.get(p.tensor)
        if key is not None and key["shape"] is None:
            key.update(shape=list(p.shape), dtype=p.dtype)
    return keys


def check_keys(plan: LayerPlanFile, probe: Probe, where: str) -> dict[str, dict[str, Any]]:
    """``probe_keys`` of ``probe``, each of the plan's tensors found there with its module,
    shape, dtype and bytes and saved outside the checkpointed modules; else a ValueError
    naming the first that is not (``where``: the step, for the message)."""
    keys = probe_keys(probe)
    packed = {p.tensor for p in probe.packs}
    for t in plan.tensors:
        key = keys.get(t.id)
        if key is None:
            raise ValueError(f"the plan's tensor {t.id} is no tensor of {where}")
        for name in KEY_FIELDS:
            if getattr(t, name) != key[name]:
                raise ValueError(f"the plan's tensor {t.id} has {name} "
                                 f"{_shown(getattr(t, name))} where {where} has "
                                 f"{_shown(key[name])}")
        if key["root"] not in packed:
            raise ValueError(f"the plan's tensor {t.id} is saved in {where} by no op outside "
                             "the checkpointed modules: there is nothing to offload")
    return keys


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


class TensorOffload:
    """A version 3 op plan's offloads, prefetches and checkpointed modules on ``model``
    (NOTE [tensor runtime]). ``packs``: the step's pack log with the plan's modules
    checkpointed; ``keys``: ``check_keys``'s; ``cuda``: copies on streams into pinned memory
    (default: where the model's parameters are). ``from_plan`` makes both and checks them."""

    def __init__(self, model: nn.Module, plan: LayerPlanFile, packs: list[Pack],
                 keys: dict[str, dict[str, Any]], cuda: bool | None = None):
        self.cuda = any(p.is_cuda for p in model.parameters()) if cuda is None else cuda
        self.log = packs
        rows = {r.id: k for k, r in enumerate(plan.layers)}
        self._row = [rows.get(p.op, -1) for p in packs]  # per pack: its op's row, or -1
        # each offloaded buffer (by its root) a slot of the pool, taken every step
        self.slots: dict[str, tuple[int, int]] = {}
        total = 0
        for t in plan.tensors:
            root = keys[t.id]["root"]
            if root not in self.slots:
                self.slots[root] = (total, keys[root]["bytes"])
                total += -(-keys[root]["bytes"] // ALIGN) * ALIGN
        self.pool = torch.empty(total, dtype=torch.uint8)
        self._unlock: Any = None
        if self.cuda and total:  # page-locked as it is, as NOTE [optimizer pinning]'s
            # registered buffer (the pinned allocator would round it up to a power of two)
            err = torch.cuda.cudart().cudaHostRegister(self.pool.data_ptr(), total, 0)
            if int(err) != 0:
                raise RuntimeError(f"cudaHostRegister of {total} bytes failed ({err})")
            self._unlock = weakref.finalize(self, _unregister, self.pool,
                                            torch.device("cuda", torch.cuda.current_device()))
        # a buffer comes back at the row whose prefetch names the row that offloads it (the
        # last such row, the first the backward pass reaches); (row, root) from the last row
        owner: dict[str, str] = {}
        for r in plan.layers:
            for b in r.offload:
                owner.setdefault(b, r.id)
        at = {r.prefetch: k for k, r in enumerate(plan.layers) if r.prefetch is not None}
        when: dict[str, int] = {}
        for b, o in owner.items():
            if o in at:
                root = keys[b]["root"]
                when[root] = max(when.get(root, -1), at[o])
        self._schedule = sorted(((k, root) for root, k in when.items()), reverse=True)
        self._wrapped = Checkpointed(model, plan.recompute_modules, "recompute module")
        moves = self.cuda and bool(self.slots)
        self.d2h = torch.cuda.Stream() if moves else None
        self.h2d = torch.cuda.Stream() if moves else None
        # root -> entry, weakly: an entry lives as long as autograd keeps a tensor packed
        # with it, and its copy back to the device with it
        self.entries: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self.stats = {"offloaded_bytes": 0, "prefetched_bytes": 0, "offloads": 0,
                      "prefetches": 0, "late_fetches": 0, "empty_packs": 0}
        self._k = 0  # packs so far in this step
        self._next = 0  # the first prefetch of ``_schedule`` not issued

    @classmethod
    def from_plan(cls, model: nn.Module, plan: Any, spec: str | None = None,
                  batch_size: int | None = None, precision: str | None = None,
                  seq_len: int | None = None, input_spec: str | None = None,
                  model_kwargs: dict[str, Any] | None = None) -> "TensorOffload":
        """The runtime of a version 3 op plan for ``model``, the model of ``spec`` (default:
        the plan's, as the rest) built as the step builds it. Every check comes before any
        step: a ValueError naming the first thing that does not match."""
        if not isinstance(plan, LayerPlanFile) or plan.layer_names != "ops" or plan.version < 3:
            raise ValueError(f"the tensor runtime runs a layer plan of an op-by-op trace of "
                             f"version 3, not a {type(plan).__name__} of "
                             f"{getattr(plan, 'layer_names', 'blocks')} layers, version "
                             f"{getattr(plan, 'version', '?')}")
        if plan.split:
            raise ValueError("the plan splits the batch, which the tensor runtime does not")
        run = {"model": spec, "batch": batch_size, "precision": precision, "sequence length":
               seq_len}
        for (what, given), planned in zip(run.items(), (plan.model, plan.batch_size,
                                                         plan.dtype, plan.seq_len)):
            if given is not None and planned is not None and given != planned:
                raise ValueError(f"the plan is for {what} {planned}, not {given}")
            run[what] = planned if given is None else given
        if run["model"] is None:
            raise ValueError("the plan names no model: say which")
        precision = run["precision"] or "fp32"
        cuda = any(p.is_cuda for p in model.parameters())
        if not cuda and precision.startswith("autocast"):
            raise ValueError(f"on a CPU the tensor runtime runs fp32, bf16 or fp16, not "
                             f"{precision}")
        for path in plan.recompute_modules:
            try:
                model.get_submodule(path)
            except AttributeError:
                raise ValueError(f"the plan's recompute module {path} is not a module of "
                                 f"{type(model).__name__}") from None
        _, probe = probe_workload(run["model"], run["batch"], precision,
                                  run["sequence length"], model_kwargs, input_spec,
                                  plan.recompute_modules, as_cuda=cuda)
        keys = check_keys(plan, probe, f"{run['model']}'s step (batch {run['batch']})")
        return cls(model, plan, probe.packs, keys, cuda)

    # -- the step ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        """A forward pass under the runtime's saved-tensor hooks (a training step's
        ``context``)."""
        if len(self.entries):
            raise RuntimeError("a forward pass began while the last one's offloaded tensors "
                               "were still saved: the tensor runtime runs one forward pass "
                               "per backward pass")
        self._k = self._next = 0
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            yield
        if self._k != len(self.log):
            raise ValueError(f"the step saved {self._k} tensors where its meta-device probe "
                             f"saved {len(self.log)}: the model runs differently here, and "
                             "the plan's tensors cannot be found in it")

    def _differs(self, k: int, t: torch.Tensor, what: str | None = None) -> str:
        p = self.log[k]
        what = what or (f"a {dtype_name(t.dtype)} tensor of shape {list(t.shape)} where its "
                        f"meta-device probe saved a {p.dtype} one of shape {list(p.shape)}")
        return (f"pack {k} of the step (op {p.op or 'none of the trace'}, module "
                f"{p.module}) is {what}: the model runs differently here, and the plan's "
                "tensors cannot be found in it")

    def _pack(self, t: torch.Tensor) -> tuple:
        k = self._k
        if t.numel() == 0 and not (k < len(self.log) and self.log[k].shape == tuple(t.shape)
                                   and self.log[k].dtype == dtype_name(t.dtype)):
            self.stats["empty_packs"] += 1  # NOTE [tensor runtime]: not in the log
            return (-1, t)
        self._k += 1
        if k >= len(self.log):
            raise ValueError(f"the step saves more tensors than the {len(self.log)} its "
                             "meta-device probe saved: the model runs differently here, and "
                             "the plan's tensors cannot be found in it")
        root = self.log[k].tensor
        if tuple(t.shape) != self.log[k].shape or dtype_name(t.dtype) != self.log[k].dtype:
            raise ValueError(self._differs(k, t))
        if root not in self.slots or t.is_cuda != self.cuda:
            return (self._row[k], t)
        storage = t.untyped_storage()
        entry = self.entries.get(root)
        if entry is None:
            offset, nbytes = self.slots[root]
            if storage.nbytes() != nbytes:
                raise ValueError(self._differs(k, t, f"a buffer of {storage.nbytes()} bytes "
                                                     f"where the plan's {root} has {nbytes}"))
            host = self.pool[offset:offset + nbytes]
            if self.cuda:
                done = copy_out(storage, host, self.d2h)
            else:
                host.copy_(torch.empty(0, dtype=torch.uint8).set_(storage))
                done = None
            entry = _Entry(host, nbytes, done, storage)
            self.entries[root] = entry
            self.stats["offloaded_bytes"] += nbytes
            self.stats["offloads"] += 1
        elif entry.storage() is not storage:
            raise ValueError(self._differs(k, t, f"another buffer than the {root} packed "
                                                 "before"))
        return (self._row[k], entry, t.dtype, t.storage_offset(), tuple(t.shape),
                tuple(t.stride()), t.device)

    def _unpack(self, packed: tuple) -> torch.Tensor:
        if packed[0] >= 0:
            self._reach(packed[0])
        if len(packed) == 2:
            return packed[1]
        _, entry, dtype, offset, shape, stride, device = packed
        if entry.gpu is None:  # not prefetched: fetched now (the compute stream waits)
            self.stats["late_fetches"] += 1
            self._fetch(entry)
        if entry.ready is not None:
            torch.cuda.current_stream().wait_event(entry.ready)
        return rebuilt(entry.gpu, dtype, offset, shape, stride, device)

    def _reach(self, row: int) -> None:
        """The backward pass is at ``row``: every prefetch planned there or at a later row
        issued."""
        while self._next < len(self._schedule) and self._schedule[self._next][0] >= row:
            entry = self.entries.get(self._schedule[self._next][1])
            if entry is not None and entry.gpu is None:
                self._fetch(entry)
            self._next += 1

    def _fetch(self, entry: _Entry) -> None:
        if self.cuda:
            copy_in(entry, self.h2d)
        else:
            entry.gpu = entry.host.clone()
        self.stats["prefetched_bytes"] += entry.nbytes
        self.stats["prefetches"] += 1

    def end_iteration(self) -> None:
        """After a step: every copy done before the next step's."""
        if self.d2h is not None:
            torch.cuda.current_stream().wait_stream(self.d2h)
            torch.cuda.current_stream().wait_stream(self.h2d)

    def remove(self) -> None:
        """The checkpointed modules' own forward back (and an HF model's cache); the pool
        unlocked once no copy uses it."""
        self._wrapped.restore()
        if self._unlock is not None:
            self._unlock()  # once: a finalizer runs at most once
