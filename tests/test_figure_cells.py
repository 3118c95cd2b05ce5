"""Every value of the paper's Figs. 11, 12, 14 and 15 held against vdnnsim
(NOTE [figure cells], NOTE [paper memory scope] in vdnnsim/paper/cells.py).

tests/golden/figure_cells.json records each cell: the paper's value, its tolerance,
vdnnsim's value and whether it holds. A cell that holds there must keep holding; every
value must stay at its recorded one unless a change means to move it (then
`python -m tests.golden.regen figure_cells`, and say in the commit which cells moved).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from vdnnsim.paper import reproduce
from vdnnsim.paper.cells import (figure_cells, figure_values, marker_check, paper_bytes,
                                 reproduction_json, tolerance)

GOLDEN = Path(__file__).parent / "golden" / "figure_cells.json"


@pytest.fixture(scope="module")
def frames():
    return reproduce()[1]


@pytest.fixture(scope="module")
def cells(frames):
    return figure_cells(frames)


def golden_violations(cells: pd.DataFrame, golden: dict) -> list[str]:
    """What a run of the cells breaks of the recorded ones: a cell missing or new, a
    paper value or tolerance changed, a holding cell that no longer holds."""
    out = []
    have = set(cells.cell)
    out += [f"{c}: missing" for c in sorted(set(golden) - have)]
    out += [f"{c}: not recorded" for c in sorted(have - set(golden))]
    for r in cells.itertuples():
        g = golden.get(r.cell)
        if g is None:
            continue
        if r.paper != g["paper"] or r.tolerance != pytest.approx(g["tolerance"]):
            out.append(f"{r.cell}: paper value or tolerance changed")
        if g["holds"] and not r.holds:
            out.append(f"{r.cell}: held, now {r.vdnnsim:.4g} against {r.paper:g} "
                       f"± {r.tolerance:.3g} (fits: {r.fits})")
    return out


def test_every_cell_of_the_four_figures_is_held(cells):
    vals = figure_values()
    assert len(cells) == len(vals[vals.figure.isin(["Fig11", "Fig12", "Fig14", "Fig15"])])
    assert cells.cell.is_unique and len(cells) == 192
    assert set(cells.scope) == {"managed", "weights+managed", "host", "offloaded", "time"}


def test_holding_cells_keep_holding(cells):
    golden = json.loads(GOLDEN.read_text())
    assert golden_violations(cells, golden) == []


def test_cells_match_golden_values(cells):
    golden = json.loads(GOLDEN.read_text())
    for r in cells.itertuples():
        assert r.vdnnsim == pytest.approx(golden[r.cell]["vdnnsim"], rel=1e-9, abs=1e-9), r.cell
        assert r.holds == golden[r.cell]["holds"], r.cell


@pytest.mark.parametrize("column,scale", [("peak_managed_bytes", 1.5),
                                          ("avg_managed_bytes", 0.5),
                                          ("iteration_time_s", 1.3)])
def test_the_golden_check_fails_when_a_holding_cell_moves(frames, column, scale):
    """The check can fail: a model that gave 50% more peak memory, half the average, or
    30% more time per iteration breaks holding cells."""
    golden = json.loads(GOLDEN.read_text())
    moved = {k: v.assign(**{column: v[column] * scale}) for k, v in frames.items()}
    bad = golden_violations(figure_cells(moved), golden)
    assert bad and all("held, now" in b for b in bad)


def test_a_fits_change_breaks_a_holding_cell(frames):
    golden = json.loads(GOLDEN.read_text())
    conv = frames["conventional_policies"]
    sel = (conv.network == "alexnet") & (conv.policy == "vdnn_all_m")
    moved = {**frames, "conventional_policies": conv.assign(fits=conv.fits & ~sel)}
    bad = golden_violations(figure_cells(moved), golden)
    assert any("AlexNet (128) all(m): max GPU memory" in b for b in bad)


def test_tolerances():
    assert tolerance("MB", 500) == 100 and tolerance("MB", 5000) == 500
    assert tolerance("x", 0.5) == tolerance("fraction", 0.9) == 0.05


def test_scope_counts_weights_once():
    r = pd.Series({"peak_managed_bytes": 100, "avg_managed_bytes": 50, "weight_bytes": 40})
    assert paper_bytes(r, "managed") == (100, 50)
    assert paper_bytes(r, "weights+managed") == (120, 70)


def test_the_papers_markers_follow_from_its_bars():
    """NOTE [paper memory scope]: each marker is 1 - average bar / base(p)'s average bar."""
    m = marker_check()
    assert len(m) == 42 and m.difference.abs().max() < 0.02


