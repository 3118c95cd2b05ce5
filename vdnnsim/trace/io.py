"""Trace <-> YAML, with the graph checks of trace/schema.py."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import TraceError
from ..yamlio import (dump_yaml, misplaced, parse_model, paused_gc, read_yaml,
                      write_text_atomic)
from .model import Algo, Layer, Source, Tensor, Trace
from .schema import FORMAT, VERSION, TraceSpec


def trace_from_dict(data: Any, source: str = "<trace>") -> Trace:
    if not (isinstance(data, dict) and "format" in data):  # NOTE [file kinds]
        wrong = misplaced(data, source, "a trace", ("trace",))
        if wrong:
            raise TraceError(wrong)
    with paused_gc():
        spec: TraceSpec = parse_model(TraceSpec, data, source, TraceError)
        return _build(spec, source)


# A trace file read again, unchanged, gives the Trace it gave, a trace being immutable
# (NOTE [trace analyses]): validation reads a folder's traces for each set of records, and
# a session (a test run, a notebook) the same committed traces many times. Unchanged: the
# same name from the same folder, the same file (device, inode) of the same size and
# modification and change times, those over _SETTLED_NS old when it was read (a file
# rewritten within the clock's tick could keep its times; one read as settled that
# changes gets new ones). The last _READ_MAX are kept, in this process only.
_READ: dict[tuple[Any, ...], Trace] = {}
_READ_MAX = 64
_READ_LOCK = threading.Lock()
_SETTLED_NS = 2 * 10**9


def _file_key(path: Any) -> tuple[Any, ...] | None:
    if not isinstance(path, (str, os.PathLike)):
        return None  # read_yaml says what is wrong with it
    try:
        st = os.stat(path)
        here = os.getcwd()
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode) or \
            time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < _SETTLED_NS:
        return None
    return (os.fspath(path), here, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns)


def load_trace(path: str | os.PathLike) -> Trace:
    key = _file_key(path)
    if key is not None:
        with _READ_LOCK:
            hit = _READ.pop(key, None)
            if hit is not None:
                _READ[key] = hit  # the most recent again
                return hit
    trace = trace_from_dict(read_yaml(path, TraceError), str(path))
    if key is not None:
        with _READ_LOCK:
            _READ[key] = trace
            while len(_READ) > _READ_MAX:
                del _READ[next(iter(_READ))]
    return trace


def save_trace(trace: Trace, path: str | os.PathLike) -> None:
    with paused_gc():
        text = dump_yaml(trace_to_dict(trace))
    write_text_atomic(Path(path), text)


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    src = {k: dict(v) if isinstance(v, dict) else v for k, v in vars(trace.source).items()
           if v not in (None, {}, "") and not (k == "framework" and v == "torch7")}
    tensors = []
    for t in trace.tensors.values():
        d: dict[str, Any] = {"id": t.id, "size_bytes": t.size_bytes, "kind": t.kind}
        if t.requires_grad != (t.kind == "activation"):
            d["requires_grad"] = t.requires_grad
        if t.alias_of:
            d["alias_of"] = t.alias_of
        if t.shape:
            d["shape"] = list(t.shape)
        tensors.append(d)
    layers = []
    for layer in trace.layers:
        d = {"id": layer.id, "kind": layer.kind, "inputs": list(layer.inputs),
             "outputs": list(layer.outputs), "saved": list(layer.saved)}
        if layer.weight_bytes:
            d["weight_bytes"] = layer.weight_bytes
        if len(layer.algos) == 1 and layer.algos[0].name == "default":
            a = layer.algos[0]
            d.update(fwd_ns=a.fwd_ns, bwd_ns=a.bwd_ns)
            if a.workspace_bytes:
                d["workspace_bytes"] = a.workspace_bytes
        else:
            d["algos"] = [dict(name=a.name, fwd_ns=a.fwd_ns, bwd_ns=a.bwd_ns,
                               fwd_workspace_bytes=a.fwd_workspace_bytes,
                               bwd_workspace_bytes=a.bwd_workspace_bytes,
                               **({"bwd_workspaces": list(a.bwd_workspaces)}
                                  if a.bwd_workspaces else {})) for a in layer.algos]
        if layer.host_fwd_ns or layer.host_bwd_ns:
            d.update(host_fwd_ns=layer.host_fwd_ns, host_bwd_ns=layer.host_bwd_ns)
        if layer.kernels_fwd is not None:
            d["kernels_fwd"] = layer.kernels_fwd
        if layer.kernels_bwd is not None:
            d["kernels_bwd"] = layer.kernels_bwd
        if layer.attrs:
            d["attrs"] = dict(layer.attrs)
        layers.append(d)
    return {"format": FORMAT, "version": VERSION, "name": trace.name,
            "batch_size": trace.batch_size, "dtype": trace.dtype, "source": src,
            "tensors": tensors, "layers": layers,
            **({"step_ns": trace.step_ns} if trace.step_ns else {}),
            **({"resident_bytes": trace.resident_bytes} if trace.resident_bytes else {}),
            **({"host_step_ns": trace.host_step_ns} if trace.host_step_ns else {}),
            **({"step_workspace_bytes": trace.step_workspace_bytes}
               if trace.step_workspace_bytes else {}),
            **({"optimizer": trace.optimizer} if trace.optimizer != "sgd" else {}),
            **({"optimizer_steps": {n: [g, h] for n, g, h in trace.optimizer_steps}}
               if trace.optimizer_steps else {}),
            **({"micro_batches": trace.micro_batches} if trace.micro_batches != 1 else {}),
            **({"accumulate_ns": trace.accumulate_ns} if trace.accumulate_ns else {}),
            **({"host_accumulate_ns": trace.host_accumulate_ns}
               if trace.host_accumulate_ns else {}),
            **({"checkpointed": [list(s) for s in trace.checkpointed]}
               if trace.checkpointed else {})}


def _build(spec: TraceSpec, source: str) -> Trace:
    def fail(where: str, msg: str) -> TraceError:
        return TraceError(f"{source}: {where}: {msg}")

    tensors: dict[str, Tensor] = {}
    for i, t in enumerate(spec.tensors):
        if t.id in tensors:
            raise fail(f"tensors[{i}].id", f"duplicate tensor id {t.id!r}")
        rg = t.requires_grad if t.requires_grad is not None else t.kind == "activation"
        tensors[t.id] = Tensor(t.id, t.size_bytes, t.kind, rg, t.alias_of,
                               tuple(t.shape) if t.shape else None)
    index = {t.id: i for i, t in enumerate(spec.tensors)}
    for i, t in enumerate(spec.tensors):
        if t.alias_of is not None and t.alias_of not in tensors:
            raise fail(f"tensors[{i}].alias_of", f"unknown tensor {t.alias_of!r}")
    root = _alias_roots(tensors, index, fail)
    for i, t in enumerate(spec.tensors):
        r = tensors[root[t.id]]
        if t.alias_of is not None and r.size_bytes != t.size_bytes:
            raise fail(f"tensors[{i}].size_bytes",
                       f"alias {t.id!r} has {t.size_bytes} bytes but its buffer "
                       f"{r.id!r} has {r.size_bytes}")

    layer_ids: set[str] = set()
    writer: dict[str, int] = {}
    for i, ls in enumerate(spec.layers):
        if ls.id in layer_ids:
            raise fail(f"layers[{i}].id", f"duplicate layer id {ls.id!r}")
        layer_ids.add(ls.id)
        for key, tids in (("inputs", ls.inputs), ("outputs", ls.outputs), ("saved", ls.saved)):
            for j, tid in enumerate(tids):
                if tid not in tensors:
                    raise fail(f"layers[{i}] ({ls.id}).{key}[{j}]", f"unknown tensor {tid!r}")
        for j, tid in enumerate(ls.outputs):
            if tid in writer:
                raise fail(f"layers[{i}] ({ls.id}).outputs[{j}]",
                           f"tensor {tid!r} is already written by "
                           f"layers[{writer[tid]}] ({spec.layers[writer[tid]].id})")
            if tensors[tid].kind == "input":
                raise fail(f"layers[{i}] ({ls.id}).outputs[{j}]", f"{tid!r} is a network input")
            writer[tid] = i
        if ls.saved:
            ends = set(ls.inputs).union(ls.outputs)  # a set: a join may have many inputs
            for j, tid in enumerate(ls.saved):
                if tid not in ends:
                    raise fail(f"layers[{i}] ({ls.id}).saved[{j}]",
                               f"{tid!r} is neither an input nor an output of this layer")
    for tid, t in tensors.items():
        if t.kind != "input" and tid not in writer:
            raise fail("tensors", f"tensor {tid!r} is written by no layer")

    _check_order(spec, writer, source)
    for i, t in enumerate(spec.tensors):  # a view shares a buffer that already exists
        r = root[t.id]
        if t.alias_of is not None and t.id in writer and writer.get(r, -1) > writer[t.id]:
            j = writer[r]
            raise fail(f"tensors[{i}].alias_of", f"{t.id!r} shares the buffer of {r!r}, which "
                       f"is written later, by layers[{j}] ({spec.layers[j].id})")

    layers = []
    for ls in spec.layers:
        if ls.algos is not None:
            algos = tuple(Algo(a.name, a.fwd_ns, a.bwd_ns, a.fwd_workspace_bytes,
                               a.bwd_workspace_bytes, tuple(a.bwd_workspaces or ()))
                          for a in ls.algos)
        else:
            algos = (Algo("default", ls.fwd_ns or 0, ls.bwd_ns or 0,
                          ls.workspace_bytes, ls.workspace_bytes),)
        layers.append(Layer(ls.id, ls.kind, tuple(ls.inputs), tuple(ls.outputs),
                            tuple(ls.saved), algos, ls.weight_bytes, dict(ls.attrs),
                            ls.host_fwd_ns, ls.host_bwd_ns, ls.kernels_fwd, ls.kernels_bwd))
    _check_segments(spec, fail)
    s = spec.source
    return Trace(spec.name, spec.batch_size, spec.dtype, tensors, tuple(layers),
                 Source(s.kind, s.framework, s.gpu, s.cost_model, dict(s.software), s.note,
                        s.host_probe_ns, s.host_probe_between_ns,
                        {k: v for k, v in s.retime.model_dump().items() if v}
                        if s.retime else None),
                 spec.step_ns, spec.resident_bytes, spec.host_step_ns,
                 spec.step_workspace_bytes, spec.optimizer,
                 tuple((n, *v) for n, v in (spec.optimizer_steps or {}).items()),
                 spec.micro_batches, spec.accumulate_ns, spec.host_accumulate_ns,
                 tuple((a, b) for a, b in spec.checkpointed))


def _check_segments(spec: TraceSpec, fail) -> None:
    """``checkpointed``: known layers, each segment in order, after the one before it."""
    at = {ls.id: i for i, ls in enumerate(spec.layers)}
    end = -1
    for k, ids in enumerate(spec.checkpointed):
        for j, lid in enumerate(ids):
            if lid not in at:
                raise fail(f"checkpointed[{k}][{j}]", f"unknown layer {lid!r}")
        first, last = at[ids[0]], at[ids[1]]
        if first > last:
            raise fail(f"checkpointed[{k}]", f"{ids[0]!r} comes after {ids[1]!r}")
        if first <= end:
            raise fail(f"checkpointed[{k}]", "overlaps the segment before it, or comes "
                       "before it; list segments in layer order")
        end = last


def _alias_roots(tensors: dict[str, Tensor], index: dict[str, int], fail) -> dict[str, str]:
    """Each tensor's buffer, every alias chain walked once (linear in the tensors); a
    chain that comes back to itself is an error naming the first tensor that closes it."""
    root: dict[str, str] = {}
    for tid in tensors:
        path: list[str] = []
        on_path: set[str] = set()
        cur = tid
        while cur not in root and tensors[cur].alias_of is not None:
            if cur in on_path:
                raise fail(f"tensors[{index[cur]}].alias_of", f"alias cycle through {cur!r}")
            on_path.add(cur)
            path.append(cur)
            cur = tensors[cur].alias_of  # type: ignore[assignment]
        r = root.get(cur, cur)
        root[cur] = r
        for t in path:
            root[t] = r
    return root


def _check_order(spec: TraceSpec, writer: dict[str, int], source: str) -> None:
    """Every read must come after its write. If not, name the cycle when there is one."""
    edges: dict[int, set[int]] = {i: set() for i in range(len(spec.layers))}
    first_bad: tuple[int, str] | None = None
    for i, ls in enumerate(spec.layers):
        for tid in ls.inputs:
            if tid in writer:
                edges[writer[tid]].add(i)
                if writer[tid] >= i and first_bad is None:
                    first_bad = (i, tid)
    if first_bad is None:
        return
    cycle = _find_cycle(edges)
    if cycle:
        names = " -> ".join(spec.layers[i].id for i in cycle + [cycle[0]])
        raise TraceError(f"{source}: layers: the graph has a cycle: {names}")
    i, tid = first_bad
    raise TraceError(f"{source}: layers[{i}] ({spec.layers[i].id}): reads {tid!r} before "
                     f"layers[{writer[tid]}] ({spec.layers[writer[tid]].id}) writes it; "
                     "list layers in execution order")


def _find_cycle(edges: dict[int, set[int]]) -> list[int] | None:
    """A cycle of the graph, found by an iterative depth-first search (a recursive one runs
    out of stack on long chains)."""
    color = dict.fromkeys(edges, 0)
    for start in edges:
        if color[start]:
            continue
        stack: list[int] = [start]
        todo: list[list[int]] = [sorted(edges[start], reverse=True)]
        color[start] = 1
        while stack:
            if todo[-1]:
                v = todo[-1].pop()
                if color[v] == 1:
                    return stack[stack.index(v):]
                if color[v] == 0:
                    color[v] = 1
                    stack.append(v)
                    todo.append(sorted(edges[v], reverse=True))
            else:
                color[stack.pop()] = 2
                todo.pop()
    return None
