"""The command line's parser, one small function per command (the order of `vdnnsim
--help`)."""

from __future__ import annotations

import argparse
from typing import Any

from . import data, gpu, plan, simulate
from .common import EXIT_USAGE, workload_args


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _run(sub: Any) -> None:
    r = sub.add_parser("run", help="simulate a run config or a study and print a table")
    r.add_argument("config", help="run config or study YAML")
    r.add_argument("--json", action="store_true", help="print a JSON list, one record a run")
    r.add_argument("--chrome-trace", default=None, metavar="FILE",
                   help="also write the runs' timelines as Chrome trace JSON (Perfetto)")
    r.add_argument("--host-cal", default=None, metavar="FILE",
                   help="a host calibration (vdnnsim calibrate --host): every host cost scaled to "
                   "that host's speed; without one, a host-bound step is also given as the "
                   "band between a fast and a slow host")
    r.set_defaults(fn=simulate.cmd_run)


def _trace(sub: Any) -> None:
    t = sub.add_parser("trace", help="synthesize a trace file from a network and a GPU preset")
    t.add_argument("network", nargs="?", default=None, help="zoo name or network spec YAML")
    t.add_argument("--model", default=None, help="a model instead of a network (needs "
                   "torch): torchvision:NAME or zoo:NAME, layer by layer on the meta device; "
                   "hf:NAME, diffusers:NAME or package.module:factory, op by op, timed by the "
                   "GPU's op-level model (memory only on a GPU without one)")
    workload_args(t)
    t.add_argument("--routing", default=None, metavar="LOAD",
                   help="a mixture-of-experts model's routing, which the meta device cannot "
                   "know: balanced (default), zipf:S, hot:F (expert 0 gets F times the "
                   "balanced share) or loads:W0,W1,... (a weight per expert)")
    t.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"],
                   help="the optimizer whose state and step the trace holds")
    t.add_argument("--batch-size", "-b", type=int, default=None)
    t.add_argument("--gpu", default=None, help="GPU preset whose cost model times it, or a "
                   "GPU spec file (YAML; docs/hardware.md); default k40; with a trace file, "
                   "re-times an op trace for it")
    t.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16", "autocast-bf16",
                                                       "autocast-fp16"],
                   help="autocast-*: hf:, diffusers: and factory models only")
    t.add_argument("--host-cal", default=None, metavar="FILE",
                   help="a host calibration (vdnnsim calibrate --host): the trace's host "
                   "costs scaled to that host's speed (an op trace, or one with a host probe)")
    t.add_argument("--output", "-o", required=True, help="trace YAML to write ('-': stdout)")
    t.set_defaults(fn=simulate.cmd_trace)


def _sweep(sub: Any) -> None:
    sw = sub.add_parser("sweep", help="run a study (grid) into one table, CSV or Parquet")
    sw.add_argument("study", help="study YAML (sweep/zip/runs) or run config")
    sw.add_argument("--output", "-o", default=None, help="results .csv or .parquet")
    sw.add_argument("--workers", type=int, default=None, help="local worker processes")
    sw.add_argument("--scheduler", default=None, help="Dask distributed scheduler address")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    sw.add_argument("--host-cal", default=None, metavar="FILE",
                    help="a host calibration (vdnnsim calibrate --host): every host cost scaled to "
                    "that host's speed; without one, a host-bound step is also given as the "
                    "band between a fast and a slow host")
    sw.set_defaults(fn=simulate.cmd_sweep)


def _plot(sub: Any) -> None:
    pl = sub.add_parser("plot", help="draw a figure: memory, timeline, sweep or validation")
    pl.add_argument("kind", choices=["memory", "timeline", "sweep", "validation"])
    pl.add_argument("input", nargs="+", help="run config (memory, timeline); study or "
                    "results .csv/.parquet (sweep); traces folders or files (validation)")
    pl.add_argument("--measurements", action="append", default=None,
                    help="measurements JSON or JSON Lines (validation); given again for "
                    "several files, oldest first: a later file's record of a run replaces "
                    "the earlier ones (as in validate)")
    pl.add_argument("--output", "-o", required=True, help=".png, .pdf or .svg")
    pl.set_defaults(fn=simulate.cmd_plot)


