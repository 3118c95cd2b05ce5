"""Running a campaign: cases in worker processes, each case in-process with a CPU-time
timeout (oracle.TIMER), and a watchdog that kills a worker stuck where that cannot reach
(C code, or waiting without using the CPU).

Workers are forked from the runner, which imports vdnnsim and its heavy dependencies
first, so a fresh worker costs a few milliseconds; a worker that timed out or crashed is
replaced, so that a half-finished case cannot leak into the next.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
import traceback
from collections import deque
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import wait
from typing import Any, Callable

from .generator import Case, generate
from .oracle import TIMEOUT_S, Finding, check, clear, execute, file_bytes

DETERMINISM_EVERY = 40  # every this many cases that exit 0 run twice and must agree
GRACE_S = 20.0  # past the timeout, the watchdog kills the worker (checks take time too)
# the watchdog's clock is the wall's: this many times the CPU timeout, so that a loaded
# machine's slow cases are left to the CPU timer
WATCHDOG_FACTOR = 6
MEMORY_LIMIT = 4 * 2**30  # address space per worker: an alias bomb fails instead of swapping


@dataclass
class Failure:
    seed: int
    index: int
    label: str
    kind: str
    sig: str
    detail: str
    elapsed: float = 0.0

    def line(self) -> str:
        return f"[{self.seed}:{self.index}] {self.label}: {self.sig} -- {self.detail[:200]}"


@dataclass
class Result:
    index: int
    label: str
    elapsed: float
    rc: Any
    findings: list[Finding] = field(default_factory=list)
    restart: bool = False


def preload() -> None:
    """Import what cases use, so that forked workers share it and no case pays for it (an
    import interrupted by the timeout would leave a half-made module behind)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import yaml  # noqa: F401

    import vdnnsim  # noqa: F401
    import vdnnsim.cli  # noqa: F401
    import vdnnsim.paper  # noqa: F401
    import vdnnsim.report.chrome  # noqa: F401
    import vdnnsim.report.figures  # noqa: F401
    import vdnnsim.report.plots  # noqa: F401
    import vdnnsim.report.table  # noqa: F401
    import vdnnsim.study.maxbatch  # noqa: F401
    import vdnnsim.measured.validate  # noqa: F401
    from vdnnsim.hardware import gpu_preset
    from vdnnsim.policies.registry import policy_names
    gpu_preset("k40")
    policy_names()
    try:
        import distributed  # noqa: F401
    except ImportError:
        pass


def run_one(case: Case, root: str, timeout: float = TIMEOUT_S,
            determinism: bool = False) -> Result:
    """Run and check one case in a fresh folder under ``root``."""
    folder = os.path.join(root, f"case{case.index}")
    clear(folder)
    try:
        o = execute(case, folder, timeout)
        findings = check(case, o, folder)
        if determinism and o.rc == 0 and not findings and not o.timed_out \
                and case.label not in ("plot",) and o.elapsed < 1.0:
            first = (o.stdout, o.after, repr(o.result.summary()) if hasattr(
                o.result, "summary") else None)
            clear(folder)
            o2 = execute(case, folder, timeout)
            second = (o2.stdout, o2.after, repr(o2.result.summary()) if hasattr(
                o2.result, "summary") else None)
            if not o2.timed_out and first != second:
                findings.append(Finding("wrong", "nondeterministic: two runs differ",
                                        "stdout, files or result differ between two runs"))
        return Result(case.index, case.label, o.elapsed, o.rc, findings,
                      restart=o.timed_out or bool(o.exc_type == "MemoryError"))
    finally:
        clear(folder)


def _worker(conn: Any, seed: int, root: str, timeout: float) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ValueError, OSError):
        pass
    # matplotlib, dask or a case could leave stray files in the working directory
    os.chdir(root)
    while True:
        try:
            index = conn.recv()
        except EOFError:
            return
        if index is None:
            return
        try:
            case = generate(seed, index)
            res = run_one(case, root, timeout, determinism=index % DETERMINISM_EVERY == 7)
        except BaseException as exc:  # noqa: BLE001 - a bug of the fuzzer itself
            res = Result(index, "?", 0.0, None,
                         [Finding("harness", f"fuzzer error {type(exc).__name__}",
                                  "".join(traceback.format_exception(exc))[-1500:])],
                         restart=True)
        conn.send(res)
        if res.restart:
            return


