"""The Python API: vdnnsim.simulate and RunResult's DataFrames."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

import vdnnsim
from vdnnsim.errors import ConfigError, UnknownNameError


def test_simulate_returns_summary_and_dataframes():
    r = vdnnsim.simulate("alexnet", batch_size=32, gpu="titanx_maxwell", policy="vdnn_all_p")
    s = r.summary()
    for key in ("network", "batch_size", "gpu", "policy", "fits", "peak_memory_bytes",
                "avg_memory_bytes", "iteration_time_s", "slowdown", "offloaded_bytes",
                "prefetched_bytes", "stall_time_s"):
        assert key in s
    assert (s["network"], s["batch_size"], s["gpu"], s["policy"]) == \
        ("alexnet", 32, "titanx_maxwell", "vdnn_all_p")
    tl, mem = r.timeline, r.memory
    assert isinstance(tl, pd.DataFrame) and isinstance(mem, pd.DataFrame)
    # NOTE [host]: the host's track shows where it waited for the paper's synchronisation
    assert set(tl.stream) == {"compute", "d2h", "h2d", "host"}
    assert set(tl[tl.stream == "host"].kind) == {"wait"}
    assert (tl.dur_ns >= 0).all()
    # ops on one stream never overlap
    for _, g in tl.groupby("stream"):
        g = g.sort_values("start_ns")
        assert (g.start_ns.values[1:] >= g.end_ns.values[:-1]).all()
    assert mem.allocated_bytes.max() == r.peak_memory_bytes
    assert tl[tl.stream == "d2h"].size_bytes.sum() == r.offloaded_bytes


def test_half_precision_halves_feature_maps():
    f32 = vdnnsim.simulate("vgg16", batch_size=16, policy="baseline_m")
    f16 = vdnnsim.simulate("vgg16", batch_size=16, policy="baseline_m", dtype="fp16")
    assert f16.peak_memory_bytes == pytest.approx(f32.peak_memory_bytes / 2, rel=0.01)


def test_gpu_overrides_and_capacity():
    slow = vdnnsim.simulate("vgg16", 64, "k40", "vdnn_all_p",
                            gpu_overrides={"link_bw_bytes_per_s": 1e9})
    fast = vdnnsim.simulate("vgg16", 64, "k40", "vdnn_all_p")
    assert slow.stall_time_ns > fast.stall_time_ns
    tiny = vdnnsim.simulate("vgg16", 64, "k40", "vdnn_all_p", memory_bytes=2 * 10**9)
    assert not tiny.fits and tiny.oom.layer


def test_library_errors_are_typed():
    with pytest.raises(UnknownNameError):
        vdnnsim.simulate("nonet")
    with pytest.raises(UnknownNameError):
        vdnnsim.simulate("vgg16", 8, "k41")
    with pytest.raises(ConfigError):
        vdnnsim.simulate("vgg16", 8, "k40", "baseline_p", dtype="fp8")


def test_lower_level_calls_check_their_argument_types():
    g = vdnnsim.gpu_preset("k40")
    trace = vdnnsim.build_trace("alexnet", 2, g)
    with pytest.raises(ConfigError, match="needs a vdnnsim.GPU"):
        vdnnsim.build_trace("alexnet", 2, "k40")
    with pytest.raises(ConfigError, match="needs a vdnnsim.Trace"):
        vdnnsim.run_trace("alexnet", g, "baseline_p")
    with pytest.raises(ConfigError, match="needs a vdnnsim.GPU"):
        vdnnsim.run_trace(trace, None, "baseline_p")
    with pytest.raises(TypeError):  # the oracle is always computed, never taken on trust
        vdnnsim.run_trace(trace, g, "baseline_p", None, None, 1)
    assert vdnnsim.run_trace(trace, g, "baseline_p").slowdown == 1.0


def test_a_null_config_key_takes_its_default():
    from vdnnsim.config import config_from_dict
    cfg = config_from_dict({"network": "alexnet", "batch_size": 2, "dtype": None, "gpu": None,
                            "policy": None, "policy_options": None, "memory_bytes": None})
    assert (cfg.dtype, cfg.policy_options, cfg.memory_bytes) == ("fp32", {}, None)
    assert cfg.gpu_name_and_overrides()[0] == "k40" and len(cfg.policy_list) == 6


@pytest.mark.parametrize("net, batch, cap", [("vgg16", 256, None), ("alexnet", 128, None),
                                             ("vgg16", 128, 6 * 2**30)])
def test_dyn_reusing_its_profiling_pass_reports_what_a_fresh_run_reports(net, batch, cap):
    g = vdnnsim.gpu_preset("k40")
    trace = vdnnsim.build_trace(net, batch, g)
    reused = vdnnsim.run_trace(trace, g, "vdnn_dyn", memory_bytes=cap, record=False)
    fresh = vdnnsim.run_trace(trace, g, "vdnn_dyn", memory_bytes=cap, record=True)
    assert reused.summary() == fresh.summary()
    assert reused.memory.equals(fresh.memory)
    assert reused.ops == () and reused.lifetimes == ()  # record=False: no timeline
    # the recorded pass it reports is the chosen plan's own, run afresh
    from dataclasses import replace

    from vdnnsim.engine import replay
    from vdnnsim.policies import get_policy, liveness
    fn, fixed = get_policy("vdnn_dyn")
    capacity = cap if cap is not None else g.memory_bytes
    plan = replace(fn(trace, g, capacity, dict(fixed)), profiled=None)
    again = replay(trace, g, plan, capacity, liveness(trace))
    assert fresh.ops == tuple(again.ops) and fresh.iteration_time_ns == again.end_ns


def test_a_trace_s_own_optimizer_is_the_default_of_a_run_of_it(tmp_path):
    """A trace written with --optimizer adamw runs with AdamW from a run config that names
    no optimizer; naming another one is refused as before."""
    from vdnnsim.api import run_config
    from vdnnsim.cli import main
    from vdnnsim.config import config_from_dict
    from vdnnsim.errors import ConfigError
    trace = tmp_path / "t.yaml"
    assert main(["trace", "alexnet", "-b", "4", "--optimizer", "adamw", "-o", str(trace)]) == 0
    plain = run_config(config_from_dict({"network": str(trace), "policy": "vdnn_all_m"}))
    said = run_config(config_from_dict({"network": str(trace), "policy": "vdnn_all_m",
                                        "optimizer": "adamw"}))
    assert plain[0].summary() == said[0].summary()
    with pytest.raises(ConfigError, match="replays with optimizer adamw only"):
        run_config(config_from_dict({"network": str(trace), "policy": "vdnn_all_m",
                                     "optimizer": "adam"}))


def test_plan_config_returns_a_frozen_report_that_vdnnsim_plan_prints(tmp_path, capsys):
    """The library plans (api.plan_config, one setup with run_config); report/plan.py
    formats the report; vdnnsim plan prints exactly that and writes the plan file."""
    import dataclasses

    from vdnnsim.api import LayerPlanReport, plan_config, run_config
    from vdnnsim.cli import main
    from vdnnsim.config import config_from_dict
    from vdnnsim.report.plan import format_plan
    data = {"network": "alexnet", "batch_size": 128, "gpu": "k40", "policy": "vdnn_dyn"}
    report = plan_config(config_from_dict(data), ".", 2**30, method="greedy")
    assert isinstance(report, LayerPlanReport) and report.fits
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.budget_bytes = 1  # type: ignore[misc]
    # the same setup as a run of the config: vdnn_dyn under the budget, the same result
    ref = dict(report.reference)["vdnn_dyn"]
    run = run_config(config_from_dict({**data, "memory_bytes": 2**30}), record=False)[0]
    assert ref.summary() == run.summary()
    out, notes = format_plan(report)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(data))
    plan = tmp_path / "p.yaml"
    assert main(["plan", str(cfg), "--budget", "1 GiB", "--method", "greedy", "-o",
                 str(plan)]) == 0
    printed = capsys.readouterr()
    assert printed.out == "\n".join(out) + "\n"
    assert printed.err.startswith("\n".join(notes + ["wrote "]).lstrip("\n"))
    assert yaml.safe_load(plan.read_text())["budget_bytes"] == 2**30


def test_plan_config_refuses_a_margin_that_is_not_a_share_of_the_budget():
    """NOTE [plan margin] through the library: a margin from 0 to below 1, else one
    ConfigError (the CLI's --margin checks its percentage itself)."""
    from vdnnsim.api import plan_config
    from vdnnsim.config import config_from_dict
    cfg = config_from_dict({"network": "vgg16", "batch_size": 8, "gpu": "k40",
                            "policies": ["baseline_p"]})
    for bad in (1.0, -0.1, float("nan"), "4%"):
        with pytest.raises(ConfigError, match="margin: a share of the budget"):
            plan_config(cfg, ".", 2**30, method="greedy", margin=bad)
    assert plan_config(cfg, ".", 2**30, method="greedy", margin=0.1).margin_bytes == \
        int(2**30 * 0.1)
