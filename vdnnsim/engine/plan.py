"""The Plan a policy hands the engine, and the liveness facts every policy reads.

NOTE [buffer lifetimes]
Layer-wise memory management (vDNN's) works on buffers (alias roots, see
NOTE [trace semantics]):

* a buffer is allocated when the layer that writes it runs forward;
* a buffer that no backward pass keeps (``saved``) is released after its last forward
  reader; a network output is kept until backward starts, as the loss would read it;
* a kept buffer stays until the backward pass of the last layer (in backward order) that
  keeps it, unless the plan offloads it (then the GPU copy is released after the offload,
  and the buffer comes back by prefetch before it is needed);
* a gradient buffer is allocated by the first backward pass that writes it (forks
  accumulate into it) and released after the backward pass of the layer that wrote the
  forward buffer, which consumes it.

Network-wide management (the paper's baseline) allocates every buffer, the weights and
their gradients for the whole iteration, two gradient buffers the size of the largest
gradient (three where the network forks: ``grad_buffers``), and one workspace the size of
the largest the chosen algorithms need.

NOTE [fork gradient buffer]
Torch's baseline reuses two gradient buffers, one layer's dY and its dX, in turn; where a
tensor that needs a gradient is read by more than one layer (a fork: GoogLeNet's
inception inputs), its gradient is the sum of its readers' and is accumulated in a buffer
of its own while the branches' backward passes use the other two (nn.Concat's gradInput).
The paper's Fig. 4 shows it: GoogLeNet (128)'s gradient maps are 1176 MiB, three times its
largest gradient (conv1's output, 392 MiB); AlexNet's, OverFeat's and VGG-16's, which do
not fork, are two times theirs (193, 1080, 1581/3123/6265 MiB).
"""

from __future__ import annotations

import operator
from itertools import repeat
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError
from ..trace.model import Trace
from .params import ParamGroup, check_groups
from .result import Replayed


@dataclass(frozen=True)
class Liveness:
    root: dict[str, str]  # tensor -> buffer
    size: dict[str, int]  # buffer -> bytes
    producer: dict[str, int]  # buffer -> layer index that writes it (absent: network input)
    fwd_last: dict[str, int]  # buffer -> last layer that reads it in forward (-1: none)
    bwd_last: dict[str, int]  # buffer -> last layer (lowest index) that keeps it for backward
    needs_grad: dict[str, bool]  # buffer -> a gradient buffer exists for it
    outputs: frozenset[str]  # buffers no layer reads: the network's outputs
    casts: frozenset[str] = frozenset()  # autocast's casts of weights
    fwd_end: int = -1  # the forward pass's last layer

    def kept(self, buf: str) -> bool:
        return buf in self.bwd_last

    def forward_free(self, buf: str) -> int:
        """The layer after whose forward pass ``buf`` goes where no backward pass keeps it:
        its last forward reader (or its producer); autocast's cast of a weight at the
        forward's end."""
        if buf in self.casts:
            return self.fwd_end
        return max(self.fwd_last[buf], self.producer.get(buf, -1))


def liveness(trace: Trace) -> Liveness:
    """The trace's buffers and their lifetimes; computed once per trace (a trace and its
    Liveness are immutable: the policy and the engine of a run, and every run of a
    sweep, share it)."""
    return trace.memo("liveness", lambda: _liveness(trace))


