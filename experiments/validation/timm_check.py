"""The held-out timm set (traces/h200_timm_heldout/README.md): each profile replayed by the engine
(eager, h200 preset) against the median of the fresh-process measurements of its model
(PAIRS says which measurements each folder is judged against).

    python experiments/validation/timm_check.py [PROFILES_DIR ...]   (default: every session's)
    python experiments/validation/timm_check.py --meta               (needs torch and timm)
    python experiments/validation/timm_check.py --op                 (needs torch and timm)

Prints one row a profile: the measured median and band (min-max of the processes), the
replay and its error, the peak allocated memory predicted and measured; then the median
and max of the absolute errors per folder. ``--meta`` instead builds each model's trace on
the meta device with today's probe (``vdnnsim trace --model timm:create_model ...``) and
sets its peak allocated memory beside the one-machine measurements (measure4.jsonl);
``--op`` times each such trace by the op model (SGD, eager, as ``vdnnsim run`` replays it) and
sets its step beside the median of each set of plain measurements (measure4.jsonl: one
machine; measure.jsonl and measure3.jsonl: the first set, two machines).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim, from any folder
DATA = ROOT / "traces" / "h200_timm_heldout"

from vdnnsim.api import resolve_gpu, run_trace  # noqa: E402
from vdnnsim.trace import load_trace  # noqa: E402


# which measurements each folder of profiles is judged against: modules3/ was profiled on
# the machine that then measured measure4.jsonl (same machine, minutes apart); the others
# against the first set, measure.jsonl and measure3.jsonl (two machines)
# session11: modules4/ was profiled on the machine that measured a/ (its round 1, after a
# discarded process); rounds 2 and 3 (b/) came from the next machine, after its own
# (modules5/, profiled with the kernels' queued gaps on the machine that measured b/,
# is judged against the same three processes)
PAIRS = {"modules3": ("measure4.jsonl",), "modules4": ("a/measure.jsonl", "b/measure.jsonl"),
         "modules5": ("a/measure.jsonl", "b/measure.jsonl")}
FIRST = ("measure.jsonl", "measure3.jsonl")


def measurements(folder: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in sorted(folder.parent / n for n in PAIRS.get(folder.name, FIRST)):
        if not f.exists():
            continue
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if "iteration_ms" in r:
                out.setdefault(r["model"], []).append(r)
    return out


def check(folder: Path, meas: dict[str, list[dict]], gpu) -> list[tuple[float, float]]:
    errs = []
    if not any(f.name.split(".")[0] in meas for f in folder.glob("*.yaml.gz")):
        return errs  # profiles of other runs (hf/: GPT-2, set beside its own plain steps)
    print(f"{folder.relative_to(DATA)}:")
    print("| model | measured ms (band, n) | replay ms | error | peak pred GiB | peak meas GiB "
          "| error |")
    print("|---|---|---|---|---|---|---|")
    for f in sorted(folder.glob("*.yaml.gz")):
        m = f.name.split(".")[0]
        runs = meas.get(m, [])
        if not runs:
            continue
        t = load_trace(f)
        r = run_trace(t, gpu, "eager", record=False)
        ms = [x["iteration_ms"] for x in runs]
        peak = statistics.median(x["peak_allocated_bytes"] for x in runs)
        med = statistics.median(ms)
        et = r.iteration_time_ns / 1e6 / med - 1
        em = r.peak_memory_bytes / peak - 1
        errs.append((abs(et), abs(em)))
        print(f"| {m} | {med:.1f} ({min(ms):.1f}-{max(ms):.1f}, {len(ms)}) | "
              f"{r.iteration_time_ns / 1e6:.1f} | {et:+.1%} | {r.peak_memory_bytes / 2**30:.2f} | "
              f"{peak / 2**30:.2f} | {em:+.1%} |")
    if errs:
        t_, m_ = zip(*errs)
        print(f"step time |error| median {statistics.median(t_):.1%}, max {max(t_):.1%}; "
              f"peak allocated median {statistics.median(m_):.1%}, max {max(m_):.1%}")
    return errs


MODELS = ("dla34", "cspresnet50", "res2net50_26w_4s", "rexnet_100", "hrnet_w18_small",
          "poolformer_s12")


def meta(gpu) -> None:
    """Today's probe on the meta device against the measured peaks (memory only)."""
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace import trace_from_dict
    meas: dict[str, list[dict]] = {}
    for line in (DATA / "measured_profiled" / "measure4.jsonl").read_text().splitlines():
        r = json.loads(line)
        meas.setdefault(r["model"], []).append(r)
    errs = []
    print("| model | peak pred GiB (meta device) | peak meas GiB | error |")
    print("|---|---|---|---|")
    for m in MODELS:
        d = memory_trace("timm:create_model", 64, gpu, "fp32", None, {"model_name": m},
                         "image:3,224,224")
        r = run_trace(trace_from_dict(d, m), gpu, "eager", record=False)
        peak = statistics.median(x["peak_allocated_bytes"] for x in meas[m])
        e = r.peak_memory_bytes / peak - 1
        errs.append(abs(e))
        print(f"| {m} | {r.peak_memory_bytes / 2**30:.3f} | {peak / 2**30:.3f} | {e:+.2%} |")
    print(f"peak allocated |error| median {statistics.median(errs):.2%}, max {max(errs):.2%}")


def op_steps(gpu) -> None:
    """Today's op path (meta device, op model) against the measured steps."""
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace import trace_from_dict
    from vdnnsim.trace.optimizer import with_optimizer
    sets = {"measure4": ("measure4.jsonl",), "first": FIRST}
    meas = {k: {} for k in sets}
    for k, names in sets.items():
        for n in names:
            for line in (DATA / "measured_profiled" / n).read_text().splitlines():
                r = json.loads(line)
                if "iteration_ms" in r:
                    meas[k].setdefault(r["model"], []).append(r["iteration_ms"])
    errs: dict[str, list[float]] = {k: [] for k in sets}
    print("| model | predicted ms | host ms | measure4 ms | error | first set ms | error |")
    print("|---|---|---|---|---|---|---|")
    for m in MODELS:
        d = memory_trace("timm:create_model", 64, gpu, "fp32", None, {"model_name": m},
                         "image:3,224,224")
        r = run_trace(with_optimizer(trace_from_dict(d, m), "sgd"), gpu, "eager", record=False)
        ms = r.iteration_time_ns / 1e6
        row = f"| {m} | {ms:.1f} | {r.host_issue_time_ns / 1e6:.1f} |"
        for k in sets:
            med = statistics.median(meas[k][m])
            errs[k].append(ms / med - 1)
            row += f" {med:.1f} | {ms / med - 1:+.1%} |"
        print(row, flush=True)
    for k, e in errs.items():
        print(f"{k}: step |error| median {statistics.median(abs(x) for x in e):.1%}, max "
              f"{max(abs(x) for x in e):.1%}, signed median {statistics.median(e):+.1%}")


def main() -> None:
    gpu = resolve_gpu("h200")
    if sys.argv[1:] == ["--meta"]:
        meta(gpu)
        return
    if sys.argv[1:] == ["--op"]:
        op_steps(gpu)
        return
    folders = [Path(a).resolve() for a in sys.argv[1:]] or sorted(
        (p for sub in ("measured_profiled", "measured_planned") for p in (DATA / sub).glob("*")
         if p.is_dir() and any(p.glob("*.yaml.gz"))), key=lambda p: (p.parent.name != "measured_profiled", p.name))
    for d in folders:
        check(d, measurements(d), gpu)


if __name__ == "__main__":
    main()
