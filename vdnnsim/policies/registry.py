"""Name -> policy function, as a table (policies are data, looked up here).

A policy takes the trace, the GPU, the pool capacity, its options and the run's context
(``PolicyContext``, context.py) and returns a Plan; it may replay plans to decide, as
vDNN_dyn does. Each row of
``POLICIES`` is a name, its function, the options that name fixes (which algorithms,
which layers: a config may not set them) and the line ``vdnnsim list`` prints; the order
is the list's. The policy modules register nothing: this module imports each function and
names it, and nothing of the policies imports it back.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import UnknownNameError
from ..hardware import GPU
from ..trace.model import Trace
from .blocks import vdnn_blocks
from .builtin import baseline, eager, static_vdnn
from .context import PolicyContext
from .dyn import vdnn_dyn
from .plan import Plan
from .planned import planned
from .recompute import checkpoint
from .uvm import uvm

PolicyFn = Callable[[Trace, GPU, "int | None", dict[str, Any], PolicyContext], Plan]

POLICIES: dict[str, tuple[PolicyFn, dict[str, Any], str]] = {
    "eager": (eager, {}, "layer-wise allocation, no offload, fastest algorithms: what "
              "PyTorch's autograd does (the baseline of profiled PyTorch traces)"),
    "baseline_m": (baseline, {"algo": "m"},
                   "network-wide allocation, memory-optimal algorithms"),
    "baseline_p": (baseline, {"algo": "p"}, "network-wide allocation, fastest algorithms "
                   "(the oracle when memory is unlimited)"),
    "vdnn_all_m": (static_vdnn, {"which": "all", "algo": "m"},
                   "offload the inputs of every layer, memory-optimal algorithms"),
    "vdnn_all_p": (static_vdnn, {"which": "all", "algo": "p"},
                   "offload the inputs of every layer, performance-optimal algorithms"),
    "vdnn_conv_m": (static_vdnn, {"which": "conv", "algo": "m"},
                    "offload the inputs of CONV layers, memory-optimal algorithms"),
    "vdnn_conv_p": (static_vdnn, {"which": "conv", "algo": "p"},
                    "offload the inputs of CONV layers, performance-optimal algorithms"),
    "vdnn_dyn": (vdnn_dyn, {}, "profile, then the fastest configuration that fits (the "
                 "paper's vDNN_dyn)"),
    "vdnn_blocks": (vdnn_blocks, {}, "offload whole blocks of any model: the first `blocks` "
                    "of them, or the fewest that fit `budget`; or checkpoint the first "
                    "`recompute`, after the first `blocks` where both are given; with the "
                    "optimizer on the CPU, the first `params` blocks' parameters on the host"),
    "checkpoint": (checkpoint, {}, "activation checkpointing as checkpoint_sequential does "
                   "it, alone or with vDNN's offload"),
    "uvm_lru": (uvm, {"eviction": "lru"}, "page-based unified memory: pages migrate on "
                "fault, the least recently used evicted when the GPU is full"),
    "uvm_lfu": (uvm, {"eviction": "lfu"}, "page-based unified memory: pages migrate on "
                "fault, the least frequently used evicted when the GPU is full"),
    "planned": (planned, {}, "replay a plan file written by vdnnsim plan (option file)"),
}


def policy_names() -> list[str]:
    return list(POLICIES)


def get_policy(name: str) -> tuple[PolicyFn, dict[str, Any]]:
    try:
        fn, fixed, _ = POLICIES[name]
    except KeyError:
        raise UnknownNameError("policy", name, list(POLICIES)) from None
    return fn, fixed
