"""Traces made from models, kept on disk by everything that made them.

NOTE [trace cache]
Tracing a model on the meta device takes seconds to a minute, and a sweep, a notebook or a
test session traces the same model many times. With ``VDNNSIM_TRACE_CACHE=DIR`` the two
makers of traces from models (``memory_trace``, ``synthesize_model``) keep each trace file
in DIR, keyed by their arguments, the GPU preset as a whole, an ``hf:`` or ``diffusers:``
file's or a factory module's text (not what that module imports), the versions of torch,
torchvision, transformers, timm, peft and diffusers, and a hash of vdnnsim's source and
data: any change misses. A hit is the file read back and gives the same ``Trace`` as
tracing afresh (tested). Off by default; the test suite sets it to a folder of its own,
removed when the session ends.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

ENV = "VDNNSIM_TRACE_CACHE"
_PACKAGE = Path(__file__).resolve().parents[2]  # vdnnsim/


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
    """vdnnsim's source and package data, hashed once per process."""
    h = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(_PACKAGE)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _versions() -> list[str]:
    out = []
    for dist in ("torch", "torchvision", "transformers", "timm", "peft", "diffusers"):
        try:
            out.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(f"{dist}=-")
    return out


def _spec_text(spec: str) -> str:
    """The text behind a model's name, which may change under one name: an ``hf:`` or
    ``diffusers:`` file's, a factory's (``module:function``) module's file."""
    path = None
    if spec.startswith(("hf:", "diffusers:")):
        path = Path(spec.partition(":")[2])
    elif ":" in spec:
        import importlib.util
        try:
            found = importlib.util.find_spec(spec.partition(":")[0])
        except (ImportError, ValueError):
            found = None
        path = Path(found.origin) if found is not None and found.origin else None
    if path is not None and path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return ""


def cached(maker: str, spec: str, args: dict[str, Any], gpu: Any,
           make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``make()``'s trace file (a dict), from the cache folder where ``VDNNSIM_TRACE_CACHE``
    names one and it holds this key; else made, and kept there when the folder is set."""
    folder = os.environ.get(ENV)
    if not folder:
        return make()
    key = json.dumps([maker, spec, _spec_text(spec), args, repr(gpu), _versions(),
                      _source_hash()], sort_keys=True, default=repr)
    path = Path(folder) / f"{hashlib.sha256(key.encode()).hexdigest()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    # one process makes a key's trace while the others wait for it (two pytest-xdist
    # workers asking for one model at once trace it once)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _made(path, make)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _made(path: Path, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # not there yet (or half-written by a killed process)
        pass
    d = make()
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(d, f)
        os.replace(tmp, path)  # whole or not at all, also with several processes
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return json.loads(path.read_text())  # a hit and a miss give the same dict
