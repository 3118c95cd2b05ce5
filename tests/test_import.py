"""`vdnnsim import` (NOTE [import]): a torch.profiler trace and a CUDA memory snapshot
pickle as validation data; hostile and foreign files refused in one line. No torch needed."""

import builtins
import copy
import gzip
import json
import os
import pickle
from pathlib import Path

import pytest

from vdnnsim.measured import importers, segments, snapshot
from vdnnsim.cli import main

H200_TRACE = Path(__file__).parent / "data" / "kineto_h200_2steps.json.gz"  # how: its .py
MB = 1_000_000


def run(capsys, *argv):
    rc = main(["import", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def refused(capsys, path, *words):
    rc, out, err = run(capsys, path)
    assert rc == 2 and out == ""
    assert err.startswith("vdnnsim: error: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, (w, err)
    return err


# ---------------------------------------------------------------- Kineto trace

def test_h200_trace_two_steps_and_module_table(capsys):
    rc, out, err = run(capsys, H200_TRACE)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert "torch.profiler trace on NVIDIA H200, 2 step(s)" in lines[0]
    assert lines[2].startswith("vdnnsim.step#0") and lines[3].startswith("vdnnsim.step#1")
    assert lines[4].split()[:2] == ["median", "13.154"]  # (16.170385 + 10.137315) / 2
    table = lines[lines.index(next(x for x in lines if x.startswith("modules,"))) + 2:]
    names = [x.split()[0] for x in table if x.startswith("  ")]
    assert names[0] == "enc.self_attn" and {"c.0", "lin", "out", "<root>"} <= set(names)
    assert "record: iteration_ms 13.15385" in lines[-1] and "68448768" in lines[-1]


def test_h200_trace_json_record(capsys, tmp_path):
    rc, out, _ = run(capsys, H200_TRACE, "--json")
    rec = json.loads(out)
    assert rc == 0 and rec["kind"] == "torch.profiler trace" and rec["time_source"] == "gpu"
    assert [s["step"] for s in rec["steps"]] == [0, 1]
    assert [s["wall_ms"] for s in rec["steps"]] == [16.170385, 10.137315]
    assert rec["iteration_ms"] == 13.15385
    assert rec["peak_allocated_bytes"] == 68448768 and rec["peak_reserved_bytes"] == 69206016
    for s in rec["steps"]:
        parts = sum(m["forward_ms"] + m["backward_ms"] for m in s["modules"]) \
            + s["optimizer_ms"] + s["zero_grad_ms"] + s["unattributed_ms"]
        assert parts == pytest.approx(s["device_total_ms"], abs=1e-5)
        assert s["unattributed_share"] == 0.0 and s["gpu_busy_ms"] <= s["device_total_ms"]
        # the device total holds the kernels' queued gaps (NOTE [kineto attribution]); the
        # busy time is the kernels' union alone
        assert 0 < s["gap_ms"] and s["gpu_busy_ms"] <= s["device_total_ms"] - s["gap_ms"] + 1e-6
    mods = rec["median"]["modules"]
    totals = [m["forward_ms"] + m["backward_ms"] for m in mods]
    assert totals == sorted(totals, reverse=True)
    # -o writes the same record, whole
    rc, out2, err = run(capsys, H200_TRACE, "-o", tmp_path / "rec.json")
    assert rc == 0 and "wrote" in err and out2.startswith(str(H200_TRACE))
    assert json.loads((tmp_path / "rec.json").read_text()) == rec


def test_trace_record_joins_measurements(tmp_path):
    """docs/gpu.md, "Importing": with what the trace cannot name added, the record is a
    measurement record that vdnnsim validate reads."""
    from vdnnsim.measured.validate import load_measurements
    rec = importers.import_file(H200_TRACE)
    rec.update(model="zoo:tiny", batch_size=2, policy="baseline", fits=True)
    f = tmp_path / "m.json"
    f.write_text(json.dumps([rec]))
    (m,) = load_measurements(f)
    assert m["iteration_ms"] == 13.15385 and m["peak_allocated_bytes"] == 68448768
    del rec["model"]
    f.write_text(json.dumps([rec]))
    with pytest.raises(Exception, match="model"):
        load_measurements(f)


def test_module_table_is_cut_at_top(capsys):
    rec = importers.import_file(H200_TRACE)
    text = importers.format_record(rec, top=5)
    assert "... 13 more (--json lists them all)" in text  # 17 modules + outside
    assert sum(1 for x in text.splitlines() if x.startswith("  ") and "..." not in x) == 6


def test_cpu_trace_gives_no_device_peaks(capsys, tmp_path):
    """A CPU trace's [memory] events count host allocations from the profiler's start."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0.0,
           "dur": 5.0, "args": {}},
          {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
           "ts": 1.0, "args": {"Total Allocated": 4096, "Total Reserved": 0, "Bytes": 4096,
                               "Device Type": 0, "Device Id": -1}}]
    f = tmp_path / "cpu.json"
    f.write_text(json.dumps({"traceEvents": ev}))
    rc, out, _ = run(capsys, f, "--json")
    rec = json.loads(out)
    assert rc == 0 and rec["time_source"] == "cpu_self" and rec["iteration_ms"] == 0.005
    assert rec["peak_allocated_bytes"] is None and rec["peak_reserved_bytes"] is None
    assert any("host (CPU) allocations" in w for w in rec["warnings"])


# ---------------------------------------------------------------- snapshots

def _snapshot():
    """One device; the history below, worked out by hand (sizes in MB):
       segment_alloc A 2.0        reserved 2.0
       alloc A+0 1.0              allocated 1.0
       alloc A+1 0.5              allocated 1.5
       segment_alloc B 4.0        reserved 6.0   <- peak reserved
       alloc B 3.0                allocated 4.5  <- peak allocated
       free_requested A+1, free_completed A+1 0.5   allocated 4.0
       free_requested B, free_completed B 3.0       allocated 1.0
       segment_free B 4.0         reserved 2.0
       oom
    ends at 1.0 allocated (block A+0) and 2.0 reserved (segment A): the state below."""
    A, B = 0x7F0000000000, 0x7F0010000000

    def e(action, addr, size, t):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
                "frames": [{"filename": "train.py", "line": 10, "name": "step"}],
                "compile_context": "N/A", "user_metadata": ""}

    trace = [e("segment_alloc", A, 2 * MB, 100), e("alloc", A, MB, 110),
             e("alloc", A + MB, MB // 2, 120), e("segment_alloc", B, 4 * MB, 130),
             e("alloc", B, 3 * MB, 140), e("free_requested", A + MB, MB // 2, 150),
             e("free_completed", A + MB, MB // 2, 160), e("free_requested", B, 3 * MB, 170),
             e("free_completed", B, 3 * MB, 180), e("segment_free", B, 4 * MB, 190),
             {"action": "oom", "device_free": 100, "size": 8 * MB, "stream": 0,
              "time_us": 1000, "frames": []}]
    seg = {"device": 0, "address": A, "total_size": 2 * MB, "allocated_size": MB,
           "active_size": MB, "requested_size": MB, "stream": 0, "segment_type": "large",
           "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
           "blocks": [{"address": A, "size": MB, "requested_size": MB,
                       "state": "active_allocated", "frames": []},
                      {"address": A + MB, "size": MB, "requested_size": 0,
                       "state": "inactive", "frames": []}]}
    small = {"device": 0, "address": 0x7F0020000000, "total_size": 2 * 2**20,
             "allocated_size": 0, "active_size": 0, "requested_size": 0, "stream": 7,
             "segment_type": "small", "segment_pool_id": (0, 0), "is_expandable": False,
             "frames": [], "blocks": [{"address": 0x7F0020000000, "size": 2 * 2**20,
                                       "requested_size": 0, "state": "inactive",
                                       "frames": []}]}
    trace.insert(0, {**e("segment_alloc", small["address"], 2 * 2**20, 90)})
    return {"segments": [seg, small], "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0,
                                   "expandable_segments": False,
                                   "roundup_power2_divisions": {"1": 0, "2": 0}},
            "external_annotations": []}


def _dump(tmp_path, data, name="snap.pickle"):
    f = tmp_path / name
    f.write_bytes(pickle.dumps(data, protocol=4))
    return f


SMALL = 2 * 2**20  # the small segment, allocated first and never freed


def test_snapshot_peaks_by_hand(capsys, tmp_path):
    rc, out, err = run(capsys, _dump(tmp_path, _snapshot()), "--json")
    rec = json.loads(out)
    assert rc == 0 and err == "" and rec["kind"] == "CUDA memory snapshot"
    (d,) = rec["devices"]
    assert d["segments"] == {"count": 2, "reserved_bytes": 2 * MB + SMALL,
                             "by_type": {"large": {"count": 1, "bytes": 2 * MB},
                                         "small": {"count": 1, "bytes": SMALL}},
                             "by_stream": {"0": {"count": 1, "bytes": 2 * MB},
                                           "7": {"count": 1, "bytes": SMALL}}}
    assert d["blocks"]["active_allocated_bytes"] == MB
    assert d["blocks"]["active_allocated_count"] == 1
    h = d["history"]
    assert h["peak_allocated_bytes"] == 4_500_000
    assert h["peak_reserved_bytes"] == 6 * MB + SMALL
    assert h["oom_events"] == 1 and h["span_ms"] == 0.91 and h["complete"] is True
    assert h["peaks_are_lower_bounds"] is False and h["held_before_allocated_bytes"] == 0
    assert rec["peak_allocated_bytes"] == 4_500_000 and rec["peaks_are_lower_bounds"] is False
    assert rec["allocator_settings"]["expandable_segments"] is False
    assert rec["warnings"] == ["device 0: 1 out-of-memory event(s) in the history"]
    rc, out, _ = run(capsys, tmp_path / "snap.pickle")
    assert rc == 0 and "peak allocated 4.3 MiB" in out and "lower bounds" not in out
    assert "expandable_segments=False" in out and "1 oom" in out


def test_snapshot_ring_buffer_lost_the_start(capsys, tmp_path):
    """max_entries dropped the first four entries (the small segment, segment A and both
    allocations in it): the record still shows them held (a free of A+1 it never saw
    allocated, block A+0 and both segments live), so they are added back, and the peaks
    are said to be lower bounds."""
    snap = _snapshot()
    snap["device_traces"][0] = snap["device_traces"][0][4:]
    rc, out, _ = run(capsys, _dump(tmp_path, snap), "--json")
    h = json.loads(out)["devices"][0]["history"]
    assert rc == 0 and h["complete"] is False and h["peaks_are_lower_bounds"] is True
    assert h["held_before_allocated_bytes"] == 1_500_000  # A+0 1.0 (live) + A+1 0.5 (freed)
    assert h["held_before_reserved_bytes"] == 2 * MB + SMALL
    assert h["peak_allocated_bytes"] == 4_500_000 and h["peak_reserved_bytes"] == 6 * MB + SMALL
    rc, out, _ = run(capsys, tmp_path / "snap.pickle")
    assert "(lower bounds)" in out
    assert "warning: device 0: the history starts after memory was in use" in out
    assert "ring buffer (max_entries)" in out


def test_snapshot_history_disagreeing_with_state_is_said(capsys, tmp_path):
    snap = _snapshot()
    snap["segments"][0]["blocks"][0]["state"] = "inactive"  # the history never freed it
    rec = json.loads(run(capsys, _dump(tmp_path, snap), "--json")[1])
    assert any("ends at 1,000,000 bytes allocated but the active blocks hold 0" in w
               and "history and state disagree" in w for w in rec["warnings"])
    snap = _snapshot()  # more live than the history accounts for: held before it
    snap["segments"][0]["blocks"][0]["requested_size"] = 2 * MB
    h = json.loads(run(capsys, _dump(tmp_path, snap), "--json")[1])["devices"][0]["history"]
    assert h["held_before_allocated_bytes"] == MB and h["peaks_are_lower_bounds"] is True


def test_snapshot_without_history_and_gzipped(capsys, tmp_path):
    snap = _snapshot()
    snap["device_traces"] = [[]]
    f = tmp_path / "snap.pickle.gz"
    f.write_bytes(gzip.compress(pickle.dumps(snap)))
    rc, out, _ = run(capsys, f, "--json")
    rec = json.loads(out)
    assert rc == 0 and rec["devices"][0]["history"] == {"entries": 0}
    assert rec["peak_allocated_bytes"] is None
    assert any("no history" in w for w in rec["warnings"])


class _Payload:
    """Creates a file if its pickle is ever executed."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (builtins.open, (self.path, "w"))


def test_reduce_payload_is_refused_not_run(capsys, tmp_path):
    victim = tmp_path / "pwned"
    snap = _snapshot()
    snap["segments"][0]["frames"] = [_Payload(victim)]
    f = _dump(tmp_path, snap)
    refused(capsys, f, "references io.open", "refused, nothing in it was run")
    assert not victim.exists()


def test_global_torch_size_is_refused(capsys, tmp_path):
    f = tmp_path / "size.pickle"
    f.write_bytes(b"\x80\x02ctorch\nSize\n]\x85R.")  # GLOBAL torch.Size, REDUCE ([],)
    refused(capsys, f, "torch.Size", "only plain data")
    g = _dump(tmp_path, {"segments": [], "device_traces": [],
                         "x": __import__("collections").OrderedDict(a=1)}, "od.pickle")
    refused(capsys, g, "collections.OrderedDict")  # STACK_GLOBAL (protocol 4)


def test_persistent_id_and_non_plain_types_are_refused(capsys, tmp_path):
    f = tmp_path / "pid.pickle"
    f.write_bytes(b"\x80\x02X\x01\x00\x00\x00aQ.")  # BINPERSID
    refused(capsys, f, "a persistent id")
    for bad, word in (({1, 2}, "a set"), (b"raw", "a bytes")):
        g = _dump(tmp_path, {"segments": [], "device_traces": [], "x": bad}, "t.pickle")
        refused(capsys, g, f"holds {word}")


def test_a_cyclic_pickle_is_walked_once(capsys, tmp_path):
    loop: list = []
    loop.append(loop)
    refused(capsys, _dump(tmp_path, {"segments": loop, "device_traces": []}),
            "segments[0] is a list, not a dict")


@pytest.mark.parametrize("change, words", [
    (lambda s: s.pop("device_traces"), ["no 'device_traces' list"]),
    (lambda s: s.update(segments={}), ["a dict as 'segments' list"]),
    (lambda s: s["segments"][1].pop("total_size"), ["segments[1] has no 'total_size'"]),
    (lambda s: s["segments"][0]["blocks"][0].update(state=3),
     ["segments[0].blocks[0] has a bad (int) 'state'"]),
    (lambda s: s["device_traces"].append({}), ["device_traces[1] is a dict, not a list"]),
    (lambda s: s["device_traces"][0][2].pop("size"), ["device_traces[0][2] has no 'size'"]),
])
def test_snapshot_structure_errors(capsys, tmp_path, change, words):
    snap = copy.deepcopy(_snapshot())
    change(snap)
    refused(capsys, _dump(tmp_path, snap), *words)


def test_pickles_that_are_no_snapshot(capsys, tmp_path):
    refused(capsys, _dump(tmp_path, [1, 2]), "a pickle of a list, not a CUDA memory snapshot")
    f = tmp_path / "cut.pickle"
    f.write_bytes(pickle.dumps(_snapshot())[:40])
    refused(capsys, f, "not a readable pickle")


def test_size_cap(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot, "MAX_PICKLE_BYTES", 100)
    refused(capsys, _dump(tmp_path, _snapshot()), "a snapshot pickle is at most 100")


# ---------------------------------------------------------------- anything else

def test_other_files_one_line_each(capsys, tmp_path):
    refused(capsys, tmp_path, "is a directory", "vdnnsim import takes")
    refused(capsys, tmp_path / "nope.json", "no such file")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
        refused(capsys, tmp_path / "fifo", "not a regular file")
    (tmp_path / "empty.json").write_bytes(b"")
    refused(capsys, tmp_path / "empty.json", "empty file", "CUDA memory snapshot pickle")
    (tmp_path / "garbage.bin").write_bytes(b"\x00\x01\x02garbage\xff")
    refused(capsys, tmp_path / "garbage.bin", "binary data", "vdnnsim import takes")
    (tmp_path / "t.yaml").write_text("name: x\nlayers: []\n")
    refused(capsys, tmp_path / "t.yaml", "text that is not JSON")
    (tmp_path / "ckpt.pt").write_bytes(b"PK\x03\x04" + b"\x00" * 30)
    refused(capsys, tmp_path / "ckpt.pt", "a zip archive (a torch.save checkpoint?)")
    (tmp_path / "m.json").write_text('[{"model": "x"}]')
    refused(capsys, tmp_path / "m.json", "expected a torch.profiler trace")
    (tmp_path / "bad.json").write_text('{"traceEvents": [')
    refused(capsys, tmp_path / "bad.json", "not JSON")


def test_unwritable_output_fails_before_reading(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path / "missing.json", "-o", tmp_path / "no" / "dir" / "r.json")
    assert rc == 2 and "no such file" not in err and err.count("\n") == 1


# ---------------------------------------------------------------- segments at the peak

M = 2**20
L1, S1, L2, E = 0x10000000, 0x20000000, 0x30000000, 0x40000000


def _segments_snapshot():
    """NOTE [snapshot segments], by hand. Recording began after the warm-up: segment L1
    (large, 20 MiB) with block A (8 MiB) and the small segment S1 with a 512-byte block
    were there before the history's first entry. Then (MiB):
      0 alloc L1+8 6                          (allocated A + S + 6)
      1 segment_alloc L2 40                   reserved 22 -> 62
      2 alloc L2+0 30 - 1000 bytes
      3 alloc L2+30 8                         <- the most allocated at the peak reserved
      4 free_completed L2+0, 5 free_completed L2+30, 6 free_completed L1+8
      7 segment_free L2 40 (empty_cache)      reserved 22 at the snapshot
    At the peak moment (after entry 3): L1 = A (8, exact), the 6 MiB block, 6 MiB free:
    3 blocks; L2 = the 30 MiB block (30 MiB - 512 rounded, its 512-byte tail unsplit, as
    the allocator leaves a remainder of at most 1 MiB), the 8 MiB block, 2 MiB free: 3
    blocks; S1 = its 512-byte block and 2 MiB - 512 free: 2 blocks."""
    def e(action, addr, size, t):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
                "frames": []}
    trace = [e("alloc", L1 + 8 * M, 6 * M, 10), e("segment_alloc", L2, 40 * M, 20),
             e("alloc", L2, 30 * M - 1000, 30), e("alloc", L2 + 30 * M, 8 * M, 40),
             e("free_requested", L2, 30 * M - 1000, 50),
             e("free_completed", L2, 30 * M - 1000, 51),
             e("free_requested", L2 + 30 * M, 8 * M, 60),
             e("free_completed", L2 + 30 * M, 8 * M, 61),
             e("free_requested", L1 + 8 * M, 6 * M, 70),
             e("free_completed", L1 + 8 * M, 6 * M, 71), e("segment_free", L2, 40 * M, 80)]
    segs = [{"device": 0, "address": L1, "total_size": 20 * M, "stream": 0,
             "segment_type": "large", "is_expandable": False,
             "blocks": [{"address": L1, "size": 8 * M, "requested_size": 8 * M - 100,
                         "state": "active_allocated"},
                        {"address": L1 + 8 * M, "size": 12 * M, "requested_size": 0,
                         "state": "inactive"}]},
            {"device": 0, "address": S1, "total_size": 2 * M, "stream": 0,
             "segment_type": "small", "is_expandable": False,
             "blocks": [{"address": S1, "size": 512, "requested_size": 400,
                         "state": "active_allocated"},
                        {"address": S1 + 512, "size": 2 * M - 512, "requested_size": 0,
                         "state": "inactive"}]}]
    return {"segments": segs, "device_traces": [trace]}


def test_segments_at_the_peak_by_hand(capsys, tmp_path):
    (d,) = segments.snapshot_segments(_segments_snapshot())
    assert d["peak_reserved_bytes"] == 62 * M
    assert d["peak_moment"] == {"entry": 4, "of": 8, "time_us": 40,
                                "allocated_requested_bytes":
                                    8 * M - 100 + 400 + 6 * M + 30 * M - 1000 + 8 * M}
    assert (d["cuda_malloc"], d["cuda_free"], d["segment_map"]) == (1, 1, 0)
    assert d["estimated_blocks"] == 3 and d["warnings"] == []
    large, small = d["pools"]
    assert (large["stream"], large["pool"], small["pool"]) == ("0", "large", "small")
    assert {k: large[k] for k in ("segments", "reserved_bytes", "blocks", "allocated_bytes",
                                  "free_bytes", "cuda_malloc", "cuda_free")} == \
        {"segments": 2, "reserved_bytes": 60 * M, "blocks": 6, "allocated_bytes": 52 * M,
         "free_bytes": 8 * M, "cuda_malloc": 1, "cuda_free": 1}
    l1, l2 = large["segment_list"]
    assert (l1["address"], l1["blocks"], l1["allocated_blocks"], l1["free_bytes"]) == \
        (L1, 3, 2, 6 * M)
    assert l1["requested_bytes"] == 14 * M - 100
    assert (l2["address"], l2["size_bytes"], l2["blocks"], l2["allocated_bytes"],
            l2["free_bytes"]) == (L2, 40 * M, 3, 38 * M, 2 * M)
    (s1,) = small["segment_list"]
    assert (s1["blocks"], s1["allocated_bytes"], s1["free_bytes"]) == (2, 512, 2 * M - 512)
    assert (small["cuda_malloc"], small["cuda_free"]) == (0, 0)
    # the command: the same facts, readable and as JSON
    f = _dump(tmp_path, _segments_snapshot())
    rc, out, err = run(capsys, f, "--segments")
    lines = out.splitlines()
    assert rc == 0 and err == "" and "segments at the peak, 1 device(s)" in lines[0]
    assert lines[1].startswith("device 0: peak reserved 62.0 MiB (after entry 4 of 8;")
    assert "1 cudaMalloc, 1 cudaFree in 8 history entries" in lines[1]
    assert lines[3].split()[:9] == ["0", "large", "2", "6", "60.0", "52.0", "8.0", "1", "1"]
    assert lines[3].endswith("40.0 (3), 20.0 (3)")
    assert "3 block(s) sized from their request" in lines[-1]
    rc, out, _ = run(capsys, f, "--segments", "--json")
    rec = json.loads(out)
    assert rec["kind"] == importers.KIND_SEGMENTS and rec["devices"][0]["pools"][0] == large


def test_expandable_segments_pieces_are_one_segment(tmp_path):
    """An expandable segment maps 20 MiB twice, holds a 30 MiB block, is unmapped to 20."""
    def e(action, addr, size, t):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t}
    trace = [e("segment_map", E, 20 * M, 1), e("segment_map", E + 20 * M, 20 * M, 2),
             e("alloc", E, 30 * M, 3), e("free_completed", E, 30 * M, 4),
             e("segment_unmap", E + 20 * M, 20 * M, 5)]
    seg = {"device": 0, "address": E, "total_size": 20 * M, "stream": 0,
           "segment_type": "large", "is_expandable": True,
           "blocks": [{"address": E, "size": 20 * M, "requested_size": 0, "state": "inactive"}]}
    (d,) = segments.snapshot_segments({"segments": [seg], "device_traces": [trace]})
    assert d["peak_reserved_bytes"] == 40 * M and d["peak_moment"]["entry"] == 3
    assert (d["cuda_malloc"], d["segment_map"], d["segment_unmap"]) == (0, 2, 1)
    ((x,),) = [p["segment_list"] for p in d["pools"]]
    assert (x["size_bytes"], x["expandable"], x["blocks"], x["allocated_bytes"]) == \
        (40 * M, True, 2, 30 * M)


def test_segments_need_a_snapshot(capsys, tmp_path):
    rc, out, err = run(capsys, H200_TRACE, "--segments")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "--segments reads a CUDA memory snapshot pickle" in err
    snap = _segments_snapshot()
    snap["device_traces"] = [[]]
    rc, out, _ = run(capsys, _dump(tmp_path, snap), "--segments", "--json")
    rec = json.loads(out)
    assert rc == 0 and rec["devices"][0]["peak_reserved_bytes"] == 22 * M
    assert any("no history" in w for w in rec["warnings"])
