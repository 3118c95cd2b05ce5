"""Everything the program answers, written to one folder, so that two versions can be
compared file by file (`diff -r`): a restructuring must give the same answers.

    .venv/bin/python bench/same_answers.py OUT [--fuzz-cases 10000] [--workers 2]

OUT gets, each as the command printed it (stdout, then stderr, then the exit code):
- `reproduce.txt`, `reproduce.json`: `vdnnsim reproduce` and `--json`;
- `run/NAME.json`: `vdnnsim run CONFIG --json` for every shipped config and study;
- `validate/N.txt`: `vdnnsim validate --json` on every committed validation set, as the
  docs run them (VALIDATE);
- `docs/N.txt`: every `<!-- output: COMMAND -->` the docs quote (tests/doccheck.py checks
  them against the text; here they are kept whole);
- `fuzz.jsonl`: every fuzz case of the test run's seed (exit code, stdout, stderr, the
  files it left, its result's summary), the campaign `make fuzz` runs.
Paths are relative to the repository root; nothing is timed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VDNNSIM = [sys.executable, "-m", "vdnnsim"]


def _run(argv: list[str]) -> str:
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"})
    return f"{p.stdout}\n--- stderr\n{p.stderr}\n--- rc {p.returncode}\n"


# The committed validation sets, as the docs run them (traces, then measurements oldest
# first); FRESH is the list of every fresh-process record of the torchvision sets.
FRESH = "experiments/repeat_and_reserved/fresh_sets.txt"
VALIDATE = [
    "traces/h200_torchvision traces/h200_torchvision/measurements.json",
    "traces/h200_torchvision traces/h200_torchvision/measurements.json "
    "traces/h200_torchvision/repeats.json",
    "traces/h200_torchvision_heldout traces/h200_torchvision_heldout/measurements.json",
    "traces/h200_memcheck traces/h200_memcheck/measurements.json",
    "traces/h200_backward_workspaces/torchvision "
    "traces/h200_backward_workspaces/torchvision_heldout "
    "traces/h200_torchvision/measurements.json traces/h200_torchvision_heldout/measurements.json",
    "--reserved one-step traces/h200_backward_workspaces/torchvision "
    "traces/h200_backward_workspaces/torchvision_heldout "
    "traces/h200_torchvision/measurements.json traces/h200_torchvision_heldout/measurements.json",
    "--scale-host traces/h200_backward_workspaces/torchvision "
    "traces/h200_backward_workspaces/torchvision_heldout "
    "traces/h200_torchvision/measurements.json traces/h200_torchvision_heldout/measurements.json",
    "traces/h200_backward_workspaces/torchvision "
    "traces/h200_backward_workspaces/torchvision_heldout "
    "traces/h200_torchvision_heldout/wide_resnet50_2_b128.yaml FRESH",
]


def _validate_commands() -> list[list[str]]:
    fresh = (ROOT / FRESH).read_text().split()
    return [[a for w in shlex.split(c) for a in (fresh if w == "FRESH" else [w])]
            for c in VALIDATE]


def _doc_outputs() -> list[str]:
    """The commands whose output README.md and docs/ quote."""
    outputs = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(r"<!-- output(?: \(first lines\))?: (.+?) -->", text):
            outputs.add(m.group(1).strip())
    outputs.discard("COMMAND")
    return sorted(outputs)


def _fuzz_one(index: int, seed: int, root: str) -> str:
    from tests.fuzz.generator import generate
    from tests.fuzz.oracle import clear, execute
    case = generate(seed, index)
    folder = os.path.join(root, f"case{index}")
    clear(folder)
    try:
        o = execute(case, folder)
        summary = repr(o.result.summary()) if hasattr(o.result, "summary") else None
        files = {k: v for k, v in sorted(getattr(o, "after", {}).items())}
        rec = {"case": index, "label": case.label, "rc": o.rc, "stdout": o.stdout,
               "stderr": o.stderr, "exc": o.exc_type, "timed_out": o.timed_out,
               "files": hashlib.sha1(repr(files).encode()).hexdigest(), "summary": summary}
    finally:
        clear(folder)
    return json.dumps(rec, sort_keys=True)


def _fuzz_part(start: int, stop: int, step: int, seed: int, root: str, out: str) -> None:
    """One worker's share of the cases, in a process of its own (not a pool's daemon,
    which could not start the local processes a study case asks for)."""
    Path(out).write_text("".join(_fuzz_one(i, seed, root) + "\n"
                                 for i in range(start, stop, step)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--fuzz-cases", type=int, default=10000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip", default="", help="comma-separated parts to leave out "
                    "(reproduce, run, validate, docs, fuzz)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    skip = set(filter(None, args.skip.split(",")))
    out.mkdir(parents=True, exist_ok=True)
    if "reproduce" not in skip:
        (out / "reproduce.txt").write_text(_run(VDNNSIM + ["reproduce"]))
        (out / "reproduce.json").write_text(_run(VDNNSIM + ["reproduce", "--json"]))
    if "run" not in skip:
        (out / "run").mkdir(exist_ok=True)
        for cfg in sorted((ROOT / "configs").rglob("*.yaml")):
            rel = cfg.relative_to(ROOT)
            name = str(rel).replace("/", "_")
            (out / "run" / f"{name}.json").write_text(_run(VDNNSIM + ["run", str(rel),
                                                                      "--json"]))
    if "validate" not in skip:
        (out / "validate").mkdir(exist_ok=True)
        for i, argv_ in enumerate(_validate_commands()):
            res = _run(VDNNSIM + ["validate", *argv_, "--json"])
            (out / "validate" / f"{i:03d}.txt").write_text(res)
    if "docs" not in skip:
        (out / "docs").mkdir(exist_ok=True)
        for i, cmd in enumerate(_doc_outputs()):
            line = re.sub(r"^(vdnnsim|python)\b",
                          lambda m: sys.executable + (" -m vdnnsim" if m.group(1) == "vdnnsim"
                                                      else ""), cmd)
            p = subprocess.run(["bash", "-c", line], cwd=ROOT, capture_output=True, text=True)
            (out / "docs" / f"{i:03d}.txt").write_text(
                f"$ {cmd}\n{p.stdout}\n--- stderr\n{p.stderr}\n--- rc {p.returncode}\n")
    if "fuzz" not in skip and args.fuzz_cases:
        from tests.test_fuzz import SEED
        root = f"/tmp/same_answers_fuzz_{os.getpid()}"
        procs = [subprocess.Popen([sys.executable, __file__, "--fuzz-part",
                                   f"{w},{args.fuzz_cases},{args.workers},{SEED}",
                                   f"{root}/w{w}", f"{root}.part{w}"], cwd=ROOT)
                 for w in range(args.workers)]
        if any(p.wait() for p in procs):
            raise SystemExit("a fuzz worker failed")
        lines = sorted((ln for w in range(args.workers)
                        for ln in Path(f"{root}.part{w}").read_text().splitlines()),
                       key=lambda s: json.loads(s)["case"])
        (out / "fuzz.jsonl").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if sys.argv[1:2] == ["--fuzz-part"]:
        a, b, c, d = (int(x) for x in sys.argv[2].split(","))
        _fuzz_part(a, b, c, d, sys.argv[3], sys.argv[4])
        sys.exit(0)
    sys.exit(main())
