"""Mixture-of-experts layers on the meta device: the path their experts take on CUDA and
the routing the probe assumes (NOTE [moe routing])."""

from __future__ import annotations

import math
from typing import Any

import torch

from ...errors import ConfigError

# NOTE [moe routing]
# transformers runs an experts module (``@use_experts_implementation``) by the config's
# ``experts_implementation``, ``grouped_mm`` by default: tokens sorted by expert, then
# ``torch._grouped_mm``. On CUDA, bf16 on sm90/sm100 (H100, H200, B200) takes one grouped
# GEMM kernel; any other dtype (fp32, and autocast: the op has no autocast policy and the
# input is cast to the fp32 master weights) ATen's fallback, the offsets copied to the host
# and one ``mm`` per expert into the same output, which the probe makes as CUDA does (the
# meta kernel refuses fp32). Routing comes from activations, so it is assumed: balanced,
# token t's j-th of k choices expert (t k + j) mod E, each of E experts T k / E of T
# tokens' choices, given to the router's indices as values. On the grouped path the memory
# does not depend on it (T k rows however split), the times do; the eager path's loop over
# the experts hit follows it. The trace's note names the path and the assumption.
PATHS = {"grouped_mm": "transformers' grouped_mm (tokens sorted by expert, torch._grouped_mm)",
         "batched_mm": "transformers' batched_mm (each token's expert weights gathered, bmm)",
         "eager": "transformers' eager loop (a linear pair per expert hit)"}


