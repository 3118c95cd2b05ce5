"""vdnnsim: a trace-driven simulator of GPU memory during DNN training, with vDNN-style
offload and prefetch policies."""

from .api import build_trace, oracle_time_ns, run_trace, simulate
from .errors import ConfigError, TraceError, UnknownNameError, VdnnError
from .hardware import GPU, Link, gpu_preset, preset_names
from .policies import policy_names
from .results import RunResult
from .study import sweep
from .trace import Trace, load_trace, save_trace

__version__ = "0.1.0"

__all__ = ["ConfigError", "GPU", "Link", "RunResult", "Trace", "TraceError",
           "UnknownNameError", "VdnnError", "build_trace", "gpu_preset", "load_trace",
           "oracle_time_ns", "policy_names", "preset_names", "run_trace", "save_trace",
           "simulate", "sweep"]
