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

MAX_BYTES = 2**50  # 1 PiB: a thousand times the largest GPU memory (NOTE [simulated scale])
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


# NOTE [whole numbers]
# One rule for every integer a file gives (batch sizes, counts, latencies and times in ns,
# layer hyper-parameters, policy options), as for byte counts and bandwidths: an integer,
# or a number that is exactly one, written as a float (1.0e+12) or as a string YAML 1.1
# leaves unparsed (1e12, 12.8e9: no dot or no sign in the exponent); not a boolean, not a
# fraction (2.5), not infinity. The value is then checked against its own bounds, which
# name the cause (a batch of 1e12 images is past the simulated scale, not malformed).
# The rule is for numbers written in files; a Python caller passes Python ints
# (``api_batch_size``): a string or a float batch size given to ``vdnnsim.simulate`` is a
# caller's mistake.
MAX_WHOLE_DIGITS = 4000  # an exponent past this is no count; int() of it would take long


def whole_number(value: Any, what: str = "") -> int:
    """``value`` as an int, or a ValueError naming ``what`` (the
    field's key path names it where ``what`` is empty)."""
    if type(value) is int:  # the common case, first
        return value
    must = f"{what} must be" if what else "expected"
    if isinstance(value, bool):
        raise ValueError(f"{must} a whole number, got a boolean ({value})")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{must} a finite whole number, got {value}")
        if not value.is_integer():
            raise ValueError(f"{must} a whole number, got {value!r}")
        return int(value)
    if isinstance(value, str):
        from decimal import Decimal, InvalidOperation
        text = value.strip().replace("_", "")
        try:
            d = Decimal(text) if text.isascii() else None
        except (InvalidOperation, ValueError):
            d = None
        if d is None or d.is_nan():
            raise ValueError(f"{must} a whole number, got {short_repr(value)}")
        if d.is_infinite():
            raise ValueError(f"{must} a finite whole number, got {short_repr(value)}")
        if d.adjusted() > MAX_WHOLE_DIGITS:
            raise ValueError(f"{must} a whole number of at most {MAX_WHOLE_DIGITS:,} "
                             f"digits, got {short_repr(value)}")
        if d != d.to_integral_value():
            raise ValueError(f"{must} a whole number, got {short_repr(value)}")
        return int(d)
    raise ValueError(f"{must} a whole number, got {short_repr(value)}")


def whole(value: Any) -> int:
    """``whole_number`` as a pydantic before-validator: the key path names the field."""
    return whole_number(value)


def latency_ns(value: Any) -> int:
    value = whole_number(value, "a latency in ns")
    in_range(value, 0, MAX_LATENCY_NS, "a latency in ns", "a second per copy is a unit "
             "mistake")
    return value


def flops_scale(value: Any) -> float:
    return in_range(value, MIN_FLOPS_SCALE, MAX_FLOPS_SCALE, "peak_flops_scale",
                    "a factor of a million either way is no longer a GPU")


def batch_size(value: Any) -> int:
    """A whole, positive batch size (1e3 and 128.0 are whole; not a
    bool, not a float such as 1e-320). No upper bound here: the network's bytes are
    checked against MAX_BYTES, which names the cause."""
    value = whole_number(value, "batch size")
    if value < 1:
        raise ValueError(f"batch size must be at least 1, got "
                         f"{value if value > -10**30 else 'a large negative number'}")
    return value


def api_batch_size(value: Any) -> int:
    """A batch size passed to the Python API: an int (not a bool, a float or a string:
    NOTE [whole numbers] is for files), then ``batch_size``'s bounds."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"batch size must be an int, got {short_repr(value)}")
    return batch_size(value)


# A policy option's value: options are switches and names.
OptionValue = bool | int | float | str | None