class _Worker:
    def __init__(self, ctx: Any, seed: int, root: str, timeout: float):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, seed, root, timeout), daemon=False)
        self.proc.start()
        child.close()
        self.index: int | None = None
        self.since = 0.0

    def send(self, index: int) -> None:
        self.index, self.since = index, time.monotonic()
        self.conn.send(index)

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def _context() -> Any:
    """Workers come from a fork server that has imported everything (tests.fuzz._preload):
    cheap to start, and not forked from a process whose threads (a test suite's torch or
    dask) could hold a lock. Spawn where there is no fork server."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload([f"{__package__}._preload"])
        return ctx
    return mp.get_context("spawn")


def run_campaign(seed: int, cases: int | list[int], workers: int = 2,
                 timeout: float = TIMEOUT_S, max_failures: int | None = None,
                 progress: Callable[[int, int, int], None] | None = None,
                 ) -> tuple[list[Failure], dict[str, Any]]:
    """Run cases ``range(cases)`` (or the given indices) of ``seed``. Returns the failures
    in case order and statistics (time per label, slowest cases)."""
    preload()
    indices = list(range(cases)) if isinstance(cases, int) else list(cases)
    root = tempfile.mkdtemp(prefix="vdnnsim-fuzz-")
    ctx = _context()
    pending = deque(indices)
    pool = [_Worker(ctx, seed, root, timeout) for _ in range(max(1, workers))]
    results: dict[int, Result] = {}
    failures = 0
    t0 = time.monotonic()
    try:
        while pending or any(w.index is not None for w in pool):
            for w in pool:
                if w.index is None and pending and (max_failures is None
                                                    or failures < max_failures):
                    w.send(pending.popleft())
            busy = [w for w in pool if w.index is not None]
            if not busy:
                break
            ready = wait([w.conn for w in busy], timeout=0.5)
            now = time.monotonic()
            for i, w in enumerate(pool):
                if w.index is None:
                    continue
                res: Result | None = None
                if w.conn in ready:
                    try:
                        res = w.conn.recv()
                    except (EOFError, OSError):
                        code = w.proc.exitcode
                        res = Result(w.index, generate(seed, w.index).label, now - w.since,
                                     None, [Finding("crash", f"worker died (exit {code})",
                                                    "the process running the case died")],
                                     restart=True)
                elif now - w.since > WATCHDOG_FACTOR * timeout + GRACE_S:
                    res = Result(w.index, generate(seed, w.index).label, now - w.since, None,
                                 [Finding("hang", "hang the timeout could not interrupt",
                                          f"killed after {now - w.since:.0f} s")],
                                 restart=True)
                if res is None:
                    continue
                results[w.index] = res
                failures += bool(res.findings)
                w.index = None
                if res.restart:
                    w.stop(kill=True)
                    pool[i] = _Worker(ctx, seed, root, timeout)
                if progress:
                    progress(len(results), len(indices), failures)
    finally:
        for w in pool:
            w.stop(kill=w.index is not None)
        shutil.rmtree(root, ignore_errors=True)
    out = [Failure(seed, r.index, r.label, f.kind, f.sig, f.detail, r.elapsed)
           for r in sorted(results.values(), key=lambda r: r.index) for f in r.findings]
    by_label: dict[str, list[float]] = {}
    for r in results.values():
        by_label.setdefault(r.label.split("/")[0], []).append(r.elapsed)
    stats = {"cases": len(results), "wall_s": time.monotonic() - t0,
             "failing_cases": failures,
             "by_label": {k: {"n": len(v), "total_s": round(sum(v), 2),
                              "mean_ms": round(1000 * sum(v) / len(v), 1)}
                          for k, v in sorted(by_label.items())},
             "slowest": sorted(((round(r.elapsed, 2), r.index, r.label)
                                for r in results.values()), reverse=True)[:10],
             "exit_codes": _count(r.rc for r in results.values())}
    return out, stats


def _count(xs: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in xs:
        out[str(x)] = out.get(str(x), 0) + 1
    return out


def group(failures: list[Failure]) -> dict[str, list[Failure]]:
    """Failures by cause (their signature), in order of first appearance."""
    out: dict[str, list[Failure]] = {}
    for f in failures:
        out.setdefault(f.sig, []).append(f)
    return out


def shrink(case: Case, sig: str, root: str, budget: int = 400,
           timeout: float = 5.0) -> Case:
    """A smaller case with the same failure: drop files, argument tokens, mapping keys and
    list items one at a time while the signature holds (greedy; ``budget`` runs)."""
    import copy

    from .generator import File

    runs = 0

    def same(c: Case) -> bool:
        nonlocal runs
        runs += 1
        try:
            res = run_one(c, root, timeout)
        except Exception:  # noqa: BLE001
            return False
        return any(f.sig == sig for f in res.findings)

    def candidates(c: Case):
        for rel in list(c.files):
            d = copy.deepcopy(c)
            del d.files[rel]
            yield d
        if c.argv:
            for i in range(len(c.argv)):
                d = copy.deepcopy(c)
                del d.argv[i]
                yield d
        for rel, f in c.files.items():
            if f.kind != "yaml":
                continue
            for path in _doc_paths(f.data):
                d = copy.deepcopy(c)
                parent = d.files[rel].data
                for p in path[:-1]:
                    parent = parent[p]
                if isinstance(parent, list):
                    del parent[path[-1]]
                else:
                    parent.pop(path[-1])
                yield d
            if isinstance(f.data, dict):  # small values instead of big ones
                for path in _doc_paths(f.data):
                    d = copy.deepcopy(c)
                    parent = d.files[rel].data
                    for p in path[:-1]:
                        parent = parent[p]
                    if isinstance(parent[path[-1]], (list, dict)) and parent[path[-1]]:
                        parent[path[-1]] = type(parent[path[-1]])()
                        yield d
        for rel, f in c.files.items():
            if f.kind == "text" and len(f.data) > 200:
                d = copy.deepcopy(c)
                d.files[rel] = File("text", f.data[: len(f.data) // 2])
                yield d

    best = case
    improved = True
    while improved and runs < budget:
        improved = False
        for cand in candidates(best):
            if runs >= budget:
                break
            if case_size(cand) < case_size(best) and same(cand):
                best, improved = cand, True
                break
    return best


def _doc_paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Paths to every key and item, shallow ones first."""
    out: list[tuple] = []
    items = (doc.items() if isinstance(doc, dict) else enumerate(doc)
             if isinstance(doc, list) else [])
    for k, v in items:
        out.append(prefix + (k,))
    for k, v in (doc.items() if isinstance(doc, dict) else enumerate(doc)
                 if isinstance(doc, list) else []):
        out.extend(_doc_paths(v, prefix + (k,)))
    return out


