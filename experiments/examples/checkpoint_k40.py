"""Activation checkpointing against vDNN on the paper's VGG-16 on the K40 (12 GiB), at batch
128 (which fits without help) and 256 (which does not) (docs/policies.md, "Recompute").
Run from the repository root: python experiments/examples/checkpoint_k40.py"""

from vdnnsim.api import build_trace, resolve_gpu, run_trace

gpu = resolve_gpu("k40")
GiB = 2**30
print(f"{'batch':5s} {'policy':11s} {'options':28s} {'fits':4s} {'ms/iter':>8s} "
      f"{'peak GiB':>8s} {'recompute':>9s}")
for batch in (128, 256):
    trace = build_trace("vgg16", batch, gpu)
    for policy, opts in (("eager", {}), ("vdnn_dyn", {}), ("checkpoint", {}),
                         ("checkpoint", {"segments": 2}), ("checkpoint", {"segments": 9}),
                         ("checkpoint", {"offload": "all"}),
                         ("checkpoint", {"offload": "all", "algo": "m"})):
        r = run_trace(trace, gpu, policy, opts)
        again = sum(o.end_ns - o.start_ns for o in r.ops if o.kind == "recompute")
        shown = ", ".join(f"{k}={v}" for k, v in opts.items()) or "-"
        print(f"{batch:5d} {policy:11s} {shown:28s} {'yes' if r.fits else 'no':4s} "
              f"{r.iteration_time_ns / 1e6:8.0f} {r.peak_memory_bytes / GiB:8.2f} "
              f"{again / 1e6:7.0f}ms")
