"""The host's speed in a replay (NOTE [host speed], NOTE [host band]): `vdnnsim calibrate
--host` (its file and its checks, the probe's timing mocked: nothing here hangs on this
machine's speed), --host-cal (the factor it gives, against which reference), and the band
of a host-bound step between a fast and a slow host."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from vdnnsim.api import resolve_gpu, run_config, run_trace
from vdnnsim.config import config_from_dict
from vdnnsim.hostcal import (FORMAT, HostCalibration, host_factor, op_model_probe,
                             read_host_calibration)
from vdnnsim.hostspeed import (FLAT, HOST_FAST, HOST_SLOW, at_host_speed, band_factors,
                               with_host_band)
from vdnnsim.trace import load_trace

from .conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
# host-bound on the h200 preset, profiled before the host probe was recorded
PROFILED = ROOT / "traces/h200_backward_workspaces/torchvision_heldout/shufflenet_v2_x1_0_b64.yaml"
# host-bound, profiled with the probes (between steps 8593.8 ns, before the model 9978.8)
PROBED = (ROOT / "traces/h200_reserved_heldout/host_tests_h100/probe-h100/machine1"
          / "efficientnet_b0_b32_1.yaml")
GPU_BOUND = ROOT / "traces/h200_backward_workspaces/resnet50_b64.yaml"
BAND = re.compile(r"^step ([\d.]+) ms \(host-bound: ([\d.]+)-([\d.]+) ms between a fast and "
                  r"a slow host\)$")


def write_cal(path: Path, between: float, before: float = 9000.0, **over) -> Path:
    """A host calibration file as `vdnnsim calibrate --host` writes one on a CUDA machine."""
    data = {"format": FORMAT, "version": 1, "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3",
            "machine": {"hostname": "h", "cpu": "x", "cpus": 16, "system": "Linux"},
            "torch": "2.11.0+cu130", "made": "2026-12-08T00:00:00+00:00",
            "host_probe_ns": before, "host_probe_between_ns": between,
            "host_probe_steps_ns": [between] * 3, **over}
    path.write_text(json.dumps(data))
    return path


def config(tmp_path: Path, trace: Path, policies=("eager",)) -> Path:
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"name": "t", "network": str(trace), "gpu": "h200",
                                   "policies": list(policies)}))
    return cfg


def one_line_error(proc, *words: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vdnnsim: error: "), proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


# -- vdnnsim calibrate --host --------------------------------------------------------------
PROBES = {"host_probe_ns": 8100.0, "host_probe_between_ns": 14605.5,
          "host_probe_steps_ns": [14600.0, 14605.5, 14700.0]}


@pytest.fixture
def probed(monkeypatch):
    """calibrate --host's probes, as a fixed answer (and the device it asked for)."""
    torch = pytest.importorskip("torch")
    import vdnnsim.gpu.measure.hostprobe as hostprobe
    asked = []

    def fake(device, between):
        asked.append((device, between))
        return dict(PROBES)
    monkeypatch.setattr(hostprobe, "probe_host", fake)
    return torch, asked


def test_calibrate_host_writes_its_probes_and_the_file_round_trips(tmp_path, probed,
                                                                   monkeypatch):
    torch, asked = probed
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    out = tmp_path / "host.json"
    r = run_cli(["calibrate", "--host", "-o", out])
    assert r.returncode == 0, r.stderr
    assert asked == [("cuda", 31)]
    data = json.loads(out.read_text())
    assert data["format"] == FORMAT and data["device"] == "cuda" and data["gpu"] == "NVIDIA H200"
    assert data["torch"] == torch.__version__ and data["made"][:4].isdigit()
    assert {"hostname", "cpu", "cpus"} <= set(data["machine"]) and "note" not in data
    assert {k: data[k] for k in PROBES} == PROBES
    cal = read_host_calibration(out)
    assert (cal.host_probe_ns, cal.host_probe_between_ns, cal.gpu) == (8100.0, 14605.5,
                                                                      "NVIDIA H200")
    # the op model's host, which its output holds the probe against
    k = 14605.5 / op_model_probe(resolve_gpu("h200"))
    assert f"times {k:.2f}" in r.stdout and r.stdout.rstrip().endswith(f"wrote {out}")


