"""The `vdnnsim` command.

NOTE [user errors] applies: every VdnnError ends as one line on stderr and exit code 2;
files are written whole or not at all.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings
from typing import Any, Sequence

from ..errors import VdnnError
from ..limits import MAX_BYTES
from ..units import GB, GiB, MiB

EXIT_USAGE = 2
EXIT_BUG = 3  # NOTE [invariants]: the simulator broke its own rules
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C

# NOTE [interrupt]
# Ctrl-C anywhere (parsing, a solver, a Dask sweep, writing a file) ends the command with one
# line on stderr and exit code 130, never a traceback. Files are written through
# yamlio.write_atomic, whose temporary file is removed on any exception, KeyboardInterrupt
# included, so an interrupted command leaves no partial file. Once interrupted, further
# Ctrl-Cs are ignored while the interpreter shuts down (a second one during the teardown of
# a Dask cluster would otherwise print the traceback the first one was caught to avoid).


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _shown(path: Any) -> str:
    from ..yamlio import shown
    return shown(path)


def _json_default(o: Any) -> Any:
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def _clean(record: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()}


def _size_arg(flag: str, value: str | None) -> int | None:
    """A byte count given on the command line ('12 GiB'), or a one-line error naming it."""
    if not value:
        return None
    from ..hardware import _capacity
    try:
        return _capacity(value)
    except ValueError as exc:
        from ..errors import ConfigError
        raise ConfigError(f"{flag}: {exc}") from None


def _writable(path: Any, folder: bool = False) -> None:
    """-o/--output checked before the work that fills it (yamlio.check_writable)."""
    if path and path != "-":
        from ..yamlio import check_writable
        check_writable(path, folder)


def _is_study(path: str) -> bool:
    from ..yamlio import read_yaml

    data = read_yaml(path)
    return isinstance(data, dict) and bool({"sweep", "zip", "runs", "base"} & set(data))


def cmd_run(args: argparse.Namespace) -> int:
    from ..api import run_config
    from ..config import load_config
    from ..report import format_table

    _writable(args.chrome_trace)
    if _is_study(args.config):
        if args.chrome_trace:
            from ..errors import ConfigError
            raise ConfigError(f"--chrome-trace takes a run config, and {args.config} is a "
                              "study, whose runs keep no timelines: run one of its configs")
        return _run_study(args)
    cfg, base = load_config(args.config)
    results = run_config(cfg, base, record=bool(args.chrome_trace), source=args.config)
    if args.chrome_trace:
        from ..report.chrome import dumps
        from ..yamlio import write_text_atomic
        write_text_atomic(args.chrome_trace, dumps(results))
        print(f"wrote {_shown(args.chrome_trace)}: {len(results)} runs (open it in ui.perfetto.dev)",
              file=sys.stderr)
    if args.json:
        print(json.dumps([_clean(r.summary()) for r in results], indent=2,
                         default=_json_default))
    else:
        print(format_table(results, cfg.name))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """NOTE [planner]: plan a run config's network under a budget; print and write it."""
    from pathlib import Path

    from ..api import build_trace, resolve_gpu, run_trace
    from ..config import load_config
    from ..errors import ConfigError, in_file
    from ..hardware import _capacity
    from ..trace.optimizer import with_optimizer
    from ..planners.greedy import plan_to_dict, search_plan

    _writable(args.output)
    cfg, base = load_config(args.config)
    try:
        budget = _capacity(args.budget)
    except ValueError as exc:
        raise ConfigError(f"--budget: {exc}") from None
    name, overrides = cfg.gpu_name_and_overrides()
    with in_file(args.config, "gpu"):
        gpu = resolve_gpu(name, overrides)
    network = cfg.network
    if not Path(network).is_absolute() and (Path(base) / network).exists():
        network = str(Path(base) / network)
    with in_file(args.config, "network"):
        trace = with_optimizer(build_trace(network, cfg.batch_size, gpu, cfg.dtype),
                               cfg.optimizer)
    from ..api import _allocator_for
    if args.allocator:  # NOTE [planned allocator]: the flag over the config's
        from ..engine import parse_pairs
        settings = _allocator_for(trace, parse_pairs(args.allocator))
    else:
        with in_file(args.config, "allocator"):
            settings = _allocator_for(trace, cfg.allocator.model_dump() if cfg.allocator
                                      else None)
    from ..policies.blocks import block_regions
    offload = args.optimizer_offload or ("on" if cfg.optimizer_offload else "auto")
    if args.method == "blocks" or args.method == "auto" and len(block_regions(trace)) > 2:
        return _plan_blocks(args, trace, gpu, budget,
                            {"auto": None, "on": True, "off": False}[offload], settings,
                            cfg.optimizer_pinning)
    if cfg.optimizer_pinning != "caching":  # NOTE [optimizer pinning]
        raise ConfigError(f"{args.config}: optimizer_pinning: {cfg.optimizer_pinning} is "
                          "planned by the block planner only (--method blocks, a model with "
                          "blocks); the layer planners count the pinned allocator's copies")
    on_cpu = offload == "on"  # NOTE [optimizer offload]: auto keeps it on the GPU here
    if not trace.timed:  # NOTE [memory-only traces]: these planners pick the fastest plan
        raise ConfigError(f"{args.config}: network: {cfg.network} is a memory-only trace "
                          f"(every layer 0 ns), and --method {args.method} picks the fastest "
                          "plan by times it does not have; plan by memory with --method "
                          "blocks (a model with blocks), or plan a timed trace (vdnnsim "
                          "profile on a GPU)")
    plan, search = search_plan(trace, gpu, budget, method=args.method,
                               headroom=not args.no_headroom, allocator=settings,
                               optimizer_offload=on_cpu)
    head = _plan_head(trace, gpu, budget, settings) + (
        ", optimizer on the CPU" if on_cpu else "")
    ref = {p: run_trace(trace, gpu, p, memory_bytes=budget, record=False, allocator=settings,
                        optimizer_offload=on_cpu)
           for p in ("eager" if trace.pytorch else "baseline_p", "vdnn_dyn")}
    if plan is None:
        print(f"{head}: no plan found that fits ({search.simulations} simulations)")
        for p, r in ref.items():
            print(f"  {p}: {'fits' if r.fits else 'out of memory'}")
        return 1
    from ..api import run_plan
    if plan.trace is not None:  # NOTE [batch split]: the plan runs a reshaped network
        trace = plan.trace
    r = run_plan(trace, gpu, plan, budget, allocator=settings)
    print(f"{head}: {search.simulations} simulations")
    for step in search.steps:
        print(f"  {step}")
    moved = [(trace.layers[i].id, b) for i, o in enumerate(plan.offload) for b in o]
    fastest = [x.fastest_algo() for x in trace.layers]
    leaner = [(x.id, x.algos[a].name) for x, a, f in zip(trace.layers, plan.algos, fastest)
              if a != f]
    print(f"plan: {len(moved)} buffer(s) offloaded ({r.offloaded_bytes / GiB:.2f} GiB), "
          f"{len(leaner)} layer(s) on a leaner algorithm, {len(plan.recompute)} checkpointed "
          f"segment(s)" + "".join(f", {a}..{b} split in {k}" for a, b, k in plan.split))
    from ..report.table import format_seconds, format_slowdown
    print(f"{'policy':10s} {'fits':4s} {'peak GiB':>8s} {'iter ms':>9s} {'slowdown':>8s}")
    for p, x in (("planned", r), *ref.items()):
        print(f"{p:10s} {'yes' if x.fits else 'no':4s} {x.peak_memory_bytes / GiB:8.2f} "
              f"{format_seconds(x.iteration_time_s * 1e3, 1):>9s} "
              f"{format_slowdown(x.slowdown):>8s}")
    from ..planners.greedy import OP_PLAN_CANNOT_RUN, fragmentation_caution, layer_names
    if layer_names(trace) == "ops":
        print(f"note: {OP_PLAN_CANNOT_RUN}", file=sys.stderr)
    if on_cpu:
        _uncalibrated_cpu_step(gpu)
    caution = fragmentation_caution(trace, budget, r.peak_memory_bytes, settings)
    if caution:
        print(caution, file=sys.stderr)
    if args.output:  # NOTE [plan files]
        from ..planners.planfile import write_plan_file
        predicted = {"peak_memory_bytes": r.peak_memory_bytes,
                     "iteration_time_ns": r.iteration_time_ns}
        write_plan_file(args.output, plan_to_dict(trace, gpu, budget, plan, predicted,
                                                  settings))
        print(f"wrote {_shown(args.output)}: replay it with policy 'planned', "
              f"policy_options: {{file: {args.output}}}", file=sys.stderr)
    return 0


