"""The ``planned`` policy: replay a plan file that ``vdnnsim plan`` wrote (NOTE [planner]
in planner.py, which searches for the plan and writes the file; this module reads it, so
that the policy table needs nothing of the planner).

A plan file (``format: vdnnsim-plan``) lists per layer its algorithm, its offloads and its
prefetch, the recomputed segments and the batch splits (NOTE [batch split]) that the plan
runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..hardware import GPU
from ..limits import short_repr
from ..split import split_trace
from ..trace.model import Trace
from ..yamlio import read_yaml
from .builtin import check_options, common_options
from .plan import Plan, liveness

FORMAT = "vdnnsim-plan"


def plan_from_file(path: str, trace: Trace, gpu: GPU) -> Plan:
    """A plan file for ``trace``: every layer named, in order (after its batch splits,
    NOTE [batch split]); algorithms and buffers that the trace has."""
    data = read_yaml(Path(path), ConfigError)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{path}: not a vdnnsim plan file (format: {FORMAT})")
    splits = data.get("split") or []
    if not isinstance(splits, list) or any(
            not isinstance(x, list) or len(x) != 3 or not all(isinstance(y, str) for y in x[:2])
            for x in splits):
        raise ConfigError(f"{path}: split must list [first, last, parts] triples, got "
                          f"{short_repr(splits)}")
    for first, last, parts in splits:
        try:
            trace = split_trace(trace, gpu, first, last, parts)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    rows = data.get("layers")
    ids = [x.id for x in trace.layers]
    if not isinstance(rows, list) or [r.get("id") if isinstance(r, dict) else None
                                      for r in rows] != ids:
        raise ConfigError(f"{path}: its layers are not the trace's ({trace.name}, "
                          f"{len(ids)} layers)")
    lv = liveness(trace)
    algos, offload, prefetch = [], [], []
    index = {x: i for i, x in enumerate(ids)}
    for layer, r in zip(trace.layers, rows):
        names = [a.name for a in layer.algos]
        if r.get("algo") not in names:
            raise ConfigError(f"{path}: layer {layer.id}: algorithm {short_repr(r.get('algo'))}"
                              f" is not one of the trace's ({', '.join(names)})")
        algos.append(names.index(r["algo"]))
        bufs = r.get("offload", [])
        if not isinstance(bufs, list) or any(b not in lv.size for b in bufs):
            raise ConfigError(f"{path}: layer {layer.id}: offload names a buffer the trace "
                              f"does not have: {short_repr(bufs)}")
        offload.append(tuple(bufs))
        p = r.get("prefetch")
        if p is not None and p not in index:
            raise ConfigError(f"{path}: layer {layer.id}: prefetch names no layer: "
                              f"{short_repr(p)}")
        prefetch.append(index[p] if p is not None else -1)
    sync = data.get("sync", True)
    if not isinstance(sync, bool):
        raise ConfigError(f"{path}: sync must be true or false")
    segs = data.get("recompute") or []
    if not isinstance(segs, list) or any(
            not isinstance(x, list) or len(x) != 2 or any(y not in index for y in x)
            or index[x[0]] > index[x[1]] for x in segs):
        raise ConfigError(f"{path}: recompute must list [first, last] layer pairs of the "
                          f"trace, got {short_repr(segs)}")
    recompute = tuple(sorted((index[a], index[b]) for a, b in segs))
    if any(recompute[k][0] <= recompute[k - 1][1] for k in range(1, len(recompute))):
        raise ConfigError(f"{path}: recompute segments overlap")
    return Plan("planned", "layer_wise", tuple(algos), tuple(offload), tuple(prefetch), sync,
                runtime=True, recompute=recompute, trace=trace if splits else None,
                split=tuple((a, b, k) for a, b, k in splits))


def planned(trace: Trace, gpu: GPU, capacity: int | None, options: dict[str, Any]) -> Plan:
    opts = dict(options)
    common_options("planned", opts, trace)
    path = opts.pop("file", None)
    check_options("planned", opts, {"file"})
    if not isinstance(path, str) or not path:
        raise ConfigError("policy planned: option file (a plan written by vdnnsim plan) is "
                          "required")
    return plan_from_file(path, trace, gpu)
