"""The profiler for any model (``vdnnsim profile --model hf:NAME | package.module:factory``):
the op probe run on the GPU for memory, training steps timed by torch.profiler per module.

NOTE [module timing]
Memory: the op probe (NOTE [op probe]) runs the step's forward pass and loss once on the
GPU itself, on the real batch, so CUDA's dropout, SDPA kernel and autocast are the real
ones. Time: after warm-up, ``trials`` plain steps, then ``trials`` steps under
torch.profiler with a ``record_function`` range around every module call
(NOTE [kineto attribution] in kineto.py): each GPU kernel's time, with its queued gap, goes
to the module that launched it, in the backward pass to the module of the forward op that made
its autograd node. A module's median time is spread over its ops by a roofline estimate; a
module with no op of its own gives it to the nearest enclosing one that has some. Host
times are the profiler's per module, scaled so each pass's total is the plain steps'. The
optimizer is the workload's own: its times, state bytes and step workspace. The profile
then checks itself (NOTE [profile check]).

Details. The recorder holds only what autograd saves; an output that dies leaves its
storage's entry (a finalizer), so the probe needs no more memory than the step. Every
model's backward pass is timed module by module, whether or not it keeps its blocks in a
ModuleList. A kernel's queued gap is the device idle before it once issued (dispatch after
a queued kernel, launch latency on an idle stream); the modules', the loss's, the
optimizer's and the unattributed time all carry their kernels' gaps, so the profile
check's shares are of GPU time with gaps on both sides, and the note says what share of
the GPU time was gaps. The roofline estimate is max(flops / peak, bytes / bandwidth) of
the op's dtype on the trace's GPU preset (a view gets nothing; in the backward pass an op
with flops counts twice, an op that needs no gradient not at all). The profiler's ranges
add about a microsecond an op and miss the autograd engine's work between backward ops:
the total is the plain steps', the profiler says how it divides. The optimizer's state
(AdamW's moments) goes into ``resident_bytes``, the allocator's peak while it runs beyond
what it started with into ``step_workspace_bytes`` (on a CPU, counted as the optimizer
state's rule counts it). Workspaces inside a kernel are not measured (the op probe sees
none).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from ..probe.aten import probe_ops
from ..probe.blocks import OUTSIDE
from ..measure.hostprobe import StepProbe, host_probe_ns
from .accumulate import time_adds
from .assemble import assemble, software
from .layers import resident_bytes
from .timing import _Clock
from ..model.workload import DTYPES, PRECISIONS, build_workload, training_step

MATMUL_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _plain_steps(step: Any, trials: int, cuda: bool) -> dict[str, Any]:
    """``trials`` plain training steps, nothing hooked or profiled:
    each step's span on the GPU's clock (its wall time on a CPU) and the host's time to
    issue its forward pass, backward pass and the rest (zero_grad, the optimizer)."""
    clock = _Clock(cuda)
    host = time.perf_counter_ns
    out: dict[str, list[float]] = {k: [] for k in ("step", "fwd", "bwd", "hf", "hb", "hs")}
    t: dict[str, Any] = {}
    between = StepProbe("cuda") if cuda else None  # after each step

    def at(point: str, loss: Any) -> None:  # the training step's points
        if point == "start":
            t["h0"] = host()
            t["s"] = clock.mark()
        elif point == "zero_grad":
            t["h1"] = host()
            t["f"] = clock.mark()
        elif point == "forward":
            t["h2"] = host()
            t["b"] = clock.mark()
        elif point == "backward":
            t["h3"] = host()
            t["u"] = clock.mark()
        else:
            t["e"] = clock.mark()
            t["h4"] = host()

    for _ in range(trials):
        step(at)
        h0, h1, h2, h3, h4 = (t[k] for k in ("h0", "h1", "h2", "h3", "h4"))
        s, f, b, u, e = (t[k] for k in ("s", "f", "b", "u", "e"))
        if cuda:
            e.synchronize()
        out["step"].append(clock.ms(s, e))
        out["fwd"].append(clock.ms(f, b))
        out["bwd"].append(clock.ms(b, u))
        out["hf"].append((h2 - h1) / 1e6)
        out["hb"].append((h3 - h2) / 1e6)
        out["hs"].append(((h1 - h0) + (h4 - h3)) / 1e6)
        if between is not None:
            between()
    if between is not None:
        between.close()
        out["probe"] = between.times
    return out


def time_modules(step: Any, model: torch.nn.Module, trials: int, cuda: bool,
                 warmup: int = 3) -> dict[str, Any]:
    """Per module path the median forward and backward GPU and host
    ns of ``trials`` training steps profiled by torch.profiler (GPU time with its queued
    gaps), the optimizer's, what could not be placed, the gaps' sum, and the plain steps
    measured beside them."""
    import os
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    from ...measured.kineto import attribute, load_trace, module_ranges, step_range

    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    plain = _plain_steps(step, trials, cuda)
    import warnings

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with tempfile.TemporaryDirectory(prefix="vdnnsim-profile-") as d, \
            warnings.catch_warnings():
        # one profiling cycle, read whole: its note that a cycle's events are cleared at
        # the end of the cycle is about schedules this does not use
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events")
        with module_ranges(model), profile(activities=acts) as prof:
            for k in range(trials):
                with step_range(k):
                    step()
                if cuda:
                    torch.cuda.synchronize()
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        att = attribute(load_trace(path))
    steps = att.steps[-trials:]

    def med(values: list[float]) -> float:
        return statistics.median(values) if values else 0.0

    paths = list(dict.fromkeys(p for s in steps for p in s.modules))
    mods: dict[str, dict[str, float]] = {}
    for path in paths:
        got = [s.modules.get(path) for s in steps]
        mods[path] = {
            "fwd": med([m.forward.device_ns if m else 0 for m in got]),
            "bwd": med([m.backward.device_ns if m else 0 for m in got]),
            "hf": med([m.forward.host_ns if m else 0 for m in got]),
            "hb": med([m.backward.host_ns if m else 0 for m in got])}
    mods[OUTSIDE] = {"fwd": med([s.outside.forward.device_ns for s in steps]),
                     "bwd": med([s.outside.backward.device_ns for s in steps]),
                     "hf": med([s.outside.forward.host_ns for s in steps]),
                     "hb": med([s.outside.backward.host_ns for s in steps])}
    total = med([s.device_total_ns for s in steps])
    lost = med([s.unattributed.device_ns for s in steps])
    return {"modules": mods, "time_source": att.time_source,
            "step_ns": med([s.optimizer.device_ns + s.zero_grad.device_ns for s in steps]),
            "device_total_ns": total, "unattributed_ns": lost,
            "gap_ns": med([s.gap_ns for s in steps]),
            "outside_steps_ns": att.outside_steps.device_ns, "warnings": att.warnings,
            "profiled_wall_ms": med([s.wall_ns / 1e6 for s in steps]),
            "plain_ms": med(plain["step"]), "plain_min_ms": min(plain["step"]),
            "plain_max_ms": max(plain["step"]), "plain_fwd_ms": med(plain["fwd"]),
            "plain_bwd_ms": med(plain["bwd"]), "host_fwd_pass_ms": med(plain["hf"]),
            "host_bwd_pass_ms": med(plain["hb"]), "host_rest_ms": med(plain["hs"]),
            **({"host_probe_between_ns": med(plain["probe"])} if "probe" in plain else {})}


def module_regions(nodes: list[Any], t: dict[str, Any]) -> dict[str, Any]:
    """``time_modules``' per-module times as ``split_times``' regions
    (a module path each): the time of a path without ops of its own in the probe (a module
    whose work is all views, or ops the probe does not record) goes to its nearest enclosing
    path that has some, and so on up to the model ("") and what ran outside it; the host
    times are scaled so that each pass's total is the plain steps' issue time (the
    profiler's ranges cost it some microseconds an op, and miss the autograd engine's own
    work between backward ops: the plain steps' total is the measured one, the profiler
    says how it divides)."""
    have = {n.attrs.get("module", OUTSIDE) for n in nodes}
    acc: dict[str, list[float]] = {}
    for path, v in t["modules"].items():
        target = path
        while target not in have and target not in ("", OUTSIDE):
            target = target.rpartition(".")[0] if "." in target else ""
        if target not in have:
            target = "" if "" in have else OUTSIDE
        if target not in have:
            target = next(iter(have))
        a = acc.setdefault(target, [0.0, 0.0, 0.0, 0.0])
        for k, key in enumerate(("fwd", "bwd", "hf", "hb")):
            a[k] += v[key]
    scale = []
    for k, key in ((2, "host_fwd_pass_ms"), (3, "host_bwd_pass_ms")):
        got = sum(a[k] for a in acc.values())
        scale.append(t[key] * 1e6 / got if got else 1.0)
    return {"fwd_ms": {r: a[0] / 1e6 for r, a in acc.items()},
            "bwd_ms": {r: a[1] / 1e6 for r, a in acc.items()},
            "host_fwd_ms": {r: a[2] * scale[0] / 1e6 for r, a in acc.items()},
            "host_bwd_ms": {r: a[3] * scale[1] / 1e6 for r, a in acc.items()}}


def split_times(nodes: list[Any], t: dict[str, Any], gpu: Any, key: str = "block"
                ) -> tuple[dict[str, tuple[int, int, int, int]], dict[str, tuple[int, int]]]:
    """Each region's measured times (``t``'s lists by region index,
    or mappings by region) over its ops, in proportion to a roofline estimate (GPU) and
    equally (host); an op's region is ``attrs[key]``."""
    def cost(n: Any) -> float:
        if n.alias_of is not None and n.kind == "flatten":
            return 0.0
        dt = MATMUL_DTYPES.get(n.attrs.get("_dtype"), "fp32")
        return max(n.flops / gpu.flops(dt), n.attrs.get("_bytes", n.out_nbytes)
                   / gpu.mem_bw_bytes_per_s)
    regions: dict[Any, list[Any]] = {}
    for n in nodes:
        regions.setdefault(n.attrs.get(key, 0), []).append(n)

    def at(what: str, r: Any) -> float:
        v = t[what]
        return v.get(r, 0.0) if isinstance(v, dict) else v[r]
    times: dict[str, tuple[int, int, int, int]] = {}
    hosts: dict[str, tuple[int, int]] = {}
    for r, ops in regions.items():
        fw = [cost(n) for n in ops]
        bw = [c * (2 if n.flops else 1) if n.requires_grad else 0.0 for c, n in zip(fw, ops)]
        for w in (fw, bw):
            if not sum(w):
                w[-1] = 1.0  # nothing to go by: the region's last op takes it
        sf, sb = sum(fw), sum(bw)
        f_ns, b_ns = at("fwd_ms", r) * 1e6, at("bwd_ms", r) * 1e6
        hf, hb = at("host_fwd_ms", r) * 1e6 / len(ops), at("host_bwd_ms", r) * 1e6 / len(ops)
        for n, a, c in zip(ops, fw, bw):
            times[n.name] = (round(f_ns * a / sf), round(b_ns * c / sb), 0, 0)
            hosts[n.name] = (round(hf), round(hb))
    return times, hosts


