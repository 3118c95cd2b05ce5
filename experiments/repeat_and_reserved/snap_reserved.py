"""What the timed steps' peak reserved memory of traces/h200_torchvision's snapshot runs is made of.

    python experiments/repeat_and_reserved/snap_reserved.py

Reads the twelve allocator histories of ``traces/h200_reserved_heldout/set_a/snap`` (every
alloc, free and segment event from process start: the warm-up's three steps, the five
timed steps, measure's phase step, NOTE [measurement]) and for each run prints: the peak
reserved over the timed steps (from the history; the record's ``peak_reserved_bytes``
beside it), the reserved at the reset (the first timed step's start), one step's from an
emptied cache (``reserved_one_step_bytes``), the first warm-up step's own peak, cuDNN's
benchmarks in the first step (a block freed and then, before anything else is allocated,
a release of the cache: the trial workspace and the empty_cache after it, NOTE [cudnn
benchmark]) against the count NOTE [cudnn benchmark] predicts from the trace, the largest
trial workspace, the bytes of trial-workspace segments still reserved at the timed peak,
the segments reserved at the timed peak by the step that made them (fixed segments only),
and the replay's peak reserved without and with the first step's autotuning.

Steps are found from the allocation sizes, which repeat exactly from step to step once
the first is done: the period is the number of allocations per step, counted back from the
phase step's empty_cache (the last-but-one release; measure's closing empty_cache is the
last).
"""

from __future__ import annotations

import gzip
import json
import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vdnnsim.api import resolve_gpu, run_trace  # noqa: E402
from vdnnsim.engine import autotune  # noqa: E402
from vdnnsim.engine.autotune import autotuned  # noqa: E402
from vdnnsim.measured.validate import POLICY_MAP, load_traces  # noqa: E402

SNAP = ROOT / "traces/h200_reserved_heldout/set_a/snap"
GiB = 2**30
ADD, SUB = ("segment_alloc", "segment_map"), ("segment_free", "segment_unmap")


def releases(t: list[dict]) -> list[int]:
    return [i for i, e in enumerate(t) if e["action"] in SUB
            and (i == 0 or t[i - 1]["action"] not in SUB)]


def steps(t: list[dict]) -> tuple[list[int], int]:
    """(the first event of steps 2, 3 and 4 (the first timed), the phase step's release)."""
    allocs = [i for i, e in enumerate(t) if e["action"] == "alloc"]
    rel = releases(t)
    if not any(i > rel[-1] for i in allocs):  # measure's closing empty_cache
        rel = rel[:-1]
    end = rel[-1]
    pre = [i for i in allocs if i < end]
    sizes = [t[i]["size"] for i in pre]
    n = len(sizes)
    for p in range(10, n // 8):
        if all(sizes[n - 1 - k] == sizes[n - 1 - k - p] for k in range(6 * p)):
            break
    else:
        raise SystemExit("no repeating step found")
    # 3 warm-up + 5 timed steps end at ``end``: step s (1-based) starts 9 - s periods back
    return [pre[n - (9 - s) * p] for s in (2, 3, 4)], end


def analyze(path: Path) -> dict:
    t = pickle.load(gzip.open(path))["device_traces"][0]
    rec = json.loads(path.with_name(path.name.replace(".pickle.gz", ".json")).read_text())
    (s2, s3, s4), end = steps(t)

    def step_of(i: int) -> str:
        return "1" if i < s2 else "2" if i < s3 else "3" if i < s4 else "timed"
    res, peak1, timed, at_reset = 0, 0, -1, 0
    segs: dict[int, tuple[int, int]] = {}
    at_peak: dict[int, tuple[int, int]] = {}
    for i, e in enumerate(t[:end]):
        if e["action"] in ADD:
            res += e["size"]
            segs[e["addr"]] = (e["size"], i)
        elif e["action"] in SUB:
            res -= e["size"]
            segs.pop(e["addr"], None)
        if i == s4:
            at_reset = res
        if i < s2:
            peak1 = max(peak1, res)
        elif i >= s4 and res > timed:
            timed, at_peak = res, dict(segs)
    starts = set(releases(t))
    trials, last = [], None
    for i, e in enumerate(t[:s2]):
        if e["action"] == "alloc":
            last = (i, e)
        elif i in starts and last is not None and any(
                x["action"] == "free_completed" and x["addr"] == last[1]["addr"]
                for x in t[last[0] + 1:i]):
            trials.append(last)
    made = {j - 1 for j, _ in trials}  # the segment event just before a trial's alloc
    by: dict[str, int] = {}
    for size, i in at_peak.values():
        by[step_of(i)] = by.get(step_of(i), 0) + size
    return dict(rec=rec, timed=timed, at_reset=at_reset, peak1=peak1, trials=len(trials),
                max_trial=max((e["size"] for _, e in trials), default=0),
                trial_left=sum(size for size, i in at_peak.values() if i in made), by=by)


def predict(trace, rec: dict, tuned: bool) -> float:
    conf = rec.get("allocator_conf") or None
    keep, autotune.REPLAY = autotune.REPLAY, tuned  # NOTE [cudnn benchmark]
    try:
        r = run_trace(trace, resolve_gpu("h200"), POLICY_MAP[rec["policy"]], {}, None,
                      allocator=conf)
    finally:
        autotune.REPLAY = keep
    return r.peak_footprint_bytes / GiB


def main() -> int:
    traces = load_traces(ROOT / "traces/h200_torchvision")
    g = lambda b: f"{b / GiB:.2f}"  # noqa: E731
    pct = lambda p, m: f"{(p - m) / m:+.1%}"  # noqa: E731
    print("| run | allocator | timed peak (record) | at reset | one step | step 1 peak | "
          "benchmarks (predicted) | largest trial | trial segs at peak | made in step 1 / 2 / "
          "3 / timed | replay before | after |")
    print("|" + "---|" * 12)
    for path in sorted(SNAP.glob("*.pickle.gz")):
        a = analyze(path)
        rec = a["rec"]
        name = rec["model"].split(":")[-1]
        trace = traces[(name, rec["batch_size"])]
        n = sum(f for f, _ in autotuned(trace)) + sum(
            2 if trace.tensors[x.inputs[0]].requires_grad and x.inputs[0] in
            trace.producers() else 1 for x, (_, b) in zip(trace.layers, autotuned(trace)) if b)
        exp = bool(rec.get("allocator_conf"))
        by = " / ".join(g(a["by"].get(k, 0)) for k in ("1", "2", "3", "timed")) \
            if not exp else "(expandable)"
        m = rec["peak_reserved_bytes"]
        before, after = predict(trace, rec, False), predict(trace, rec, True)
        print(f"| {path.name[:-10]} | {rec.get('allocator_conf') or 'default'} | "
              f"{g(a['timed'])} ({g(m)}) | {g(a['at_reset'])} | "
              f"{g(rec['reserved_one_step_bytes'])} | {g(a['peak1'])} | {a['trials']} ({n}) | "
              f"{g(a['max_trial'])} | {g(a['trial_left']) if not exp else '-'} | {by} | "
              f"{before:.2f} ({pct(before * GiB, m)}) | {after:.2f} ({pct(after * GiB, m)}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
