"""Per-layer times inside whole training steps, on CUDA events or the wall clock
(NOTE [layer timing], NOTE [host timing] in layers.py)."""

from __future__ import annotations

import statistics
import time
from types import SimpleNamespace
from typing import Any, Callable

import torch
from torch import nn

from ..measure.hostprobe import StepProbe
from ..model.workload import probe_step
from ..probe.fx import Probe, trace_module
from .instrument import hook_backward, instrument


class _Clock:
    """Timestamps on the GPU's compute stream (CUDA events), or the wall clock on a CPU."""

    def __init__(self, cuda: bool):
        self.cuda = cuda

    def mark(self) -> Any:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3


def _mark_cost_ms(clock: _Clock, host: Any, k: int = 200) -> float:
    """The median cost of one mark (a timestamp on each clock and the
    append of the pair), in ms, from ``k`` marks made back to back."""
    marks: list[Any] = []
    costs = []
    for _ in range(k):
        t0 = time.perf_counter_ns()
        marks.append((clock.mark(), host()))
        costs.append(time.perf_counter_ns() - t0)
    return statistics.median(costs) / 1e6


def time_in_situ(model: nn.Module, p: Probe, trials: int, cuda: bool = True,
                 warmup: int = 3) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    """Per-layer (forward, backward) ns inside whole training steps,
    and the step's own times: ``step_ns`` (the optimizer), ``instrumented_ns`` and
    ``plain_ns`` (a whole step with and without the timestamps), ``mark_fwd_ns`` and
    ``mark_bwd_ns`` (what one timestamp costs, taken off each layer's time)."""
    names = [n.name for n in p.nodes if n.name != "loss"]
    clock = _Clock(cuda)
    step, hooked = _timed_step(model, p, names, clock)
    for _ in range(warmup):
        step(True)
    between = StepProbe("cuda") if cuda else None  # after each step
    s = _trials(step, trials, len(names), clock, cuda, between)
    hooked.clear()
    times, meta = _medians(s, names, clock, cuda)
    if between is not None:
        between.close()
        meta["host_probe_between_ns"] = statistics.median(between.times)
    return times, meta


def _timed_step(model: nn.Module, p: Probe, names: list[str], clock: _Clock
                ) -> tuple[Callable[[bool], dict[str, Any]], dict[int, Any]]:
    """The fx-traced model's training step with a mark after each layer and before each
    autograd node where ``timed``; and the hooked nodes, to drop once done."""
    gm = trace_module(model)
    index = {name: k for k, name in enumerate(names)}
    on = [False]
    fwd_marks: list[Any] = []
    bwd_marks: list[tuple[int, Any]] = []
    hooked: dict[int, Any] = {}  # id -> node; holding it keeps the ids unique

    host = time.perf_counter_ns  # the host's clock beside each mark

    def start() -> None:
        if on[0]:
            fwd_marks.append((clock.mark(), host()))

    def after(k: int, out: Any) -> Any:
        if on[0]:
            fwd_marks.append((clock.mark(), host()))
            hook_backward(out, hooked, lambda: bwd_marks.append((k, clock.mark(), host())))
        return out

    instrument(gm, index, start, after)
    train = probe_step(gm, p.batch_size, p.data_shape[1:], p.dtype)
    loss_k = len(names)  # the loss is the last layer

    def step(timed: bool) -> dict[str, Any]:
        on[0] = timed
        fwd_marks.clear()
        bwd_marks.clear()
        hooked.clear()
        t: dict[str, Any] = {}

        def at(point: str, loss: Any) -> None:  # the training step's points
            if point == "start":
                t["h0"] = host()
            elif point == "zero_grad":
                t["s"] = clock.mark()
                t["hs"] = host()
            elif point == "forward":
                t["f_end"], t["hf"] = clock.mark(), host()
                if timed and loss.grad_fn is not None:
                    loss.grad_fn.register_prehook(
                        lambda g: bwd_marks.append((loss_k, clock.mark(), host())))
            elif point == "backward":
                t["b_end"], t["hb"] = clock.mark(), host()
            else:
                t["e"], t["he"] = clock.mark(), host()

        train(at)
        return {"start": t["s"], "fwd": list(fwd_marks) + [(t["f_end"], t["hf"])],
                "bwd": list(bwd_marks), "f_end": t["f_end"], "b_end": t["b_end"],
                "end": t["e"], "hb": t["hb"],
                "host": {"zero": t["hs"] - t["h0"], "f": t["hf"] - t["hs"],
                         "b": t["hb"] - t["hf"], "step": t["he"] - t["hb"]}}

    return step, hooked


