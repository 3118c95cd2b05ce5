"""Running one case in-process and checking it against NOTE [fuzz contract].

The expectations are read from the inputs independently of vdnnsim's own parsing (plain
``yaml.safe_load`` and the rules of docs/configs.md, docs/studies.md, docs/metrics.md), so
that a wrong parse in vdnnsim shows as a disagreement instead of being copied.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import itertools
import json
import math
import os
import re
import shutil
import signal
import stat
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .generator import (DEFAULT_POLICIES, DTYPES, GPU_KEYS, POLICIES, PRESETS, ZOO_BATCH, Case,
                        File, dump)

TIMEOUT_S = 10.0  # CPU seconds a case may take (its process's, so a loaded machine is no slower)
# The per-case timeout counts the process's CPU time (SIGPROF), not the wall clock: a case
# that a busy machine runs slowly is not a hang; one stuck outside the CPU (a lock, a
# sleep) is left to the campaign's wall-clock watchdog.
TIMER, TIMER_SIGNAL = signal.ITIMER_PROF, signal.SIGPROF
ERROR_RE = re.compile(r"^vdnnsim(?: [a-z]+)?: error: ")
OPTION_KEYS = {"sync", "prefetch", "reading"}
READINGS = {"measured", "text"}


class CaseTimeout(BaseException):
    """Raised by the timer's signal inside a case that runs too long."""


@dataclass
class Finding:
    kind: str  # traceback | hang | exit | error-format | names-file | wrote | output | wrong | warning
    sig: str  # what groups findings of one cause
    detail: str = ""


@dataclass
class Outcome:
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    exc_type: str | None = None
    exc_msg: str = ""
    tb: str = ""
    where: str = ""  # innermost vdnnsim frame: file:line function
    timed_out: bool = False
    elapsed: float = 0.0
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    result: Any = None  # what an API call returned
    warns: list[tuple[str, str, str]] = field(default_factory=list)


# -- materializing and snapshotting a case folder -------------------------------------------

def materialize(case: Case, folder: str) -> None:
    for rel, f in case.files.items():
        p = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(p) or folder, exist_ok=True)
        if f.kind == "dir":
            os.makedirs(p, exist_ok=True)
        elif f.kind == "symlink":
            os.symlink(f.data, p)
        else:
            with open(p, "wb") as fh:
                fh.write(file_bytes(f))
            if f.kind == "unreadable":
                os.chmod(p, 0)


def file_bytes(f: File) -> bytes:
    if f.kind == "yaml":
        return dump(f.data).encode("utf-8")
    if f.kind == "json":
        return json.dumps(f.data, default=str).encode("utf-8")
    if f.kind in ("text", "unreadable"):
        return f.data.encode("utf-8", "surrogateescape")
    if f.kind == "bytes":
        return f.data
    return b""


def snapshot(folder: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(root, name)
            rel = os.path.relpath(p, folder)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                try:
                    with open(p, "rb") as fh:
                        digest = hashlib.sha1(fh.read()).hexdigest()
                except OSError:
                    digest = f"unreadable:{st.st_mtime_ns}"
                out[rel] = ("file", st.st_size, digest)
    return out


def clear(folder: str) -> None:
    for root, dirs, _ in os.walk(folder):
        for d in dirs:
            try:
                os.chmod(os.path.join(root, d), 0o755)
            except OSError:
                pass
    shutil.rmtree(folder, ignore_errors=True)


# -- running ----------------------------------------------------------------------------------

def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


def _where(tb: Any) -> str:
    frames = traceback.extract_tb(tb)
    mine = [f for f in frames if f"{os.sep}vdnnsim{os.sep}" in f.filename]
    f = (mine or frames or [None])[-1]
    if f is None:
        return "?"
    name = f.filename
    i = name.rfind(f"{os.sep}vdnnsim{os.sep}")
    short = name[i + 1:] if i >= 0 else os.path.basename(name)
    return f"{short}:{f.lineno} {f.name}"


def _convert(v: Any) -> Any:
    """Turn the markers of an API case into objects (inside the checked call)."""
    if isinstance(v, dict) and len(v) == 1:
        (k, x), = v.items()
        if k == "$path":
            return Path(x)
        if k == "$trace":
            import vdnnsim
            return vdnnsim.load_trace(x)
        if k == "$spec":
            from vdnnsim.network import load_network
            return load_network(x)
        if k == "$gpu":
            import vdnnsim
            return vdnnsim.gpu_preset(*x)
    return v


def call_api(api: dict[str, Any]) -> Any:
    import vdnnsim
    fn = getattr(vdnnsim, api["fn"])
    args = [_convert(a) for a in copy.deepcopy(api["args"])]
    kwargs = {k: _convert(v) for k, v in copy.deepcopy(api["kwargs"]).items()}
    return fn(*args, **kwargs)


def execute(case: Case, folder: str, timeout: float = TIMEOUT_S) -> Outcome:
    """Run ``case`` in ``folder`` (made here) and record everything the checks need."""
    import vdnnsim
    import vdnnsim.cli as cli

    os.makedirs(folder, exist_ok=True)
    materialize(case, folder)
    o = Outcome(before=snapshot(folder))
    out_b, err_b = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_b, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_b, encoding="utf-8", errors="backslashreplace",
                           write_through=True)
    cwd = os.getcwd()
    old = signal.signal(TIMER_SIGNAL, _alarm)
    t0 = time.process_time()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                os.chdir(folder)
                signal.setitimer(TIMER, timeout)
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    if case.argv is not None:
                        try:
                            o.rc = cli.main(list(case.argv))
                        except SystemExit as exc:
                            code = exc.code
                            if code is None:
                                o.rc = 0
                            elif isinstance(code, int):
                                o.rc = code
                            else:
                                print(code, file=err)
                                o.rc = 1
                    else:
                        try:
                            o.result = call_api(case.api or {})
                            o.rc = 0
                        except vdnnsim.VdnnError as exc:
                            o.rc = 2
                            o.stderr = f"vdnnsim: error: {exc}\n"
                signal.setitimer(TIMER, 0)
            except CaseTimeout as exc:
                o.timed_out = True
                o.where = _where(exc.__traceback__)
            except BaseException as exc:  # noqa: BLE001 - this is what the fuzzer looks for
                signal.setitimer(TIMER, 0)
                root = exc  # simpy re-raises a process's exception as the cause of a copy
                while root.__cause__ is not None and root.__cause__.__traceback__ is not None \
                        and f"{os.sep}simpy{os.sep}" in traceback.extract_tb(
                            root.__traceback__)[-1].filename:
                    root = root.__cause__
                o.exc_type = type(root).__name__
                o.exc_msg = str(root)[:500]
                o.tb = "".join(traceback.format_exception(exc))[-4000:]
                o.where = _where(root.__traceback__)
            o.warns = [(w.category.__name__, str(w.message)[:200],
                        f"{os.path.basename(w.filename)}:{w.lineno}") for w in caught]
    finally:
        signal.setitimer(TIMER, 0)
        signal.signal(TIMER_SIGNAL, old)
        os.chdir(cwd)
        o.elapsed = time.process_time() - t0  # CPU seconds, as the timeout counts
        if "matplotlib.pyplot" in __import__("sys").modules:
            import matplotlib.pyplot as plt
            plt.close("all")
    o.stdout = out_b.getvalue().decode("utf-8", "replace")
    if case.argv is not None:
        o.stderr = err_b.getvalue().decode("utf-8", "replace")
    o.after = snapshot(folder)
    return o


