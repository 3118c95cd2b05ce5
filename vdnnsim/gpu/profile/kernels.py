"""How many GPU commands each layer puts on its stream, and how deep the launch queue is.

NOTE [kernel counts]
``count_kernels`` runs whole training steps of the model, as the profiler's timing does,
under torch.profiler, with a marker (a ``record_function`` range) after each layer's
forward and from a pre-hook on each layer's autograd node; each kernel launch, memset and
memcpy that the host's threads make between two markers belongs to the layer whose marker
came first. They are what the launch queue holds (NOTE [launch queue] in
vdnnsim/engine/host.py), so only those whose GPU activity ran on the compute stream (the
stream of the step's first command; ``off_stream``) count: a library that forks work onto
streams of its own fills their queues, not the compute stream's. Event records and stream
waits take no slot in the queue and are not counted.

Example: cuDNN's FFT engine forks. ConvNeXt-T's depthwise backward at batch 128 on the H200
launched 1,060 commands, 4 on the compute stream; counted whole they held the replayed host
back (594 ms to issue a vDNN_all step the H200's host issued in 198).

``launch_queue_depth`` measures that queue: a long ``torch.cuda._sleep`` keeps the stream
busy while the host launches tiny kernels one after the other; the first launch that
blocks tells how many were queued.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from contextlib import nullcontext
from typing import Any

import torch
from torch import nn

from ..probe.fx import Probe, trace_module
from .instrument import hook_backward, instrument
from ..model.workload import probe_step

_PREFIX = "vdnnsim:"
# the commands a host thread puts on a stream, as the CUDA runtime and driver name them
_COMMANDS = ("LaunchKernel", "LaunchCooperativeKernel", "MemsetAsync", "MemcpyAsync",
             "MemsetD8Async", "MemsetD32Async", "MemcpyHtoDAsync", "MemcpyDtoHAsync",
             "MemcpyDtoDAsync")


def _is_command(name: str) -> bool:
    return any(c in name for c in _COMMANDS)


def count_kernels(model: nn.Module, p: Probe, warmup: int = 2,
                  left_out: list[int] | None = None
                  ) -> tuple[dict[str, tuple[int, int]], int]:
    """Per layer (the probe's names, and 'loss'), the commands its forward and its
    backward issue, in a training step after ``warmup`` steps; and the optimizer step's.
    ``left_out``: a list to which the number of commands left out as another stream's is
    appended."""
    gm = trace_module(model)
    names = [n.name for n in p.nodes if n.name != "loss"]
    index = {name: k for k, name in enumerate(names)}
    n = len(names)
    hooked: dict[int, Any] = {}

    def mark(tag: str) -> None:
        with torch.profiler.record_function(_PREFIX + tag):
            pass

    def start() -> None:
        mark("f:-1")

    def after(k: int, out: Any) -> Any:
        mark(f"f:{k}")
        hook_backward(out, hooked, lambda: mark(f"b:{k}"))
        return out

    instrument(gm, index, start, after)
    train = probe_step(gm, p.batch_size, p.data_shape[1:], p.dtype)
    dev = train.batch["x"].device

    def at(point: str, loss: Any) -> None:  # the training step's points
        if point == "forward":
            mark(f"f:{n}")
            if loss.grad_fn is not None:
                loss.grad_fn.register_prehook(lambda g: mark(f"b:{n}"))
        elif point == "backward":
            mark("b:end")
        elif point == "step":
            mark("step")

    def step() -> None:
        hooked.clear()
        train(at)

    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    acts = [torch.profiler.ProfilerActivity.CPU]  # on a CPU: the markers, and no commands
    if cuda:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        step()
        sync()
    hooked.clear()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    return split_commands(events, names, left_out)


_GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")


def _correlation(e: dict) -> Any:
    args = e.get("args")
    return args.get("correlation") if isinstance(args, dict) else None


def off_stream(events: list[dict]) -> set:
    """The correlation ids of the commands whose GPU activity ran on
    a stream other than the step's compute stream (the stream of its first kernel, memset
    or copy that names one): a library's own streams (cuDNN's FFT engines fork theirs)
    queue them, not the compute stream's launch queue. Empty without GPU activities that
    name their stream (then every command counts, as before streams were told apart); an
    activity that names none is never left out."""
    seen: list[tuple[float, Any, Any]] = []
    for e in events:
        if e.get("ph") == "X" and str(e.get("cat", "")) in _GPU_CATS and "ts" in e:
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            if args.get("stream") is not None:
                seen.append((float(e["ts"]), args.get("correlation"), args["stream"]))
    if not seen:
        return set()
    main = min(seen, key=lambda s: s[0])[2]
    return {c for _, c, stream in seen if stream != main and c is not None}


def split_commands(events: list[dict], names: list[str], left_out: list[int] | None = None
                   ) -> tuple[dict[str, tuple[int, int]], int]:
    """The kernel counts on a Chrome trace's events: each host thread's commands, in
    time order, belong to the marker before them; those whose GPU activity ran on another
    stream than the compute stream are left out (their number appended to ``left_out``)."""
    n = len(names)
    elsewhere = off_stream(events)
    skipped = 0
    by_thread: dict[Any, list[tuple[float, int, str]]] = {}
    for e in events:
        if e.get("ph") != "X" or "ts" not in e:
            continue
        name = str(e.get("name", ""))
        cat = str(e.get("cat", ""))
        if cat == "user_annotation" and name.startswith(_PREFIX):
            item = (float(e["ts"]), 0, name[len(_PREFIX):])
        elif cat in ("cuda_runtime", "cuda_driver") and _is_command(name):
            if _correlation(e) in elsewhere:
                skipped += 1
                continue
            item = (float(e["ts"]), 1, "")
        else:
            continue
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(item)
    fwd = [0] * (n + 1)
    bwd = [0] * (n + 1)
    opt = 0
    for items in by_thread.values():
        items.sort()
        where: str | None = None
        for _, is_command, tag in items:
            if not is_command:
                where = tag
                continue
            if where is None:  # before the thread's first marker: the loss's backward
                where = f"b:{n}"  # starts on a thread of its own
            side, _, k = where.partition(":")
            if side == "f":  # after layer k's forward (-1: the start): layer k + 1's,
                j = int(k)  # and after the loss's, the backward's first gradient
                if j < n:
                    fwd[j + 1] += 1
                else:
                    bwd[n] += 1
            elif where == "b:end":  # the main thread after backward: the optimizer's
                opt += 1
            elif side == "b":
                bwd[int(k)] += 1
    counts = {name: (fwd[k], bwd[k]) for k, name in enumerate(names)}
    counts["loss"] = (fwd[n], bwd[n])
    if left_out is not None:
        left_out.append(skipped)
    return counts, opt


def launch_queue_depth(launches: int = 8192, trials: int = 3,
                       block_ns: int = 200_000) -> dict[str, Any]:
    """How many kernels the host can launch onto a busy stream before
    a launch blocks, per trial; and the same with the launches on a second, idle stream."""
    x = torch.zeros(1, device="cuda")
    side = torch.cuda.Stream()
    x.add_(1)
    torch.cuda.synchronize()
    out: dict[str, Any] = {"same_stream": [], "other_stream": [], "launch_ns": []}
    for _ in range(trials):
        for key, stream in (("same_stream", None), ("other_stream", side)):
            torch.cuda._sleep(4_000_000_000)  # seconds of GPU cycles on the current stream
            ts = []
            ctx = torch.cuda.stream(stream) if stream is not None else nullcontext()
            with ctx:
                for _ in range(launches):
                    t0 = time.perf_counter_ns()
                    x.add_(1)
                    ts.append(time.perf_counter_ns() - t0)
            torch.cuda.synchronize()
            first = next((i for i, t in enumerate(ts) if t > block_ns), None)
            out[key].append(first)
            if key == "same_stream":
                fast = sorted(ts[:first or launches])
                out["launch_ns"].append(fast[len(fast) // 2])
    return out

