"""The op probe's layers timed by the op-level kernel model (NOTE [op model]): what turns a
meta-device memory trace of any model into a timed one."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ...costs.ops import GEMMS, OpModel
from .fx import Probe


@dataclass
class OpTimes:
    """Per layer (GPU fwd, GPU bwd, 0, 0), host (fwd, bwd) and kernel counts; the step's
    SGD times and what the trace's note says of the model."""

    times: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    hosts: dict[str, tuple[int, int]] = field(default_factory=dict)
    kernels: dict[str, tuple[int, int]] = field(default_factory=dict)
    step_ns: int = 0
    host_step_ns: int = 0
    steps: dict[str, list[int]] = field(default_factory=dict)  # optimizer -> [GPU, host ns]
    accumulate: list[int] = field(default_factory=lambda: [0, 0])  # [GPU, host ns]: below
    pooled: Counter = field(default_factory=Counter)  # op -> layers timed by the pooled fit


def time_probe(p: Probe, om: OpModel, param_bytes: int, param_tensors: int,
               variant: str = "fp32") -> OpTimes:
    """The op model over every layer of the probe ``p``; ``param_bytes`` and
    ``param_tensors``: the trainable parameters the optimizer steps over; ``variant``: the
    host's costs of fp32, bf16 or autocast."""
    out = OpTimes()
    mod_fwd = om.module_ns[0]
    family = "cnn" if any((n.attrs.get("_f") or {}).get("op") == "convolution"
                          for n in p.nodes) else "transformer"
    readers, grads = gradient_readers(p.nodes)
    last_module = None
    last_seq = 0
    for n in p.nodes:
        seq = n.attrs.get("_seq", last_seq + 1)
        unseen = max(0, seq - last_seq - 1)  # ops dispatched since the last layer: views of
        last_seq = seq                       # weights, ops the loss does not need, ...
        host_unseen = unseen * om.host_ns(None, variant, family)[0]
        f = n.attrs.get("_f")
        view = n.alias_of is not None and n.kind == "flatten"
        module = n.attrs.get("module")
        mod_f = mod_fwd if module != last_module else 0.0
        last_module = module
        if view or f is None:
            out.times[n.name] = (0, 0, 0, 0)
            hf, hb = om.host_ns(None, variant, family)
            out.hosts[n.name] = (round(hf + mod_f + host_unseen),
                                 round(hb) if n.requires_grad else 0)
            out.kernels[n.name] = (0, 0)
            continue
        if f["op"] == "convolution" and not any(t in grads for t in n.inputs[:1]):
            f = dict(f, dgrad=False)  # its input takes no gradient: no data gradient
        fwd, own = om.time_ns(f, "fwd")
        if not own:
            out.pooled[f["op"]] += 1
        bwd, kb = 0.0, 0
        if n.requires_grad:
            bwd, _ = om.time_ns(f, "bwd")
            kb = (2 + (f["op"] in ("addmm", "baddbmm"))) if f["op"] in GEMMS else \
                2 if f["op"] == "convolution" else 1  # a conv: its data and weight gradients
            extra = readers.get(n.name, 0) - 1
            if extra > 0:
                add = {"op": "add", "dt": f["dt"], "bytes": 3 * n.out_nbytes}
                bwd += extra * om.time_ns(add, "fwd")[0]
                kb += extra
        out.times[n.name] = (round(fwd), round(bwd), 0, 0)
        hf, hb = om.host_ns(f["op"], variant, family)
        kf = 1
        if f["op"] == "_grouped_mm" and "m" in f:  # two grouped GEMMs back (NOTE [moe routing])
            kf, kb = (f["b"], 2 * f["b"]) if f.get("loop") else (1, 2)
            hf, hb = (h * kf for h in om.host_ns("mm", variant, family))
        out.hosts[n.name] = (round(hf + mod_f + host_unseen),
                             round(hb) if n.requires_grad else 0)
        out.kernels[n.name] = (kf, kb)
    for opt in ("sgd", "adam", "adamw"):  # calibrated, each
        g, hs = om.step_ns(opt, param_bytes, param_tensors)
        out.steps[opt] = [round(g), round(hs)]
    out.step_ns, out.host_step_ns = out.steps["sgd"]
    out.accumulate = accumulate_ns(om, param_bytes, param_tensors, variant, family)
    return out


def gradient_readers(nodes: list) -> tuple[Counter, set]:
    """(how many ops read each layer's output in the forward pass, the layers whose output
    takes a gradient). An in-place op (``relu_``, ``add_``: an alias of its input whose
    name ends in ``_``) makes a new version of its input, and the ops after it that read
    the input read that version: they are its readers, and only the in-place op reads the
    version before it (whose gradient is then the in-place op's alone: no sum)."""
    readers: Counter = Counter()
    latest: dict[str, str] = {}  # a tensor -> the in-place layer that made its latest version
    root_of: dict[str, str] = {}  # an in-place layer -> the tensor it made a version of
    for n in nodes:
        for t in dict.fromkeys(n.inputs):
            readers[latest.get(t, t)] += 1
        if n.alias_of is not None and n.kind.endswith("_") and not n.kind.startswith("_"):
            root = root_of.get(n.alias_of, n.alias_of)
            root_of[n.name] = root
            latest[root] = n.name
    return readers, {n.name for n in nodes if n.requires_grad}


def accumulate_ns(om: OpModel, param_bytes: int, param_tensors: int, variant: str,
                  family: str) -> list[int]:
    """[GPU ns, host ns] of a micro-batch's gradient adds after the first
    (NOTE [step options]): autograd adds each parameter's new gradient into the one there, in place,
    one ``add_`` a parameter (reading two gradients, writing one: three times its bytes),
    timed as the op model times an add of that size; the host's cost is an add's in the
    backward pass (the autograd engine issues it), once a parameter."""
    if not param_tensors:
        return [0, 0]
    dt = "fp32" if variant == "autocast" else variant  # the parameters' dtype
    one = om.time_ns({"op": "add", "dt": dt, "bytes": 0}, "fwd")[0]
    all_ = om.time_ns({"op": "add", "dt": dt, "bytes": 3 * param_bytes}, "fwd")[0]
    return [round(all_ + (param_tensors - 1) * one),
            round(param_tensors * om.host_ns("add", variant, family)[1])]


def pooled_note(pooled: Counter) -> str:
    """What the trace's note says of ops the calibration has no case of."""
    if not pooled:
        return ""
    top = ", ".join(f"{op} x{k}" for op, k in pooled.most_common(6))
    return (f"; {sum(pooled.values())} ops of {len(pooled)} kinds without a calibrated class "
            f"of their own, timed by a stand-in (a convolution by its other memory format's class, "
            f"a 3-D one by the 2-D class or, without one, as an implicit GEMM; a grouped GEMM as "
            f"its groups' GEMMs; any other by the median streaming class)"
            f": {top}")

