"""vDNN for PyTorch: offload the saved inputs of chosen layers to pinned host memory during
forward, prefetch them back ahead of backward.

NOTE [vdnn runtime]
The model runs node by node (torch.fx), as the probe saw it; the plan is the simulator's own
(``offload_sets`` and ``find_prefetch_schedule`` over the probe's trace), so the runtime and
the simulator move the same buffers at the same layers.
- Forward: every storage that a plan offloads is wrapped in one handle, however many ops
  save it (an in-place ReLU's output that is also the next conv's input moves once). After
  layer i is launched, its offloads are copied to pinned host memory on a side stream that
  waits only for what layer i reads, so the copy overlaps layer i. The GPU copy is dropped
  from the handle; the allocator reuses it once the copy is done (record_stream) and the
  interpreter has released the layer's inputs. With ``sync`` the compute stream then waits
  for the copies, as the paper's end-of-layer synchronisation.
- Backward: a pre-hook on each layer's last autograd node runs findPrefetchLayer's choice:
  the chosen layer's buffers are copied back on the side stream. With ``sync`` the next
  layer's backward waits for that prefetch. A buffer no prefetch brought back is fetched on
  demand when autograd unpacks it. A fetched buffer is dropped after its last unpack.
- The copies are bit-exact: gradients equal the baseline's.
On a CPU device the same logic runs with plain copies and no streams (for tests).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import fx, nn

from ..policies.plan import find_prefetch_schedule, liveness, offload_sets
from ..trace import trace_from_dict
from .graph import probe, trace_module
from .profile import assemble


def _sid(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _flat(storage, device) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=device).set_(storage)


class _Handle:
    __slots__ = ("gpu", "host", "ready", "packs", "device", "offloaded")

    def __init__(self, t: torch.Tensor):
        self.gpu: torch.Tensor | None = _flat(t.untyped_storage(), t.device)
        self.host: torch.Tensor | None = None
        self.ready: Any = None  # event after which ``gpu`` holds the data
        self.packs = 0
        self.device = t.device
        self.offloaded = False


class _Packed:
    __slots__ = ("handle", "dtype", "offset", "size", "stride")

    def __init__(self, handle: _Handle, t: torch.Tensor):
        self.handle, self.dtype = handle, t.dtype
        self.offset, self.size, self.stride = t.storage_offset(), t.size(), t.stride()


class VDNN(nn.Module):
    """Wraps ``model``; ``policy`` is 'vdnn_all' or 'vdnn_conv' ('baseline': no hooks)."""

    def __init__(self, model: nn.Module, input_shape: tuple[int, ...], policy: str = "vdnn_conv",
                 sync: bool = True, prefetch: bool = True):
        super().__init__()
        if policy not in ("baseline", "vdnn_all", "vdnn_conv"):
            raise ValueError(f"unknown runtime policy {policy!r}")
        self.model = model
        self.gm = trace_module(model)
        self.policy, self.sync, self.use_prefetch = policy, sync, prefetch
        structure = probe(copy.deepcopy(model), input_shape, 1, "meta", name="plan",
                          with_loss=False)
        trace = trace_from_dict(assemble(structure), "runtime plan")
        lv = liveness(trace)
        n = len(trace.layers)
        self.index = {layer.id: i for i, layer in enumerate(trace.layers)}
        self.offload = offload_sets(trace, lv, policy == "vdnn_conv") \
            if policy != "baseline" else ((),) * n
        self.schedule = find_prefetch_schedule(trace, self.offload) if prefetch else (-1,) * n
        self.candidates = {b for o in self.offload for b in o}
        # NOTE [vdnn runtime]: the caller holds the input batch, so moving it frees nothing
        self.candidates.discard("data")
        self.stats = {"offloaded_bytes": 0, "prefetched_bytes": 0, "on_demand_bytes": 0,
                      "offloads": 0, "fetches": 0, "packs": 0}
        self._reset()

    # -- per iteration state -----------------------------------------------------------------
    def _reset(self) -> None:
        # Storage addresses are reused once a storage is freed, so a saved tensor is named
        # only against the running layer's own inputs (NOTE [vdnn runtime]).
        self._inputs: dict[int, str] = {}  # storage id -> buffer, for the running layer
        self._handles: dict[str, _Handle] = {}
        self._new: dict[int, _Handle] = {}  # handles of storages the running layer made
        self._by_layer: dict[int, list[_Handle]] = {}
        self._pending = None  # prefetch event the next backward layer waits for
        self._side = torch.cuda.Stream() if torch.cuda.is_available() and \
            next(self.model.parameters()).is_cuda else None

    def end_iteration(self) -> None:
        """Drop what is left of this iteration's handles (call after backward)."""
        if self._side is not None:
            torch.cuda.current_stream().wait_stream(self._side)
        self._reset()

    # -- hooks ---------------------------------------------------------------------------------
    def _pack(self, t: torch.Tensor) -> Any:
        sid = _sid(t)
        b = self._inputs.get(sid)
        if b is None:  # made by the running layer: its output, or an extra it keeps
            h = self._new.get(sid)
            if h is None:
                h = self._new[sid] = _Handle(t)
        elif b in self.candidates:
            h = self._handles.get(b)
            if h is None:
                h = self._handles[b] = _Handle(t)
        else:
            return t
        h.packs += 1
        self.stats["packs"] += 1
        return _Packed(h, t)

    def _unpack(self, p: Any) -> torch.Tensor:
        if not isinstance(p, _Packed):
            return p
        h = p.handle
        if h.gpu is None:  # still on the host: fetch on demand
            self._fetch(h, on_demand=True)
        if h.ready is not None:
            torch.cuda.current_stream().wait_event(h.ready)
        out = torch.empty(0, dtype=p.dtype, device=h.device).set_(
            h.gpu.untyped_storage(), p.offset, p.size, p.stride)
        h.packs -= 1
        if h.packs == 0:
            h.gpu = None  # autograd holds ``out`` while it needs it
        return out

    def _offload_now(self, h: _Handle, before: Any) -> Any:
        src = h.gpu
        nbytes = src.numel()
        self.stats["offloaded_bytes"] += nbytes
        self.stats["offloads"] += 1
        if self._side is None:
            h.host = src.clone()
            h.gpu, h.offloaded = None, True
            return None
        h.host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        self._side.wait_event(before)
        with torch.cuda.stream(self._side):
            h.host.copy_(src, non_blocking=True)
        src.record_stream(self._side)
        done = self._side.record_event()
        h.gpu, h.offloaded = None, True
        return done

    def _fetch(self, h: _Handle, on_demand: bool = False) -> None:
        nbytes = h.host.numel()
        self.stats["on_demand_bytes" if on_demand else "prefetched_bytes"] += nbytes
        self.stats["fetches"] += 1
        if self._side is None:
            h.gpu = h.host.clone()
            return
        gpu = torch.empty(nbytes, dtype=torch.uint8, device=h.device)
        if on_demand:
            gpu.copy_(h.host, non_blocking=True)  # on the compute stream: it waits
            h.gpu, h.ready = gpu, None
            return
        self._side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._side):
            gpu.copy_(h.host, non_blocking=True)
        gpu.record_stream(self._side)
        h.gpu, h.ready = gpu, self._side.record_event()

    def _backward_start(self, i: int) -> None:
        if self._pending is not None:
            torch.cuda.current_stream().wait_event(self._pending)
            self._pending = None
        j = self.schedule[i]
        if j < 0:
            return
        events = []
        for h in self._by_layer.get(j, ()):
            if h.gpu is None and h.host is not None:
                self._fetch(h)
                events.append(h.ready)
        if events and self.sync and events[-1] is not None:
            self._pending = events[-1]

    # -- forward -------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.policy == "baseline":
            return self.model(x)
        self._reset()
        gm = self.gm
        env: dict[fx.Node, Any] = {}
        buf: dict[fx.Node, str] = {}  # node -> the buffer its output lives in
        last_use: dict[fx.Node, fx.Node] = {}
        for node in gm.graph.nodes:
            for a in node.all_input_nodes:
                last_use[a] = node
        release: dict[fx.Node, list[fx.Node]] = {}
        for a, n in last_use.items():
            release.setdefault(n, []).append(a)
        cuda = self._side is not None
        out = None
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            for node in gm.graph.nodes:
                if node.op == "placeholder":
                    env[node] = x
                    buf[node] = "data"
                    continue
                if node.op == "output":
                    out = fx.node.map_arg(node.args[0], lambda n: env[n])
                    break
                if node.op == "get_attr":
                    env[node] = gm.get_parameter(node.target) if "." in node.target \
                        else getattr(gm, node.target)
                    continue
                i = self.index.get(node.name)
                before = torch.cuda.current_stream().record_event() \
                    if cuda and i is not None and self.offload[i] else None
                args = fx.node.map_arg(node.args, lambda n: env[n])
                kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n])
                self._inputs = {_sid(env[a]): buf[a] for a in node.all_input_nodes
                                if a in buf and isinstance(env.get(a), torch.Tensor)}
                if node.op == "call_module":
                    result = gm.get_submodule(node.target)(*args, **kwargs)
                elif node.op == "call_function":
                    result = node.target(*args, **kwargs)
                else:
                    result = getattr(args[0], node.target)(*args[1:], **kwargs)
                del args, kwargs
                env[node] = result
                new, self._new = self._new, {}
                if isinstance(result, torch.Tensor):
                    sid = _sid(result)
                    buf[node] = self._inputs.get(sid, node.name)  # in place or a view: alias
                    if sid in new and buf[node] in self.candidates:
                        self._handles[buf[node]] = new[sid]
                self._inputs = {}
                if isinstance(result, torch.Tensor) and i is not None:
                    fn = result.grad_fn
                    if fn is not None:
                        fn.register_prehook(lambda g, i=i: self._backward_start(i))
                    if self.offload[i]:
                        events = []
                        moved = []
                        for b in self.offload[i]:
                            h = self._handles.get(b)
                            if h is not None and h.gpu is not None:
                                events.append(self._offload_now(h, before))
                                moved.append(h)
                        self._by_layer[i] = moved
                        if self.sync and cuda and events:
                            for ev in events:
                                torch.cuda.current_stream().wait_event(ev)
                for a in release.get(node, ()):
                    env.pop(a, None)
                    buf.pop(a, None)
        return out
