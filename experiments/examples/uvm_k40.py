"""The paper's argument against page-based unified memory, in numbers: VGG-16 (256) on the
K40 (12 GiB, PCIe gen3) under vDNN and under uvm_lru with the paper's page-fault costs,
then with a prefetcher and batched faults (docs/policies.md, "Unified memory").
Run from the repository root: python experiments/examples/uvm_k40.py"""

from vdnnsim.api import build_trace, resolve_gpu, run_trace

gpu = resolve_gpu("k40")
trace = build_trace("vgg16", 256, gpu)
GiB = 2**30
cases = [
    ("baseline_p", {}, "no offload, fastest algos"),
    ("vdnn_dyn", {}, "the paper's vDNN_dyn"),
    ("vdnn_all_m", {}, "vDNN_all, memory-optimal"),
    ("uvm_lru", {}, "4 KiB pages, 45 us a fault"),
    ("uvm_lru", {"fault_ns": 20_000}, "4 KiB pages, 20 us a fault"),
    ("uvm_lfu", {}, "4 KiB pages, 45 us, LFU"),
    ("uvm_lru", {"prefetch_bytes": 65536}, "64 KiB prefetcher"),
    ("uvm_lru", {"prefetch_bytes": 65536, "fault_batch": 256}, "64 KiB, 256 faults a batch"),
    ("uvm_lru", {"prefetch_bytes": 2 * 2**20}, "2 MiB pages"),
]
oracle = None
print(f"{'policy':11s} {'setting':29s} {'fits':4s} {'ms/iter':>9s} {'slowdown':>8s} "
      f"{'in GiB':>6s} {'out GiB':>7s}")
for policy, opts, what in cases:
    r = run_trace(trace, gpu, policy, opts, record=False)
    oracle = oracle or r.oracle_time_ns
    print(f"{policy:11s} {what:29s} {'yes' if r.fits else 'no':4s} "
          f"{r.iteration_time_ns / 1e6:9.0f} {r.iteration_time_ns / oracle:7.1f}x "
          f"{r.prefetched_bytes / GiB:6.1f} {r.offloaded_bytes / GiB:7.1f}")
