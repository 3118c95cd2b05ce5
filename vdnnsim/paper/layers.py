"""The paper's per-layer figures as checks of vdnnsim's model of the runtime: Fig. 5
(VGG-16 (256): per-layer feature maps, forward workspace and weights) and Fig. 6 (VGG-16
(64): per-layer forward and backward time, and the reuse distance of each layer's input)
against the zoo's network on the titanx_maxwell preset under the network-wide baseline
with the fastest algorithms (docs/reproduction.md, "The per-layer figures").

NOTE [paper layers]
The paper's "VGG-16" has sixteen CONV layers (groups of 2, 2, 4, 4, 4): VGG's model E, the
zoo's ``vgg19`` (the zoo's ``vgg16`` is model D). Its "OverFeat" is the accurate model of
Sermanet et al., the zoo's ``overfeat_accurate`` (the zoo's ``overfeat`` is
convnet-benchmarks' fast one). The paper studies run those two (``VGG16`` and ``OVERFEAT``
in claims.py). A paper layer's time is its conv's plus the in-place ReLU after it; the
reuse distance of X runs from the end of its forward pass to the start of its backward
pass. Memory in MiB. The figures' evidence: docs/reproduction.md, "The per-layer figures".
"""

from __future__ import annotations

import re
import sys

import pandas as pd

from ..errors import ConfigError
from ..units import MiB
from .cells import GPU, figure_values
from .claims import VGG16

GROUPS_PAPER = (2, 2, 4, 4, 4)


def _zoo_name(paper_layer: str, network: str = VGG16) -> str | None:
    """CONV_05 -> conv3_1; FC_01 -> fc6; None where ``network`` has no such layer."""
    m = re.fullmatch(r"(CONV|FC)_(\d+)", paper_layer)
    if m is None:
        return None
    kind, k = m.group(1), int(m.group(2))
    if kind == "FC":
        return f"fc{5 + k}"
    from ..network.zoo import _VGG_GROUPS, _VGG_GROUPS_E
    groups = _VGG_GROUPS_E if network == "vgg19" else _VGG_GROUPS
    for g, n in enumerate(GROUPS_PAPER, start=1):
        if k <= n:
            return f"conv{g}_{k}" if k <= groups[g - 1][1] else None
        k -= n
    return None


def _run(network: str, batch: int):
    from ..api import build_trace, resolve_gpu, run_trace
    gpu = resolve_gpu(GPU)
    trace = build_trace(network, batch, gpu)
    return trace, run_trace(trace, gpu, "baseline_p", memory_bytes=1 << 40)


def _per_layer(network: str, batch: int) -> pd.DataFrame:
    """vdnnsim's per-layer numbers of ``network`` at ``batch``."""
    trace, r = _run(network, batch)
    tl = r.timeline
    comp = tl[tl.stream == "compute"]
    fwd = comp[comp.kind == "fwd"].groupby("layer").agg(start=("start_ns", "min"),
                                                          end=("end_ns", "max"),
                                                          dur=("dur_ns", "sum"))
    bwd = comp[comp.kind == "bwd"].groupby("layer").agg(start=("start_ns", "min"),
                                                          dur=("dur_ns", "sum"))
    ids = [x.id for x in trace.layers]
    rows = []
    for i, layer in enumerate(trace.layers):
        if layer.kind not in ("conv", "fc"):
            continue
        nxt = trace.layers[i + 1] if i + 1 < len(trace.layers) else None
        relu = nxt.id if nxt is not None and nxt.kind == "relu" else None
        algo = next(a for a in layer.algos if a.name == r.algos[ids.index(layer.id)]) \
            if layer.algos else None
        x = sum(trace.tensors[t].size_bytes for t in layer.inputs)
        y = sum(trace.tensors[t].size_bytes for t in layer.outputs)
        f_ns = fwd.dur.get(layer.id, 0) + (fwd.dur.get(relu, 0) if relu else 0)
        b_ns = bwd.dur.get(layer.id, 0) + (bwd.dur.get(relu, 0) if relu else 0)
        rows.append({"layer": layer.id, "x_plus_y_mib": (x + y) / MiB,
                     "workspace_mib": (algo.fwd_workspace_bytes if algo else 0) / MiB,
                     "weights_mib": layer.weight_bytes / MiB,
                     "fwd_ms": f_ns / 1e6, "bwd_ms": b_ns / 1e6,
                     "conv_fwd_ms": fwd.dur.get(layer.id, 0) / 1e6,
                     "conv_bwd_ms": bwd.dur.get(layer.id, 0) / 1e6,
                     "reuse_ms": (bwd.start[layer.id] - fwd.end[layer.id]) / 1e6,
                     "algo": algo.name if algo else ""})
    return pd.DataFrame(rows).set_index("layer")


