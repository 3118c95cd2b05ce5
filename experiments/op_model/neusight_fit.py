"""The op spec rule corrected per card (NOTE [op spec rule fit]): two numbers per card,
fitted on the train half of NeuSight's per-kernel timings and checked on the test half
(``traces/neusight_kernels/``; the split and the form, fixed before the test half was
looked at: NEUSIGHT_SPLIT.md).

- ``compute_scale`` (times every peak the rule takes) is fitted on the train half's records
  that are compute-bound at the datasheet specs; ``bandwidth_scale`` (times the bandwidth)
  on the memory-bound ones given it, where there are at least ``MIN_MEMORY`` of them, else
  1; then ``compute_scale`` again given it. Each fit: robust least squares (``soft_l1``,
  scale 0.1) on ``log(predicted / measured)``, each op class weighted equally, records
  measured at least 0.5 ms only.
- The A100's convolutions against the fp32 peak (NeuSight ran them with TF32 off); every
  other record by the rule as vdnnsim times the card's preset (P4: its datasheet specs).
- Shipped (``spec_rule:`` in gpus.yaml) where, on the test half's records of at least 0.5
  ms, no class's median |error| rises by more than 1 point and one falls by 2 or more.

    python experiments/op_model/neusight_fit.py          (its output: neusight_fit.txt)
    python experiments/op_model/neusight_fit.py --summary  (docs/cost-model.md quotes it)
    python experiments/op_model/neusight_fit.py --check  (gpus.yaml's numbers are the fit's)
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # this checkout's vdnnsim (experiments/README.md)
sys.path.insert(0, str(HERE))
import neusight_kernels as nk  # noqa: E402

# NeuSight's card -> the vdnnsim preset it is (None: no preset, timed from nk.SPECS)
PRESETS = {"h100_sxm": "h100", "a100_pcie_80g": "a100_pcie_80gb",
           "a100_pcie_40g": "a100_pcie_40gb", "l4": "l4", "v100_pcie": "v100_pcie",
           "p100_pcie": "p100", "t4": "t4", "p4": None}
CLASSES = ("linear", "bmm", "conv2d")
MIN_MS = 0.5  # the fit's and the claims' records: measured at least this long
MIN_MEMORY = 50  # memory-bound train records it takes to fit the bandwidth
LOSS_SCALE = 0.1  # soft_l1's scale, on log(predicted / measured)
ROUND = 3  # decimals of the shipped numbers


def base_gpu(card: str):
    """The GPU a card is timed as, without any correction."""
    from vdnnsim.hardware import gpu_preset
    preset = PRESETS[card]
    if preset is None:
        name = next(n for n, (k, _, _) in nk.CARDS.items() if k == card)
        return nk.gpu_for(name)
    return dataclasses.replace(gpu_preset(preset), spec_rule=None)


def model(card: str, c: float = 1.0, b: float = 1.0):
    """(the rule's op model, its fp32-math twin for NeuSight's convolutions) of ``card``
    corrected by compute ``c`` and bandwidth ``b`` (1, 1: the uncorrected rule)."""
    from vdnnsim.costs.ops import predict_for
    from vdnnsim.hardware import SpecRuleFit
    g = base_gpu(card)
    if (c, b) != (1.0, 1.0):
        g = dataclasses.replace(g, spec_rule=SpecRuleFit(c, b, 1))
    m = predict_for(g)
    return m, dataclasses.replace(m, peaks=dict(m.peaks, tf32=m.peaks["fp32"]))


def log_errors(card: str, recs: list, c: float = 1.0, b: float = 1.0) -> np.ndarray:
    m, m32 = model(card, c, b)
    return np.array([math.log((m32 if cls == "conv2d" else m).time_ns(f, "fwd")[0] / ns)
                     for cls, f, ns in recs])


def memory_bound(card: str, f: dict) -> bool:
    """Bytes over the datasheet bandwidth above FLOPs over the fp32 peak."""
    g = base_gpu(card)
    return f["bytes"] / g.mem_bw_bytes_per_s > \
        2.0 * f["b"] * f["m"] * f["n"] * f["k"] / g.peak_flops["fp32"]


def _robust(card: str, recs: list, x0: float, fn) -> float:
    """exp of the robust least-squares ``x`` of ``fn(x)``'s log errors, classes weighted
    equally."""
    n = {}
    for cls, _f, _ns in recs:
        n[cls] = n.get(cls, 0) + 1
    w = np.array([1 / math.sqrt(n[cls]) for cls, _f, _ns in recs])
    sol = least_squares(lambda x: w * log_errors(card, recs, *fn(math.exp(x[0]))), [x0],
                        loss="soft_l1", f_scale=LOSS_SCALE * w.mean(), diff_step=1e-3)
    return math.exp(sol.x[0])


def fit(card: str, train: list) -> dict:
    """The correction of ``card`` from its train records ``(class, features, ns)``."""
    recs = [r for r in train if r[2] >= MIN_MS * 1e6]
    comp = [r for r in recs if not memory_bound(card, r[1])]
    mem = [r for r in recs if memory_bound(card, r[1])]
    c = _robust(card, comp, 0.0, lambda x: (x, 1.0))
    b = 1.0
    if len(mem) >= MIN_MEMORY:
        b = _robust(card, mem, 0.0, lambda x: (c, x))
        c = _robust(card, comp, math.log(c), lambda x: (x, b))
    return dict(compute_scale=round(c, ROUND), bandwidth_scale=round(b, ROUND),
                records=len(recs), compute_bound=len(comp), memory_bound=len(mem))


def by_card() -> dict[str, dict[str, list]]:
    """card -> half -> [(class, features, measured ns)]."""
    out: dict[str, dict[str, list]] = {}
    for name, cls, f, ns, _algo, half in nk.records():
        out.setdefault(nk.CARDS[name][0], {"train": [], "test": []})[half].append((cls, f, ns))
    return out


def stats(errs: list[float]) -> tuple[float, float, float]:
    a = [abs(e) for e in errs]
    return statistics.median(a), max(a), statistics.median(errs)


def evaluate(card: str, halves: dict, fitted: dict) -> dict:
    """(half, class, least ms, 'before'|'after') -> relative errors."""
    out = {}
    for when, c, b in (("before", 1.0, 1.0),
                       ("after", fitted["compute_scale"], fitted["bandwidth_scale"])):
        for half, recs in halves.items():
            errs = np.expm1(log_errors(card, recs, c, b))
            for cls in CLASSES:
                for least in (0.0, MIN_MS):
                    e = [float(x) for x, r in zip(errs, recs)
                         if r[0] == cls and r[2] >= least * 1e6]
                    if e:
                        out[half, cls, least, when] = e
    return out


def changes(ev: dict) -> dict[str, float]:
    """class -> the test half's median |error| after less before (records of MIN_MS+)."""
    return {cls: stats(ev["test", cls, MIN_MS, "after"])[0] -
            stats(ev["test", cls, MIN_MS, "before"])[0]
            for cls in CLASSES if ("test", cls, MIN_MS, "before") in ev}


