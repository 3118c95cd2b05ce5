"""The profiler: a probe (NOTE [probe]) plus per-layer times, written as a trace.

NOTE [layer timing]
Layers are timed where they run: inside whole training steps (forward, cross-entropy loss,
backward, SGD step: ``probe_step``, NOTE [training step]) of the fx-traced model, after
warm-up steps (cudnn.benchmark picks each conv's algorithm there). A CUDA event is
recorded after every layer of the forward pass and
from a pre-hook on every layer's autograd node in the backward pass; a layer's time is the
span from its mark to the next one, so the nodes that belong to no layer (AccumulateGrad,
a transpose) and any wait for the host's kernel launches count for the layer before them.
The per-layer times thus sum to the instrumented step, as the GPU saw it: a layer that is
too small to keep the GPU busy costs what it costs in eager PyTorch, not its kernel time.
Each time is the median over several steps.
The marks are not free: recording an event and hooking an autograd node costs the host
tens of microseconds, which shows on the GPU's timeline wherever the host, not the GPU,
sets the pace (DenseNet-121 at batch 64 on the H200: 113 ms per step with the marks, 71 ms
without). Instrumented and plain steps alternate, and the cost of one mark is estimated
per pass as (instrumented - plain time of the pass) / (marks in the pass) and taken off
every layer's time of that pass (not below zero). Where the GPU sets the pace that
difference is about zero and nothing changes; where the host does, each layer gives back
what its mark added. Either way the layers sum to the plain step. This uses only the
profile's own steps, never a measurement the validation compares with.
(The isolated timing this replaced, each layer alone with torch.autograd.grad per call,
overcounted small layers by the engine's per-call work: up to +90% on DenseNet-121.)
The workspace of a layer is measured alone, on the probe's own tensors: the allocator's
peak during a pass beyond what stays allocated after it, on a call after a warm-up call
(the first call of a conv runs cuDNN's autotuner, whose trial workspaces are far larger
than the chosen algorithm's); a Conv2d's backward calls (backward data, backward filter)
are also measured alone, one workspace each (NOTE [backward workspaces]). On the meta
device there is no time: the cost model times each layer for a GPU preset instead. On a CPU device (tests) the wall clock stands in for
the events, and the marks' cost is timed directly instead: K back-to-back marks, the
median of each's cost. There the difference of two passes is the machine's noise, not the
marks (a loaded two-core machine: whole passes differ by tens of milliseconds between
steps, and that difference spread over the layers took every millisecond of a conv).
NOTE [host timing]
Beside each mark the host's clock (perf_counter_ns) is read: a layer's host time is the
span from its mark to the next on the host, the Python, dispatch and kernel launches that
issue it (in the backward pass, on autograd's thread, from node pre-hook to pre-hook). The
host's cost of one mark is estimated per pass as for the GPU (instrumented minus plain
host time of the pass, over the marks) and taken off. ``host_step_ns`` is the host's time
for zero_grad and the optimizer step. Within a step nothing synchronises, so these are the
host's own costs; where the GPU is far behind, a launch queue that fills up (about a
thousand kernels) would make the host wait and its times too long, which costs nothing in
a replay, where the GPU sets that pace anyway.
"""

from __future__ import annotations

import copy
import math
import operator
import statistics
import time
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

from ...trace.schema import FORMAT, VERSION
from ..probe.fx import Probe, ProbeNode, probe, trace_module
from ..measure.hostprobe import StepProbe, host_probe_ns
from .instrument import hook_backward, instrument
from .kernels import count_kernels
from ..model.build import ZooModule, build_model
from ..model.workload import DTYPES, probe_step  # DTYPES re-exported: calibrate, tests

OUT_OF_PLACE = {operator.iadd: operator.add}


def _rename(model: nn.Module) -> dict[str, str]:
    if isinstance(model, ZooModule):
        return {f"layers_{k}": v for k, v in model.names.items()}
    return {}


