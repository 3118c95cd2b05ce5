"""Issue 28, the measurement side, on a CPU: records of runs measured in fresh processes
(NOTE [repeated measurement]) made one and judged by their bands (NOTE [bands]); the
allocator settings a measurement runs with (NOTE [allocator settings]) and validate's
refusal of those it does not model; `vdnnsim measure`'s one-line errors without a GPU;
the experiments' GPU scripts still start on a CPU."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vdnnsim.engine.allocconf import ENV, effective, env_string, is_default, parse_pairs
from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.cli import main
from vdnnsim.errors import ConfigError
from vdnnsim.trace import load_trace
from vdnnsim.measured.repeat import aggregate, child_argv, run_child
from vdnnsim.measured.validate import (allocator_supported, format_validation, load_measurements,
                              summarize, validate)

from .conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "traces" / "h200_torchvision"
GiB = 2**30


def _proc(ms, alloc=5_000_000_000, reserved=8_000_000_000, fits=True, **more):
    """One child process's record, as `vdnnsim measure --json` prints it."""
    rec = {"model": "torchvision:vgg16", "batch_size": 64, "policy": "baseline",
           "memory_cap_bytes": None, "dtype": "fp32", "optimizer": "sgd",
           "allocator_conf": {}, "gpu": "NVIDIA H200", "fits": fits, **more}
    if fits:
        rec.update(iteration_ms=ms, iteration_ms_all=[ms - 1, ms, ms + 1], host_issue_ms=ms / 2,
                   peak_allocated_bytes=alloc, peak_reserved_bytes=reserved,
                   reserved_one_step_bytes=reserved - 10**9,
                   allocator={"num_device_alloc": 0, "num_device_free": 0,
                              "num_alloc_retries": 0},
                   phases={"start": 1})
    else:
        rec["error"] = "CUDA out of memory. Tried to allocate 2.00 GiB"
    return rec


# ------------------------------------------------------------ aggregation (pure)

def test_aggregate_takes_the_median_of_the_processes_and_their_band():
    procs = [_proc(50.0, reserved=8_000_000_000), _proc(46.0, reserved=8_080_000_000),
             _proc(47.0, reserved=8_040_000_000)]
    rec = aggregate(procs, [_proc(65.0)])
    assert rec["iteration_ms"] == 47.0 and rec["iteration_ms_band"] == [46.0, 50.0]
    assert rec["iteration_ms_spread"] == pytest.approx(4.0 / 47.0)
    assert rec["peak_reserved_bytes"] == 8_040_000_000
    assert rec["peak_reserved_bytes_band"] == [8_000_000_000, 8_080_000_000]
    assert rec["peak_allocated_bytes"] == 5_000_000_000
    assert rec["reserved_one_step_bytes_band"] == [7_000_000_000, 7_080_000_000]
    assert rec["host_issue_ms"] == 23.5
    assert rec["repeat"] == {"processes": 3, "warmup_processes": 1, "fits_agree": True,
                             "discarded": [{"iteration_ms": 65.0, "fits": True,
                                            "discarded": True}]}
    # every process's own record is kept, its timed steps and counts with it
    assert [p["iteration_ms"] for p in rec["processes"]] == [50.0, 46.0, 47.0]
    assert rec["processes"][1]["iteration_ms_all"] == [45.0, 46.0, 47.0]
    assert set(rec["processes"][0]) >= {"host_issue_ms", "peak_allocated_bytes", "allocator",
                                        "reserved_one_step_bytes", "peak_reserved_bytes"}
    assert "iteration_ms_all" not in rec and "warnings" not in rec
    assert rec["fits"] is True and rec["model"] == "torchvision:vgg16"
    # an even count: the median of the middle two
    assert aggregate(procs + [_proc(48.0)])["iteration_ms"] == 47.5


def test_the_host_probe_is_kept_per_process_and_as_a_median_with_its_band():
    """NOTE [host probe]: each process's probe of its host's speed, and the run's median
    and band of them."""
    rec = aggregate([_proc(47.0, host_probe_ns=6100.0), _proc(48.0, host_probe_ns=9000.0),
                     _proc(46.0, host_probe_ns=6300.0)])
    assert rec["host_probe_ns"] == 6300.0 and rec["host_probe_ns_band"] == [6100.0, 9000.0]
    assert [p["host_probe_ns"] for p in rec["processes"]] == [6100.0, 9000.0, 6300.0]


def test_the_host_probe_times_launches_on_the_cpu():
    pytest.importorskip("torch")
    from vdnnsim.gpu.measure.harness import host_probe_ns
    ns = host_probe_ns("cpu", ops=200, trials=3)
    assert 10 < ns < 1e6  # a dispatch takes microseconds, not nothing and not a millisecond


def test_the_probe_between_steps_is_kept_per_process_with_its_steps():
    """NOTE [host probe]: the probe after each timed step, per process (each step's and
    their median) and as the run's median and band."""
    procs = [_proc(47.0, host_probe_between_ns=8000.0, host_probe_steps_ns=[7900.0, 8000.0],
                   host_issue_ms_all=[20.0, 21.0]),
             _proc(48.0, host_probe_between_ns=11000.0, host_probe_steps_ns=[11000.0]),
             _proc(46.0, host_probe_between_ns=7000.0, host_probe_steps_ns=[7000.0])]
    rec = aggregate(procs)
    assert rec["host_probe_between_ns"] == 8000.0
    assert rec["host_probe_between_ns_band"] == [7000.0, 11000.0]
    assert rec["processes"][0]["host_probe_steps_ns"] == [7900.0, 8000.0]
    assert rec["processes"][0]["host_issue_ms_all"] == [20.0, 21.0]
    assert "host_probe_steps_ns" not in rec and "host_issue_ms_all" not in rec


def test_the_step_probe_times_launches_after_each_call_on_the_cpu():
    pytest.importorskip("torch")
    from vdnnsim.gpu.measure.hostprobe import StepProbe
    probe = StepProbe("cpu", ops=100)
    first = probe()
    probe()
    assert probe.times[0] == first and len(probe.times) == 2
    assert all(10 < ns < 1e6 for ns in probe.times)
    probe.close()
    assert not hasattr(probe, "x")


def test_a_hosts_speed_changes_between_processes_and_the_probe_between_steps_follows_it():
    """traces/h200_reserved_heldout/host_speed/cores: eleven fresh processes of EfficientNet-B0 (32),
    five of ShuffleNetV2 (64), on one lent machine within four minutes: their host times
    spread 1.9x; the probe before the model hardly follows them, the probe after each step
    does, and dividing by it halves the spread (docs/validation.md, "How fast the host
    is")."""
    from statistics import correlation, mean, median, pstdev
    recs = [json.loads(ln) for ln in (ROOT / "traces" / "h200_reserved_heldout" / "host_speed" / "cores" / "cores.jsonl").read_text().splitlines()]
    assert len(recs) == 16 and not any("error" in r for r in recs)
    for model, n, spread, r_before, r_between, cv, cv_norm in (
            ("efficientnet_b0", 11, 1.90, 0.43, 0.87, 0.20, 0.11),
            ("shufflenet_v2_x1_0", 5, 1.91, -0.02, 0.82, 0.20, 0.12)):
        ok = [r for r in recs if r["model"] == model]
        host = [median(r["host_ms"]) for r in ok]
        between = [median(r["probe_ns"]) for r in ok]
        norm = [h / p for h, p in zip(host, between)]
        assert len(ok) == n
        assert max(host) / min(host) == pytest.approx(spread, abs=0.005)
        assert correlation(host, [r["probe_first_ns"] for r in ok]) == \
            pytest.approx(r_before, abs=0.005)
        assert correlation(host, between) == pytest.approx(r_between, abs=0.005)
        assert pstdev(host) / mean(host) == pytest.approx(cv, abs=0.005)
        assert pstdev(norm) / mean(norm) == pytest.approx(cv_norm, abs=0.005)


