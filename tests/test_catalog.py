"""The GPU catalog (vdnnsim/data/gpus.yaml, docs/hardware.md "GPU catalog"): every preset
is complete and cites its source, `vdnnsim list gpus` says how each is timed, and a GPU
given as a spec file works wherever a preset name does."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from vdnnsim.api import resolve_gpu
from vdnnsim.errors import ConfigError
from vdnnsim.hardware import PEAK_DTYPES, gpu_from_file, gpu_preset, preset_names, timing_of

from .conftest import run_cli
from .test_cli_errors import assert_user_error

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "rtx_a6000.yaml"


def _entry(name: str) -> dict:
    return yaml.safe_load((ROOT / "vdnnsim" / "data" / "gpus.yaml").read_text())[name]


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_is_complete_and_cites_its_source(name):
    g = gpu_preset(name)
    assert g.source.strip() and g.display_name.strip()
    assert g.memory_bytes > 0 and g.host_memory_bytes and g.host_memory_bytes > 0
    assert g.sm_count > 0 and g.mem_bw_bytes_per_s > 0 and g.launch_overhead_ns > 0
    assert g.link.h2d_bw_bytes_per_s > 0 and g.link.d2h_bw_bytes_per_s > 0
    assert set(g.peak_flops) <= set(PEAK_DTYPES) and all(f > 0 for f in g.peak_flops.values())
    fp32 = g.peak_flops["fp32"]
    assert g.peak_flops["fp16"] >= fp32 and g.peak_flops["bf16"] >= fp32
    assert g.peak_flops.get("tf32", fp32) >= fp32
    assert g.peak_flops.get("fp8", g.peak_flops["fp16"]) >= g.peak_flops["fp16"]


def test_the_catalog_holds_the_cards_people_train_on():
    assert {"v100_pcie", "a100_pcie_40gb", "a100_pcie_80gb", "a100_sxm_40gb", "a10g", "l4", "t4",
            "l40s", "rtx3090", "rtx4090", "h100_pcie", "h100_nvl", "b200",
            "gh200"} <= set(preset_names())
    # the datasheets' dense rates; GeForce tensor fp16 at the fp32-accumulate rate
    assert gpu_preset("rtx4090").peak_flops["fp16"] == 165.2e12
    assert gpu_preset("l40s").peak_flops["bf16"] == 362.05e12
    assert gpu_preset("gh200").link.h2d_bw_bytes_per_s == 450.0e9  # NVLink-C2C, per direction


def test_list_gpus_says_how_each_preset_is_timed_and_where_it_comes_from():
    out = run_cli(["list", "gpus"]).stdout
    for name in preset_names():
        g = gpu_preset(name)
        assert f"timing: {timing_of(g)}" in out and f"source: {g.source}" in out
        if not (g.op_calibration or g.calibration):
            assert timing_of(g).startswith(
                "spec rule, corrected by public kernel measurements" if g.spec_rule
                else "spec rule (datasheet numbers only)")
    assert timing_of(gpu_preset("h200")).startswith("calibrated op model and kernel model")
    assert "host: CPU optimizer step calibrated" in timing_of(gpu_preset("h100"))


def test_a_spec_file_is_the_preset_it_copies(tmp_path):
    """One preset's mapping (named by the file's stem) or one NAME: entry of gpus.yaml."""
    (tmp_path / "my_l4.yaml").write_text(yaml.safe_dump(_entry("l4")))
    assert resolve_gpu(str(tmp_path / "my_l4.yaml")) == replace(gpu_preset("l4"), name="my_l4")
    (tmp_path / "entry.yaml").write_text(yaml.safe_dump({"card": _entry("h200")}))
    got = gpu_from_file(tmp_path / "entry.yaml")
    assert got.name == "card" and got.op_calibration == gpu_preset("h200").op_calibration
    assert timing_of(got) == timing_of(gpu_preset("h200"))
    # overrides as on a preset; a relative path from the config's folder first
    sub = tmp_path / "sub"
    sub.mkdir()
    g = resolve_gpu("../my_l4.yaml", {"memory_bytes": "12 GiB"}, base_dir=sub)
    assert g.memory_bytes == 12 * 2**30 and g.peak_flops == gpu_preset("l4").peak_flops
    assert gpu_from_file(EXAMPLE).name == "rtx_a6000"


def test_a_spec_file_works_in_trace_run_plan_and_sweep(tmp_path):
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "a6000.yaml").write_text(EXAMPLE.read_text())
    r = run_cli(["trace", "alexnet", "-b", "32", "--gpu", "gpus/a6000.yaml", "-o", "t.yaml"],
                cwd=tmp_path)
    assert r.returncode == 0 and "timed for a6000" in r.stdout, r.stderr
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "run.yaml").write_text(
        "network: alexnet\nbatch_size: 32\ngpu: {preset: ../gpus/a6000.yaml, memory_bytes: 1 GiB}"
        "\npolicy: vdnn_dyn\n")
    r = run_cli(["run", "cfg/run.yaml"], cwd=tmp_path)
    assert r.returncode == 0 and "on a6000: pool 1.07 GB" in r.stdout, r.stderr
    r = run_cli(["plan", "cfg/run.yaml", "--budget", "1 GiB"], cwd=tmp_path)
    assert r.returncode == 0 and "on a6000" in r.stdout, r.stderr
    (tmp_path / "cfg" / "study.yaml").write_text(
        "base: {network: alexnet, batch_size: 32, policy: baseline_p}\n"
        "sweep: {gpu: [l4, ../gpus/a6000.yaml]}\n")
    r = run_cli(["sweep", "cfg/study.yaml", "--no-progress", "-o", "s.csv"], cwd=tmp_path)
    assert r.returncode == 0 and "2 fit, 0 failed" in r.stderr + r.stdout, r.stderr
    assert ",a6000," in (tmp_path / "s.csv").read_text()


@pytest.mark.parametrize("text,fragments", [
    (None, ("missing.yaml: no such file",)),
    ("display_name: x\n", ("bad.yaml: memory_bytes: required key is missing",)),
    ("fp32: 0", ("bad.yaml: peak_flops: fp32 must be in (0, 1e18]",)),
    ("fp32: 38.7e12, fp4: 1.0e15", ("bad.yaml: peak_flops: unknown dtype 'fp4'",)),
    ("network: alexnet\n", ("bad.yaml: this is a run config, not a GPU spec",)),
    ("op_calibration: nowhere.json\n", ("bad.yaml: op_calibration: no such file 'nowhere.json'",)),
])
def test_a_bad_spec_file_is_one_line_and_exit_2(tmp_path, text, fragments):
    name = "missing.yaml" if text is None else "bad.yaml"
    if text is not None:
        base = EXAMPLE.read_text()
        if text.startswith("fp32"):  # an edit of the example's peaks
            base = base.replace("fp32: 38.7e12", text)
        elif text.startswith("op_calibration"):
            base += text
        else:
            base = text
        (tmp_path / name).write_text(base)
    assert_user_error(run_cli(["trace", "alexnet", "-b", "8", "--gpu", name, "-o", "t.yaml"],
                              cwd=tmp_path), *fragments)
    assert not (tmp_path / "t.yaml").exists()
    with pytest.raises(ConfigError):
        resolve_gpu(str(tmp_path / name))
