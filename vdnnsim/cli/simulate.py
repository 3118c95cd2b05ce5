"""Commands that simulate: run, trace, sweep, plot, maxbatch, reproduce, list."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..errors import ConfigError
from ..units import GB, GiB
from .common import (clean, fold_lora, fold_routing, fold_step_options, host_cal_arg,
                     json_default, model_kwargs, need_torch, shown, size_arg, writable)


def _is_study(path: str) -> bool:
    from ..yamlio import read_yaml

    data = read_yaml(path)
    return isinstance(data, dict) and bool({"sweep", "zip", "runs", "base"} & set(data))


def cmd_run(args: argparse.Namespace) -> int:
    from ..api import run_config
    from ..config import load_config
    from ..report import format_table

    writable(args.chrome_trace)
    cal = host_cal_arg(args)
    if _is_study(args.config):
        if args.chrome_trace:
            raise ConfigError(f"--chrome-trace takes a run config, and {args.config} is a "
                              "study, whose runs keep no timelines: run one of its configs")
        return _run_study(args, cal)
    cfg, base = load_config(args.config)
    results = run_config(cfg, base, record=bool(args.chrome_trace), source=args.config,
                         host_cal=cal)
    if args.chrome_trace:
        from ..report.chrome import dumps
        from ..yamlio import write_text_atomic
        write_text_atomic(args.chrome_trace, dumps(results))
        print(f"wrote {shown(args.chrome_trace)}: {len(results)} runs (open it in ui.perfetto.dev)",
              file=sys.stderr)
    if args.json:
        print(json.dumps([clean(r.summary()) for r in results], indent=2,
                         default=json_default))
    else:
        print(format_table(results, cfg.name))
    return 0


def _run_study(args: argparse.Namespace, cal: Any) -> int:
    from ..report.table import format_rows
    from ..study import load_study, run_study

    spec, base = load_study(args.config)
    df = run_study(spec, base, host_cal=cal)
    if args.json:
        print(df.to_json(orient="records", indent=2))
    else:
        print(format_rows(df, spec.name))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..report.table import format_rows
    from ..study import load_study, run_study, write_results

    if args.output and not args.output.endswith((".csv", ".parquet")):
        raise ConfigError(f"{args.output}: write .csv or .parquet")
    writable(args.output)
    cal = host_cal_arg(args)
    spec, base = load_study(args.study)
    progress = not args.no_progress and sys.stderr.isatty()
    df = run_study(spec, base, progress, args.workers, args.scheduler, cal)
    if args.output:
        write_results(df, args.output)
        bad = int(df["error"].notna().sum()) if "error" in df else 0
        fits = int(df["fits"].fillna(False).astype(bool).sum()) if "fits" in df else 0
        print(f"wrote {shown(args.output)}: {len(df)} runs, {fits} fit, {bad} failed")
    else:
        print(format_rows(df, spec.name))
    return 0


def cmd_maxbatch(args: argparse.Namespace) -> int:
    from ..report.table import format_slowdown
    from ..study.maxbatch import max_batch

    cap = size_arg("--memory", args.memory)
    host = size_arg("--host-memory", args.host_memory)
    rows = [max_batch(n, g, p, dtype=args.dtype, memory_bytes=cap, limit=args.limit,
                      host_memory_bytes=host)
            for n in args.network for g in args.gpu for p in args.policy]
    if args.json:
        print(json.dumps([clean(r) for r in rows], indent=2))
        return 0
    # the bound is what stops the next batch size
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

    from ..report import plots
    from ..yamlio import shown, write_atomic

    out = Path(args.output)
    if out.suffix not in (".png", ".pdf", ".svg"):
        raise ConfigError(f"{out}: write .png, .pdf or .svg")
    writable(out)
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
        table = validate(inputs, args.measurements)
        if "measured_alloc_gib" not in table or not table.measured_fits.any():
            raise ConfigError(f"{', '.join(shown(m) for m in args.measurements)}: no "
                              "measured run fits its card: nothing to plot")
        fig = plots.validation_scatter(table)
    try:
        write_atomic(out, lambda f: fig.savefig(f, format=out.suffix[1:], dpi=100), binary=True)
    finally:  # pyplot holds every figure it made until closed: main may run again here
        plots.plt.close(fig)
    print(f"wrote {shown(out)}")
    return 0


def _results_table(df, source) -> Any:
    """A sweep's results (from `vdnnsim sweep -o`), with the columns a plot reads checked:
    a hand-edited or foreign table ends in one line naming the column, not a traceback."""
    import pandas as pd

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

    writable(args.output, folder=True)
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
        for name in figures.PAPER_PANELS:
            fig = figures.paper_beside(cells, name)
            write_atomic(out / f"paper_{name.lower()}.png",
                         lambda f, fig=fig: fig.savefig(f, format="png", dpi=90), binary=True)
            figures.plt.close(fig)
        print(f"wrote {shown(out)}/reproduction.md, reproduction.csv, figure_cells.md, "
              "figure_cells.csv and 12 figures", file=sys.stderr)
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from ..api import build_trace, resolve_gpu
    from ..trace import save_trace, trace_from_dict

    writable(args.output)
    cal = host_cal_arg(args)
    if args.lora is not None and not args.model:
        raise ConfigError("--lora goes with --model hf:NAME")
    if (args.micro_batches is not None or args.grad_checkpointing) and (
            not args.model or args.model.split(":")[0] in ("torchvision", "zoo")):
        raise ConfigError("--micro-batches and --grad-checkpointing go with --model hf:NAME, "
                          "diffusers:NAME or package.module:factory (traced op by op)")
    fold_lora(args)
    fold_routing(args)
    fold_step_options(args)
    gpu = resolve_gpu(args.gpu or "k40")
    if args.model:
        if args.network:
            raise ConfigError("give a network or --model, not both")
        need_torch()
        if not args.batch_size:
            raise ConfigError("--model needs --batch-size")
        if args.model.split(":")[0] in ("torchvision", "zoo"):
            from ..gpu.profile.layers import synthesize_model
            if args.dtype not in ("fp32", "fp16", "bf16") or args.seq_len or args.input \
                    or args.model_arg:
                raise ConfigError(f"{args.model}: --dtype fp32, fp16 or bf16, and no "
                                  "--seq-len, --input or --model-arg")
            trace = trace_from_dict(synthesize_model(args.model, args.batch_size, gpu,
                                                     args.dtype), args.model)
        else:  # any model, its memory only
            from ..gpu.probe.aten import memory_trace
            trace = trace_from_dict(memory_trace(args.model, args.batch_size, gpu, args.dtype,
                                                 args.seq_len, model_kwargs(args.model_arg),
                                                 args.input), args.model)
            from ..hardware import gpu_preset, preset_names
            timed_on = ", ".join(n for n in preset_names() if gpu_preset(n).op_calibration)
            if trace.source.cost_model == "none":
                print("note: a memory trace: every layer is 0 ns, so its "
                      "runs show memory, not times; GPUs with an "
                      f"op-level model: {timed_on}", file=sys.stderr)
            elif not gpu.op_calibration:
                _spec_rule_said(gpu, timed_on)
    elif args.network:
        if args.seq_len or args.input or args.model_arg:
            raise ConfigError("--seq-len, --input and --model-arg go with --model")
        trace = build_trace(args.network, args.batch_size, gpu, args.dtype,
                            retime=args.gpu is not None)  # NOTE [retime]
        from ..costs.retime import run_note
        if run_note(trace) and not gpu.op_calibration and trace.source.kind == "synthesized":
            from ..hardware import gpu_preset, preset_names
            _spec_rule_said(gpu, ", ".join(n for n in preset_names()
                                           if gpu_preset(n).op_calibration))
    else:
        raise ConfigError("give a network (zoo name or spec/trace YAML) or --model")
    if args.optimizer != "sgd":  # its moments and step temporary
        from ..trace.optimizer import with_optimizer
        trace = with_optimizer(trace, args.optimizer)
    if cal is not None:
        trace = _host_calibrated(trace, gpu, cal)
    if args.output == "-":
        from ..trace import trace_to_dict
        from ..yamlio import dump_yaml
        sys.stdout.write(dump_yaml(trace_to_dict(trace)))
    else:
        save_trace(trace, args.output)
        how = {"calibrated-v1": "its calibrated kernel model",
               "aten-v1": "its op-level kernel model",
               "aten-v1-specs": "another GPU's op-level kernel model from its specs"}.get(
            trace.source.cost_model, f"the cost model ({trace.source.cost_model})")
        timed = (f"timed for {gpu.name} by {how}"
                 if trace.source.kind == "synthesized" and trace.source.gpu == gpu.name
                 else f"times as recorded ({trace.source.kind})")
        if trace.source.cost_model == "none":
            timed = "memory only, not timed"
        from ..costs.retime import run_note
        timed = run_note(trace)[0] if run_note(trace) else timed
        print(f"wrote {shown(args.output)}: {trace.name}, batch {trace.batch_size}, "
              f"{len(trace.layers)} layers, {timed}")
    return 0


def _host_calibrated(trace: Any, gpu: Any, cal: Any) -> Any:
    """``vdnnsim trace --host-cal``: the trace's host costs times the calibration's factor,
    its source carrying that host's probes and the line (hostcal.py)."""
    from dataclasses import replace

    from ..hostcal import host_factor
    from ..hostspeed import at_host_speed

    if not trace.timed:
        raise ConfigError(f"--host-cal {shown(cal.path)}: a memory trace has no host times "
                          "to scale")
    k, line = host_factor(cal, trace, gpu)
    if k is None:
        raise ConfigError(f"{line}; it scales an op trace (hf:, diffusers:, a factory "
                          "model) or a trace profiled with the host probe")
    trace, _ = at_host_speed(trace, gpu, k)
    src = trace.source
    print(f"note: {line}", file=sys.stderr)
    return replace(trace, source=replace(
        src, host_probe_ns=cal.host_probe_ns, host_probe_between_ns=cal.host_probe_between_ns,
        note=f"{src.note}; {line}" if src.note else line))


