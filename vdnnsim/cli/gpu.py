"""Commands that need a GPU (or torch): profile, measure, calibrate."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..units import GiB, MiB
from .common import (fold_lora, fold_step_options, memory_cap, model_kwargs, need_torch,
                     shown, writable)


def cmd_profile(args: argparse.Namespace) -> int:
    writable(args.output)
    fold_lora(args)  # bad settings need no GPU to be told
    fold_step_options(args)
    # Kineto's own log lines ("gpuGetDeviceCount failed" where there
    # is no GPU) are not the user's business; it reads this when torch starts it
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    need_torch()
    import torch

    from ..gpu.profile.layers import profile_model
    from ..trace import save_trace, trace_from_dict

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("vdnnsim profile needs a CUDA GPU (none is visible); without one, "
                          "vdnnsim trace --model ... --gpu PRESET synthesizes a trace")
    kwargs = model_kwargs(args.model_arg)
    layerwise = args.model.split(":")[0] in ("torchvision", "zoo") and \
        args.dtype in ("fp32", "fp16", "bf16") and args.optimizer == "sgd" and \
        not (kwargs or args.seq_len or args.input)
    if layerwise:
        data = profile_model(args.model, args.batch_size, args.dtype, args.trials, args.device)
    else:  # any model, op by op for memory, module by module for time
        from ..gpu.profile.ops import profile_workload
        data = profile_workload(args.model, args.batch_size, args.dtype, args.seq_len,
                                args.input, kwargs, args.trials, args.device,
                                optimizer=args.optimizer, check=not args.no_check)
    trace = trace_from_dict(data, args.model)
    save_trace(trace, args.output)
    print(f"wrote {shown(args.output)}: {trace.name}, batch {trace.batch_size}, "
          f"{len(trace.layers)} layers, profiled on {trace.source.gpu}, "
          f"resident {trace.resident_bytes / MiB:.1f} MiB")
    return 0


def _plan_allocator(plan: Any, given: dict, path: str | None) -> dict:
    """The allocator settings a measurement of ``plan`` runs
    with: ``given`` (--allocator) where given, else the plan's own; a line on stderr where
    they differ (the plan was checked under its own)."""
    from ..engine import ALLOWED
    own = plan.allocator.conf() if plan is not None and plan.allocator is not None else {}
    if not given:
        return own
    if plan is not None and {k: v for k, v in given.items() if ALLOWED[k].default != v} != own:
        said = ", ".join(f"{k}={v}" for k, v in own.items()) or "PyTorch's defaults"
        print(f"vdnnsim: warning: {path} was planned under the allocator settings {said}; "
              "it is measured under --allocator's",
              file=sys.stderr)
    return given


@dataclass(frozen=True)
class MeasuredRun:
    """What a measurement builds and trains: the flags given, else the plan's, else the
    defaults."""

    model: str
    batch_size: int
    dtype: str
    optimizer: str
    seq_len: int | None
    policy: str
    memory_cap_bytes: int | None = None  # --memory-cap, else the plan's budget
    input: str | None = None  # a factory model's --input, else the plan's
    model_args: tuple[str, ...] = ()  # its --model-arg KEY=VALUE, else the plan's


def measured_run(args: argparse.Namespace, plan: Any) -> MeasuredRun:
    """The run ``vdnnsim measure`` makes of its flags and ``plan`` (a plan file, or None):
    each of model, batch size, dtype, optimizer and sequence length from its flag, else from
    the plan; a flag that contradicts the plan is refused (ConfigError), before anything
    runs. The memory cap is --memory-cap's, else the plan's budget; a cap other than the
    budget is measured with a warning (a plan measured under another cap is an experiment
    the project makes: a plan for 21 GiB under a 22 GiB cap, say)."""

    def planned(key: str) -> Any:  # what the plan says, None where it does not
        if plan is None or key not in plan.model_fields_set and key != "batch_size":
            return None
        return getattr(plan, key)

    where = f"{args.plan}: planned"
    for key, given, said in (("model", args.model, "for model {}"),
                             ("batch_size", args.batch_size, "for batch {}"),
                             ("dtype", args.dtype, "in {}"),
                             ("optimizer", args.optimizer, "with optimizer {}"),
                             ("seq_len", args.seq_len, "for sequence length {}")):
        want = planned(key)
        if given is not None and want is not None and given != want:
            raise ConfigError(f"{where} {said.format(want)}, not {given}")
    want = planned("input")
    if args.input is not None and want is not None and args.input != want:
        raise ConfigError(f"{where} with input {want}, not {args.input}")
    want = planned("model_args")
    given = model_kwargs(args.model_arg)
    if args.model_arg and want is not None and given != want:
        raise ConfigError(f"{where} with model arguments {want}, not {given}")
    if plan is not None and args.optimizer_offload and not plan.optimizer_offload:
        raise ConfigError(f"{where} with the optimizer on the GPU, not --optimizer-offload")
    model = args.model or planned("model")
    if model is None:
        raise ConfigError("--model is needed" + (
            f" ({args.plan} does not say which model it plans: a plan file of version 1)"
            if plan is not None else ""))
    batch = args.batch_size or planned("batch_size")
    if batch is None:
        raise ConfigError("--batch-size is needed (or --plan FILE, which has it)")
    cap = memory_cap(args)
    if plan is not None and cap is None:
        cap = plan.budget_bytes  # the plan runs under the cap it was planned for
    elif plan is not None and cap != plan.budget_bytes:
        print(f"vdnnsim: warning: {args.plan} was planned for a budget of "
              f"{plan.budget_bytes / GiB:.2f} GiB; it is measured under --memory-cap's "
              f"{cap / GiB:.2f} GiB", file=sys.stderr)
    margs = tuple(args.model_arg or ()) or tuple(
        f"{k}={v}" for k, v in (planned("model_args") or {}).items())
    return MeasuredRun(model, batch, args.dtype or planned("dtype") or "fp32",
                       args.optimizer or planned("optimizer") or "sgd",
                       args.seq_len or planned("seq_len"),
                       "planned" if plan is not None else args.policy or "baseline", cap,
                       args.input or planned("input"), margs)


def cmd_measure(args: argparse.Namespace) -> int:
    """Real training steps on the GPU (NOTE [measurement]); with --repeat, in fresh
    processes."""
    from ..engine import ENV, effective, env_string, parse_pairs

    memory_cap(args)  # before torch: a bad size needs no GPU to be told
    given = parse_pairs(args.allocator)
    if args.warmup_processes is not None and not args.repeat:
        raise ConfigError("--warmup-processes goes with --repeat N")
    if args.optimizer_pinning != "caching" and not args.optimizer_offload and not args.plan:
        raise ConfigError("--optimizer-pinning goes with --optimizer-offload (or a plan "
                          "that offloads the optimizer)")
    writable(args.memory_history)
    fold_lora(args)
    fold_step_options(args)
    kwargs = model_kwargs(args.model_arg)
    plan = None
    if args.plan:
        from ..planners.planfile import LayerPlanFile, read_plan_file
        from ..planners.greedy import OP_PLAN_CANNOT_RUN
        plan = read_plan_file(args.plan)
        if isinstance(plan, LayerPlanFile) and not plan.runnable:
            raise ConfigError(f"{args.plan}: {OP_PLAN_CANNOT_RUN}")
        if args.policy not in (None, "baseline", "planned"):
            raise ConfigError("--plan runs the plan's policy; leave --policy out")
    elif args.policy == "planned":
        raise ConfigError("policy planned needs --plan FILE (written by vdnnsim plan)")
    run = measured_run(args, plan)
    args.model, args.batch_size, args.dtype, args.optimizer, args.seq_len, args.policy = (
        run.model, run.batch_size, run.dtype, run.optimizer, run.seq_len, run.policy)
    args.input, args.model_arg = run.input, list(run.model_args)
    kwargs = model_kwargs(args.model_arg)
    if "routing" in kwargs:  # the meta trace's assumption (NOTE [moe load])
        print(f"note: routing {kwargs.pop('routing')} was the trace's assumption; on the GPU "
              "the model's router routes the tokens", file=sys.stderr)
        args.model_arg = [a for a in args.model_arg if a.partition("=")[0].strip() != "routing"]
    from ..gpu.model.stepoptions import split
    if split(kwargs)[0] > 1 and (args.optimizer_offload or plan is not None and getattr(
            plan, "optimizer_offload", False)):  # (stepoptions.py)
        raise ConfigError("gradient accumulation (micro-batches) with the optimizer on the "
                          "CPU is not measured: its hooks copy each gradient once a step")
    cap = run.memory_cap_bytes
    conf = effective(_plan_allocator(plan, given, args.plan))
    if conf and not args.repeat:  # read when CUDA first allocates: set before that
        torch_ = sys.modules.get("torch")
        if torch_ is not None and torch_.cuda.is_initialized() and \
                os.environ.get(ENV) != env_string(conf):
            raise ConfigError("--allocator: CUDA is already initialised in this process, so "
                              "its allocator has read its settings; run vdnnsim measure in "
                              "a fresh process (or with --repeat)")
        os.environ[ENV] = env_string(conf)
    need_torch()
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
        print(f"wrote {shown(args.memory_history)}: {what} (vdnnsim import "
              f"{args.memory_history} --segments)" if last.get("memory_history") else
              "no memory history written: the run did not reach its timed steps",
              file=sys.stderr)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    writable(args.output)
    need_torch()
    import torch

    from ..gpu.calibrate.kernels import calibrate
    from ..yamlio import write_text_atomic

    if args.host:  # the host's speed alone, in seconds; no model
        return _calibrate_host(args)
    if args.cpu_step:  # the host alone; no GPU needed
        return _calibrate_cpu_step(args)
    if args.threads is not None:
        raise ConfigError("--threads goes with --cpu-step")
    if not torch.cuda.is_available():
        raise ConfigError("vdnnsim calibrate needs a CUDA GPU (none is visible)")
    if not 0 < args.scale <= 10:
        raise ConfigError(f"--scale must be in (0, 10], got {args.scale}")
    if args.ops:
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
    print(f"wrote {shown(args.output)}: {len(data['records'])} timed passes, "
          f"{len(data.get('host_chains', []))} host chains on {data['gpu']['name']} "
          f"({data['dtype']})")
    return 0


def _calibrate_host(args: argparse.Namespace) -> int:
    """``vdnnsim calibrate --host``: this machine's host probes (hostcal.py), written with
    the machine, torch and the date; without CUDA, the CPU device's, said so."""
    import torch

    from ..gpu.measure.hostprobe import probe_host
    from ..hardware import gpu_preset, preset_names
    from ..hostcal import CAL_PROBES, NO_CUDA, calibration_record, op_model_probe
    from ..yamlio import write_text_atomic

    if args.ops or args.host_only or args.cpu_step or args.threads is not None \
            or args.classes != "all" or args.dtype != "fp32" or args.scale != 1.0 \
            or args.seed != 0:
        raise ConfigError("--host takes -o alone (not --ops, --host-only, --cpu-step, "
                          "--threads, --classes, --dtype, --scale or --seed)")
    cuda = torch.cuda.is_available()
    probes = probe_host("cuda" if cuda else "cpu", CAL_PROBES)
    gpu = torch.cuda.get_device_name() if cuda else None
    data = calibration_record(probes, "cuda" if cuda else "cpu", gpu, torch.__version__)
    write_text_atomic(args.output, json.dumps(data, indent=1) + "\n")
    between, before = probes["host_probe_between_ns"], probes["host_probe_ns"]
    if not cuda:
        print(f"this host's CPU device: {between / 1e3:.2f} us an op (median of {CAL_PROBES}"
              f"), {before / 1e3:.2f} us before a model; {NO_CUDA}")
    else:
        print(f"this host on {gpu}: {between / 1e3:.2f} us a launch (median of {CAL_PROBES} "
              f"probes as after a step), {before / 1e3:.2f} us before a model")
        refs = [(n, op_model_probe(gpu_preset(n))) for n in preset_names()
                if gpu_preset(n).op_calibration]  # each op model's calibration host
        said = [f"times {between / p:.2f} on {n} (its op model's host: {p / 1e3:.2f} us)"
                for n, p in refs if p]
        if said:
            print(f"--host-cal {args.output}: an op-model trace's host costs "
                  f"{', '.join(said)}; a profiled trace's by its own probe")
    print(f"wrote {shown(args.output)}")
    return 0


def _calibrate_cpu_step(args: argparse.Namespace) -> int:
    """``vdnnsim calibrate --cpu-step``: the host's CPU optimizer step swept over thread
    counts, fitted; the file holds the records and the fit."""
    from ..costs.cpustep import fit, format_fit
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
    print(f"wrote {shown(args.output)}: {len(data['records'])} timed steps on "
          f"{len(data['bandwidth'])} thread counts")
    return 0


