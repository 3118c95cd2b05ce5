"""A snapshot's segments at its peak reserved moment, per stream and pool:
``vdnnsim import FILE --segments``."""

from __future__ import annotations

import bisect
import os
from typing import Any

from ..units import MiB
from .snapshot import (ALLOC_DOWN, ALLOC_UP, KIND_SEGMENTS, SEG_DOWN, SEG_UP, check_snapshot,
                       is_int, load_snapshot)
from .tracefile import shown

# NOTE [snapshot segments]
# What the engine's caching allocator must reproduce, read from a snapshot with a history
# (``vdnnsim measure --memory-history``; ``snapshot_segments``): per device, per stream
# and pool (small: the 2 MiB segments that serve requests of at most 1 MiB; large: the
# rest), the segments at the moment of peak reserved memory, each with its size, how many
# blocks it is split into (allocated ones and free ones) and its allocated, requested and
# free bytes; the cudaMalloc and cudaFree calls of the history (``segment_alloc`` and
# ``segment_free``; ``segment_map``/``segment_unmap`` for expandable segments, counted
# apart); and the peak reserved bytes.
#
# The state is replayed backwards from the snapshot's
# own segments and blocks, which are exact, undoing the history's entries one by one
# (undo an alloc: the block was not there; undo a free_completed: it was; likewise for
# segments), so a history that starts late (recording began after the warm-up, or the
# ring buffer dropped entries) still gives the exact state at every moment it covers; the
# peak is the largest reserved total of those moments, and of the moments at that peak the
# one with the most allocated is shown (the tightest packing). A block's size is exact
# where it lived on to the snapshot; otherwise it is its request rounded up to 512 bytes
# as the allocator rounds (PyTorch's default settings), and in a large segment a free gap
# of at most 1 MiB right after such a block is taken as that block's unsplit tail (the
# allocator splits a large block only when more than 1 MiB would remain): those blocks are
# counted (``estimated_blocks``).
SMALL_REQUEST_BYTES = MiB  # kSmallSize: requests up to this are served by the small pool
SMALL_SEGMENT_BYTES = 2 * MiB  # kSmallBuffer: the small pool's segment size
BLOCK_ROUND_BYTES = 512  # kMinBlockSize: every block is a multiple of this


