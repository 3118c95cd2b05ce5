"""The real-GPU side: models as nn.Modules, a per-layer profiler that writes traces, a vDNN
runtime for PyTorch, and the measurement harness.

NOTE [torch is optional]
Everything under ``vdnnsim.gpu`` imports torch (and torchvision for ``torchvision:``
models) when it runs, never when vdnnsim is imported: the simulator installs and runs
without them. Nothing here imports simpy or pydantic either, so the device machine needs
only torch for profiling and measuring.
"""