def step_memory(step: Any, cuda: bool) -> tuple[int, int]:
    """The bytes of the optimizer's state on the device, and the
    step's temporaries (the allocator's peak during it beyond what it started with)."""
    before = [0]

    def at(point: str, loss: Any) -> None:  # before the optimizer
        if point == "backward":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before[0] = torch.cuda.memory_allocated()

    step(at if cuda else None)
    temp = torch.cuda.max_memory_allocated() - before[0] if cuda else None
    state = sum(t.numel() * t.element_size() for s in step.optimizer.state.values()
                for t in s.values() if isinstance(t, torch.Tensor) and t.device.type != "cpu")
    if temp is None:  # the optimizer state's count
        from ...trace.optimizer import ADAM_TEMP
        temp = ADAM_TEMP * sum(p.numel() * p.element_size()
                               for p in step.workload.model.parameters()
                               if p.requires_grad) if state else 0
    step.zero_grad()
    return state, temp


# NOTE [profile check]
# A profile checks itself before it is written, so that a trace that lost part of the step
# cannot be written. Two checks: the attribution must place at
# least ATTRIBUTED of the GPU time of the profiled steps (what no rule could place is
# counted, never dropped; placed and lost time alike count their kernels' queued gaps:
# NOTE [kineto attribution]), and on a GPU the trace, replayed by the engine as it is
# written (policy eager, no cap; its times hold the gaps, as the device spends them in a
# plain step), must end within the step's own repeatability of the median plain step
# measured in the same process: the plain steps' spread (max - min over the median), and
# no less than CHECK_FLOOR. A profile that fails either is an error naming both numbers
# (vdnnsim profile exits 2 and writes nothing); ``check=False`` (``--no-check``) writes it
# anyway, with the failure in its note. On a CPU only the first check applies.
#
# Why: the block profiler before it lost 17-68% of the backward pass of models whose blocks
# it did not find, silently. On a CPU the wall clock of a shared machine is the op's time
# and the replay has no GPU to be true to.
ATTRIBUTED = 0.98
CHECK_FLOOR = 0.10