def _plan(sub: Any) -> None:
    pn = sub.add_parser("plan", help="plan offloads and algorithms under a memory budget")
    pn.add_argument("config", help="run config YAML (its network, batch size and GPU)")
    pn.add_argument("--budget", required=True, help="memory budget, e.g. '12 GiB'")
    pn.add_argument("--output", "-o", default=None, help="plan file to write (YAML)")
    pn.add_argument("--method", choices=["auto", "milp", "greedy", "blocks", "tensors"],
                    default="auto",
                    help="the exact MILP, the greedy search, or both where the MILP is "
                    "tractable; blocks: the fewest offloaded or checkpointed "
                    "blocks of any model; tensors: which saved tensors to offload and "
                    "which module calls to checkpoint, for a timed op-by-op trace; auto "
                    "(default): tensors and blocks for an op-by-op trace, the faster kept; "
                    "blocks for another trace with blocks, else MILP and greedy")
    pn.add_argument("--optimizer-offload", choices=["auto", "on", "off"], default=None,
                    help="the optimizer's state and step on the CPU on, off, or auto: for "
                    "block plans both, and the plan that fits "
                    "in fewer blocks or runs faster (where the preset's host has a calibrated "
                    "CPU step), for the layer planners (milp, greedy) off; default: on where "
                    "the run config sets optimizer_offload, else auto")
    pn.add_argument("--allocator", action="append", default=None, metavar="KEY=VALUE",
                    help="plan under this caching allocator setting, e.g. "
                    "expandable_segments=true (over the run config's allocator:); the plan "
                    "file says it and vdnnsim measure --plan runs under it")
    pn.add_argument("--margin", default=None, metavar="PCT",
                    help="leave this share of the budget free, e.g. 4%%, so that the run's "
                    "real peak stays under its cap (the plan's run keeps the budget as its "
                    "cap); default 4%% for tensor plans (and the block plan weighed against "
                    "them), 0 otherwise")
    pn.add_argument("--host-cal", default=None, metavar="FILE",
                    help="a host calibration (vdnnsim calibrate --host): every host cost scaled to "
                    "that host's speed; without one, a host-bound step is also given as the "
                    "band between a fast and a slow host")
    pn.add_argument("--no-headroom", action="store_true",
                    help="check plans of PyTorch traces with their own workspaces, not twice "
                    "them")
    pn.set_defaults(fn=plan.cmd_plan)


def _maxbatch(sub: Any) -> None:
    mb = sub.add_parser("maxbatch", help="the largest batch size that fits (a search)")
    mb.add_argument("--network", "-n", action="append", required=True,
                    help="zoo name or network spec YAML (repeatable)")
    mb.add_argument("--gpu", "-g", action="append", default=None,
                    help="preset or GPU spec file (repeatable)")
    mb.add_argument("--policy", "-p", action="append", default=None,
                    help="policy (repeatable; default vdnn_dyn)")
    mb.add_argument("--memory", default=None, help="pool capacity, e.g. '12 GiB'")
    mb.add_argument("--host-memory", default=None, help="host memory offloads may pin, e.g. "
                    "'64 GiB' (default: the preset's)")
    mb.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    mb.add_argument("--limit", type=int, default=1 << 16, help="largest batch to try")
    mb.add_argument("--json", action="store_true")
    mb.set_defaults(fn=simulate.cmd_maxbatch)


def _reproduce(sub: Any) -> None:
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
    rp.set_defaults(fn=simulate.cmd_reproduce)


