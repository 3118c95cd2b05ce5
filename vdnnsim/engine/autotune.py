"""cuDNN's autotuner in the first training step.

NOTE [cudnn benchmark]
``vdnnsim measure`` runs with ``torch.backends.cudnn.benchmark = True`` (NOTE
[measurement]): the first call of each convolution configuration benchmarks cuDNN's
algorithms, and ATen's cuDNN convolution (aten/src/ATen/native/cudnn/Conv_v8.cpp,
``run_single_conv``) does, for that call only:
1. ``get_plans_from_find``: a trial workspace, the largest that any candidate plan asks
   for (``generate_and_filter_plans``: plans needing more than the caching allocator's
   ``cacheInfo`` -- the larger of the device's free memory and the largest cached free
   block -- are dropped; an out-of-memory halves the size and drops the plans above it),
   allocated through the caching allocator, the plans timed in it, freed on return;
2. ``torch.cuda.empty_cache()`` (``_cudnn_get_conv_benchmark_empty_cache()``, true unless
   ``torch._C._cudnn_set_conv_benchmark_empty_cache(False)``): the events of deferred
   frees are waited for and every fully free segment is given back (release_cached_blocks);
3. the chosen plan runs with its own workspace (``run_conv_plan``), as every later call.
A configuration is the benchmark cache's key: the operation (forward, backward data,
backward filter), the input and weight shapes, stride, padding, dilation, groups, dtype,
memory format and the pointers' alignment (the caching allocator's blocks are 512-byte
aligned, so that part never differs). A conv whose configuration an earlier call in the
step had already tuned runs straight away.

So the first step leaves a cache unlike one step's from an emptied cache: each tuned
convolution empties the cache in the middle of the step, and the segments made after it
are cut to that moment's requests; the next steps allocate around what survived. The trial
workspace itself leaves nothing: its segment is free when the cache is emptied (in the
allocator's histories of twelve traces/h200 runs, ``traces/h200_issue28/session13/snap``,
every release in the first step gives back exactly the fully free segments, the trial's
among them, and no trial segment is reserved at the timed peak). The replay therefore
models step 2, the empty_cache, and not the trial's size, which the traces do not have
(it matters to the first step's own peak only, which the measurement's reset of the peak
statistics drops). Which convolutions go to cuDNN (ATen's ``use_cudnn_depthwise``): a
depthwise convolution (groups equal to the input channels) runs ATen's own kernel unless
it is fp16 with at least 32 channels (ATen then asks a heuristic per filter shape that is
not followed here: such a conv is taken as cuDNN's); every other convolution is cuDNN's.
"""

from __future__ import annotations

from ..trace.model import Layer, Trace

HALF = ("fp16", "autocast-fp16")  # the precisions whose depthwise convs may go to cuDNN

# whether replays model the first step's tuning. None (the
# default): where the trace has the backward pass's workspaces one by one, which the replayed
# step needs: each of a tuned conv's backward calls
# empties the cache before allocating its own workspace, and from the emptied cache each
# needs a segment of its own. With the cuBLAS workspaces made where the first step makes
# them, traces/h200_bwdws's VGG-16 and ResNet-50 at 64 replay
# their timed reserved peaks at 3.2% / 21.3% (median / max, 6 runs; 7.0% / 22.2% with one
# step), 0.8% / 6.7% against the fresh-process medians of traces/h200_repeat (4.4% /
# 14.4%), VGG-16's baseline in the GPU's segments but for 68 MiB (10.72 GiB against 10.66;
# 9.12 without the first step). A trace with only the largest backward workspace per conv
# (``bwd_workspaces`` empty: every trace profiled before them) is replayed without: its
# replayed second step lacks the other call's segments and follows the real one less well
# than one step does (traces/h200: peak reserved 3.8% / 23.5% without, 4.4% / 19.7% with;
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
