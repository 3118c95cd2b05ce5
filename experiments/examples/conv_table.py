"""Per-conv-layer algorithm table of the analytic cost model (docs/cost-model.md)."""
import sys
from vdnnsim import build_trace, gpu_preset

net, batch, preset = sys.argv[1], int(sys.argv[2]), sys.argv[3]
gpu = gpu_preset(preset)
trace = build_trace(net, batch, gpu, "fp32")
names = ["implicit_gemm", "implicit_precomp_gemm", "gemm", "fft_tiling", "fft", "winograd"]
used = [n for n in names if any(a.name == n for l in trace.layers if l.is_conv for a in l.algos)]
print("| layer | X (NCHW) | " + " | ".join(used) + " | fastest |")
print("|---|---|" + "---|" * len(used) + "---|")
for layer in trace.layers:
    if not layer.is_conv:
        continue
    x = trace.tensors[trace.root(layer.inputs[0])].shape
    by = {a.name: a for a in layer.algos}
    def ws(b):  # GB (10^9 bytes); tiny index buffers in bytes
        return f"{b / 1e9:.3f} GB" if b >= 10**6 or b == 0 else f"{b} B"
    cells = [f"{by[n].fwd_ns / 1e6:.1f} ms / {ws(by[n].workspace_bytes)}"
             if n in by else "n/a" for n in used]
    print(f"| {layer.id} | {'x'.join(map(str, x))} | " + " | ".join(cells)
          + f" | {layer.algos[layer.fastest_algo()].name} |")
