"""Sweeps: one tidy frame whatever runs it — in process, local processes, a Dask cluster."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

import vdnnsim
from vdnnsim.study import StudySpec, run_study

STUDY = {"name": "t", "base": {"gpu": "k40"},
         "sweep": {"network": ["alexnet", "vgg16"], "batch_size": [16, 64],
                   "policy": ["baseline_p", "vdnn_conv_p", "vdnn_dyn"]},
         "runs": [{"network": "nonet", "batch_size": 8, "policy": "vdnn_all_p"}]}


def _frame(**kw) -> pd.DataFrame:
    return run_study(StudySpec(**STUDY), ".", **kw)


def test_in_process_rows_and_failures():
    df = vdnnsim.sweep(STUDY)
    assert len(df) == 2 * 2 * 3 + 1
    assert list(df.columns[:4]) == ["network", "batch_size", "gpu", "policy"]
    assert df.error.iloc[:-1].isna().all()
    assert "unknown network" in df.error.iloc[-1]
    for key in ("fits", "peak_memory_bytes", "avg_memory_bytes", "iteration_time_s",
                "slowdown", "offloaded_bytes", "stall_time_s"):
        assert key in df.columns


def test_local_processes_give_identical_rows():
    pd.testing.assert_frame_equal(_frame(), _frame(workers=2))


def test_a_dask_local_cluster_gives_identical_rows():
    distributed = pytest.importorskip("distributed")
    saved = dict(os.environ)  # distributed's Nanny writes its pre-spawn environment
    try:  # (OMP_NUM_THREADS=1) into ours: put back, or later subprocesses run one thread
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as cluster:
            with distributed.Client(cluster) as client:
                got = _frame(scheduler=client)
            addr_got = _frame(scheduler=cluster.scheduler_address)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    want = _frame()
    pd.testing.assert_frame_equal(want, got)
    pd.testing.assert_frame_equal(want, addr_got)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_sweep_cli_writes_a_table(tmp_path, suffix):
    study = tmp_path / "s.yaml"
    study.write_text("sweep:\n  network: [alexnet]\n  batch_size: [8, 16]\n"
                     "  policy: [baseline_p, vdnn_all_m]\n")
    out = tmp_path / f"r{suffix}"
    r = subprocess.run([sys.executable, "-m", "vdnnsim", "sweep", str(study), "-o", str(out),
                        "--workers", "2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    assert len(df) == 4 and set(df.policy) == {"baseline_p", "vdnn_all_m"}


def test_sweep_cli_rejects_other_formats_without_writing(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("sweep:\n  network: [alexnet]\n")
    r = subprocess.run([sys.executable, "-m", "vdnnsim", "sweep", str(study), "-o",
                        str(tmp_path / "r.xlsx")], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "r.xlsx").exists()
