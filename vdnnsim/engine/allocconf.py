"""The caching allocator's settings a measurement ran with (PYTORCH_CUDA_ALLOC_CONF).

NOTE [measured allocator settings]
PyTorch's caching allocator reads ``PYTORCH_CUDA_ALLOC_CONF`` (``key:value,key:value``)
once, when CUDA first allocates; what it reads changes the reserved memory a run measures
(expandable segments map pages into one growing segment instead of cudaMalloc'ing whole
segments; max_split_size_mb keeps large cached blocks whole; roundup_power2_divisions
rounds requests up further). So a measurement records the settings it ran with
(``allocator_conf``: the keys given, with typed values; ``{}`` or absent is PyTorch's
defaults), and ``vdnnsim validate`` refuses to hold a prediction against settings the
simulator does not model (``validate.allocator_supported``), rather than answer wrongly;
what the simulator replays is NOTE [allocator settings] in engine/caching.py.

The keys allowed are those of ALLOWED: each with its type, its range (as PyTorch's own
parser checks it, so that a bad value is one line here and not an error inside the GPU
process), its default and what it does. Others (``backend:cudaMallocAsync``, the pinned
host allocator's keys) are refused: they change what a measurement means in ways nothing
here records or models. ``vdnnsim measure --allocator KEY=VALUE`` (repeatable, or
comma-separated; ``KEY:VALUE`` as PyTorch writes it works too) gives them; a value is
read as YAML would (``true``, ``128``, ``0.8``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ConfigError

ENV = "PYTORCH_CUDA_ALLOC_CONF"
ENVS = (ENV, "PYTORCH_ALLOC_CONF")  # the second: PyTorch's device-neutral name (2.9 on)


@dataclass(frozen=True)
class Key:
    """One allowed setting: its type, the check of its value, its default, its meaning."""

    kind: type
    check: Callable[[Any], bool]
    rule: str
    default: Any
    meaning: str


def _power_of_two(v: int) -> bool:
    return v >= 1 and v & (v - 1) == 0


ALLOWED: dict[str, Key] = {
    "expandable_segments": Key(bool, lambda v: True, "true or false", False,
                               "grow one segment per stream by mapping pages (cuMemMap) "
                               "instead of cudaMalloc'ing new segments"),
    "max_split_size_mb": Key(int, lambda v: 20 < v <= 2**20, "an integer above 20 (MiB)",
                             None, "cached blocks larger than this are never split"),
    "roundup_power2_divisions": Key(int, lambda v: _power_of_two(v) and v <= 64,
                                    "a power of two from 1 to 64", 0,
                                    "round a request up to one of this many divisions of "
                                    "its power-of-two interval"),
    "garbage_collection_threshold": Key(float, lambda v: 0 < v < 1,
                                        "a number between 0 and 1, exclusive", 0.0,
                                        "free unused cached blocks once this share of the "
                                        "memory is reserved"),
}


def _value(key: str, raw: Any, where: str) -> Any:
    spec = ALLOWED[key]
    v = raw
    if isinstance(raw, str):
        text = raw.strip()
        if spec.kind is bool:
            low = text.lower()
            v = True if low == "true" else False if low == "false" else text
        else:
            try:
                v = int(text) if spec.kind is int else float(text)
            except ValueError:
                v = text
    ok = (isinstance(v, bool) if spec.kind is bool
          else isinstance(v, int) and not isinstance(v, bool) if spec.kind is int
          else isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
    if not ok or not spec.check(v):
        raise ConfigError(f"{where}: {key} must be {spec.rule}, got {raw!r}")
    return float(v) if spec.kind is float else v


def _known(key: str, where: str) -> None:
    if key not in ALLOWED:
        raise ConfigError(f"{where}: unknown allocator setting {key!r}; allowed: "
                          f"{', '.join(ALLOWED)}")


def split_pairs(items: list[str] | str | None, where: str = "--allocator") -> dict[str, str]:
    """The one reader of PYTORCH_CUDA_ALLOC_CONF's text (``key:value,key:value``, or
    ``key=value`` as a flag gives it): ``{key: raw value}``, each key once. What a key may
    be is the caller's: a measurement takes what PyTorch takes (:func:`parse_pairs`), the
    simulator what it models (``engine.caching.allocator_settings``)."""
    out: dict[str, str] = {}
    for item in [items] if isinstance(items, str) else items or []:
        for piece in str(item).split(","):
            piece = piece.strip()
            if not piece:
                continue
            sep = "=" if "=" in piece else ":"
            key, found, raw = piece.partition(sep)
            key = key.strip()
            if not found or not key:
                raise ConfigError(f"{where} {piece!r}: is not KEY:VALUE "
                                  "(PYTORCH_CUDA_ALLOC_CONF's form); use KEY=VALUE or "
                                  "KEY:VALUE, e.g. expandable_segments=true")
            if key in out:
                raise ConfigError(f"{where}: {key} given twice")
            out[key] = raw.strip()
    return out


def parse_pairs(items: list[str] | None, where: str = "--allocator") -> dict[str, Any]:
    """``["expandable_segments=true", "max_split_size_mb:128,..."]`` -> typed settings."""
    out: dict[str, Any] = {}
    for key, raw in split_pairs(items, where).items():
        _known(key, where)
        out[key] = _value(key, raw, where)
    return out


def check_conf(conf: Any, where: str = "allocator_conf") -> dict[str, Any]:
    """A recorded ``allocator_conf`` (a mapping of allowed keys to valid values)."""
    if conf is None:
        return {}
    if not isinstance(conf, dict):
        raise ConfigError(f"{where}: expected a mapping of allocator settings, got "
                          f"{type(conf).__name__}")
    out = {}
    for key, raw in conf.items():
        _known(str(key), where)
        out[str(key)] = _value(str(key), raw, where)
    return out


def env_string(conf: dict[str, Any]) -> str:
    """The PYTORCH_CUDA_ALLOC_CONF text of ``conf`` as PyTorch's parser takes it
    (``True``/``False`` capitalised)."""
    return ",".join(f"{k}:{v!s}" if not isinstance(v, float) else f"{k}:{v:g}"
                    for k, v in conf.items())


def is_default(conf: dict[str, Any] | None) -> bool:
    """Whether every setting of ``conf`` is PyTorch's default (an empty one is)."""
    return all(k in ALLOWED and ALLOWED[k].default == v for k, v in (conf or {}).items())


def effective(given: dict[str, Any], environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The settings a measuring process runs with: ``given`` (``--allocator``), or what
    the environment's PYTORCH_CUDA_ALLOC_CONF already says; both, when they differ, is an
    error (which one would the record be of?)."""
    environ = os.environ if environ is None else environ
    out = given
    for name in ENVS:
        env = environ.get(name)
        if env is None or not env.strip():
            continue
        from_env = parse_pairs([env], f"{name}={env!r} (in the environment)")
        if (given or out is not given) and out != from_env:
            raise ConfigError(f"{name}={env!r} is set in the environment and the settings "
                              f"asked for are {env_string(out)!r}: give them one way (unset "
                              f"{name}, or leave --allocator out)")
        out = from_env
    return out
