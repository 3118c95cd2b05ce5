"""The profiler: a probe (NOTE [probe]) plus per-layer times, written as a trace.

NOTE [layer timing]
On a CUDA device each layer is timed alone, as the paper's oracle times layers: its
forward, then its backward (gradients of its inputs that need one and of its parameters)
from a random output gradient, each repeated between two CUDA events after warm-up runs
(cudnn.benchmark picks the algorithm), the median of several trials. An in-place op is timed
out of place (the same kernel, but repeatable). The time between two events includes the
host's launch work when the GPU outruns it, so small layers cost what they cost in eager
PyTorch. The workspace of a layer is the allocator's peak during the pass beyond what
stays allocated after it, taken after the warm-up runs: the first call of a conv runs
cuDNN's autotuner, whose trial workspaces are far larger than the chosen algorithm's.
(The traces in traces/h200/ were profiled before this was fixed: their workspaces include
the autotuner's, see traces/h200/README.md.) On the meta device there is no time: the cost model times each
layer for a GPU preset instead.
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

from ..trace.schema import FORMAT, VERSION
from .graph import Probe, ProbeNode, probe
from .models import ZooModule, build_model

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
OUT_OF_PLACE = {operator.iadd: operator.add}


def _rename(model: nn.Module) -> dict[str, str]:
    if isinstance(model, ZooModule):
        return {f"layers_{k}": v for k, v in model.names.items()}
    return {}


def assemble(p: Probe, times: dict[str, tuple[int, int, int, int]] | None = None,
             algos: dict[str, list[dict[str, Any]]] | None = None, names: dict[str, str] | None
             = None, source: dict[str, Any] | None = None, step_ns: int = 0,
             dtype: str = "fp32") -> dict[str, Any]:
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
            f, b, fw, bw = (times or {}).get(n.name, (0, 0, 0, 0))
            if fw or bw:  # one measured algorithm with its own forward/backward workspace
                layer["algos"] = [dict(name="profiled", fwd_ns=f, bwd_ns=b,
                                       fwd_workspace_bytes=fw, bwd_workspace_bytes=bw)]
            else:
                layer.update(fwd_ns=f, bwd_ns=b)
        attrs = {k: v for k, v in n.attrs.items() if not k.startswith("_") and v != {}}
        attrs["flops"] = n.flops
        layer["attrs"] = attrs
        layers.append(layer)
    return {"format": FORMAT, "version": VERSION, "name": p.name, "batch_size": p.batch_size,
            "dtype": dtype, "source": {"framework": "pytorch", **(source or {})},
            "tensors": tensors, "layers": layers, **({"step_ns": step_ns} if step_ns else {})}


# -- timing on CUDA -------------------------------------------------------------------------
def bench_ms(fn, warmup: int = 2, trials: int = 5, reps: int = 3, cuda: bool = True) -> float:
    """Median over ``trials`` of the mean time of ``reps`` back-to-back calls (CUDA events;
    a wall clock on the CPU, for tests)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(trials):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(reps):
                fn()
            e.record()
            e.synchronize()
            out.append(s.elapsed_time(e) / reps)
        else:
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            out.append((time.perf_counter() - t0) * 1e3 / reps)
    return statistics.median(out)


def _time_node(n: ProbeNode, trials: int, cuda: bool = True) -> tuple[int, int, int, int]:
    mod = n.module
    restore = None
    if mod is not None and getattr(mod, "inplace", False):
        restore, mod.inplace = True, False
    call = OUT_OF_PLACE.get(n.call, n.call)
    kwargs = dict(n.attrs.get("_kwargs", {}))
    if kwargs.get("inplace"):  # F.relu(x, inplace=True): timed out of place, as modules
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
        fwd = bench_ms(lambda: call(*args, **kwargs), trials=trials, cuda=cuda)
        fws = 0
        if cuda:  # after warm-up: cudnn.benchmark's trials no longer inflate the peak
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        out = call(*args, **kwargs)
        if cuda:
            fws = max(0, torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated())
        params = [p for p in (mod.parameters() if mod is not None else ()) if p.requires_grad]
        targets = leaves + params
        bwd, bws = 0.0, 0
        if targets and out.requires_grad:
            g = torch.randn_like(out) if out.is_floating_point() else torch.ones_like(out)
            grad = lambda: torch.autograd.grad(out, targets, g, retain_graph=True,  # noqa: E731
                                               allow_unused=True)
            bwd = bench_ms(grad, trials=trials, cuda=cuda)
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                held = grad()
                bws = max(0, torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated())
                del held
        return int(fwd * 1e6), int(bwd * 1e6), fws, bws
    finally:
        if restore:
            mod.inplace = True


def step_time_ns(model: nn.Module, trials: int, cuda: bool = True) -> int:
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = torch.optim.SGD(params, lr=1e-3)
    ms = bench_ms(opt.step, trials=trials, cuda=cuda)
    for p in params:
        p.grad = None
    return int(ms * 1e6)


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


def profile_model(model_spec: str, batch_size: int, dtype: str = "fp32", trials: int = 5,
                  device: str = "cuda") -> dict[str, Any]:
    """Profile on a CUDA GPU: the trace (as a dict) of one training iteration."""
    model, shape, name = build_model(model_spec)
    names = _rename(model)
    cuda = torch.device(device).type == "cuda"
    torch.backends.cudnn.benchmark = True
    p = probe(model, shape, batch_size, device, DTYPES[dtype], name)
    times = {n.name: _time_node(n, trials, cuda) for n in p.nodes}
    step = step_time_ns(model, trials, cuda)
    gpu = torch.cuda.get_device_name() if cuda else f"cpu ({device})"
    src = {"kind": "profiled", "gpu": gpu, "software": software(),
           "note": f"vdnnsim profile --model {model_spec} --batch {batch_size}; per-layer "
                   f"median of {trials} trials (NOTE [layer timing])"}
    return assemble(p, times=times, names=names, source=src, step_ns=step, dtype=dtype)


# -- meta device + cost model ----------------------------------------------------------------
def synthesize_model(model_spec: str, batch_size: int, gpu, dtype: str = "fp32") -> dict:
    """The same layer graph on the meta device, timed by the cost model for ``gpu``."""
    from ..costmodel import COST_MODEL, ConvGeometry, _simple_algo, conv_algos_for

    model, shape, name = build_model(model_spec)
    names = _rename(model)
    p = probe(copy.deepcopy(model), shape, batch_size, "meta", DTYPES[dtype], name)
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
    src = {"kind": "synthesized", "gpu": gpu.name, "cost_model": COST_MODEL,
           "software": software(), "note": f"vdnnsim trace --model {model_spec}: meta device"}
    return assemble(p, algos=algos, names=names, source=src, dtype=dtype)