def assemble(p: Probe, times: dict[str, tuple[int, int, int, int]] | None = None,
             algos: dict[str, list[dict[str, Any]]] | None = None, names: dict[str, str] | None
             = None, source: dict[str, Any] | None = None, step_ns: int = 0,
             dtype: str = "fp32", hosts: dict[str, tuple[int, int]] | None = None,
             host_step_ns: int = 0, kernels: dict[str, tuple[int, int]] | None = None
             ) -> dict[str, Any]:
    """The trace file (as a dict) of a probe, with per-layer (fwd_ns, bwd_ns, fwd_ws, bwd_ws)
    or cost-model algorithm lists."""
    names = names or {}

    def rn(t: str) -> str:  # fx node name -> the model's layer name; extras keep ':savedK'
        head, sep, tail = t.partition(":")
        return names.get(head, head) + sep + tail
    tensors = [{"id": "data", "size_bytes": p.data_nbytes, "kind": "input",
                "shape": list(p.data_shape)}]
    layers = []
    for n in p.nodes:
        t: dict[str, Any] = {"id": rn(n.name), "size_bytes": n.out_nbytes,
                             "shape": list(n.out_shape)}
        if not n.requires_grad:
            t["requires_grad"] = False
        if n.alias_of:
            t["alias_of"] = rn(n.alias_of)
        tensors.append(t)
        outputs = [rn(n.name)]
        inputs = [rn(i) for i in n.inputs]
        for s in n.saved:
            if s.role == "extra":
                tensors.append({"id": rn(s.tensor), "size_bytes": s.nbytes, "kind": "extra"})
                outputs.append(rn(s.tensor))
            elif rn(s.tensor) not in inputs and rn(s.tensor) not in outputs:
                inputs.append(rn(s.tensor))
        layer: dict[str, Any] = {"id": rn(n.name), "kind": n.kind, "inputs": inputs,
                                 "outputs": outputs,
                                 "saved": list(dict.fromkeys(rn(s.tensor) for s in n.saved))}
        if n.weight_bytes:
            layer["weight_bytes"] = n.weight_bytes
        if algos is not None:
            layer["algos"] = algos[n.name]
        else:
            f, b, fw, bw, *split = (times or {}).get(n.name, (0, 0, 0, 0))
            if fw or bw:  # one measured algorithm with its own forward/backward workspace
                layer["algos"] = [dict(name="profiled", fwd_ns=f, bwd_ns=b,
                                       fwd_workspace_bytes=fw, bwd_workspace_bytes=bw)]
                if split and split[0] and max(split[0]) == bw:  # NOTE [backward workspaces]
                    layer["algos"][0]["bwd_workspaces"] = list(split[0])
            else:
                layer.update(fwd_ns=f, bwd_ns=b)
        hf, hb = (hosts or {}).get(n.name, (0, 0))
        if hf or hb:  # NOTE [host timing]
            layer.update(host_fwd_ns=hf, host_bwd_ns=hb)
        if kernels and n.name in kernels:  # NOTE [kernel counts]
            layer.update(kernels_fwd=kernels[n.name][0], kernels_bwd=kernels[n.name][1])
        attrs = {k: v for k, v in n.attrs.items() if not k.startswith("_") and v != {}}
        attrs["flops"] = n.flops
        layer["attrs"] = attrs
        layers.append(layer)
    return {"format": FORMAT, "version": VERSION, "name": p.name, "batch_size": p.batch_size,
            "dtype": dtype, "source": {"framework": "pytorch", **(source or {})},
            "tensors": tensors, "layers": layers, **({"step_ns": step_ns} if step_ns else {}),
            **({"host_step_ns": host_step_ns} if host_step_ns else {})}


# -- timing on CUDA -------------------------------------------------------------------------
class _Clock:
    """Timestamps on the GPU's compute stream (CUDA events), or the wall clock on a CPU."""

    def __init__(self, cuda: bool):
        self.cuda = cuda

    def mark(self) -> Any:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3


def _mark_cost_ms(clock: _Clock, host: Any, k: int = 200) -> float:
    """NOTE [layer timing]: the median cost of one mark (a timestamp on each clock and the
    append of the pair), in ms, from ``k`` marks made back to back."""
    marks: list[Any] = []
    costs = []
    for _ in range(k):
        t0 = time.perf_counter_ns()
        marks.append((clock.mark(), host()))
        costs.append(time.perf_counter_ns() - t0)
    return statistics.median(costs) / 1e6