def experts_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules whose forward transformers dispatches by experts_implementation."""
    return [m for m in model.modules()
            if all(hasattr(m, a) for a in ("has_gate", "is_concatenated", "num_experts"))]


def grouped_mm_out(mat_a: torch.Tensor, mat_b: torch.Tensor, offs: torch.Tensor | None = None,
                   bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None
                   ) -> torch.Tensor:
    """``aten::_grouped_mm``'s output as CUDA makes it (ATen's
    create_grouped_gemm_output_tensor: the last dimension padded to 16 bytes), for the dtypes
    the meta kernel refuses and CUDA's fallback runs."""
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if a2 and b2:
        size = [offs.size(0), mat_a.size(0), mat_b.size(1)]
    elif a2:
        size = [mat_a.size(0), mat_b.size(-1)]
    elif b2:
        size = [mat_a.size(1), mat_b.size(1)]
    else:
        size = [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    dtype = out_dtype or mat_a.dtype
    align = 16 // dtype.itemsize
    pad = -(-size[-1] // align) * align
    stride = [pad, 1] if a2 != b2 else [size[1] * pad, pad, 1]
    return torch.empty_strided(size, stride, dtype=dtype, device=mat_a.device)


def fallback(mat_a: Any, mat_b: Any) -> bool:
    """Whether CUDA runs a grouped GEMM of these operands by its per-group fallback."""
    return isinstance(mat_a, torch.Tensor) and isinstance(mat_b, torch.Tensor) and \
        mat_a.dtype == mat_b.dtype and mat_a.dtype in (torch.float32, torch.float16)


def balanced(tokens: int, k: int, experts: int, dtype: torch.dtype) -> torch.Tensor:
    """The assumed routing: token t's j-th choice is expert (t k + j) mod E (k distinct
    experts a token, where k <= E)."""
    return (torch.arange(tokens * k).reshape(tokens, k) % experts).to(dtype)


# NOTE [moe load]
# ``--routing`` replaces the balanced assumption by a load: ``zipf:S`` (expert e's share of
# the T k choices is proportional to 1 / (e + 1)^S), ``hot:F`` (expert 0 gets F times the
# balanced share, the others the rest evenly) or ``loads:W0,W1,...`` (one weight per
# expert). Counts are the shares rounded by largest remainder, each at most T (a token
# picks an expert once), the excess given to the others by their weights. Expert e's
# choices are then the next c_e places of the T x k indices read column by column, so a
# token's k choices stay distinct. Which tokens go where does not matter to memory or time.
# The eager loop's GEMMs follow the counts; a grouped GEMM (grouped_mm, and its fp32
# fallback) is timed as equal groups, so there the load changes neither memory nor time.
ROUTINGS = ("balanced", "zipf:S", "hot:F", "loads:W0,W1,...")


def parse_routing(text: str) -> str:
    """``text`` checked and made canonical ('balanced', 'zipf:1.2', ...)."""
    kind, _, arg = str(text).strip().partition(":")
    bad = ConfigError(f"--routing {text!r}: one of {', '.join(ROUTINGS)}")
    if kind == "balanced" and not arg:
        return "balanced"
    try:
        nums = [float(x) for x in arg.split(",")] if arg else []
    except ValueError:
        raise bad from None
    if not nums or not all(math.isfinite(x) and x >= 0 for x in nums):
        raise bad
    if kind == "zipf" and len(nums) == 1:
        return f"zipf:{nums[0]:g}"
    if kind == "hot" and len(nums) == 1 and nums[0] >= 1:
        return f"hot:{nums[0]:g}"
    if kind == "loads" and len(nums) >= 2 and sum(nums) > 0:
        return "loads:" + ",".join(f"{x:g}" for x in nums)
    raise bad


def expert_counts(routing: str, tokens: int, k: int, experts: int) -> list[int]:
    """Each expert's share of the ``tokens`` x ``k`` choices under ``routing``
    (NOTE [moe load])."""
    kind, _, arg = routing.partition(":")
    if kind == "balanced":
        return [tokens * k // experts + (e < tokens * k % experts) for e in range(experts)]
    if kind == "zipf":
        w = [1 / (e + 1) ** float(arg) for e in range(experts)]
    elif kind == "hot":
        hot = min(float(arg) / experts, 1.0)  # expert 0's share of the choices
        w = [hot] + [(1 - hot) / max(experts - 1, 1)] * (experts - 1)
    else:
        w = [float(x) for x in arg.split(",")]
        if len(w) != experts:
            raise ConfigError(f"--routing {routing}: {len(w)} weights for {experts} experts")
    counts, free = [0] * experts, set(range(experts))
    left = tokens * k
    while left and free:
        total = sum(w[e] for e in free) or len(free)
        want = {e: left * (w[e] if sum(w[e] for e in free) else 1) / total for e in free}
        take = {e: min(int(want[e]), tokens - counts[e]) for e in free}
        order = sorted(free, key=lambda e: (take[e] - want[e], e))  # largest remainder
        short = left - sum(take.values())
        for e in order:
            if short and take[e] < tokens - counts[e] and take[e] < want[e]:
                take[e] += 1
                short -= 1
        for e in free:
            counts[e] += take[e]
        left = tokens * k - sum(counts)
        free = {e for e in free if counts[e] < tokens}
    return counts


def routed(routing: str, tokens: int, k: int, experts: int, dtype: torch.dtype
           ) -> torch.Tensor:
    """The routing indices (tokens x k) of ``routing``: the balanced ones, or expert e's
    counts laid down column by column (NOTE [moe load])."""
    if routing == "balanced":
        return balanced(tokens, k, experts, dtype)
    counts = expert_counts(routing, tokens, k, experts)
    flat = torch.repeat_interleave(torch.arange(experts), torch.tensor(counts))
    return flat.reshape(k, tokens).t().contiguous().to(dtype)


def route(model: torch.nn.Module, rec: Any, routing: str = "balanced") -> list[Any]:
    """Hooks that give each experts module's routing indices the values of ``routing`` (on
    the meta device, beside the recorder's values); remove them after the probe."""
    from torch.utils._python_dispatch import _disable_current_modes

    def hook(module, args, kwargs):
        args = list(args)
        where = 1 if len(args) > 1 else "top_k_index"
        idx = args[1] if where == 1 else kwargs.get(where)
        if not isinstance(idx, torch.Tensor) or idx.device.type != "meta" or idx.dim() != 2 \
                or idx.shape[1] > module.num_experts:
            return None
        with _disable_current_modes(), torch._C.DisableTorchFunction():
            values = routed(routing, idx.shape[0], idx.shape[1], module.num_experts,
                            idx.dtype)
            copy = torch.empty_like(idx)
        rec.same(copy, idx)
        rec.values.put(copy, values)
        if where == 1:
            args[1] = copy
        else:
            kwargs[where] = copy
        return tuple(args), kwargs

    return [m.register_forward_pre_hook(hook, with_kwargs=True)
            for m in experts_modules(model)]


def note(model: torch.nn.Module, precision: str, routing: str = "balanced") -> str:
    """What a trace's note says of the model's experts ("" without any)."""
    mods = experts_modules(model)
    if not mods:
        return ""
    impl = getattr(mods[0].config, "_experts_implementation", None) or "grouped_mm"
    path = PATHS.get(impl, f"experts_implementation {impl}")
    if impl == "grouped_mm":
        path += (", one grouped GEMM kernel (bf16 on sm90/sm100)" if precision == "bf16" else
                 ", ATen's per-expert fallback (offsets copied to the host, an mm per expert)")
    e = mods[0].num_experts
    if routing == "balanced":
        how = f"balanced (each expert gets tokens x top-k / {e} of the tokens' choices)"
    else:
        how = f"{routing} (--routing; the busiest expert's share of the choices as given)"
    return f"; MoE: {len(mods)} experts layers of {e} experts by {path}; routing assumed {how}"
