"""Study files: expansion of base, sweep, zip and runs; rows never sink the study."""

from __future__ import annotations

import pandas as pd
import pytest

from vdnnsim.errors import ConfigError
from vdnnsim.study import StudySpec, expand, load_study, run_study


def test_sweep_is_a_cartesian_product_over_zip_and_base():
    s = StudySpec(base={"gpu": "k40"}, sweep={"policy": ["a", "b"], "batch_size": [1, 2, 3]},
                  zip={"network": ["x", "y"], "dtype": ["fp32", "fp16"]})
    pts = expand(s)
    assert len(pts) == 2 * 2 * 3
    assert pts[0] == {"gpu": "k40", "network": "x", "dtype": "fp32", "policy": "a",
                      "batch_size": 1}
    assert {(p["network"], p["dtype"]) for p in pts} == {("x", "fp32"), ("y", "fp16")}


def test_runs_alone_and_after_a_grid():
    s = StudySpec(base={"gpu": "k40"}, runs=[{"network": "a"}, {"network": "b", "gpu": "h200"}])
    assert expand(s) == [{"gpu": "k40", "network": "a"}, {"gpu": "h200", "network": "b"}]
    s2 = StudySpec(sweep={"network": ["a"]}, runs=[{"network": "b"}])
    assert [p["network"] for p in expand(s2)] == ["a", "b"]


def test_null_means_not_set_as_in_a_run_config():
    s = StudySpec(base={"network": "alexnet", "batch_size": 4, "policy": "vdnn_dyn"},
                  sweep={"policy": [None, "eager"]}, runs=[{"batch_size": None}])
    assert [p["policy"] for p in expand(s)] == ["vdnn_dyn", "eager", "vdnn_dyn"]
    assert expand(s)[2]["batch_size"] == 4
    df = run_study(StudySpec(base={"network": "alexnet", "batch_size": 4},
                             sweep={"policy": [None]}))
    assert df["error"].isna().all() and list(df["policy"]) == ["baseline_p"]


@pytest.mark.parametrize("kw,match", [
    ({"sweep": {"colour": [1]}}, "unknown key"),
    ({"zip": {"network": ["a", "b"], "batch_size": [1]}}, "differ in length"),
    ({"sweep": {"network": []}}, "empty list"),
    ({"sweep": {"network": ["a"]}, "zip": {"network": ["b"]}}, "both sweep and zip"),
    ({"runs": [{"netwrk": "a"}]}, r"runs\[0\]\.netwrk"),
])
def test_bad_studies(kw, match):
    with pytest.raises(ValueError, match=match):
        StudySpec(**kw)


def test_a_failing_row_does_not_sink_the_study():
    s = StudySpec(base={"batch_size": 8, "gpu": "k40"},
                  sweep={"network": ["alexnet", "nonet"], "policy": ["vdnn_all_p"]})
    df = run_study(s)
    assert list(df.network) == ["alexnet", "nonet"]
    assert pd.isna(df.error.iloc[0]) and df.fits.iloc[0]
    assert "unknown network 'nonet'" in df.error.iloc[1]


def test_gpu_override_keys_and_capacity_are_sweepable():
    s = StudySpec(base={"network": "vgg16", "batch_size": 32, "gpu": "k40",
                        "policy": "vdnn_all_p"},
                  sweep={"link_bw_bytes_per_s": [1e9, 12.8e9],
                         "memory_bytes": ["2 GiB", "12 GiB"]})
    df = run_study(s)
    assert len(df) == 4
    slow, fast = df[df.link_bw_bytes_per_s == 1e9], df[df.link_bw_bytes_per_s == 12.8e9]
    assert (slow.stall_time_s.values > fast.stall_time_s.values).all()
    assert list(df.capacity_bytes.unique()) == [2 * 2**30, 12 * 2**30]
    assert not df[df.capacity_bytes == 2 * 2**30].fits.any()


def test_a_run_config_is_a_study_of_its_policies(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("network: alexnet\nbatch_size: 8\npolicies: [baseline_p, vdnn_dyn]\n")
    spec, base = load_study(p)
    df = run_study(spec, base)
    assert list(df.policy) == ["baseline_p", "vdnn_dyn"]


def test_study_file_errors_name_the_file(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("sweep: {network: [a, b]}\nzip: {batch_size: [1, 2], policy: [x]}\n")
    with pytest.raises(ConfigError, match="s.yaml: .*differ in length"):
        load_study(p)
