"""Profiled traces (the block profiler then, since replaced by NOTE [module timing];
profile_all.py, with AdamW) against the H200
transformer runs: each trace replayed eager on the h200 preset; predicted peak allocated
memory and step time beside two measurements of each run: the one made in the same
process right after the profile (beside_profiles/*.jsonl; extra.jsonl, whose runs have no other),
and the set's first (main.jsonl, heldout.jsonl: session 8, another day, before anything
could profile a transformer). "profile's step" is the profile's own median plain step
(from its note): the replay's error against it is the model's, its difference from the
measurement is the run's own repeatability.

    python experiments/transformers/profiled_check.py [main|heldout|extra|all] [--dir FOLDER]
    python experiments/transformers/profiled_check.py --reserved   (peak reserved, every set)

``--dir heldout_module_profiler``: the profiles in FOLDER/profiled (FOLDER under traces/h200_transformers) (the module profiler, NOTE [module
timing]) against the measurements made in their own processes, FOLDER/<set>.jsonl.
"""

import json
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # this checkout's vdnnsim, from any folder
sys.path.insert(0, str(HERE))  # profile_all's key()
DATA = HERE.parents[1] / "traces" / "h200_transformers"
RECORDED_HELD = "traces/h200_hf/heldout/"  # the records name the folder as it was then

SETS = ("main", "heldout", "extra")
HOST_BOUND = 0.8  # a run whose host issue time is more than this share of its step


def rows(which: str = "all", folder: str | None = None):
    from profile_all import key

    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.trace.optimizer import with_optimizer
    from vdnnsim.trace import load_trace

    gpu = resolve_gpu("h200")
    for name in SETS:
        if which not in (name, "all"):
            continue
        first = {}
        if name != "extra":
            for line in (DATA / f"{name}.jsonl").read_text().splitlines():
                r = json.loads(line)
                first[key(name, r["model"], r["batch_size"], r["seq_len"], r["dtype"])] = r
        same = DATA / ("extra.jsonl" if name == "extra" else f"beside_profiles/{name}.jsonl")
        if folder is not None:
            same = DATA / folder / f"{name}.jsonl"
            if not same.exists():
                continue
        for line in same.read_text().splitlines():
            r = json.loads(line)
            k = key(name, r["model"], r["batch_size"], r["seq_len"], r["dtype"])
            path = DATA / (folder or "") / "profiled" / f"{k}.yaml.gz"
            trace = with_optimizer(load_trace(path), r["optimizer"])
            sim = run_trace(trace, gpu, "eager", record=False)
            plain = float(re.search(r"a plain step took ([0-9.]+) ms",
                                    trace.source.note or "").group(1))
            yield name, r, first.get(k), sim, plain


def reserved() -> None:
    """``--reserved``: each run's peak reserved memory (over its timed steps) against the
    replay's (NOTE [step temporaries], [steady state]), one row a run, then the median and
    max of the absolute errors over every set."""
    errs = []
    print("| set | model | batch | seq | precision | reserved pred GiB | reserved meas GiB "
          "| error |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r, _, sim, _ in rows():
        mr = r.get("peak_reserved_bytes")
        if not mr:
            continue
        e = sim.peak_footprint_bytes / mr - 1
        errs.append(abs(e))
        model = r["model"].removeprefix("hf:").replace(RECORDED_HELD, "")
        print(f"| {name} | {model.removesuffix('.yaml')} | {r['batch_size']} "
              f"| {r['seq_len'] or '-'} | {r['dtype']} | {sim.peak_footprint_bytes / 2**30:.2f} "
              f"| {mr / 2**30:.2f} | {e:+.1%} |")
    print(f"peak reserved |error| median {statistics.median(errs):.1%}, max {max(errs):.1%} "
          f"over {len(errs)} runs")


def main() -> None:
    args = sys.argv[1:]
    if args == ["--reserved"]:
        reserved()
        return
    folder = None
    if "--dir" in args:
        i = args.index("--dir")
        folder = args[i + 1]
        del args[i:i + 2]
    which = args[0] if args else "all"
    errs: dict[str, dict[str, list[float]]] = {}
    print("| set | model | batch | seq | precision | peak pred GiB | peak meas GiB | error "
          "| step pred ms | step meas ms | error | host issue ms | profile's step ms "
          "| first meas ms | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r, r1, sim, plain in rows(which, folder):
        pred = sim.iteration_time_s * 1e3
        em = sim.peak_memory_bytes / r["peak_allocated_bytes"] - 1
        et = pred / r["iteration_ms"] - 1
        e = errs.setdefault(name, {"memory": [], "time": [], "first": [], "gpu": [],
                                   "host": [], "replay": [], "repeat": []})
        e["replay"].append(abs(pred / plain - 1))
        e["repeat"].append(abs(plain / r["iteration_ms"] - 1))
        e["memory"].append(abs(em))
        e["time"].append(abs(et))
        e["host" if r["host_issue_ms"] > HOST_BOUND * r["iteration_ms"] else "gpu"].append(
            abs(et))
        first = "| - | - |"
        if r1 is not None:
            e1 = pred / r1["iteration_ms"] - 1
            e["first"].append(abs(e1))
            first = f"| {r1['iteration_ms']:.1f} | {e1:+.1%} |"
        model = r["model"].removeprefix("hf:").replace(RECORDED_HELD, "")
        print(f"| {name} | {model.removesuffix('.yaml')} | {r['batch_size']} "
              f"| {r['seq_len'] or '-'} | {r['dtype']} "
              f"| {sim.peak_memory_bytes / 2**30:.2f} | {r['peak_allocated_bytes'] / 2**30:.2f} "
              f"| {em:+.1%} | {pred:.1f} | {r['iteration_ms']:.1f} | {et:+.1%} "
              f"| {r['host_issue_ms']:.1f} | {plain:.1f} {first}")
    for name, e in errs.items():
        line = (f"{name}: {len(e['memory'])} runs; peak allocated |error| median "
                f"{statistics.median(e['memory']):.1%}, max {max(e['memory']):.1%}; step time "
                f"|error| median {statistics.median(e['time']):.1%}, max {max(e['time']):.1%}")
        if e["first"]:
            line += (f"; against the first measurement median "
                     f"{statistics.median(e['first']):.1%}, max {max(e['first']):.1%}")
        print(line)
        print(f"  the replay against its profile's own plain step: median "
              f"{statistics.median(e['replay']):.1%}, max {max(e['replay']):.1%}; the "
              f"profile's plain step against the measurement: median "
              f"{statistics.median(e['repeat']):.1%}, max {max(e['repeat']):.1%}")
        for k, what in (("gpu", "GPU-bound"), ("host", "host-bound")):
            if e[k]:
                print(f"  {what} runs (host issue {'under' if k == 'gpu' else 'over'} "
                      f"{HOST_BOUND:.0%} of the step): {len(e[k])}, step time |error| "
                      f"median {statistics.median(e[k]):.1%}, max {max(e[k]):.1%}")


if __name__ == "__main__":
    main()
