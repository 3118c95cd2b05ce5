"""What a run needs that depends only on the trace, the plan and the semantics, worked out
before anything runs: each layer's host steps, the buffers' free points, checkpointed
segments, host costs and kernel counts."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

from ..trace.model import Trace
from . import autotune
from .autotune import autotuned
from .params import ParamSchedule, param_schedule
from .pinned import pinned_block, registered_bytes
from .plan import Liveness, PlanError, check_plan  # noqa: F401  (PlanError re-exported)
from .stepopts import own_segments, spread

if TYPE_CHECKING:
    from ..hardware import Host as HostCosts
    from .plan import Plan
    from .semantics import Semantics

PASS_THROUGH = ("add_", "sub_")  # in-place ops whose backward hands on the gradient given


class _Steps(NamedTuple):
    """What the host does for one layer that depends only on the trace and the semantics
    (built once per trace): names, the buffers it allocates and reads, the
    gradients it allocates and frees."""

    fwd: str  # the forward op's name
    bwd: str
    out_alloc: tuple[tuple[str, int], ...]  # (buffer, bytes) its forward allocates
    reads: tuple[str, ...]  # the non-empty buffers its forward reads
    saved: tuple[str, ...]  # and its backward
    grads_in: tuple[tuple[tuple[str, str], int], ...]  # input gradients its backward makes
    grads_out: tuple[tuple[str, str], ...]  # output gradients freed after its backward


# NOTE [in-place gradients]
# An op trace names an in-place op's result by its base's buffer, so the gradient its
# reader's backward makes is the base's. The in-place op's own backward makes its input's
# gradient anew (ReluBackward0 is threshold_backward(grad, result): a new tensor) while the
# gradient it was given lives to its end: one gradient more for that op, freed after it.
# add_ and sub_ pass the gradient they were given through to their input. Measured on the
# CPU with real PyTorch (profiler memory events per backward node), r2plus1d_18's deficit
# at each in-place ReLU's backward was that gradient, with and without checkpointing.
def _steps(trace: Trace, lv: Liveness, gkey: dict[str, str], gsize: dict[str, int],
           gneeds: dict[str, bool]) -> tuple[_Steps, ...]:
    def bufs(tensors):
        return tuple(dict.fromkeys(b for t in tensors if lv.size[b := lv.root[t]]))
    return tuple(_Steps(
        f"{x.id}:fwd", f"{x.id}:bwd",
        tuple((t, lv.size[t]) for t in x.outputs if lv.root[t] == t and lv.size[t]),
        bufs(x.inputs), bufs(x.saved),
        tuple(dict.fromkeys([(("grad", g), gsize[g]) for t in x.inputs
                             if gneeds[g := gkey[t]]] + [  # NOTE [in-place gradients]
            (("grad", t), gsize[t]) for t in x.outputs
            if x.kind.endswith("_") and x.kind not in PASS_THROUGH and lv.root[t] != t
            and gkey[t] == t and gneeds[t]])),
        tuple(("grad", t) for t in x.outputs if gkey[t] == t)) for x in trace.layers)


def free_points(lv: Liveness, held: set[str]
                ) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """The buffers freed after each layer's forward pass (read by
    no backward pass) and after each layer's backward pass (the last that keeps them);
    ``held`` (the training loop's input batch) is never freed."""
    fwd_free: dict[int, list[str]] = {}
    for b in lv.fwd_last:
        if not lv.kept(b) and b not in lv.outputs and b not in held:
            fwd_free.setdefault(lv.forward_free(b), []).append(b)
    bwd_free: dict[int, list[str]] = {}
    for b, last in lv.bwd_last.items():
        if b not in held:
            bwd_free.setdefault(last, []).append(b)
    return fwd_free, bwd_free


def parameter_chunks(trace: Trace) -> tuple[int, ...]:
    """Each layer's parameter bytes, in order, where it has any: what the trace knows of
    its parameters' sizes."""
    return tuple(x.weight_bytes for x in trace.layers if x.weight_bytes)


def step_temporaries(trace: Trace) -> tuple[int, ...]:
    """NOTE [step temporaries]
    The optimizer step's temporaries under PyTorch's semantics. A foreach step makes its
    temporaries as lists of tensors, one per parameter (AdamW's ``_foreach_sqrt`` of the
    second moments: a parameter-sized tensor for each parameter, all made at once and freed
    when the step returns), so the caching allocator places each on its own, in whatever
    free blocks the backward pass left; one block of their total (the trace's
    ``step_workspace_bytes``) would need one free range that large, and a segment of its
    own where none is cached (+13% reserved on a 405M-parameter GPT-NeoX step, +1.7 GB).
    The trace has each layer's parameter bytes, not each parameter's: each whole multiple of
    the parameters' total that ``step_workspace_bytes`` holds is one temporary per layer
    with parameters, and what is left over (a profiled step's few small tensors) one more."""
    total = trace.step_workspace_bytes
    chunks = parameter_chunks(trace)
    w = sum(chunks)
    sets = total // w if w else 0
    rest = total - sets * w
    return chunks * sets + ((rest,) if rest else ())


# Adam's and AdamW's two moments per parameter (vdnnsim/trace/optimizer.py
# counts them into a trace's resident_bytes from this table, ADAM_STATE)
MOMENTS = {"adam": 2, "adamw": 2}


def optimizer_pinned_bytes(trace: Trace, pinning: str = "caching") -> int:
    """The pinned copies of an offloaded optimizer's parameters
    and gradients, each a block of the pinned pool (a power of two), or
    with ``pinning`` 'registered' each its bytes at a 64-byte boundary of one buffer
    (NOTE [optimizer pinning]); one per layer's parameters (an op-level trace's layer holds one
    parameter tensor)."""
    size = registered_bytes if pinning == "registered" else pinned_block
    return sum(2 * size(w) for w in parameter_chunks(trace))


def optimizer_host_bytes(trace: Trace, pinning: str = "caching") -> int:
    """What the host holds for an offloaded optimizer: the pinned
    copies, and the optimizer's state (Adam's two moments per parameter, in its dtype,
    pageable)."""
    return (optimizer_pinned_bytes(trace, pinning)
            + MOMENTS.get(trace.optimizer, 0) * trace.weight_bytes)


def optimizer_state(trace: Trace) -> tuple[int, ...]:
    """The optimizer's state as its first step makes it, lazily, one
    tensor per moment and parameter (``exp_avg`` then ``exp_avg_sq`` of each, as
    ``torch.optim.Adam._init_group`` does; per layer's parameter bytes, as
    NOTE [step temporaries]), where the trace's ``resident_bytes`` hold it (they do for a trace
    profiled with the optimizer, NOTE [module timing], and for ``with_optimizer``)."""
    n = MOMENTS.get(trace.optimizer, 0)
    chunks = parameter_chunks(trace)
    if not n or not chunks or trace.resident_bytes < n * sum(chunks):
        return ()
    return tuple(c for c in chunks for _ in range(n))


# the operations that run through cuBLAS (a module profile's nn.Linear is "fc"; an op-level
# trace names ATen's matmuls), NOTE [cublas workspaces]
MATMUL_KINDS = frozenset({"fc", "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear",
                          "addmv", "mv"})
LT_WORKSPACE = 1 << 20  # PyTorch's cuBLASLt workspace (CUBLASLT_WORKSPACE_SIZE's 1024 KiB)


class CublasWorkspaces(NamedTuple):
    """Where a replayed first step allocates them."""

    fwd_layer: int  # the forward pass's first matmul
    bwd_layer: int  # the backward pass's first (the last layer in the forward's order)
    fwd: tuple[int, ...]  # the forward thread's handle: its cuBLAS and cuBLASLt workspaces
    bwd: tuple[int, ...]  # the autograd thread's handle: its cuBLAS workspace


def cublas_workspaces(trace: Trace, cublas_bytes: int, resident: int
                      ) -> CublasWorkspaces | None:
    """NOTE [cublas workspaces]
    PyTorch gives a cuBLAS handle its workspace at the handle's first matmul on a stream,
    through the caching allocator, and keeps it for the process (CublasHandlePool.cpp): the
    forward's first matmul allocates the main thread's cuBLAS workspace and cuBLASLt's 1 MiB
    one, the backward's first matmul the autograd thread's. In the first step they land in
    whatever free block the allocator finds then, and hold it for good (docs/validation.md,
    "cuBLAS workspaces"). The preset's ``cublas_workspace_bytes`` is their total (inside the
    trace's ``resident_bytes``), split as measured: 1 MiB for cuBLASLt, the rest in two equal
    handles' workspaces. A replay whose first iteration is not the process's first step has
    them at its start. None where the trace has no matmul, the preset no cuBLAS workspaces,
    or ``resident`` (the trace's resident bytes less the optimizer's state) cannot hold them."""
    if cublas_bytes <= 0 or resident < cublas_bytes:
        return None
    mm = [i for i, x in enumerate(trace.layers) if x.kind in MATMUL_KINDS]
    if not mm:
        return None
    rest = cublas_bytes - LT_WORKSPACE
    if rest > 0 and rest % 2 == 0:
        fwd, bwd = (rest // 2, LT_WORKSPACE), (rest // 2,)
    else:  # not two handles and cuBLASLt's: all at the forward's first matmul
        fwd, bwd = (cublas_bytes,), ()
    return CublasWorkspaces(mm[0], mm[-1], fwd, bwd)


def steady_state(trace: Trace, sem: "Semantics") -> int:
    """NOTE [steady state]
    A training step with a stateful optimizer (Adam, AdamW) is not its first: the first step
    makes the optimizer's state lazily, in whatever blocks the backward pass left free
    (``optimizer_state``), and later steps allocate around it. A measurement times steps
    after warm-up ones, with the peaks reset after them. So such a run replays one warm-up
    iteration on the same caching allocator and reports the next, whose books start as the
    reset starts them (``next_iteration``); a run whose warm-up does not fit is reported as
    that iteration. Where cuDNN's autotuner is replayed (NOTE [cudnn benchmark]), a trace
    with tuned convolutions replays its first step too. Other runs (SGD) replay one
    iteration (docs/validation.md, "Steady state"). The number of warm-up iterations, 1 or
    0."""
    if not sem.caching_allocator or sem.paged:
        return 0
    tuned = autotune.replays_tuning(trace) and any(f or b for f, b in autotuned(trace))
    return 1 if optimizer_state(trace) or tuned else 0


def keepers(trace: Trace, lv: Liveness) -> dict[str, list[int]]:
    """Buffer -> the layers whose backward pass keeps it."""
    out: dict[str, list[int]] = {}
    for i, layer in enumerate(trace.layers):
        for t in dict.fromkeys(lv.root[t] for t in layer.saved):
            out.setdefault(t, []).append(i)
    return out


def checkpoint_buffers(trace: Trace, lv: Liveness, first: int, last: int, held: set[str]
                       ) -> tuple[frozenset[str], frozenset[str]]:
    """NOTE [recompute]: (the buffers a checkpointed segment drops, its inputs)."""
    keep = trace.memo("keepers", lambda: keepers(trace, lv))
    dropped = frozenset(
        b for b, p in lv.producer.items()
        if first <= p <= last and b in keep and b not in held and b not in lv.outputs
        and all(first <= k <= last for k in keep[b]))
    inputs = frozenset(
        b for j in range(first, last + 1) for t in trace.layers[j].inputs
        if lv.producer.get(b := lv.root[t], -1) < first and b not in held and lv.size[b])
    return dropped, inputs


def offload_around_own(trace: Trace, lv: Liveness, plan: "Plan", sem: "Semantics") -> "Plan":
    """``plan`` offloading none of what the model's own segments (stepopts.py) drop or keep
    as their inputs: as the checkpoint policy leaves them, for an offload of those frees
    nothing."""
    if not trace.checkpointed or not any(plan.offload):
        return plan
    held = {b for b in lv.size if b not in lv.producer} if sem.holds_inputs else set()
    skip: set[str] = set()
    for first, last in trace.checkpointed_segments:
        dropped, inputs = checkpoint_buffers(trace, lv, first, last, held)
        skip |= dropped | inputs
    return replace(plan, offload=tuple(tuple(b for b in o if b not in skip)
                                       for o in plan.offload))


def recompute_sets(trace: Trace, lv: Liveness, segments: tuple[tuple[int, int], ...],
                   held: set[str], fwd_free: dict[int, list[str]],
                   bwd_free: dict[int, list[str]]) -> dict[int, tuple[int, frozenset[str]]]:
    """NOTE [recompute]
    Activation checkpointing as torch.utils.checkpoint does it: a segment of layers runs
    forward keeping none of the buffers its own layers would keep for backward (those
    only layers inside the segment keep); it keeps its inputs (what its layers read that
    was made before it) until its first layer's backward pass is done; and before the
    backward pass of its last layer its forward runs again, bringing the dropped buffers
    back. A buffer a layer outside the segment keeps (the segment's output, saved by the
    next layer) is kept as usual. Moves the frees of ``fwd_free``/``bwd_free`` in place;
    returns, per segment's last layer, (its first layer, the buffers it drops)."""
    where_f = {b: at for at, bs in fwd_free.items() for b in bs}
    where_b = {b: at for at, bs in bwd_free.items() for b in bs}
    out: dict[int, tuple[int, frozenset[str]]] = {}
    for first, last in segments:
        dropped, inputs = checkpoint_buffers(trace, lv, first, last, held)
        # both sets in the order their buffers are made: a set's order changes with the
        # hash seed, and the pool takes back the frees of one point in their list's order
        for b in sorted(dropped, key=lambda b: (lv.producer[b], b)):
            # freed after its last forward reader, a cast at the forward's end (back at
            # the recompute, freed where it was)
            at = lv.forward_free(b)
            fwd_free.setdefault(at, []).append(b)
            where_f[b] = at
        for b in sorted(inputs, key=lambda b: (lv.producer.get(b, -1), b)):
            if b in where_f:  # kept no longer than its forward: now to the backward
                fwd_free[where_f.pop(b)].remove(b)
                bwd_free.setdefault(first, []).append(b)
                where_b[b] = first
            elif where_b.get(b, -1) > first:  # freed before the segment's backward
                bwd_free[where_b[b]].remove(b)
                bwd_free.setdefault(first, []).append(b)
                where_b[b] = first
        out[last] = (first, dropped)
    return out



class Program(NamedTuple):
    """NOTE [compile]
    A plan compiled against its trace: everything the host of a run walks that follows
    from the trace, the plan, the semantics and the preset alone, worked out before the
    simulation starts (pure: no clock, no pool). The simulation is the executor: it alone
    advances time and asks the memory model. ``compile_plan`` is also the plan's check
    (``Plan.check``): a plan that names a layer, buffer or algorithm the trace does not
    have, or whose prefetches and segments point outside it, does not compile."""

    steps: tuple[_Steps, ...]  # per layer
    gkey: dict[str, str]  # buffer -> the key of its gradient (the semantics' grad_keys)
    gsize: dict[str, int]
    gneeds: dict[str, bool]
    host_fwd_ns: tuple[int, ...]  # per layer, the host's issue cost
    host_bwd_ns: tuple[int, ...]
    host_offload_ns: int  # the runtime's per offload and per fetch
    host_fetch_ns: int
    launch_queue: float  # 0: no limit (Torch7's host waits per layer)
    kernels_fwd: tuple[float, ...]  # commands per layer
    kernels_bwd: tuple[float, ...]
    held: frozenset[str]  # the training loop's input batch: never freed
    fwd_free: dict[int, list[str]]  # layer -> buffers freed after its forward (layer-wise)
    bwd_free: dict[int, list[str]]  # and after its backward
    segments: dict[int, tuple[int, frozenset[str]]]
    step_temps: tuple[int, ...]  # the optimizer step's temporaries
    state: tuple[int, ...]  # its state, made at the first step
    autotune: tuple[tuple[bool, bool], ...]  # per layer: its forward's and backward's
    # cuDNN configuration first called there
    params: "ParamSchedule | None" = None
    # per layer, the GPU and host ns of its gradient adds in a micro-batch after the first
    # (stepopts.py)
    accum_ns: tuple[int, ...] = ()
    host_accum_ns: tuple[int, ...] = ()


def compile_plan(trace: Trace, plan: "Plan", lv: Liveness, sem: "Semantics",
                 host: "HostCosts") -> Program:
    """NOTE [compile]: ``plan`` on ``trace`` under ``sem``, with ``host`` the preset's host
    costs; raises :class:`PlanError` for a plan that does not fit its trace."""
    check_plan(trace, lv, plan)
    # a layer runtime (True) pays per layer and per copy; the tensor runtime ("tensors")
    # hooks no layer, and pays per copy only
    runtime = (plan.runtime if plan.runtime == "tensors" else bool(plan.runtime)) \
        if sem.host_ahead else False
    base = _trace_part(trace, lv, sem, host, runtime)
    fwd_free, bwd_free = base.fwd_free, base.bwd_free  # read only, unless moved below
    segments: dict[int, tuple[int, frozenset[str]]] = {}
    own = own_segments(trace, plan)
    if plan.memory == "network_wide":
        fwd_free, bwd_free = {}, {}
    elif plan.recompute or own:  # its frees move, in copies of the lists
        fwd_free = {k: list(v) for k, v in fwd_free.items()}
        bwd_free = {k: list(v) for k, v in bwd_free.items()}
        segments = recompute_sets(trace, lv, tuple(sorted(plan.recompute + own)),
                                  set(base.held), fwd_free, bwd_free)
    if plan.optimizer_offload:  # no state or step on the GPU
        base = base._replace(step_temps=(), state=())
    if plan.params:
        base = base._replace(params=param_schedule(trace, plan.params))
    return base._replace(fwd_free=fwd_free, bwd_free=bwd_free, segments=segments)


def _trace_part(trace: Trace, lv: Liveness, sem: "Semantics", host: "HostCosts",
                runtime: bool | str) -> Program:
    """What a program takes from the trace alone (for one semantics, host and runtime),
    built once: a trace is immutable, and vdnn_dyn and the planners replay one trace many
    times."""
    key = (sem, lv, host, runtime)
    cached = trace.__dict__.get("_program")
    if cached is not None and all(a is b for a, b in zip(cached[0], key)):
        return cached[1]
    gkey, gsize, gneeds = sem.grad_keys(trace, lv)
    steps = _steps(trace, lv, gkey, gsize, gneeds)
    h, layers = host, trace.layers
    rf, rb = (h.runtime_layer_fwd_ns, h.runtime_layer_bwd_ns) if runtime is True else (0, 0)
    held = frozenset(b for b in lv.size if b not in lv.producer) if sem.holds_inputs \
        else frozenset()
    fwd_free, bwd_free = free_points(lv, set(held))
    part = Program(
        steps, gkey, gsize, gneeds,
        tuple(x.host_fwd_ns + rf for x in layers), tuple(x.host_bwd_ns + rb for x in layers),
        h.runtime_offload_ns if runtime else 0, h.runtime_fetch_ns if runtime else 0,
        h.launch_queue if sem.host_ahead and not sem.paged else 0,
        tuple(h.layer_kernels_fwd if x.kernels_fwd is None else x.kernels_fwd for x in layers),
        tuple(h.layer_kernels_bwd if x.kernels_bwd is None else x.kernels_bwd for x in layers),
        held, fwd_free, bwd_free, {},
        step_temporaries(trace) if sem.caching_allocator else (trace.step_workspace_bytes,),
        optimizer_state(trace) if sem.caching_allocator and not sem.paged else (),
        autotuned(trace) if sem.caching_allocator and not sem.paged else (),
        # the adds' GPU time by weight bytes, the host's (a launch per parameter) alike for
        # each layer with weights (stepopts.py)
        accum_ns=spread(trace.accumulate_ns, [x.weight_bytes for x in layers]),
        host_accum_ns=spread(trace.host_accumulate_ns,
                             [1 if x.weight_bytes else 0 for x in layers]))
    trace.__dict__["_program"] = (key, part)
    return part
