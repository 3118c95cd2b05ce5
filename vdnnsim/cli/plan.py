"""The plan command: plan a run config's network under a memory budget, print the report,
and write the plan file."""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError
from .common import host_cal_arg, shown, size_arg, writable


def margin_arg(text: str | None) -> float | None:
    """--margin's share of the budget (a fraction), from a percentage such as '4%'."""
    if text is None:
        return None
    try:
        pct = float(text.strip().removesuffix("%"))
    except ValueError:
        pct = -1.0
    if not 0 <= pct < 100:
        raise ConfigError(f"--margin: a percentage from 0 to 99, e.g. 4%, got {text!r}")
    return pct / 100


def cmd_plan(args: argparse.Namespace) -> int:
    from ..api import plan_config
    from ..config import load_config
    from ..report.plan import format_plan

    writable(args.output)
    cal = host_cal_arg(args)
    cfg, base = load_config(args.config)
    budget_bytes = size_arg("--budget", args.budget, required=True)
    report = plan_config(cfg, base, budget_bytes, method=args.method,
                         optimizer_offload=args.optimizer_offload, allocator=args.allocator,
                         headroom=not args.no_headroom, margin=margin_arg(args.margin),
                         source=args.config, host_cal=cal)
    out, notes = format_plan(report)
    print("\n".join(out), flush=True)  # before the notes: one stream shows them in order
    for line in notes:
        print(line, file=sys.stderr)
    if not report.fits:
        return 1
    if args.output:
        from ..planners.planfile import write_plan_file
        write_plan_file(args.output, report.plan_file)
        block = report.plan_file["format"] == "vdnnsim-block-plan"
        print(f"wrote {shown(args.output)}: " + (
            f"run it with vdnnsim measure --plan {args.output}" if block else
            f"replay it with policy 'planned', policy_options: {{file: {args.output}}}"),
            file=sys.stderr)
    return 0