def test_the_aggregate_is_a_measurement_record_validate_reads(tmp_path):
    rec = aggregate([_proc(47.0), _proc(48.0), _proc(49.0)], [])
    f = tmp_path / "m.json"
    f.write_text(json.dumps([rec]))
    (m,) = load_measurements(f)
    assert m["iteration_ms_band"] == (47.0, 49.0) and m["repeat"]["warmup_processes"] == 0


def test_validate_reads_records_one_a_line(tmp_path):
    """`measure --repeat 3 --json` runs appended to a file, one record a line (JSON Lines),
    read as the list they make; a broken line is still one line of error."""
    recs = [aggregate([_proc(47.0), _proc(48.0), _proc(49.0)], []),
            aggregate([_proc(20.0), _proc(21.0), _proc(22.0)], [])]
    f = tmp_path / "m.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    got = load_measurements(f)
    assert [m["iteration_ms"] for m in got] == [48.0, 21.0]
    f.write_text(json.dumps(recs[0]) + "\n{not json\n")
    with pytest.raises(ConfigError, match="not JSON"):
        load_measurements(f)


def test_the_committed_sets_remeasured_in_fresh_processes():
    """traces/h200_backward_workspaces/repeat: twelve runs of the committed sets measured again by the
    protocol (three fresh processes each). Their old single-process reserved peaks were off
    by -19% to +42%; against the fresh-process medians the re-profiled traces predict
    reserved memory 2.0% median, 13.9% max, and step time 1.4% / 7.0% (the README's
    table, made before the engine's fix of twice-retired blocks, session 23, gave 1.8% /
    11.4%)."""
    from vdnnsim.measured.validate import summarize, validate
    data = ROOT / "traces" / "h200_backward_workspaces"
    reps = load_measurements(data / "repeat" / "repeat.jsonl")
    assert len(reps) == 12 and all(r["iteration_ms_band"] for r in reps)
    old = {}
    for f in (H200 / "measurements.json", ROOT / "traces" / "h200_torchvision_heldout" / "measurements.json"):
        for r in json.loads(f.read_text()):
            if r["memory_cap_bytes"] is None:
                old[(r["model"], r["batch_size"], r["policy"])] = r
    off = [old[(r["model"], r["batch_size"], r["policy"])]["peak_reserved_bytes"]
           / r["peak_reserved_bytes"] - 1 for r in reps]
    assert min(off) == pytest.approx(-0.187, abs=0.002)
    assert max(off) == pytest.approx(0.418, abs=0.002)
    s = summarize(validate([data / "torchvision", data / "torchvision_heldout"], data / "repeat" / "repeat.jsonl"))
    assert s["peak_reserved"]["n"] == 12
    assert s["peak_reserved"]["median_abs"] == pytest.approx(0.020, abs=0.001)
    assert s["peak_reserved"]["max_abs"] == pytest.approx(0.139, abs=0.001)
    assert s["iteration_time"]["median_abs"] == pytest.approx(0.014, abs=0.001)
    assert s["iteration_time"]["max_abs"] == pytest.approx(0.070, abs=0.001)


def test_a_sample_by_rule_remeasured_in_fresh_processes():
    """traces/h200_backward_workspaces/middle: every model of the committed sets at its middle batch size
    under each policy (21 runs, chosen by that rule). Against the fresh-process medians
    the re-profiled traces are within issue 28's step-time target (5% / 15%) and not its
    reserved one (3% / 10%): the baselines' reserved peaks are within 3.1%, the vDNN runs'
    off by up to 13.7% either way (docs/validation.md). middle/superseded.jsonl: the
    ShuffleNetV2 run the runtime measured before it moved every buffer of its plan."""
    from vdnnsim.measured.validate import summarize, validate
    data = ROOT / "traces" / "h200_backward_workspaces"
    src = data / "middle" / "repeat.jsonl"
    reps = load_measurements(src)
    assert len(reps) == 21 and all(r["repeat"]["processes"] == 3 for r in reps)
    runs = {(r["model"].split(":")[1], r["batch_size"], r["policy"]) for r in reps}
    chosen = {ln for ln in (ROOT / "experiments" / "repeat_and_reserved" / "remeasure_runs.txt")
              .read_text().splitlines() if ln and not ln.startswith("#")}
    assert {f"{m}:{b}:{p}" for m, b, p in runs} == chosen
    rows = validate([data / "torchvision", data / "torchvision_heldout"], src)
    s = summarize(rows)
    assert s["iteration_time"]["n"] == s["peak_reserved"]["n"] == 21
    assert s["iteration_time"]["median_abs"] == pytest.approx(0.016, abs=0.001)
    assert s["iteration_time"]["max_abs"] == pytest.approx(0.149, abs=0.001)
    assert s["peak_reserved"]["median_abs"] == pytest.approx(0.023, abs=0.001)
    assert s["peak_reserved"]["max_abs"] == pytest.approx(0.137, abs=0.001)
    assert s["peak_allocated"]["max_abs"] == pytest.approx(0.036, abs=0.001)
    base = [abs(e) for p, e in zip(rows.policy, rows.reserved_err) if p == "baseline"]
    vdnn = [e for p, e in zip(rows.policy, rows.reserved_err) if p != "baseline"]
    assert len(base) == 8 and max(base) < 0.032
    assert min(vdnn) < -0.13 and max(vdnn) > 0.10
    # ShuffleNetV2 (128) vdnn_all measured again once the runtime moved the plan's
    # buffers (tests/test_torch_cpu.py): what it offloaded is what the replay offloads
    shuffle = next(r for r in reps if r["model"].endswith("shufflenet_v2_x1_0")
                   and r["policy"] == "vdnn_all")
    assert shuffle["offloaded_bytes"] == 2455134208 and shuffle["offloads"] == 130


def test_a_second_sample_by_rule_on_a_slower_host():
    """traces/h200_backward_workspaces/smallest: the smallest batch sizes' runs, chosen by a rule committed
    before measuring; 19 of the 21 measured (the queue's last two not started). Reserved
    2.8% / 17.4%; every step time low (12.6% / 36.0%), on a loan whose host issued the same
    steps 1.76x (median) as slowly as the old records, where the sets of sessions 16 and 17
    were at 1.23x and 1.24x (NOTE [host probe]; the README there)."""
    import statistics
    data = ROOT / "traces" / "h200_backward_workspaces"
    src = data / "smallest" / "repeat.jsonl"
    reps = load_measurements(src)
    queue = [ln for ln in (ROOT / "experiments" / "repeat_and_reserved" / "remeasure_runs_smallest.txt").read_text().splitlines()
             if ln and not ln.startswith("#")]
    assert [f"{r['model'].split(':')[1]}:{r['batch_size']}:{r['policy']}" for r in reps] \
        == queue[:19]
    assert all(r["repeat"]["processes"] == 3 for r in reps)
    rows = validate([data / "torchvision", data / "torchvision_heldout"], src)
    s = summarize(rows)
    assert s["peak_reserved"]["median_abs"] == pytest.approx(0.028, abs=0.001)
    assert s["peak_reserved"]["max_abs"] == pytest.approx(0.174, abs=0.001)
    assert s["iteration_time"]["median_abs"] == pytest.approx(0.126, abs=0.001)
    assert s["iteration_time"]["max_abs"] == pytest.approx(0.360, abs=0.001)
    assert max(rows.time_err) < 0  # every one low
    # host-bound runs (the host issues for 80% of the step or more) miss most
    split = s["time_by_bound"]
    assert (split["host"]["n"], split["gpu"]["n"]) == (11, 8)
    assert split["host"]["median_abs"] == pytest.approx(0.209, abs=0.001)
    assert split["gpu"]["median_abs"] == pytest.approx(0.040, abs=0.001)
    assert "iteration_time, median / max |error|: host-bound 20.9% / 36.0% over 11 (3 of 11 " \
        "inside their bands); GPU-bound 4.0% / 20.0% over 8 (1 of 8 inside their bands) (" \
        in format_validation(rows)
    assert (split["host"]["in_band"], split["gpu"]["in_band"]) == (3, 1)
    old = {}
    for f in (H200 / "measurements.json", ROOT / "traces" / "h200_torchvision_heldout" / "measurements.json"):
        for r in json.loads(f.read_text()):
            if r["memory_cap_bytes"] is None and not r.get("allocator_conf"):
                old[(r["model"], r["batch_size"], r["policy"])] = r

    def slower(folder):
        ratios = []
        for r in load_measurements(data / folder / "repeat.jsonl"):
            o = old[(r["model"], r["batch_size"], r["policy"])]
            if o.get("host_issue_ms"):
                ratios.append(r["host_issue_ms"] / o["host_issue_ms"])
        return round(statistics.median(ratios), 2)

    assert [slower(f) for f in ("smallest", "middle", "repeat", "runtime_fix")] == \
        [1.76, 1.24, 1.23, 1.15]


