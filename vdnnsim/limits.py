"""The bounds every input is checked against, in one place, each with its reason.

NOTE [bounds]
The simulator's arithmetic is exact in integers and turns into floats only in reports,
but a few inputs would still break it or mean nothing: a bandwidth of 1e-300 bytes/s makes
a copy last longer than any float can hold (OverflowError), an infinite size is no size,
a negative batch silently shrinks memory below the weights. The bounds below are far
outside anything real, so they only ever stop mistakes; each message says why.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 2, 40, 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4


def short_repr(value: Any) -> str:
    """A value for a one-line message: bounded in depth and length, so that a huge or
    self-referencing input (a YAML alias bomb) costs nothing to show."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a repr that raises: name the type
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."

MAX_BYTES = 2**50  # 1 PiB: a thousand times the largest GPU memory; NOTE [simulated scale]
MIN_BW_BYTES_PER_S = 1e6  # 1 MB/s: slower than a page-faulting link (80 MB/s, vDNN paper)
MAX_BW_BYTES_PER_S = 1e15  # 1 PB/s: two hundred times an H200's HBM
MAX_LATENCY_NS = 10**9  # 1 s per copy: a million times PCIe's
MIN_FLOPS_SCALE, MAX_FLOPS_SCALE = 1e-6, 1e6
MAX_STUDY_RUNS = 100_000  # about an hour of simulation; split a larger study
MAX_NAME_CHARS = 1_000


def finite_number(value: Any, what: str) -> float:
    """A real, finite number, or a string of one: YAML 1.1 reads ``12.8e9`` (no sign in
    the exponent) as a string. Not a bool."""
    if isinstance(value, str):
        try:
            value = float(value.strip().replace("_", ""))
        except ValueError:
            shown = value if len(value) <= 40 else value[:40] + "..."
            raise ValueError(f"{what} must be a number, got {shown!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value}")
    return float(value)


def in_range(value: Any, low: float, high: float, what: str, why: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int):  # no float for 10**400
        value = finite_number(value, what)
    if not low <= value <= high:
        shown = f"{value:g}" if isinstance(value, float) or abs(value) < 10**15 \
            else f"{float(value):g}" if abs(value) < 10**300 else "a number of over 300 digits"
        raise ValueError(f"{what} must be between {low:g} and {high:g} ({why}), got {shown}")
    return float(value)


def bandwidth(value: Any) -> float:
    return in_range(value, MIN_BW_BYTES_PER_S, MAX_BW_BYTES_PER_S, "a bandwidth in bytes/s",
                    "1 MB/s is slower than any DMA link, 1 PB/s faster than any memory")


def latency_ns(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"a latency in ns must be a whole number, got "
                             f"{short_repr(value)}")
    in_range(value, 0, MAX_LATENCY_NS, "a latency in ns", "a second per copy is a unit "
             "mistake")
    return value


def flops_scale(value: Any) -> float:
    return in_range(value, MIN_FLOPS_SCALE, MAX_FLOPS_SCALE, "peak_flops_scale",
                    "a factor of a million either way is no longer a GPU")


def batch_size(value: Any) -> int:
    """A whole, positive batch size (not a bool, not a float such as 1e-320). No upper
    bound here: the network's bytes are checked against MAX_BYTES, which names the cause."""
    if isinstance(value, bool):
        raise ValueError(f"batch size must be a whole number, got a boolean ({value})")
    if not isinstance(value, int):
        raise ValueError(f"batch size must be a whole number, got {short_repr(value)}")
    if value < 1:
        raise ValueError(f"batch size must be at least 1, got "
                         f"{value if value > -10**30 else 'a large negative number'}")
    return value


# A policy option's value: options are switches and names (NOTE [bounds]).
OptionValue = bool | int | float | str | None


def not_bool(value: Any) -> Any:
    """YAML's ``true`` is not the number 1 (pydantic's int would take it as 1)."""
    if isinstance(value, bool):
        raise ValueError("expected a whole number, got a boolean")
    return value
