"""What is allocated at the peak of a measured step, from the allocator's history (CPU).

    python3 experiments/offload_runs/peak_blocks.py HISTORY.pickle.gz [STEPS]

HISTORY: a ``vdnnsim measure --memory-history`` file (its ring of the last alloc and free
events; no stack frames). Takes the highest allocated level in the last half of the events
(the later timed steps), the lowest level within one step (len / STEPS events, default 5)
before it as the step's start, and prints the blocks allocated since that start and still
live at the peak, by size: count, MiB. What was allocated before the step (weights, state)
is the difference between the record's peak and these. Nothing is fitted here."""

from __future__ import annotations

import collections
import gzip
import pickle
import sys


def main(argv: list[str]) -> int:
    trace = pickle.load(gzip.open(argv[0]))["device_traces"][0]
    steps = int(argv[1]) if len(argv) > 1 else 5
    level, levels = 0, []
    for e in trace:
        if e["action"] == "alloc":
            level += e["size"]
        elif e["action"] == "free_requested":
            level -= e["size"]
        levels.append(level)
    half = len(levels) // 2
    peak = max(range(half, len(levels)), key=levels.__getitem__)
    per = len(levels) // steps
    start = min(range(max(0, peak - per), peak), key=levels.__getitem__)
    live: dict[int, int] = {}
    for e in trace[start:peak + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_requested":
            live.pop(e["addr"], None)
    sizes = collections.Counter(live.values())
    print(f"events {len(trace)}, step start {start}, peak {peak}: "
          f"{(levels[peak] - levels[start]) / 2**30:.3f} GiB allocated in the step, "
          f"{sum(live.values()) / 2**30:.3f} GiB of it live at the peak")
    for size, n in sorted(sizes.items(), key=lambda x: -x[0] * x[1]):
        if size * n >= 2**20:
            print(f"{size:>12} x {n:>4}  {size * n / 2**20:9.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
