"""vDNN for PyTorch: offload the saved inputs of chosen layers to pinned host memory during
forward, prefetch them back ahead of backward.

NOTE [vdnn runtime]
The model runs node by node (torch.fx), as the probe saw it; the plan is the simulator's
own (``offload_sets`` and ``find_prefetch_schedule`` over the probe's trace), so the runtime
and the simulator move the same buffers at the same layers. Forward: every storage a plan
offloads is one handle however many ops save it, followed through views, in-place ops and
the parts of a tuple of views; after layer i is launched its offloads are copied to pinned
host memory on a side stream that waits only for what layer i reads, and the GPU copy is
dropped (reused once the copy is done: record_stream). Backward: a pre-hook on each layer's
last autograd node starts findPrefetchLayer's prefetch; a buffer no prefetch brought back
is fetched when autograd unpacks it, and dropped after its last unpack. With ``sync`` the
streams wait as the paper's end-of-layer synchronisation. The copies are bit-exact.

Details: an in-place ReLU's output that is also the next conv's input moves once; in
``x1, x2 = x.chunk(2)`` either part reads x's buffer (a part not followed would be saved
under its own name and its buffer never moved). The GPU copy is freed once the
interpreter has released the layer's inputs too. On a CPU device the same logic runs with
plain copies and no streams (for tests).

NOTE [planned runtime]
``policy='planned'`` runs a plan file from ``vdnnsim plan`` (``vdnnsim measure --plan``):
its batch splits rewrite the fx graph first (``_split_graph``: torch.chunk of the batch,
the segment's nodes copied per slice, torch.cat of what leaves it; the nodes get the
names vdnnsim/planners/split.py gives the trace's layers), then its offloads and prefetches run as
above, by layer id, and each checkpointed segment runs under torch.utils.checkpoint
(non-reentrant, RNG state preserved): its forward keeps nothing of its own, and its
nodes run again, without offloads or hooks, when backward first needs them. Prefetches
the plan gives the loss (a layer the model does not run) start when forward returns.
Host cost: saved-tensor hooks are entered only for nodes that read or make a buffer the
plan moves, and a backward pre-hook is registered only on layers that start a prefetch or
wait for one (the vdnn_all/vdnn_conv policies use the same rule).
"""

from __future__ import annotations

import copy
import operator
from typing import Any

import torch
from torch import fx, nn
from torch.utils.checkpoint import checkpoint