def _spec_rule_said(gpu: Any, timed_on: str) -> None:
    from ..costs.ops import spec_rule_note
    print(f"note: {gpu.name} has no op calibration: timed from its specs by "
          f"another GPU's op model (calibrated: {timed_on}), "
          f"{spec_rule_note(gpu)}", file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    from ..hardware import gpu_preset, preset_names, timing_of
    from ..network import ZOO
    from ..policies.registry import POLICIES, policy_names

    what = args.what
    if what in ("networks", "all"):
        from ..gpu.model.hf import shipped
        print("networks: " + ", ".join(ZOO))
        print("hf models (vdnnsim measure --model; vdnnsim[hf]): "
              + ", ".join(f"hf:{n}" for n in shipped()))
        from ..gpu.model.diffusion import shipped as diffusion_models
        print("diffusers models (vdnnsim measure --model; vdnnsim[diffusers]): "
              + ", ".join(f"diffusers:{n}" for n in diffusion_models()))
    if what in ("gpus", "all"):
        print("gpus (or --gpu FILE.yaml, a spec file of your own: docs/hardware.md):")
        for n in preset_names():
            g = gpu_preset(n)
            print(f"  {n:15s} {g.display_name}: {g.memory_bytes / GiB:.1f} GiB, "
                  f"{g.peak_flops['fp32'] / 1e12:.1f} TFLOP/s fp32, "
                  f"{g.mem_bw_bytes_per_s / GB:.0f} GB/s, link "
                  f"{g.link.h2d_bw_bytes_per_s / GB:.1f} GB/s, host "
                  f"{(g.host_memory_bytes or 0) / GiB:.0f} GiB")
            print(f"  {'':15s} timing: {timing_of(g)}")
            print(f"  {'':15s} source: {g.source}")
    if what in ("policies", "all"):
        print("policies:")
        for n in policy_names():
            print(f"  {n:12s} {POLICIES[n][2]}")
    return 0


