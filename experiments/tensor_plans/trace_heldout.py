"""The held-out set of heldout.yaml traced on the meta device and replayed uncapped (policy
eager) on the H200 preset: its table of HELDOUT.md. No planner runs here (HELDOUT.md's rule).

    .venv/bin/python experiments/tensor_plans/trace_heldout.py [--only NAME ...] [--out DIR]
        [--check]

Each model is traced by the command HELDOUT.md lists (``command`` below), from the
repository's root with the repository on PYTHONPATH (the factory specs import
``experiments.tensor_plans.models``), into ``DIR`` (default: a temporary folder, removed);
``--check`` fails when a layer count or a predicted peak or step time is more than 1% off
what heldout.yaml recorded. About 10 s a model on one CPU core.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402


def load() -> dict:
    return yaml.safe_load((HERE / "heldout.yaml").read_text())


def command(m: dict, out: str, gpu: str = "h200", optimizer: str = "adamw") -> list[str]:
    """The ``vdnnsim trace`` arguments of one model of heldout.yaml."""
    args = ["trace", "--model", m["spec"], "-b", str(m["batch"]), "--gpu", gpu,
            "--dtype", m["dtype"], "--optimizer", optimizer]
    if m.get("seq_len"):
        args += ["--seq-len", str(m["seq_len"])]
    if m.get("input"):
        args += ["--input", m["input"]]
    for k, v in (m.get("model_args") or {}).items():
        args += ["--model-arg", f"{k}={v}"]
    return args + ["-o", out]


def _vdnnsim(args: list[str]) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "vdnnsim", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"vdnnsim {shlex.join(args)}: {r.stderr.strip()}")
    return r.stdout


def eager(trace: Path, batch: int, gpu: str) -> dict:
    """The uncapped step of a trace: layers, peak (GiB) and step time (ms)."""
    cfg = trace.with_suffix(".run.yaml")
    cfg.write_text(yaml.safe_dump({"name": trace.stem, "network": str(trace),
                                   "batch_size": batch, "gpu": gpu, "policies": ["eager"]}))
    (r,) = json.loads(_vdnnsim(["run", str(cfg), "--json"]))
    layers = len(yaml.safe_load(trace.read_text())["layers"])
    return {"layers": layers, "peak_gib": r["peak_memory_bytes"] / 2**30,
            "step_ms": r["iteration_time_s"] * 1e3, "fits": r["fits"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="a model's name (repeatable)")
    ap.add_argument("--out", help="keep the traces in this folder")
    ap.add_argument("--check", action="store_true",
                    help="fail where a result is more than 1%% off heldout.yaml's")
    a = ap.parse_args(argv)
    data = load()
    models = [m for m in data["models"] if not a.only or m["name"] in a.only]
    if a.only and len(models) != len(a.only):
        raise SystemExit(f"--only: not in heldout.yaml: {set(a.only) - {m['name'] for m in models}}")
    tmp = None if a.out else tempfile.TemporaryDirectory()
    out = Path(a.out or tmp.name).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print("| model | family | batch | dtype | input | layers | eager peak GiB | step ms |")
    print("|---|---|---|---|---|---|---|---|")
    bad = []
    for m in models:
        trace = out / f"{m['name']}_b{m['batch']}.yaml"
        _vdnnsim(command(m, str(trace), data["gpu"], data["optimizer"]))
        got = eager(trace, m["batch"], data["gpu"])
        inp = f"seq {m['seq_len']}" if m.get("seq_len") else m["input"]
        print(f"| {m['name']} | {m['family']} | {m['batch']} | {m['dtype']} | {inp} | "
              f"{got['layers']} | {got['peak_gib']:.2f} | {got['step_ms']:.1f} |", flush=True)
        want = m.get("eager") or {}
        for key in ("layers", "peak_gib", "step_ms"):
            if a.check and key in want and abs(got[key] - want[key]) > 0.01 * want[key]:
                bad.append(f"{m['name']} {key}: {got[key]:.2f}, heldout.yaml {want[key]}")
    if tmp:
        tmp.cleanup()
    for line in bad:
        print("differs:", line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
