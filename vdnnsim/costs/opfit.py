"""The op model's fit: its constants from ``vdnnsim calibrate --ops``'s files, classes
and host costs alike (the forms: NOTE [op model] in ops.py)."""

from __future__ import annotations

import statistics
from typing import Any

from .fitting import FOLDS, cross_validate, fit_bn, fit_error, fit_util, nonneg_rel_lstsq
from .kernel import bn_sizes
from .opforms import (ALIASES, CASE_FORM, CASE_OP, CNN_OPS, CNN_SHARED, CONV_CLIP, FORMAT,
                      GEMMS, MODEL, SDPA_OPS, bn_params, bn_time, conv_kind, conv_peak,
                      conv_phi, elem_bytes, gemm_phi, peak_for, sdpa_phi, util_time)


def _fit_batch_norm(recs, t, affine: dict[str, Any], np) -> tuple[dict[str, Any], list]:
    """A batch norm class's form by cross-validation, (class, its
    predictions)."""
    A = np.array([[1.0, f["bytes"]] for f, _ in recs])
    ps = [bn_params(f) for f, _ in recs]
    if len(recs) < 2 * FOLDS or any(p is None for p in ps):
        return affine, (A @ np.array([affine["a"], affine["s"]])).tolist()
    e = elem_bytes(recs[0][0]["dt"])

    def own(train, test):
        a, s_ = nonneg_rel_lstsq(A[train], t[train], np)
        return [abs((a + s_ * A[i, 1]) / t[i] - 1) for i in test]

    def reduction(train, test):
        c = fit_bn([bn_sizes(ps[i], e) for i in train], t[train], np)
        return [abs(bn_time(c, ps[i], e) / t[i] - 1) for i in test]

    cv = {"affine": round(cross_validate(len(recs), own), 4),
          "bn": round(cross_validate(len(recs), reduction), 4)}
    if cv["bn"] >= cv["affine"]:
        return dict(affine, cv=cv), (A @ np.array([affine["a"], affine["s"]])).tolist()
    c = fit_bn([bn_sizes(p, e) for p in ps], t, np)
    return dict(c, cv=cv, own=affine), [bn_time(c, p, e) for p in ps]