def test_without_cuda_the_file_says_it_gives_no_factor_and_host_cal_refuses_it(tmp_path, probed,
                                                                               monkeypatch):
    torch, asked = probed
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "cpu.json"
    r = run_cli(["calibrate", "--host", "-o", out])
    assert r.returncode == 0 and asked == [("cpu", 31)]
    assert "no CUDA" in r.stdout and "no host speed factor" in r.stdout
    data = json.loads(out.read_text())
    assert data["device"] == "cpu" and "no host speed factor" in data["note"]
    one_line_error(run_cli(["run", config(tmp_path, PROFILED), "--host-cal", out]),
                   str(out), "without CUDA")


def test_calibrate_host_takes_no_other_option_and_writes_nothing(tmp_path, probed):
    out = tmp_path / "x.json"
    for extra in (["--ops"], ["--cpu-step"], ["--dtype", "bf16"], ["--scale", "0.5"]):
        one_line_error(run_cli(["calibrate", "--host", *extra, "-o", out]), "--host")
    assert not out.exists() and probed[1] == []


def test_calibrate_host_interrupted_exits_130_and_leaves_no_file(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import vdnnsim.gpu.measure.hostprobe as hostprobe

    def interrupted(device, between):
        raise KeyboardInterrupt
    monkeypatch.setattr(hostprobe, "probe_host", interrupted)
    out = tmp_path / "host.json"
    r = run_cli(["calibrate", "--host", "-o", out])
    assert r.returncode == 130 and not out.exists()
    assert not list(tmp_path.iterdir())  # no temporary file either


# -- --host-cal: bad files -----------------------------------------------------------------
BAD = {"missing": None, "folder": "dir", "not json": "{not json",
       "a list": "[1, 2]", "another format": json.dumps({"format": "vdnnsim-op-calibration"}),
       "version": {"version": 2}, "negative probe": {"host_probe_between_ns": -1.0},
       "text probe": {"host_probe_ns": "fast"}, "boolean probe": {"host_probe_ns": True},
       "infinite probe": {"host_probe_between_ns": float("inf")}}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_host_calibration_is_one_line_naming_the_file(tmp_path, case):
    bad, what = tmp_path / "bad.json", BAD[case]
    if what == "dir":
        bad.mkdir()
    elif isinstance(what, str):
        bad.write_text(what)
    elif isinstance(what, dict):
        write_cal(bad, 9000.0, **what)
    one_line_error(run_cli(["run", config(tmp_path, PROFILED), "--host-cal", bad]), str(bad))


@pytest.mark.parametrize("argv", [["run", "CFG"], ["sweep", "CFG", "-o", "OUT.csv"],
                                  ["plan", "CFG", "--budget", "1 GiB", "-o", "OUT.yaml"],
                                  ["trace", "alexnet", "-b", "8", "-o", "OUT.yaml"]])
def test_every_command_refuses_a_missing_host_calibration_before_any_work(tmp_path, argv):
    cfg = config(tmp_path, PROFILED)
    argv = [str(cfg) if a == "CFG" else str(tmp_path / a) if a.startswith("OUT") else a
            for a in argv]
    one_line_error(run_cli([*argv, "--host-cal", tmp_path / "none.json"]), "none.json")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("OUT")]


