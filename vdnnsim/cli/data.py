"""Commands over measured data: validate, import."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .common import shown, writable


def split_measurements(paths: list[str]) -> tuple[list[str], list[str]]:
    """NOTE [measurement sets]: ``validate TRACES... MEASUREMENTS...``: the trailing
    arguments that hold measurement records (a .json list or .jsonl lines; a trace written
    as JSON is one object, a trace) are measurement files, oldest first, at least the last
    argument, whatever it is, as before; the rest are traces."""
    n = 1
    while n < len(paths) - 1 and _records_file(paths[-n - 1]):
        n += 1
    return paths[:-n], paths[-n:]


def _records_file(path: str) -> bool:
    """Whether ``path`` reads as measurement records rather than a trace: named .jsonl, or
    .json whose text is not one JSON object (a list, or one record a line)."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".jsonl":
        return True
    if ext != ".json":
        return False
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        return "Extra data" in exc.msg  # JSON Lines; anything else is left to the reader
    except (OSError, UnicodeDecodeError, RecursionError):
        return True  # the reader of measurements says what is wrong, in one line
    return not isinstance(data, dict)


def cmd_validate(args: argparse.Namespace) -> int:
    from ..measured.validate import format_validation, summarize, validate

    traces, measurements = split_measurements(args.traces + [args.measurements])
    df = validate(traces, measurements, args.gpu, args.reserved, args.scale_host)
    if args.json:
        print(json.dumps({"runs": json.loads(df.to_json(orient="records")),
                          "summary": summarize(df)}, indent=2))
    else:
        print(format_validation(df))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """A torch.profiler trace or a CUDA memory snapshot as validation data."""
    from ..measured.importers import format_record, import_file, to_json
    from ..yamlio import write_text_atomic

    writable(args.output)
    rec = import_file(args.file, segments=args.segments)
    if args.output:
        write_text_atomic(args.output, to_json(rec) + "\n")
        print(f"wrote {shown(args.output)}: {rec['kind']}", file=sys.stderr)
    print(to_json(rec) if args.json else format_record(rec))
    return 0


