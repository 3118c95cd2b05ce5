"""Plots from the CLI: real PNGs, and one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args):
    return subprocess.run([sys.executable, "-m", "vdnnsim", "plot", *map(str, args)],
                          capture_output=True, text=True)


@pytest.mark.parametrize("kind,inp,extra", [
    ("memory", ROOT / "configs" / "vgg16_b64.yaml", []),
    ("timeline", ROOT / "configs" / "alexnet.yaml", []),
    ("validation", ROOT / "traces" / "h200",
     ["--measurements", ROOT / "traces" / "h200" / "measurements.json"]),
])
def test_plot_writes_a_png(tmp_path, kind, inp, extra):
    out = tmp_path / f"{kind}.png"
    r = _run(kind, inp, "-o", out, *extra)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_sweep_plot_from_a_study(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("sweep:\n  network: [alexnet]\n  batch_size: [8, 64]\n"
                     "  policy: [baseline_p, vdnn_conv_p]\n")
    out = tmp_path / "s.svg"
    r = _run("sweep", study, "-o", out)
    assert r.returncode == 0, r.stderr
    assert out.read_text().lstrip().startswith("<?xml")


def test_sweep_plot_of_a_network_without_time(tmp_path):
    # a network of one flatten takes no time: its oracle is 0 and slowdown undefined (NaN,
    # an empty cell in the CSV); the plot draws what is defined, a garbage cell is an error
    (tmp_path / "n.yaml").write_text("name: n\ninput: [1, 4, 4]\nbatch_size: 2\n"
                                     "layers: [{name: f, type: flatten}]\n")
    study = tmp_path / "s.yaml"
    study.write_text("base: {network: n.yaml}\nsweep: {policy: [eager, vdnn_all_p]}\n")
    for inp in (study, tmp_path / "r.csv"):
        if inp.suffix == ".csv":
            r = subprocess.run([sys.executable, "-m", "vdnnsim", "sweep", study, "-o", inp],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        r = _run("sweep", inp, "-o", tmp_path / "p.png")
        assert r.returncode == 0, r.stderr
    rows = (tmp_path / "r.csv").read_text().splitlines()
    header = rows[0].split(",")
    cells = rows[1].split(",")
    cells[header.index("slowdown")] = "abc"
    (tmp_path / "bad.csv").write_text("\n".join([rows[0], ",".join(cells)]) + "\n")
    r = _run("sweep", tmp_path / "bad.csv", "-o", tmp_path / "q.png")
    assert r.returncode == 2 and "slowdown: expected a number, got 'abc'" in r.stderr


@pytest.mark.parametrize("args,match", [
    (["memory", ROOT / "configs" / "alexnet.yaml", "-o", "x.jpg"], "write .png, .pdf or .svg"),
    (["sweep", "nothere.csv", "-o", "x.png"], "no such file"),
    (["validation", ROOT / "traces" / "h200", "-o", "x.png"], "--measurements"),
])
def test_plot_errors(tmp_path, args, match):
    r = subprocess.run([sys.executable, "-m", "vdnnsim", "plot", *map(str, args)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and match in r.stderr and r.stderr.count("\n") == 1
    assert not list(tmp_path.iterdir())
