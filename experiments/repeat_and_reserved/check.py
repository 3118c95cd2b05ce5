"""Issue 28's held-out runs (traces/h200_reserved_heldout/README.md) against the simulator.

    python experiments/repeat_and_reserved/check.py [SET_DIR ...]   (default: set_a, set_b_part1, set_b_part2)

A folder with ``time.jsonl`` is set A's (a record per process); one with
``repeat.jsonl`` set B's (a `vdnnsim measure --repeat 3` record per run).

For each model and allocator setting: the step time (the median of the fresh processes'
medians, and their band) against the replay of the model's profiled trace (eager, h200
preset, the run's allocator settings); peak allocated and peak reserved against the
profiled trace's and the meta-device trace's replays; then each capped run's fit or out of
memory against the replay under that cap. Errors are (predicted - measured) / measured;
"in" means the prediction lies inside the measured band (min..max of the processes).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim, from any folder
DATA = ROOT / "traces" / "h200_reserved_heldout"

from vdnnsim.api import resolve_gpu, run_trace  # noqa: E402
from vdnnsim.planners.planfile import read_plan_file  # noqa: E402
from vdnnsim.trace import load_trace  # noqa: E402


def settings(conf: str) -> dict:
    """PYTORCH_CUDA_ALLOC_CONF as the simulator's allocator settings (read by the package's
    one reader of that text)."""
    from vdnnsim.engine.caching import allocator_settings
    return {k: v for k, v in allocator_settings(conf).__dict__.items() if v}


def replay(trace, gpu, conf: str, cap=None):
    allocator = settings(conf)
    try:
        return run_trace(trace, gpu, "eager", None, cap, record=False, allocator=allocator)
    except TypeError:  # a simulator without allocator settings: the default allocator
        if allocator:
            return None
        return run_trace(trace, gpu, "eager", None, cap, record=False)


def band(pred: float, lo: float, hi: float) -> str:
    return "in" if lo <= pred <= hi else f"{(pred - hi) / hi if pred > hi else (pred - lo) / lo:+.1%}"


def judge(errs: dict[str, list[float]], name: str, label: str, p, q, mt: float,
          ms_band, mr: float, res_band, al: float) -> None:
    """One table row: the replays ``p`` (profiled) and ``q`` (meta) against the measured
    median step ``mt`` and reserved peak ``mr`` with their bands and the allocated peak
    ``al``; the absolute errors are added to ``errs``."""
    t = p.iteration_time_ns / 1e6
    (lo, hi), (rlo, rhi) = ms_band, res_band
    row = [t / mt - 1, p.peak_memory_bytes / al - 1, p.peak_footprint_bytes / mr - 1,
           q.peak_footprint_bytes / mr - 1]
    for k, e in zip(errs, row):
        errs[k].append(abs(e))
    print(f"| {name} | {label} | {mt:.1f} ({lo:.1f}-{hi:.1f}) | {t:.1f} | {row[0]:+.1%} | "
          f"{band(t, lo, hi)} | {al / 2**30:.2f} / {p.peak_memory_bytes / 2**30:.2f} | "
          f"{row[1]:+.1%} | {mr / 2**30:.2f} ({rlo / 2**30:.2f}-{rhi / 2**30:.2f}) | "
          f"{p.peak_footprint_bytes / 2**30:.2f} | {row[2]:+.1%} | "
          f"{band(p.peak_footprint_bytes, rlo, rhi)} | {q.peak_footprint_bytes / 2**30:.2f} | "
          f"{row[3]:+.1%} |")


def cap_line(c: dict, alloc: str, kind: str, r) -> bool:
    """Print a capped run ``c`` against the replay ``r``; whether it is right."""
    ok = r.fits == bool(c["fits"])
    print(f"cap {c['memory_cap_bytes'] / 2**30:.2f} GiB ({c['factor']} x reserved) "
          f"{c['name']} {alloc} {kind}: measured "
          f"{'fits' if c['fits'] else 'out of memory'}, predicted "
          f"{'fits' if r.fits else 'out of memory'}{'' if ok else '  MISS'}")
    return ok


def check(session: Path) -> dict[str, list[float]]:
    gpu = resolve_gpu("h200")
    recs = [json.loads(x) for x in (session / "time.jsonl").read_text().splitlines()]
    errs: dict[str, list[float]] = {"time": [], "alloc": [], "reserved": [], "reserved_meta": []}
    traces = {}
    print(f"{session.relative_to(DATA)}:")
    print("| model | allocator | ms measured (band) | replay | err | band | alloc GiB meas / pred "
          "| err | reserved GiB meas (band) | profiled | err | band | meta | err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in dict.fromkeys(r["name"] for r in recs):
        prof = load_trace(session / "profile" / f"{name}.yaml.gz")
        meta = load_trace(session / "meta" / f"{name}.json")
        traces[name] = (prof, meta)
        for conf in dict.fromkeys(r.get("allocator_conf", "") for r in recs):
            rs = [r for r in recs if r["name"] == name and r.get("allocator_conf", "") == conf
                  and r.get("fits")]
            if not rs:
                continue
            ms = [r["iteration_ms"] for r in rs]
            res = [r["peak_reserved_bytes"] for r in rs]
            al = statistics.median(r["peak_allocated_bytes"] for r in rs)
            p, q = replay(prof, gpu, conf), replay(meta, gpu, conf)
            if p is None:
                print(f"| {name} | {conf or 'default'} | not modelled |")
                continue
            judge(errs, name, conf or "default", p, q, statistics.median(ms),
                  (min(ms), max(ms)), statistics.median(res), (min(res), max(res)), al)
    for k, v in errs.items():
        if v:
            print(f"{k}: median |error| {statistics.median(v):.1%}, max {max(v):.1%} over {len(v)}")
    caps = session / "caps.jsonl"
    if caps.exists():
        right = n = 0
        for line in caps.read_text().splitlines():
            c = json.loads(line)
            prof, meta = traces[c["name"]]
            conf = c.get("allocator_conf", "")
            for kind, t in (("profiled", prof), ("meta", meta)):
                r = replay(t, gpu, conf, c["memory_cap_bytes"])
                if r is None:
                    continue
                right += cap_line(c, conf or "default", kind, r)
                n += 1
        print(f"capped runs right: {right} of {n}")
    return errs


def check_repeated(folder: Path) -> dict[str, list[float]]:
    """Set B: one `vdnnsim measure --repeat 3` record per model and allocator
    (``repeat.jsonl``: the median of the processes' medians and its band), against the
    replays of the model's profiled and meta-device traces under that allocator."""
    gpu = resolve_gpu("h200")
    errs: dict[str, list[float]] = {"time": [], "alloc": [], "reserved": [], "reserved_meta": []}
    print(f"{folder.relative_to(DATA)}:")
    print("| model | allocator | ms measured (band) | replay | err | band | alloc GiB meas / pred "
          "| err | reserved GiB meas (band) | profiled | err | band | meta | err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for line in (folder / "repeat.jsonl").read_text().splitlines():
        m = json.loads(line)
        name, conf = m["name"], m.get("allocator_conf") or {}
        label = "expandable_segments:True" if conf.get("expandable_segments") \
            or m.get("alloc") == "expandable" else "default"
        if "error" in m or not m.get("fits"):
            why = str(m.get("error", "out of memory")).strip().splitlines()[-1][:80]
            print(f"| {name} | {label} | not measured: {why} |")
            continue
        prof, meta = traces_of(name)
        conf_s = "expandable_segments:True" if conf.get("expandable_segments") else ""
        p, q = replay(prof, gpu, conf_s), replay(meta, gpu, conf_s)
        judge(errs, name, label, p, q, m["iteration_ms"], m["iteration_ms_band"],
              m["peak_reserved_bytes"], m["peak_reserved_bytes_band"],
              m["peak_allocated_bytes"])
    for k, v in errs.items():
        if v:
            print(f"{k}: median |error| {statistics.median(v):.1%}, max {max(v):.1%} over {len(v)}")
    caps = folder / "caps.jsonl"
    if caps.exists():  # each model's capped runs, under the allocator it ran with
        right = n = 0
        for line in caps.read_text().splitlines():
            c = json.loads(line)
            if "fits" not in c:  # the process failed (an out-of-memory run says fits: false)
                print(f"cap {c['name']} {c['alloc']} x{c['factor']}: not measured")
                continue
            conf_s = "expandable_segments:True" if c["alloc"] == "expandable" else ""
            for kind, t in zip(("profiled", "meta"), traces_of(c["name"])):
                r = replay(t, gpu, conf_s, c["memory_cap_bytes"])
                right += cap_line(c, c["alloc"], kind, r)
                n += 1
        print(f"capped runs right: {right} of {n}")
    for line in ((folder / "planned.jsonl").read_text().splitlines()
                 if (folder / "planned.jsonl").exists() else ()):
        m = json.loads(line)  # a block plan measured --repeat 3 (NOTE [block runtime])
        if "error" in m or not m.get("fits"):
            print(f"planned {m['name']} {m['alloc']}: not measured "
                  f"({str(m.get('error', 'out of memory')).strip().splitlines()[-1][:80]})")
            continue
        conf_s = "expandable_segments:True" if m["alloc"] == "expandable" else ""
        prof = traces_of(m["name"])[0]
        plan = read_plan_file(folder / m["plan"])
        opts = {"blocks": plan.blocks,  # both: NOTE [block mix]
                "recompute": plan.recompute_blocks}
        r = run_trace(prof, gpu, "vdnn_blocks", opts, None, record=False,
                      allocator=settings(conf_s))
        t, mt, (lo, hi) = r.iteration_time_ns / 1e6, m["iteration_ms"], m["iteration_ms_band"]
        res, mr = r.peak_footprint_bytes, m["peak_reserved_bytes"]
        al, ma = r.peak_memory_bytes, m["peak_allocated_bytes"]
        print(f"planned {m['name']} {m['alloc']} ({m['plan']}): step {mt:.1f} ms "
              f"({lo:.1f}-{hi:.1f}) predicted {t:.1f} ({(t - mt) / mt:+.1%}, {band(t, lo, hi)}); "
              f"allocated {ma / 2**30:.2f} GiB predicted {al / 2**30:.2f} "
              f"({(al - ma) / ma:+.1%}); reserved {mr / 2**30:.2f} predicted "
              f"{res / 2**30:.2f} ({(res - mr) / mr:+.1%})")
    return errs


def traces_of(name: str):
    """A set B model's profiled and meta-device traces, from the later part that made them."""
    prof = sorted(DATA.glob(f"set_b_*/profile/{name}.yaml.gz"))[-1]
    meta = sorted(DATA.glob(f"set_b_*/meta/{name}.json"))[-1]
    return load_trace(prof), load_trace(meta)


def main(argv: list[str]) -> int:
    sessions = [Path(a) for a in argv] or sorted(
        p for p in DATA.iterdir()
        if (p / "time.jsonl").exists() or (p / "repeat.jsonl").exists())
    for s in sessions:
        if (s / "repeat.jsonl").exists():
            check_repeated(s.resolve())
        else:
            check(s.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