def test_shufflenet_measured_again_with_the_fixed_runtime():
    """traces/h200_backward_workspaces/runtime_fix: ShuffleNetV2 (64) and (256) vdnn_all, whose older
    records measured the runtime before its fix, measured by the protocol: the runtime moves
    the replay's bytes to the byte at both sizes; the replay reserves 11.6% and 12.3% less
    than the GPU, outside the band (the README's table; the cause is not found)."""
    data = ROOT / "traces" / "h200_backward_workspaces"
    src = data / "runtime_fix" / "repeat.jsonl"
    reps = load_measurements(src)
    assert [(r["batch_size"], r["repeat"]["processes"]) for r in reps] == [(64, 3), (256, 3)]
    from vdnnsim.trace import load_trace
    g = resolve_gpu("h200")
    for r in reps:
        t = load_trace(data / "torchvision_heldout" / f"shufflenet_v2_x1_0_b{r['batch_size']}.yaml")
        moved = run_trace(t, g, "vdnn_all_p", record=False).offloaded_bytes
        assert r["offloaded_bytes"] == moved
    rows = validate([data / "torchvision", data / "torchvision_heldout"], src)
    assert [round(e, 3) for e in rows.reserved_err] == [-0.116, -0.123]
    assert [round(e, 3) for e in rows.alloc_err] == [0.001, -0.001]
    assert [round(e, 3) for e in rows.time_err] == [0.117, -0.011]


