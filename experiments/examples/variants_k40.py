"""Later variants of vDNN on the paper's VGG-16 (256), K40, 12 GiB: no end-of-layer
synchronisation, a fixed prefetch distance instead of findPrefetchLayer, and first-fit
placement instead of CNMeM's best fit (docs/policies.md, "Later variants").
Run from the repository root: python experiments/examples/variants_k40.py"""

from vdnnsim.api import build_trace, resolve_gpu, run_trace

gpu = resolve_gpu("k40")
trace = build_trace("vgg16", 256, gpu)
GiB = 2**30
print(f"{'policy':11s} {'options':32s} {'fits':4s} {'ms/iter':>8s} {'peak GiB':>8s} "
      f"{'stall ms':>8s}")
for policy in ("vdnn_all_m", "vdnn_conv_p", "vdnn_dyn"):
    for opts in ({}, {"sync": False}, {"distance": 1}, {"distance": 2}, {"distance": 4},
                 {"placement": "first"}):
        r = run_trace(trace, gpu, policy, opts, record=False)
        shown = ", ".join(f"{k}={v}" for k, v in opts.items()) or "(the paper's)"
        print(f"{policy:11s} {shown:32s} {'yes' if r.fits else 'no':4s} "
              f"{r.iteration_time_ns / 1e6:8.0f} {r.peak_memory_bytes / GiB:8.2f} "
              f"{r.stall_time_ns / 1e6:8.0f}")
