"""State-space (Mamba-style) layers on the meta device: the path their mixers take, named in
the trace's note (NOTE [ssm path])."""

from __future__ import annotations

import importlib.util

import torch

# NOTE [ssm path]
# transformers runs a Mamba-style mixer by mamba-ssm's and causal-conv1d's fused CUDA
# kernels where those packages are installed (found when transformers is imported), else
# by its PyTorch reference: the causal convolution as a grouped nn.Conv1d, and the
# selective scan as a loop with one step a position (Mamba, FalconMamba; mambapy's parallel
# scan with use_mambapy and mambapy installed), or as chunked tensor ops (Mamba-2 and the
# hybrids). The meta device runs the reference, so a trace models that path, whose many
# small ops make it host-bound; its note says so, and what the fused kernels would change.
LOOP_TYPES = ("mamba", "falcon_mamba")


def mixers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The SSM mixers of a model: modules with an ``A_log`` parameter and a ``conv1d``."""
    return [m for m in model.modules()
            if isinstance(getattr(m, "A_log", None), torch.nn.Parameter)
            and isinstance(getattr(m, "conv1d", None), torch.nn.Conv1d)]


def installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def note(model: torch.nn.Module) -> str:
    """What a trace's note says of the model's SSM mixers ("" without any)."""
    mods = mixers(model)
    if not mods:
        return ""
    have = [p for p in ("mamba_ssm", "causal_conv1d") if installed(p)]
    cfg = getattr(model, "config", None)
    kind = getattr(cfg, "model_type", "")
    if kind in LOOP_TYPES:
        scan = ("mambapy's parallel scan" if getattr(cfg, "use_mambapy", False)
                and installed("mambapy") else "a loop, one step a position")
    else:
        scan = "chunked tensor ops"
    if have:
        return (f"; SSM: {len(mods)} {type(mods[0]).__name__} layers; "
                f"{' and '.join(have)} installed: transformers would call their fused "
                "kernels, which the meta device cannot run")
    return (f"; SSM: {len(mods)} {type(mods[0]).__name__} layers by transformers' PyTorch "
            f"path (mamba-ssm and causal-conv1d not installed): the causal convolution as "
            f"a grouped conv1d, the selective scan as {scan}; with those packages a GPU "
            "runs fused kernels instead, which this trace does not model")
