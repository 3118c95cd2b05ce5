"""cuDNN's autotuner in the first training step (NOTE [cudnn benchmark]).

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

# NOTE [cudnn benchmark]: whether replays model the first step's tuning. Off: with the
# traces' backward workspaces (one, the largest, per conv: NOTE [backward workspaces]) the
# replayed second step follows the real one less well than one step does (traces/h200:
# peak reserved 3.8% / 23.5% median / max error without, 4.3% / 26.9% with; held-out
# 4.6% / 28.2% against 6.3% / 29.4%); python experiments/h200_issue28/snap_reserved.py
# and autotune_check.py show why. Experiments turn it on (``autotune.REPLAY = True``).
REPLAY = False


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
    """NOTE [cudnn benchmark]: per layer, whether its forward and its backward pass are the
    first calls of their cuDNN configuration in the step (each then empties the cache)."""
    cached = trace.__dict__.get("_autotuned")  # a trace is immutable; replays ask often
    if cached is not None:
        return cached
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
    trace.__dict__["_autotuned"] = res = tuple(out)
    return res