QUANTITIES = {  # paper quantity -> vdnnsim column
    "feature maps X+Y (fwd)": "x_plus_y_mib", "workspace (fwd)": "workspace_mib",
    "weights": "weights_mib", "forward latency": "fwd_ms", "backward latency": "bwd_ms",
    "reuse distance of X": "reuse_ms"}


def layer_checks(network: str = VGG16) -> pd.DataFrame:
    """One row per value of Figs. 5 and 6: paper layer, zoo layer, quantity, paper value,
    vdnnsim's, and the relative error (NaN where ``network`` has no such layer)."""
    if network not in ("vgg16", "vgg19"):
        raise ConfigError(f"the paper's per-layer figures show a VGG: vgg16 or vgg19, not "
                          f"{network!r}")
    vals = figure_values()
    vals = vals[vals.figure.isin(["Fig5", "Fig6"])]
    per = {5: _per_layer(network, 256), 6: _per_layer(network, 64)}
    rows = []
    for v in vals.itertuples():
        fig = int(v.figure[3:])
        paper_layer = v.network.split()[-1]
        zoo = _zoo_name(paper_layer, network)
        col = QUANTITIES[v.quantity]
        sim = float(per[fig].loc[zoo, col]) if zoo in per[fig].index else float("nan")
        rows.append({"figure": v.figure, "paper_layer": paper_layer, "zoo_layer": zoo or "-",
                     "quantity": v.quantity, "unit": "MiB" if v.unit == "MB" else v.unit,
                     "paper": float(v.value), "vdnnsim": sim,
                     "error": (sim - v.value) / v.value if v.value else float("nan"),
                     "algo": per[fig].loc[zoo, "algo"] if zoo in per[fig].index else ""})
    return pd.DataFrame(rows)


def layer_checks_markdown(df: pd.DataFrame) -> str:
    """Figs. 5 and 6 as one table per figure: a row per layer, the paper's and vdnnsim's
    values side by side, the error in percent."""
    out: list[str] = []
    for fig, part in df.groupby("figure", sort=False):
        qs = list(dict.fromkeys(part.quantity))
        out += ["", f"**{fig}** ({'VGG-16 (256), MiB' if fig == 'Fig5' else 'VGG-16 (64), ms'};"
                " paper / vdnnsim / error)", "",
                "| paper layer | zoo layer | " + " | ".join(qs) + " |",
                "|---|---|" + "---:|" * len(qs)]
        for layer, g in part.groupby("paper_layer", sort=False):
            cells = []
            for q in qs:
                r = g[g.quantity == q]
                if r.empty:
                    cells.append("")
                    continue
                r = r.iloc[0]
                sim = "-" if pd.isna(r.vdnnsim) else f"{r.vdnnsim:.1f}"
                err = "" if pd.isna(r.error) else f" / {100 * r.error:+.0f}%"
                cells.append(f"{r.paper:g} / {sim}{err}")
            out.append(f"| {layer} | {g.zoo_layer.iloc[0]} | " + " | ".join(cells) + " |")
        ok = part.dropna(subset=["error"])
        ok = ok[ok.paper.abs() >= 1]
        for q in qs:
            e = ok[ok.quantity == q].error.abs()
            if len(e):
                out.append(f"\n{q}: median |error| {100 * e.median():.0f}%, "
                           f"max {100 * e.max():.0f}% over {len(e)} matched layers")
    return "\n".join(out).lstrip()


def main(argv: list[str]) -> int:
    """``python -m vdnnsim.paper.layers [vgg19|vgg16]``: the table."""
    try:
        if len(argv) > 1:
            raise ConfigError("usage: python -m vdnnsim.paper.layers [vgg19|vgg16]")
        print(layer_checks_markdown(layer_checks(*argv)))
    except ConfigError as exc:
        print(f"vdnnsim: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
