"""``vdnnsim measure --repeat N``: one run measured in fresh processes, and their records
made one.

NOTE [repeated measurement]
One process's median step is one draw, not the run's time (fresh processes disagree:
docs/validation.md). So a run is measured in ``--warmup-processes K`` (default 1)
discarded processes, then N fresh ones, one after another (never two at once: they would
share the GPU and the host), each a child ``python -m vdnnsim measure ... --json`` with
the run's arguments (``child_argv``) and its allocator settings in its environment. The
run's record (``aggregate``) is the median of the processes' medians with their [min,
max] band, and the median of each memory and host field with its band; every process
must agree on whether the run fits, else ``fits`` is false and a warning says so.

``aggregate`` (pure, over the children's records) keeps every process's record and gives:
- ``iteration_ms``: the median of the processes' medians; ``iteration_ms_band``: their
  [min, max]; ``iteration_ms_spread``: (max - min) / median;
- ``peak_allocated_bytes``, ``peak_reserved_bytes``, ``reserved_one_step_bytes``,
  ``pinned_host_bytes``, ``host_issue_ms``, ``host_probe_ns`` and
  ``host_probe_between_ns``: the median over the processes, each with its ``_band``;
- ``repeat``: how many processes, the discarded ones' medians (marked ``discarded``),
  whether their fits agree.
Where the processes' medians spread by more than SPREAD_WARN, the record's ``warnings`` say
so (and that the step is host-bound where the host's issue time is most of it). Where the
processes disagree on fitting, ``repeat.fits_agree`` is false and the warning is on stderr
too. The parent imports no torch and never touches CUDA: the GPU is the children's. Ctrl-C
kills the running child; a ``--memory-history`` file, written by the last process under a
temporary name, is renamed into place only once every process has ended well.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError

# per process, what the aggregate keeps of each child's record
PER_PROCESS = ("fits", "error", "iteration_ms", "iteration_ms_all", "host_issue_ms",
               "host_issue_ms_all", "host_probe_ns", "host_probe_between_ns",
               "host_probe_steps_ns", "peak_allocated_bytes", "peak_reserved_bytes",
               "reserved_one_step_bytes", "pinned_host_bytes", "allocator", "phases",
               "memory_history")
# measured per process and made one by the median (with a band)
MEDIANS = ("iteration_ms", "host_issue_ms", "host_probe_ns", "host_probe_between_ns",
           "peak_allocated_bytes", "peak_reserved_bytes", "reserved_one_step_bytes",
           "pinned_host_bytes")
SPREAD_WARN = 0.10  # fresh processes agree within 6-8%
HOST_BOUND = 0.8  # the host's issue time at least this share of the step's: host-bound
# (vdnnsim validate splits its step-time errors by it)
BYTES = ("peak_allocated_bytes", "peak_reserved_bytes", "reserved_one_step_bytes",
         "pinned_host_bytes")


def child_argv(args: Any, cap_bytes: int | None, history: str | None = None) -> list[str]:
    """The arguments of one child ``vdnnsim measure`` of the run ``args`` describes, with
    ``--json`` and without ``--repeat``: the same run, measured once."""
    argv = ["measure", "--model", args.model, "--batch-size", str(args.batch_size),
            "--optimizer", args.optimizer, "--dtype", args.dtype,
            "--warmup", str(args.warmup), "--iters", str(args.iters)]
    for a in args.model_arg or []:
        argv += ["--model-arg", a]
    if args.input is not None:
        argv += ["--input", args.input]
    if args.seq_len is not None:
        argv += ["--seq-len", str(args.seq_len)]
    if args.plan:
        argv += ["--plan", args.plan]
    else:
        argv += ["--policy", args.policy]
    if cap_bytes:
        argv += ["--memory-cap", str(cap_bytes)]
    if history:
        argv += ["--memory-history", history]
    if getattr(args, "no_step_probe", False):
        argv += ["--no-step-probe"]
    if getattr(args, "optimizer_offload", False):
        argv += ["--optimizer-offload"]
    if getattr(args, "optimizer_pinning", "caching") != "caching":
        argv += ["--optimizer-pinning", args.optimizer_pinning]
    return argv + ["--json"]


def _median_band(values: list[float]) -> tuple[float, list[float]]:
    med = statistics.median(values)
    return med, [min(values), max(values)]


def aggregate(records: list[dict[str, Any]], discarded: list[dict[str, Any]] | None = None
              ) -> dict[str, Any]:
    """The run's record from its processes' records (each a
    ``vdnnsim measure --json`` record of the same run), and the discarded warm-up
    processes' (their medians are kept, marked)."""
    if not records:
        raise ValueError("no process records to aggregate")
    first = records[0]
    same = ("model", "batch_size", "policy", "memory_cap_bytes", "dtype", "optimizer")
    for k, r in enumerate(records[1:], 2):
        differ = [f for f in same if r.get(f) != first.get(f)]
        if differ:
            raise ValueError(f"process {k} measured another run ({', '.join(differ)} differ)")
    out = {k: v for k, v in first.items() if k not in PER_PROCESS and k != "warnings"}
    fits = [bool(r.get("fits")) for r in records]
    agree = len(set(fits)) == 1
    warnings = [w for r in records for w in r.get("warnings", [])]
    if not agree:
        warnings.append(f"the processes do not agree whether the run fits: {sum(fits)} of "
                        f"{len(fits)} fit; the run is recorded as not fitting")
    out["fits"] = all(fits)
    fitted = [r for r in records if r.get("fits")]
    for key in MEDIANS:
        values = [r[key] for r in fitted if isinstance(r.get(key), (int, float))]
        if not values:
            continue
        med, band = _median_band(values)
        if key in BYTES:
            med = int(med) if float(med).is_integer() else med
        out[key] = med
        out[f"{key}_band"] = band
    if "iteration_ms" in out:
        lo, hi = out["iteration_ms_band"]
        out["iteration_ms_spread"] = spread = (hi - lo) / out["iteration_ms"]
        if spread > SPREAD_WARN and len(fitted) > 1:
            host_bound = out.get("host_issue_ms", 0) >= HOST_BOUND * out["iteration_ms"]
            warnings.append(
                f"the {len(fitted)} processes' step times spread by {spread:.0%} ({lo:.1f} to "
                f"{hi:.1f} ms), more than fresh processes repeat to (6-8%)" +
                (": the step is host-bound, and the host's speed changed between processes "
                 "(docs/validation.md, 'How fast the host is'); the median is uncertain by "
                 "about as much, and more processes narrow it" if host_bound else ""))
    errors = [r["error"] for r in records if r.get("error")]
    if errors and not out["fits"]:
        out["error"] = errors[0]
    out["repeat"] = {
        "processes": len(records), "warmup_processes": len(discarded or []),
        "fits_agree": agree,
        "discarded": [{"iteration_ms": d.get("iteration_ms"), "fits": d.get("fits"),
                       "discarded": True} for d in discarded or []]}
    out["processes"] = [{k: r[k] for k in PER_PROCESS if k in r} for r in records]
    if warnings:
        out["warnings"] = warnings
    return out