def test_the_runtimes_events_take_no_room_in_the_launch_queue():
    """traces/h200_host_calibration/queue_commands.json (NOTE [launch queue]): behind a busy stream
    the host issues 1,021 kernels, the h200 preset's depth, with or without an event record
    or wait after each, and half as many kernel-and-copy pairs: a copy takes a slot and an
    event does not, which is what the engine counts. The vDNN runtime's events are many."""
    d = json.loads((ROOT / "traces" / "h200_host_calibration" / "queue_commands.json").read_text())
    a = {k: v[1:] for k, v in d["part_a"].items()}  # (the first trial: see the README)
    depth = resolve_gpu("h200").host.launch_queue
    for k in ("kernel", "kernel+event_record", "kernel+wait_event", "kernel+wait_stream"):
        assert a[k] == [depth, depth], k
    assert a["kernel+h2d_copy"] == [depth // 2] * 2
    assert a["event_record"] == a["wait_event"] == [None, None]
    calls = {b["policy"]: b["calls"] for b in d["part_b"] if b["model"].endswith("densenet121")}
    records = {p: c.get("cudaEventRecord", 0) + c.get("cudaEventRecordWithFlags", 0)
               for p, c in calls.items()}
    assert records == {"baseline": 36, "vdnn_all": 1757}
    assert calls["vdnn_all"]["cudaStreamWaitEvent"] == 1384
    assert calls["vdnn_all"]["cudaLaunchKernel"] == calls["baseline"]["cudaLaunchKernel"]


def test_the_old_sets_offloaded_bytes_and_the_runtime_fix():
    """docs/validation.md: the older measure behind traces/h200_torchvision and traces/h200_torchvision_heldout
    reported 8/7 of a step's offloaded bytes; at that, every vDNN record matches its
    replay to the byte but ShuffleNetV2's vdnn_all, which the runtime ran with 13 of its
    planned offloads undone (fixed since; tests/test_torch_cpu.py)."""
    from vdnnsim.trace import load_trace
    g = resolve_gpu("h200")
    exact, short = 0, []
    for name in ("h200_torchvision", "h200_torchvision_heldout"):
        d = ROOT / "traces" / name
        for r in json.loads((d / "measurements.json").read_text()):
            if r["policy"] not in ("vdnn_all", "vdnn_conv") or r.get("offloaded_bytes") is None:
                continue  # (a run that ran out of memory has no count)
            model = r["model"].split(":")[1]
            t = load_trace(d / f"{model}_b{r['batch_size']}.yaml")
            moved = run_trace(t, g, r["policy"] + "_p", record=False,
                              memory_bytes=r["memory_cap_bytes"]).offloaded_bytes
            if abs(r["offloaded_bytes"] * 7 - moved * 8) < 8:  # (the old count's rounding)
                exact += 1
            else:
                short.append((model, r["batch_size"], r["policy"],
                              round(moved * 8 / 7 / r["offloaded_bytes"] - 1, 4)))
    assert exact == 78
    # the replay, counted as the old measure counted, moves 15.9% more: 2.29 GiB against
    # the 1.97 the runtime moved at batch 128 before the fix (traces/h200_backward_workspaces/middle)
    assert sorted(short) == [("shufflenet_v2_x1_0", b, "vdnn_all", 0.1594)
                             for b in (64, 128, 256, 256)]


def test_fits_that_disagree_are_said_and_the_run_does_not_fit():
    rec = aggregate([_proc(47.0), _proc(0, fits=False), _proc(49.0)], [])
    assert rec["fits"] is False and rec["repeat"]["fits_agree"] is False
    assert rec["warnings"] == ["the processes do not agree whether the run fits: 2 of 3 fit; "
                               "the run is recorded as not fitting"]
    assert rec["iteration_ms_band"] == [47.0, 49.0]  # what the processes that fit measured
    assert rec["error"].startswith("CUDA out of memory")
    oom = aggregate([_proc(0, fits=False)] * 3, [])
    assert oom["fits"] is False and oom["repeat"]["fits_agree"] and "iteration_ms" not in oom


def test_processes_of_different_runs_are_not_aggregated():
    with pytest.raises(ValueError, match="process 2 measured another run"):
        aggregate([_proc(47.0), {**_proc(47.0), "batch_size": 128}])
    with pytest.raises(ValueError):
        aggregate([])


def test_a_child_measures_the_same_run_once():
    args = argparse.Namespace(model="hf:gpt2", batch_size=8, optimizer="adamw",
                              dtype="autocast-bf16", warmup=3, iters=7,
                              model_arg=["n_layer=2"], input=None, seq_len=256, plan=None,
                              policy="baseline")
    argv = child_argv(args, 12 * GiB, "/tmp/h.pickle")
    assert argv[0] == "measure" and argv[-1] == "--json"
    assert "--repeat" not in argv and "--warmup-processes" not in argv
    pairs = dict(zip(argv[1::2], argv[2::2]))
    assert pairs["--memory-cap"] == str(12 * GiB) and pairs["--seq-len"] == "256"
    assert pairs["--model-arg"] == "n_layer=2" and pairs["--memory-history"] == "/tmp/h.pickle"
    assert pairs["--iters"] == "7" and pairs["--policy"] == "baseline"
    # the parser takes what the child is given
    from vdnnsim.cli import build_parser
    back = build_parser().parse_args(argv)
    assert (back.model, back.batch_size, back.seq_len, back.repeat) == ("hf:gpt2", 8, 256, None)
    assert not back.no_step_probe
    # NOTE [host probe]: a run measured without the step probe has children without it
    args.no_step_probe = True
    assert build_parser().parse_args(child_argv(args, None)).no_step_probe


def test_a_failing_child_is_one_line_naming_the_process():
    """A real child `vdnnsim measure` on this machine: without a GPU it fails, and the
    parent says which process and why in one line."""
    args = argparse.Namespace(model="torchvision:resnet18", batch_size=2, optimizer="sgd",
                              dtype="fp32", warmup=1, iters=1, model_arg=None, input=None,
                              seq_len=None, plan=None, policy="baseline")
    with pytest.raises(ConfigError) as exc:
        run_child(child_argv(args, None), {**os.environ, "CUDA_VISIBLE_DEVICES": ""},
                  "process 1 of 3")
    msg = str(exc.value)
    assert msg.startswith("process 1 of 3 failed (exit 2): ") and "\n" not in msg
    assert "needs a CUDA GPU" in msg


# ------------------------------------------------------------ bands in validate

def _banded(tmp_path, edit):
    """The committed measurements with bands added by ``edit``; the file's path."""
    recs = json.loads((H200 / "measurements.json").read_text())
    edit(recs)
    f = tmp_path / "banded.json"
    f.write_text(json.dumps(recs))
    return f


def test_each_prediction_is_judged_against_its_band(tmp_path):
    plain = validate(H200, H200 / "measurements.json")
    row = plain.iloc[0]  # vgg16 64 baseline: predicted 47.7 ms, reserved 8.16 GiB
    pt, pr = row.predicted_ms, row.predicted_reserved_gib * GiB

    def edit(recs):
        r0, r1 = recs[0], recs[1]
        r0["iteration_ms_band"] = [pt * 0.98, pt * 1.02]  # inside
        r0["iteration_ms"] = pt
        r0["peak_reserved_bytes_band"] = [pr * 1.1, pr * 1.3]  # prediction 1/1.1 of its edge
        r0["peak_reserved_bytes"] = pr * 1.2
        m1 = r1["iteration_ms"]
        r1["iteration_ms_band"] = [m1 * 0.5, m1 * 0.6]  # far below the prediction
        r1["iteration_ms"] = m1 * 0.55

    df = validate(H200, _banded(tmp_path, edit))
    a, b = df.iloc[0], df.iloc[1]
    assert a.time_in_band is True and a.time_band_err == 0.0
    assert a.reserved_in_band is False and a.reserved_band_err == pytest.approx(1 / 1.1 - 1)
    assert a.reserved_band_min == pytest.approx(pr * 1.1 / GiB)
    assert b.time_in_band is False and b.time_band_err > 0.5 and b.reserved_in_band is None
    assert b.time_err == pytest.approx((b.predicted_ms - b.measured_ms) / b.measured_ms)
    s = summarize(df)
    assert s["bands"] == {"time": {"inside": 1, "n": 2}, "reserved": {"inside": 0, "n": 1}}
    text = format_validation(df).splitlines()
    assert text[0].endswith("band ms/resv")
    assert text[1].endswith(f"    in/{a.reserved_band_err:+.1%}")
    assert text[2].endswith(f"{b.time_band_err:+.1%}/-")
    assert text[3].endswith("     -/-")
    assert "iteration time: 1 of 2 predictions inside the band" in text[-3]
    assert "peak reserved: 0 of 1 predictions inside the band" in text[-2]


def test_records_without_bands_keep_their_table_and_summary():
    df = validate(H200, H200 / "measurements.json")
    s = summarize(df)
    assert "bands" not in s
    text = format_validation(df)
    assert "inside the band" not in text
    fitted = [x for x in text.splitlines()[1:] if "yes/" in x]
    assert fitted and all(x.endswith("     -/-") for x in fitted)
    assert df.time_band_min.isna().all()


def test_a_later_files_record_of_a_run_replaces_the_earlier_ones(tmp_path, capsys):
    """NOTE [measurement sets]: the committed single-process records, then a file that
    measured two of their runs again (one of them twice, both kept) and a run of another
    cap: the two runs are judged against the new records only, every other run as before,
    and the table says how many old records gave way."""
    old = json.loads((H200 / "measurements.json").read_text())
    first = validate(H200, H200 / "measurements.json")
    a, b = old[0], old[1]  # vgg16 64 baseline, vgg16 64 vdnn_conv (uncapped)
    assert (a["memory_cap_bytes"], b["memory_cap_bytes"]) == (None, None)
    capped = next(r for r in old if r["memory_cap_bytes"])
    again = [dict(a, iteration_ms=a["iteration_ms"] * 2),
             dict(b, iteration_ms=b["iteration_ms"] * 3),
             dict(b, iteration_ms=b["iteration_ms"] * 4),
             dict(capped, memory_cap_bytes=capped["memory_cap_bytes"] + GiB)]
    f = tmp_path / "again.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in again))
    df = validate(H200, [H200 / "measurements.json", f])
    assert len(df) == len(first) + 2  # a and b: 2 old records out, 3 in; one new cap
    assert df.attrs["replaced_records"] == 2 and summarize(df)["replaced_records"] == 2

    def times(frame, rec):
        return sorted(frame[(frame.model == "vgg16") & (frame.batch_size == 64)
                            & (frame.policy == rec["policy"]) & frame.cap_gib.isna()]
                      .measured_ms.round(3))
    assert times(df, a) == [round(a["iteration_ms"] * 2, 3)]
    assert times(df, b) == [round(b["iteration_ms"] * 3, 3), round(b["iteration_ms"] * 4, 3)]
    rest = df[~((df.model == "vgg16") & (df.batch_size == 64) & df.cap_gib.isna()
                & df.policy.isin([a["policy"], b["policy"]]))]
    assert len(rest) == len(first) - 2 + 1
    assert "replaced" not in format_validation(first)
    # the CLI: the trailing .json/.jsonl arguments are the measurement files, in order
    assert main(["validate", str(H200), str(H200 / "measurements.json"), str(f)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == ("judged against the newest measurements: 2 older records "
                                    "replaced by later files' records of the same runs")
    # the other order: the old file's records replace the new file's
    df2 = validate(H200, [f, H200 / "measurements.json"])
    assert df2.attrs["replaced_records"] == 3 and len(df2) == len(first) + 1


def test_validate_splits_traces_from_measurement_files(tmp_path):
    """The trailing arguments that hold records are the measurement files; a trace written
    as JSON (one object) before them stays a trace; the last argument is the measurements
    whatever its name, as before."""
    from vdnnsim.cli.data import split_measurements
    from vdnnsim.trace import load_trace
    from vdnnsim.trace.io import trace_to_dict
    trace = tmp_path / "vgg16_b64.json"
    trace.write_text(json.dumps(trace_to_dict(load_trace(H200 / "vgg16_b64.yaml"))))
    listed, lines = tmp_path / "a.json", tmp_path / "b.JSONL"
    listed.write_text(json.dumps(json.loads((H200 / "measurements.json").read_text())[:2]))
    lines.write_text("{}\n{}\n")
    t, m = str(trace), str(listed)
    assert split_measurements(["t", m]) == (["t"], [m])
    assert split_measurements(["t", "u.yaml", m, str(lines)]) == (["t", "u.yaml"],
                                                                  [m, str(lines)])
    assert split_measurements([t, m]) == ([t], [m])
    assert split_measurements([t, t.replace("b64", "b65"), m]) == ([t], [t.replace(
        "b64", "b65"), m])  # a file that is not there is left to the readers to name
    assert split_measurements(["t", "m.txt"]) == (["t"], ["m.txt"])  # the last, as before
    assert split_measurements([m, m]) == ([m], [m])
    assert main(["validate", t, m]) == 0


def test_which_records_measure_the_same_run(tmp_path, capsys):
    """NOTE [measurement sets]: a record at another precision, optimizer or allocator
    setting is another run; settings at their defaults and a model's source prefix do not
    make one; the same file twice is one line of error."""
    from vdnnsim.measured.validate import run_key
    a = {"model": "torchvision:vgg16", "batch_size": 64, "policy": "baseline"}
    assert run_key(a) == run_key({**a, "model": "vgg16", "dtype": "fp32", "optimizer": "sgd",
                                  "allocator_conf": {"expandable_segments": False}})
    for other in ({"dtype": "autocast-bf16"}, {"optimizer": "adamw"},
                  {"allocator_conf": {"expandable_segments": True}},
                  {"optimizer_offload": True}, {"memory_cap_bytes": GiB}, {"seq_len": 512},
                  {"batch_size": 32}, {"policy": "vdnn_all"}):
        assert run_key({**a, **other}) != run_key(a), other
    f = str(H200 / "measurements.json")
    assert main(["validate", str(H200), f, f]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "given twice as measurements" in err


def test_a_replayed_host_unlike_the_measured_one_is_said(tmp_path):
    """NOTE [host issue]: each run's measured host issue time beside the replay's; a run
    whose two differ by more than HOST_ISSUE_FACTOR either way gets a warning line, one
    within it none. The committed ConvNeXt-T (128) traces were such runs while their
    profile's count of stage 1's depthwise backward passes held the 1,056 kernels cuDNN
    ran on its own streams (NOTE [kernel counts]); counted on the compute stream, its
    baseline and vdnn_conv no longer warn, and vdnn_all's host is faster than measured."""
    from vdnnsim.measured.validate import HOST_ISSUE_FACTOR
    plain = validate(H200, H200 / "measurements.json")  # records without host times
    r0 = plain.iloc[0]  # vgg16 64 baseline: the replayed host issues the step in ~4 ms
    assert 2 < r0.predicted_host_ms < 10 and plain.measured_host_ms.isna().all()

    def edit(recs):
        recs[0]["host_issue_ms"] = r0.predicted_host_ms * (HOST_ISSUE_FACTOR + 0.5)
        recs[1]["host_issue_ms"] = plain.iloc[1].predicted_host_ms * (HOST_ISSUE_FACTOR - 0.5)
    df = validate(H200, _banded(tmp_path, edit))
    warned = [x for x in format_validation(df).splitlines() if "host issued" in x]
    assert len(warned) == 1 and warned[0].startswith("warning: vgg16 64 baseline: ")
    assert not [x for x in format_validation(plain).splitlines() if "host issued" in x]
    held = validate(ROOT / "traces" / "h200_torchvision_heldout",
                    ROOT / "traces" / "h200_torchvision_heldout" / "measurements.json")
    cnx = held[(held.model == "convnext_tiny") & (held.batch_size == 128) & held.cap_gib.isna()]
    assert len(cnx) == 3
    ratio = dict(zip(cnx.policy, cnx.predicted_host_ms / cnx.measured_host_ms))
    assert 1 / HOST_ISSUE_FACTOR < ratio["baseline"] < HOST_ISSUE_FACTOR
    assert 1 / HOST_ISSUE_FACTOR < ratio["vdnn_conv"] < HOST_ISSUE_FACTOR
    assert ratio["vdnn_all"] < 1 / HOST_ISSUE_FACTOR  # not explained (docs/validation.md)
    # counted as the profile first did, every launch, the replayed host is held back
    import yaml
    data = yaml.safe_load((ROOT / "traces" / "h200_torchvision_heldout" / "convnext_tiny_b128.yaml")
                          .read_text())
    dw = [x for x in data["layers"] if x["id"] in {f"features_1_{k}_block_0" for k in range(3)}]
    assert [x["kernels_bwd"] for x in dw] == [4, 4, 4]
    for x in dw:
        x["kernels_bwd"] = 1060
    old = tmp_path / "convnext_tiny_b128.yaml"
    old.write_text(yaml.safe_dump(data))
    before = validate(old, ROOT / "traces" / "h200_torchvision_heldout" / "measurements.json")
    before = before[before.cap_gib.isna()]
    assert len(before) == 3
    assert (before.predicted_host_ms > HOST_ISSUE_FACTOR * before.measured_host_ms).all()


def test_scale_host_replays_a_run_at_the_measuring_host_s_speed(capsys):
    """NOTE [host speed]: with --scale-host a run whose trace and record both carry the
    probe between timed steps replays with every host cost times their ratio; one without
    is replayed as profiled. The data: session 26's probe test (two H100 loans), a draw of
    one loan's traces against the other loan's records."""
    from vdnnsim.api import at_host_speed
    d = ROOT / "traces" / "h200_reserved_heldout" / "host_tests_h100" / "probe-h100"
    traces = [d / "machine2" / f"{m}_2.yaml" for m in ("efficientnet_b0_b32", "mobilenet_v2_b64",
                                                     "shufflenet_v2_x1_0_b64")]
    recs = d / "machine1" / "repeat.jsonl"
    plain = validate(traces, recs)
    scaled = validate(traces, recs, scale_host=True)
    g = resolve_gpu("h200")
    for m, row in zip(load_measurements(recs), scaled.itertuples()):
        t = load_trace(next(p for p in traces if p.name.startswith(row.model)))
        k = m["host_probe_between_ns"] / t.source.host_probe_between_ns
        assert row.host_scaled == pytest.approx(k) and k != pytest.approx(1, abs=0.01)
        st, sg = at_host_speed(t, g, k)
        assert row.predicted_ms == pytest.approx(run_trace(st, sg, "eager").iteration_time_s
                                                 * 1e3)
    assert plain.host_scaled.isna().all() and (plain.predicted_ms != scaled.predicted_ms).all()
    assert (scaled.measured_ms == plain.measured_ms).all()
    # a host k times slower issues a host-bound step about k times slower
    t = load_trace(traces[0])
    slow = run_trace(*at_host_speed(t, g, 2.0), "eager")
    same = run_trace(*at_host_speed(t, g, 1.0), "eager")
    assert same.iteration_time_ns == run_trace(t, g, "eager").iteration_time_ns
    assert slow.host_issue_time_ns == pytest.approx(2 * same.host_issue_time_ns, rel=0.02)
    with pytest.raises(ConfigError, match="positive number"):
        at_host_speed(t, g, 0)
    # traces without the probe between steps (traces/h200_torchvision) are replayed as profiled
    new = ROOT / "traces" / "h200_reserved_heldout" / "remeasure_queue" / "part1" / "repeat.jsonl"
    both = validate([H200, ROOT / "traces" / "h200_torchvision_heldout"], new, scale_host=True)
    assert both.host_scaled.isna().all()
    assert main(["validate", *map(str, traces), str(recs), "--scale-host"]) == 0
    assert "host costs scaled by the probes' ratio in 3 of 3 runs" in capsys.readouterr().out


def test_a_band_that_does_not_hold_its_median_is_refused(tmp_path, capsys):
    def edit(recs):
        recs[0]["iteration_ms_band"] = [1.0, 2.0]
    f = _banded(tmp_path, edit)
    rc = main(["validate", str(H200), str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "iteration_ms_band" in err and "[0]" in err


def test_the_plot_draws_bands_as_error_bars(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    from vdnnsim.report import plots

    def edit(recs):
        recs[0]["iteration_ms_band"] = [recs[0]["iteration_ms"] * 0.9,
                                        recs[0]["iteration_ms"] * 1.1]
    df = validate(H200, _banded(tmp_path, edit))
    fig = plots.validation_scatter(df)
    alloc_ax, time_ax = fig.axes
    bars = [c for c in time_ax.collections if isinstance(c, LineCollection)]
    (seg,) = [s for c in bars for s in c.get_segments() if len(s)]
    m = df.iloc[0].measured_ms
    assert seg[:, 0].min() == pytest.approx(m * 0.9) and seg[:, 0].max() == pytest.approx(m * 1.1)
    assert "measured band (fresh processes)" in time_ax.get_legend_handles_labels()[1]
    assert not [c for c in alloc_ax.collections if isinstance(c, LineCollection)]
    plt.close(fig)


# ------------------------------------------------------------ allocator settings

def test_allocator_settings_are_parsed_against_the_table():
    assert parse_pairs(["expandable_segments=true"]) == {"expandable_segments": True}
    got = parse_pairs(["max_split_size_mb:128,garbage_collection_threshold=0.8",
                       "roundup_power2_divisions=4"])
    assert got == {"max_split_size_mb": 128, "garbage_collection_threshold": 0.8,
                   "roundup_power2_divisions": 4}
    assert env_string(got) == ("max_split_size_mb:128,garbage_collection_threshold:0.8,"
                               "roundup_power2_divisions:4")
    assert env_string({"expandable_segments": True}) == "expandable_segments:True"
    for bad, words in ((["foo=1"], "unknown allocator setting 'foo'"),
                       (["expandable_segments=yes"], "must be true or false"),
                       (["max_split_size_mb=20"], "above 20"),
                       (["roundup_power2_divisions=3"], "power of two"),
                       (["garbage_collection_threshold=1"], "between 0 and 1"),
                       (["expandable_segments"], "use KEY=VALUE"),
                       (["expandable_segments=true", "expandable_segments=false"], "twice")):
        with pytest.raises(ConfigError, match=words):
            parse_pairs(bad)
    assert is_default({}) and is_default(None) and is_default({"expandable_segments": False})
    assert not is_default({"expandable_segments": True})


def test_the_environment_and_the_flag_must_not_disagree():
    env = {ENV: "expandable_segments:True"}
    assert effective({}, env) == {"expandable_segments": True}  # recorded, not ignored
    assert effective({"expandable_segments": True}, env) == {"expandable_segments": True}
    with pytest.raises(ConfigError, match="give them one way"):
        effective({"max_split_size_mb": 64}, env)
    with pytest.raises(ConfigError, match="unknown allocator setting 'backend'"):
        effective({}, {ENV: "backend:cudaMallocAsync"})
    assert effective({}, {}) == {}


def test_validate_refuses_allocator_settings_it_does_not_model(tmp_path, capsys):
    assert allocator_supported(None) and allocator_supported({})
    # replayed (NOTE [allocator settings])
    assert allocator_supported({"expandable_segments": True})
    assert not allocator_supported({"max_split_size_mb": 128})

    def edit(recs):
        recs[3]["allocator_conf"] = {"max_split_size_mb": 128}
        recs[0]["allocator_conf"] = {}
    rc = main(["validate", str(H200), str(_banded(tmp_path, edit))])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "vgg16 batch 128 baseline was measured with allocator settings " \
           "'max_split_size_mb:128', which the simulator does not model" in err

    def unknown(recs):
        recs[0]["allocator_conf"] = {"pinned_num_register_threads": 8}
    rc = main(["validate", str(H200), str(_banded(tmp_path, unknown))])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown allocator setting" in err and err.count("\n") == 1
    assert "banded.json: [0]: allocator_conf: " in err


# ------------------------------------------------------------ the command without a GPU

def _measure_process(*argv):
    """`python -m vdnnsim measure ARGV` in a fresh process with no GPU visible and no
    allocator settings in its environment."""
    e = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    e.pop(ENV, None)
    return subprocess.run([sys.executable, "-m", "vdnnsim", "measure", *argv], env=e,
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def _measure(monkeypatch, *argv, env=None):
    """`vdnnsim measure ARGV` in this process, with no allocator settings in the
    environment but ``env``'s (the command reads them from os.environ when it runs;
    monkeypatch puts the environment back)."""
    monkeypatch.delenv(ENV, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    return run_cli(["measure", *argv], cwd=ROOT)


# A fresh process with CUDA hidden, for the errors that come from finding no GPU: this
# process cannot hide one (CUDA reads CUDA_VISIBLE_DEVICES once, when it first starts, and
# hiding it then would hide it from every later test here), and on a GPU machine these
# commands would measure.
@pytest.mark.parametrize("argv,words", [
    (["--repeat", "3"], "vdnnsim measure needs a CUDA GPU (none is visible)"),
    (["--repeat", "3", "--allocator", "expandable_segments=true", "--memory-history",
      "h.pickle"], "needs a CUDA GPU"),
])
def test_measure_without_a_gpu_is_one_line(argv, words):
    p = _measure_process("--model", "torchvision:resnet18", "-b", "2", *argv)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and words in p.stderr, p.stderr


# These are refused before torch is imported, GPU or none: they run in this process.
@pytest.mark.parametrize("argv,words", [
    (["--allocator", "expandable_segments=maybe"], "expandable_segments must be true or false"),
    (["--allocator", "backend=cudaMallocAsync"], "unknown allocator setting 'backend'"),
    (["--warmup-processes", "0"], "--warmup-processes goes with --repeat N"),
    (["--repeat", "0"], "--repeat must be from 1 to 100"),
    (["--repeat", "3", "--warmup-processes", "11"], "--warmup-processes must be from 0 to 10"),
    (["--memory-history", "/nonexistent/dir/h.pickle"], "h.pickle"),
])
def test_measure_errors_are_one_line(monkeypatch, argv, words):
    p = _measure(monkeypatch, "--model", "torchvision:resnet18", "-b", "2", *argv)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and words in p.stderr, p.stderr


def test_an_allocator_setting_in_the_environment_that_disagrees_is_one_line(monkeypatch):
    p = _measure(monkeypatch, "--model", "torchvision:resnet18", "-b", "2", "--allocator",
                 "max_split_size_mb=64", env={ENV: "expandable_segments:True"})
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "give them one way" in p.stderr


# ------------------------------------------------------------ the GPU scripts start on a CPU

@pytest.mark.parametrize("script", ["collect.py", "diagnose.py", "hostbound.py"])
def test_the_experiments_gpu_scripts_print_their_help_on_a_cpu(script):
    path = ROOT / "experiments" / "validation" / script
    p = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0 and p.stderr == "" and p.stdout.startswith("usage: ")
    assert path.read_text().split('"""')[1].strip().splitlines()[0] in p.stdout
    q = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)
    assert q.returncode == 2 and "error: the following arguments are required" in q.stderr


def test_validate_says_where_the_measuring_host_was_not_the_profiling_one(tmp_path):
    """NOTE [host probe]: a trace keeps its profiling host's probe through its file; validate
    warns, one line a run, where a record's host was more than 10% faster or slower."""
    import yaml
    from vdnnsim.trace import load_trace
    from vdnnsim.trace.io import trace_to_dict
    from vdnnsim.measured.validate import format_validation, validate
    t = load_trace(H200 / "vgg16_b64.yaml")
    d = trace_to_dict(t)
    d["source"]["host_probe_ns"] = 6000.0
    (tmp_path / "tr").mkdir()
    (tmp_path / "tr" / "vgg16_b64.yaml").write_text(yaml.safe_dump(d))
    assert load_trace(tmp_path / "tr" / "vgg16_b64.yaml").source.host_probe_ns == 6000.0
    recs = [r for r in json.loads((H200 / "measurements.json").read_text())
            if r["model"] == "torchvision:vgg16" and r["batch_size"] == 64][:2]
    recs[0]["host_probe_ns"], recs[1]["host_probe_ns"] = 9000.0, 6300.0
    f = tmp_path / "m.json"
    f.write_text(json.dumps(recs))
    rows = validate(tmp_path / "tr", f)
    assert list(rows.host_ratio) == [1.5, 1.05]
    warned = [ln for ln in format_validation(rows).splitlines() if ln.startswith("warning")]
    assert len(warned) == 1 and "1.50x" in warned[0] and recs[0]["policy"] in warned[0]
    assert "probed before the model (the probes before the model, which hardly" in warned[0]
    # the probes after the timed steps, where trace and record both have them, come first
    d["source"]["host_probe_between_ns"] = 8000.0
    (tmp_path / "tr" / "vgg16_b64.yaml").write_text(yaml.safe_dump(d))
    assert load_trace(tmp_path / "tr" / "vgg16_b64.yaml").source.host_probe_between_ns == 8000.0
    recs[0]["host_probe_between_ns"], recs[1]["host_probe_between_ns"] = 8200.0, 10000.0
    f.write_text(json.dumps(recs))
    rows = validate(tmp_path / "tr", f)
    assert list(rows.host_ratio) == [1.025, 1.25]
    assert list(rows.host_probe) == ["after the steps"] * 2
    warned = [ln for ln in format_validation(rows).splitlines() if ln.startswith("warning")]
    assert len(warned) == 1 and "1.25x" in warned[0] and "probed after the steps:" in warned[0]
    # and a probe that is no speed is refused in a trace file
    d["source"]["host_probe_ns"] = -1
    with pytest.raises(Exception, match="host_probe_ns"):
        from vdnnsim.trace.io import trace_from_dict
        trace_from_dict(d, "bad")


def test_validate_replays_expandable_segments_where_they_were_measured(tmp_path):
    """A record measured with expandable segments is predicted with them
    (NOTE [allocator settings]): its reserved prediction is the expandable pool's, not the default's (its
    allocated bytes may differ a little: a block's unsplit tail counts as allocated,
    NOTE [caching allocator], and where blocks fall differs)."""
    from vdnnsim.measured.validate import validate

    def edit(recs):
        recs[0]["allocator_conf"] = {"expandable_segments": True}
    base = validate(H200, _banded(tmp_path, lambda recs: None))
    exp = validate(H200, _banded(tmp_path, edit))
    assert abs(exp.predicted_alloc_gib[0] / base.predicted_alloc_gib[0] - 1) < 0.005
    assert exp.predicted_reserved_gib[0] < base.predicted_reserved_gib[0]
    assert exp.predicted_reserved_gib[1:].equals(base.predicted_reserved_gib[1:])


def test_session_20s_runs_judged_against_their_fresh_processes(tmp_path):
    """traces/h200_reserved_heldout/host_speed: the first four runs of remeasure_runs_rest.txt
    (GPU-bound) are predicted within 1% in time and, but for ResNet-50 (256) vdnn_conv's
    reserved peak, within 1% in memory; the host-bound baselines measured beside them are
    predicted 18-26% low from traces/h200_backward_workspaces' traces and 10-30% high from traces profiled
    on the first machine itself (docs/validation.md, "How fast the host is")."""
    data = ROOT / "traces" / "h200_reserved_heldout" / "host_speed"
    loans = {d: [json.loads(ln) for ln in (data / d / "repeat.jsonl").read_text().splitlines()]
             for d in ("machine1", "machine2")}
    recs = loans["machine1"] + loans["machine2"]
    assert all(r["rc"] == 0 and r["repeat"]["processes"] == 3 for r in recs)
    queue = [ln for ln in (ROOT / "experiments" / "repeat_and_reserved" / "remeasure_runs_rest.txt").read_text().splitlines()
             if ln and not ln.startswith("#")]
    gpu_bound = [r for r in recs if r["run"] in queue]
    assert [r["run"] for r in gpu_bound] == queue[:4]
    f = tmp_path / "m.json"
    f.write_text(json.dumps(gpu_bound))
    bw = ROOT / "traces" / "h200_backward_workspaces"
    rows = validate([bw / "torchvision", bw / "torchvision_heldout"], f).set_index(["model", "batch_size",
                                                                 "policy"])
    assert rows.reserved_err.round(3).tolist() == [-0.018, 0.001, 0.098, 0.005]
    assert rows.time_err.round(3).tolist() == [0.002, -0.007, -0.004, -0.008]
    # the host-bound baselines: the old traces low, the traces profiled on the first loan high
    for d, old, new in (("machine1", [-0.198, -0.179], [0.304, 0.134]),
                        ("machine2", [-0.260, -0.203], [0.204, 0.102])):
        base = [r for r in loans[d] if r["policy"] == "baseline" and r["run"] not in queue]
        f.write_text(json.dumps(base))
        assert validate([bw / "torchvision", bw / "torchvision_heldout"], f).time_err.round(3).tolist() == old
        assert validate([data / "machine1"], f).time_err.round(3).tolist() == new


def test_processes_that_spread_more_than_fresh_processes_repeat_are_said_to():
    """NOTE [repeated measurement]: medians spread by more than 10% get a warning, saying
    host-bound where the host's issue time is most of the step (session 20: a lent
    machine's host changes speed between processes)."""
    procs = [_proc(25.0), _proc(28.0), _proc(35.0)]
    for p, host in zip(procs, (21.0, 25.0, 32.0)):
        p["host_issue_ms"] = host
    host_bound = aggregate(procs)
    (w,) = host_bound["warnings"]
    assert "spread by 36% (25.0 to 35.0 ms)" in w and "host-bound" in w
    gpu_bound = aggregate([_proc(100.0), _proc(112.0), _proc(101.0)])  # host: half the step
    (w,) = gpu_bound["warnings"]
    assert "spread by 12%" in w and "host-bound" not in w
    assert "warnings" not in aggregate([_proc(100.0), _proc(104.0), _proc(101.0)])


def test_host_bound_runs_spread_across_fresh_processes_on_every_loan():
    """Every committed fresh-process set (sessions 13 to 20): a host-bound run's processes
    spread by 24% (median), a GPU-bound run's by 0.5% (docs/validation.md, "How fast the
    host is")."""
    import statistics
    host, gpu = [], []
    sets = ("h200_backward_workspaces/middle", "h200_backward_workspaces/repeat", "h200_backward_workspaces/runtime_fix",
            "h200_backward_workspaces/smallest", "h200_reserved_heldout/set_b_part1", "h200_reserved_heldout/set_b_part2",
            "h200_reserved_heldout/host_speed/machine1", "h200_reserved_heldout/host_speed/machine2", "h200_fresh_processes")
    for f in (ROOT / "traces" / s / "repeat.jsonl" for s in sets):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r.get("fits") and "iteration_ms_band" in r and r.get("host_issue_ms"):
                (host if r["host_issue_ms"] >= 0.8 * r["iteration_ms"] else gpu).append(
                    r["iteration_ms_spread"])
    assert (len(host), len(gpu)) == (27, 48)
    assert statistics.median(host) == pytest.approx(0.243, abs=0.001)
    assert statistics.median(gpu) == pytest.approx(0.005, abs=0.001)
    assert sum(x > 0.10 for x in host) == 24 and sum(x > 0.10 for x in gpu) == 4


def test_the_probe_scaling_analysis_scales_a_trace_by_the_probes_ratio(tmp_path):
    """experiments/repeat_and_reserved/probe_scaling_check.py, written before its data: a process
    whose probe equals the trace's is predicted as profiled; one whose host probed 1.5x
    slower, slower (a host-bound step), by about the host's share; pairs without probes
    are left out."""
    import yaml
    src = ROOT / "traces" / "h200_reserved_heldout" / "host_speed" / "machine1" / "efficientnet_b0_b32.yaml"
    d = yaml.safe_load(src.read_text())
    d["source"]["host_probe_between_ns"] = 8000.0
    loan = tmp_path / "loan"
    loan.mkdir()
    (loan / "efficientnet_b0_b32_1.yaml").write_text(yaml.safe_dump(d))
    procs = [{"fits": True, "iteration_ms": 30.0, "host_probe_between_ns": 8000.0},
             {"fits": True, "iteration_ms": 30.0, "host_probe_between_ns": 12000.0},
             {"fits": True, "iteration_ms": 30.0}]  # no probe: left out
    (loan / "repeat.jsonl").write_text(json.dumps(
        {"model": "torchvision:efficientnet_b0", "batch_size": 32, "fits": True,
         "processes": procs}) + "\n")
    p = subprocess.run([sys.executable, str(ROOT / "experiments" / "repeat_and_reserved" / "probe_scaling_check.py"), str(loan)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    rows = [ln.split() for ln in p.stdout.splitlines()[1:3]]
    assert [r[1] for r in rows] == ["1.00", "1.50"]
    same, slow = [(float(r[3].rstrip("%")), float(r[4].rstrip("%"))) for r in rows]
    assert same[0] == same[1]  # K = 1: the scaled replay is the plain one
    assert slow[0] == same[0] and slow[1] > slow[0] + 30  # host-bound: about 1.5x
    assert "all: 2 pairs" in p.stdout
    q = subprocess.run([sys.executable, str(ROOT / "experiments" / "repeat_and_reserved" /
                                            "probe_scaling_check.py")],
                       capture_output=True, text=True, timeout=600)
    assert q.returncode == 2 and q.stderr.startswith("usage:")


def _queue_part_measured(srcs, part: slice) -> list[dict]:
    """The records of ``srcs`` are the runs of remeasure_runs_rest.txt's ``part``, in its
    order, each of three fresh processes that fitted."""
    queue = [ln for ln in (ROOT / "experiments" / "repeat_and_reserved" / "remeasure_runs_rest.txt").read_text().splitlines()
             if ln and not ln.startswith("#")]
    reps = [r for src in srcs for r in load_measurements(src)]
    assert [f"{r['model'].split(':')[1]}:{r['batch_size']}:{r['policy']}" for r in reps] \
        == queue[part]
    assert all(r["repeat"]["processes"] == 3 and r["fits"] for r in reps)
    return reps


def _summary_is(rows, want: dict[str, tuple[float, float]]) -> None:
    """Each metric's median and max |error| to a tenth of a percent; every fit right."""
    s = summarize(rows)
    for metric, (median, most) in want.items():
        assert s[metric]["median_abs"] == pytest.approx(median, abs=0.001), metric
        assert s[metric]["max_abs"] == pytest.approx(most, abs=0.001), metric
    assert rows.fit_right.all() and rows.predicted_fits.all()


def test_the_queue_s_next_runs_remeasured_in_session_25():
    """traces/h200_reserved_heldout/remeasure_queue (call1, call2): the next seven runs of
    remeasure_runs_rest.txt's queue (committed before any was measured), three fresh
    processes each after one discarded, GPU-bound (vDNN at the largest batch sizes):
    against traces/h200_torchvision and traces/h200_torchvision_heldout, allocated 0.1% / 2.1%, reserved 3.1% /
    7.3% (median / max |error|), step time 0.6% / 2.8% (0.4% before session 27's
    recount of ConvNeXt-T (128)'s commands on the compute stream, NOTE [kernel counts],
    moved its vdnn_conv run), every run fits as replayed."""
    import pandas as pd
    s25 = ROOT / "traces" / "h200_reserved_heldout" / "remeasure_queue"
    srcs = [s25 / "part1" / "repeat.jsonl", s25 / "part2" / "repeat.jsonl"]
    _queue_part_measured(srcs, slice(4, 11))
    rows = pd.concat([validate([H200, ROOT / "traces" / "h200_torchvision_heldout"], src)
                      for src in srcs], ignore_index=True)
    _summary_is(rows, {"peak_allocated": (0.001, 0.021), "peak_reserved": (0.031, 0.073),
                       "iteration_time": (0.006, 0.028)})


def test_the_queue_s_last_runs_remeasured_in_session_27():
    """traces/h200_reserved_heldout/launch_queue: the last fifteen runs of remeasure_runs_rest.txt,
    three fresh processes each after one discarded, every one fitting. VGG-16's three
    save_on_cpu runs are measured for comparison and not predicted (369, 707, 1,385 ms);
    the twelve others against traces/h200_torchvision and traces/h200_torchvision_heldout: allocated 0.0% / 0.3%,
    reserved 1.9% / 19.8% (RegNetY-800MF (128) baseline; its re-profiled trace: -9.0%),
    step time 0.6% / 3.5%."""
    src = ROOT / "traces" / "h200_reserved_heldout" / "launch_queue" / "queue" / "repeat.jsonl"
    reps = _queue_part_measured([src], slice(11, None))
    soc = [round(r["iteration_ms"]) for r in reps if r["policy"] == "save_on_cpu"]
    assert soc == [369, 707, 1385]
    rows = validate([H200, ROOT / "traces" / "h200_torchvision_heldout"], src)
    assert len(rows) == 12 and "save_on_cpu" not in set(rows.policy)
    _summary_is(rows, {"peak_allocated": (0.000, 0.003), "peak_reserved": (0.019, 0.198),
                       "iteration_time": (0.006, 0.035)})


def test_a_host_matched_replay_does_not_follow_a_vdnn_run_s_reserved_peak():
    """docs/validation.md, "What the host's speed explains": DenseNet-121 (32) vdnn_all's
    three fresh processes issued their steps in 165, 165 and 238 ms and reserved 2.70,
    2.85 and 2.83 GiB; replayed with the host matched to each (host_matched.py) the
    replay issues each step within 1% of it and reserves 2.59, 2.68 and 1.95 GiB: it
    follows the host's speed where the measurement does not."""
    sys.path.insert(0, str(ROOT / "experiments" / "repeat_and_reserved"))
    try:
        from host_matched import matched
    finally:
        sys.path.pop(0)
    recs = [m for f in (ROOT / "experiments" / "repeat_and_reserved" / "fresh_sets.txt")
            .read_text().split() for m in load_measurements(ROOT / f)
            if m["model"] == "torchvision:densenet121" and m["batch_size"] == 32
            and m["policy"] == "vdnn_all" and not m.get("memory_cap_bytes")]
    m = recs[-1]  # the newest record of the run, as validate judges it
    trace = load_trace(ROOT / "traces" / "h200_backward_workspaces" / "torchvision" / "densenet121_b32.yaml")
    g = resolve_gpu("h200")
    got = []
    for p in m["processes"]:
        _, r = matched(trace, g, "vdnn_all_p", p["host_issue_ms"], {})
        assert r.host_issue_time_ns / 1e6 == pytest.approx(p["host_issue_ms"], rel=0.01)
        got.append((round(p["peak_reserved_bytes"] / 2**30, 2),
                    round(r.peak_footprint_bytes / 2**30, 2)))
    assert got == [(2.70, 2.59), (2.85, 2.68), (2.83, 1.95)]