from ...planners.planfile import LayerPlanFile, plan_from_data
from ...policies.plan import find_prefetch_schedule, liveness, offload_sets
from ...planners.split import chunk_name, part_name
from ...trace import trace_from_dict
from ..probe.fx import fetch_attr, probe, trace_module
from ..profile.assemble import _rename, assemble


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
    """Wraps ``model``; ``policy`` is 'vdnn_all' or 'vdnn_conv' ('baseline': no hooks), or
    'planned' with ``plan``, a layer plan file (its
    model, or its contents, read through the model)."""

    def __init__(self, model: nn.Module, input_shape: tuple[int, ...], policy: str = "vdnn_conv",
                 sync: bool = True, prefetch: bool = True,
                 plan: LayerPlanFile | dict[str, Any] | None = None):
        super().__init__()
        if policy not in ("baseline", "vdnn_all", "vdnn_conv", "planned"):
            raise ValueError(f"unknown runtime policy {policy!r}")
        if (policy == "planned") != (plan is not None):
            raise ValueError("policy 'planned' takes a plan, and only it")
        if isinstance(plan, dict):
            plan = plan_from_data(plan)
        if plan is not None and not isinstance(plan, LayerPlanFile):
            raise ValueError(f"the vDNN runtime runs a layer plan ({plan.format} is the "
                             "block runtime's)")
        self.model = model
        self.gm = trace_module(model)
        self.policy, self.sync = policy, sync
        # plan files name layers as traces do (a zoo model's own names); the probe's
        # trace below names them by node
        names = _rename(model) if plan is not None else {}
        self.lid: dict[fx.Node, str] = {n: names.get(n.name, n.name) for n in self.gm.graph.nodes}
        self.segments: dict[str, tuple[str, list[fx.Node]]] = {}
        self.orphans: list[int] = []
        if plan is not None:
            self._from_plan(plan)
        else:
            structure = probe(copy.deepcopy(model), input_shape, 1, "meta", name="plan",
                              with_loss=False)
            trace = trace_from_dict(assemble(structure), "runtime plan")
            lv = liveness(trace)
            n = len(trace.layers)
            self.index = {layer.id: i for i, layer in enumerate(trace.layers)}
            self.offload = offload_sets(trace, lv, policy == "vdnn_conv") \
                if policy != "baseline" else ((),) * n
            self.schedule = find_prefetch_schedule(trace, self.offload) if prefetch \
                else (-1,) * n
        self.candidates = {b for o in self.offload for b in o}
        # the caller holds the input batch, so moving it frees nothing
        self.candidates.discard("data")
        n = len(self.offload)
        # a backward hook only where a prefetch starts, or where a
        # synchronised prefetch is waited for
        self.hooked = {i for i in range(n) if self.schedule[i] >= 0
                       or (i + 1 < n and self.schedule[i + 1] >= 0)}
        self.stats = {"offloaded_bytes": 0, "prefetched_bytes": 0, "on_demand_bytes": 0,
                      "offloads": 0, "fetches": 0, "packs": 0, "recomputed_segments": 0}
        self._reset()

    def _from_plan(self, plan: LayerPlanFile) -> None:
        """The plan file's splits applied to the graph, its offloads,
        prefetches and checkpointed segments by layer id."""
        graph = self.gm.graph
        for first, last, parts in plan.split:
            _split_graph(self.gm, self.lid, first, last, parts)
        rows = plan.layers
        self.index = {r.id: i for i, r in enumerate(rows)}
        have = {self.lid[n] for n in graph.nodes if n.op not in ("placeholder", "output")}
        missing = [r.id for r in rows if r.id not in have and r.id != "loss"]
        if missing:
            raise ValueError(f"the plan names layers the model does not have: "
                             f"{', '.join(missing[:5])}")
        self.offload = tuple(tuple(r.offload) for r in rows)
        self.schedule = tuple(self.index[r.prefetch] if r.prefetch else -1 for r in rows)
        self.sync = plan.sync
        # layers of the plan that the model does not run (the loss): their prefetches are
        # issued when the forward pass returns, as the loss's backward comes next
        self.orphans = [i for i, r in enumerate(rows) if r.id not in have]
        order = list(graph.nodes)
        pos = {self.lid[n]: k for k, n in enumerate(order)}
        for a, b in plan.recompute:
            nodes = order[pos[a]:pos[b] + 1]
            self.segments[a] = (b, nodes)

    # -- per iteration state -----------------------------------------------------------------
    def _reset(self) -> None:
        # Storage addresses are reused once a storage is freed, so a saved tensor is named
        # only against the running layer's own inputs.
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
        self._env, self._buf = env, buf
        skip_to: fx.Node | None = None
        out = None
        for node in gm.graph.nodes:
            if skip_to is not None:  # inside a checkpointed segment that has run
                done = node is skip_to
                for a in release.get(node, ()):
                    env.pop(a, None)
                    buf.pop(a, None)
                if done:
                    skip_to = None
                continue
            if node.op == "placeholder":
                env[node] = x
                buf[node] = "data"
                continue
            if node.op == "output":
                out = fx.node.map_arg(node.args[0], lambda n: env[n])
                for i in self.orphans:
                    self._backward_start(i)
                break
            seg = self.segments.get(self.lid[node])
            if seg is not None:  # checkpointed
                self._run_segment(seg[1])
                skip_to = seg[1][-1]
                if node is skip_to:
                    skip_to = None
                for a in release.get(node, ()):
                    env.pop(a, None)
                    buf.pop(a, None)
                continue
            self._run_node(node)
            for a in release.get(node, ()):
                env.pop(a, None)
                buf.pop(a, None)
        return out

    def _run_node(self, node: fx.Node, recompute: bool = False) -> None:
        """One node of the graph: its offloads after it, its backward hook; the saved-tensor
        hooks only where a saved buffer can move."""
        gm, env, buf = self.gm, self._env, self._buf
        if node.op == "get_attr":
            env[node] = fetch_attr(gm, node.target)
            return
        cuda = self._side is not None
        lid = self.lid[node]
        i = self.index.get(lid)
        offload = self.offload[i] if i is not None and not recompute else ()
        before = torch.cuda.current_stream().record_event() if cuda and offload else None
        args = fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n])
        packing = not recompute and (lid in self.candidates or any(
            buf.get(a) in self.candidates for a in node.all_input_nodes))
        if packing:
            self._inputs = _storages(node, env, buf)
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                result = _call(gm, node, args, kwargs)
        else:
            result = _call(gm, node, args, kwargs)
        del args, kwargs
        env[node] = result
        new, self._new = self._new, {}
        parts = _tensors(result)
        if parts or isinstance(result, torch.Tensor):
            ins = self._inputs if packing else _storages(node, env, buf)
        if isinstance(result, torch.Tensor):
            sid = _sid(result)
            buf[node] = ins.get(sid, lid)  # in place or a view: alias
            if sid in new and buf[node] in self.candidates:
                self._handles[buf[node]] = new[sid]
        elif parts:  # chunk, split, unbind: each part a view of its input's buffer
            buf[node] = tuple(ins.get(_sid(r), f"{lid}:{k}")  # type: ignore[assignment]
                              for k, r in enumerate(result))
        self._inputs = {}
        if isinstance(result, torch.Tensor) and i is not None and not recompute:
            fn = result.grad_fn
            if fn is not None and i in self.hooked:
                fn.register_prehook(lambda g, i=i: self._backward_start(i))
            if offload:
                events = []
                moved = []
                for b in offload:
                    h = self._handles.get(b)
                    if h is not None and h.gpu is not None:
                        events.append(self._offload_now(h, before))
                        moved.append(h)
                self._by_layer[i] = moved
                if self.sync and cuda and events:
                    for ev in events:
                        torch.cuda.current_stream().wait_event(ev)

    def _run_segment(self, nodes: list[fx.Node]) -> None:
        """``nodes`` under torch.utils.checkpoint (non-reentrant):
        what they save is dropped and made again before their backward pass."""
        env, buf = self._env, self._buf
        ext, outs = _boundary(nodes)
        last: dict[fx.Node, fx.Node] = {}
        for n in nodes:
            for a in n.all_input_nodes:
                last[a] = n
        calls = [0]

        def run(*vals: Any) -> tuple[Any, ...]:
            calls[0] += 1
            again = calls[0] > 1  # the recompute, in backward
            saved_env, saved_buf = self._env, self._buf
            local = dict(zip(ext, vals))
            lbuf = {a: buf.get(a, self.lid[a]) for a in ext}
            self._env, self._buf = local, lbuf
            try:
                for n in nodes:
                    self._run_node(n, recompute=again)
                    for a in n.all_input_nodes:
                        if last.get(a) is n and a not in outs and a not in ext:
                            local.pop(a, None)
                return tuple(local[o] for o in outs)
            finally:
                self._env, self._buf = saved_env, saved_buf
                if not again:
                    for o in outs:
                        buf[o] = lbuf.get(o, self.lid[o])

        results = checkpoint(run, *[env[a] for a in ext], use_reentrant=False)
        self.stats["recomputed_segments"] += 1
        for o, v in zip(outs, results):
            env[o] = v