# -- what the documentation says a value may be ----------------------------------------------

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def byte_count(v: Any) -> int | None:
    """docs/trace-format.md 'Byte sizes'; None if the value is not a byte count."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v >= 0 else None
    if isinstance(v, float):
        if not math.isfinite(v) or v != int(v) or v < 0:
            return None
        return int(v)
    if isinstance(v, str):
        m = _SIZE_RE.match(v)
        if not m or m.group(2).lower() not in _UNITS:
            return None
        x = float(m.group(1)) * _UNITS[m.group(2).lower()]
        if not math.isfinite(x) or (not m.group(2) and x != int(x)):
            return None
        return int(round(x))
    return None


def positive_int(v: Any) -> int | None:
    """A batch size in a file: int >= 1, written as an integer, an integral float or a
    string that spells an integer in decimal or scientific notation ('2', '1e3', '1_000';
    the documented whole-number rule, docs/configs.md, NOTE [whole numbers])."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v >= 1 else None
    if isinstance(v, float) and math.isfinite(v) and v == int(v) and v >= 1:
        return int(v)
    if isinstance(v, str):
        from decimal import Decimal, InvalidOperation
        text = v.strip().replace("_", "")
        if not text.isascii() or len(text) > 100:
            return None
        try:
            d = Decimal(text)
        except (InvalidOperation, ValueError):
            return None
        if not d.is_finite() or d != d.to_integral_value() or d < 1 or d.adjusted() > 60:
            return None
        return int(d)
    return None


def bad_float(v: Any) -> str | None:
    if isinstance(v, bool):
        return "a boolean"
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return "not a number"
    if not math.isfinite(x):
        return "not finite"
    if x <= 0:
        return "not > 0"
    return None


def option_problems(opts: Any) -> list[str]:
    if opts is None:
        return []
    if not isinstance(opts, dict):
        return [f"policy_options {opts!r:.40} (not a mapping)"]
    out = []
    for k, v in opts.items():
        if k not in OPTION_KEYS:
            out.append(f"policy_options {k!r}: {v!r:.30} (an unknown option)")
        elif k in ("sync", "prefetch") and not isinstance(v, bool):
            out.append(f"policy_options {k}: {v!r:.30} (not a boolean)")
        elif k == "reading" and (not isinstance(v, str) or v not in READINGS):
            out.append(f"policy_options reading: {v!r:.30} (not measured or text)")
    return out


def gpu_problems(over: dict[str, Any]) -> list[str]:
    out = []
    for k, v in over.items():
        if v is None:  # a null is a key not given
            continue
        if k == "memory_bytes":
            if byte_count(v) is None:
                out.append(f"gpu.memory_bytes {v!r:.30} (not a byte count)")
        elif k == "link_latency_ns":
            if isinstance(v, bool):
                out.append(f"link_latency_ns {v!r:.30} (a boolean)")
            elif not (isinstance(v, str) and v.strip().isdigit()) and byte_count(v) is None:
                out.append(f"link_latency_ns {v!r:.30} (not an int >= 0)")
        elif k == "duplex":
            pass  # pydantic's lax booleans ('yes', 1) are fine
        elif k in GPU_KEYS:
            why = bad_float(v)
            if why:
                out.append(f"{k} {v!r:.30} ({why})")
    return out


def _preset_memory(name: Any) -> int | None:
    try:
        from vdnnsim.hardware import gpu_preset
        return gpu_preset(name).memory_bytes if name in PRESETS else None
    except Exception:  # noqa: BLE001
        return None


def resolve_network(net: Any, *folders: str) -> dict[str, Any] | None:
    """What a config's ``network`` names, read independently of vdnnsim."""
    if not isinstance(net, (str, os.PathLike)):
        return None
    net = os.fspath(net)
    if net in ZOO_BATCH:
        return {"kind": "zoo", "name": net, "batch": ZOO_BATCH[net], "torch7": True}
    for d in folders:
        try:
            p = Path(d) / net
            if not p.is_file():
                continue
            data = _yaml(p.read_text())
        except Exception:  # noqa: BLE001
            return None
        if not isinstance(data, dict):
            return None
        if "layers" in data and "input" in data and "format" not in data:
            return {"kind": "spec", "name": data.get("name"), "batch": data.get("batch_size"),
                    "torch7": True}
        src = data.get("source") if isinstance(data.get("source"), dict) else {}
        return {"kind": "trace", "name": data.get("name"), "batch": data.get("batch_size"),
                "dtype": data.get("dtype", "fp32"),
                "torch7": src.get("framework", "torch7") != "pytorch"}
    return None


# -- record checks ------------------------------------------------------------------------------

BYTE_KEYS = ("capacity_bytes", "peak_memory_bytes", "peak_footprint_bytes", "avg_memory_bytes",
             "weight_bytes", "offloaded_bytes", "prefetched_bytes", "peak_host_bytes")
TIME_KEYS = ("iteration_time_s", "oracle_time_s", "stall_time_s")


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        try:
            return float(v)
        except OverflowError:
            return math.inf
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _same(got: Any, want: Any) -> bool:
    """Equal as numbers: exactly for integers (a float has 53 bits), else to 1e-12."""
    if isinstance(got, int) and isinstance(want, int):
        return got == want
    g, w = _num(got), _num(want)
    return g is not None and w is not None and abs(g - w) <= 1e-12 * max(1.0, abs(w))


