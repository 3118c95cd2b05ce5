"""NOTE [cudnn benchmark], [backward workspaces]: traces/h200_torchvision's VGG-16 runs replayed with the
workspaces their allocator history shows, against the timed and one-step reserved peaks.

    python experiments/repeat_and_reserved/autotune_check.py

For each VGG-16 run of ``traces/h200_reserved_heldout/set_a/snap`` (default allocator), the
workspaces of the history's last step (one step from an emptied cache, NOTE [measurement]):
every block of at least 1 MiB freed before the next such block is allocated, in order --
one per convolution in the forward pass, then two per convolution in the backward (cuDNN's
backward data, then backward filter), but for the first conv (its forward and filter
workspaces are empty, and its input needs no gradient). Its trace (traces/h200_torchvision) gets those workspaces
(``fwd_workspace_bytes``, ``bwd_workspaces``) and is replayed four ways: one iteration
(the replay before cuDNN's autotuner was modelled, ``one step``), and after a first,
autotuned step (``timed``), each with the trace's own workspaces and with the history's.
VGG-16 only: a chain of convolutions, whose workspaces pair with its layers unambiguously;
the script refuses a run where the count does not come out. This reads the calibration
set's histories to check the mechanism; it fits nothing.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vdnnsim.api import resolve_gpu, run_trace  # noqa: E402
from vdnnsim.engine import autotune  # noqa: E402
from vdnnsim.measured.validate import POLICY_MAP, load_traces  # noqa: E402

SNAP = ROOT / "traces/h200_reserved_heldout/set_a/snap"
MiB, GiB = 2**20, 2**30
SEG = ("segment_free", "segment_unmap")


def last_step(events: list[dict]) -> list[dict]:
    """The events after the history's last-but-one release of the cache: the phase step's
    empty_cache (measure's closing empty_cache is the last release)."""
    starts = [i for i, e in enumerate(events) if e["action"] in SEG
              and (i == 0 or events[i - 1]["action"] not in SEG)]
    return events[starts[-2]:starts[-1]]


def workspaces(events: list[dict]) -> list[int]:
    """Blocks of at least 1 MiB freed before the next such block is allocated, in order."""
    out, open_ = [], None
    for e in events:
        if e["action"] == "alloc" and e["size"] >= MiB:
            open_ = e
        elif e["action"] == "free_completed" and open_ is not None \
                and e["addr"] == open_["addr"]:
            out.append(open_["size"])
            open_ = None
    return out


def with_workspaces(trace, ws: list[int]):
    convs = [i for i, x in enumerate(trace.layers) if x.kind == "conv"]
    n = len(convs)
    # forward: one each but the first conv's (an empty workspace, none allocated);
    # backward: two each but the first conv's (no input gradient, an empty filter one)
    need = (n - 1) + 2 * (n - 1)
    if len(ws) < need or trace.layers[convs[0]].algos[0].fwd_workspace_bytes:
        raise SystemExit(f"{trace.name}: {len(ws)} workspaces in the step, {need} expected")
    fwd, bwd = [0] + ws[:n - 1], ws[n - 1:need]
    layers = list(trace.layers)
    for k, i in enumerate(convs):
        x = layers[i]
        r = n - 1 - k  # the backward runs the convs in reverse
        pair = tuple(bwd[2 * r: 2 * r + 2]) if k else ()
        a = x.algos[0]
        a = dataclasses.replace(a, fwd_workspace_bytes=fwd[k],
                                bwd_workspace_bytes=max(pair, default=0),
                                bwd_workspaces=pair)
        layers[i] = dataclasses.replace(x, algos=(a,))
    return dataclasses.replace(trace, layers=tuple(layers))


def predict(trace, policy: str, tuned: bool) -> float:
    keep, autotune.REPLAY = autotune.REPLAY, tuned  # NOTE [cudnn benchmark]
    try:
        r = run_trace(trace, resolve_gpu("h200"), POLICY_MAP[policy], {}, None)
    finally:
        autotune.REPLAY = keep
    return r.peak_footprint_bytes / GiB


def main() -> int:
    traces = load_traces(ROOT / "traces/h200_torchvision")
    print("| run | measured timed / one step GiB | trace ws: one step | timed | "
          "history ws: one step | timed |")
    print("|---|---|---|---|---|---|")
    for rec_path in sorted(SNAP.glob("vgg16_*.json")):
        rec = json.loads(rec_path.read_text())
        if rec.get("allocator_conf"):
            continue
        events = pickle.load(gzip.open(rec_path.with_suffix(".pickle.gz")))[
            "device_traces"][0]
        trace = traces[("vgg16", rec["batch_size"])]
        hist = with_workspaces(trace, workspaces(last_step(events)))
        m, one = rec["peak_reserved_bytes"] / GiB, rec["reserved_one_step_bytes"] / GiB
        cells = []
        for t in (trace, hist):
            for tuned, ref in ((False, one), (True, m)):
                p = predict(t, rec["policy"], tuned)
                cells.append(f"{p:.2f} ({(p - ref) / ref:+.1%})")
        print(f"| {rec_path.stem} | {m:.2f} / {one:.2f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
