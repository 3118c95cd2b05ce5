"""Where a capped run ran out of memory, from its allocator history (CPU).

    .venv/bin/python experiments/repeat_and_reserved/oom_state.py HISTORY.pickle.gz ...

HISTORY: `experiments/repeat_and_reserved/snapshot.py`'s pickle of a run that ran out of memory
(every alloc, free and segment event from before the model was built to the failure and
after it). Replays the events up to the `oom` event and prints, per file: which of the
failing request's size it was, the segments then (count, reserved: the error message's
allocated plus reserved-but-unallocated, to the MiB), and how far the request was over the
cap: reserved + the segment the request needed (its size rounded up to 2 MiB, as the
allocator rounds a large segment) - the cap. Nothing is fitted here."""

from __future__ import annotations

import gzip
import pickle
import sys

MiB = 2**20
GiB = 2**30


def state(path: str, cap: int) -> dict:
    """The allocator's books just before the `oom` event of ``path``'s history."""
    trace = pickle.load(gzip.open(path))["device_traces"][0]
    at = next(i for i, e in enumerate(trace) if e["action"] == "oom")
    request = trace[at]["size"]
    segments: dict[int, int] = {}
    for e in trace[:at]:
        if e["action"] == "segment_alloc":
            segments[e["addr"]] = e["size"]
        elif e["action"] == "segment_free":
            del segments[e["addr"]]
    reserved = sum(segments.values())
    segment = -(-request // (2 * MiB)) * (2 * MiB)
    return {"request_mib": request / MiB,
            "nth": sum(1 for e in trace[:at + 1]
                       if e["action"] in ("alloc", "oom") and e["size"] == request),
            "segments": len(segments), "reserved_gib": reserved / GiB,
            "over_cap_mib": (reserved + segment - cap) / MiB}


def main(argv: list[str]) -> int:
    for path in argv:
        s = state(path, 22 * GiB)
        print(f"{path}: request {s['request_mib']:.1f} MiB (the {s['nth']}th of its size); "
              f"{s['segments']} segments, {s['reserved_gib']:.3f} GiB reserved; over the "
              f"22 GiB cap by {s['over_cap_mib']:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