def check_record(rec: dict[str, Any], exp: dict[str, Any], lenient: bool = False) -> list[str]:
    """Problems with one result record (docs/metrics.md). ``exp`` holds what was asked
    (keys may be missing: not checked). ``lenient``: study rows, where pandas may turn
    integer columns into floats or strings."""
    p: list[str] = []

    def num(key: str) -> float | None:
        x = _num(rec.get(key))
        if x is None:
            p.append(f"{key} is {rec.get(key)!r:.40}, not a number")
        elif not math.isfinite(x):
            p.append(f"{key} is not finite ({rec.get(key)!r:.40})")
            return None
        return x

    v = {k: num(k) for k in BYTE_KEYS + TIME_KEYS}
    for k in BYTE_KEYS + TIME_KEYS:
        if v[k] is not None and v[k] < 0:
            p.append(f"{k} is negative ({rec.get(k)!r})")
    if not lenient:
        for k in BYTE_KEYS:
            if k != "avg_memory_bytes" and not (isinstance(rec.get(k), int)
                                                and not isinstance(rec.get(k), bool)):
                p.append(f"{k} is {type(rec.get(k)).__name__}, not int")
    peak, foot, avg, w = (v["peak_memory_bytes"], v["peak_footprint_bytes"],
                          v["avg_memory_bytes"], v["weight_bytes"])
    cap = v["capacity_bytes"]
    fits = rec.get("fits")
    if isinstance(fits, str):
        fits = {"True": True, "False": False, "true": True, "false": False}.get(fits, fits)
    if not isinstance(fits, bool):
        p.append(f"fits is {fits!r}, not a boolean")
    if None not in (peak, w) and peak < w:
        p.append(f"peak_memory_bytes {peak:.0f} < weight_bytes {w:.0f} (weights and their "
                 "gradients are always resident)")
    if None not in (peak, foot) and peak > foot:
        p.append(f"peak_memory_bytes {peak:.0f} > peak_footprint_bytes {foot:.0f}")
    if None not in (avg, peak) and avg > peak + 1:
        p.append(f"avg_memory_bytes {avg:.0f} > peak_memory_bytes {peak:.0f}")
    if fits is True and None not in (foot, cap) and foot > cap:
        p.append(f"fits, but peak_footprint_bytes {foot:.0f} > capacity_bytes {cap:.0f}")
    if fits is False and None not in (foot, cap) and foot <= cap:
        p.append(f"does not fit, but peak_footprint_bytes {foot:.0f} <= capacity_bytes "
                 f"{cap:.0f} (docs/metrics.md: above the capacity when it does not fit)")
    oom_t = rec.get("oom_tensor")
    oom_t = None if isinstance(oom_t, float) and math.isnan(oom_t) else oom_t
    if fits is True and oom_t is not None:
        p.append(f"fits but oom_tensor is {oom_t!r}")
    if fits is False and oom_t in (None, ""):
        p.append("does not fit but oom_tensor is empty")
    it, orc, stall = v["iteration_time_s"], v["oracle_time_s"], v["stall_time_s"]
    sd = rec.get("slowdown")
    sdv = _num(sd)
    if sdv is None or math.isnan(sdv):
        if orc not in (None, 0.0):
            p.append(f"slowdown is {sd!r} though oracle_time_s is {orc}")
    elif not math.isfinite(sdv):
        p.append(f"slowdown is {sd!r}")
    else:
        if exp.get("torch7") and sdv < 1 - 1e-9:
            p.append(f"slowdown {sdv} < 1: beats the oracle")
        if None not in (it, orc) and orc > 0 and abs(sdv - it / orc) > 1e-6 * max(1, sdv):
            p.append(f"slowdown {sdv} != iteration_time_s / oracle_time_s {it / orc}")
    if None not in (stall, it) and stall > it + 1e-9:
        p.append(f"stall_time_s {stall} > iteration_time_s {it}")
    off, pre, host = v["offloaded_bytes"], v["prefetched_bytes"], v["peak_host_bytes"]
    if None not in (off, pre) and pre > off:
        p.append(f"prefetched_bytes {pre:.0f} > offloaded_bytes {off:.0f}")
    opts = exp.get("options") if isinstance(exp.get("options"), dict) else {}
    if None not in (off, pre) and opts.get("sync", True) is True and pre != off \
            and exp.get("torch7"):
        p.append(f"sync: prefetched_bytes {pre:.0f} != offloaded_bytes {off:.0f}")
    if None not in (off, host) and host != off and exp.get("torch7"):
        p.append(f"peak_host_bytes {host:.0f} != offloaded_bytes {off:.0f}")
    pol = rec.get("policy")
    if "policy" in exp and pol != exp["policy"]:
        p.append(f"policy is {pol!r}, asked for {exp['policy']!r}")
    if pol in ("baseline_m", "baseline_p", "eager") and off not in (None, 0.0):
        p.append(f"{pol} offloaded {off:.0f} bytes")
    if pol in ("baseline_m", "baseline_p") and None not in (avg, peak) and abs(avg - peak) > 1:
        p.append(f"{pol}: avg_memory_bytes {avg:.0f} != peak {peak:.0f} (network-wide)")
    if pol == "baseline_p" and sdv is not None and math.isfinite(sdv) and abs(sdv - 1) > 1e-9:
        p.append(f"baseline_p slowdown {sdv} != 1 (it is the oracle)")
    notes = rec.get("notes")
    if pol != "vdnn_dyn" and notes not in ("", None) and not (
            isinstance(notes, float) and math.isnan(notes)):
        p.append(f"{pol} wrote notes {notes!r:.60}")
    b = rec.get("batch_size")
    bv = _num(b)
    if bv is not None and not math.isfinite(bv):
        p.append(f"batch_size is not finite ({b!r:.40})")
    elif bv is None or bv < 1 or bv != int(bv) or isinstance(b, bool) \
            or (not lenient and not isinstance(b, int)):
        p.append(f"batch_size is {b!r:.40}, not a positive int")
    elif exp.get("batch") is not None and not _same(b, exp["batch"]):
        p.append(f"batch_size {b!r} but {exp['batch']!r} was asked for")
    if exp.get("capacity") is not None and cap is not None \
            and not _same(rec.get("capacity_bytes"), exp["capacity"]):
        p.append(f"capacity_bytes {rec.get('capacity_bytes')!r:.60} but {exp['capacity']!r:.60} "
                 "was asked for")
    for k in ("gpu", "dtype", "network"):
        got = rec.get(k)
        if lenient and not isinstance(got, str) and got is not None:
            got = str(got)  # a CSV has no types: pandas reads the name 'true' back as True
            if got.lower() == str(exp.get(k)).lower():
                continue
        if exp.get(k) is not None and got != exp[k]:
            p.append(f"{k} is {rec.get(k)!r:.40}, expected {exp[k]!r:.40}")
    if exp.get("torch7"):
        for k in ("peak_memory_bytes", "weight_bytes"):
            x = rec.get(k)
            if isinstance(x, int) and not isinstance(x, bool) and x % 512:
                p.append(f"{k} {x} is not a multiple of 512")
        if None not in (avg, w, it) and it > 0 and avg + 1 < w:
            p.append(f"avg_memory_bytes {avg:.0f} < weight_bytes {w:.0f}")
    la, pk = _num(rec.get("layer_avg_memory_bytes")), _num(rec.get("peak_memory_bytes"))
    if None not in (la, pk) and math.isfinite(la) and la > pk + 1:  # NOTE [layer average]
        p.append(f"layer_avg_memory_bytes {la:.0f} > peak_memory_bytes {pk:.0f}")
    for k in ("peak_managed_bytes", "avg_managed_bytes", "layer_avg_managed_bytes"):
        base_k = {"peak_managed_bytes": "peak_memory_bytes",
                  "avg_managed_bytes": "avg_memory_bytes"}.get(k, "layer_avg_memory_bytes")
        x, base, wb = rec.get(k), rec.get(base_k), rec.get("weight_bytes")
        if all(isinstance(y, int) and not isinstance(y, bool) for y in (x, base, wb)):
            if abs(x - (base - wb)) > 1:
                p.append(f"{k} {x} != {base} - {wb}")
        elif None not in (_num(x), _num(base), _num(wb)) and abs(
                _num(x) - (_num(base) - _num(wb))) > 1 + 1e-9 * abs(_num(base)):
            p.append(f"{k} {x!r:.30} != {base!r:.30} - {wb!r:.30}")
    if fits is False:
        ot = _num(rec.get("oom_time_s"))
        if ot is None or not math.isfinite(ot) or ot < 0 or (it is not None and ot > it + 1e-9):
            p.append(f"oom_time_s {rec.get('oom_time_s')!r} outside the iteration")
    for issue in exp.get("invalid", []):
        p.append(f"accepted invalid input: {issue}")
    return p


