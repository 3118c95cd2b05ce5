"""RunResult: the immutable outcome of one simulated iteration.

Summary numbers are plain attributes; the op timeline and the memory curve are pandas
DataFrames built on first access. Nothing here writes a file unless asked.
"""

from __future__ import annotations

import bisect

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .engine import Op, OutOfMemory
from .measured.repeat import HOST_BOUND
from .units import GB, ns_to_s

NAN = float("nan")

if TYPE_CHECKING:  # pandas is imported where a table is built: `vdnnsim trace` never needs it
    import pandas as pd


@dataclass(frozen=True)
class RunResult:
    network: str
    batch_size: int
    dtype: str
    gpu: str
    policy: str
    capacity_bytes: int | None
    peak_memory_bytes: int
    peak_footprint_bytes: int
    avg_memory_bytes: float
    weight_bytes: int
    iteration_time_ns: int
    forward_time_ns: int
    oracle_time_ns: int
    offloaded_bytes: int
    prefetched_bytes: int
    peak_host_bytes: int
    stall_time_ns: int
    host_bound_time_ns: int  # the compute stream idle, waiting for the host
    peak_breakdown: dict[str, int]
    oom: OutOfMemory | None
    notes: tuple[str, ...]
    algos: tuple[str, ...]
    _ops: tuple[tuple, ...] = field(repr=False, compare=False)  # Op fields (ops: the Ops)
    _mem: tuple[tuple[int, ...], tuple[int, ...]] = field(repr=False, compare=False)
    _spans: tuple[tuple[str, str, int, int, int], ...] = field(default=(), repr=False,
                                                               compare=False)
    # (start, end) ns of each layer pass on the compute stream, kept without the timeline
    # too
    _layer_spans: tuple[tuple[int, int], ...] = field(default=(), repr=False, compare=False)
    host_capacity_bytes: int | None = None  # what offloads may pin
    timed: bool = True  # false: a memory-only trace's run
    pinned_host_bytes: int = 0  # what the host's pinned pool keeps
    optimizer_host_bytes: int = 0  # the optimizer's on the host
    param_fetched_bytes: int = 0  # parameters fetched from the host
    host_issue_time_ns: int = 0  # the host done issuing the step (of
    # a PyTorch trace's run: a Torch7 host waits for each layer, a network-wide one is 0)
    # the step on a fast and on a slow host (ns), where host-bound (hostspeed.py)
    host_band_ns: tuple[int, int] | None = None
    host_factor: float | None = None  # every host cost times this (a host calibration's)
    pytorch: bool = False  # a PyTorch trace's run, whose host issues ahead of the GPU

    @property
    def host_bound(self) -> bool:
        """The host issues HOST_BOUND of the step or more (a timed PyTorch run that fits;
        a Torch7 host waits for each layer, so its issue time says nothing of it)."""
        return bool(self.pytorch and self.timed and self.oom is None
                    and self.iteration_time_ns > 0
                    and self.host_issue_time_ns >= HOST_BOUND * self.iteration_time_ns)

    @property
    def ops(self) -> tuple[Op, ...]:
        """The timeline as records, in the order they ended (``timeline`` is the table).
        The simulation keeps plain tuples; they become Ops here, once (most runs are never asked
        for their timeline)."""
        ops = self.__dict__.get("_op_records")
        if ops is None:  # (a frozen dataclass: its __dict__ takes the cache)
            ops = self.__dict__["_op_records"] = tuple(map(Op._make, self._ops))
        return ops

    @property
    def memory_steps(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(times ns, allocated bytes) of the memory curve (``memory`` is the table)."""
        return self._mem

    @property
    def lifetimes(self) -> tuple[tuple[str, str, int, int, int], ...]:
        """(key, category, bytes, alloc ns, free ns) per allocation (``tensors``: table)."""
        return self._spans

    @property
    def tensors(self) -> pd.DataFrame:
        """One row per allocation: key, category, bytes, alloc and free times (ns)."""
        import pandas as pd
        return pd.DataFrame(list(self._spans), columns=["key", "category", "size_bytes",
                                                        "alloc_ns", "free_ns"])

    def chrome_trace(self, pid: int = 1) -> list[dict[str, Any]]:
        """This run's events in the Chrome trace format (NOTE [chrome trace] in
        report/chrome.py, which writes a file of them)."""
        return run_events(self, pid)

    @property
    def peak_managed_bytes(self) -> int:
        """Peak of what vDNN manages: everything but the weights and their gradients
        (which every policy keeps on the GPU for the whole iteration)."""
        return self.peak_memory_bytes - self.weight_bytes

    @property
    def avg_managed_bytes(self) -> float:
        return self.avg_memory_bytes - self.weight_bytes

    @property
    def layer_avg_memory_bytes(self) -> float:
        """NOTE [layer average]
        The mean, over the iteration's layer passes (each forward and backward op of the
        compute stream that takes time, alike however long it runs; recomputation left
        out), of the memory allocated at its peak while the pass runs. Where ``avg_memory_bytes`` weights the memory by time, this weights it by
        layer, as a runtime that logs its usage layer by layer sees it: an alternative
        reading of the paper's average bars (`vdnnsim reproduce --average layer`;
        docs/reproduction.md, "How the paper averaged: not settled"). The peak if the run
        has no layer pass."""
        cached = self.__dict__.get("_layer_avg")
        if cached is not None:
            return cached
        times, alloc = self._mem
        peaks = []
        for start, end in self._layer_spans:
            i0 = max(bisect.bisect_right(times, start) - 1, 0)
            i1 = max(bisect.bisect_left(times, end), i0 + 1)
            peaks.append(max(alloc[i0:i1]))
        value = float(sum(peaks) / len(peaks)) if peaks else float(self.peak_memory_bytes)
        self.__dict__["_layer_avg"] = value
        return value

    @property
    def layer_avg_managed_bytes(self) -> float:
        return self.layer_avg_memory_bytes - self.weight_bytes

    @property
    def fits(self) -> bool:
        return self.oom is None

    @property
    def iteration_time_s(self) -> float:
        """NaN where the trace is memory only."""
        return ns_to_s(self.iteration_time_ns) if self.timed else NAN

    @property
    def slowdown(self) -> float:
        """NaN where the oracle time is 0 or the trace is memory only."""
        if not (self.timed and self.oracle_time_ns):
            return NAN
        return self.iteration_time_ns / self.oracle_time_ns

    def summary(self) -> dict[str, Any]:
        """One flat record (the JSON and sweep-row form). A memory-only trace's run
        (``timed`` false) has NaN for every time and for the time-weighted averages; JSON writes
        them null."""
        oom, band = self.oom, self.host_band_ns
        t = (lambda v: v) if self.timed else (lambda v: NAN)
        return {
            "network": self.network, "batch_size": self.batch_size, "dtype": self.dtype,
            "gpu": self.gpu, "policy": self.policy, "fits": self.fits,
            "capacity_bytes": self.capacity_bytes,
            "peak_memory_bytes": self.peak_memory_bytes,
            "peak_footprint_bytes": self.peak_footprint_bytes,
            "avg_memory_bytes": t(round(self.avg_memory_bytes)),
            "weight_bytes": self.weight_bytes,
            "peak_managed_bytes": self.peak_memory_bytes - self.weight_bytes,
            "avg_managed_bytes": t(round(self.avg_memory_bytes - self.weight_bytes)),
            "layer_avg_memory_bytes": t(round(self.layer_avg_memory_bytes)),
            "layer_avg_managed_bytes": t(round(self.layer_avg_memory_bytes - self.weight_bytes)),
            "timed": self.timed,
            "iteration_time_s": self.iteration_time_s,
            "oracle_time_s": t(ns_to_s(self.oracle_time_ns)),
            "slowdown": self.slowdown,
            "offloaded_bytes": self.offloaded_bytes,
            "prefetched_bytes": self.prefetched_bytes,
            "peak_host_bytes": self.peak_host_bytes,
            "pinned_host_bytes": self.pinned_host_bytes,
            "optimizer_host_bytes": self.optimizer_host_bytes,
            "param_fetched_bytes": self.param_fetched_bytes,
            "host_capacity_bytes": self.host_capacity_bytes,
            "stall_time_s": t(ns_to_s(self.stall_time_ns)),
            "host_bound_time_s": t(ns_to_s(self.host_bound_time_ns)),
            "host_bound": self.host_bound if self.timed and self.pytorch else None,
            # NaN where the step is not host-bound or the host is calibrated
            "iteration_time_fast_host_s": ns_to_s(band[0]) if band else NAN,
            "iteration_time_slow_host_s": ns_to_s(band[1]) if band else NAN,
            "host_speed_factor": self.host_factor if self.host_factor is not None else NAN,
            "oom_layer": (oom.layer or None) if oom else None,
            "oom_tensor": oom.tensor if oom else None,
            "oom_time_s": t(ns_to_s(oom.time_ns)) if oom else None,
            "oom_fragmented": oom.fragmented if oom else None,
            "oom_reason": oom.reason if oom else None,
            "notes": "; ".join(self.notes),
        }

    @property
    def timeline(self) -> pd.DataFrame:
        """One row per op: stream, kind, layer, name, start/end/duration (ns), bytes."""
        import pandas as pd
        df = pd.DataFrame(list(self._ops), columns=list(Op._fields))
        df["dur_ns"] = df["end_ns"] - df["start_ns"]
        return df.sort_values("start_ns", kind="stable", ignore_index=True)

    @property
    def memory(self) -> pd.DataFrame:
        """Live pool bytes after every change: a step function of time."""
        times, levels = self._mem
        import pandas as pd
        return pd.DataFrame({"time_ns": times, "allocated_bytes": levels})


# -- Chrome trace events ------------------------------------------------
THREADS = {"host": 0, "compute": 1, "d2h": 2, "h2d": 3}
TENSORS_TID = 4


def _us(ns: int) -> float:
    return ns / 1000.0


def run_events(r: RunResult, pid: int = 1) -> list[dict[str, Any]]:
    """One run's events, from its public fields (NOTE [chrome trace] in report/chrome.py:
    here, beneath the report, so that RunResult.chrome_trace needs nothing above it)."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name",
         "args": {"name": f"{r.network} (batch {r.batch_size}) {r.policy} on {r.gpu}"}}]
    names = {"host": "host", "compute": "compute stream", "d2h": "D2H copy engine",
             "h2d": "H2D copy engine"}
    for stream, tid in THREADS.items():
        ev.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                   "args": {"name": names[stream]}})
    ev.append({"ph": "M", "pid": pid, "tid": TENSORS_TID, "name": "thread_name",
               "args": {"name": "tensor lifetimes"}})
    offloads: dict[str, Any] = {}
    flow = 0
    for op in r.ops:
        tid = THREADS[op.stream]
        ev.append({"ph": "X", "pid": pid, "tid": tid, "name": op.name, "cat": op.kind,
                   "ts": _us(op.start_ns), "dur": _us(op.end_ns - op.start_ns),
                   "args": {"layer": op.layer, "bytes": op.size_bytes}})
        if op.kind == "offload":
            offloads[op.name] = op
        elif op.kind == "prefetch" and op.name in offloads:
            src = offloads.pop(op.name)
            flow += 1
            fid = pid * 1_000_000 + flow
            ev.append({"ph": "s", "pid": pid, "tid": THREADS["d2h"], "id": fid, "cat": "move",
                       "name": f"{op.name} round trip", "ts": _us(src.start_ns)})
            ev.append({"ph": "f", "bp": "e", "pid": pid, "tid": THREADS["h2d"], "id": fid,
                       "cat": "move", "name": f"{op.name} round trip", "ts": _us(op.start_ns)})
    for t, level in zip(*r.memory_steps):
        ev.append({"ph": "C", "pid": pid, "name": "GPU memory", "ts": _us(t),
                   "args": {"allocated GB": level / GB}})
    for k, (key, cat, size, t0, t1) in enumerate(r.lifetimes):
        common = {"pid": pid, "tid": TENSORS_TID, "cat": cat, "name": key,
                  "id": f"{pid}-{k}"}
        ev.append({"ph": "b", "ts": _us(t0), "args": {"bytes": size}, **common})
        ev.append({"ph": "e", "ts": _us(t1), **common})
    return ev