def _uncalibrated_cpu_step(gpu: Any) -> None:
    """A plan with the optimizer on the CPU: a note where the preset's host has no
    calibration of the CPU step, which the plan's time then leaves out."""
    from ..engine import cpu_step_calibrated
    if not cpu_step_calibrated(gpu.host):
        print(f"note: {gpu.name}'s host has no calibration of the CPU optimizer step: the "
              "plan's time leaves it out (NOTE [optimizer offload])", file=sys.stderr)


def _plan_head(trace: Any, gpu: Any, budget: int, settings: Any) -> str:
    """The first line of a plan's report (the allocator's settings where not PyTorch's
    defaults, NOTE [planned allocator])."""
    return (f"{trace.name} ({trace.batch_size}) on {gpu.name}, budget {budget / GiB:.2f} GiB"
            + ("" if settings.default else f", allocator {settings.conf()}"))


def _plan_blocks(args: argparse.Namespace, trace: Any, gpu: Any, budget: int,
                 optimizer_offload: bool | None, settings: Any,
                 pinning: str = "caching") -> int:
    """NOTE [block plan]: a transformer's plan, the fewest offloaded blocks that fit;
    ``optimizer_offload`` as plan_blocks takes it (NOTE [optimizer offload]);
    ``settings``: the caching allocator's (NOTE [planned allocator])."""
    from ..api import run_trace
    from ..planners.planfile import write_plan_file
    from ..planners.blocks import plan_blocks
    from ..planners.greedy import block_plan_to_dict
    from ..report.table import UNTIMED_NOTE, format_slowdown

    plan = plan_blocks(trace, gpu, budget, optimizer_offload, settings, pinning)
    head = _plan_head(trace, gpu, budget, settings)
    if plan.optimizer_offload:
        head += ", optimizer on the CPU"
    timed = trace.timed  # NOTE [memory-only traces]: a count that fits by memory alone
    n = (len(plan.tried) + len(plan.tried_recompute) + len(plan.tried_params)
         + len(plan.tried_mixed) + plan.mix_floors)
    print(f"{head}: {n} simulations, {plan.total} blocks")
    for what, tried in (("offloaded", plan.tried), ("checkpointed", plan.tried_recompute)):
        for k, fits, peak, ns in tried:
            print(f"  {k:3d} block(s) {what}: {'fits' if fits else 'out of memory'}, "
                  f"peak {peak / GiB:.2f} GiB" + (f", {ns / 1e6:.1f} ms" if timed else ""))
    # NOTE [parameter offload]: per count of blocks whose parameters are on the host, the
    # fewest offloaded and checkpointed blocks that fit (the bisection's other tries left out)
    best: dict[tuple[int, str], tuple[int, int, int]] = {}
    DONE = {"offload": "offloaded", "recompute": "checkpointed"}
    for p, how, k, fits, peak, ns in plan.tried_params:
        best.setdefault((p, how), (-1, 0, 0))
        if fits and (best[p, how][0] < 0 or k < best[p, how][0]):
            best[p, how] = (k, peak, ns)
    for (p, how), (k, peak, ns) in best.items():
        print(f"  {p:3d} block(s)' parameters on the host: " + (
            f"fits with {k} block(s) {DONE.get(how, how)}, peak {peak / GiB:.2f} GiB"
            + (f", {ns / 1e6:.1f} ms" if timed else "") if k >= 0 else
            f"out of memory with every block {DONE.get(how, how)}"))
    # NOTE [block mix]: per count of offloaded blocks, the count checkpointed after them
    # that fits (the fewest; the counts tried below it left out)
    mixes: dict[tuple[int, int], tuple[int, int, int]] = {}
    for p, o, r, fits, peak, ns in plan.tried_mixed:
        if fits and ((p, o) not in mixes or ns < mixes[p, o][2]):
            mixes[p, o] = (r, peak, ns)
    for (p, o), (r, peak, ns) in sorted(mixes.items()):
        print(f"  {o:3d} block(s) offloaded, then {r} checkpointed"
              + (f" ({p} blocks' parameters on the host)" if p else "")
              + f": fits, peak {peak / GiB:.2f} GiB, {ns / 1e6:.1f} ms")
    if not plan.fits:
        print(f"{head}: no plan found that fits, even with every block offloaded")
        from ..engine import optimizer_host_bytes
        from ..planners.blocks import weighs_cpu_optimizer
        need, host = optimizer_host_bytes(trace, pinning), gpu.host_memory_bytes
        if (optimizer_offload is not False and weighs_cpu_optimizer(trace, gpu)
                and host is not None and need > host):
            # NOTE [host memory]: why the optimizer on the CPU did not help
            print(f"  the optimizer on the CPU needs {need / GiB:.2f} GiB of host memory; the "
                  f"host has {host / GiB:.2f} GiB (gpu.host_memory_bytes)")
        if not timed:
            print(UNTIMED_NOTE)
        return 1
    base = run_trace(trace, gpu, "eager", record=False, allocator=settings)
    if plan.optimizer_offload:
        _uncalibrated_cpu_step(gpu)
    if timed:
        ratio = (plan.iteration_time_ns / base.iteration_time_ns if base.iteration_time_ns
                 else float("nan"))
        what = (f"offload the first {plan.blocks} and checkpoint the {plan.recompute} "
                f"after them" if plan.recompute and plan.blocks  # NOTE [block mix]
                else f"checkpoint the first {plan.recompute}" if plan.recompute
                else f"offload the first {plan.blocks}")  # NOTE [block recompute]
        if plan.params:  # NOTE [parameter offload]
            what += f" and keep the parameters of the first {plan.params} on the host,"
        print(f"plan: {what} of {plan.total} blocks: "
              f"{plan.iteration_time_ns / 1e6:.1f} ms, {format_slowdown(ratio)} "
              f"the step without a cap ({base.iteration_time_ns / 1e6:.1f} ms, peak "
              f"{base.peak_memory_bytes / GiB:.2f} GiB)")
    else:
        print(f"plan: offload the first {plan.blocks} of {plan.total} blocks"
              + (f", the parameters of the first {plan.params} on the host" if plan.params
                 else "") + ": peak "
              f"{plan.peak_memory_bytes / GiB:.2f} GiB (the step without a cap: peak "
              f"{base.peak_memory_bytes / GiB:.2f} GiB)")
        print(UNTIMED_NOTE)
    from ..planners.greedy import fragmentation_caution
    caution = fragmentation_caution(trace, budget, plan.peak_memory_bytes, settings)
    if caution:
        print(caution, file=sys.stderr)
    if args.output:
        write_plan_file(args.output, block_plan_to_dict(trace, gpu, budget, plan, settings))
        print(f"wrote {_shown(args.output)}: run it with vdnnsim measure --plan "
              f"{args.output}", file=sys.stderr)
    return 0


