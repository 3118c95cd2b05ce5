"""What the CUDA caching allocator pays the driver: cudaMalloc of a new segment and
cudaFree of a cached one, by size (NOTE [allocator costs] in vdnnsim/engine/caching.py).

    python bench/alloc_costs.py [OUT.json]      (on a CUDA GPU; about 20 s)

Each size is timed REPS times in this process, each time from an emptied cache and an idle
GPU: a tensor of that size made (one cudaMalloc of a segment, checked by the allocator's
own num_device_alloc), then freed to the cache, then the cache emptied (one cudaFree).
Host wall time of each call; the median per size is written. A microbenchmark kept apart
from the runs it is used to predict (the planned runs of traces/h200_timm_heldout/measured_planned).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

SIZES = [2 << 20, 20 << 20, 64 << 20, 256 << 20, 1 << 30, 4 << 30]
REPS = 15


def main() -> None:
    dev = torch.device("cuda")
    torch.empty(1, device=dev)  # the context
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sizes": []}
    for size in SIZES:
        mal, fre = [], []
        for _ in range(REPS + 2):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            a0 = torch.cuda.memory_stats().get("num_device_alloc", 0)
            t0 = time.perf_counter()
            x = torch.empty(size, dtype=torch.uint8, device=dev)
            t1 = time.perf_counter()
            a1 = torch.cuda.memory_stats().get("num_device_alloc", 0)
            assert a1 - a0 == 1, (size, a1 - a0)
            del x
            t2 = time.perf_counter()
            torch.cuda.empty_cache()
            t3 = time.perf_counter()
            mal.append((t1 - t0) * 1e6)
            fre.append((t3 - t2) * 1e6)
        mal, fre = mal[2:], fre[2:]  # the first two: warm-up
        out["sizes"].append({"bytes": size, "malloc_us": statistics.median(mal),
                             "free_us": statistics.median(fre),
                             "malloc_us_all": mal, "free_us_all": fre})
        print(f"{size / 2**20:8.0f} MiB: cudaMalloc {statistics.median(mal):8.1f} us, "
              f"cudaFree {statistics.median(fre):8.1f} us")
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
