"""The `vdnnsim` command.

NOTE [user errors] applies: every VdnnError ends as one line on stderr and exit code 2;
files are written whole or not at all.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Sequence

from .errors import VdnnError

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _json_default(o: Any) -> Any:
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def _clean(record: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()}


def _is_study(path: str) -> bool:
    from .yamlio import read_yaml

    data = read_yaml(path)
    return isinstance(data, dict) and bool({"sweep", "zip", "runs", "base"} & set(data))


def cmd_run(args: argparse.Namespace) -> int:
    from .api import run_config
    from .config import load_config
    from .report import format_table

    if _is_study(args.config):
        return _run_study(args)
    cfg, base = load_config(args.config)
    results = run_config(cfg, base)
    if args.json:
        print(json.dumps([_clean(r.summary()) for r in results], indent=2,
                         default=_json_default))
    else:
        print(format_table(results, cfg.name))
    return 0


def _run_study(args: argparse.Namespace) -> int:
    from .report.table import format_rows
    from .study import load_study, run_study

    spec, base = load_study(args.config)
    df = run_study(spec, base)
    if args.json:
        print(df.to_json(orient="records", indent=2))
    else:
        print(format_rows(df, spec.name))
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .paper import reproduce, table_markdown
    from .report import figures
    from .yamlio import write_atomic, write_text_atomic

    table, frames = reproduce(args.studies)
    if args.json:
        print(table.to_json(orient="records", indent=2))
    else:
        print(table_markdown(table))
    if args.output:
        out = Path(args.output)
        if not out.is_dir():
            from .errors import ConfigError
            raise ConfigError(f"{out}: not a folder (create it first)")
        write_text_atomic(out / "reproduction.md", table_markdown(table) + "\n")
        write_atomic(out / "reproduction.csv", lambda f: table.to_csv(f, index=False))
        conv, deep = frames["conventional_policies"], frames["deep_vgg"]
        for gpu in ("k40", "titanx_maxwell"):
            for name, fig in (("memory", figures.memory_per_policy(conv, gpu)),
                              ("offload", figures.offload_traffic(conv, gpu)),
                              ("performance", figures.normalized_performance(conv, gpu)),
                              ("deep_vgg", figures.deep_vgg_growth(deep, gpu))):
                write_atomic(out / f"{name}_{gpu}.png",
                             lambda f, fig=fig: fig.savefig(f, format="png", dpi=90),
                             binary=True)
                figures.plt.close(fig)
        print(f"wrote {out}/reproduction.md, reproduction.csv and 8 figures", file=sys.stderr)
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from .api import build_trace, resolve_gpu
    from .trace import save_trace

    gpu = resolve_gpu(args.gpu)
    trace = build_trace(args.network, args.batch_size, gpu, args.dtype)
    if args.output == "-":
        from .trace import trace_to_dict
        from .yamlio import dump_yaml
        sys.stdout.write(dump_yaml(trace_to_dict(trace)))
    else:
        save_trace(trace, args.output)
        timed = (f"timed for {gpu.name} by the cost model"
                 if trace.source.kind == "synthesized" and trace.source.gpu == gpu.name
                 else f"times as recorded ({trace.source.kind})")
        print(f"wrote {args.output}: {trace.name}, batch {trace.batch_size}, "
              f"{len(trace.layers)} layers, {timed}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from .hardware import gpu_preset, preset_names
    from .network import ZOO
    from .policies.registry import POLICIES, policy_names

    what = args.what
    if what in ("networks", "all"):
        print("networks: " + ", ".join(ZOO))
    if what in ("gpus", "all"):
        print("gpus:")
        for n in preset_names():
            g = gpu_preset(n)
            print(f"  {n:15s} {g.display_name}: {g.memory_bytes / 2**30:.1f} GiB, "
                  f"{g.peak_flops['fp32'] / 1e12:.1f} TFLOP/s fp32, "
                  f"{g.mem_bw_bytes_per_s / 1e9:.0f} GB/s, link "
                  f"{g.link.h2d_bw_bytes_per_s / 1e9:.1f} GB/s")
    if what in ("policies", "all"):
        print("policies:")
        for n in policy_names():
            print(f"  {n:12s} {POLICIES[n][2]}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="vdnnsim", description="Simulate GPU memory and time of DNN training "
                "under vDNN-style offload/prefetch policies.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="simulate a run config or a study and print a table")
    r.add_argument("config", help="run config or study YAML")
    r.add_argument("--json", action="store_true", help="print a JSON list, one record a run")
    r.set_defaults(fn=cmd_run)

    t = sub.add_parser("trace", help="synthesize a trace file from a network and a GPU preset")
    t.add_argument("network", help="zoo name or network spec YAML")
    t.add_argument("--batch-size", "-b", type=int, default=None)
    t.add_argument("--gpu", default="k40", help="GPU preset whose cost model times it")
    t.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    t.add_argument("--output", "-o", required=True, help="trace YAML to write ('-': stdout)")
    t.set_defaults(fn=cmd_trace)

    rp = sub.add_parser("reproduce", help="the vDNN paper's headline numbers beside "
                        "vdnnsim's")
    rp.add_argument("--studies", default=None, help="folder of the paper studies "
                    "(default: the repository's configs/paper)")
    rp.add_argument("--output", "-o", default=None, help="folder to write the table (md, "
                    "csv) and figures into")
    rp.add_argument("--json", action="store_true", help="print the table as JSON records")
    rp.set_defaults(fn=cmd_reproduce)

    ls = sub.add_parser("list", help="list networks, GPU presets and policies")
    ls.add_argument("what", nargs="?", default="all",
                    choices=["all", "networks", "gpus", "policies"])
    ls.set_defaults(fn=cmd_list)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "batch_size", None) is not None and args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    try:
        return args.fn(args)
    except VdnnError as exc:
        print(f"vdnnsim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