# -- the factor and its reference -------------------------------------------------------------
def test_the_factor_is_this_hosts_probe_over_the_one_the_costs_were_measured_on(tmp_path):
    gpu = resolve_gpu("h200")
    cal = HostCalibration("c.json", "cuda", host_probe_ns=12000.0, host_probe_between_ns=17187.6)
    probed = load_trace(PROBED)
    k, line = host_factor(cal, probed, gpu)  # between steps, where the trace has it
    assert k == pytest.approx(2.0) and line.startswith("host costs times 2.00")
    before = replace(probed, source=replace(probed.source, host_probe_between_ns=None))
    k, line = host_factor(cal, before, gpu)  # else before the model
    assert k == pytest.approx(12000.0 / 9978.8) and "before a model" in line
    # an op-model trace: the op model's host, whose probe its fit keeps
    op = replace(before, source=replace(before.source, kind="synthesized", cost_model="aten-v1",
                                        host_probe_ns=None))
    ref = op_model_probe(gpu)
    assert ref == 9737.0  # the median probe of its host-only files' chains (test_opmodel: the fit)
    k, line = host_factor(cal, op, gpu)
    assert k == pytest.approx(17187.6 / ref) and "op model" in line
    assert op_model_probe(resolve_gpu("a100")) == ref  # timed by the H200's model's host
    assert op_model_probe(resolve_gpu("h100")) == 10678.8  # its own calibration's host
    # costs that carry no probe: not applied, and said
    for trace in (load_trace(PROFILED), replace(op, source=replace(op.source,
                                                                    cost_model="analytic-v1"))):
        k, line = host_factor(cal, trace, gpu)
        assert k is None and line.startswith("host calibration c.json not applied")


def test_a_calibrated_run_is_the_run_at_its_factor_and_says_so(tmp_path):
    gpu, trace = resolve_gpu("h200"), load_trace(PROBED)
    cal = write_cal(tmp_path / "c.json", 2 * 8593.8)
    [r] = run_config(config_from_dict({"network": str(PROBED), "gpu": "h200",
                                       "policy": "eager"}), host_cal=cal)
    at_k = run_trace(*at_host_speed(trace, gpu, 2.0), "eager")
    assert r.iteration_time_ns == at_k.iteration_time_ns > run_trace(trace, gpu,
                                                                     "eager").iteration_time_ns
    assert r.host_factor == pytest.approx(2.0) and r.host_band_ns is None
    assert [n for n in r.notes if n.startswith("host costs times 2.00")]
    s = r.summary()
    assert s["host_speed_factor"] == pytest.approx(2.0) and s["host_bound"] is True
    assert math.isnan(s["iteration_time_fast_host_s"])
    # the command line: the same, and the line once under the table
    out = run_cli(["run", config(tmp_path, PROBED, ("eager", "vdnn_all_p")), "--host-cal", cal])
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("host costs times 2.00") == 1 and "host-bound:" not in out.stdout
    js = json.loads(run_cli(["run", config(tmp_path, PROBED), "--host-cal", cal,
                             "--json"]).stdout)
    assert js[0]["host_speed_factor"] == pytest.approx(2.0)
    assert js[0]["iteration_time_s"] == pytest.approx(at_k.iteration_time_ns / 1e9)


def test_a_host_calibration_without_a_reference_gives_the_band_and_says_why(tmp_path):
    cal = write_cal(tmp_path / "c.json", 20000.0)
    [r] = run_config(config_from_dict({"network": str(PROFILED), "gpu": "h200",
                                       "policy": "eager"}), host_cal=cal)
    assert r.host_factor is None and r.host_band_ns is not None
    assert any(n.startswith(f"host calibration {cal} not applied") for n in r.notes)