def _invalid_sig(problem: str) -> str:
    """'accepted invalid input: KEY VALUE (why)' grouped by key and why."""
    rest = problem.removeprefix("accepted invalid input: ")
    key = rest.split(" ")[0]
    why = re.search(r"\(([^)]*)\)$", rest)
    return f"accepted invalid input: {key}" + (f" ({why.group(1)})" if why else "")


# -- expectations from the inputs ---------------------------------------------------------------

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml(text: str) -> Any:
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader)


def _load(path: str) -> Any:
    try:
        return _yaml(Path(path).read_text())
    except Exception:  # noqa: BLE001
        return _NOPE


_NOPE = object()


def config_expectations(cfg: Any, folder: str, cwd: str) -> dict[str, Any] | None:
    """Per policy: the expectation dict of a run config's records; None: not checkable."""
    if not isinstance(cfg, dict):
        return None
    net = resolve_network(cfg.get("network"), folder, cwd)
    exp: dict[str, Any] = {"invalid": []}
    if net:
        exp["torch7"] = net["torch7"]
        exp["network"] = net["name"] if isinstance(net.get("name"), str) else None
    if cfg.get("batch_size") is not None:
        b = positive_int(cfg["batch_size"])
        if b is None:
            exp["invalid"].append(f"batch_size {cfg['batch_size']!r:.40} (not an int >= 1)")
        exp["batch"] = b
    elif net:
        exp["batch"] = positive_int(net.get("batch"))
    gpu = cfg.get("gpu", "k40")
    over: dict[str, Any] = {}
    if isinstance(gpu, dict):
        over = {k: x for k, x in gpu.items() if k != "preset"}
        exp["invalid"] += gpu_problems(over)
        gpu = gpu.get("preset")
    exp["gpu"] = gpu if isinstance(gpu, str) else None
    if net and net["kind"] == "trace":
        exp["dtype"] = net.get("dtype") if net.get("dtype") in DTYPES else None
    else:
        exp["dtype"] = cfg.get("dtype", "fp32")
    if cfg.get("memory_bytes") is not None:
        exp["capacity"] = byte_count(cfg["memory_bytes"])
        if exp["capacity"] is None:
            exp["invalid"].append(f"memory_bytes {cfg['memory_bytes']!r:.40} (not a byte count)")
    elif "memory_bytes" in over:
        exp["capacity"] = byte_count(over["memory_bytes"])
    else:
        exp["capacity"] = _preset_memory(gpu)
    opts = cfg.get("policy_options")
    exp["invalid"] += option_problems(opts)
    exp["options"] = opts if isinstance(opts, dict) else {}
    return exp


def config_policies(cfg: dict[str, Any]) -> list[Any] | None:
    if cfg.get("policies"):
        return list(cfg["policies"]) if isinstance(cfg["policies"], list) else None
    if cfg.get("policy"):
        return [cfg["policy"]]
    return list(DEFAULT_POLICIES)


def is_study(data: Any) -> bool:
    return isinstance(data, dict) and bool({"sweep", "zip", "runs", "base"} & set(data))


def study_points(study: Any) -> list[dict[str, Any]] | None:
    """docs/studies.md: zip x sweep, then runs; a study with none is its base."""
    if not isinstance(study, dict):
        return None
    try:
        base = study.get("base") or {}
        sweep = study.get("sweep") or {}
        zipped = study.get("zip") or {}
        runs = study.get("runs") or []
        if not all(isinstance(x, dict) for x in (base, sweep, zipped)) \
                or not isinstance(runs, list):
            return None
        n = math.prod(len(v) for v in sweep.values()) if sweep else 1
        if n > 10**5:
            return None
        def given(d: dict) -> dict:  # docs/studies.md: null means "not set here"
            return {k: v for k, v in d.items() if v is not None}

        grid = [given(dict(zip(sweep, c))) for c in itertools.product(*sweep.values())]
        m = len(next(iter(zipped.values()))) if zipped else 1
        zips = [given({k: v[i] for k, v in zipped.items()}) for i in range(m)]
        base = given(base)
        points = [{**base, **z, **g} for z in zips for g in grid]
        if runs:
            explicit = [{**base, **given(r)} for r in runs]
            points = explicit if not (sweep or zipped) else points + explicit
        if not points or not any(points):
            points = [dict(base)]
        return points
    except Exception:  # noqa: BLE001
        return None