def _profile(sub: Any) -> None:
    pf = sub.add_parser("profile", help="profile a PyTorch model on the GPU into a trace")
    pf.add_argument("--model", required=True, help="torchvision:NAME, zoo:NAME (layer by "
                    "layer), hf:NAME, diffusers:NAME or package.module:factory (op by op, timed "
                    "by module with torch.profiler)")
    workload_args(pf)
    pf.add_argument("--batch-size", "--batch", "-b", type=int, required=True)
    pf.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"],
                    help="the step to profile (sgd: the simulator scales it for Adam; "
                    "adam/adamw: measured, the trace replays with it only)")
    pf.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16",
                                                        "autocast-bf16", "autocast-fp16"])
    pf.add_argument("--trials", type=int, default=5,
                    help="timed training steps (each layer's time is the median)")
    pf.add_argument("--no-check", action="store_true",
                    help="write the profile even if it does not account for the step "
                    "(the failure is then in its note)")
    pf.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    pf.add_argument("--output", "-o", required=True, help="trace YAML to write")
    pf.set_defaults(fn=gpu.cmd_profile)


def _measure(sub: Any) -> None:
    ms = sub.add_parser("measure", help="time and measure real training steps on the GPU")
    ms.add_argument("--model", default=None, help="torchvision:NAME, zoo:NAME, hf:NAME "
                    "(transformers, from a config in the repository), diffusers:NAME (diffusers, "
                    "likewise) or package.module:factory (default: the plan's)")
    workload_args(ms)
    ms.add_argument("--optimizer", default=None, choices=["sgd", "adam", "adamw"],
                    help="default: the plan's, else sgd")
    ms.add_argument("--batch-size", "--batch", "-b", type=int, default=None,
                    help="needed unless --plan gives it")
    ms.add_argument("--policy", default=None,
                    choices=["baseline", "vdnn_all", "vdnn_conv", "save_on_cpu", "planned"])
    ms.add_argument("--plan", default=None, help="a plan file from vdnnsim plan: run it as "
                    "planned (its model, batch size, dtype, optimizer, budget as the cap and "
                    "allocator settings; a flag that contradicts it is refused)")
    ms.add_argument("--memory-cap", default=None, metavar="SIZE",
                    help="cap the allocator at this size, e.g. '12 GiB' or '12.5 GB' "
                    "(emulates a smaller card; default: a plan's budget)")
    # deprecated: it always meant GiB; kept one release for committed scripts
    ms.add_argument("--memory-cap-gb", type=float, default=None, help=argparse.SUPPRESS)
    ms.add_argument("--warmup", type=int, default=3)
    ms.add_argument("--iters", type=int, default=5)
    ms.add_argument("--dtype", default=None, choices=["fp32", "fp16", "bf16",
                                                      "autocast-bf16", "autocast-fp16"],
                    help="fp32 (default, or the plan's); pure bf16/fp16; or fp32 weights "
                    "under torch.autocast (fp16 with a GradScaler)")
    ms.add_argument("--repeat", type=int, default=None, metavar="N",
                    help="measure in N fresh processes, one after another, after discarded "
                    "warm-up processes: median and band")
    ms.add_argument("--warmup-processes", type=int, default=None, metavar="K",
                    help="with --repeat: processes run first and discarded (default 1; 0 "
                    "for a machine already warm)")
    ms.add_argument("--allocator", action="append", default=None, metavar="KEY=VALUE",
                    help="a caching allocator setting (PYTORCH_CUDA_ALLOC_CONF), e.g. "
                    "expandable_segments=true; repeatable")
    ms.add_argument("--memory-history", default=None, metavar="FILE",
                    help="record the allocator's history over the timed steps and write its "
                    "snapshot (a pickle) to FILE (out of memory: the snapshot there); with "
                    "--repeat, the last process's")
    ms.add_argument("--no-step-probe", action="store_true",
                    help="no host probe after each timed step: for "
                    "checking that the probe does not move the steps' host time")
    ms.add_argument("--optimizer-offload", action="store_true",
                    help="the optimizer's state and step on the CPU, each gradient copied "
                    "there as the backward pass makes it")
    ms.add_argument("--optimizer-pinning", choices=["caching", "registered"],
                    default="caching", help="with the optimizer on the CPU: its host copies "
                    "from PyTorch's pinned allocator (each rounded up to a power of two; "
                    "default) or one buffer registered with cudaHostRegister")
    ms.add_argument("--json", action="store_true")
    ms.set_defaults(fn=gpu.cmd_measure)


