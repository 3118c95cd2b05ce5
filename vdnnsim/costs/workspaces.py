"""cuDNN's convolution workspaces for op traces, from the op calibration's measured ones.

NOTE [conv workspaces]
A meta-device op trace cannot know cuDNN's workspaces; on the GPU (cudnn.benchmark) each
convolution pass allocates its algorithm's. Per class (dense 1x1, k x k, strided, grouped,
depthwise; 2-D or 3-D; channels-last; pass; fp32 or half) an op trace's convolution gets
``w * bytes`` (its input, weight and output bytes), ``w`` the median ratio of the class's
cases in the op calibration files that record workspaces; a class without cases takes
its class without channels-last, then its 2-D class, else none (counted as unknown).
`vdnnsim plan` plans with them, and where no plan fits, without them (cuDNN then picks
algorithms that need less: slower, not modelled), saying so. Fitted by
experiments/op_model/workspace_fit.py; checked in docs/cost-model.md.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from functools import lru_cache
from importlib import resources
from typing import Any, Callable, Iterable, TypeVar

from ..trace.model import Algo, Trace

FORMAT = "vdnnsim-conv-workspaces"
SHIPPED = "h100_conv_workspaces.json"  # the table in vdnnsim/data/calibration
R = TypeVar("R")


def conv_class(f: dict[str, Any], pass_: str) -> str:
    """A convolution's workspace class from its op features (``b`` groups, ``n`` outputs
    per group, ``c`` input channels, taps, stride, ``nd``, ``cl``) and pass."""
    g, taps = f.get("b", 1), f.get("kd", 1) * f.get("kh", 1) * f.get("kw", 1)
    if g > 1 and f.get("n") == 1 and g == f.get("c"):
        kind = "dw"
    elif g > 1:
        kind = "grouped"
    elif taps == 1:
        kind = "1x1"
    elif f.get("stride", 1) > 1:
        kind = "strided"
    else:
        kind = "kxk"
    dt = "fp32" if f.get("dt", "fp32") == "fp32" else "half"
    return (f"{kind}{'_3d' if f.get('nd') == 3 else ''}{'_cl' if f.get('cl') else ''}"
            f".{pass_}.{dt}")


def _fallbacks(cls: str) -> tuple[str, ...]:
    kind, pass_, dt = cls.split(".")
    flat = kind.replace("_cl", "")
    return tuple(dict.fromkeys((cls, f"{flat}.{pass_}.{dt}",
                                f"{flat.replace('_3d', '')}.{pass_}.{dt}")))


def fit_ratios(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per class, the median ratio of workspace to op bytes over the calibration records
    that have a workspace (``calibrate --ops``'s convolution cases), with its case count,
    how many used a workspace, and the 90th percentile."""
    by: dict[str, list[float]] = {}
    for r in records:
        if "workspace_bytes" not in r or len(r.get("ops", ())) != 1:
            continue
        f = r["ops"][0]
        if f.get("op") != "convolution" or not f.get("bytes"):
            continue
        by.setdefault(conv_class(f, r["pass"]), []).append(r["workspace_bytes"] / f["bytes"])
    out = {}
    for cls, v in sorted(by.items()):
        s = sorted(v)
        out[cls] = {"ratio": round(statistics.median(s), 4), "cases": len(s),
                    "with_workspace": sum(x > 0 for x in s),
                    "p90": round(s[min(len(s) - 1, int(0.9 * len(s)))], 4)}
    return out


@lru_cache(maxsize=1)
def shipped() -> dict[str, Any]:
    """The shipped table (its ``classes`` and where it came from)."""
    text = resources.files("vdnnsim.data.calibration").joinpath(SHIPPED).read_text()
    d = json.loads(text)
    if d.get("format") != FORMAT:
        raise ValueError(f"{SHIPPED}: not a {FORMAT} file")
    return d


def workspace_bytes(f: dict[str, Any], pass_: str,
                    classes: dict[str, dict[str, float]] | None = None) -> int | None:
    """A convolution's predicted workspace for ``pass_`` (``fwd`` or ``bwd``); None where
    no class of the table covers it."""
    classes = shipped()["classes"] if classes is None else classes
    for cls in _fallbacks(conv_class(f, pass_)):
        if cls in classes:
            return int(classes[cls]["ratio"] * f.get("bytes", 0))
    return None


MARK = ("workspaces", "predicted")  # the attrs entry of a convolution given them (its
# algorithm keeps its name, so a plan file made before still names it)


def is_conv_op(layer: Any) -> bool:
    """An op trace's convolution: its features name the ATen op."""
    op = layer.attrs.get("op") if layer.attrs else None
    return isinstance(op, dict) and op.get("op") == "convolution"


