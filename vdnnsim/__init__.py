"""vdnnsim: a trace-driven simulator of GPU memory during DNN training, with vDNN-style
offload and prefetch policies.

The public names below are imported on first use (PEP 562), so that `vdnnsim` on the
command line starts without importing the engine, pandas and the policies: its Ctrl-C
handler is in place within milliseconds of the start, and a command
that needs none of them starts faster.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_WHERE = {
    "build_trace": "api", "oracle_time_ns": "api", "run_trace": "api", "simulate": "api",
    "ConfigError": "errors", "TraceError": "errors", "UnknownNameError": "errors",
    "VdnnError": "errors",
    "GPU": "hardware", "Link": "hardware", "gpu_preset": "hardware",
    "preset_names": "hardware", "retime": "costs.retime",
    "policy_names": "policies", "RunResult": "results", "sweep": "study",
    "Trace": "trace", "load_trace": "trace", "save_trace": "trace",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vdnnsim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
