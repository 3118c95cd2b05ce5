"""The GPU catalog's table (docs/hardware.md, "GPU catalog"): every preset of
vdnnsim/data/gpus.yaml, its card, memory, peaks, bandwidths, how vdnnsim times it and where
its numbers come from.
Run from the repository root: python experiments/examples/gpu_catalog.py"""

from vdnnsim.hardware import gpu_preset, preset_names, timing_of

GiB = 2**30
print("| preset | card | memory | fp32 / bf16 TFLOP/s | DRAM GB/s | link GB/s each way | "
      "timing | source |")
print("|---|---|---|---|---|---|---|---|")
for name in preset_names():
    g = gpu_preset(name)
    print(f"| `{name}` | {g.display_name} | {g.memory_bytes / GiB:g} GiB | "
          f"{g.peak_flops['fp32'] / 1e12:g} / {g.peak_flops['bf16'] / 1e12:g} | "
          f"{g.mem_bw_bytes_per_s / 1e9:g} | {g.link.h2d_bw_bytes_per_s / 1e9:.1f} | "
          f"{timing_of(g)} | {g.source} |")