def ships(card: str, ev: dict) -> bool:
    """The shipping rule (NEUSIGHT_SPLIT.md) on the test half's records of MIN_MS and more."""
    d = changes(ev).values()
    return PRESETS[card] is not None and max(d) <= 0.01 and min(d) <= -0.02


def table(results: dict, least: float, halves: tuple = ("train", "test")) -> None:
    print(f"\n{'all records' if not least else f'records measured >= {least:g} ms'}"
          f"{', the test half' if halves == ('test',) else ''}: (predicted - measured) / "
          "measured; median |error|, max |error|, median signed\n")
    print("| card | class | half | n | before median | before max | before signed | "
          "after median | after max | after signed |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for card, (_fitted, ev, _ship) in results.items():
        for cls in CLASSES:
            for half in halves:
                if (half, cls, least, "before") not in ev:
                    continue
                s0, s1 = (stats(ev[half, cls, least, w]) for w in ("before", "after"))
                print(f"| {card} | {cls} | {half} | {len(ev[half, cls, least, 'before'])} | "
                      f"{s0[0]:.1%} | {s0[1]:.1%} | {s0[2]:+.1%} | "
                      f"**{s1[0]:.1%}** | {s1[1]:.1%} | {s1[2]:+.1%} |")


def shipped(card: str) -> dict | None:
    from vdnnsim.hardware import gpu_preset
    fix = gpu_preset(PRESETS[card]).spec_rule if PRESETS[card] else None
    return None if fix is None else dict(compute_scale=fix.compute_scale,
                                         bandwidth_scale=fix.bandwidth_scale,
                                         records=fix.records)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--summary", action="store_true",
                    help="the factors and the test half's records of 0.5 ms and more only")
    ap.add_argument("--check", action="store_true",
                    help="fit the train half only and compare with gpus.yaml's spec_rule")
    args = ap.parse_args(argv)
    data = by_card()
    if args.check:
        bad = []
        for card, halves in data.items():
            f = fit(card, halves["train"])
            got = shipped(card)
            if got is not None and got != {k: f[k] for k in got}:
                bad.append(f"{card}: gpus.yaml {got}, the fit {f}")
        print("\n".join(bad) or "gpus.yaml's spec_rule numbers are the fit's")
        return 1 if bad else 0
    results = {}
    for card in nk.ORDER:
        fitted = fit(card, data[card]["train"])
        ev = evaluate(card, data[card], fitted)
        results[card] = (fitted, ev, ships(card, ev))
    print("| card | preset | compute_scale | bandwidth_scale | fitted on (train, >= "
          f"{MIN_MS:g} ms: compute-bound + memory-bound) | test half's median change, points "
          "(the shipping rule's) | shipped | in gpus.yaml |")
    print("|---|---|---:|---:|---|---|---|---|")
    for card, (f, ev, ship) in results.items():
        bw = f"{f['bandwidth_scale']:g}" if f["memory_bound"] >= MIN_MEMORY else \
            f"1 (not fitted: {f['memory_bound']} memory-bound)"
        got = shipped(card)
        print(f"| {card} | {PRESETS[card] or '(none)'} | {f['compute_scale']:g} | {bw} | "
              f"{f['records']} ({f['compute_bound']} + {f['memory_bound']}) | "
              f"{', '.join(f'{k} {100 * v:+.1f}' for k, v in changes(ev).items())} | "
              f"{'yes' if ship else 'no'} | {'yes' if got else 'no'} |")
    for least in (MIN_MS,) if args.summary else (MIN_MS, 0.0):
        table(results, least, ("test",) if args.summary else ("train", "test"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
