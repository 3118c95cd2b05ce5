"""The Python API example of docs/configs.md. Run from the repository root:
python experiments/examples/api_example.py"""

from pathlib import Path

import vdnnsim
from vdnnsim import gpu_preset, load_trace, run_trace

r = vdnnsim.simulate("vgg16", batch_size=128, gpu="titanx_maxwell", policy="vdnn_conv_p")
print(r.fits, r.peak_memory_bytes, round(r.slowdown, 3))
print(r.peak_breakdown)
print(r.timeline.head(6).to_string())
print(r.memory.head(4).to_string())

t = load_trace(Path(__file__).resolve().parents[2] / "docs" / "examples" / "tiny_trace.yaml")
g = gpu_preset("k40", {"memory_bytes": "1 MiB"})
r2 = run_trace(t, g, "vdnn_dyn")
print(r2.fits, r2.notes, r2.algos)