def _calibrate(sub: Any) -> None:
    ca = sub.add_parser("calibrate", help="microbenchmark the ops of PyTorch training on the "
                        "GPU into a calibration file (docs/cost-model.md)")
    ca.add_argument("--output", "-o", required=True, help="calibration JSON to write")
    ca.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    ca.add_argument("--scale", type=float, default=1.0,
                    help="share of the default grid to run (0.1: a quick look)")
    ca.add_argument("--seed", type=int, default=0, help="the grid's random seed")
    ca.add_argument("--ops", action="store_true", help="the ATen ops of training steps "
                    "(GEMMs, attention, norms, pointwise, loss, AdamW; convolutions, CNN norms "
                    "and pooling) for the op-level model, instead of "
                    "the CNN layer grid")
    ca.add_argument("--classes", default="all",
                    choices=["all", "transformer", "cnn", "norms", "video"],
                    help="with --ops: which grids to run (default: all four; video: 3-D "
                    "convolutions)")
    ca.add_argument("--host-only", action="store_true", help="with --ops: only the host's "
                    "cost per op (chains of small ops, of one op and mixed; fp32, bf16, "
                    "bf16 autocast)")
    ca.add_argument("--cpu-step", action="store_true", help="the host's CPU optimizer step "
                    "(fused AdamW) and memory bandwidth on each thread count, fitted into "
                    "the host fields of a run config's gpu: (no GPU "
                    "needed)")
    ca.add_argument("--threads", help="with --cpu-step: the thread counts, e.g. 1,2,4,8,16 "
                    "(default: powers of two up to torch's default, and it)")
    ca.add_argument("--host", action="store_true", help="this machine's host speed alone "
                    "(seconds, no model): the launch probe whose ratio to a trace's "
                    "--host-cal FILE scales host costs by (run, trace, plan, sweep)")
    ca.set_defaults(fn=gpu.cmd_calibrate)


def _validate(sub: Any) -> None:
    va = sub.add_parser("validate", help="predicted vs measured peak memory and time")
    va.add_argument("traces", nargs="+", help="folders of profiled traces (or trace files)")
    va.add_argument("measurements", help="JSON list of measurement records (or JSON Lines); "
                    "several files, oldest first, where runs were measured again: a later "
                    "file's record of a run replaces the earlier ones")
    va.add_argument("--gpu", default="h200", help="GPU preset (or spec file) to simulate with")
    va.add_argument("--reserved", choices=["timed", "one-step"], default="timed",
                    help="the measured reserved peak to compare with: over the timed steps "
                    "(default), or one step's own from an emptied cache")
    va.add_argument("--scale-host", action="store_true",
                    help="replay each run whose trace and record both have the host probe "
                    "between timed steps with its host costs times their ratio")
    va.add_argument("--json", action="store_true")
    va.set_defaults(fn=data.cmd_validate)


def _import(sub: Any) -> None:
    im = sub.add_parser("import", help="read a torch.profiler trace or a CUDA memory "
                        "snapshot pickle as validation data")
    im.add_argument("file", help="Chrome trace JSON (.json, .json.gz) or a "
                    "torch.cuda.memory._dump_snapshot pickle")
    im.add_argument("--output", "-o", default=None, help="JSON record to write")
    im.add_argument("--json", action="store_true", help="print the JSON record")
    im.add_argument("--segments", action="store_true",
                    help="a snapshot's segments at its peak reserved moment, per stream and "
                    "pool, with the cudaMalloc/cudaFree counts")
    im.set_defaults(fn=data.cmd_import)


def _list(sub: Any) -> None:
    ls = sub.add_parser("list", help="list networks, GPU presets (with their sources and "
                        "calibrations) and policies")
    ls.add_argument("what", nargs="?", default="all",
                    choices=["all", "networks", "gpus", "policies"])
    ls.set_defaults(fn=simulate.cmd_list)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="vdnnsim", description="Simulate GPU memory and time of DNN training "
                "under vDNN-style offload/prefetch policies.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_run, _trace, _sweep, _plot, _plan, _maxbatch, _reproduce, _profile, _measure,
                _calibrate, _validate, _import, _list):
        add(sub)
    return p
