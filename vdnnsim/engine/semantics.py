"""Whose runtime a trace replays: Torch7's (the paper's) or PyTorch's, chosen once per run.

NOTE [pytorch semantics]
A trace whose framework is 'pytorch' replays PyTorch's memory behaviour, not Torch7's: the
pool is the caching allocator (allocated vs reserved); each layer's parameters are their own
allocations, and their gradients are allocated by its first backward pass and kept to the
end; an in-place op's backward writes a new gradient tensor (only a view shares its base's
gradient); the training loop holds the input batch; the optimizer step ends the iteration;
the host runs ahead of the GPU, the vDNN runtime's copies share one side stream, and a
block a copy used is reusable only once the host has seen that stream pass it. Torch7's
runtime (the paper's) keeps one CNMeM pool, lets both copy engines run, and its host waits
for each layer. Any trace's ``resident_bytes`` is allocated first and never freed. A plan on
unified memory (``memory: uvm``) runs either framework's semantics with its memory paged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..hardware import GPU
from ..trace.model import Trace
from .allocator import Pool
from .caching import AllocatorSettings, CachingPool
from .expandable import ExpandablePool
from .memory_model import MemoryModel
from .plan import Liveness
from .uvm import Pager

if TYPE_CHECKING:
    from .plan import Plan


@dataclass(frozen=True)
class Semantics:
    name: str
    caching_allocator: bool  # PyTorch's caching allocator, else a CNMeM pool
    host_ahead: bool  # the host runs ahead of the GPU; else it waits for each layer
    one_side_stream: bool  # every copy on one side stream, else one per copy engine
    per_layer_weights: bool  # weights and their gradients per layer, gradients at backward
    holds_inputs: bool  # the training loop holds the network's inputs
    # memory is unified memory (the pager): each pass runs once its page faults
    # are served, nothing else in flight; weights and their gradients are pages the passes
    # touch; the step is one pass; no launch queue
    paged: bool = False
    warmup_iterations: int = 0  # replayed before the one reported, on the same memory

    def memory(self, gpu: GPU, plan: "Plan", capacity_bytes: int | None, lv: Liveness,
               allocator: AllocatorSettings | None = None) -> MemoryModel:
        """The run's memory: the pager, or a pool;
        ``allocator``: the caching allocator's settings, which
        unified memory and a CNMeM pool (Torch7) do not have."""
        custom = allocator is not None and not allocator.default
        if self.paged:
            if capacity_bytes is None:
                raise ValueError("unified memory needs a capacity")
            if custom:
                raise ConfigError("allocator settings apply to the caching allocator, not "
                                  "to unified memory (cudaMallocManaged)")
            inputs = frozenset(b for b in lv.size if b not in lv.producer)
            return Pager(capacity_bytes, plan.uvm, gpu.link, inputs)
        if not self.caching_allocator:
            if custom:
                raise ConfigError("allocator settings apply to PyTorch traces (framework: "
                                  "pytorch): this trace replays Torch7's CNMeM pool")
            pool: Pool | CachingPool = Pool(capacity_bytes)
        elif custom and allocator.expandable_segments:
            pool = ExpandablePool(capacity_bytes)
        else:
            pool = CachingPool(capacity_bytes)
        if plan.placement == "first":  # NOTE [placement] (a CNMeM pool: Torch7 traces)
            pool.first_fit = True
        return pool

    def grad_keys(self, trace: Trace, lv: Liveness
                  ) -> tuple[dict[str, str], dict[str, int], dict[str, bool]]:
        """Which gradient buffer each tensor's gradient lives in: per tensor, views sharing
        their base's (PyTorch), or per buffer (Torch7's in-place gradients)."""
        key: dict[str, str] = {}
        if self.per_layer_weights:
            kind_of = {t: trace.layers[i].kind for t, i in trace.producers().items()}
            for t in trace.tensors:  # each chain of views walked once (memo in key)
                chain, g = [], t
                while (g not in key and trace.tensors[g].alias_of is not None
                       and kind_of.get(g) == "flatten"):
                    chain.append(g)
                    g = trace.tensors[g].alias_of  # type: ignore[assignment]
                g = key.get(g, g)
                key[t] = g
                for c in chain:
                    key[c] = g
            needs = {g: trace.tensors[g].requires_grad for g in set(key.values())}
        else:
            key = dict(lv.root)
            needs = {g: lv.needs_grad[g] for g in set(key.values())}
        size = {g: trace.tensors[g].size_bytes for g in needs}
        return key, size, needs


TORCH7 = Semantics("torch7", caching_allocator=False, host_ahead=False, one_side_stream=False,
                   per_layer_weights=False, holds_inputs=False)
PYTORCH = Semantics("pytorch", caching_allocator=True, host_ahead=True, one_side_stream=True,
                    per_layer_weights=True, holds_inputs=True)


# either framework's on unified memory (its gradients keyed as its own); the
# host never waits for the GPU, and the training loop's batch is never freed
TORCH7_UVM = replace(TORCH7, name="torch7+uvm", host_ahead=True, holds_inputs=True,
                     paged=True, warmup_iterations=1)
PYTORCH_UVM = replace(PYTORCH, name="pytorch+uvm", paged=True, warmup_iterations=1)


def semantics_for(trace: Trace, plan: "Plan | None" = None) -> Semantics:
    if plan is not None and plan.memory == "uvm":
        return PYTORCH_UVM if trace.pytorch else TORCH7_UVM
    return PYTORCH if trace.pytorch else TORCH7