def _run_study(args: argparse.Namespace) -> int:
    from ..report.table import format_rows
    from ..study import load_study, run_study

    spec, base = load_study(args.config)
    df = run_study(spec, base)
    if args.json:
        print(df.to_json(orient="records", indent=2))
    else:
        print(format_rows(df, spec.name))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..report.table import format_rows
    from ..study import load_study, run_study, write_results

    if args.output and not args.output.endswith((".csv", ".parquet")):
        from ..errors import ConfigError
        raise ConfigError(f"{args.output}: write .csv or .parquet")
    _writable(args.output)
    spec, base = load_study(args.study)
    progress = not args.no_progress and sys.stderr.isatty()
    df = run_study(spec, base, progress, args.workers, args.scheduler)
    if args.output:
        write_results(df, args.output)
        bad = int(df["error"].notna().sum()) if "error" in df else 0
        fits = int(df["fits"].fillna(False).astype(bool).sum()) if "fits" in df else 0
        print(f"wrote {_shown(args.output)}: {len(df)} runs, {fits} fit, {bad} failed")
    else:
        print(format_rows(df, spec.name))
    return 0


def cmd_maxbatch(args: argparse.Namespace) -> int:
    from ..report.table import format_slowdown
    from ..study.maxbatch import max_batch

    cap = _size_arg("--memory", args.memory)
    host = _size_arg("--host-memory", args.host_memory)
    rows = [max_batch(n, g, p, dtype=args.dtype, memory_bytes=cap, limit=args.limit,
                      host_memory_bytes=host)
            for n in args.network for g in args.gpu for p in args.policy]
    if args.json:
        print(json.dumps([_clean(r) for r in rows], indent=2))
        return 0
    # NOTE [maxbatch]: the bound is what stops the next batch size
    print(f"{'network':10s} {'gpu':15s} {'policy':12s} {'max batch':>9s} {'slowdown':>9s} "
          f"{'peak GB':>8s} {'host GB':>8s} {'sims':>5s}  bound")
    for r in rows:
        extra = (f"{format_slowdown(r['slowdown']):>9s} {r['peak_memory_bytes'] / GB:8.2f} "
                 f"{r['peak_host_bytes'] / GB:8.2f}"
                 if r["max_batch_size"] else f"{'-':>9s} {'-':>8s} {'-':>8s}")
        mark = "+" if r.get("at_limit") else " "
        print(f"{r['network']:10s} {r['gpu']:15s} {r['policy']:12s} {r['max_batch_size']:8d}"
              f"{mark} {extra} {r['simulations']:5d}  {r['bound']}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..errors import ConfigError
    from ..report import plots
    from ..yamlio import shown, write_atomic

    out = Path(args.output)
    if out.suffix not in (".png", ".pdf", ".svg"):
        raise ConfigError(f"{out}: write .png, .pdf or .svg")
    _writable(out)
    inputs = args.input
    if args.kind != "validation":
        if len(inputs) != 1:
            raise ConfigError(f"plot {args.kind} takes one input, not {len(inputs)}")
        args.input = inputs[0]
    if args.kind in ("memory", "timeline"):
        from ..api import run_config
        from ..config import load_config
        cfg, base = load_config(args.input)
        results = run_config(cfg, base, source=args.input)
        fig = (plots.memory_over_time(results) if args.kind == "memory"
               else plots.stream_timeline(results))
    elif args.kind == "sweep":
        import pandas as pd
        p = Path(args.input)
        if p.suffix in (".csv", ".parquet"):
            if not os.path.isfile(p):
                raise ConfigError(f"{shown(p)}: no such file")
            try:
                df = pd.read_csv(p) if p.suffix == ".csv" else pd.read_parquet(p)
            except Exception as exc:  # pandas' and pyarrow's parse errors have no common base
                raise ConfigError(f"{shown(p)}: cannot read a results table: "
                                  f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}") from None
        else:
            from ..study import load_study, run_study
            spec, base = load_study(p)
            df = run_study(spec, base)
        fig = plots.sweep_curves(_results_table(df, p))
    else:
        from ..measured.validate import validate
        if not args.measurements:
            raise ConfigError("plot validation needs TRACES and --measurements FILE")
        table = validate(inputs, args.measurements)  # NOTE [measurement sets]
        if "measured_alloc_gib" not in table or not table.measured_fits.any():
            raise ConfigError(f"{', '.join(shown(m) for m in args.measurements)}: no "
                              "measured run fits its card: nothing to plot")
        fig = plots.validation_scatter(table)
    write_atomic(out, lambda f: fig.savefig(f, format=out.suffix[1:], dpi=100), binary=True)
    print(f"wrote {_shown(out)}")
    return 0


def _results_table(df, source) -> Any:
    """A sweep's results (from `vdnnsim sweep -o`), with the columns a plot reads checked:
    a hand-edited or foreign table ends in one line naming the column, not a traceback."""
    import pandas as pd

    from ..errors import ConfigError
    from ..yamlio import shown

    need = ["network", "gpu", "policy", "batch_size", "peak_memory_bytes", "slowdown", "fits",
            "capacity_bytes"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ConfigError(f"{shown(source)}: not sweep results (missing "
                          f"{', '.join(missing)})")
    if "error" in df:
        df = df[df["error"].isna()]
    if not len(df):
        raise ConfigError(f"{shown(source)}: no successful runs to plot")
    df = df.copy()
    for col in ("batch_size", "peak_memory_bytes", "slowdown", "capacity_bytes"):
        values = pd.to_numeric(df[col], errors="coerce")
        bad = ~(values.notna() & (values.abs() < 1e300) & (values >= 0))
        if col == "slowdown":  # undefined where the oracle time is 0 (docs/metrics.md)
            bad &= ~(df[col].isna() | df[col].astype(str).str.lower().isin(["nan", ""]))
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise ConfigError(f"{shown(source)}: row {i + 1}: {col}: expected a number, got "
                              f"{str(df[col].iloc[i])[:40]!r}")
        df[col] = values
    fits = df["fits"].map(lambda v: {True: True, False: False, "True": True, "False": False,
                                     "true": True, "false": False}.get(v))
    if fits.isna().any():
        i = int(fits.isna().to_numpy().nonzero()[0][0])
        raise ConfigError(f"{shown(source)}: row {i + 1}: fits: expected true or false, got "
                          f"{str(df['fits'].iloc[i])[:40]!r}")
    df["fits"] = fits.astype(bool)
    for col in ("network", "gpu", "policy"):
        df[col] = df[col].astype(str)
    return df


def cmd_reproduce(args: argparse.Namespace) -> int:
    from pathlib import Path

    import json

    from ..paper import reproduce, table_markdown
    from ..paper.cells import (cells_count_markdown, cells_markdown, figure_cells,
                              reproduction_json)
    from ..report import figures
    from ..yamlio import write_atomic, write_text_atomic

    _writable(args.output, folder=True)
    table, frames = reproduce(args.studies, reading=args.reading, reference=args.reference,
                              costs=args.costs, average=args.average)
    cells = figure_cells(frames)
    if args.json:
        print(json.dumps(reproduction_json(table, cells), indent=2))
    elif args.cells:
        print(cells_markdown(cells))
    else:
        print(table_markdown(table) + "\n\n" + cells_count_markdown(cells))
    if args.output:
        out = Path(args.output)
        try:  # made only now that the table stands: a failed run leaves no folder behind
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            from ..errors import ConfigError
            raise ConfigError(f"{out}: cannot make this folder ({exc.strerror})") from None
        write_text_atomic(out / "reproduction.md", table_markdown(table) + "\n")
        write_atomic(out / "reproduction.csv", lambda f: table.to_csv(f, index=False))
        write_text_atomic(out / "figure_cells.md", cells_markdown(cells) + "\n")
        write_atomic(out / "figure_cells.csv", lambda f: cells.to_csv(f, index=False))
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
        for name in figures.PAPER_PANELS:  # NOTE [paper beside]
            fig = figures.paper_beside(cells, name)
            write_atomic(out / f"paper_{name.lower()}.png",
                         lambda f, fig=fig: fig.savefig(f, format="png", dpi=90), binary=True)
            figures.plt.close(fig)
        print(f"wrote {_shown(out)}/reproduction.md, reproduction.csv, figure_cells.md, "
              "figure_cells.csv and 12 figures", file=sys.stderr)
    return 0


def _need_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        from ..errors import ConfigError
        raise ConfigError("this command needs PyTorch: pip install 'vdnnsim[torch]'") from None


def cmd_trace(args: argparse.Namespace) -> int:
    from ..api import build_trace, resolve_gpu
    from ..trace import save_trace, trace_from_dict

    _writable(args.output)
    gpu = resolve_gpu(args.gpu)
    if args.model:
        if args.network:
            from ..errors import ConfigError
            raise ConfigError("give a network or --model, not both")
        _need_torch()
        if not args.batch_size:
            from ..errors import ConfigError
            raise ConfigError("--model needs --batch-size")
        if args.model.split(":")[0] in ("torchvision", "zoo"):
            from ..gpu.profile.layers import synthesize_model
            if args.dtype not in ("fp32", "fp16", "bf16") or args.seq_len or args.input \
                    or args.model_arg:
                from ..errors import ConfigError
                raise ConfigError(f"{args.model}: --dtype fp32, fp16 or bf16, and no "
                                  "--seq-len, --input or --model-arg")
            trace = trace_from_dict(synthesize_model(args.model, args.batch_size, gpu,
                                                     args.dtype), args.model)
        else:  # NOTE [op probe]: any model, its memory only
            from ..gpu.probe.aten import memory_trace
            trace = trace_from_dict(memory_trace(args.model, args.batch_size, gpu, args.dtype,
                                                 args.seq_len, _model_kwargs(args.model_arg),
                                                 args.input), args.model)
            from ..hardware import gpu_preset, preset_names
            timed_on = ", ".join(n for n in preset_names() if gpu_preset(n).op_calibration)
            if trace.source.cost_model == "none":
                print("note: a memory trace (NOTE [op probe]): every layer is 0 ns, so its "
                      "runs show memory, not times (NOTE [memory-only traces]); GPUs with an "
                      f"op-level model (NOTE [op model]): {timed_on}", file=sys.stderr)
            elif not gpu.op_calibration:  # NOTE [op spec rule]
                from ..costs.ops import spec_rule_note
                print(f"note: {gpu.name} has no op calibration: timed from its specs by "
                      f"another GPU's op model (NOTE [op spec rule]; calibrated: {timed_on}), "
                      f"{spec_rule_note(gpu)}", file=sys.stderr)
    elif args.network:
        if args.seq_len or args.input or args.model_arg:
            from ..errors import ConfigError
            raise ConfigError("--seq-len, --input and --model-arg go with --model")
        trace = build_trace(args.network, args.batch_size, gpu, args.dtype)
    else:
        from ..errors import ConfigError
        raise ConfigError("give a network (zoo name or spec/trace YAML) or --model")
    if args.optimizer != "sgd":  # NOTE [optimizer state]: its moments and step temporary
        from ..trace.optimizer import with_optimizer
        trace = with_optimizer(trace, args.optimizer)
    if args.output == "-":
        from ..trace import trace_to_dict
        from ..yamlio import dump_yaml
        sys.stdout.write(dump_yaml(trace_to_dict(trace)))
    else:
        save_trace(trace, args.output)
        how = {"calibrated-v1": "its calibrated kernel model",
               "aten-v1": "its op-level kernel model (NOTE [op model])",
               "aten-v1-specs": "another GPU's op-level kernel model from its specs "
                                "(NOTE [op spec rule])"}.get(
            trace.source.cost_model, f"the cost model ({trace.source.cost_model})")
        timed = (f"timed for {gpu.name} by {how}"
                 if trace.source.kind == "synthesized" and trace.source.gpu == gpu.name
                 else f"times as recorded ({trace.source.kind})")
        if trace.source.cost_model == "none":
            timed = "memory only, not timed (NOTE [op probe])"
        print(f"wrote {_shown(args.output)}: {trace.name}, batch {trace.batch_size}, "
              f"{len(trace.layers)} layers, {timed}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    _writable(args.output)
    # NOTE [module timing]: Kineto's own log lines ("gpuGetDeviceCount failed" where there
    # is no GPU) are not the user's business; it reads this when torch starts it
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    _need_torch()
    import torch

    from ..errors import ConfigError
    from ..gpu.profile.layers import profile_model
    from ..trace import save_trace, trace_from_dict

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("vdnnsim profile needs a CUDA GPU (none is visible); without one, "
                          "vdnnsim trace --model ... --gpu PRESET synthesizes a trace")
    kwargs = _model_kwargs(args.model_arg)
    layerwise = args.model.split(":")[0] in ("torchvision", "zoo") and \
        args.dtype in ("fp32", "fp16", "bf16") and args.optimizer == "sgd" and \
        not (kwargs or args.seq_len or args.input)
    if layerwise:
        data = profile_model(args.model, args.batch_size, args.dtype, args.trials, args.device)
    else:  # NOTE [module timing]: any model, op by op for memory, module by module for time
        from ..gpu.profile.ops import profile_workload
        data = profile_workload(args.model, args.batch_size, args.dtype, args.seq_len,
                                args.input, kwargs, args.trials, args.device,
                                optimizer=args.optimizer, check=not args.no_check)
    trace = trace_from_dict(data, args.model)
    save_trace(trace, args.output)
    print(f"wrote {_shown(args.output)}: {trace.name}, batch {trace.batch_size}, "
          f"{len(trace.layers)} layers, profiled on {trace.source.gpu}, "
          f"resident {trace.resident_bytes / MiB:.1f} MiB")
    return 0


def _model_kwargs(pairs: list[str] | None) -> dict:
    """NOTE [workloads]: ``--model-arg KEY=VALUE`` (repeatable), VALUE read as YAML."""
    import yaml

    from ..errors import ConfigError
    out = {}
    for p in pairs or []:
        key, eq, value = p.partition("=")
        if not eq or not key.strip().isidentifier():
            raise ConfigError(f"--model-arg {p!r}: use KEY=VALUE (a keyword of the model's "
                              "factory or config)")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"--model-arg {p!r}: the value is not a YAML scalar") from None
    return out


def _memory_cap(args: argparse.Namespace) -> int | None:
    """``--memory-cap SIZE`` in bytes (the byte-size parser's: '12GiB', '12.5GB', '1e9'),
    or the deprecated ``--memory-cap-gb G``, which has always meant GiB."""
    if args.memory_cap_gb is None:
        return _size_arg("--memory-cap", args.memory_cap)
    if args.memory_cap is not None:
        from ..errors import ConfigError
        raise ConfigError("give --memory-cap, not both it and the deprecated --memory-cap-gb")
    print(f"vdnnsim: warning: --memory-cap-gb is deprecated and means GiB: use --memory-cap "
          f"'{args.memory_cap_gb:g} GiB'", file=sys.stderr)
    return int(args.memory_cap_gb * GiB)


def _plan_allocator(plan: Any, given: dict, path: str | None) -> dict:
    """NOTE [planned allocator]: the allocator settings a measurement of ``plan`` runs
    with: ``given`` (--allocator) where given, else the plan's own; a line on stderr where
    they differ (the plan was checked under its own)."""
    from ..engine import ALLOWED
    own = plan.allocator.conf() if plan is not None and plan.allocator is not None else {}
    if not given:
        return own
    if plan is not None and {k: v for k, v in given.items() if ALLOWED[k].default != v} != own:
        said = ", ".join(f"{k}={v}" for k, v in own.items()) or "PyTorch's defaults"
        print(f"vdnnsim: warning: {path} was planned under the allocator settings {said}; "
              "it is measured under --allocator's (NOTE [planned allocator])",
              file=sys.stderr)
    return given


def cmd_measure(args: argparse.Namespace) -> int:
    """NOTE [measurement]; with --repeat, NOTE [repeated measurement]."""
    from ..engine import ENV, effective, env_string, parse_pairs
    from ..errors import ConfigError

    cap = _memory_cap(args)  # before torch: a bad size needs no GPU to be told
    given = parse_pairs(args.allocator)  # NOTE [measured allocator settings]
    if args.warmup_processes is not None and not args.repeat:
        raise ConfigError("--warmup-processes goes with --repeat N")
    if args.optimizer_pinning != "caching" and not args.optimizer_offload and not args.plan:
        raise ConfigError("--optimizer-pinning goes with --optimizer-offload (or a plan "
                          "that offloads the optimizer)")
    _writable(args.memory_history)
    kwargs = _model_kwargs(args.model_arg)
    plan = None
    if args.plan:  # NOTE [planned runtime], NOTE [plan files]
        from ..planners.planfile import LayerPlanFile, read_plan_file
        from ..planners.greedy import OP_LAYERS, OP_PLAN_CANNOT_RUN
        plan = read_plan_file(args.plan)
        if plan.batch_size != args.batch_size:
            raise ConfigError(f"{args.plan}: planned for batch {plan.batch_size}, not "
                              f"{args.batch_size}")
        if isinstance(plan, LayerPlanFile) and plan.layer_names == OP_LAYERS:
            raise ConfigError(f"{args.plan}: {OP_PLAN_CANNOT_RUN}")
        if args.policy not in ("baseline", "planned"):
            raise ConfigError("--plan runs the plan's policy; leave --policy out")
        args.policy = "planned"
    elif args.policy == "planned":
        raise ConfigError("policy planned needs --plan FILE (written by vdnnsim plan)")
    conf = effective(_plan_allocator(plan, given, args.plan))
    if conf and not args.repeat:  # read when CUDA first allocates: set before that
        torch_ = sys.modules.get("torch")
        if torch_ is not None and torch_.cuda.is_initialized() and \
                os.environ.get(ENV) != env_string(conf):
            raise ConfigError("--allocator: CUDA is already initialised in this process, so "
                              "its allocator has read its settings; run vdnnsim measure in "
                              "a fresh process (or with --repeat)")
        os.environ[ENV] = env_string(conf)
    _need_torch()
    import torch

    if not torch.cuda.is_available():  # after the checks above: they need no GPU
        raise ConfigError("vdnnsim measure needs a CUDA GPU (none is visible)")
    if args.repeat:
        from ..measured.repeat import repeat
        env = dict(os.environ)
        if conf:
            env[ENV] = env_string(conf)
        rec = repeat(args, cap, args.repeat,
                     1 if args.warmup_processes is None else args.warmup_processes, env,
                     args.memory_history)
    else:
        from ..gpu.measure.harness import measure
        history = None
        if args.memory_history:
            import pickle

            from ..yamlio import write_atomic

            def history(snapshot: dict) -> None:
                write_atomic(args.memory_history,
                             lambda f: pickle.dump(snapshot, f, protocol=4), binary=True)
        try:
            rec = measure(args.model, args.batch_size, args.policy, cap, args.warmup,
                          args.iters, args.dtype, plan, args.optimizer, args.seq_len,
                          args.input, kwargs, history, conf,
                          step_probe=not args.no_step_probe,
                          optimizer_offload=args.optimizer_offload,
                          optimizer_pinning=args.optimizer_pinning)
        except ValueError as exc:  # a plan the model cannot run
            raise ConfigError(f"{args.plan or args.model}: {exc}") from None
    if args.json:
        print(json.dumps(rec, indent=2))
    elif rec["fits"]:
        band = ""
        if "iteration_ms_band" in rec:
            lo, hi = rec["iteration_ms_band"]
            band = (f" (median of {rec['repeat']['processes']} processes, {lo:.1f} to "
                    f"{hi:.1f})")
        print(f"{args.model} batch {args.batch_size} {args.policy}: "
              f"{rec['iteration_ms']:.1f} ms/iter{band}, peak allocated "
              f"{rec['peak_allocated_bytes'] / GiB:.2f} GiB, reserved "
              f"{rec['peak_reserved_bytes'] / GiB:.2f} GiB")
    else:
        under = f" under the {cap / GiB:.2f} GiB cap" if cap else ""
        print(f"{args.model} batch {args.batch_size} {args.policy}: out of memory{under}")
    if args.memory_history:
        last = rec["processes"][-1] if args.repeat else rec
        what = ("the allocator's segments where it ran out of memory"
                if last.get("memory_history", {}).get("at") else
                "the allocator's history over the timed steps")
        print(f"wrote {_shown(args.memory_history)}: {what} (vdnnsim import "
              f"{args.memory_history} --segments)" if last.get("memory_history") else
              "no memory history written: the run did not reach its timed steps",
              file=sys.stderr)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    _writable(args.output)
    _need_torch()
    import torch

    from ..errors import ConfigError
    from ..gpu.calibrate.kernels import calibrate
    from ..yamlio import write_text_atomic

    if args.cpu_step:  # NOTE [cpu step model]: the host alone; no GPU needed
        return _calibrate_cpu_step(args)
    if args.threads is not None:
        raise ConfigError("--threads goes with --cpu-step")
    if not torch.cuda.is_available():
        raise ConfigError("vdnnsim calibrate needs a CUDA GPU (none is visible)")
    if not 0 < args.scale <= 10:
        raise ConfigError(f"--scale must be in (0, 10], got {args.scale}")
    if args.ops:  # NOTE [op calibration]
        from ..gpu.calibrate.ops import calibrate_ops as calibrate
    if args.host_only:
        if not args.ops:
            raise ConfigError("--host-only goes with --ops")
        if args.classes != "all":
            raise ConfigError("--classes does not go with --host-only (the host chains are "
                              "of every class)")
        from ..gpu.calibrate.ops import host_only
        data = host_only()
    elif args.ops:
        data = calibrate(args.dtype, args.scale, args.seed,
                         progress=lambda m: print(m, file=sys.stderr, flush=True),
                         classes=args.classes)
    else:
        if args.classes != "all":
            raise ConfigError("--classes goes with --ops")
        data = calibrate(args.dtype, args.scale, args.seed,
                         progress=lambda m: print(m, file=sys.stderr, flush=True))
    write_text_atomic(args.output, json.dumps(data, indent=1))
    print(f"wrote {_shown(args.output)}: {len(data['records'])} timed passes, "
          f"{len(data.get('host_chains', []))} host chains on {data['gpu']['name']} "
          f"({data['dtype']})")
    return 0


def _calibrate_cpu_step(args: argparse.Namespace) -> int:
    """``vdnnsim calibrate --cpu-step``: the host's CPU optimizer step swept over thread
    counts, fitted (NOTE [cpu step model]); the file holds the records and the fit."""
    from ..costs.cpustep import fit, format_fit
    from ..errors import ConfigError
    from ..gpu.runtime.cpu_optimizer import calibrate_cpu_step
    from ..yamlio import write_text_atomic

    if args.ops or args.host_only or args.classes != "all":
        raise ConfigError("--cpu-step does not go with --ops, --host-only or --classes")
    threads = None
    if args.threads is not None:
        try:
            threads = [int(t) for t in args.threads.split(",")]
        except ValueError:
            raise ConfigError(f"--threads: comma-separated counts, got {args.threads!r}") \
                from None
        if not threads or min(threads) < 1 or max(threads) > 4096:
            raise ConfigError(f"--threads: counts from 1 to 4096, got {args.threads!r}")
        if 1 not in threads:
            raise ConfigError("--threads must include 1 (the one-thread step is the fit's "
                              "arithmetic)")
    import torch
    if threads is not None and torch.get_num_threads() not in threads:
        raise ConfigError(f"--threads must include torch's default, "
                          f"{torch.get_num_threads()} (the runtime's)")
    data = calibrate_cpu_step("adamw", threads,
                              progress=lambda m: print(m, file=sys.stderr, flush=True))
    fields, rows = fit(data)
    data.update(fit=fields, check=rows)
    write_text_atomic(args.output, json.dumps(data, indent=1))
    print(format_fit(fields, rows))
    print(f"wrote {_shown(args.output)}: {len(data['records'])} timed steps on "
          f"{len(data['bandwidth'])} thread counts")
    return 0


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
    """NOTE [import]: a torch.profiler trace or a CUDA memory snapshot as validation data."""
    from ..measured.importers import format_record, import_file, to_json
    from ..yamlio import write_text_atomic

    _writable(args.output)
    rec = import_file(args.file, segments=args.segments)
    if args.output:
        write_text_atomic(args.output, to_json(rec) + "\n")
        print(f"wrote {_shown(args.output)}: {rec['kind']}", file=sys.stderr)
    print(to_json(rec) if args.json else format_record(rec))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from ..hardware import gpu_preset, preset_names
    from ..network import ZOO
    from ..policies.registry import POLICIES, policy_names

    what = args.what
    if what in ("networks", "all"):
        from ..gpu.model.hf import shipped
        print("networks: " + ", ".join(ZOO))
        print("hf models (vdnnsim measure --model; vdnnsim[hf]): "
              + ", ".join(f"hf:{n}" for n in shipped()))
    if what in ("gpus", "all"):
        print("gpus:")
        for n in preset_names():
            g = gpu_preset(n)
            print(f"  {n:15s} {g.display_name}: {g.memory_bytes / GiB:.1f} GiB, "
                  f"{g.peak_flops['fp32'] / 1e12:.1f} TFLOP/s fp32, "
                  f"{g.mem_bw_bytes_per_s / GB:.0f} GB/s, link "
                  f"{g.link.h2d_bw_bytes_per_s / GB:.1f} GB/s, host "
                  f"{(g.host_memory_bytes or 0) / GiB:.0f} GiB")
    if what in ("policies", "all"):
        print("policies:")
        for n in policy_names():
            print(f"  {n:12s} {POLICIES[n][2]}")
    return 0


def _workload_args(p: argparse.ArgumentParser) -> None:
    """NOTE [workloads]: what builds a model beside its spec (trace, profile, measure: the
    same flags, so that a model traced without a GPU is the one profiled and measured)."""
    p.add_argument("--model-arg", action="append", default=None, metavar="KEY=VALUE",
                   help="a keyword argument of the factory, or a config key of an hf: model "
                   "(repeatable)")
    p.add_argument("--input", default=None, help="a factory's input: image:C,H,W[:CLASSES] "
                   "or tokens:SEQ:VOCAB")
    p.add_argument("--seq-len", type=int, default=None,
                   help="sequence length of an hf: language model (default: up to 512)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="vdnnsim", description="Simulate GPU memory and time of DNN training "
                "under vDNN-style offload/prefetch policies.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="simulate a run config or a study and print a table")
    r.add_argument("config", help="run config or study YAML")
    r.add_argument("--json", action="store_true", help="print a JSON list, one record a run")
    r.add_argument("--chrome-trace", default=None, metavar="FILE",
                   help="also write the runs' timelines as Chrome trace JSON (Perfetto)")
    r.set_defaults(fn=cmd_run)

    t = sub.add_parser("trace", help="synthesize a trace file from a network and a GPU preset")
    t.add_argument("network", nargs="?", default=None, help="zoo name or network spec YAML")
    t.add_argument("--model", default=None, help="torchvision:NAME or zoo:NAME, built on the "
                   "meta device (needs torch) instead of a network; hf:NAME or "
                   "package.module:factory give a memory trace (NOTE [op probe])")
    _workload_args(t)
    t.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"],
                   help="the optimizer whose state and step the trace holds (NOTE "
                   "[optimizer state])")
    t.add_argument("--batch-size", "-b", type=int, default=None)
    t.add_argument("--gpu", default="k40", help="GPU preset whose cost model times it")
    t.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16", "autocast-bf16",
                                                       "autocast-fp16"],
                   help="autocast-*: hf: and factory models only")
    t.add_argument("--output", "-o", required=True, help="trace YAML to write ('-': stdout)")
    t.set_defaults(fn=cmd_trace)

    sw = sub.add_parser("sweep", help="run a study (grid) into one table, CSV or Parquet")
    sw.add_argument("study", help="study YAML (sweep/zip/runs) or run config")
    sw.add_argument("--output", "-o", default=None, help="results .csv or .parquet")
    sw.add_argument("--workers", type=int, default=None, help="local worker processes")
    sw.add_argument("--scheduler", default=None, help="Dask distributed scheduler address")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    sw.set_defaults(fn=cmd_sweep)

    pl = sub.add_parser("plot", help="draw a figure: memory, timeline, sweep or validation")
    pl.add_argument("kind", choices=["memory", "timeline", "sweep", "validation"])
    pl.add_argument("input", nargs="+", help="run config (memory, timeline); study or "
                    "results .csv/.parquet (sweep); traces folders or files (validation)")
    pl.add_argument("--measurements", action="append", default=None,
                    help="measurements JSON or JSON Lines (validation); given again for "
                    "several files, oldest first: a later file's record of a run replaces "
                    "the earlier ones (as in validate)")
    pl.add_argument("--output", "-o", required=True, help=".png, .pdf or .svg")
    pl.set_defaults(fn=cmd_plot)

    pn = sub.add_parser("plan", help="plan offloads and algorithms under a memory budget "
                        "(NOTE [planner])")
    pn.add_argument("config", help="run config YAML (its network, batch size and GPU)")
    pn.add_argument("--budget", required=True, help="memory budget, e.g. '12 GiB'")
    pn.add_argument("--output", "-o", default=None, help="plan file to write (YAML)")
    pn.add_argument("--method", choices=["auto", "milp", "greedy", "blocks"], default="auto",
                    help="the exact MILP (NOTE [milp planner]), the greedy search (NOTE "
                    "[planner]), or both where the MILP is tractable (default); blocks: the "
                    "fewest offloaded or checkpointed blocks of any model (NOTE [block plan]; "
                    "the default for a trace with blocks)")
    pn.add_argument("--optimizer-offload", choices=["auto", "on", "off"], default=None,
                    help="the optimizer's state and step on the CPU (NOTE [optimizer "
                    "offload]) on, off, or auto: for block plans both, and the plan that fits "
                    "in fewer blocks or runs faster (where the preset's host has a calibrated "
                    "CPU step), for the layer planners (milp, greedy) off; default: on where "
                    "the run config sets optimizer_offload, else auto")
    pn.add_argument("--allocator", action="append", default=None, metavar="KEY=VALUE",
                    help="plan under this caching allocator setting, e.g. "
                    "expandable_segments=true (over the run config's allocator:); the plan "
                    "file says it and vdnnsim measure --plan runs under it (NOTE [planned "
                    "allocator])")
    pn.add_argument("--no-headroom", action="store_true",
                    help="check plans of PyTorch traces with their own workspaces, not twice "
                    "them (NOTE [autotune headroom])")
    pn.set_defaults(fn=cmd_plan)

    mb = sub.add_parser("maxbatch", help="the largest batch size that fits (a search)")
    mb.add_argument("--network", "-n", action="append", required=True,
                    help="zoo name or network spec YAML (repeatable)")
    mb.add_argument("--gpu", "-g", action="append", default=None, help="preset (repeatable)")
    mb.add_argument("--policy", "-p", action="append", default=None,
                    help="policy (repeatable; default vdnn_dyn)")
    mb.add_argument("--memory", default=None, help="pool capacity, e.g. '12 GiB'")
    mb.add_argument("--host-memory", default=None, help="host memory offloads may pin, e.g. "
                    "'64 GiB' (default: the preset's; NOTE [host memory])")
    mb.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    mb.add_argument("--limit", type=int, default=1 << 16, help="largest batch to try")
    mb.add_argument("--json", action="store_true")
    mb.set_defaults(fn=cmd_maxbatch)

    rp = sub.add_parser("reproduce", help="the vDNN paper's headline numbers and figure "
                        "values beside vdnnsim's")
    rp.add_argument("--studies", default=None, help="folder of the paper studies "
                    "(default: the repository's configs/paper)")
    rp.add_argument("--output", "-o", default=None, help="folder to write the table (md, "
                    "csv) and figures into")
    rp.add_argument("--json", action="store_true", help="print the claims and the figure "
                    "cells as one JSON object")
    rp.add_argument("--cells", action="store_true", help="print every value of the paper's "
                    "Figs. 11, 12, 14 and 15 beside vdnnsim's (markdown)")
    rp.add_argument("--reading", choices=["measured", "text"], default="measured",
                    help="which layers findPrefetchLayer sees as offloaded (docs/policies.md, "
                    "'Offload marks'; default: measured)")
    rp.add_argument("--reference", choices=["baseline_p", "class"], default="baseline_p",
                    help="baseline of the memory reductions: baseline_p (default) or the "
                    "policy's own algorithm class (docs/reproduction.md)")
    rp.add_argument("--costs", choices=["preset", "published"], default="preset",
                    help="time the paper's GPUs with the presets' analytic costs (default) or "
                    "with their calibration from published cuDNN timings (docs/reproduction.md)")
    rp.add_argument("--average", choices=["time", "layer"], default="time",
                    help="the paper's average memory read as the time-weighted mean (default) "
                    "or the mean over the layer passes (docs/reproduction.md)")
    rp.set_defaults(fn=cmd_reproduce)

    pf = sub.add_parser("profile", help="profile a PyTorch model on the GPU into a trace")
    pf.add_argument("--model", required=True, help="torchvision:NAME, zoo:NAME (layer by "
                    "layer), hf:NAME or package.module:factory (op by op, timed by module with "
                    "torch.profiler: NOTE [module timing])")
    _workload_args(pf)
    pf.add_argument("--batch-size", "--batch", "-b", type=int, required=True)
    pf.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"],
                    help="the step to profile (sgd: the simulator scales it for Adam, NOTE "
                    "[optimizer state]; adam/adamw: measured, the trace replays with it only)")
    pf.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16",
                                                        "autocast-bf16", "autocast-fp16"])
    pf.add_argument("--trials", type=int, default=5, help="timed training steps (each layer's time is the median)")
    pf.add_argument("--no-check", action="store_true",
                    help="write the profile even if it does not account for the step "
                    "(NOTE [profile check]; the failure is then in its note)")
    pf.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    pf.add_argument("--output", "-o", required=True, help="trace YAML to write")
    pf.set_defaults(fn=cmd_profile)

    ms = sub.add_parser("measure", help="time and measure real training steps on the GPU")
    ms.add_argument("--model", required=True, help="torchvision:NAME, zoo:NAME, hf:NAME "
                    "(transformers, from a config in the repository) or package.module:factory "
                    "(NOTE [workloads])")
    _workload_args(ms)
    ms.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"])
    ms.add_argument("--batch-size", "--batch", "-b", type=int, required=True)
    ms.add_argument("--policy", default="baseline",
                    choices=["baseline", "vdnn_all", "vdnn_conv", "save_on_cpu", "planned"])
    ms.add_argument("--plan", default=None, help="a plan file from vdnnsim plan: run it "
                    "(policy planned; NOTE [planned runtime])")
    ms.add_argument("--memory-cap", default=None, metavar="SIZE",
                    help="cap the allocator at this size, e.g. '12 GiB' or '12.5 GB' "
                    "(emulates a smaller card)")
    # deprecated: it always meant GiB; kept one release for committed scripts
    ms.add_argument("--memory-cap-gb", type=float, default=None, help=argparse.SUPPRESS)
    ms.add_argument("--warmup", type=int, default=3)
    ms.add_argument("--iters", type=int, default=5)
    ms.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16",
                                                        "autocast-bf16", "autocast-fp16"],
                    help="fp32; pure bf16/fp16; or fp32 weights under torch.autocast "
                    "(fp16 with a GradScaler)")
    ms.add_argument("--repeat", type=int, default=None, metavar="N",
                    help="measure in N fresh processes, one after another, after discarded "
                    "warm-up processes: median and band (NOTE [repeated measurement])")
    ms.add_argument("--warmup-processes", type=int, default=None, metavar="K",
                    help="with --repeat: processes run first and discarded (default 1; 0 "
                    "for a machine already warm)")
    ms.add_argument("--allocator", action="append", default=None, metavar="KEY=VALUE",
                    help="a caching allocator setting (PYTORCH_CUDA_ALLOC_CONF), e.g. "
                    "expandable_segments=true; repeatable (NOTE [measured allocator settings])")
    ms.add_argument("--memory-history", default=None, metavar="FILE",
                    help="record the allocator's history over the timed steps and write its "
                    "snapshot (a pickle) to FILE (out of memory: the snapshot there); with "
                    "--repeat, the last process's")
    ms.add_argument("--no-step-probe", action="store_true",
                    help="no host probe after each timed step (NOTE [host probe]): for "
                    "checking that the probe does not move the steps' host time")
    ms.add_argument("--optimizer-offload", action="store_true",
                    help="the optimizer's state and step on the CPU, each gradient copied "
                    "there as the backward pass makes it (NOTE [optimizer offload])")
    ms.add_argument("--optimizer-pinning", choices=["caching", "registered"],
                    default="caching", help="with the optimizer on the CPU: its host copies "
                    "from PyTorch's pinned allocator (each rounded up to a power of two; "
                    "default) or one buffer registered with cudaHostRegister (NOTE "
                    "[optimizer pinning])")
    ms.add_argument("--json", action="store_true")
    ms.set_defaults(fn=cmd_measure)

    ca = sub.add_parser("calibrate", help="microbenchmark the ops of PyTorch training on the "
                        "GPU into a calibration file (docs/cost-model.md)")
    ca.add_argument("--output", "-o", required=True, help="calibration JSON to write")
    ca.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    ca.add_argument("--scale", type=float, default=1.0,
                    help="share of the default grid to run (0.1: a quick look)")
    ca.add_argument("--seed", type=int, default=0, help="the grid's random seed")
    ca.add_argument("--ops", action="store_true", help="the ATen ops of training steps "
                    "(GEMMs, attention, norms, pointwise, loss, AdamW; convolutions, CNN norms "
                    "and pooling; NOTE [op calibration]) for the op-level model, instead of "
                    "the CNN layer grid")
    ca.add_argument("--classes", default="all", choices=["all", "transformer", "cnn", "norms"],
                    help="with --ops: which grids to run (default: all three)")
    ca.add_argument("--host-only", action="store_true", help="with --ops: only the host's "
                    "cost per op (chains of small ops, of one op and mixed; fp32, bf16, "
                    "bf16 autocast)")
    ca.add_argument("--cpu-step", action="store_true", help="the host's CPU optimizer step "
                    "(fused AdamW) and memory bandwidth on each thread count, fitted into "
                    "the host fields of a run config's gpu: (NOTE [cpu step model]; no GPU "
                    "needed)")
    ca.add_argument("--threads", help="with --cpu-step: the thread counts, e.g. 1,2,4,8,16 "
                    "(default: powers of two up to torch's default, and it)")
    ca.set_defaults(fn=cmd_calibrate)

    va = sub.add_parser("validate", help="predicted vs measured peak memory and time")
    va.add_argument("traces", nargs="+", help="folders of profiled traces (or trace files)")
    va.add_argument("measurements", help="JSON list of measurement records (or JSON Lines); "
                    "several files, oldest first, where runs were measured again: a later "
                    "file's record of a run replaces the earlier ones")
    va.add_argument("--gpu", default="h200", help="GPU preset to simulate with")
    va.add_argument("--reserved", choices=["timed", "one-step"], default="timed",
                    help="the measured reserved peak to compare with: over the timed steps "
                    "(default), or one step's own from an emptied cache")
    va.add_argument("--scale-host", action="store_true",
                    help="replay each run whose trace and record both have the host probe "
                    "between timed steps with its host costs times their ratio (NOTE "
                    "[host speed])")
    va.add_argument("--json", action="store_true")
    va.set_defaults(fn=cmd_validate)

    im = sub.add_parser("import", help="read a torch.profiler trace or a CUDA memory "
                        "snapshot pickle as validation data (NOTE [import])")
    im.add_argument("file", help="Chrome trace JSON (.json, .json.gz) or a "
                    "torch.cuda.memory._dump_snapshot pickle")
    im.add_argument("--output", "-o", default=None, help="JSON record to write")
    im.add_argument("--json", action="store_true", help="print the JSON record")
    im.add_argument("--segments", action="store_true",
                    help="a snapshot's segments at its peak reserved moment, per stream and "
                    "pool, with the cudaMalloc/cudaFree counts (NOTE [snapshot segments])")
    im.set_defaults(fn=cmd_import)

    ls = sub.add_parser("list", help="list networks, GPU presets and policies")
    ls.add_argument("what", nargs="?", default="all",
                    choices=["all", "networks", "gpus", "policies"])
    ls.set_defaults(fn=cmd_list)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (NOTE [user errors], NOTE [interrupt])."""
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
    # NOTE [bounds]: counts a person could mistype, with the reason for each ceiling
    for name, least, most, why in (
            ("trials", 1, 10_000, "each is a timed training step"),
            ("iters", 1, 10_000, "each is a timed training step"),
            ("warmup", 0, 10_000, "each is a training step"),
            ("repeat", 1, 100, "each is a fresh process"),
            ("warmup_processes", 0, 10, "each is a discarded process"),
            ("workers", 1, 1024, "one process per core is the most that helps"),
            ("limit", 1, 2**40, "the search doubles the batch up to this"),
            ("seq_len", 1, 2**20, "tokens a sample: a model's positions are far fewer")):
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
    except InvariantViolation as exc:  # NOTE [invariants]: a bug report, not a wrong number
        print(f"vdnnsim: internal error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BUG
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
