"""The worked timeline of docs/policies.md: the hand-written trace of docs/trace-format.md
under vdnn_all_m on the K40 preset, with the end-of-layer sync on and off.
Run from the repository root: python experiments/examples/timeline_example.py"""

from pathlib import Path

import pandas as pd

import vdnnsim

TRACE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "tiny_trace.yaml"
pd.set_option("display.width", 120)

for sync in (True, False):
    r = vdnnsim.simulate(TRACE, gpu="k40", policy="vdnn_all_m",
                         policy_options={"sync": sync})
    print(f"--- sync={sync}: iteration {r.iteration_time_ns} ns, stall {r.stall_time_ns} ns, "
          f"peak {r.peak_memory_bytes} B")
    print(f"offloaded {r.offloaded_bytes} B, prefetched {r.prefetched_bytes} B, "
          f"peak host {r.peak_host_bytes} B")
    tl = r.timeline.sort_values(["start_ns", "stream"], kind="stable")
    print(tl[["stream", "kind", "layer", "name", "start_ns", "end_ns", "size_bytes"]]
          .to_string(index=False))
    print(r.memory.to_string(index=False))