def point_expectations(point: dict[str, Any], folder: str, cwd: str) -> dict[str, Any]:
    net = resolve_network(point.get("network"), folder, cwd)
    exp: dict[str, Any] = {"invalid": []}
    if net:
        exp["torch7"] = net["torch7"]
        exp["network"] = net["name"] if isinstance(net.get("name"), str) else None
    if point.get("batch_size") is not None:
        b = positive_int(point["batch_size"])
        if b is None:
            exp["invalid"].append(f"batch_size {point['batch_size']!r:.40} (not an int >= 1)")
        exp["batch"] = b
    elif net:
        exp["batch"] = positive_int(net.get("batch"))
    exp["policy"] = point.get("policy", "baseline_p")
    gpu = point.get("gpu", "k40")
    over = {k: point[k] for k in GPU_KEYS if k in point}
    if isinstance(gpu, dict):
        over = {**{k: x for k, x in gpu.items() if k != "preset"}, **over}
        gpu = gpu.get("preset")
    exp["invalid"] += gpu_problems(over)
    exp["gpu"] = gpu if isinstance(gpu, str) else None
    if net and net["kind"] == "trace":
        exp["dtype"] = net.get("dtype") if net.get("dtype") in DTYPES else None
    else:
        exp["dtype"] = point.get("dtype", "fp32")
    if point.get("memory_bytes") is not None:
        exp["capacity"] = byte_count(point["memory_bytes"])
        if exp["capacity"] is None:
            exp["invalid"].append(f"memory_bytes {point['memory_bytes']!r:.40} "
                                  "(not a byte count)")
    elif over.get("memory_bytes") is not None:
        exp["capacity"] = byte_count(over["memory_bytes"])
    else:
        exp["capacity"] = _preset_memory(gpu)
    opts = point.get("policy_options")
    exp["invalid"] += option_problems(opts)
    exp["options"] = opts if isinstance(opts, dict) else {}
    if not isinstance(point.get("network"), str):
        exp["invalid"].append(f"network {point.get('network')!r:.40} (not a string)")
    return exp


def check_rows(rows: list[dict[str, Any]], points: list[dict[str, Any]] | None, folder: str,
               where: str, cwd: str) -> list[Finding]:
    """``folder``: the study's (relative networks are looked up there first); ``cwd``:
    the folder the command ran in (then there)."""
    out: list[Finding] = []
    if points is not None and len(rows) != len(points):
        out.append(Finding("wrong", f"{where}: row count", f"{len(rows)} rows for "
                           f"{len(points)} runs"))
        points = None
    for i, row in enumerate(rows):
        err = row.get("error")
        if err not in (None, "") and not (isinstance(err, float) and math.isnan(err)):
            continue
        exp = point_expectations(points[i], folder, cwd) if points is not None else {}
        for problem in check_record(row, exp, lenient=True):
            out.append(Finding("wrong", f"wrong: {_template(problem)}",
                               f"{where} row {i}: {problem}"))
    return out


# -- the contract -------------------------------------------------------------------------------

def _template(msg: str) -> str:
    """A message with its particulars masked, to group findings of one kind."""
    if msg.startswith("accepted invalid input: "):
        return _invalid_sig(msg)
    msg = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", msg)
    msg = re.sub(r"\b\d[\d.e+-]*\b", "N", msg)
    msg = re.sub(r"[\w./-]*\.(ya?ml|json|csv|parquet|png|svg|pdf)\b", "FILE", msg)
    return msg[:90]


def _coarse(msg: str) -> str:
    """The first words of an error message, particulars masked."""
    msg = _template(msg)
    for name in sorted(POLICIES + PRESETS, key=len, reverse=True):
        msg = msg.replace(name, "NAME")
    msg = re.sub(r"\(.*", "", msg)
    return " ".join(msg.split()[:5])


_PARSER: list[Any] = []


def parse_argv(argv: list[str]) -> Any:
    """What vdnnsim's own parser makes of the arguments (None: it refuses them)."""
    if not _PARSER:
        from vdnnsim.cli import build_parser
        _PARSER.append(build_parser())
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return _PARSER[0].parse_args(argv)
    except SystemExit:
        return None


def declared_outputs(args: Any) -> list[str]:
    if args is None:
        return []
    outs = []
    cmd = getattr(args, "command", None)
    if cmd in ("trace", "sweep", "plot", "profile") and args.output not in (None, "-"):
        outs.append(args.output)
    if cmd == "run" and args.chrome_trace:
        outs.append(args.chrome_trace)
    if cmd == "reproduce" and args.output:
        outs.append(args.output)
    return outs


def _norm(folder: str, p: str) -> str:
    return os.path.relpath(os.path.normpath(os.path.join(folder, p)), folder)


def check(case: Case, o: Outcome, folder: str) -> list[Finding]:
    f: list[Finding] = []
    if o.timed_out:
        return [Finding("hang", f"hang: {case.label}", f"over {TIMEOUT_S:.0f} s, "
                        f"interrupted at {o.where}; {'; '.join(case.mutations)[:200]}")]
    if o.exc_type:
        return [Finding("traceback", f"{o.exc_type} at {o.where}",
                        f"{o.exc_type}: {o.exc_msg[:300]}")]
    for cat, msg, loc in o.warns:
        if cat == "RuntimeWarning" or "vdnnsim" in loc or cat == "UserWarning":
            f.append(Finding("warning", f"{cat} at {loc}: {_template(msg)[:60]}", msg))
    if "Traceback (most recent call last)" in o.stderr:
        f.append(Finding("traceback", "traceback text on stderr", o.stderr[-300:]))
    if case.api is not None:
        f += check_api(case, o, folder)
        if o.after != o.before:
            f.append(Finding("wrote", "API call changed the folder",
                             _diff(o.before, o.after)))
        return f
    args = parse_argv(case.argv or [])
    helped = any(a in ("-h", "--help") for a in case.argv or [])
    if o.rc not in (0, 2):
        f.append(Finding("exit", f"exit code {o.rc}", o.stderr[-300:]))
        return f
    if o.rc == 2:
        lines = o.stderr.splitlines()
        if len(lines) != 1 or not o.stderr.endswith("\n"):
            f.append(Finding("error-format", "exit 2: stderr is not exactly one line",
                             repr(o.stderr[:300])))
        elif not ERROR_RE.match(lines[0]):
            f.append(Finding("error-format", "exit 2: no 'vdnnsim: error:' prefix",
                             lines[0][:300]))
        if o.stdout:
            f.append(Finding("error-format", "exit 2: something on stdout",
                             o.stdout[:200]))
        if o.after != o.before:
            f.append(Finding("wrote", "exit 2: files written or changed",
                             _diff(o.before, o.after)))
        about_an_option = bool(lines) and re.sub(r"^vdnnsim[\w ]*: error: (argument )?", "",
                                                 lines[0]).startswith("-")
        if case.in_files and not case.in_argv and lines and not about_an_option:
            names = set()
            for rel in case.files:
                names.add(rel)
                names.add(os.path.basename(rel.rstrip("/")))
            if not any(n and n in lines[0] for n in names):
                msg = lines[0].removeprefix("vdnnsim: error: ")
                f.append(Finding("names-file", f"error names no file: {_coarse(msg)}",
                                 lines[0][:300]))
        return f
    # exit code 0
    if args is None and not helped:
        f.append(Finding("exit", "exit 0 though argparse refuses the arguments",
                         " ".join(case.argv or [])))
        return f
    outs = [] if helped else declared_outputs(args)
    allowed = {_norm(folder, x) for x in outs}
    changed = {k for k in set(o.before) | set(o.after) if o.before.get(k) != o.after.get(k)}
    stray = {k for k in changed if not any(k == a or k.startswith(a + os.sep) for a in allowed)}
    if stray:
        f.append(Finding("wrote", "exit 0: files written that were not asked for",
                         ", ".join(sorted(stray))[:300]))
    if helped:
        return f
    for x in outs:
        p = os.path.join(folder, _norm(folder, x))
        if not os.path.exists(p):
            f.append(Finding("output", f"exit 0 but {args.command} did not write "
                             f"{'--chrome-trace' if args.command == 'run' else '-o'}",
                             x))
    f += check_command(case, args, o, folder)
    return f


