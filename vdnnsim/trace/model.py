"""The trace: the network as the simulator sees it.

NOTE [trace semantics]
A trace is a list of layers in execution order over a set of tensors. Every tensor is
written by exactly one layer (or is the network input) and a layer reads only tensors
written before it, so the order is a topological order of the DAG. A tensor with
``alias_of`` shares its root's buffer (an in-place ReLU's output, a view), and so does its
gradient: buffers, not tensors, are what the allocator and the copy engines move.
``saved`` lists what a layer keeps for its backward pass, the one fact that decides how
long a buffer lives under layer-wise memory management (profiled traces: what autograd
saved; synthesized ones: what cuDNN's backward calls read). Every layer has at least one
algorithm (``default`` where there is no choice). ``requires_grad`` tensors get a gradient
buffer of their own size during backward; the network input does not.

NOTE [memory-only traces]
A trace whose ``source.cost_model`` is ``none`` (the op probe's) has every
layer at 0 ns: its memory is modelled, its times are not. ``Trace.timed`` is false for it,
and every result of it carries that (``RunResult.timed``): the run's peak memory and fits
stand, while its times, slowdown and time-weighted average memory are NaN in Python and
null in JSON, "-" in tables with the footnote ``UNTIMED_NOTE`` (report/table.py), refused
by the plots of time and by the planners that pick the fastest plan. A copy still takes
its time over the link, so an untimed run's iteration time is not 0 but the copies'
alone: a number that looks real and is not, hence hidden rather than shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

TensorKind = Literal["input", "activation", "extra"]


@dataclass(frozen=True)
class Tensor:
    id: str
    size_bytes: int
    kind: TensorKind = "activation"
    requires_grad: bool = True
    alias_of: str | None = None
    shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Algo:
    """One way to run a layer: its forward and backward times and workspaces."""

    name: str
    fwd_ns: int
    bwd_ns: int
    fwd_workspace_bytes: int = 0
    bwd_workspace_bytes: int = 0
    # NOTE [backward workspaces]
    # The backward pass's workspaces one by one, in the order its calls allocate them (a
    # conv's: ATen's cuDNN backward data, then backward filter, each freed before the
    # next), () where only their largest (bwd_workspace_bytes) is known. The caching
    # allocator places each alone (a segment cut to the first cannot hold a larger
    # second, and both stay reserved), so the engine allocates them in turn and the
    # profiler measures each of a Conv2d's backward calls alone. Measured:
    # docs/trace-format.md, "Backward workspaces".
    bwd_workspaces: tuple[int, ...] = ()

    @property
    def time_ns(self) -> int:
        return self.fwd_ns + self.bwd_ns

    @property
    def workspace_bytes(self) -> int:
        return max(self.fwd_workspace_bytes, self.bwd_workspace_bytes)


@dataclass(frozen=True)
class Layer:
    id: str
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    saved: tuple[str, ...]
    algos: tuple[Algo, ...]
    weight_bytes: int = 0
    attrs: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    host_fwd_ns: int = 0  # the host's time to issue the forward pass
    host_bwd_ns: int = 0  # and the backward pass
    kernels_fwd: int | None = None  # commands the forward pass issues
    kernels_bwd: int | None = None  # and the backward; None: not known

    @property
    def is_conv(self) -> bool:
        return self.kind == "conv"

    def fastest_algo(self) -> int:
        """Index of the performance-optimal algorithm (ties: smaller workspace)."""
        return self._fastest

    @cached_property
    def _fastest(self) -> int:  # a layer is immutable: every policy and the oracle ask
        if len(self.algos) == 1:
            return 0
        return min(range(len(self.algos)),
                   key=lambda i: (self.algos[i].time_ns, self.algos[i].workspace_bytes, i))

    def leanest_algo(self) -> int:
        """Index of the memory-optimal algorithm: cuDNN's implicit GEMM where the layer
        offers it (the paper's definition of 'm'), else the least workspace (ties: faster)."""
        for i, a in enumerate(self.algos):
            if a.name == "implicit_gemm":
                return i
        return min(range(len(self.algos)),
                   key=lambda i: (self.algos[i].workspace_bytes, self.algos[i].time_ns, i))


@dataclass(frozen=True)
class Source:
    """Where a trace came from."""

    kind: Literal["synthesized", "profiled", "handwritten"] = "handwritten"
    framework: Literal["torch7", "pytorch"] = "torch7"
    gpu: str | None = None
    cost_model: str | None = None
    software: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    note: str | None = None
    # the profiling host's speed (NOTE [host probe]): where the trace was made, as software
    host_probe_ns: float | None = field(default=None, compare=False, hash=False)
    # and right after its timed steps, the median: what follows a step
    host_probe_between_ns: float | None = field(default=None, compare=False, hash=False)
    # what re-timing it for another GPU needs (NOTE [retime]): variant, param_bytes,
    # param_tensors, and made_for once re-timed
    retime: dict[str, Any] | None = field(default=None, hash=False)


@dataclass(frozen=True)
class Trace:
    name: str
    batch_size: int
    dtype: str
    tensors: dict[str, Tensor]
    layers: tuple[Layer, ...]
    source: Source = Source()
    step_ns: int = 0  # after the backward pass: the optimizer step
    resident_bytes: int = 0  # held by the framework all run long (BLAS workspaces, buffers)
    host_step_ns: int = 0  # the host's time for zero_grad and the optimizer step
    step_workspace_bytes: int = 0  # held while the step runs
    optimizer: str = "sgd"  # whose step the step fields are (trace/optimizer.py)
    optimizer_steps: tuple[tuple[str, int, int], ...] = ()  # calibrated (name, GPU, host ns)
    # a step of this many forward and backward passes, the gradients added up, then one
    # optimizer step; the adds' GPU and host ns per pass after the first (engine/stepopts.py)
    micro_batches: int = 1
    accumulate_ns: int = 0
    host_accumulate_ns: int = 0
    # (first, last) layer id of each segment the model checkpoints itself (stepopts.py)
    checkpointed: tuple[tuple[str, str], ...] = ()

    @property
    def timed(self) -> bool:
        """False where the layers' times are not modelled (a memory-only trace)."""
        return self.source.cost_model != "none"

    @property
    def pytorch(self) -> bool:
        """PyTorch semantics (engine/semantics.py), else Torch7's."""
        return self.source.framework == "pytorch"

    # -- derived views -------------------------------------------------------------------
    def root(self, tensor_id: str) -> str:
        """The buffer a tensor lives in (follows alias chains)."""
        return self.roots[tensor_id]

    @cached_property
    def roots(self) -> dict[str, str]:
        """Every tensor's buffer, resolved once: each alias chain is walked a single time,
        so a 100,000-long chain of in-place layers costs linear time, not quadratic. The
        loader has rejected unknown aliases and cycles."""
        tensors = self.tensors
        out: dict[str, str] = {}
        for tid, t in tensors.items():
            if tid in out:
                continue
            chain = []
            while t.alias_of is not None and t.id not in out:
                chain.append(t.id)
                t = tensors[t.alias_of]
            r = out.get(t.id, t.id)
            out[t.id] = r
            for c in chain:
                out[c] = r
        return out

    def layer_index(self, layer_id: str) -> int:
        try:
            return self._layer_index[layer_id]
        except KeyError:
            raise KeyError(layer_id) from None

    @cached_property
    def _layer_index(self) -> dict[str, int]:
        return {layer.id: i for i, layer in enumerate(self.layers)}

    @cached_property
    def weight_bytes(self) -> int:
        return sum(layer.weight_bytes for layer in self.layers)

    @cached_property
    def checkpointed_segments(self) -> tuple[tuple[int, int], ...]:
        """The model's own checkpointed segments as (first, last) layer indices."""
        return tuple((self._layer_index[a], self._layer_index[b]) for a, b in self.checkpointed)

    def checkpoints_any(self, first: int, last: int) -> bool:
        """Whether layers ``first..last`` meet a segment the model checkpoints itself:
        what no plan may checkpoint or split again (engine/stepopts.py)."""
        return any(a <= last and first <= b for a, b in self.checkpointed_segments)

    # NOTE [trace analyses]
    # A trace is immutable, so what is derived from it alone is worked out once and kept
    # on it (a cached property, or ``memo`` by key): every policy of a run, every run of a
    # sweep and every profiling pass of vdnn_dyn ask the same questions of one trace.
    @cached_property
    def fastest_algos(self) -> tuple[int, ...]:
        """Each layer's performance-optimal algorithm (its fastest_algo)."""
        return tuple(layer.fastest_algo() for layer in self.layers)

    @cached_property
    def leanest_algos(self) -> tuple[int, ...]:
        """Each layer's memory-optimal algorithm (its leanest_algo)."""
        return tuple(layer.leanest_algo() for layer in self.layers)

    @cached_property
    def fastest_time_ns(self) -> int:
        """The optimizer step plus each layer timed alone under its fastest algorithm, once
        a micro-batch, with the model's own recompute and the gradients' adds
        (engine/stepopts.py)."""
        fast = self.fastest_algos
        once = sum(layer.algos[a].time_ns for layer, a in zip(self.layers, fast)) + sum(
            self.layers[j].algos[fast[j]].fwd_ns for first, last in self.checkpointed_segments
            for j in range(first, last + 1))
        return self.step_ns + self.micro_batches * once \
            + (self.micro_batches - 1) * self.accumulate_ns

    def memo(self, key: object, make):
        """``make()``, worked out once per trace and ``key`` (an analysis of this trace
        alone, immutable as the trace is)."""
        memo = self.__dict__.setdefault("_memo", {})
        try:
            return memo[key]
        except KeyError:
            value = memo[key] = make()
            return value

    @cached_property
    def buffers(self) -> dict[str, Tensor]:
        """Tensors that own memory (not aliases), by id."""
        return {k: t for k, t in self.tensors.items() if t.alias_of is None}

    def producers(self) -> dict[str, int]:
        """Index of the layer that writes each tensor (network inputs are absent)."""
        out: dict[str, int] = {}
        for i, layer in enumerate(self.layers):
            for t in layer.outputs:
                out[t] = i
        return out
