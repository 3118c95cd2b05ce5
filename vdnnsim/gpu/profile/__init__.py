"""Profilers: a model timed on the GPU into a trace, op by op or layer by layer, and its kernel counts."""