def _diff(before: dict[str, Any], after: dict[str, Any]) -> str:
    parts = []
    for k in sorted(set(before) | set(after)):
        if before.get(k) != after.get(k):
            parts.append(f"{k}: {'new' if k not in before else 'gone' if k not in after else 'changed'}")
    return ", ".join(parts)[:300]


def check_command(case: Case, args: Any, o: Outcome, folder: str) -> list[Finding]:
    cmd = args.command
    f: list[Finding] = []
    try:
        if cmd == "run":
            cfg_path = os.path.join(folder, args.config)
            data = _load(cfg_path)
            cfg_dir = os.path.dirname(cfg_path)
            if args.chrome_trace and os.path.isfile(os.path.join(folder, args.chrome_trace)):
                f += chrome_problems(Path(folder, args.chrome_trace))
            if not args.json:
                if not o.stdout.strip():
                    f.append(Finding("output", "run printed no table"))
                return f
            try:
                records = json.loads(o.stdout)
            except ValueError as exc:
                return [Finding("output", "run --json printed no JSON", str(exc)[:200])]
            if not isinstance(records, list):
                return [Finding("output", "run --json printed no list")]
            if data is _NOPE:
                return f
            if is_study(data):
                f += check_rows(records, study_points(data), cfg_dir, "run STUDY --json",
                                folder)
                return f
            exp = config_expectations(data, cfg_dir, folder)
            pols = config_policies(data) if isinstance(data, dict) else None
            if pols is not None and [r.get("policy") for r in records] != pols:
                f.append(Finding("wrong", "wrong: policies in the records differ from the "
                                 "config's", f"{[r.get('policy') for r in records]} vs {pols}"))
            for r in records:
                e = dict(exp or {})
                e["policy"] = r.get("policy") if pols is None else e.get("policy", r.get("policy"))
                for problem in check_record(r, e):
                    f.append(Finding("wrong", f"wrong: {_template(problem)}",
                                     f"{r.get('policy')}: {problem}"))
            f += [Finding("wrong", f"wrong: {title}", detail)
                  for title, detail in dyn_problems(records)]
            if case.index % DIFFERENTIAL_EVERY == 0:
                f += differential(folder, args.config, records)
        elif cmd == "sweep":
            data = _load(os.path.join(folder, args.study))
            points = (study_points(data) if is_study(data) else
                      [{"policy": p} for p in (config_policies(data) or [])]
                      if isinstance(data, dict) else None)
            if points is not None and not is_study(data) and isinstance(data, dict):
                base = {k: data[k] for k in ("network", "batch_size", "gpu", "dtype",
                                             "policy_options", "memory_bytes")
                        if data.get(k) is not None}  # docs/configs.md: null is not set
                points = [{**base, **p} for p in points]
            if args.output and os.path.isfile(os.path.join(folder, args.output)):
                import pandas as pd
                p = os.path.join(folder, args.output)
                try:  # through a file object: pyarrow cannot encode a non-UTF-8 name
                    with open(p, "rb") as fh:
                        df = pd.read_csv(fh) if p.endswith(".csv") else pd.read_parquet(fh)
                except Exception as exc:  # noqa: BLE001
                    return [Finding("output", f"sweep output does not parse ({type(exc).__name__})",
                                    str(exc)[:200])]
                rows = json.loads(df.to_json(orient="records"))
                f += check_rows(rows, points, os.path.dirname(os.path.join(folder, args.study)),
                                f"sweep -o {os.path.splitext(p)[1]}", folder)
        elif cmd == "trace":
            from vdnnsim.errors import VdnnError
            from vdnnsim.trace import trace_from_dict
            text = o.stdout if args.output == "-" else (
                Path(folder, args.output).read_text() if os.path.isfile(
                    os.path.join(folder, args.output)) else None)
            if text is None or len(text) > 2_000_000:  # reading back costs more than the case
                return f
            try:
                t = trace_from_dict(_yaml(text), "written trace")
            except (VdnnError, yaml.YAMLError) as exc:
                return [Finding("output", "the written trace does not load back",
                                str(exc)[:300])]
            if args.batch_size is not None and t.batch_size != args.batch_size:
                f.append(Finding("wrong", "wrong: trace batch size differs from -b",
                                 f"{t.batch_size} vs {args.batch_size}"))
            if not (isinstance(t.batch_size, int) and t.batch_size >= 1):
                f.append(Finding("wrong", "wrong: trace batch size not a positive int",
                                 repr(t.batch_size)))
        elif cmd == "maxbatch":
            if args.json:
                rows = json.loads(o.stdout)
                want = len(args.network) * len(args.gpu or ["k40"]) * len(args.policy or [1])
                if len(rows) != want:
                    f.append(Finding("wrong", "wrong: maxbatch row count", f"{len(rows)}"))
                for r in rows:
                    f += [Finding("wrong", f"wrong: maxbatch: {_template(x)}", x)
                          for x in check_maxbatch(r, args)]
        elif cmd == "plot":
            p = Path(folder, args.output)
            if p.is_file():
                head = p.read_bytes()[:200]
                ok = {".png": head.startswith(b"\x89PNG"), ".pdf": head.startswith(b"%PDF"),
                      ".svg": b"<svg" in p.read_bytes()[:2000] or b"<?xml" in head}
                if not ok.get(p.suffix, False):
                    f.append(Finding("output", "plot wrote no image of its suffix", str(head[:20])))
        elif cmd == "validate" and args.json:
            d = json.loads(o.stdout)
            if not isinstance(d, dict) or not d.get("runs"):
                f.append(Finding("output", "validate --json printed no runs"))
        elif cmd == "list":
            if not o.stdout.strip():
                f.append(Finding("output", "list printed nothing"))
        elif cmd == "reproduce" and args.output:
            d = Path(folder, args.output)
            if not (d / "reproduction.md").is_file():
                f.append(Finding("output", "reproduce -o wrote no reproduction.md"))
    except Exception as exc:  # noqa: BLE001 - a check that cannot read the output
        f.append(Finding("output", f"{cmd}: output unreadable ({type(exc).__name__})",
                         str(exc)[:200]))
    return f