def _trials(step: Callable[[bool], dict[str, Any]], trials: int, n: int, clock: _Clock,
            cuda: bool, between: Any) -> SimpleNamespace:
    """``trials`` instrumented steps, each followed by a plain one: the samples per layer
    (``n`` layers and the loss) and per phase, in ms."""
    samples_f: list[list[float]] = [[] for _ in range(n + 1)]
    samples_b: list[list[float]] = [[] for _ in range(n + 1)]
    host_f: list[list[float]] = [[] for _ in range(n + 1)]  # ms, as the GPU's samples
    host_b: list[list[float]] = [[] for _ in range(n + 1)]
    opt_ms: list[float] = []
    phases: dict[str, list[float]] = {k: [] for k in (
        "inst_f", "inst_b", "plain_f", "plain_b", "inst", "plain", "h_inst_f", "h_inst_b",
        "h_plain_f", "h_plain_b", "h_step", "h_zero")}
    n_bwd = []
    for _ in range(trials):  # instrumented and plain steps alternate: drift hits both
        r = step(True)
        if cuda:
            r["end"].synchronize()
        marks = r["fwd"]  # start, after layer 0, ..., after layer n-1, after the loss
        if len(marks) == n + 2:
            for k in range(n + 1):
                samples_f[k].append(clock.ms(marks[k][0], marks[k + 1][0]))
                host_f[k].append((marks[k + 1][1] - marks[k][1]) / 1e6)
        seq = r["bwd"] + [(None, r["b_end"], r["hb"])]
        for (k, a, ha), (_, b, hb) in zip(seq, seq[1:]):
            samples_b[k].append(clock.ms(a, b))
            host_b[k].append((hb - ha) / 1e6)
        n_bwd.append(len(r["bwd"]))
        opt_ms.append(clock.ms(r["b_end"], r["end"]))
        phases["inst_f"].append(clock.ms(r["start"], r["f_end"]))
        phases["inst_b"].append(clock.ms(r["f_end"], r["b_end"]))
        phases["inst"].append(clock.ms(r["start"], r["end"]))
        phases["h_inst_f"].append(r["host"]["f"] / 1e6)
        phases["h_inst_b"].append(r["host"]["b"] / 1e6)
        r = step(False)
        if cuda:
            r["end"].synchronize()
        phases["plain_f"].append(clock.ms(r["start"], r["f_end"]))
        phases["plain_b"].append(clock.ms(r["f_end"], r["b_end"]))
        phases["plain"].append(clock.ms(r["start"], r["end"]))
        phases["h_plain_f"].append(r["host"]["f"] / 1e6)
        phases["h_plain_b"].append(r["host"]["b"] / 1e6)
        phases["h_step"].append(r["host"]["step"] / 1e6)
        phases["h_zero"].append(r["host"]["zero"] / 1e6)
        if between is not None:
            between()
    return SimpleNamespace(samples_f=samples_f, samples_b=samples_b, host_f=host_f,
                           host_b=host_b, opt_ms=opt_ms, phases=phases, n_bwd=n_bwd)


def _medians(s: SimpleNamespace, names: list[str], clock: _Clock, cuda: bool
             ) -> tuple[dict[str, tuple[int, int]], dict[str, Any]]:
    """Each layer's median times less what one mark costs, and the step's own times."""
    n = len(names)
    samples_f, samples_b, host_f, host_b = s.samples_f, s.samples_b, s.host_f, s.host_b
    n_bwd, opt_ms = s.n_bwd, s.opt_ms
    m = {k: statistics.median(v) for k, v in s.phases.items()}
    if cuda:
        # what the marks themselves cost, per mark, on the GPU's timeline
        over_f = max(0.0, m["inst_f"] - m["plain_f"]) / (n + 1)
        over_b = max(0.0, m["inst_b"] - m["plain_b"]) / max(1, statistics.median(n_bwd))
        # and on the host's clock
        h_over_f = max(0.0, m["h_inst_f"] - m["h_plain_f"]) / (n + 1)
        h_over_b = max(0.0, m["h_inst_b"] - m["h_plain_b"]) / max(1, statistics.median(n_bwd))
    else:  # on a CPU the wall clock is both clocks; timed directly
        over_f = over_b = h_over_f = h_over_b = _mark_cost_ms(clock, time.perf_counter_ns)

    def med(v: list[float], over: float = 0.0) -> int:
        return int(max(0.0, statistics.median(v) - over) * 1e6) if v else 0
    times = {name: (med(samples_f[k], over_f), med(samples_b[k], over_b))
             for k, name in enumerate(names)}
    times["loss"] = (med(samples_f[n], over_f), med(samples_b[n], over_b))
    hosts = {name: (med(host_f[k], h_over_f), med(host_b[k], h_over_b))
             for k, name in enumerate(names)}
    hosts["loss"] = (med(host_f[n], h_over_f), med(host_b[n], h_over_b))
    meta = {"step_ns": med(opt_ms), "instrumented_ns": int(m["inst"] * 1e6),
            "plain_ns": int(m["plain"] * 1e6), "mark_fwd_ns": int(over_f * 1e6),
            "mark_bwd_ns": int(over_b * 1e6), "hosts": hosts,
            "host_step_ns": int((m["h_step"] + m["h_zero"]) * 1e6),
            "host_fwd_pass_ns": int(m["h_plain_f"] * 1e6),
            "host_bwd_pass_ns": int(m["h_plain_b"] * 1e6),
            "host_mark_ns": int(h_over_f * 1e6)}
    return times, meta