def time_in_situ(model: nn.Module, p: Probe, trials: int, cuda: bool = True,
                 warmup: int = 3) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    """Per-layer (forward, backward) ns inside whole training steps (NOTE [layer timing]),
    and the step's own times: ``step_ns`` (the optimizer), ``instrumented_ns`` and
    ``plain_ns`` (a whole step with and without the timestamps), ``mark_fwd_ns`` and
    ``mark_bwd_ns`` (what one timestamp costs, taken off each layer's time)."""
    gm = trace_module(model)
    names = [n.name for n in p.nodes if n.name != "loss"]
    index = {name: k for k, name in enumerate(names)}
    clock = _Clock(cuda)
    on = [False]
    fwd_marks: list[Any] = []
    bwd_marks: list[tuple[int, Any]] = []
    hooked: dict[int, Any] = {}  # id -> node; holding it keeps the ids unique

    host = time.perf_counter_ns  # NOTE [host timing]: the host's clock beside each mark

    def start() -> None:
        if on[0]:
            fwd_marks.append((clock.mark(), host()))

    def after(k: int, out: Any) -> Any:
        if on[0]:
            fwd_marks.append((clock.mark(), host()))
            hook_backward(out, hooked, lambda: bwd_marks.append((k, clock.mark(), host())))
        return out

    instrument(gm, index, start, after)
    train = probe_step(gm, p.batch_size, p.data_shape[1:], p.dtype)  # NOTE [training step]
    n = len(names)
    loss_k = n  # the loss is the last layer

    def step(timed: bool) -> dict[str, Any]:
        on[0] = timed
        fwd_marks.clear()
        bwd_marks.clear()
        hooked.clear()
        t: dict[str, Any] = {}

        def at(point: str, loss: Any) -> None:  # NOTE [training step]'s points
            if point == "start":
                t["h0"] = host()
            elif point == "zero_grad":
                t["s"] = clock.mark()
                t["hs"] = host()
            elif point == "forward":
                t["f_end"], t["hf"] = clock.mark(), host()
                if timed and loss.grad_fn is not None:
                    loss.grad_fn.register_prehook(
                        lambda g: bwd_marks.append((loss_k, clock.mark(), host())))
            elif point == "backward":
                t["b_end"], t["hb"] = clock.mark(), host()
            else:
                t["e"], t["he"] = clock.mark(), host()

        train(at)
        return {"start": t["s"], "fwd": list(fwd_marks) + [(t["f_end"], t["hf"])],
                "bwd": list(bwd_marks), "f_end": t["f_end"], "b_end": t["b_end"],
                "end": t["e"], "hb": t["hb"],
                "host": {"zero": t["hs"] - t["h0"], "f": t["hf"] - t["hs"],
                         "b": t["hb"] - t["hf"], "step": t["he"] - t["hb"]}}

    for _ in range(warmup):
        step(True)
    between = StepProbe("cuda") if cuda else None  # NOTE [host probe]: after each step
    samples_f: list[list[float]] = [[] for _ in range(n + 1)]
    samples_b: list[list[float]] = [[] for _ in range(n + 1)]
    host_f: list[list[float]] = [[] for _ in range(n + 1)]  # ms, as the GPU's samples
    host_b: list[list[float]] = [[] for _ in range(n + 1)]
    opt_ms: list[float] = []
    phases: dict[str, list[float]] = {k: [] for k in (
        "inst_f", "inst_b", "plain_f", "plain_b", "inst", "plain", "h_inst_f", "h_inst_b",
        "h_plain_f", "h_plain_b", "h_step", "h_zero")}
    n_bwd = []
    for _ in range(trials):  # instrumented and plain steps alternate: drift hits both
        r = step(True)
        if cuda:
            r["end"].synchronize()
        marks = r["fwd"]  # start, after layer 0, ..., after layer n-1, after the loss
        if len(marks) == n + 2:
            for k in range(n + 1):
                samples_f[k].append(clock.ms(marks[k][0], marks[k + 1][0]))
                host_f[k].append((marks[k + 1][1] - marks[k][1]) / 1e6)
        seq = r["bwd"] + [(None, r["b_end"], r["hb"])]
        for (k, a, ha), (_, b, hb) in zip(seq, seq[1:]):
            samples_b[k].append(clock.ms(a, b))
            host_b[k].append((hb - ha) / 1e6)
        n_bwd.append(len(r["bwd"]))
        opt_ms.append(clock.ms(r["b_end"], r["end"]))
        phases["inst_f"].append(clock.ms(r["start"], r["f_end"]))
        phases["inst_b"].append(clock.ms(r["f_end"], r["b_end"]))
        phases["inst"].append(clock.ms(r["start"], r["end"]))
        phases["h_inst_f"].append(r["host"]["f"] / 1e6)
        phases["h_inst_b"].append(r["host"]["b"] / 1e6)
        r = step(False)
        if cuda:
            r["end"].synchronize()
        phases["plain_f"].append(clock.ms(r["start"], r["f_end"]))
        phases["plain_b"].append(clock.ms(r["f_end"], r["b_end"]))
        phases["plain"].append(clock.ms(r["start"], r["end"]))
        phases["h_plain_f"].append(r["host"]["f"] / 1e6)
        phases["h_plain_b"].append(r["host"]["b"] / 1e6)
        phases["h_step"].append(r["host"]["step"] / 1e6)
        phases["h_zero"].append(r["host"]["zero"] / 1e6)
        if between is not None:
            between()
    hooked.clear()
    m = {k: statistics.median(v) for k, v in phases.items()}
    if cuda:
        # NOTE [layer timing]: what the marks themselves cost, per mark, on the GPU's timeline
        over_f = max(0.0, m["inst_f"] - m["plain_f"]) / (n + 1)
        over_b = max(0.0, m["inst_b"] - m["plain_b"]) / max(1, statistics.median(n_bwd))
        # NOTE [host timing]: and on the host's clock
        h_over_f = max(0.0, m["h_inst_f"] - m["h_plain_f"]) / (n + 1)
        h_over_b = max(0.0, m["h_inst_b"] - m["h_plain_b"]) / max(1, statistics.median(n_bwd))
    else:  # NOTE [layer timing]: on a CPU the wall clock is both clocks; timed directly
        over_f = over_b = h_over_f = h_over_b = _mark_cost_ms(clock, host)

    def med(v: list[float], over: float = 0.0) -> int:
        return int(max(0.0, statistics.median(v) - over) * 1e6) if v else 0
    times = {name: (med(samples_f[k], over_f), med(samples_b[k], over_b))
             for k, name in enumerate(names)}
    times["loss"] = (med(samples_f[n], over_f), med(samples_b[n], over_b))
    hosts = {name: (med(host_f[k], h_over_f), med(host_b[k], h_over_b))
             for k, name in enumerate(names)}
    hosts["loss"] = (med(host_f[n], h_over_f), med(host_b[n], h_over_b))
    meta = {"step_ns": med(opt_ms), "instrumented_ns": int(m["inst"] * 1e6),
            "plain_ns": int(m["plain"] * 1e6), "mark_fwd_ns": int(over_f * 1e6),
            "mark_bwd_ns": int(over_b * 1e6), "hosts": hosts,
            "host_step_ns": int((m["h_step"] + m["h_zero"]) * 1e6),
            "host_fwd_pass_ns": int(m["h_plain_f"] * 1e6),
            "host_bwd_pass_ns": int(m["h_plain_b"] * 1e6),
            "host_mark_ns": int(h_over_f * 1e6)}
    if between is not None:
        between.close()
        meta["host_probe_between_ns"] = statistics.median(between.times)
    return times, meta


