"""The profiler: a probe (NOTE [probe]) plus per-layer times, written as a trace.

NOTE [layer timing]
Layers are timed where they run: inside whole training steps (``probe_step``) of the
fx-traced model, after warm-up steps. A CUDA event is recorded after every layer of the
forward pass and from a pre-hook on every layer's autograd node in the backward pass; a
layer's time is the span from its mark to the next, so work that belongs to no layer and
any wait for the host's launches count for the layer before. Each time is the median over
the steps. Instrumented and plain steps alternate; the cost of one mark is estimated per
pass as (instrumented - plain time of the pass) / (marks in the pass) and taken off every
layer's time of that pass (not below zero), so the layers sum to the plain step. On a CPU
(tests) the wall clock stands in for the events and the marks' cost is timed directly.

Workspaces (workspaces.py) are measured per layer alone, on the probe's own tensors: the
allocator's peak during a pass beyond what stays allocated after it, on a call after a
warm-up call (the first call of a conv runs cuDNN's autotuner, whose trial workspaces are
far larger than the chosen algorithm's); a Conv2d's backward calls (backward data,
backward filter) one workspace each (NOTE [backward workspaces]). On the meta device there
is no time: a cost model times each layer for a GPU preset (synthesize.py).

NOTE [host timing]
Beside each mark the host's clock (perf_counter_ns) is read: a layer's host time is the
span from its mark to the next on the host, the Python, dispatch and kernel launches that
issue it (in the backward pass, on autograd's thread, from node pre-hook to pre-hook). The
host's cost of one mark is estimated per pass as for the GPU (instrumented minus plain
host time of the pass, over the marks) and taken off. ``host_step_ns`` is the host's time
for zero_grad and the optimizer step. Within a step nothing synchronises, so these are the
host's own costs; where the GPU is far behind, a launch queue that fills up would make the
host wait and its times too long, which costs nothing in a replay, where the GPU sets that
pace anyway.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..measure.hostprobe import host_probe_ns
from ..model.build import build_model
from ..model.workload import DTYPES  # noqa: F401  (re-exported: calibrate, tests)
from ..probe.fx import probe
from .assemble import _rename, assemble, software  # noqa: F401  (importable from here)
from .kernels import count_kernels
from .synthesize import (  # noqa: F401  (importable from here, as callers do)
    _calibrated, _flat, _gradient_sums, analytic_algos, synthesize_model)
from .timing import _Clock, time_in_situ  # noqa: F401
from .workspaces import OUT_OF_PLACE, _workspace, conv_backward_calls  # noqa: F401


def resident_bytes(model: nn.Module) -> int:
    """The resident bytes of ``model`` on the current GPU, after training steps have run.

    NOTE [resident memory]
    What the framework holds all run long beyond the weights and the input: the module
    buffers (batch-norm running statistics) and the cuBLAS workspaces, one per (handle,
    stream) that ran a matmul; PyTorch gives the backward pass its own thread and so its
    own handle. They are read as the allocated bytes that clearing the workspaces returns,
    so the number holds in a process that profiled other models before.
    """
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
    probe_ns = host_probe_ns(device)  # before the model is built
    model, shape, name = build_model(model_spec)
    names = _rename(model)
    cuda = torch.device(device).type == "cuda"
    torch.backends.cudnn.benchmark = True
    p = probe(model, shape, batch_size, device, DTYPES[dtype], name)
    inner, meta = time_in_situ(model, p, trials, cuda)
    left_out: list[int] = []
    counts = count_kernels(model, p, left_out=left_out)[0] if cuda else None
    spaces = {n.name: _workspace(n) if cuda else (0, 0, ()) for n in p.nodes}
    resident = resident_bytes(model) if cuda else 0
    times = {k: (*inner[k], *spaces[k]) for k in spaces}
    gpu = torch.cuda.get_device_name() if cuda else f"cpu ({device})"
    src = {"kind": "profiled", "gpu": gpu, "software": software(),
           "host_probe_ns": round(probe_ns, 1),
           **({"host_probe_between_ns": round(meta["host_probe_between_ns"], 1)}
              if "host_probe_between_ns" in meta else {}),
           "note": f"vdnnsim profile --model {model_spec} --batch {batch_size}; per-layer "
                   f"median of {trials} whole steps; one step took "
                   f"{meta['instrumented_ns'] / 1e6:.2f} ms with the timestamps, "
                   f"{meta['plain_ns'] / 1e6:.2f} ms without; per layer, "
                   f"{meta['mark_fwd_ns'] / 1e3:.1f} us (forward) and "
                   f"{meta['mark_bwd_ns'] / 1e3:.1f} us (backward) of timestamp cost "
                   f"taken off; the host issued the forward pass in "
                   f"{meta['host_fwd_pass_ns'] / 1e6:.2f} ms and the backward in "
                   f"{meta['host_bwd_pass_ns'] / 1e6:.2f} ms, "
                   f"{meta['host_mark_ns'] / 1e3:.1f} us per mark taken off"
                   + (f"; {left_out[0]} commands ran on a library's own streams, not the "
                      "compute stream's, and are not in the layers' kernel counts"
                      if left_out and left_out[0] else "")}
    step = meta["step_ns"]
    data = assemble(p, times=times, names=names, source=src, step_ns=step, dtype=dtype,
                    hosts=meta["hosts"], host_step_ns=meta["host_step_ns"], kernels=counts)
    if resident:
        data["resident_bytes"] = resident
    return data