def check_profile(d: dict[str, Any], t: dict[str, Any], gpu: Any, cuda: bool) -> str | None:
    """None if the profile accounts for the step, else why not."""
    total = t["device_total_ns"] + t["outside_steps_ns"]
    lost = t["unattributed_ns"] + t["outside_steps_ns"]
    if total and lost > (1 - ATTRIBUTED) * total:
        return (f"{lost / total:.1%} of the profiled steps' GPU time could not be given to "
                f"a module, the loss or the optimizer (at most {1 - ATTRIBUTED:.0%})")
    if not cuda:
        return None
    from ...api import run_trace
    from ...trace import trace_from_dict
    r = run_trace(trace_from_dict(d, "profile"), gpu, "eager", record=False)
    replay = r.iteration_time_ns / 1e6
    plain = t["plain_ms"]
    band = max(CHECK_FLOOR, (t["plain_max_ms"] - t["plain_min_ms"]) / plain if plain else 0)
    if plain and abs(replay / plain - 1) > band:
        return (f"the trace replays in {replay:.2f} ms where a plain step took {plain:.2f} ms "
                f"(median of the steps measured beside the profile, "
                f"{t['plain_min_ms']:.2f}-{t['plain_max_ms']:.2f}): {replay / plain - 1:+.1%}, "
                f"more than the {band:.0%} the step repeats within")
    return None