def _predicted(layer: Any) -> bool:
    return bool(layer.attrs) and layer.attrs.get(MARK[0]) == MARK[1]


def predict_into(d: dict[str, Any]) -> tuple[int, int]:
    """Give every convolution of a trace file's dict (an op trace with features) its
    predicted workspaces; (how many were given them, how many no class covers)."""
    given = unknown = 0
    for layer in d["layers"]:
        f = (layer.get("attrs") or {}).get("op")
        if not isinstance(f, dict) or f.get("op") != "convolution" or "algos" in layer:
            continue
        fw, bw = workspace_bytes(f, "fwd"), workspace_bytes(f, "bwd")
        if fw is None or bw is None:
            unknown += 1
            continue
        given += 1
        layer["algos"] = [{"name": "default", "fwd_ns": layer.pop("fwd_ns", 0),
                           "bwd_ns": layer.pop("bwd_ns", 0), "fwd_workspace_bytes": fw,
                           "bwd_workspace_bytes": bw}]
        layer["attrs"][MARK[0]] = MARK[1]
    return given, unknown


def note(given: int, unknown: int) -> str:
    """What a trace's note says of its convolutions' workspaces."""
    if not given and not unknown:
        return ""
    src = shipped()["source"]
    cudnn = str(src.get("software", {}).get("cudnn", "?"))
    if cudnn.isdigit():  # torch.backends.cudnn.version(): 91900 is 9.19.0
        cudnn = f"{int(cudnn) // 10000}.{int(cudnn) % 10000 // 100}"
    return (f"; {given} convolutions' workspaces predicted from cuDNN {cudnn}'s on an "
            f"{src['gpu'].removeprefix('NVIDIA ')}" + (f", {unknown} without one (no class)"
                                                        if unknown else ""))


def unknown_workspaces(trace: Trace) -> int:
    """How many convolutions of a synthesized op trace have no workspace, predicted or
    measured."""
    if trace.source.kind != "synthesized":
        return 0
    return sum(1 for x in trace.layers if x.kind == "convolution" and not _predicted(x)
               and not any(a.workspace_bytes for a in x.algos))


def with_workspaces(trace: Trace) -> tuple[Trace, int]:
    """A synthesized op trace made without predicted workspaces, given them (its
    algorithms' times unchanged); with how many convolutions were."""
    if not unknown_workspaces(trace):
        return trace, 0
    layers, given = [], 0
    for layer in trace.layers:
        fw = bw = None
        if is_conv_op(layer) and not _predicted(layer) \
                and not any(a.workspace_bytes for a in layer.algos):
            f = layer.attrs["op"]
            fw, bw = workspace_bytes(f, "fwd"), workspace_bytes(f, "bwd")
        if fw is None or bw is None:
            layers.append(layer)
            continue
        given += 1
        a = layer.algos[0]
        layers.append(replace(layer, algos=(replace(a, fwd_workspace_bytes=fw,
                                                    bwd_workspace_bytes=bw),),
                              attrs=dict(layer.attrs, **{MARK[0]: MARK[1]})))
    return (replace(trace, layers=tuple(layers)), given) if given else (trace, 0)


def without_workspaces(trace: Trace) -> Trace:
    """``trace`` with its predicted workspaces taken out (what cuDNN does where they do
    not fit: another algorithm, one that needs less)."""
    if not has_predicted(trace):
        return trace
    return replace(trace, layers=tuple(
        replace(x, algos=tuple(replace(a, fwd_workspace_bytes=0, bwd_workspace_bytes=0)
                               for a in x.algos)) if _predicted(x) else x
        for x in trace.layers))


def has_predicted(trace: Trace) -> bool:
    """Whether any convolution of ``trace`` holds a predicted workspace."""
    return any(_predicted(x) and x.algos[0].workspace_bytes for x in trace.layers)


FALLBACK = ("no plan fits with the convolutions' predicted workspaces; this one is planned "
            "without them: under the cap cuDNN will pick algorithms that need less, whose "
            "time the plan leaves out, and the caching allocator may free its cache and retry")


def planned(plan: Callable[[Trace], R], trace: Trace, fits: Callable[[R], bool]
            ) -> tuple[R, str | None]:
    """``plan`` of ``trace`` with its convolutions' predicted workspaces (given them where
    it was made without), or, where no plan fits with them, without them
    (NOTE [conv workspaces]); with what the plan's report should say of it."""
    trace, given = with_workspaces(trace)
    report = plan(trace)
    if not fits(report) and has_predicted(trace):
        lean = plan(without_workspaces(trace))
        if fits(lean):
            return lean, FALLBACK
    return report, (f"{given} convolutions were given their predicted workspaces (the "
                    "trace had none)" if given else None)