def conv_backward_calls(mod: nn.Module, x: torch.Tensor, grad: torch.Tensor
                        ) -> list[Any]:
    """NOTE [backward workspaces]: the calls a Conv2d's backward pass makes one after the
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
    """NOTE [backward workspaces]: each of :func:`conv_backward_calls`' workspaces, measured
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
    convolution's backward workspaces one by one (NOTE [backward workspaces]), ()
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
            if split:  # their largest is the backward's workspace (NOTE [backward workspaces])
                bws = max(split)
        return fws, bws, split
    finally:
        if restore:
            mod.inplace = True


def software() -> dict[str, str]:
    out = {"torch": str(torch.__version__)}
    if torch.cuda.is_available():
        out["cuda"] = str(torch.version.cuda)
        out["cudnn"] = str(torch.backends.cudnn.version())
    try:
        import torchvision
        out["torchvision"] = str(torchvision.__version__)
    except ImportError:
        pass
    return out


def resident_bytes(model: nn.Module) -> int:
    """NOTE [resident memory]: what the framework holds all run long beyond the weights and
    the input, measured after training steps have run: the module buffers (batch-norm
    running statistics) and the cuBLAS workspaces, one per (handle, stream) that ran a
    matmul; PyTorch gives the backward pass its own thread and so its own handle. They are
    read as the allocated bytes that clearing the workspaces returns, so the number holds
    in a process that profiled other models before."""
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is None or not torch.cuda.is_available():
        return buffers
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    clear()
    return buffers + max(0, before - torch.cuda.memory_allocated())


