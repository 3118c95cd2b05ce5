"""Issue 57's GPU check: each held-out family's meta trace (trace_heldout.py, the card's
preset) against the peak allocated memory ``measure_heldout.py`` measured on the GPU, the
median of three fresh processes; and the MoE routers' real load (router_load.py).

    python experiments/model_families/compare_gpu.py [DIR] [--card h100|h200]

DIR (default traces/model_families_gpu) holds measured_CARD.jsonl and
router_load_CARD.json. The issue's target: within 1% median and 3% max.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from trace_heldout import all_entries, one  # noqa: E402

GiB = 2**30


def latest(path: Path) -> dict[tuple[str, str], dict]:
    """The last record that ran of each model and dtype."""
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("rc") == 0:
            out[r["name"], r["dtype"]] = r
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default=str(ROOT / "traces" / "model_families_gpu"))
    ap.add_argument("--card", default="h100", choices=("h100", "h200"))
    args = ap.parse_args(argv)
    d = Path(args.dir)
    measured = latest(d / f"measured_{args.card}.jsonl")
    print("| model | dtype | predicted GiB | measured GiB (band) | error |")
    print("|---|---|---|---|---|")
    errs = []
    for e in all_entries():  # the held-out list, then the step options' cases (steps.yaml)
        for dtype in e.get("dtypes", ("fp32", "bf16", "autocast-bf16")):
            m = measured.get((e["name"], dtype))
            if m is None:
                continue
            if not m.get("fits", True) or "peak_allocated_bytes" not in m:
                print(f"| {e['name']} | {dtype} | | did not run: "
                      f"{(m.get('error') or '').splitlines()[0][:80]} | |")
                continue
            p = one(e, dtype, args.card)
            want = m["peak_allocated_bytes"] / GiB
            lo, hi = (b / GiB for b in m["peak_allocated_bytes_band"])
            if p["outcome"] != "traced":
                print(f"| {e['name']} | {dtype} | {p['outcome']} | {want:.3f} | |")
                continue
            err = p["peak"] / want - 1
            errs.append(abs(err))
            print(f"| {e['name']} | {dtype} | {p['peak']:.3f} | {want:.3f} ({lo:.3f}-{hi:.3f}) "
                  f"| {err:+.1%} |")
    if errs:
        print(f"\n{len(errs)} runs: |error| median {statistics.median(errs):.1%}, "
              f"max {max(errs):.1%} (target 1% / 3%)")
    loads = d / f"router_load_{args.card}.json"
    if loads.is_file():
        print("\n| MoE model | dtype | experts, top-k | tokens | busiest expert / balanced share "
              "(max over layers) | median layer's busiest | median layer's CV |")
        print("|---|---|---|---|---|---|---|")
        for r in json.loads(loads.read_text()):
            cv = statistics.median(x["cv"] for x in r["layers"])
            print(f"| {r['name']} | {r['dtype']} | {r['experts']}, {r['k']} | {r['tokens']} | "
                  f"{r['capacity_factor']:.2f}x | {r['median_layer_max']:.2f}x | {cv:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
