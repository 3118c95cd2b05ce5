"""cuDNN's autotuner in the first training step.

NOTE [cudnn benchmark]
``vdnnsim measure`` runs with ``torch.backends.cudnn.benchmark = True``: the first call of
each convolution configuration (the operation, shapes, stride, padding, dilation, groups,
dtype, memory format) benchmarks cuDNN's algorithms in a trial workspace, then empties the
cache (``torch.cuda.empty_cache()``, ATen's Conv_v8.cpp ``run_single_conv``); later calls
run the chosen plan. So the first step empties the cache at each tuned convolution, and the
steps after it allocate around what survived. The replay models that first step and its
emptying, not the trial workspace (its segment is free when the cache is emptied, and the
traces do not have its size). A depthwise convolution runs ATen's own kernel unless it is
fp16 with at least 32 channels; every other convolution is cuDNN's (docs/validation.md,
"cuDNN's autotuner").
"""

from __future__ import annotations

from ..trace.model import Layer, Trace

HALF = ("fp16", "autocast-fp16")  # the precisions whose depthwise convs may go to cuDNN

# whether replays model the first step's tuning. None (the
# default): where the trace has the backward pass's workspaces one by one, which the replayed
# step needs: each of a tuned conv's backward calls
# empties the cache before allocating its own workspace, and from the emptied cache each
# needs a segment of its own. With the cuBLAS workspaces made where the first step makes
# them, traces/h200_backward_workspaces's VGG-16 and ResNet-50 at 64 replay
# their timed reserved peaks at 3.2% / 21.3% (median / max, 6 runs; 7.0% / 22.2% with one
# step), 0.8% / 6.7% against the fresh-process medians of traces/h200_fresh_processes (4.4% /
# 14.4%), VGG-16's baseline in the GPU's segments but for 68 MiB (10.72 GiB against 10.66;
# 9.12 without the first step). A trace with only the largest backward workspace per conv
# (``bwd_workspaces`` empty: every trace profiled before them) is replayed without: its
# replayed second step lacks the other call's segments and follows the real one less well
# than one step does (traces/h200_torchvision: peak reserved 3.8% / 23.5% without, 4.4% / 19.7% with;
# held-out 4.6% / 28.2% against 6.3% / 26.0%). True or False: every trace or none
# (experiments: snap_reserved.py, autotune_check.py, reserved_segments.py).
REPLAY: bool | None = None


def replays_tuning(trace: Trace) -> bool:
    """Whether a replay of ``trace`` models the first step's
    tuning (``REPLAY``; by default, where the trace's convolutions have their backward
    workspaces one by one)."""
    if REPLAY is not None:
        return REPLAY
    return trace.memo("per_call_workspaces", lambda: any(
        a.bwd_workspaces for layer in trace.layers for a in layer.algos))


def _cudnn(layer: Layer, dtype: str) -> bool:
    """Whether ``layer`` is a convolution that ATen runs through cuDNN."""
    a = layer.attrs
    if layer.kind != "conv" or not a:
        return False
    groups, cin = a.get("groups", 1), a.get("in_channels")
    if groups > 1 and groups == cin:  # depthwise: ATen's kernel, but for fp16 (above)
        return dtype in HALF and cin >= 32
    return True


def autotuned(trace: Trace) -> tuple[tuple[bool, bool], ...]:
    """Per layer, whether its forward and its backward pass are the
    first calls of their cuDNN configuration in the step (each then empties the cache)."""
    return trace.memo("autotuned", lambda: _autotuned(trace))


def _autotuned(trace: Trace) -> tuple[tuple[bool, bool], ...]:
    seen: set[tuple] = set()
    out = []
    for layer in trace.layers:
        if not _cudnn(layer, trace.dtype):
            out.append((False, False))
            continue
        a = layer.attrs
        x = trace.tensors[layer.inputs[0]].shape if layer.inputs else None
        key = (x, tuple(a.get("out_shape") or ()), tuple(a.get("kernel") or ()),
               tuple(a.get("stride") or ()), tuple(a.get("padding") or ()),
               tuple(a.get("dilation") or ()), a.get("groups", 1), a.get("in_channels"),
               a.get("transposed"))
        new = key not in seen
        seen.add(key)
        out.append((new, new))
    return tuple(out)