def case_size(case: Case) -> int:
    n = sum(len(file_bytes(f)) for f in case.files.values())
    return n + len(case.command())


def describe(case: Case, limit: int = 1500) -> str:
    """The case's input as text a person can read and replay."""
    lines = [f"seed {case.seed}, case {case.index} ({case.label})"]
    if case.mutations:
        lines.append("hostile: " + "; ".join(case.mutations)[:300])
    for rel, f in case.files.items():
        if f.kind == "dir":
            lines.append(f"--- {rel}/ (a folder)")
        elif f.kind == "symlink":
            lines.append(f"--- {rel} -> {f.data} (a symbolic link)")
        else:
            raw = file_bytes(f)
            text = raw.decode("utf-8", "backslashreplace")
            if len(text) > limit:
                text = text[:limit] + f"... ({len(raw)} bytes in all)"
            mode = " (mode 000)" if f.kind == "unreadable" else ""
            lines.append(f"--- {rel}{mode}\n{text.rstrip()}")
    lines.append(f"$ {case.command()}" if case.argv is not None else f">>> {case.command()}")
    return "\n".join(x if len(x) <= 240 else x[:200] + f"... ({len(x)} characters)"
                     for x in "\n".join(lines).splitlines())


def write_repro(case: Case, failure: Failure, out_dir: str) -> str:
    """A folder with the case's files and a script that replays it."""
    d = os.path.join(out_dir, f"{_slug(failure.sig)}-{case.seed}-{case.index}")
    os.makedirs(d, exist_ok=True)
    files = os.path.join(d, "files")
    clear(files)
    os.makedirs(files)
    from .oracle import materialize
    materialize(case, files)
    with open(os.path.join(d, "case.json"), "w") as fh:
        json.dump({**asdict(failure), "mutations": case.mutations, "command": case.command()},
                  fh, indent=2, default=str)
    if case.argv is not None:
        script = ("#!/bin/sh\n# replays the failure: run it from anywhere\n"
                  f"cd \"$(dirname \"$0\")/files\" && exec {case.command()}\n")
        name = "replay.sh"
    else:
        script = ("# replays the failure: python replay.py\nimport os, pathlib\nimport vdnnsim\n"
                  "import vdnnsim.network\n"
                  "os.chdir(pathlib.Path(__file__).parent / 'files')\n"
                  f"r = {case.command()}\nprint(r.summary() if hasattr(r, 'summary') else r)\n")
        name = "replay.py"
    p = os.path.join(d, name)
    with open(p, "w") as fh:
        fh.write(script)
    os.chmod(p, 0o755)
    return d


def _slug(s: str) -> str:
    out = "".join(c if c.isalnum() else "-" for c in s.lower())
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-")[:60]


def report(failures: list[Failure], seed: int, limit: int = 30,
           shrink_root: str | None = None) -> str:
    """Failures grouped by cause, each with its smallest input (shrunk further when
    ``shrink_root`` names a scratch folder; hangs and crashes are not shrunk)."""
    groups = group(failures)
    lines = [f"{len(failures)} failures in {len({f.index for f in failures})} cases, "
             f"{len(groups)} distinct causes (seed {seed})"]
    for sig, fs in list(groups.items())[:limit]:
        cases = {f.index: generate(f.seed, f.index) for f in fs[:200]}
        best = min(cases.values(), key=case_size)
        first = next(f for f in fs if f.index == best.index)
        lines.append("")
        idx = list(dict.fromkeys(f.index for f in fs))
        lines.append(f"== {sig}  ({len(idx)} cases, e.g. {', '.join(map(str, idx[:5]))})")
        lines.append(f"   {first.detail[:300]}")
        if shrink_root and first.kind not in ("hang", "crash"):
            small = shrink(best, sig, shrink_root)
            if small is not best:
                lines.append("   (shrunk)")
                best = small
        lines.append("   " + describe(best, 600).replace("\n", "\n   "))
        lines.append(f"   reproduce: python bench/fuzz.py --seed {seed} --case {best.index}")
    if len(groups) > limit:
        lines.append(f"... and {len(groups) - limit} more causes")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run bench/fuzz.py")