def _tensors(x: Any) -> bool:
    """A tuple or list of tensors (what chunk, split and unbind return)."""
    return isinstance(x, (tuple, list)) and bool(x) and all(
        isinstance(r, torch.Tensor) for r in x)


def _storages(node: fx.Node, env: dict[fx.Node, Any], buf: dict[fx.Node, str]
              ) -> dict[int, str]:
    """Storage id -> buffer, for what ``node`` reads: its tensor inputs, and each part of
    an input that is a tuple of views (``x1, x2 = x.chunk(2)`` reads
    x's buffer through either part, as the probe's trace has it)."""
    out: dict[int, str] = {}
    for a in node.all_input_nodes:
        v = env.get(a)
        if isinstance(v, torch.Tensor):
            if a in buf:
                out[_sid(v)] = buf[a]
        elif a in buf and _tensors(v) and isinstance(buf[a], tuple):
            for r, b in zip(v, buf[a]):
                out.setdefault(_sid(r), b)
    return out


def _boundary(nodes: list[fx.Node]) -> tuple[list[fx.Node], list[fx.Node]]:
    """What a run of nodes reads from before it, and which of them are read after it."""
    inside = set(nodes)
    ext: list[fx.Node] = []
    for n in nodes:
        for a in n.all_input_nodes:
            if a not in inside and a not in ext:
                ext.append(a)
    return ext, [n for n in nodes if any(u not in inside for u in n.users)]