def _case_geometry(f: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """A batch-norm case's op features with the feature map its case record gives (files
    made before the probe recorded it)."""
    if f["op"] == "native_batch_norm" and "C" not in f and "batch" in r:
        return dict(f, N=r["batch"], C=r["c"], H=r["h"], W=r["h"])
    return f


def _fit_util(rows, t, np) -> dict[str, Any]:
    """NOTE [kernel model]'s utilization fit, with its sum scale."""
    c = fit_util(rows, t, np)
    pred = np.array([util_time(c, f, r) for f, r in rows])
    c["scale"] = float(t.sum() / pred.sum())
    return c


def _main_op(rec: dict[str, Any]) -> dict[str, Any] | None:
    """The recorded ATen op a case stands for."""
    want = CASE_OP.get(rec["op"], rec["op"])
    if rec["op"] == "sdpa":
        return next((o for o in rec["ops"] if o["op"] in SDPA_OPS), None)
    f = next((o for o in rec["ops"] if ALIASES.get(o["op"], o["op"]) == want), None)
    return dict(f, op=want) if f is not None else None


def fit(raws: list[dict[str, Any]], peaks: dict[str, float], bw: float, sms: int
        ) -> dict[str, Any]:
    """The model's constants from calibration files."""
    import numpy as np

    groups: dict[str, list[tuple[dict, float]]] = {}
    steps: dict[str, list[dict]] = {}
    for raw in raws:
        for r in raw["records"]:
            if r["op"] in CNN_SHARED:  # kept out of the transformer classes
                continue
            if r["op"].endswith("_step"):
                steps.setdefault(r["op"], []).append(r)
                continue
            f = _main_op(r)
            if f is None or r["time_ns"] <= 0:
                continue
            f = _case_geometry(f, r)
            if f["op"] in SDPA_OPS:
                kern = SDPA_OPS[f["op"]] + ("_mask" if f.get("mask") else "")
                key = f"sdpa:{kern}|{f['dt']}|{r['pass']}"
            elif f["op"] == "convolution":
                key = f"convolution:{conv_kind(f)}|{f['dt']}|{r['pass']}"
            else:  # (a GEMM's operands differ in size: no broadcast form, one class)
                form = "" if f["op"] in GEMMS else CASE_FORM.get(r["op"], f.get("form", ""))
                key = f"{f['op']}{'@' + form if form else ''}|{f['dt']}|{r['pass']}"
            groups.setdefault(key, []).append((f, r["time_ns"]))
    classes: dict[str, Any] = {}
    pooled: dict[str, list[tuple[dict, float]]] = {}
    for key, recs in sorted(groups.items()):
        op, dt, pass_ = key.split("|")
        t = np.array([x for _, x in recs])
        if op in GEMMS or op.startswith(("sdpa:", "convolution:")):
            peak = conv_peak(dt, peaks) if op.startswith("convolution:") else peak_for(dt, peaks)
            rows = [gemm_phi(f, pass_, sms, peak, bw) if op in GEMMS
                    else conv_phi(f, pass_, sms, peak, bw) if op.startswith("convolution:")
                    else sdpa_phi(f, pass_, peak, bw) for f, _ in recs]
            c = _fit_util(rows, t, np)
            if op.startswith("convolution:"):
                # a conv class's features barely vary in some directions (a depthwise conv's
                # arithmetic intensity, its last wave): a model's small conv is many sd away,
                # and its utilization must not be extrapolated from there
                c["clip"] = CONV_CLIP
                # and no faster than the fastest case of its class: below the grid a conv
                # is launch-bound, which the utilization form (no intercept) cannot say
                c["floor"] = float(t.min())
            pred = [max(util_time(c, phi, roof), c.get("floor", 0.0)) for phi, roof in rows]
        elif op == "embedding" and pass_ == "bwd":
            A = np.array([[1.0, f["o"], f["w"]] for f, _ in recs])
            a, s, u = nonneg_rel_lstsq(A, t, np)
            c = {"kind": "embedding", "a": a, "s": s, "u": u}
            pred = (A @ np.array([a, s, u])).tolist()
        else:
            A = np.array([[1.0, f["bytes"]] for f, _ in recs])
            a, s = nonneg_rel_lstsq(A, t, np)
            c = {"kind": "affine", "a": a, "s": s}
            pred = (A @ np.array([a, s])).tolist()
            if op != "embedding" and op.split("@")[0] not in CNN_OPS:
                pooled.setdefault(f"{dt}|{pass_}", []).extend(recs)
            if op.split("@")[0] == "native_batch_norm":
                c, pred = _fit_batch_norm(recs, t, c, np)
        c["fit_error"] = fit_error(pred, t, np)
        classes[key] = c
    for key, recs in pooled.items():  # the fallback of an op without cases: the median
        dt, pass_ = key.split("|")    # streaming class of its precision and pass
        own = [c for k, c in classes.items() if c["kind"] == "affine"
               and k.endswith(f"|{dt}|{pass_}") and "@" not in k
               and k.split("|")[0] not in CNN_OPS]
        if not own:  # (only broadcast forms calibrated: no median class to stand in)
            continue
        a = statistics.median(c["a"] for c in own)
        s = statistics.median(c["s"] for c in own)
        t = np.array([x for _, x in recs])
        pred = [a + s * f["bytes"] for f, _ in recs]
        classes[f"*|{key}"] = {"kind": "affine", "a": a, "s": s,
                               "fit_error": fit_error(pred, t, np)}
    for op, recs in steps.items():
        t = np.array([r["time_ns"] for r in recs])
        A = np.array([[1.0, r["params"] * 4.0, r["tensors"]] for r in recs])
        a, s, u = nonneg_rel_lstsq(A, t, np)
        ht = np.array([r["host_ns"] for r in recs])
        ha, _, hu = nonneg_rel_lstsq(A, ht, np)
        classes[f"{op}|fp32|step"] = {
            "kind": "step", "a": a, "s": s, "u": u, "host_a": ha, "host_u": hu,
            "fit_error": fit_error((A @ np.array([a, s, u])).tolist(), t, np)}
    host = _host(raws)
    raw0 = raws[0]
    return {"format": FORMAT, "model": MODEL, "gpu": raw0["gpu"]["name"], "sm_count": sms,
            "peaks": peaks, "mem_bw_bytes_per_s": bw, "software": raw0.get("software", {}),
            "numerics": {r["dtype"]: r.get("numerics", {}) for r in raws},
            "calibrations": [f"{r['dtype']}: {r.get('made', '')}, {len(r['records'])} "
                             "passes" for r in raws],
            "host": host, "host_probe_between_ns": _host_probe(raws), "classes": classes}


def _host_probe(raws: list[dict[str, Any]]) -> float | None:
    """The host probe beside the host chains (gpu/measure/hostprobe.py): the median over
    those of the host-only files (as ``_host`` takes them) that have it; None where none
    has it: the host the model's host costs were measured on, which a host calibration is
    held against (hostcal.py)."""
    only = [r for r in raws if r.get("host_only")] or raws
    probes = [c["host_probe_between_ns"] for r in only for c in r.get("host_chains", [])
              if isinstance(c.get("host_probe_between_ns"), (int, float))]
    return round(statistics.median(probes), 1) if probes else None


def _host(raws: list[dict[str, Any]]) -> dict[str, Any]:
    """The host's cost per op (by chain and precision: fp32, bf16, or
    ``autocast``) and per module call, the median over the host-only files' processes
    (the op calibration's own chains where there is no such file)."""
    only = [r for r in raws if r.get("host_only")]
    plain: dict[str, list[tuple[float, float]]] = {}
    mods: list[tuple[float, float]] = []
    for raw in only or raws:
        per_link = raw.get("pointwise_ops_per_link", 1)  # the first files' chain: 4
        by = {}
        for c in raw.get("host_chains", []):
            by[(c["chain"], c["modules"], _variant(c, raw["dtype"]), c.get("process", 0))] = c
        for (chain, modules, variant, proc), c in by.items():
            k = per_link if chain == "pointwise" else 1
            if not modules:
                plain.setdefault(f"{chain}:{variant}", []).append(
                    (c["host_fwd_ns"] / k, c["host_bwd_ns"]))
            elif (chain, False, variant, proc) in by and chain != "pointwise":
                p = by[(chain, False, variant, proc)]
                mods.append((c["host_fwd_ns"] - p["host_fwd_ns"],
                             c["host_bwd_ns"] - p["host_bwd_ns"]))
    med = statistics.median
    out: dict[str, Any] = {key: [med(x[0] for x in v), med(x[1] for x in v)]
                           for key, v in sorted(plain.items())}
    out["module"] = [max(0.0, med(x[0] for x in mods)), max(0.0, med(x[1] for x in mods))] \
        if mods else [0.0, 0.0]
    mix = _mix_factors(only or raws)
    if mix:
        out["mix"] = mix
    return out


def _variant(c: dict[str, Any], default: str) -> str:
    return "autocast" if c.get("autocast") else \
        {"float32": "fp32", "bfloat16": "bf16"}.get(c.get("dtype"), default)


def _mix_factors(raws: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per variant and family, the median over the mixed chains of
    their host time over what the same process's chains of one op give for their ops,
    forward and backward."""
    ratios: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for raw in raws:
        per_link = raw.get("pointwise_ops_per_link", 1)  # as _host divides it
        one = {}
        for c in raw.get("host_chains", []):
            if not c["modules"]:
                k = per_link if c["chain"] == "pointwise" else 1
                one[(c["chain"], _variant(c, raw["dtype"]), c.get("process", 0))] = \
                    (c["host_fwd_ns"] / k, c["host_bwd_ns"])
        for m in raw.get("host_mixes", []):
            v, proc = _variant(m, raw["dtype"]), m.get("process", 0)
            try:
                ef = sum(n * one[(k, v, proc)][0] for k, n in m["counts"].items())
                eb = sum(n * one[(k, v, proc)][1] for k, n in m["counts"].items())
            except KeyError:  # a kind without its chain in that process: no ratio
                continue
            if ef > 0 and eb > 0:
                ratios.setdefault((v, m["family"]), []).append(
                    (m["host_fwd_ns"] / ef, m["host_bwd_ns"] / eb))
    out: dict[str, dict[str, list[float]]] = {}
    for (v, fam), r in sorted(ratios.items()):
        out.setdefault(v, {})[fam] = [statistics.median(x[0] for x in r),
                                      statistics.median(x[1] for x in r), len(r)]
    return out