def _liveness(trace: Trace) -> Liveness:
    root = {t: trace.root(t) for t in trace.tensors}
    buffers = trace.buffers
    size = {b: t.size_bytes for b, t in buffers.items()}
    producer: dict[str, int] = {}
    fwd_last = dict.fromkeys(buffers, -1)
    bwd_last: dict[str, int] = {}
    for i, layer in enumerate(trace.layers):
        for t in layer.outputs:
            if root[t] == t:
                producer[t] = i
        for t in layer.inputs:
            fwd_last[root[t]] = i
    for i in range(len(trace.layers) - 1, -1, -1):
        for t in trace.layers[i].saved:
            bwd_last[root[t]] = i
    needs_grad = {b: buffers[b].requires_grad for b in buffers}
    outputs = frozenset(b for b in buffers if fwd_last[b] == -1 and buffers[b].kind == "activation")
    # NOTE [autocast cache]
    # Under autocast, a cast of a weight (an fp32 leaf that needs a gradient) to the lower
    # precision is kept in autocast's cache, so that every op reading the weight in the
    # forward pass reuses one copy, until the outermost autocast region exits: the end of
    # the forward pass (the measured steps run the model and its loss under autocast, the
    # backward outside it). So nothing frees such a cast earlier, not torch.utils.checkpoint
    # (docs/validation.md, "Autocast's cache") and no offload. In a trace a cast of a weight
    # is an op ``_to_copy`` that reads no traced tensor and whose output needs a gradient (not
    # ``weight_bytes``: a tied weight's bytes go to its first reader only); a frozen
    # weight's cast is not cached.
    casts = frozenset(root[t] for layer in trace.layers
                      if layer.kind == "_to_copy" and not layer.inputs
                      for t in layer.outputs if buffers[root[t]].requires_grad)
    return Liveness(root, size, producer, fwd_last, bwd_last, needs_grad, outputs, casts,
                    len(trace.layers) - 1)


def grad_buffers(trace: Trace, lv: Liveness) -> int:
    """How many gradient buffers the network-wide baseline reuses: 2, or 3 where a tensor that
    needs a gradient has more than one reader.
    Worked out once per trace where ``lv`` is the trace's own."""
    if lv is liveness(trace):
        return trace.memo("grad buffers", lambda: _grad_buffers(trace, lv))
    return _grad_buffers(trace, lv)


def _grad_buffers(trace: Trace, lv: Liveness) -> int:
    readers: dict[str, int] = {}
    for layer in trace.layers:
        for t in dict.fromkeys(layer.inputs):
            readers[t] = readers.get(t, 0) + 1
    forks = any(n > 1 and lv.needs_grad.get(lv.root[t], False) for t, n in readers.items())
    return 3 if forks else 2


@dataclass(frozen=True)
class Plan:
    """What the engine replays: which algorithm each layer runs, which buffers move when.

    ``offload[i]``: buffers copied to host during layer i's forward and released on the GPU
    after it. ``prefetch[i]``: the layer whose offloaded buffers are prefetched while
    layer i runs backward (-1: none). ``sync``: the paper's end-of-layer synchronisation of
    the compute and memory streams after an offloading or prefetching layer; without it a
    buffer is released when its offload completes, and the compute stream waits for a
    prefetch only when it needs the buffer.
    """

    policy: str
    memory: Literal["network_wide", "layer_wise", "uvm"]
    algos: tuple[int, ...]
    offload: tuple[tuple[str, ...], ...]
    prefetch: tuple[int, ...]
    sync: bool = True
    notes: tuple[str, ...] = field(default=())
    # the plan runs under vdnnsim's vDNN runtime (its host costs per layer and per copy),
    # not plain eager PyTorch; "tensors": the tensor runtime, which pays per copy only;
    # only PyTorch traces pay for either
    runtime: bool | str = False
    # the replay of exactly this plan that a policy already ran (vdnn_dyn's profiling
    # pass): run_trace reuses it when it asks for no more than that pass recorded
    profiled: Replayed | None = field(default=None, compare=False, repr=False)
    # memory == "uvm": the page-based unified memory's parameters (engine/uvm.py)
    uvm: Any = None
    # the CNMeM pool's placement: 'best' fit or 'first' fit
    placement: str = "best"
    # (first, last) layer index of each checkpointed segment
    recompute: tuple[tuple[int, int], ...] = ()
    # a plan that runs some layers in slices of the batch carries the
    # trace it runs (vdnnsim/planners/split.py); its algos, offloads and segments index that trace
    trace: Any = field(default=None, compare=False, repr=False)
    split: tuple[tuple[str, str, int], ...] = ()  # (first, last, parts) of the original
    # the stream whose pool the prefetched copies are allocated from
    prefetch_stream: str = "compute"
    # the optimizer's state and step on the CPU, each weight
    # gradient copied there after the backward pass that makes it
    optimizer_offload: bool = False
    # its host copies from the pinned pool (blocks of a power of
    # two) or one registered buffer
    optimizer_pinning: str = "caching"
    # groups of layers whose weights live on the host between
    # the passes that read them (the optimizer on the CPU holds their master copies)
    params: tuple[ParamGroup, ...] = ()
    # the allocator settings a plan file was made under, as
    # PYTORCH_CUDA_ALLOC_CONF says them ('' PyTorch's defaults; None: no plan file's)
    planned_allocator: str | None = None

    def check(self, trace: Trace) -> None:
        """The plan compiles against ``trace`` (every layer, buffer,
        algorithm, prefetch slot and checkpointed segment it names is the trace's), or
        :class:`~.compile.PlanError` says where it does not."""
        check_plan(trace, liveness(trace), self)


