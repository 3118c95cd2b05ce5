"""Engine speed in instructions, not milliseconds: what one ``run_trace`` of the benchmark's
cases costs, counted by valgrind's callgrind (NOTE [engine speed]). Wall time on the
two-core development machine swings about 2x within an hour for the same code (14 ms and
30 ms for one VGG-416 (32) iteration); the instruction count of a run repeats to about 2%.

Each case runs in a fresh process under callgrind, which counts only inside one call of
``functools.reduce`` that makes RUNS runs, after a warm run (``--collect-atstart=no
--toggle-collect=functools_reduce``): start-up, imports and the trace's build are never
counted. (Until 2026-12-05 two processes were counted whole and subtracted: a difference
of two counts of several billion, whose ~1% spread gave 10% on one run's count.)

    .venv/bin/python bench/engine_instructions.py [--tree PATH] [--runs 4]

``--tree`` counts another checkout (a git worktree of an older commit) with this
interpreter, for a before/after in one run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = [("vgg416", 32, "baseline_p"), ("vgg416", 32, "vdnn_all_m"),
         ("vgg416", 32, "vdnn_all_p"), ("vgg416", 32, "vdnn_conv_p"),
         ("vgg16", 256, "vdnn_dyn")]

RUNNER = """
import functools
import sys
from vdnnsim.api import build_trace, resolve_gpu, run_trace
net, batch, policy, k = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
gpu = resolve_gpu("k40")
trace = build_trace(net, batch, gpu)
run_trace(trace, gpu, policy)  # warm: the trace's cached analyses are built here
# counted: only inside this call (callgrind --toggle-collect=functools_reduce)
functools.reduce(lambda _, __: run_trace(trace, gpu, policy), range(k), None)
"""


def count(tree: Path, case: tuple[str, int, str], k: int, tmp: Path) -> int:
    out = tmp / "cg.out"
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        "--collect-atstart=no", "--toggle-collect=functools_reduce",
                        sys.executable, str(tmp / "runner.py"), case[0], str(case[1]), case[2],
                        str(k)], cwd=tree, env=env, capture_output=True, text=True)
    m = re.search(r"Collected : (\d+)", r.stderr)
    if r.returncode or not m:
        raise SystemExit(f"valgrind failed on {case}: {r.stderr.strip().splitlines()[-1:]}")
    return int(m.group(1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--runs", type=int, default=4)
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: nothing to count", file=sys.stderr)
        return 2
    tree = Path(args.tree).resolve()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "runner.py").write_text(RUNNER)
        print(f"{'network':8s} {'policy':12s} {'M instructions a run':>21s}")
        for case in CASES:
            n = count(tree, case, args.runs, tmp) / args.runs
            print(f"{case[0]:8s} {case[2]:12s} {n / 1e6:21.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