def profile_model(model_spec: str, batch_size: int, dtype: str = "fp32", trials: int = 5,
                  device: str = "cuda") -> dict[str, Any]:
    """Profile on a CUDA GPU: the trace (as a dict) of one training iteration."""
    if torch.device(device).type == "cuda" and torch.device(device).index is not None:
        with torch.cuda.device(torch.device(device)):  # events and statistics: that GPU's
            return profile_model(model_spec, batch_size, dtype, trials, "cuda")
    probe_ns = host_probe_ns(device)  # NOTE [host probe]: before the model is built
    model, shape, name = build_model(model_spec)
    names = _rename(model)
    cuda = torch.device(device).type == "cuda"
    torch.backends.cudnn.benchmark = True
    p = probe(model, shape, batch_size, device, DTYPES[dtype], name)
    inner, meta = time_in_situ(model, p, trials, cuda)
    left_out: list[int] = []
    counts = count_kernels(model, p, left_out=left_out)[0] if cuda else None  # NOTE
    # [kernel counts]
    spaces = {n.name: _workspace(n) if cuda else (0, 0, ()) for n in p.nodes}
    resident = resident_bytes(model) if cuda else 0
    times = {k: (*inner[k], *spaces[k]) for k in spaces}
    gpu = torch.cuda.get_device_name() if cuda else f"cpu ({device})"
    src = {"kind": "profiled", "gpu": gpu, "software": software(),
           "host_probe_ns": round(probe_ns, 1),
           **({"host_probe_between_ns": round(meta["host_probe_between_ns"], 1)}
              if "host_probe_between_ns" in meta else {}),
           "note": f"vdnnsim profile --model {model_spec} --batch {batch_size}; per-layer "
                   f"median of {trials} whole steps (NOTE [layer timing]); one step took "
                   f"{meta['instrumented_ns'] / 1e6:.2f} ms with the timestamps, "
                   f"{meta['plain_ns'] / 1e6:.2f} ms without; per layer, "
                   f"{meta['mark_fwd_ns'] / 1e3:.1f} us (forward) and "
                   f"{meta['mark_bwd_ns'] / 1e3:.1f} us (backward) of timestamp cost "
                   f"taken off; the host issued the forward pass in "
                   f"{meta['host_fwd_pass_ns'] / 1e6:.2f} ms and the backward in "
                   f"{meta['host_bwd_pass_ns'] / 1e6:.2f} ms, "
                   f"{meta['host_mark_ns'] / 1e3:.1f} us per mark taken off (NOTE [host timing])"
                   + (f"; {left_out[0]} commands ran on a library's own streams, not the "
                      "compute stream's, and are not in the layers' kernel counts (NOTE "
                      "[kernel counts])" if left_out and left_out[0] else "")}
    step = meta["step_ns"]
    data = assemble(p, times=times, names=names, source=src, step_ns=step, dtype=dtype,
                    hosts=meta["hosts"], host_step_ns=meta["host_step_ns"], kernels=counts)
    if resident:
        data["resident_bytes"] = resident
    return data


# -- meta device + cost model ----------------------------------------------------------------
_ACT_CLASS = {nn.ReLU: "relu", nn.ReLU6: "relu6", nn.SiLU: "silu", nn.GELU: "gelu",
              nn.Hardswish: "hardswish", nn.Sigmoid: "sigmoid", nn.Hardsigmoid: "hardsigmoid"}


# ops that return a view of their input: no kernel runs (torch.permute, Tensor.transpose,
# a tuple's item of torch.chunk, ...)
_VIEW_OPS = frozenset({"permute", "transpose", "getitem", "view", "reshape", "expand",
                       "squeeze", "unsqueeze", "narrow", "t", "chunk", "split", "unflatten",
                       "flatten", "Permute", "Identity"})


