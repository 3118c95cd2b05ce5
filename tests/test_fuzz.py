"""The fuzzer in the test run: a fixed seed, 1,500 hostile inputs, NOTE [fuzz contract] on
each; `make fuzz` runs the full campaign, the first 10,000 cases of the same seed (of which
these 1,500 are the first), in about 1.5 minutes on 2 cores.

VDNNSIM_FUZZ_CASES sets the number of cases (make fuzz: 10000); VDNNSIM_FUZZ_SEED picks
another seed; VDNNSIM_FUZZ_WORKERS the number of worker processes (default: the CPU count,
at most 4; 1 inside a pytest-xdist worker, whose siblings already use the other cores);
VDNNSIM_FUZZ_MAX_FAILING how many failing cases end the run early (default 200).
A failure lists the causes found, each with its smallest input; replay one with
``python bench/fuzz.py --seed S --case I`` (add ``--out DIR`` for files and a script).
"""

from __future__ import annotations

import os
import signal

import pytest

from .fuzz.campaign import report, run_campaign

SEED = int(os.environ.get("VDNNSIM_FUZZ_SEED", "20240610"))
CASES = int(os.environ.get("VDNNSIM_FUZZ_CASES", "1500"))
_XDIST = "PYTEST_XDIST_WORKER" in os.environ
WORKERS = int(os.environ.get("VDNNSIM_FUZZ_WORKERS",
                             "1" if _XDIST else str(min(4, os.cpu_count() or 1))))
# Stop starting cases once this many have failed: enough to report, and a broken build
# with hundreds of 10 s hangs still ends in minutes.
MAX_FAILING = int(os.environ.get("VDNNSIM_FUZZ_MAX_FAILING", "200"))


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGPROF"), reason="the per-case timeout needs SIGPROF")
def test_fuzz_contract() -> None:
    failures, stats = run_campaign(SEED, CASES, WORKERS, max_failures=MAX_FAILING)
    assert stats["cases"] > 0
    if failures:
        raise AssertionError(
            f"{stats['failing_cases']} of {stats['cases']} fuzz cases break the contract "
            f"(seed {SEED}):\n\n" + report(failures, SEED, limit=25)
            + f"\n\nEvery cause, each input shrunk: python bench/fuzz.py --seed {SEED} "
            f"--cases {CASES} --shrink --out DIR")