def _one_line(text: str) -> str:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    last = lines[-1] if lines else "no message"
    return last.removeprefix("vdnnsim: error: ")[:300]


def run_child(argv: list[str], env: dict[str, str], what: str) -> dict[str, Any]:
    """One child ``vdnnsim measure``; its JSON record. Its stderr is passed on; a failure is
    one line; Ctrl-C (or any exception here) kills it before going on up."""
    p = subprocess.Popen([sys.executable, "-m", "vdnnsim", *argv], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate()
    except BaseException:
        p.kill()
        p.wait()
        raise
    if err:
        sys.stderr.write(err)
    if p.returncode == 130 or p.returncode == -signal.SIGINT:
        raise KeyboardInterrupt
    if p.returncode != 0:
        raise ConfigError(f"{what} failed (exit {p.returncode}): {_one_line(err)}")
    try:
        rec = json.loads(out)
    except json.JSONDecodeError:
        raise ConfigError(f"{what} printed no JSON record: {out.strip()[:200]!r}") from None
    if not isinstance(rec, dict):
        raise ConfigError(f"{what} printed no JSON record")
    return rec


def repeat(args: Any, cap_bytes: int | None, processes: int, warmups: int,
           env: dict[str, str], history: str | None = None,
           say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)
           ) -> dict[str, Any]:
    """The discarded processes, then ``processes`` fresh ones,
    one after another; ``history``: the last process records the allocator's history into
    that file (renamed into place only once all went well)."""
    head = f"{args.model} batch {args.batch_size} {args.plan and 'planned' or args.policy}"
    discarded = []
    for k in range(warmups):
        rec = run_child(child_argv(args, cap_bytes), env, f"warm-up process {k + 1}")
        discarded.append(rec)
        say(f"{head}: warm-up process {k + 1} of {warmups}: {_shown_ms(rec)} (discarded)")
    tmp = None
    if history:
        h = Path(history)
        tmp = str(h.parent / f".{h.name[:80]}.{secrets.token_hex(6)}.part")
    records = []
    try:
        for k in range(processes):
            last = k == processes - 1
            rec = run_child(child_argv(args, cap_bytes, tmp if last else None), env,
                        f"process {k + 1} of {processes}")
            records.append(rec)
            say(f"{head}: process {k + 1} of {processes}: {_shown_ms(rec)}")
        out = aggregate(records, discarded)
        if tmp and os.path.exists(tmp):  # none where the last process stopped before
            os.replace(tmp, history)
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
    for w in out.get("warnings", []):
        say(f"vdnnsim: warning: {w}")
    return out


def _shown_ms(rec: dict[str, Any]) -> str:
    if not rec.get("fits"):
        return "out of memory"
    return f"{rec['iteration_ms']:.1f} ms/iter"
