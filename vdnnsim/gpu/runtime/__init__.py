"""Runtimes: vDNN offload and prefetch, block offload and checkpointing, parameters and the optimizer on the host, executed on a real GPU."""
