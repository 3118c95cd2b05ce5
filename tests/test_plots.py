"""Plots from the CLI: real PNGs, and one-line errors. The commands run in this process
(conftest.run_cli): what they print and write is ``main``'s, and a fresh interpreter for
each cost seconds of imports."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, cwd=None):
    return run_cli(["plot", *args], cwd=cwd)


@pytest.mark.parametrize("kind,inp,extra", [
    ("memory", ROOT / "configs" / "vgg16_b64.yaml", []),
    ("timeline", ROOT / "configs" / "alexnet.yaml", []),
    ("validation", ROOT / "traces" / "h200_torchvision",
     ["--measurements", ROOT / "traces" / "h200_torchvision" / "measurements.json"]),
])
def test_plot_writes_a_png(tmp_path, kind, inp, extra):
    out = tmp_path / f"{kind}.png"
    r = _run(kind, inp, "-o", out, *extra)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_validation_plot_of_measurement_sets(tmp_path):
    """NOTE [measurement sets] in the plot too: several trace folders, and measurement files
    oldest first (the committed single-process records, then a fresh-process set), whose
    newer records are the ones drawn with their bands."""
    from vdnnsim.report import plots
    traces = [ROOT / "traces" / "h200_torchvision", ROOT / "traces" / "h200_torchvision_heldout"]
    meas = [ROOT / "traces" / "h200_torchvision" / "measurements.json",
            ROOT / "traces" / "h200_reserved_heldout" / "launch_queue" / "queue" / "repeat.jsonl"]
    out = tmp_path / "v.png"
    drawn = []  # the table the command draws: both files' records, the newer winning
    real = plots.validation_scatter
    plots.validation_scatter = lambda t: drawn.append(t) or real(t)
    try:  # one run of the command for both what it writes and what it draws
        r = _run("validation", *traces, "--measurements", meas[0], "--measurements", meas[1],
                 "-o", out)
    finally:
        plots.validation_scatter = real
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = drawn[0]
    assert table.attrs["replaced_records"] > 0 and table.time_band_min.notna().sum() == 12
    assert set(table.model) > {"vgg16", "convnext_tiny"}  # both folders' runs
    fig = plots.validation_scatter(table)
    assert "measured band (fresh processes)" in [t for ax in fig.axes
                                                 if ax.get_legend() is not None
                                                 for t in _labels(ax)]


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
            r = run_cli(["sweep", study, "-o", inp])
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
    (["validation", ROOT / "traces" / "h200_torchvision", "-o", "x.png"], "--measurements"),
    (["memory", ROOT / "configs" / "alexnet.yaml", ROOT / "configs" / "vgg16_b64.yaml",
      "-o", "x.png"], "plot memory takes one input, not 2"),
])
def test_plot_errors(tmp_path, args, match):
    r = _run(*args, cwd=tmp_path)
    assert r.returncode == 2 and match in r.stderr and r.stderr.count("\n") == 1
    assert not list(tmp_path.iterdir())


# -- what the figures explain (NOTE [plot legibility]): legend entries, not pixels ------------

def _labels(ax):
    legend = ax.get_legend()
    assert legend is not None
    return [t.get_text() for t in legend.get_texts()]


def _sweep_frame():
    import pandas as pd
    rows = []
    for policy, peaks, slows in (("baseline_p", [5, 10, 20], [1.0, 1.0, 1.0]),
                                 ("vdnn_all_p", [3, 6, 12], [1.2, 1.2, 1.3]),
                                 ("vdnn_dyn", [3, 6, 12], [1.2, 1.2, 1.3])):  # = vdnn_all_p
        for b, peak, slow in zip([32, 64, 128], peaks, slows):
            rows.append({"network": "vgg16", "gpu": "k40", "policy": policy, "batch_size": b,
                         "peak_memory_bytes": peak * 1e9, "slowdown": slow,
                         "fits": peak < 12.88, "capacity_bytes": 12.88e9})
    return pd.DataFrame(rows)


def test_sweep_legend_explains_markers_capacity_and_coinciding_series():
    import matplotlib.pyplot as plt
    from vdnnsim.report import plots
    fig = plots.sweep_curves(_sweep_frame())
    top = fig.axes[0]
    labels = _labels(top)
    assert labels[:3] == ["baseline_p", "vdnn_all_p", "vdnn_dyn (same as vdnn_all_p)"]
    assert "fits" in labels and any(t.startswith("does not fit") for t in labels)
    assert "pool capacity 12.88 GB" in labels
    handles = top.get_legend().legend_handles
    hollow = handles[labels.index(next(t for t in labels if t.startswith("does not fit")))]
    assert hollow.get_markerfacecolor() == "white" and handles[3].get_markerfacecolor() != "white"
    # every policy its own marker and line style, so coinciding curves stay visible
    assert len({h.get_marker() for h in handles[:3]}) == 3
    assert len({str(h.get_linestyle()) for h in handles[:3]}) == 3
    dashed = [ln for ln in top.get_lines() if ln.get_linestyle() == "--" and ln.get_color() == "k"]
    assert len(dashed) == 1 and dashed[0].get_ydata()[0] == 12.88
    # the runs that do not fit are drawn hollow in both panels (baseline_p at 20 GB)
    for ax in fig.axes[:2]:
        assert any(ln.get_markerfacecolor() == "white" and len(ln.get_xdata()) == 1
                   for ln in ax.get_lines())
    plt.close(fig)


def test_timeline_has_a_colour_legend_and_says_which_runs_do_not_fit():
    import matplotlib.pyplot as plt
    import vdnnsim
    from vdnnsim.report import plots
    runs = [vdnnsim.simulate("alexnet", 16, "k40", "vdnn_all_p"),
            vdnnsim.simulate("alexnet", 16, "k40", "baseline_p", memory_bytes=100 * 2**20)]
    fig = plots.stream_timeline(runs)
    assert len(fig.legends) == 1
    entries = {t.get_text(): h.get_facecolor() for t, h in
               zip(fig.legends[0].get_texts(), fig.legends[0].legend_handles)}
    from matplotlib.colors import to_rgba
    assert set(entries) == {label for _, label in plots.TIMELINE_LEGEND}
    for key, label in plots.TIMELINE_LEGEND:
        assert entries[label] == to_rgba(plots.COLORS[key]), label
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert "DOES NOT FIT" not in titles[0] and "DOES NOT FIT: out of memory at" in titles[1]
    plt.close(fig)


def test_memory_legend_marks_runs_that_do_not_fit():
    import matplotlib.pyplot as plt
    import vdnnsim
    from vdnnsim.report import plots
    runs = [vdnnsim.simulate("alexnet", 16, "k40", p, memory_bytes=550 * 2**20)
            for p in ("baseline_p", "vdnn_all_m")]
    assert [r.fits for r in runs] == [False, True]
    labels = _labels(plots.memory_over_time(runs).axes[0])
    assert labels[0].startswith("baseline_p: does not fit") and labels[1] == "vdnn_all_m"
    assert labels[2] == "pool capacity 0.58 GB"
    plt.close("all")


def test_validation_scatter_marks_predicted_misfits():
    import matplotlib.pyplot as plt
    from vdnnsim.report import plots
    from vdnnsim.measured.validate import validate
    df = validate(ROOT / "traces" / "h200_torchvision", ROOT / "traces" / "h200_torchvision" / "measurements.json")
    fig = plots.validation_scatter(df)
    for ax in fig.axes:
        labels = _labels(ax)
        assert "predicted not to fit" in labels and "predicted = measured" in labels
    assert f"{int(df.measured_fits.sum())} of {len(df)}" in fig._suptitle.get_text()
    plt.close(fig)


def test_paper_figures_say_what_hatching_means():
    import matplotlib.pyplot as plt
    import pandas as pd
    from vdnnsim.report import figures
    rows = [{"gpu": "k40", "network": "vgg16", "batch_size": 256, "policy": p, "fits": fits,
             "peak_managed_bytes": 1e10, "avg_managed_bytes": 5e9, "slowdown": 1.3,
             "offloaded_bytes": 1e9}
            for p, fits in zip(figures.POLICY_ORDER, [False, False, True, True, True, True,
                                                      True])]
    df = pd.DataFrame(rows)
    for fig in (figures.memory_per_policy(df, "k40"), figures.normalized_performance(df, "k40")):
        labels = _labels(fig.axes[0])
        assert "hatched, faded: does not fit (what it would need)" in labels
        assert set(figures.POLICY_ORDER) <= set(labels)
        plt.close(fig)
    every_fit = df.assign(fits=True)
    fig = figures.offload_traffic(every_fit, "k40")
    assert not any(t.startswith("hatched") for t in _labels(fig.axes[0]))
    plt.close(fig)
