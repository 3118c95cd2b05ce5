"""The `vdnnsim` command: thin commands over the library.

Every VdnnError ends as one line on stderr and exit code 2; files are
written whole or not at all.

NOTE [interrupt]
Ctrl-C anywhere (parsing, a solver, a Dask sweep, writing a file) ends the command with one
line on stderr and exit code 130, never a traceback. Files are written through
yamlio.write_atomic, whose temporary file is removed on any exception, KeyboardInterrupt
included, so an interrupted command leaves no partial file. Once interrupted, further
Ctrl-Cs are ignored while the interpreter shuts down (a second one during the teardown of
a Dask cluster would otherwise print the traceback the first one was caught to avoid).
"""

from __future__ import annotations

import math
import sys
import warnings
from typing import Sequence

from ..errors import VdnnError
from ..limits import MAX_BYTES
from ..units import GiB
from .common import EXIT_BUG, EXIT_INTERRUPTED, EXIT_USAGE
from .parser import build_parser

__all__ = ["build_parser", "main"]

# counts a person could mistype, with the reason for each ceiling
BOUNDS = (("trials", 1, 10_000, "each is a timed training step"),
          ("iters", 1, 10_000, "each is a timed training step"),
          ("warmup", 0, 10_000, "each is a training step"),
          ("repeat", 1, 100, "each is a fresh process"),
          ("warmup_processes", 0, 10, "each is a discarded process"),
          ("workers", 1, 1024, "one process per core is the most that helps"),
          ("limit", 1, 2**40, "the search doubles the batch up to this"),
          ("seq_len", 1, 2**20, "tokens a sample: a model's positions are far fewer"))


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: its exit code."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        import signal
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:  # not the main thread: nothing more to ignore
            pass
        print("vdnnsim: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a name from another locale is escaped, not a crash
        try:
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            pass
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "batch_size", None) is not None and args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    for name, least, most, why in BOUNDS:
        value = getattr(args, name, None)
        if value is not None and not least <= value <= most:
            parser.error(f"--{name.replace('_', '-')} must be from {least} to {most:,} ({why})")
    cap = getattr(args, "memory_cap_gb", None)
    if cap is not None and not (math.isfinite(cap) and 0 < cap <= MAX_BYTES / GiB):
        parser.error("--memory-cap-gb must be more than 0 and at most 1 PiB (2**20 GiB)")
    if args.command == "maxbatch":
        args.gpu = args.gpu or ["k40"]
        args.policy = args.policy or ["vdnn_dyn"]
    from ..engine import InvariantViolation
    from ..yamlio import one_line

    warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from")  # matplotlib fonts
    try:
        return args.fn(args)
    except VdnnError as exc:
        print(f"vdnnsim: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except InvariantViolation as exc:  # a bug report, not a wrong number
        print(f"vdnnsim: internal error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BUG
    except BrokenPipeError:
        return 0