def _round_block(n: int) -> int:
    return max(BLOCK_ROUND_BYTES, -(-n // BLOCK_ROUND_BYTES) * BLOCK_ROUND_BYTES)


class _Ranges:
    """The segments (or mapped pieces of expandable ones) live at one moment, by address."""

    def __init__(self) -> None:
        self.r: dict[int, dict[str, Any]] = {}

    def add(self, addr: int, size: int, stream: Any, pool: str | None, expandable: bool
            ) -> None:
        if pool is None:  # a segment the snapshot does not show: its neighbour's, or by size
            near = [v for a, v in self.r.items() if a + v["size"] == addr or addr + size == a]
            pool = near[0]["pool"] if near else (
                "small" if size <= SMALL_SEGMENT_BYTES else "large")
        self.r[addr] = {"size": size, "stream": stream, "pool": pool,
                        "expandable": expandable}

    def remove(self, addr: int, size: int) -> dict[str, Any] | None:
        """Take [addr, addr + size) out of the range holding it; that range, or None."""
        for a, v in self.r.items():
            if a <= addr < a + v["size"]:
                del self.r[a]
                if addr > a:
                    self.r[a] = {**v, "size": addr - a}
                end = a + v["size"]
                if addr + size < end:
                    self.r[addr + size] = {**v, "size": end - addr - size}
                return v
        return None

    def segments(self) -> list[dict[str, Any]]:
        """The ranges as segments: an expandable segment's contiguous pieces are one."""
        out: list[dict[str, Any]] = []
        for a in sorted(self.r):
            v = self.r[a]
            last = out[-1] if out else None
            if (last and v["expandable"] and last["expandable"]
                    and last["address"] + last["size"] == a
                    and (last["stream"], last["pool"]) == (v["stream"], v["pool"])):
                last["size"] += v["size"]
            else:
                out.append({"address": a, **v})
        return out


def snapshot_segments(data: Any, what: str = "snapshot") -> list[dict[str, Any]]:
    """Per device of a snapshot (plain data, as ``load_snapshot``
    gives it), the segment-level facts at its peak reserved moment, as plain data."""
    check_snapshot(data, what)
    devices = sorted({s["device"] for s in data["segments"]}
                     | {d for d, t in enumerate(data["device_traces"]) if t})
    return [_device_segments(d, [s for s in data["segments"] if s["device"] == d],
                             data["device_traces"][d] if d < len(data["device_traces"])
                             else []) for d in devices]


def _device_segments(dev: int, segs: list[dict[str, Any]], trace: list[dict[str, Any]]
                     ) -> dict[str, Any]:
    ranges = _Ranges()
    blocks: dict[int, list[Any]] = {}  # address -> [requested, exact size or None]
    for s in segs:
        ranges.add(s["address"], s["total_size"], s.get("stream", "unknown"),
                   s.get("segment_type") if s.get("segment_type") in ("small", "large")
                   else None, bool(s.get("is_expandable")))
        for b in s["blocks"]:
            if b["state"] != "inactive":
                req = b.get("requested_size")
                blocks[b["address"]] = [req if is_int(req) and req > 0 else b["size"], b["size"]]
    entries = [e for e in trace if e["action"] in ALLOC_UP | ALLOC_DOWN | SEG_UP | SEG_DOWN]
    # reserved and allocated at each moment k (after the first k entries), backwards from
    # the snapshot's state
    reserved = [0] * (len(entries) + 1)
    allocated = [0] * (len(entries) + 1)
    reserved[-1] = sum(s["total_size"] for s in segs)
    allocated[-1] = sum(r for r, _ in blocks.values())
    for k in range(len(entries) - 1, -1, -1):
        e = entries[k]
        act, size = e["action"], e["size"]
        reserved[k] = reserved[k + 1] - (size if act in SEG_UP else -size if act in SEG_DOWN
                                         else 0)
        allocated[k] = allocated[k + 1] - (size if act in ALLOC_UP else -size
                                           if act in ALLOC_DOWN else 0)
    peak = max(reserved)
    at = max((k for k in range(len(reserved)) if reserved[k] == peak),
             key=lambda k: (allocated[k], -k))
    warnings = []
    lost = 0
    calls: dict[tuple[str, str], list[int]] = {}  # (stream, pool) -> [mallocs, frees]
    kept = (dict(ranges.r), dict(blocks))
    for k in range(len(entries) - 1, -1, -1):  # undo every entry; keep the moment ``at``
        e = entries[k]
        act, addr, size = e["action"], e["addr"], e["size"]
        if act in ALLOC_UP:
            lost += blocks.pop(addr, None) is None
        elif act in ALLOC_DOWN:
            blocks[addr] = [size, None]
        elif act in SEG_UP:
            v = ranges.remove(addr, size)
            lost += v is None
            if act == "segment_alloc" and v is not None:
                calls.setdefault((str(v["stream"]), v["pool"]), [0, 0])[0] += 1
        else:
            ranges.add(addr, size, e.get("stream", "unknown"), None, act == "segment_unmap")
            if act == "segment_free":
                v = ranges.r[addr]
                calls.setdefault((str(v["stream"]), v["pool"]), [0, 0])[1] += 1
        if k == at:
            kept = (dict(ranges.r), dict(blocks))
    ranges.r, blocks = kept
    if lost:
        warnings.append(f"{lost} history entries undo what the snapshot does not hold: "
                        "history and state disagree")
    segments = ranges.segments()
    starts = [s["address"] for s in segments]
    per_seg: list[list[tuple[int, int, int | None]]] = [[] for _ in segments]
    outside = 0
    for addr, (req, exact) in blocks.items():
        i = bisect.bisect_right(starts, addr) - 1
        if i < 0 or addr >= starts[i] + segments[i]["size"]:
            outside += 1
            continue
        per_seg[i].append((addr, req, exact))
    if outside:
        warnings.append(f"{outside} allocated block(s) lie in no segment: history and state "
                        "disagree")
    estimated = 0
    pools: dict[tuple[str, str], dict[str, Any]] = {}

    def pool_of(key: tuple[str, str]) -> dict[str, Any]:
        return pools.setdefault(key, {"stream": key[0], "pool": key[1], "segments": 0,
                                      "reserved_bytes": 0, "allocated_bytes": 0,
                                      "requested_bytes": 0, "free_bytes": 0, "blocks": 0,
                                      "cuda_malloc": 0, "cuda_free": 0,
                                      "segment_list": []})
    for s, bl in zip(segments, per_seg):
        row = _segment_row(s, sorted(bl))
        estimated += row.pop("estimated")
        pool = pool_of((str(s["stream"]), s["pool"]))
        pool["segments"] += 1
        for k in ("allocated_bytes", "requested_bytes", "free_bytes", "blocks"):
            pool[k] += row[k]
        pool["reserved_bytes"] += row["size_bytes"]
        pool["segment_list"].append(row)
    for key, (mallocs, frees) in calls.items():
        pool = pool_of(key)
        pool["cuda_malloc"], pool["cuda_free"] = mallocs, frees
    count = {a: sum(e["action"] == a for e in entries)
             for a in ("segment_alloc", "segment_free", "segment_map", "segment_unmap")}
    times = [e.get("time_us") for e in entries[:at]] if at else []
    return {"device": dev, "history_entries": len(entries),
            "peak_reserved_bytes": peak, "peak_moment": {
                "entry": at, "of": len(entries),
                "time_us": times[-1] if times and is_int(times[-1]) else None,
                "allocated_requested_bytes": allocated[at]},
            "cuda_malloc": count["segment_alloc"], "cuda_free": count["segment_free"],
            "segment_map": count["segment_map"], "segment_unmap": count["segment_unmap"],
            "estimated_blocks": estimated,
            "pools": [pools[k] for k in sorted(pools)], "warnings": warnings}


def _segment_row(seg: dict[str, Any], blocks: list[tuple[int, int, int | None]]
                 ) -> dict[str, Any]:
    """One segment at a moment: its allocated blocks (address, requested, exact size or
    None) and the free pieces between them."""
    start, end = seg["address"], seg["address"] + seg["size"]
    cursor, free_pieces, alloc_bytes, estimated = start, 0, 0, 0
    sizes: list[int] = []
    for addr, req, exact in blocks:
        if addr > cursor:
            gap = addr - cursor
            if (sizes and sizes[-1] < 0 and seg["pool"] == "large"
                    and gap <= SMALL_REQUEST_BYTES):
                alloc_bytes += gap  # the estimated block before it kept its tail
            else:
                free_pieces += 1
        size = exact if exact is not None else _round_block(req)
        estimated += exact is None
        sizes.append(size if exact is not None else -size)
        alloc_bytes += size
        cursor = max(cursor, addr + size)
    if end > cursor:
        gap = end - cursor
        if sizes and sizes[-1] < 0 and seg["pool"] == "large" and gap <= SMALL_REQUEST_BYTES:
            alloc_bytes += gap
        else:
            free_pieces += 1
    alloc_bytes = min(alloc_bytes, seg["size"])
    return {"address": start, "size_bytes": seg["size"], "expandable": seg["expandable"],
            "blocks": len(blocks) + free_pieces, "allocated_blocks": len(blocks),
            "allocated_bytes": alloc_bytes,
            "requested_bytes": sum(r for _, r, _ in blocks),
            "free_bytes": seg["size"] - alloc_bytes, "estimated": estimated}


def import_segments(path: str | os.PathLike) -> dict[str, Any]:
    """NOTE [snapshot segments]: ``vdnnsim import FILE --segments``'s record."""
    what = shown(path)
    data = load_snapshot(path)
    devices = snapshot_segments(data, what)
    warnings = [f"device {d['device']}: {w}" for d in devices for w in d.pop("warnings")]
    if not any(d["history_entries"] for d in devices):
        warnings.append("no history (recorded without torch.cuda.memory."
                        "_record_memory_history?): the segments are the snapshot's own, "
                        "at its moment, not at a peak")
    return {"kind": KIND_SEGMENTS, "file": str(path), "devices": devices,
            "warnings": warnings}


# ---------------------------------------------------------------- the readable form
