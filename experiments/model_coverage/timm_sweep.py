"""Issue 26's timm sweep: trace and run each model of the held-out list in
traces/timm_sweep/README.md.

    python experiments/model_coverage/timm_sweep.py [--only NAME ...] [--jobs N] [--out DIR]
        [--dtype PRECISION]

For each model, in fresh subprocesses with a timeout: ``vdnnsim trace --model
timm:create_model --model-arg model_name=NAME --input image:3,H,W[:CLASSES] -b 2 --gpu
h200 -o OUT.yaml``, then ``vdnnsim run`` of a config naming that trace (policy eager).
Each step is classified: ok; error (exit 2 and one stderr line ``vdnnsim: error: ...``);
traceback (any other exit, 'Traceback' in stderr, or an error with more than that one
line); timeout. A model's outcome is its first step that was not ok. Writes
``results.csv`` in traces/timm_sweep/ (or under --out; ``results-PRECISION.csv`` for a
``--dtype`` other than fp32, passed to the trace) and prints a summary. The model's own
parameter bytes (built on the meta device, in a subprocess) are written beside the
trace's weight bytes, and ``note`` says where they differ, so that a trace that lost its
weights shows.

``--check-pick`` recomputes the list by README.md's rule and says whether it is the list.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
DATA = ROOT / "traces" / "timm_sweep"  # the list (README.md) and the results
TIMEOUT = 120
FIELDS = ["model", "input", "outcome", "stage", "seconds", "layers", "trace_weight_mb",
          "param_mb", "peak_gb", "error", "note"]


def listed() -> list[tuple[str, str]]:
    """(model, input spec) of README.md's table."""
    rows = re.findall(r"^\| \d+ \| (\S+) \| (image:\S+) \|$", (DATA / "README.md").read_text(),
                      re.M)
    if len(rows) != 50:
        sys.exit(f"README.md lists {len(rows)} models, not 50")
    return rows


def pick() -> list[str]:
    """README.md's rule: the first name of every k-th family, k = families / 50."""
    import timm
    fam: dict[str, str] = {}
    for n in sorted(timm.list_models()):
        fam.setdefault(re.split(r"[_\d]", n, maxsplit=1)[0], n)
    fams = sorted(fam)
    return [fam[fams[int(i * len(fams) / 50)]] for i in range(50)]


def call(argv: list[str], timeout: float) -> tuple[str, float, str, str]:
    """(outcome, seconds, stdout, the error line or what went wrong) of one subprocess."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                           timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - t0, "", f"no answer in {timeout} s"
    dt = time.monotonic() - t0
    err = [ln for ln in p.stderr.splitlines() if ln.strip()
           and not ln.startswith("note: a memory trace")]
    if p.returncode == 0 and "Traceback" not in p.stderr:
        return "ok", dt, p.stdout, ""
    if p.returncode == 2 and len(err) == 1 and err[0].startswith("vdnnsim: error: "):
        return "error", dt, p.stdout, err[0]
    last = next((ln for ln in reversed(err) if not ln.startswith(" ")), f"exit {p.returncode}")
    return "traceback", dt, p.stdout, f"exit {p.returncode}: {last}"


def weights(path: Path) -> int:
    """The trace's weight bytes (the sum of its layers' ``weight_bytes``, in block or flow
    style: a large trace is written in flow style)."""
    return sum(int(m) for m in re.findall(r"\bweight_bytes\"?: (\d+)", path.read_text()))


PARAMS = ("import sys, torch, timm\n"
          "with torch.device('meta'):\n"
          "    m = timm.create_model(sys.argv[1])\n"
          "print(sum(p.numel() * p.element_size() for p in m.parameters()))\n")


def sweep_one(model: str, spec: str, work: Path, dtype: str = "fp32") -> dict:
    row = dict(model=model, input=spec, outcome="ok", stage="", seconds=0.0, layers="",
               trace_weight_mb="", param_mb="", peak_gb="", error="", note="")
    out = work / f"{model}.yaml"
    outcome, dt, stdout, err = call(
        ["-m", "vdnnsim", "trace", "--model", "timm:create_model", "--model-arg",
         f"model_name={model}", "--input", spec, "-b", "2", "--gpu", "h200", "--dtype", dtype, "-o", str(out)],
        TIMEOUT)
    row["seconds"] = dt
    if outcome != "ok":
        row.update(outcome=outcome, stage="trace", error=err)
        return row
    m = re.search(r", (\d+) layers,", stdout)
    row["layers"] = int(m.group(1)) if m else ""
    traced = weights(out)
    row["trace_weight_mb"] = f"{traced / 1e6:.1f}"
    cfg = work / f"{model}.cfg.yaml"
    cfg.write_text(f"network: {out}\ngpu: h200\npolicy: eager\n")
    outcome, dt, stdout, err = call(["-m", "vdnnsim", "run", str(cfg)], TIMEOUT)
    row["seconds"] += dt
    if outcome != "ok":
        row.update(outcome=outcome, stage="run", error=err)
        return row
    m = re.search(r"^eager\s+yes\s+([\d.]+)", stdout, re.M)
    row["peak_gb"] = m.group(1) if m else ""
    outcome, _, stdout, err = call(["-c", PARAMS, model], TIMEOUT)
    if outcome == "ok":
        params = int(stdout.split()[-1])
        row["param_mb"] = f"{params / 1e6:.1f}"
        if dtype == "fp32" and traced != params:  # 16-bit: the casts' bytes differ
            row["note"] = f"trace's weights {traced - params:+,} bytes off the parameters'"
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", help="just these models of the list")
    ap.add_argument("--jobs", type=int, default=1, help="models at a time (at most 2)")
    ap.add_argument("--out", type=Path, default=DATA, help="where results.csv goes")
    ap.add_argument("--dtype", default="fp32", help="vdnnsim trace's --dtype")
    ap.add_argument("--check-pick", action="store_true")
    a = ap.parse_args()
    rows = listed()
    if a.check_pick:
        same = pick() == [m for m, _ in rows]
        print("README.md's list is the rule's" if same else "README.md's list differs")
        return 0 if same else 1
    if a.only:
        rows = [r for r in rows if r[0] in a.only]
    results = []
    with tempfile.TemporaryDirectory() as tmp, \
            ThreadPoolExecutor(max(1, min(a.jobs, 2))) as pool:
        for r in pool.map(lambda r: sweep_one(*r, Path(tmp), a.dtype), rows):
            results.append(r)
            print(f"{r['model']:32} {r['outcome']:9} {r['seconds']:6.1f} s "
                  f"{r['layers']!s:>5} layers  {r['error']}", flush=True)
    for r in results:
        r["seconds"] = f"{r['seconds']:.1f}"
    a.out.mkdir(parents=True, exist_ok=True)
    name = "results.csv" if a.dtype == "fp32" else f"results-{a.dtype}.csv"
    with open(a.out / name, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(results)
    counts = {k: sum(r["outcome"] == k for r in results)
              for k in ("ok", "error", "traceback", "timeout")}
    print(", ".join(f"{v} {k}" for k, v in counts.items()), f"of {len(results)}")
    return 1 if counts["traceback"] or counts["timeout"] else 0


if __name__ == "__main__":
    sys.exit(main())