def profile_workload(spec: str, batch_size: int, precision: str = "fp32",
                     seq_len: int | None = None, input_spec: str | None = None,
                     model_kwargs: dict[str, Any] | None = None, trials: int = 5,
                     device: str = "cuda", gpu: Any = None, optimizer: str = "sgd",
                     check: bool = True) -> dict[str, Any]:
    """The trace (a dict) of one training step of any workload, profiled on ``device`` by
    torch.profiler; ``gpu`` the preset whose
    roofline splits a module's time over its ops and that replays the profile for its
    check (default h200)."""
    from ...api import resolve_gpu
    from ...errors import ConfigError
    from ..model.lora import note
    from ..model import stepoptions

    if precision not in PRECISIONS:
        raise ConfigError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    gpu = gpu or resolve_gpu("h200")
    cuda = torch.device(device).type == "cuda"
    # the step vdnnsim measure runs: cuDNN autotuned. Without it the profile timed cuDNN's
    # heuristic algorithms, slower than measure's (the profile check, against the same
    # process's plain steps, cannot see that; docs/gpu.md)
    torch.backends.cudnn.benchmark = True
    probe_ns = host_probe_ns(device)  # before the model is built
    with torch.device(device):
        work = build_workload(spec, seq_len, input_spec, model_kwargs)
    step = training_step(work, batch_size, device, precision, optimizer)  # one micro-batch
    n, own = work.info["micro_batches"], work.info["grad_checkpointing"]
    stepoptions.switch(work.model, spec, False)  # timed plain: the engine recomputes
    t = time_modules(step, work.model, trials, cuda)
    state, temp = step_memory(step, cuda)
    adds = time_adds(step, trials, cuda) if n > 1 else (0, 0)
    stepoptions.switch(work.model, spec, own)  # its segments, for the probe to record
    p = probe_ops(work.model, step.batch, work.loss, work.name, step.autocast)
    regions = module_regions(p.nodes, t)
    host_step_ns = t["host_rest_ms"] * 1e6  # zero_grad and the optimizer, as the plain
    # steps issued them
    if not cuda:  # a CPU runs each op as it is called: its wall clock is the op's time
        for k in ("host_fwd_ms", "host_bwd_ms"):
            regions[k] = {r: 0.0 for r in regions[k]}
        host_step_ns = 0
    times, hosts = split_times(p.nodes, regions, gpu, key="module")
    pure = DTYPES.get(precision, torch.float32)
    resident = (resident_bytes(work.model) if cuda else
                sum(b.numel() * b.element_size() for b in work.model.buffers())) + \
        p.resident_weight_bytes  # weights no kept op reads
    name = torch.cuda.get_device_name() if cuda else f"cpu ({device})"
    placed = 1 - t["unattributed_ns"] / t["device_total_ns"] if t["device_total_ns"] else 1
    gaps = t["gap_ns"] / t["device_total_ns"] if t["device_total_ns"] else 0
    src = {"kind": "profiled", "gpu": name, "software": software(),
           "host_probe_ns": round(probe_ns, 1),
           **({"host_probe_between_ns": round(t["host_probe_between_ns"], 1)}
              if "host_probe_between_ns" in t else {}),
           "note": f"vdnnsim profile --model {spec} --batch {batch_size} "
                   f"--dtype {precision}{f' --seq-len {seq_len}' if seq_len else ''} "
                   f"--optimizer {optimizer}: "
                   f"memory op by op on the GPU, time by module from torch.profiler, "
                   f"{len(t['modules'])} module paths, {placed:.1%} of the "
                   f"GPU time placed ({gaps:.1%} of it idle gaps between kernels), "
                   f"medians of {trials} steps; a plain step took "
                   f"{t['plain_ms']:.2f} ms ({t['plain_min_ms']:.2f}-{t['plain_max_ms']:.2f}; "
                   f"forward {t['plain_fwd_ms']:.2f}, backward {t['plain_bwd_ms']:.2f}); the "
                   f"host issued the forward pass in {t['host_fwd_pass_ms']:.2f} ms and the "
                   f"backward in {t['host_bwd_pass_ms']:.2f} ms"
                   + note(spec, model_kwargs, work.model) + work.note(batch_size)
                   + stepoptions.note(n, own, batch_size, len(p.checkpointed))
                   + ("; timed without its checkpointing, the recompute replayed from the "
                      "forward times" if own else "")}
    dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(pure, "fp32")
    params = [q for q in work.model.parameters() if q.requires_grad]
    src["retime"] = {"variant": "autocast" if precision.startswith("autocast") else dtype,
                     "param_bytes": sum(q.numel() * q.element_size() for q in params),
                     "param_tensors": len(params)}  # carried to another GPU (NOTE [retime])
    d = assemble(p, times=times, source=src, step_ns=round(t["step_ns"]), dtype=dtype,
                 hosts=hosts, host_step_ns=round(host_step_ns), features=True)
    if resident + state:
        d["resident_bytes"] = resident + state
    if temp:
        d["step_workspace_bytes"] = temp
    d["optimizer"] = optimizer
    # checked as a plain step, the step it timed
    why = check_profile({k: v for k, v in d.items() if k != "checkpointed"}, t, gpu, cuda)
    if n > 1:  # the adds measured (accumulate.py)
        d.update(micro_batches=n, accumulate_ns=adds[0], host_accumulate_ns=adds[1])
    if why:
        if check:
            raise ConfigError(f"{spec}: the profile does not account for the step: {why}; "
                              "nothing written (--no-check writes it anyway)")
        d["source"]["note"] += f"; NOT CHECKED: {why}"
    return d
