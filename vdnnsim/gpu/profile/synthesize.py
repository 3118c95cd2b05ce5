"""A model's layer graph on the meta device, timed for a GPU preset by its calibrated
kernel model (NOTE [kernel model]) or by the analytic cost model."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..model.build import build_model
from ..model.workload import DTYPES
from ..probe.fx import Probe, ProbeNode, probe
from .assemble import _rename, assemble, software


_ACT_CLASS = {nn.ReLU: "relu", nn.ReLU6: "relu6", nn.SiLU: "silu", nn.GELU: "gelu",
              nn.Hardswish: "hardswish", nn.Sigmoid: "sigmoid", nn.Hardsigmoid: "hardsigmoid"}


# ops that return a view of their input: no kernel runs (torch.permute, Tensor.transpose,
# a tuple's item of torch.chunk, ...)
_VIEW_OPS = frozenset({"permute", "transpose", "getitem", "view", "reshape", "expand",
                       "squeeze", "unsqueeze", "narrow", "t", "chunk", "split", "unflatten",
                       "flatten", "Permute", "Identity"})


def _flat(numel: int) -> dict[str, int]:
    """A streaming class's parameters for ``numel`` elements."""
    return {"batch": 1, "c": numel, "h": 1, "w": 1}


def _calibrated(n: ProbeNode, km: Any, dtype: str) -> tuple[int, int, int, int]:
    """(fwd_ns, bwd_ns, fwd_ws, bwd_ws) of one layer from the calibrated kernel model:
    the sum of the ops PyTorch runs for it. A layer of a kind the
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


@dataclass(frozen=True)
class SimpleLayer:
    """What the analytic cost model times a layer other than a Conv2d from (the fields of
    LayerInfo that ``_simple_algo`` reads, batch included)."""

    alias: bool
    in_elems: int
    out_elems: int
    flops: int
    type: str
    params: int
    needs_input_grad: bool


def analytic_layers(p: Probe, dtype: str = "fp32") -> list[tuple[str, Any]]:
    """Each probed layer's name and what the analytic cost model times it from: a
    ConvGeometry, or a SimpleLayer. Shapes only, no GPU: a fit that times one probe for
    many presets reads the probe's nodes once (``analytic_options`` times each)."""
    from ...costs.analytic import ConvGeometry

    out: list[tuple[str, Any]] = []
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
            what: Any = ConvGeometry(b, c, h, w, k_out, ho, wo, m.kernel_size[0],
                                     m.kernel_size[1], m.stride[0], m.stride[1], pad[0],
                                     pad[1], m.groups, params, n.flops, needs)
        else:
            kind = "fc" if n.kind == "fc" else n.kind
            what = SimpleLayer(alias=n.alias_of is not None and n.kind == "flatten",
                               in_elems=in_elems, out_elems=math.prod(n.out_shape),
                               flops=n.flops, type=kind, params=params, needs_input_grad=needs)
        out.append((n.name, what))
    return out


def analytic_options(what: Any, gpu: Any, dtype: str = "fp32") -> tuple[Any, ...]:
    """The algorithm options (Algo) of one of ``analytic_layers``' layers, timed by the
    analytic cost model for ``gpu``: a function of ``what``, ``gpu`` and ``dtype`` alone."""
    from ...costs.analytic import ConvGeometry, _simple_algo, conv_algos_for

    if isinstance(what, ConvGeometry):
        return conv_algos_for(what, gpu, dtype)
    return (_simple_algo(what, 1, gpu, dtype),)  # type: ignore[arg-type]


def analytic_algos(p: Probe, gpu: Any, dtype: str = "fp32") -> dict[str, list[dict[str, Any]]]:
    """Each probed layer's algorithm options timed by the analytic cost model for ``gpu``
    (a probe is made once; a fit can time it for many presets)."""
    algos: dict[str, list[dict[str, Any]]] = {}
    for name, what in analytic_layers(p, dtype):
        algos[name] = [dict(name=a.name, fwd_ns=a.fwd_ns, bwd_ns=a.bwd_ns,
                            fwd_workspace_bytes=a.fwd_workspace_bytes,
                            bwd_workspace_bytes=a.bwd_workspace_bytes)
                       for a in analytic_options(what, gpu, dtype)]
    return algos


def synthesize_model(model_spec: str, batch_size: int, gpu, dtype: str = "fp32") -> dict:
    """The same layer graph on the meta device, timed for ``gpu`` by its calibrated kernel
    model where the preset has one, else by the analytic cost model. Kept by
    NOTE [trace cache]."""
    from ..probe.cache import cached

    return cached("synthesize_model", model_spec, dict(batch_size=batch_size, dtype=dtype),
                  gpu, lambda: _synthesize_model(model_spec, batch_size, gpu, dtype))


def _synthesize_model(model_spec: str, batch_size: int, gpu, dtype: str) -> dict:
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
    host = getattr(gpu, "host", None)  # the preset's, per layer
    hosts = {n.name: (host.layer_fwd_ns, host.layer_bwd_ns) for n in p.nodes} if host else None
    return assemble(p, algos=algos, names=names, source=src, dtype=dtype, hosts=hosts)


def _gradient_sums(p: Probe, km: Any, dtype: str) -> dict[str, tuple[int, int]]:
    """Per producing layer: (GPU ns, adds) of its gradient sums.

    NOTE [gradient sums]
    A tensor that k layers read gets k gradients in the backward pass, and autograd adds
    them: k - 1 elementwise adds of the tensor's size (a residual connection's input,
    DenseNet's concatenated features, a squeeze-and-excitation block's input). No layer's
    own ops include them; they are charged to the backward of the layer that made the
    tensor, timed by the calibrated 'add' class, each add also one kernel launch for the
    host (DenseNet-201 has about 1,800 of them a step).
    """
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
    host = gpu.host  # the preset's, per layer, per gradient sum, per step
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
        + (gpu.cublas_workspace_bytes if has_matmul else 0)
    if resident:
        data["resident_bytes"] = resident
    return data
