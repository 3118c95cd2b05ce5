"""VGG-16 (64) baseline: the segments reserved at the timed peak, measured and replayed.

    python experiments/repeat_and_reserved/reserved_segments.py

Measured: the allocator history of ``traces/h200_reserved_heldout/set_a/snap/vgg16_b64_baseline``
(every event from process start; the steps found as ``snap_reserved.py`` finds them): the
segments reserved at the peak of the timed steps, each with the step that made it, and the
blocks the first step leaves allocated for good. Replayed: ``traces/h200_backward_workspaces/vgg16_b64.yaml``
(the backward's workspaces one by one) under the baseline policy, the segments reserved at
the reported iteration's peak, each with the iteration that made it (1: the replayed first
step, 2: the reported one), four ways: the model as it is (the first step's tuning replayed,
NOTE [cudnn benchmark], and the cuBLAS workspaces made at its first matmuls, NOTE [cublas
workspaces]); the workspaces allocated before the step instead; one step from an empty
cache, no first step replayed (the model before both). Sizes in MiB.
"""

from __future__ import annotations

import gzip
import pickle
import sys
from collections import Counter
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from snap_reserved import ADD, SUB, steps  # noqa: E402

from vdnnsim.api import resolve_gpu, run_trace  # noqa: E402
from vdnnsim.engine import autotune, memory  # noqa: E402
from vdnnsim.engine.caching import CachingPool  # noqa: E402
from vdnnsim.engine.sim import Simulation  # noqa: E402
from vdnnsim.trace import load_trace  # noqa: E402

MiB = 2**20
SNAP = ROOT / "traces/h200_reserved_heldout/set_a/snap/vgg16_b64_baseline.pickle.gz"
TRACE = ROOT / "traces/h200_backward_workspaces/vgg16_b64.yaml"


def measured() -> tuple[list[tuple[int, str]], list[int], int]:
    """(size, step made) of each segment at the timed peak; the first step's blocks kept to
    the end; the peak."""
    t = pickle.load(gzip.open(SNAP))["device_traces"][0]
    (s2, s3, s4), end = steps(t)
    segs: dict[int, tuple[int, int]] = {}
    res, peak, at_peak = 0, 0, {}
    live: dict[int, tuple[int, int]] = {}
    for i, e in enumerate(t):
        if e["action"] in ADD:
            res += e["size"]
            segs[e["addr"]] = (e["size"], i)
        elif e["action"] in SUB:
            res -= e["size"]
            segs.pop(e["addr"], None)
        elif e["action"] == "alloc":
            live[e["addr"]] = (e["size"], i)
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
        if s4 <= i < end and res > peak:
            peak, at_peak = res, dict(segs)
    first_free = next(i for i, e in enumerate(t) if e["action"] == "free_completed")
    kept = sorted(size for size, i in live.values() if first_free < i < s2)

    def step(i: int) -> str:
        return "1" if i < s2 else "2" if i < s3 else "3" if i < s4 else "timed"
    return sorted(((size, step(i)) for size, i in at_peak.values()), reverse=True), kept, peak


def replayed(tuned: bool, lazy: bool) -> tuple[list[tuple[int, str]], int]:
    """(size, iteration made) of each segment at the reported iteration's peak; the peak."""
    made: dict[int, str] = {}
    state = {"it": 0, "peak": -1, "segs": []}
    grow, run = CachingPool._grow, Simulation.run

    def _grow(pool, *a, **kw):
        found = grow(pool, *a, **kw)
        if found is not None:
            made[id(pool), found[0]] = str(state["it"])
        return found

    def _alloc(pool, *a, **kw):
        ok = alloc(pool, *a, **kw)
        if pool.reserved_bytes > state["peak"]:
            state["peak"] = pool.reserved_bytes
            state["segs"] = [(size, made[id(pool), s]) for s, (_, size) in pool._segments.items()]
        return ok

    def _run(sim):
        state["it"] += 1
        state["peak"], state["segs"] = sim.pool.reserved_bytes, [
            (size, made[id(sim.pool), s]) for s, (_, size) in sim.pool._segments.items()]
        return run(sim)
    alloc = CachingPool.alloc
    keep = autotune.REPLAY
    autotune.REPLAY = tuned
    try:
        with mock.patch.object(CachingPool, "_grow", _grow), \
                mock.patch.object(CachingPool, "alloc", _alloc), \
                mock.patch.object(Simulation, "run", _run), \
                mock.patch.object(memory, "cublas_workspaces",
                                  memory.cublas_workspaces if lazy else lambda *a: None):
            r = run_trace(load_trace(TRACE), resolve_gpu("h200"), "eager", record=False)
    finally:
        autotune.REPLAY = keep
    assert r.peak_footprint_bytes == state["peak"]
    return sorted(state["segs"], reverse=True), state["peak"]


def show(segs: list[tuple[int, str]]) -> str:
    c = Counter(segs)
    return ", ".join(f"{size / MiB:.0f}{f' x{n}' if n > 1 else ''} ({made})"
                     for (size, made), n in sorted(c.items(), key=lambda x: (-x[0][0], x[0][1])))


def main() -> int:
    segs, kept, peak = measured()
    print(f"measured (history): {peak / MiB:.0f} MiB = {peak / 2**30:.2f} GiB at the timed peak, "
          f"{len(segs)} segments, by the step that made them:")
    print(f"  {show(segs)}")
    print(f"  the first step's blocks never freed: {', '.join(f'{k / MiB:g}' for k in kept)}")
    for tuned, lazy, what in ((None, True, "the model (first step replayed, cuBLAS workspaces "
                                           "at its first matmuls)"),
                              (None, False, "cuBLAS workspaces before the first step"),
                              (False, True, "one step, no first step replayed")):
        segs, peak = replayed(tuned, lazy)
        print(f"replayed, {what}: {peak / MiB:.0f} MiB = {peak / 2**30:.2f} GiB "
              f"({peak / (11444158464) - 1:+.1%}), {len(segs)} segments:")
        print(f"  {show(segs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
