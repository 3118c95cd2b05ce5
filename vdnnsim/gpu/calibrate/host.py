"""The host's cost per op, from chains of small ops timed on the host's clock
(``vdnnsim calibrate --ops``, ``--host-only``).

NOTE [host mixes]
A chain of one op, 64 times over on one layer, is the host's best case; a model's step
mixes its ops, each layer with its own weights, and takes longer per op. So
``--host-only`` also times mixed chains: per family (a transformer's links: linear,
pointwise, layer norm, attention, view, a cast there and back; a CNN's: conv, batch norm,
pointwise), 12 chains of 192 links of random kinds in random proportions (a flat Dirichlet
draw, seeded), each link with its own layer, timed forward and backward beside the chains
of one op in the same process. The op model's host cost of an op is its chain's times the
factor of the model's family (a model with a convolution is a CNN): the mixed chains'
time over what the same process's one-op chains give for their ops (median over chains
and processes, per precision and pass).

Why: without the factor the op model's host time fell 32-48% short of the measured on
host-bound torchvision CNNs and 5-28% on host-bound autocast transformers (docs/gpu.md).
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from .record import _Ops

HOST_CHAINS = ["linear", "pointwise", "layer_norm", "sdpa", "cast", "view", "conv",
               "batch_norm"]


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _link(kind: str, i: int, mods: dict[str, nn.Module]) -> Callable[[torch.Tensor], Any]:
    """One link of a host chain: ``kind``'s op on ``t``, its layer
    ``mods[kind]`` (a linear, layer norm, conv or batch norm module)."""
    if kind == "linear":
        return mods["linear"]
    if kind == "pointwise":  # one op a link (a tuple would issue all four)
        return (lambda t: t * 0.5) if i % 4 == 0 else (lambda t: t + 1.0) if i % 4 == 1 \
            else F.gelu if i % 4 == 2 else torch.tanh
    if kind in ("layer_norm", "conv", "batch_norm"):
        return mods[kind]
    if kind == "sdpa":
        return lambda t: F.scaled_dot_product_attention(t, t, t)
    if kind == "view":  # launches nothing: the host's cost of a view
        return (lambda t: t.transpose(1, 2)) if i % 2 == 0 else (lambda t: t.view(t.shape))
    return lambda t: t.to(torch.float32 if t.dtype == torch.bfloat16 else torch.bfloat16)


def _layers(dev: torch.device, dt: torch.dtype) -> dict[str, nn.Module]:
    """A link's layers: what a linear, layer norm, conv or batch-norm link calls."""
    return {"linear": nn.Linear(64, 64).to(dev, dt), "layer_norm": nn.LayerNorm(64).to(dev, dt),
            "conv": nn.Conv2d(16, 16, 3, padding=1, bias=False).to(dev, dt),
            "batch_norm": nn.BatchNorm2d(16).to(dev, dt)}


def _chain_input(kind_or_family: str, dev: torch.device, dt: torch.dtype) -> torch.Tensor:
    """A chain's input: a feature map of 4 images of 16 x 8 x 8 for the CNN ops, else
    8 x 4 x 16 x 64 (a batch of heads' rows)."""
    if kind_or_family in ("conv", "batch_norm", "cnn"):
        return torch.randn(4, 16, 8, 8, device=dev, dtype=dt, requires_grad=True)
    return torch.randn(8, 4, 16, 64, device=dev, dtype=dt, requires_grad=True)


def _autocast(dev: torch.device, autocast: torch.dtype | None) -> Callable[[], Any]:
    """A chain's context: torch.autocast to ``autocast`` on ``dev``, or none."""
    import contextlib
    return (lambda: torch.autocast(dev.type, dtype=autocast)) if autocast is not None \
        else contextlib.nullcontext