DIFFERENTIAL_EVERY = 4
COMPARED = ("network", "batch_size", "dtype", "gpu", "policy", "fits", "capacity_bytes",
            "peak_memory_bytes", "peak_footprint_bytes", "avg_memory_bytes", "weight_bytes",
            "iteration_time_s", "oracle_time_s", "offloaded_bytes", "prefetched_bytes",
            "stall_time_s", "oom_tensor", "notes")


def chrome_problems(path: Path) -> list[Finding]:
    """A --chrome-trace file: strict JSON (no NaN), a list of events (or an object holding
    one as ``traceEvents``), each with a phase ``ph`` and finite, non-negative ``ts`` and
    ``dur`` where it has them."""
    def no_constant(name: str) -> Any:
        raise ValueError(f"non-finite number {name}")
    try:
        data = json.loads(path.read_text(), parse_constant=no_constant)
    except ValueError as exc:
        return [Finding("output", "chrome trace is not JSON", str(exc))]
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        return [Finding("output", "chrome trace holds no list of events")]
    for e in events:
        if not isinstance(e, dict) or "ph" not in e:
            return [Finding("output", "chrome trace event without a phase", str(e)[:80])]
        for k in ("ts", "dur"):
            v = e.get(k, 0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                return [Finding("output", f"chrome trace event with a bad {k}", repr(v))]
    return []


def dyn_problems(records: list[Any]) -> list[tuple[str, str]]:
    """docs/policies.md, vdnn_dyn, held against the other policies of the same run: it fits
    exactly when vdnn_all_m fits; when it fits, step 2 takes the first of no offload
    (eager), vdnn_conv_p and vdnn_all_p that fits, with that policy's numbers."""
    by = {r.get("policy"): r for r in records if isinstance(r, dict)}
    dyn, allm = by.get("vdnn_dyn"), by.get("vdnn_all_m")
    if not dyn or not allm:
        return []
    if dyn.get("fits") != allm.get("fits"):
        return [("vdnn_dyn and vdnn_all_m disagree on fitting",
                 f"vdnn_dyn fits={dyn.get('fits')}, vdnn_all_m fits={allm.get('fits')} "
                 f"({dyn.get('notes')!r})")]
    if not allm.get("fits"):
        return []
    for cand, what in (("eager", "offload none"), ("vdnn_conv_p", "offload conv"),
                       ("vdnn_all_p", "offload all")):
        c = by.get(cand)
        if c is None:
            return []
        if c.get("fits"):
            want = f"step 2: fastest algorithms, {what}"
            if dyn.get("notes") != want:
                return [("vdnn_dyn skips the first step-2 plan that fits",
                         f"{cand} fits, so vdnn_dyn should say {want!r}, not {dyn.get('notes')!r}")]
            if (c.get("iteration_time_s"), c.get("peak_memory_bytes")) != (
                    dyn.get("iteration_time_s"), dyn.get("peak_memory_bytes")):
                return [("vdnn_dyn's step-2 numbers differ from the plan it took",
                         f"vdnn_dyn took {what}, its numbers differ from {cand}'s")]
            return []
    return []


def differential(folder: str, config: str, records: list[dict[str, Any]]) -> list[Finding]:
    """docs/studies.md: a plain run config is a study too. ``vdnnsim.sweep`` of the same
    file, from the same folder, must give the records ``vdnnsim run --json`` printed."""
    import vdnnsim
    cwd = os.getcwd()
    old = signal.signal(TIMER_SIGNAL, _alarm)
    try:
        os.chdir(folder)
        signal.setitimer(TIMER, TIMEOUT_S)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = json.loads(vdnnsim.sweep(config).to_json(orient="records"))
    except CaseTimeout:
        return [Finding("hang", "hang: sweep of a run config (differential)")]
    except vdnnsim.VdnnError as exc:
        return [Finding("wrong", "differential: run CONFIG works, vdnnsim.sweep(CONFIG) "
                        "raises", str(exc)[:200])]
    except Exception as exc:  # noqa: BLE001
        return [Finding("traceback", f"{type(exc).__name__} in vdnnsim.sweep(CONFIG) "
                        "(differential)", str(exc)[:200])]
    finally:
        signal.setitimer(TIMER, 0)
        signal.signal(TIMER_SIGNAL, old)
        os.chdir(cwd)
    if len(rows) != len(records):
        return [Finding("wrong", "differential: sweep(CONFIG) row count differs from run",
                        f"{len(rows)} rows, {len(records)} records")]
    out = []
    for rec, row in zip(records, rows):
        if row.get("error"):
            out.append(Finding("wrong", "differential: run CONFIG works, its sweep row fails",
                               str(row["error"])[:200]))
            continue
        for k in COMPARED:
            a, b = rec.get(k), row.get(k)
            if a != b and not (_num(a) is not None and _num(b) is not None
                               and abs(_num(a) - _num(b)) <= 1e-9 * max(1.0, abs(_num(a)))):
                out.append(Finding("wrong", f"differential: run and sweep disagree on {k}",
                                   f"{rec.get('policy')}: run {a!r:.60}, sweep {b!r:.60}"))
    return out


def check_maxbatch(r: dict[str, Any], args: Any) -> list[str]:
    p = []
    m = r.get("max_batch_size")
    if not isinstance(m, int) or isinstance(m, bool) or m < 0:
        return [f"max_batch_size {m!r}"]
    if args.limit < 1:
        p.append(f"--limit {args.limit} accepted (no batch size is at most that)")
    elif m > args.limit:
        p.append(f"max_batch_size {m} above --limit {args.limit}")
    if m:
        sd, peak, cap = r.get("slowdown"), r.get("peak_memory_bytes"), r.get("capacity_bytes")
        if isinstance(sd, (int, float)) and sd < 1 - 1e-9:
            p.append(f"slowdown {sd} < 1")
        if isinstance(peak, (int, float)) and isinstance(cap, (int, float)) and peak > cap:
            p.append(f"the answer does not fit: peak {peak} > capacity {cap}")
    if not isinstance(r.get("simulations"), int) or r["simulations"] < 1:
        p.append(f"simulations {r.get('simulations')!r}")
    return p


# -- the Python API -----------------------------------------------------------------------------

def check_api(case: Case, o: Outcome, folder: str) -> list[Finding]:
    api = case.api or {}
    fn, args, kwargs = api.get("fn"), api.get("args", []), api.get("kwargs", {})
    if o.rc != 0:
        return []
    res = o.result
    f: list[Finding] = []

    def wrong(problem: str) -> None:
        f.append(Finding("wrong", f"wrong: {_template(problem)}", f"{fn}: {problem}"))

    try:
        if fn in ("simulate", "run_trace"):
            from vdnnsim import RunResult
            if not isinstance(res, RunResult):
                return [Finding("wrong", f"wrong: {fn} returned {type(res).__name__}")]
            exp = api_expectations(fn, args, kwargs, folder)
            for problem in check_record(res.summary(), exp):
                wrong(problem)
        elif fn == "sweep":
            import pandas as pd
            if not isinstance(res, pd.DataFrame):
                return [Finding("wrong", f"wrong: sweep returned {type(res).__name__}")]
            study = args[0] if args else None
            if isinstance(study, dict) and "$path" in study:
                study = study["$path"]
            if isinstance(study, str):
                study = _load(os.path.join(folder, study))
            points = study_points(study) if is_study(study) else None
            rows = json.loads(res.to_json(orient="records"))
            f += check_rows(rows, points, folder, "vdnnsim.sweep", folder)
        elif fn in ("build_trace", "load_trace"):
            b = res.batch_size
            if isinstance(b, bool) or not isinstance(b, int) or b < 1:
                wrong(f"trace batch_size {b!r:.40}")
            want = args[1] if fn == "build_trace" and len(args) > 1 else None
            if want is not None and b != want:
                wrong(f"trace batch_size {b!r:.40} but {want!r:.40} was asked for")
            for t in res.tensors.values():
                if isinstance(t.size_bytes, bool) or not isinstance(t.size_bytes, int) \
                        or t.size_bytes < 0:
                    wrong(f"tensor size {t.size_bytes!r:.40}")
                    break
            if res.dtype not in DTYPES:
                wrong(f"trace dtype {res.dtype!r}")
        elif fn == "gpu_preset":
            g = res
            for k, x in (("memory_bytes", g.memory_bytes),
                         ("mem_bw_bytes_per_s", g.mem_bw_bytes_per_s),
                         ("h2d", g.link.h2d_bw_bytes_per_s), ("d2h", g.link.d2h_bw_bytes_per_s),
                         *((f"peak_flops[{d}]", v) for d, v in g.peak_flops.items())):
                if bad_float(x) and not (k == "memory_bytes" and x == 0):
                    wrong(f"GPU {k} = {x!r:.40} ({bad_float(x)})")
            if isinstance(g.link.latency_ns, bool) or not isinstance(g.link.latency_ns, int) \
                    or g.link.latency_ns < 0:
                wrong(f"GPU latency_ns = {g.link.latency_ns!r:.40}")
            if not isinstance(g.memory_bytes, int) or isinstance(g.memory_bytes, bool):
                wrong(f"GPU memory_bytes = {g.memory_bytes!r:.40}")
            over = args[1] if len(args) > 1 else None
            if isinstance(over, dict):
                for issue in gpu_problems(over):
                    wrong(f"accepted invalid input: {issue}")
    except Exception as exc:  # noqa: BLE001 - the result itself misbehaves
        f.append(Finding("traceback", f"{type(exc).__name__} reading the API result",
                         str(exc)[:300]))
    return f


def api_expectations(fn: str, args: list[Any], kwargs: dict[str, Any],
                     folder: str) -> dict[str, Any]:
    exp: dict[str, Any] = {"invalid": []}
    if fn == "simulate":
        net = args[0] if args else kwargs.get("network")
        if isinstance(net, dict) and len(net) == 1:
            net = next(iter(net.values()))
        info = resolve_network(net, folder)
        if info:
            exp["torch7"] = info["torch7"]
            exp["network"] = info["name"] if isinstance(info.get("name"), str) else None
        b = kwargs.get("batch_size")
        if b is not None:
            if positive_int(b) is None or not isinstance(b, int):
                exp["invalid"].append(f"batch_size {b!r:.40} (not an int >= 1)")
            exp["batch"] = positive_int(b)
        elif info:
            exp["batch"] = positive_int(info.get("batch"))
        exp["policy"] = kwargs.get("policy", "baseline_p")
        gpu = kwargs.get("gpu", "k40")
        over = kwargs.get("gpu_overrides")
        if isinstance(over, dict):
            exp["invalid"] += gpu_problems(over)
        if isinstance(gpu, dict):
            gpu, gover = gpu["$gpu"]
        else:
            gover = None
        exp["gpu"] = gpu if isinstance(gpu, str) else None
        mem = kwargs.get("memory_bytes")
    else:  # run_trace(trace, gpu, policy, policy_options=..., memory_bytes=...)
        info = resolve_network(args[0]["$trace"], folder)
        if info:
            exp["torch7"] = info["torch7"]
            exp["network"] = info["name"] if isinstance(info.get("name"), str) else None
            exp["batch"] = positive_int(info.get("batch"))
        gpu, gover = args[1]["$gpu"]
        over = None
        exp["gpu"] = gpu
        exp["policy"] = args[2]
        mem = kwargs.get("memory_bytes")
    if mem is not None:
        if isinstance(mem, bool) or not isinstance(mem, int) or mem < 0:
            exp["invalid"].append(f"memory_bytes {mem!r:.40} (not an int >= 0)")
        exp["capacity"] = mem if isinstance(mem, int) and not isinstance(mem, bool) else None
    elif isinstance(over, dict) and over.get("memory_bytes") is not None:
        exp["capacity"] = byte_count(over["memory_bytes"])
    elif isinstance(gover, dict) and gover.get("memory_bytes") is not None:
        exp["capacity"] = byte_count(gover["memory_bytes"])
    else:
        exp["capacity"] = _preset_memory(gpu)
    opts = kwargs.get("policy_options")
    exp["invalid"] += option_problems(opts)
    exp["options"] = opts if isinstance(opts, dict) else {}
    return exp
