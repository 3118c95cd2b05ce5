"""Which layer's offloads each backward pass prefetches, for VGG-16 (256) on the K40 under
vdnn_all_m, in both readings of the offload marks (docs/policies.md, "Offload marks").
Run from the repository root: python experiments/examples/prefetch_example.py"""

from vdnnsim.api import build_trace, resolve_gpu
from vdnnsim.policies import get_policy

gpu = resolve_gpu("k40")
trace = build_trace("vgg16", 256, gpu)
fn, fixed = get_policy("vdnn_all_m")
for reading in ("text", "measured"):
    plan = fn(trace, gpu, None, {**fixed, "reading": reading})
    print(reading)
    for i in range(8):
        j = plan.prefetch[i]
        got = f"{', '.join(plan.offload[j])} (copied by {trace.layers[j].id})" if j >= 0 else "-"
        print(f"  {i} {trace.layers[i].id:8s} prefetch at its backward: {got}")