def _flat(numel: int) -> dict[str, int]:
    """A streaming class's parameters for ``numel`` elements (NOTE [kernel model])."""
    return {"batch": 1, "c": numel, "h": 1, "w": 1}


def _calibrated(n: ProbeNode, km: Any, dtype: str) -> tuple[int, int, int, int]:
    """(fwd_ns, bwd_ns, fwd_ws, bwd_ws) of one layer from the calibrated kernel model:
    the sum of the ops PyTorch runs for it (NOTE [kernel model]). A layer of a kind the
    calibration has no class for is timed as the 'relu' class over its bytes."""
    ins = [a for a in n.args if isinstance(a, torch.Tensor)]
    if n.args and isinstance(n.args[0], (list, tuple)):
        ins = [a for a in n.args[0] if isinstance(a, torch.Tensor)]
    needs = any(a.requires_grad for a in ins)
    out_numel = math.prod(n.out_shape)
    in_numel = ins[0].numel() if ins else out_numel
    mod = n.module
    t = km.time_ns
    if n.kind == "conv" and isinstance(mod, nn.Conv2d) and ins and ins[0].dim() == 4:
        b, c, h, w = ins[0].shape
        kh, kw = mod.kernel_size
        pad = mod.padding if not isinstance(mod.padding, str) else \
            ((kh - 1) // 2, (kw - 1) // 2) if mod.padding == "same" else (0, 0)
        p = dict(batch=b, c=c, h=h, w=w, k_out=mod.out_channels, kh=kh, kw=kw,
                 sh=mod.stride[0], sw=mod.stride[1], ph=pad[0], pw=pad[1], groups=mod.groups)
        fwd = t("conv", "fwd", p, dtype)
        bwd = t("conv", "bwd_filter", p, dtype)
        ws_b = km.workspace_bytes("bwd_filter", p, dtype)
        if needs:
            bwd += t("conv", "bwd_data", p, dtype)
            ws_b = max(ws_b, km.workspace_bytes("bwd_data", p, dtype))
        if mod.bias is not None:
            out = _flat(out_numel)
            fwd += t("bias", "fwd", out, dtype)
            bwd += t("bias", "bwd", out, dtype)
        return round(fwd), round(bwd), km.workspace_bytes("fwd", p, dtype), ws_b
    if n.kind == "fc" and isinstance(mod, nn.Linear):
        p = dict(batch=max(1, out_numel // mod.out_features), fin=mod.in_features,
                 fout=mod.out_features)
        bwd = t("linear", "bwd_filter", p, dtype)
        if needs:
            bwd += t("linear", "bwd_data", p, dtype)
        return round(t("linear", "fwd", p, dtype)), round(bwd), 0, 0
    if n.kind == "loss":
        classes = ins[0].shape[-1] if ins else 1
        p = dict(batch=max(1, in_numel // classes), classes=classes)
        return round(t("cross_entropy", "fwd", p, dtype)), \
            round(t("cross_entropy", "bwd", p, dtype)), 0, 0
    if n.alias_of is not None and (n.kind == "flatten" or n.op in _VIEW_OPS
                                   or n.op == "stochastic_depth"):
        return 0, 0, 0, 0  # a view: no kernel
    if n.op in ("layer_norm", "LayerNorm") and ins:  # over the last dimension
        x = ins[0]
        rows = max(1, x.numel() // x.shape[-1])
        p = dict(batch=rows, c=x.shape[-1], h=1, w=1)
        fwd, bwd = t("layer_norm", "fwd", p, dtype), t("layer_norm", "bwd", p, dtype)
        if not x.is_contiguous():  # ConvNeXt's permuted input: layer_norm copies it first
            fwd += t("relu", "fwd", _flat(x.numel()), dtype)
        return round(fwd), round(bwd), 0, 0
    if n.kind == "bn" and len(n.out_shape) == 4:
        b, c, h, w = n.out_shape
        p = dict(batch=b, c=c, h=h, w=w)
        return round(t("bn", "fwd", p, dtype)), round(t("bn", "bwd", p, dtype)), 0, 0
    op = {"add": "add", "concat": "cat", "mul": "mul_bcast", "dropout": "dropout"}.get(n.kind)
    if n.op == "stochastic_depth":  # training: the input times a per-sample mask
        op = "mul_bcast"
    if n.kind == "relu":
        op = next((v for k, v in _ACT_CLASS.items() if isinstance(mod, k)), "relu")
    elif n.kind == "maxpool":
        k = getattr(mod, "kernel_size", 2)
        op = "maxpool3s2" if (k[0] if isinstance(k, tuple) else k) >= 3 else "maxpool2s2"
    elif n.kind == "avgpool":
        op = "gap" if math.prod(n.out_shape[2:]) == 1 else "avgpool2s2"
    if op is None or not km.has(op):
        op = "relu"  # no class of its own: an elementwise pass over its bytes
    # the streamed tensor: for a broadcast mul or add the larger operand (SE's `scale *
    # input` names the small one first), for a concat all of them
    numel = sum(a.numel() for a in ins) if op == "cat" else \
        max([out_numel, *(a.numel() for a in ins)]) if op in ("mul_bcast", "add") else in_numel
    p = _flat(numel)
    fwd = t(op, "fwd", p, dtype)
    bwd = t(op, "bwd", p, dtype) if (needs or n.weight_bytes) and km.has(op, "bwd") else 0
    return round(fwd), round(bwd), 0, 0


def analytic_algos(p: Probe, gpu: Any, dtype: str = "fp32") -> dict[str, list[dict[str, Any]]]:
    """Each probed layer's algorithm options timed by the analytic cost model for ``gpu``
    (a probe is made once; a fit can time it for many presets)."""
    from ...costs.analytic import ConvGeometry, _simple_algo, conv_algos_for

    algos: dict[str, list[dict[str, Any]]] = {}
    for n in p.nodes:
        ins = [a for a in n.args if isinstance(a, torch.Tensor)]
        if isinstance(n.args[0] if n.args else None, (list, tuple)):
            ins = [a for a in n.args[0] if isinstance(a, torch.Tensor)]
        in_elems = sum(a.numel() for a in ins)
        params = n.weight_bytes // DTYPES[dtype].itemsize if n.weight_bytes else 0
        needs = any(a.requires_grad for a in ins)
        if n.kind == "conv" and isinstance(n.module, nn.Conv2d) and ins and ins[0].dim() == 4:
            m = n.module
            b, c, h, w = ins[0].shape
            _, k_out, ho, wo = n.out_shape
            pad = m.padding if not isinstance(m.padding, str) else (0, 0)
            geo = ConvGeometry(b, c, h, w, k_out, ho, wo, m.kernel_size[0], m.kernel_size[1],
                               m.stride[0], m.stride[1], pad[0], pad[1], m.groups, params,
                               n.flops, needs)
            options = conv_algos_for(geo, gpu, dtype)
        else:
            kind = "fc" if n.kind == "fc" else n.kind
            info = SimpleNamespace(alias=n.alias_of is not None and n.kind == "flatten",
                                   in_elems=in_elems, out_elems=math.prod(n.out_shape),
                                   flops=n.flops, type=kind, params=params,
                                   needs_input_grad=needs)
            options = (_simple_algo(info, 1, gpu, dtype),)  # type: ignore[arg-type]
        algos[n.name] = [dict(name=a.name, fwd_ns=a.fwd_ns, bwd_ns=a.bwd_ns,
                              fwd_workspace_bytes=a.fwd_workspace_bytes,
                              bwd_workspace_bytes=a.bwd_workspace_bytes) for a in options]
    return algos


def synthesize_model(model_spec: str, batch_size: int, gpu, dtype: str = "fp32") -> dict:
    """The same layer graph on the meta device, timed for ``gpu`` by its calibrated kernel
    model (NOTE [kernel model]) where the preset has one, else by the analytic cost model."""
    from ...costs.analytic import COST_MODEL
    from ...costs.kernel import MODEL, for_gpu

    try:
        with torch.device("meta"):  # no weights to initialise: only shapes are needed
            model, shape, name = build_model(model_spec)
    except (NotImplementedError, RuntimeError):  # a constructor that reads tensor values
        model, shape, name = build_model(model_spec)  # (RegNet's widths): on the CPU
    names = _rename(model)
    p = probe(copy.deepcopy(model), shape, batch_size, "meta", DTYPES[dtype], name)
    km = for_gpu(gpu, dtype)
    if km is not None:
        return _synthesize_calibrated(model, p, km, gpu, dtype, model_spec, names, MODEL)
    algos = analytic_algos(p, gpu, dtype)
    src = {"kind": "synthesized", "gpu": gpu.name, "cost_model": COST_MODEL,
           "software": software(), "note": f"vdnnsim trace --model {model_spec}: meta device"}
    host = getattr(gpu, "host", None)  # NOTE [host costs]: the preset's, per layer
    hosts = {n.name: (host.layer_fwd_ns, host.layer_bwd_ns) for n in p.nodes} if host else None
    return assemble(p, algos=algos, names=names, source=src, dtype=dtype, hosts=hosts)


def _gradient_sums(p: Probe, km: Any, dtype: str) -> dict[str, tuple[int, int]]:
    """NOTE [gradient sums]: a tensor that k layers read gets k gradients in the backward
    pass, and autograd adds them: k - 1 elementwise adds of the tensor's size (a residual
    connection's input, DenseNet's concatenated features, a squeeze-and-excitation block's
    input). No layer's own ops include them; they are charged to the backward of the layer
    that made the tensor, timed by the calibrated 'add' class, each add also one kernel
    launch for the host (DenseNet-201 has about 1,800 of them a step). Per producing
    layer: (GPU ns, adds)."""
    readers: dict[str, int] = {}
    for n in p.nodes:
        for t in dict.fromkeys(n.inputs):
            readers[t] = readers.get(t, 0) + 1
    out: dict[str, tuple[int, int]] = {}
    for n in p.nodes:
        k = readers.get(n.name, 0)
        if k > 1 and n.requires_grad:
            numel = math.prod(n.out_shape)
            out[n.name] = (round((k - 1) * km.time_ns("add", "fwd", _flat(numel), dtype)),
                           k - 1)
    return out


def _synthesize_calibrated(model: nn.Module, p: Probe, km: Any, gpu: Any, dtype: str,
                           model_spec: str, names: dict[str, str], model_name: str) -> dict:
    times = {n.name: _calibrated(n, km, dtype) for n in p.nodes}
    sums = _gradient_sums(p, km, dtype)
    for name, (extra, _) in sums.items():
        f, b, fw, bw = times[name]
        times[name] = (f, b + extra, fw, bw)
    params = [q for q in model.parameters() if q.requires_grad]
    step = km.time_ns("sgd_step", "step", {"params": sum(q.numel() for q in params),
                                           "tensors": len(params)}, dtype)
    src = {"kind": "synthesized", "gpu": gpu.name, "cost_model": model_name,
           "software": software(),
           "note": f"vdnnsim trace --model {model_spec}: meta device, kernel model fitted to "
                   f"{gpu.calibration} ({km.source})"}
    host = gpu.host  # NOTE [host costs]: the preset's, per layer, per gradient sum, per step
    hosts, host_step = None, 0
    if host.layer_fwd_ns or host.layer_bwd_ns:
        launch = km.fitted.get("launch", {}).get("host_launch_ns", 0.0)
        hosts = {n.name: (host.layer_fwd_ns,
                          host.layer_bwd_ns + round(sums.get(n.name, (0, 0))[1] * launch))
                 for n in p.nodes}
        if host.view_fwd_ns or host.view_bwd_ns:  # a view launches nothing
            for n in p.nodes:
                if n.alias_of is not None and times[n.name] == (0, 0, 0, 0):
                    hosts[n.name] = (host.view_fwd_ns, host.view_bwd_ns)
        host_step = host.step_ns + host.step_tensor_ns * len(params)
    data = assemble(p, times=times, names=names, source=src, dtype=dtype, hosts=hosts,
                    step_ns=round(step), host_step_ns=host_step)
    for layer in data["layers"]:  # every layer one algorithm, as a profiled trace has
        if "algos" not in layer:
            f, b = layer.pop("fwd_ns"), layer.pop("bwd_ns")
            layer["algos"] = [dict(name="calibrated", fwd_ns=f, bwd_ns=b,
                                   fwd_workspace_bytes=0, bwd_workspace_bytes=0)]
        else:
            layer["algos"][0]["name"] = "calibrated"
    has_matmul = any(isinstance(m, nn.Linear) for m in model.modules())
    resident = sum(b.numel() * b.element_size() for b in model.buffers()) \
        + (gpu.cublas_workspace_bytes if has_matmul else 0)  # NOTE [resident memory]
    if resident:
        data["resident_bytes"] = resident
    return data