def test_json_has_the_counts_and_bytes(frames, cells):
    d = reproduction_json(reproduce(frames=frames)[0], cells)
    assert d["cells_total"] == 192 and d["cells_hold"] == int(cells.holds.sum())
    assert sum(f["hold"] for f in d["cells_per_figure"].values()) == d["cells_hold"]
    assert all({"paper_peak_bytes", "paper_avg_bytes", "scope"} <= set(c)
               for c in d["figure_cells"])


def test_per_layer_figures_match_the_papers_vgg_byte_for_byte():
    """NOTE [paper layers]: Fig. 5's feature maps of every conv of the paper's VGG-16 are
    vgg19's to the MiB (the reading's precision is 3 MiB); model D lacks three convs."""
    from vdnnsim.paper.layers import layer_checks
    df = layer_checks()
    fm = df[(df.quantity == "feature maps X+Y (fwd)") & df.paper_layer.str.startswith("CONV")]
    assert len(fm) == 16 and (fm.vdnnsim - fm.paper).abs().max() < 3
    d = layer_checks("vgg16")
    assert (d.zoo_layer == "-").sum() == 3 * 6  # CONV_08, _12, _16: 3 values in each figure


def test_per_layer_script_refuses_other_networks():
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "vdnnsim.paper.layers", "alexnet"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "vgg16 or vgg19" in p.stderr


def test_googlenets_conv_offload_is_every_buffer_a_conv_reads():
    """NOTE [conv offload at forks]: Fig. 12's 1361 MiB (read to +-32) under vDNN_conv is
    what every buffer a conv reads adds up to; the last-reader rule would give 912."""
    from vdnnsim.api import build_trace, resolve_gpu
    from vdnnsim.policies import liveness, offload_sets
    t = build_trace("googlenet", 128, resolve_gpu("titanx_maxwell"))
    lv = liveness(t)
    moved = sum(lv.size[b] for bufs in offload_sets(t, lv, conv_only=True) for b in bufs)
    assert abs(moved / 2**20 - 1361) < 32
    last = {lv.root[x] for layer in t.layers if layer.is_conv for x in layer.inputs
            if lv.fwd_last[lv.root[x]] == t.layer_index(layer.id)}
    assert abs(sum(lv.size[b] for b in last) / 2**20 - 912) < 2


@pytest.mark.parametrize("figure", ["Fig11", "Fig12", "Fig14", "Fig15"])
def test_the_papers_figures_drawn_with_vdnnsim_beside_every_bar(cells, figure):
    """NOTE [paper beside]: two bars per cell (the paper's, vdnnsim's), at the cells'
    values, and a red cross over exactly the cells that do not hold."""
    from vdnnsim.report import figures
    fig = figures.paper_beside(cells, figure)
    d = cells[cells.figure == figure]
    panels = [q for q, _ in figures.PAPER_PANELS[figure]]
    d = d[d.quantity.apply(lambda q: any(q.startswith(p) for p in panels))]
    heights = [round(b.get_height(), 6) for ax in fig.axes for c in ax.containers for b in c]
    assert len(heights) == 2 * len(d)
    pairs = sorted(zip(heights[0::2], heights[1::2]))  # the paper's bar, then vdnnsim's
    assert pairs == sorted((round(p, 6), round(v, 6)) for p, v in zip(d.paper, d.vdnnsim))
    crosses = sum(len(line.get_xdata()) for ax in fig.axes for line in ax.lines)
    assert crosses == int((~d.holds).sum())
    figures.plt.close(fig)