# -- the band ---------------------------------------------------------------------------------
def test_the_band_factors_are_the_noise_datas_ends():
    """NOTE [host band]: HOST_FAST and HOST_SLOW are what experiments/host_costs/host_band.py
    --spread makes of the noise data (rounded outward), not numbers tuned to a check."""
    import contextlib
    import importlib.util
    import io
    spec = importlib.util.spec_from_file_location(
        "host_band", ROOT / "experiments/host_costs/host_band.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        mod.spread()
    m = re.search(r"rounded outward ([\d.]+), ([\d.]+);", out.getvalue())
    assert (float(m[1]), float(m[2])) == (HOST_FAST, HOST_SLOW)
    assert "48 processes of 7 runs" in out.getvalue()
    profiled, synthesized = load_trace(PROFILED), load_trace(ROOT / "docs/examples/tiny_trace.yaml")
    assert band_factors(profiled) == (HOST_FAST / HOST_SLOW, HOST_SLOW / HOST_FAST)
    assert band_factors(replace(synthesized, source=replace(synthesized.source,
                                                             kind="synthesized"))) == (HOST_FAST,
                                                                                       HOST_SLOW)


@pytest.mark.parametrize("trace, policy", [(PROFILED, "eager"), (PROFILED, "vdnn_all_p"),
                                           (PROBED, "eager")])
def test_the_band_brackets_the_one_number_and_is_the_two_replays(trace, policy):
    gpu, t = resolve_gpu("h200"), load_trace(trace)
    [r] = run_config(config_from_dict({"network": str(trace), "gpu": "h200", "policy": policy}))
    assert r.host_bound and r.host_factor is None
    lo, hi = r.host_band_ns
    assert lo <= r.iteration_time_ns <= hi and hi > FLAT * r.iteration_time_ns
    ends = sorted(run_trace(*at_host_speed(t, gpu, k), policy, record=False).iteration_time_ns
                  for k in band_factors(t))
    assert [lo, hi] == ends
    [note] = [n for n in r.notes if BAND.match(n)]
    step, a, b = map(float, BAND.match(note).groups())
    assert a <= step <= b
    s = r.summary()
    assert s["host_bound"] is True and math.isnan(s["host_speed_factor"])
    assert (s["iteration_time_fast_host_s"], s["iteration_time_slow_host_s"]) == (lo / 1e9,
                                                                                   hi / 1e9)
    assert s["iteration_time_s"] == r.iteration_time_ns / 1e9  # the one number kept


def test_a_step_that_is_not_host_bound_costs_no_replay_and_has_no_band():
    gpu, t = resolve_gpu("h200"), load_trace(GPU_BOUND)
    r = run_trace(t, gpu, "eager", record=False)
    assert not r.host_bound and r.host_issue_time_ns < 0.8 * r.iteration_time_ns

    def never(k):
        raise AssertionError("replayed a step that is not host-bound")
    assert with_host_band(r, t, never) == r
    s = r.summary()
    assert s["host_bound"] is False and math.isnan(s["iteration_time_fast_host_s"])
    # a Torch7 run's host waits for every layer: never host-bound, whatever its issue time
    torch7 = run_trace(load_trace(ROOT / "docs/examples/tiny_trace.yaml"), resolve_gpu("k40"),
                       "vdnn_all_p", record=False)
    assert not torch7.host_bound and torch7.summary()["host_bound"] is None


def test_a_band_that_does_not_move_or_runs_out_of_memory_says_so():
    gpu, t = resolve_gpu("h200"), load_trace(PROFILED)
    r = run_trace(t, gpu, "eager", record=False)
    same = with_host_band(r, t, lambda k: r)  # the host's issue time is spent waiting
    assert same.host_band_ns == (r.iteration_time_ns, r.iteration_time_ns)
    assert "but waits on the GPU" in same.notes[-1] and "host-bound:" not in same.notes[-1]
    oom = run_trace(t, gpu, "eager", memory_bytes=2**20, record=False)
    assert not oom.fits
    short = with_host_band(r, t, lambda k: oom if k > 1 else r)
    assert short.host_band_ns is None and "on a slow host the replay runs out of memory" in \
        short.notes[-1]


def test_sweep_rows_carry_the_band_or_the_factor(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({"name": "s", "base": {"network": str(PROBED), "gpu": "h200"},
                                     "sweep": {"policy": ["eager", "vdnn_all_p"]}}))
    out = tmp_path / "r.csv"
    r = run_cli(["sweep", study, "-o", out])
    assert r.returncode == 0, r.stderr
    import pandas as pd
    df = pd.read_csv(out)
    assert df.host_bound.all() and (df.iteration_time_fast_host_s <= df.iteration_time_s).all()
    assert (df.iteration_time_s <= df.iteration_time_slow_host_s).all()
    assert df.host_speed_factor.isna().all()
    shown = run_cli(["sweep", study]).stdout
    assert "2 run(s) host-bound" in shown
    cal = write_cal(tmp_path / "c.json", 2 * 8593.8)
    assert run_cli(["sweep", study, "-o", out, "--host-cal", cal]).returncode == 0
    df = pd.read_csv(out)
    assert (df.host_speed_factor.round(6) == 2.0).all()
    assert df.iteration_time_fast_host_s.isna().all()


def test_trace_host_cal_scales_the_host_costs_and_keeps_the_probes(tmp_path):
    cal = write_cal(tmp_path / "c.json", 2 * 8593.8, before=7000.0)
    out = tmp_path / "t.yaml"
    r = run_cli(["trace", PROBED, "-o", out, "--host-cal", cal])
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("note: host costs times 2.00")
    before, after = load_trace(PROBED), load_trace(out)
    assert [x.host_fwd_ns for x in after.layers] == [round(x.host_fwd_ns * 2.0)
                                                     for x in before.layers]
    assert after.host_step_ns == round(before.host_step_ns * 2.0)
    assert (after.source.host_probe_between_ns, after.source.host_probe_ns) == (2 * 8593.8,
                                                                                7000.0)
    assert "host costs times 2.00" in after.source.note
    # the same file again is this host: a factor of 1
    assert host_factor(read_host_calibration(cal), after, resolve_gpu("h200"))[0] == 1.0
    # a trace whose host costs carry no probe is refused, in one line
    one_line_error(run_cli(["trace", "alexnet", "-b", "8", "-o", tmp_path / "a.yaml",
                            "--host-cal", cal]), "not applied")
    assert not (tmp_path / "a.yaml").exists()


def test_plan_notes_the_planned_steps_band_or_the_calibration(tmp_path):
    """A layer plan (greedy) of a host-bound profiled trace: its replay's band, the planned
    run replayed at each end; with a calibration without a reference, the line and the band."""
    from vdnnsim.api import plan_config
    from vdnnsim.report.plan import format_plan
    cfg = config_from_dict({"network": str(PROFILED), "gpu": "h200", "policy": "eager"})
    report = plan_config(cfg, ".", int(1.2 * 2**30), method="greedy")
    assert report.fits
    [note] = report.host_notes
    m = re.match(r"^the planned step ([\d.]+) ms \(host-bound: ([\d.]+)-([\d.]+) ms", note)
    assert m and float(m[2]) <= float(m[1]) <= float(m[3])
    assert f"note: {note}" in format_plan(report)[1]
    cal = write_cal(tmp_path / "c.json", 20000.0)
    report = plan_config(cfg, ".", int(1.2 * 2**30), method="greedy", host_cal=cal)
    assert report.host_notes[0].startswith("host calibration") and len(report.host_notes) == 2


@pytest.mark.slow  # a meta-device trace of ResNet-18
def test_a_block_plans_band_replays_the_plan_it_reports(tmp_path):
    """The block planner's plan replayed as the policy vdnn_blocks runs it: at the
    calibrated host's speed the time the plan reports, and with no calibration its band."""
    pytest.importorskip("torch")
    trace = tmp_path / "r18.json"
    r = run_cli(["trace", "--model", "torchvision.models:resnet18", "--input", "image:3,64,64",
                 "-b", "8", "--gpu", "h200", "-o", trace])
    assert r.returncode == 0, r.stderr
    from vdnnsim.api import plan_config
    cfg = config_from_dict({"network": str(trace), "gpu": "h200", "policy": "eager"})
    report = plan_config(cfg, ".", int(0.14 * 2**30), method="blocks")
    assert report.fits and report.plan.iteration_time_ns
    [note] = report.host_notes
    m = re.match(r"^the planned step ([\d.]+) ms \(host-bound: ([\d.]+)-([\d.]+) ms", note)
    assert m and f"{report.plan.iteration_time_ns / 1e6:.1f}" == m[1]
    assert float(m[2]) <= float(m[1]) <= float(m[3])
    cal = write_cal(tmp_path / "c.json", 1.5 * op_model_probe(resolve_gpu("h200")))
    report = plan_config(cfg, ".", int(0.14 * 2**30), method="blocks", host_cal=cal)
    assert report.host_notes == (report.host_notes[0],)
    assert report.host_notes[0].startswith("host costs times 1.50")
