"""A fuzzing campaign against vdnnsim (NOTE [fuzz contract] in tests/fuzz/__init__.py).

    python bench/fuzz.py --seed 1 --cases 10000 --out /tmp/fuzz-failures
    python bench/fuzz.py --seed 1 --case 4711            # one case: its input and outcome

Prints the failures grouped by cause, each with its smallest input, and the time spent
per kind of case. With --out, every failing case becomes a folder DIR/<cause>-<seed>-<case>
holding its files, case.json (what failed) and replay.sh (or replay.py for an API call)
that replays it with the installed vdnnsim.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz.campaign import (Failure, describe, group, preload,  # noqa: E402
                                 report, run_campaign, run_one, write_repro)
from tests.fuzz.generator import generate  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=1000, help="cases 0 .. N-1")
    ap.add_argument("--start", type=int, default=0, help="first case index")
    ap.add_argument("--case", type=int, action="append", default=None,
                    help="run only this case (repeatable) and show it")
    ap.add_argument("--out", default=None, help="folder for the failing inputs")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per case")
    ap.add_argument("--max-failures", type=int, default=None,
                    help="stop starting cases after this many failing ones")
    ap.add_argument("--stats", default=None, help="write timing statistics as JSON here")
    ap.add_argument("--shrink", action="store_true",
                    help="shrink each cause's smallest input further before printing it")
    args = ap.parse_args(argv)

    if args.case:
        import tempfile
        preload()
        bad = 0
        for i in args.case:
            case = generate(args.seed, i)
            print(describe(case, 4000))
            with tempfile.TemporaryDirectory() as root:
                res = run_one(case, root, args.timeout)
                print(f"-> exit {res.rc} in {res.elapsed:.3f} s")
                for f in res.findings:
                    print(f"   FAIL {f.kind}: {f.sig}\n        {f.detail}")
                if args.shrink and res.findings and res.findings[0].kind not in ("hang",
                                                                                 "crash"):
                    from tests.fuzz.campaign import shrink
                    case = shrink(case, res.findings[0].sig, root)
                    print("shrunk to:\n" + describe(case, 4000))
            bad += bool(res.findings)
            if args.out and res.findings:
                f = res.findings[0]
                d = write_repro(case, Failure(args.seed, i, case.label, f.kind, f.sig,
                                              f.detail, res.elapsed), args.out)
                print(f"   wrote {d}")
        return 1 if bad else 0

    t0 = time.monotonic()
    last = [0.0]

    def progress(done: int, total: int, failing: int) -> None:
        now = time.monotonic()
        if now - last[0] > 5 or done == total:
            last[0] = now
            print(f"  {done}/{total} cases, {failing} failing, {now - t0:.0f} s",
                  file=sys.stderr, flush=True)

    indices = list(range(args.start, args.start + args.cases))
    failures, stats = run_campaign(args.seed, indices, args.workers, args.timeout,
                                   args.max_failures, progress)
    if args.stats:
        Path(args.stats).with_suffix(".failures.json").write_text(
            json.dumps([asdict(f) for f in failures], indent=1))
    if args.shrink:
        preload()
        import tempfile
        with tempfile.TemporaryDirectory() as scratch:
            print(report(failures, args.seed, limit=1000, shrink_root=scratch))
    else:
        print(report(failures, args.seed, limit=1000))
    print()
    print(f"{stats['cases']} cases in {stats['wall_s']:.1f} s with {args.workers} workers; "
          f"exit codes {stats['exit_codes']}")
    for label, s in stats["by_label"].items():
        print(f"  {label:22s} {s['n']:6d} cases  {s['total_s']:8.1f} s  {s['mean_ms']:8.1f} ms each")
    print("  slowest: " + ", ".join(f"{i} {lab} {t} s" for t, i, lab in stats["slowest"]))
    if args.stats:
        Path(args.stats).write_text(json.dumps(stats, indent=2))
    if args.out and failures:
        os.makedirs(args.out, exist_ok=True)
        seen = set()
        for f in failures:
            if (f.index, f.sig) in seen:
                continue
            seen.add((f.index, f.sig))
            write_repro(generate(f.seed, f.index), f, args.out)
        print(f"wrote {len(seen)} failing inputs to {args.out} "
              f"({len(group(failures))} causes)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
