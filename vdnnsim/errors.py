"""Typed errors. Anything a user can cause derives from :class:`VdnnError`.

NOTE [user errors]
The CLI turns every ``VdnnError`` into one line on stderr and exit code 2. Library callers
catch the typed subclass. Messages name the place (file, key path, layer) so that the one
line is enough to fix the input.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator


class VdnnError(Exception):
    """Base class of every error a user can cause."""


class ConfigError(VdnnError):
    """A run or study config is malformed or names something unknown."""


class TraceError(VdnnError):
    """A trace or network spec does not add up (cycle, duplicate id, impossible size...)."""


class ScaleError(ConfigError):
    """A synthesized network beyond what the simulator models: over 1 PiB in all, or a
    layer slower than the 10**18 ns a trace holds."""


class UnknownNameError(ConfigError):
    """A preset, network or policy name that no registry knows."""

    def __init__(self, what: str, name: str, known: list[str]):
        self.what, self.name, self.known = what, name, sorted(known)
        super().__init__(f"unknown {what} {name!r}; known: {', '.join(self.known)}")


def shown(path: str | os.PathLike) -> str:
    """A path for a one-line message: a name of hundreds of characters is cut, and bytes
    that are not UTF-8 (a file name from another locale) are escaped, not a crash."""
    s = str(path)
    s = s if len(s) <= 120 else f"{s[:60]}...{s[-40:]}"
    return one_line(s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))


def one_line(text: str) -> str:
    """Control characters (a newline in a file or layer name) escaped: a message stays on
    one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@contextmanager
def in_file(source: str | None, key: str) -> Iterator[None]:
    """Errors raised inside name the file and key whose value caused them: 'c.yaml:
    network: unknown network ...'. The error keeps its type and attributes."""
    try:
        yield
    except VdnnError as exc:
        if not source:
            raise
        named = exc.__class__.__new__(exc.__class__)  # not __init__: its signature varies
        named.__dict__.update(exc.__dict__)
        named.args = (f"{shown(source)}: {key}: {exc}",)
        raise named from None