def _time_chain(chain: Callable[[], torch.Tensor], ctx: Callable[[], Any], dev: torch.device,
                reps: int = 12) -> tuple[float, float]:
    """The host's median time (ns) of ``chain``'s forward (graph recorded, under ``ctx``)
    and of its backward, over ``reps`` runs after two discarded."""
    fwd, bwd = [], []
    for rep in range(reps):
        _sync(dev)
        t0 = time.perf_counter()
        with ctx():
            y = chain()
        t1 = time.perf_counter()
        s = y.float().sum()
        _sync(dev)
        t2 = time.perf_counter()
        s.backward()
        t3 = time.perf_counter()
        _sync(dev)
        if rep >= 2:
            fwd.append((t1 - t0) * 1e9)
            bwd.append((t3 - t2) * 1e9)
    return sorted(fwd)[len(fwd) // 2], sorted(bwd)[len(bwd) // 2]  # as the first files took it


def host_chains(dev: torch.device, dt: torch.dtype, autocast: torch.dtype | None = None
                ) -> list[dict[str, Any]]:
    """The host's cost per op: 64-op chains on small tensors, as
    functions and as modules, forward (graph recorded) and backward; ``autocast``: fp32
    tensors and weights under torch.autocast to that dtype, as autocast training runs."""
    from ..measure.hostprobe import StepProbe
    n = 64
    recs = []
    probe = StepProbe(dev)  # the host's speed beside each chain's reps
    ctx = _autocast(dev, autocast)
    for kind in HOST_CHAINS:
        for modules in (False, True):
            x0 = _chain_input(kind, dev, dt)
            layers = _layers(dev, dt)  # one layer for all the links
            links = [_link(kind, i, layers) for i in range(n)]

            class One(nn.Module):
                def __init__(self, i: int) -> None:
                    super().__init__()
                    self.i = i

                def forward(self, t: torch.Tensor) -> torch.Tensor:
                    return links[self.i](t)
            mods = [One(i) for i in range(n)]

            def chain() -> torch.Tensor:
                t = x0
                for i in range(n):
                    t = mods[i](t) if modules else links[i](t)
                return t
            probes = [probe()]  # before and after the repetitions, not between them
            f, b = _time_chain(chain, ctx, dev)
            recs.append({"chain": kind, "modules": modules, "ops": n,
                         "dtype": str(dt).replace("torch.", ""),
                         "autocast": str(autocast).replace("torch.", "") if autocast else None,
                         "host_fwd_ns": round(f / n, 1), "host_bwd_ns": round(b / n, 1),
                         "host_probe_between_ns": round(statistics.median(probes + [probe()]),
                                                        1)})
    probe.close()
    return recs


# the kinds of links a mixed chain of each family draws from
MIX_FAMILIES = {"transformer": ["linear", "pointwise", "layer_norm", "sdpa", "view", "cast"],
                "cnn": ["conv", "batch_norm", "pointwise"]}


def host_mixes(dev: torch.device, dt: torch.dtype, autocast: torch.dtype | None = None,
               sequences: int = 12, length: int = 192, seed: int = 0) -> list[dict[str, Any]]:
    """Per family, ``sequences`` chains of ``length`` links of random
    kinds in random proportions, each link with its own layer, timed as the host chains
    are: the host's time of a real model's mix of ops beside the chains of one op. A
    record's ``counts`` are its links per kind, casts as dispatched (``_to_copy``: a cast
    link's two, and under autocast each link's own weight's)."""
    from ..measure.hostprobe import StepProbe
    rng = random.Random(seed)
    recs = []
    probe = StepProbe(dev)
    ctx = _autocast(dev, autocast)
    for family, kinds in MIX_FAMILIES.items():
        for _ in range(sequences):
            w = [rng.expovariate(1.0) for _ in kinds]  # a flat Dirichlet draw
            seq = rng.choices(kinds, weights=w, k=length)
            links: list[Callable[[torch.Tensor], Any]] = []
            counts = dict.fromkeys(kinds, 0)
            for i, kind in enumerate(seq):
                if kind == "cast":  # there and back: the next link's layer keeps its dtype
                    links += [_link(kind, i, {}), _link(kind, i, {})]
                elif kind == "view":  # a view that keeps the map contiguous (a transposed
                    links.append(lambda t: t.view(t.shape))  # one would add copies)
                else:
                    links.append(_link(kind, i, _layers(dev, dt)))
                counts[kind] += 1
            x0 = _chain_input(family, dev, dt)

            def chain() -> torch.Tensor:
                t = x0
                for f in links:
                    t = f(t)
                return t
            # the casts as dispatched: under autocast each link's own weights' too, as in a
            # model (where the probe records each as a cast op)
            with _Ops() as seen, ctx():
                chain()
            if "cast" in counts or autocast is not None:
                counts["cast"] = sum(o["op"] == "_to_copy" for o in seen.ops)
            probes = [probe()]
            f, b = _time_chain(chain, ctx, dev)
            recs.append({"family": family, "counts": counts, "ops": sum(counts.values()),
                         "dtype": str(dt).replace("torch.", ""),
                         "autocast": str(autocast).replace("torch.", "") if autocast else None,
                         "host_fwd_ns": round(f, 1), "host_bwd_ns": round(b, 1),
                         "host_probe_between_ns": round(statistics.median(probes + [probe()]),
                                                        1)})
    probe.close()
    return recs
