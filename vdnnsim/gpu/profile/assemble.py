"""A probe as a trace file (a dict): its tensors and layers, with their times where given."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...trace.schema import FORMAT, VERSION
from ..model.build import ZooModule
from ..probe.fx import Probe


def _rename(model: nn.Module) -> dict[str, str]:
    if isinstance(model, ZooModule):
        return {f"layers_{k}": v for k, v in model.names.items()}
    return {}


def assemble(p: Probe, times: dict[str, tuple[int, int, int, int]] | None = None,
             algos: dict[str, list[dict[str, Any]]] | None = None, names: dict[str, str] | None
             = None, source: dict[str, Any] | None = None, step_ns: int = 0,
             dtype: str = "fp32", hosts: dict[str, tuple[int, int]] | None = None,
             host_step_ns: int = 0, kernels: dict[str, tuple[int, int]] | None = None,
             features: bool = False) -> dict[str, Any]:
    """The trace file (as a dict) of a probe, with per-layer (fwd_ns, bwd_ns, fwd_ws, bwd_ws)
    or cost-model algorithm lists; ``features``: each op's ``op`` features and ``seq``, what
    re-timing it reads (NOTE [retime])."""
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
                if split and split[0] and max(split[0]) == bw:
                    layer["algos"][0]["bwd_workspaces"] = list(split[0])
            else:
                layer.update(fwd_ns=f, bwd_ns=b)
        hf, hb = (hosts or {}).get(n.name, (0, 0))
        if hf or hb:
            layer.update(host_fwd_ns=hf, host_bwd_ns=hb)
        if kernels and n.name in kernels:
            layer.update(kernels_fwd=kernels[n.name][0], kernels_bwd=kernels[n.name][1])
        attrs = {k: v for k, v in n.attrs.items() if not k.startswith("_") and v != {}}
        if "_dtype" in n.attrs:  # an op probe's: the output's, as torch names it
            attrs["dtype"] = str(n.attrs["_dtype"]).removeprefix("torch.")
        attrs["flops"] = n.flops
        if features and "_seq" in n.attrs:  # NOTE [retime]
            if n.attrs.get("_f") is not None and not (n.alias_of and n.kind == "flatten"):
                attrs["op"] = dict(n.attrs["_f"])
            attrs["seq"] = n.attrs["_seq"]
        layer["attrs"] = attrs
        layers.append(layer)
    return {"format": FORMAT, "version": VERSION, "name": p.name, "batch_size": p.batch_size,
            "dtype": dtype, "source": {"framework": "pytorch", **(source or {})},
            "tensors": tensors, "layers": layers, **({"step_ns": step_ns} if step_ns else {}),
            **({"host_step_ns": host_step_ns} if host_step_ns else {}),
            **({"checkpointed": [[rn(a), rn(b)] for a, b in p.checkpointed]}
               if p.checkpointed else {})}

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

