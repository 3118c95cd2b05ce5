"""Models and workloads: torchvision, zoo and hf: models built as nn.Modules, and the one training step every probe, profiler and measurement runs."""
