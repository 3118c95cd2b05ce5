"""Traces: the layer-wise compute and memory record the engine replays."""

from .io import load_trace, save_trace, trace_from_dict, trace_to_dict
from .model import Algo, Layer, Source, Tensor, Trace

__all__ = ["Algo", "Layer", "Source", "Tensor", "Trace", "load_trace", "save_trace",
           "trace_from_dict", "trace_to_dict"]
