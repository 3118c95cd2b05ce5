"""A torch.profiler (Kineto) Chrome trace: the marks vdnnsim's runtime puts in it
(``module_ranges``, ``step_range``: they need torch) and the file read and checked to be
one (no torch). ``kineto.attribute`` reads what these give."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import stat
import zlib
from pathlib import Path
from typing import Any, Iterator

from ..errors import ConfigError
from ..units import GiB

MODULE_PREFIX = "vdnnsim.module::"
STEP_PREFIX = "vdnnsim.step#"
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
OPTIMIZER_PREFIX = "Optimizer.step#"
ZERO_GRAD_PREFIX = "Optimizer.zero_grad#"
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
HOST_CATS = frozenset({"cpu_op", "user_annotation"}) | LAUNCH_CATS
MAX_TRACE_BYTES = GiB  # a trace file, decompressed


# ---------------------------------------------------------------- marks (need torch)

def _record_function(name: str) -> Any:
    from torch.profiler import record_function
    return record_function(name)


@contextlib.contextmanager
def module_ranges(model: Any) -> Iterator[None]:
    """While inside, every call of ``model`` and of each of its
    submodules (``named_modules()``, the root as path "", a shared module under its first
    path) is a ``record_function`` range ``vdnnsim.module::<path>``. A call that raises
    closes its range; ranges left open are closed and the hooks removed on exit."""
    live: list[Any] = []  # open ranges, in opening order
    per_module: dict[int, list[Any]] = {}
    handles = []

    def pre(mod: Any, args: Any, name: str) -> None:
        rf = _record_function(name)
        rf.__enter__()
        live.append(rf)
        per_module.setdefault(id(mod), []).append(rf)

    def post(mod: Any, args: Any, out: Any) -> None:
        opened = per_module.get(id(mod))
        if opened:
            rf = opened.pop()
            rf.__exit__(None, None, None)
            if live and live[-1] is rf:
                live.pop()
            else:
                live.remove(rf)

    try:
        for path, mod in model.named_modules():
            handles.append(mod.register_forward_pre_hook(
                lambda m, a, _n=MODULE_PREFIX + path: pre(m, a, _n)))
            handles.append(mod.register_forward_hook(post, always_call=True))
        yield
    finally:
        for h in handles:
            h.remove()
        while live:  # innermost first
            live.pop().__exit__(None, None, None)
        per_module.clear()


def step_range(k: int) -> Any:
    """A ``record_function`` context manager naming training step ``k``
    (``vdnnsim.step#<k>``) so that ``attribute`` tells several profiled steps apart."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"step_range: k must be an int, got {type(k).__name__}")
    return _record_function(f"{STEP_PREFIX}{k}")


# ---------------------------------------------------------------- reading

def shown(p: Any) -> str:
    """yamlio.shown's rule (a long name cut, control characters escaped), copied: yamlio
    imports pydantic, which the device machine need not have."""
    s = str(p)
    s = s if len(s) <= 120 else f"{s[:60]}...{s[-40:]}"
    s = s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return s if s.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def _read(p: Path) -> bytes:
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rb") as f:
        raw = f.read(MAX_TRACE_BYTES + 1)
    if len(raw) > MAX_TRACE_BYTES:
        raise OSError(f"more than {MAX_TRACE_BYTES:,} bytes"
                      + (" once decompressed" if p.suffix == ".gz" else ""))
    return raw


def load_trace(path_or_obj: Any) -> dict[str, Any]:
    """A torch.profiler Chrome trace (``export_chrome_trace``'s JSON; ``.gz`` read through
    gzip, at most 1 GiB of text), or an already loaded one (a dict), checked to be one:
    a ``traceEvents`` list with torch.profiler events. Anything else raises ``ConfigError``
    with one line saying what the file is and what was expected."""
    if isinstance(path_or_obj, dict):
        return _check(path_or_obj, "trace")
    if not isinstance(path_or_obj, (str, os.PathLike)):
        raise ConfigError("expected a torch.profiler trace file path or its loaded JSON "
                          f"(a dict), got {type(path_or_obj).__name__}")
    p = Path(path_or_obj)
    what = shown(p)
    regular_file(p, what, "not a torch.profiler trace (a Chrome trace JSON file from "
                 "export_chrome_trace)")
    try:
        text = _read(p).decode("utf-8")
    except (OSError, EOFError, zlib.error) as exc:
        raise ConfigError(f"{what}: cannot read: {reason(exc)}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what}: not UTF-8 text; expected a torch.profiler trace "
                          "(Chrome trace JSON)") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise ConfigError(f"{what}: not JSON{where}; expected a torch.profiler trace "
                          "(Chrome trace JSON from export_chrome_trace)") from None
    return _check(data, what)


def regular_file(p: Path, what: str, expected: str, suffix: str = "") -> None:
    """A one-line ConfigError unless ``p`` is a regular file: missing, unreadable, a
    directory (``expected`` says what was wanted instead) or a FIFO or device (reading one
    could hang); ``suffix`` is added to the last two."""
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise ConfigError(f"{what}: no such file") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{what}: cannot read: {reason(exc)}") from None
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{what}: is a directory, {expected}")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{what}: not a regular file{suffix}")


def reason(exc: BaseException) -> str:
    """An OS error's reason, else the first line of the message (or the error's name)."""
    return getattr(exc, "strerror", None) or (str(exc).splitlines() or [type(exc).__name__])[0]


def _check(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        got = "a JSON object without a traceEvents list" if isinstance(data, dict) \
            else f"a JSON {type(data).__name__}"
        raise ConfigError(f"{what}: {got}; expected a torch.profiler trace (Chrome trace "
                          "JSON with traceEvents)")
    cats = HOST_CATS | GPU_CATS
    if not any(isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in cats
               for e in data["traceEvents"]):
        raise ConfigError(f"{what}: its traceEvents hold no torch.profiler event (cpu_op, "
                          "user_annotation, kernel); expected a torch.profiler trace")
    return data


# ---------------------------------------------------------------- the result