class PlanError(ConfigError):
    """A plan that does not compile against its trace (a user's plan file can be such)."""


def check_plan(trace: Trace, lv: Liveness, plan: "Plan") -> None:
    """Raise :class:`PlanError` where ``plan`` names a layer, buffer,
    algorithm, prefetch slot or segment that ``trace`` lacks."""
    n = len(trace.layers)
    if len(plan.algos) != n or len(plan.offload) != n or len(plan.prefetch) != n:
        raise PlanError(f"plan {plan.policy}: {len(plan.algos)} algorithms, "
                        f"{len(plan.offload)} offload sets and {len(plan.prefetch)} prefetch "
                        f"slots for a trace of {n} layers")
    # every run checks its plan; a plan that compiles is told in C
    # loops (set and map operations), and only one that does not is walked layer by layer
    # for the message
    counts = trace.memo("algorithm counts", lambda: [len(layer.algos) for layer in trace.layers])
    if not (n and (min(plan.algos) < 0 or not all(map(operator.lt, plan.algos, counts))
                   or not lv.size.keys() >= set().union(*plan.offload)
                   or not all(map(operator.le, repeat(-1), plan.prefetch))
                   or not all(map(operator.lt, plan.prefetch, repeat(n))))):  # (NaN fails)
        _check_rest(trace, plan, n)
        return
    for i, (layer, a) in enumerate(zip(trace.layers, plan.algos)):
        if not 0 <= a < len(layer.algos):
            raise PlanError(f"plan {plan.policy}: layer {layer.id} has no algorithm {a}")
        for b in plan.offload[i]:
            if b not in lv.size:
                raise PlanError(f"plan {plan.policy}: layer {layer.id} offloads {b}, which "
                                "the trace does not have")
        if not -1 <= plan.prefetch[i] < n:
            raise PlanError(f"plan {plan.policy}: layer {layer.id} prefetches for layer "
                            f"{plan.prefetch[i]}, outside the trace")
    _check_rest(trace, plan, n)


def _check_rest(trace: Trace, plan: "Plan", n: int) -> None:
    """What :func:`check_plan` checks of the plan as a whole."""
    if plan.optimizer_offload and (not trace.pytorch or plan.memory != "layer_wise"):
        raise PlanError(f"plan {plan.policy}: optimizer offload runs PyTorch traces under "
                        "layer-wise memory")
    if trace.micro_batches > 1 and (plan.optimizer_offload or plan.memory == "uvm"):
        raise PlanError(f"plan {plan.policy}: " + (  # (engine/stepopts.py)
            "optimizer offload" if plan.optimizer_offload else "unified memory")
            + f" with gradient accumulation ({trace.micro_batches} micro-batches) is not "
            "modelled")
    for first, last in plan.recompute:
        if not 0 <= first <= last < n:
            raise PlanError(f"plan {plan.policy}: checkpointed segment {first}..{last} "
                            "outside the trace")
    if plan.params:
        if not plan.optimizer_offload:
            raise PlanError(f"plan {plan.policy}: parameter offload needs the optimizer on "
                            "the CPU (optimizer offload), which holds the parameters' master "
                            "copies")
        wrong = check_groups(trace, plan.params)
        if wrong:
            raise PlanError(f"plan {plan.policy}: {wrong}")