def _call(gm: fx.GraphModule, node: fx.Node, args: Any, kwargs: Any) -> Any:
    if node.op == "call_module":
        return gm.get_submodule(node.target)(*args, **kwargs)
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    return getattr(args[0], node.target)(*args[1:], **kwargs)


def _split_graph(gm: fx.GraphModule, lid: dict[fx.Node, str], first: str, last: str,
                 parts: int) -> None:
    """Run the nodes ``first..last`` on ``parts`` slices of the batch,
    named as vdnnsim.planners.split names the layers of the trace it reshapes."""
    graph = gm.graph
    order = list(graph.nodes)
    where = {lid[n]: k for k, n in enumerate(order)}
    if first not in where or last not in where or where[first] > where[last]:
        raise ValueError(f"split {first}..{last}: no such run of layers in the model")
    seg = order[where[first]:where[last] + 1]
    inside = set(seg)
    for n in seg:
        if n.op == "call_module" and isinstance(gm.get_submodule(n.target),
                                                nn.modules.batchnorm._BatchNorm):
            raise ValueError(f"split {first}..{last}: {lid[n]} is a batch norm; it couples "
                             f"the samples of a batch")
    ext, outs = _boundary(seg)
    copies: list[dict[fx.Node, fx.Node]] = []
    with graph.inserting_before(seg[0]):
        pieces = {}
        for a in ext:
            if a.op == "get_attr":
                continue
            sp = graph.call_function(torch.chunk, (a, parts, 0))
            lid[sp] = f"{lid[a]}_split"
            pieces[a] = sp
        for p in range(parts):
            env: dict[fx.Node, fx.Node] = {}
            for a in ext:
                if a in pieces:
                    c = graph.call_function(operator.getitem, (pieces[a], p))
                    lid[c] = chunk_name("data" if a.op == "placeholder" else lid[a], p)
                    env[a] = c
                else:
                    env[a] = a
            for n in seg:
                c = graph.node_copy(n, lambda a: env[a])
                lid[c] = part_name(lid[n], p)
                env[n] = c
            copies.append(env)
        for o in outs:
            cat = graph.call_function(torch.cat, ([env[o] for env in copies], 0))
            lid[cat] = lid[o]
            o.replace_all_uses_with(cat)
    for n in reversed(seg):
        for u in list(n.users):
            if u not in inside:
                raise ValueError(f"split {first}..{last}: {lid[u]} still reads {lid[n]}")
        graph.erase_node(n)
    graph.lint()
