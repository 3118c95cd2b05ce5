"""RunResult: the immutable outcome of one simulated iteration.

Summary numbers are plain attributes; the op timeline and the memory curve are pandas
DataFrames built on first access. Nothing here writes a file unless asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .engine.allocator import OutOfMemory
from .engine.sim import Op
from .units import ns_to_s

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
    host_bound_time_ns: int  # the compute stream idle, waiting for the host (NOTE [host])
    peak_breakdown: dict[str, int]
    oom: OutOfMemory | None
    notes: tuple[str, ...]
    algos: tuple[str, ...]
    _ops: tuple[Op, ...] = field(repr=False, compare=False)
    _mem: tuple[tuple[int, ...], tuple[int, ...]] = field(repr=False, compare=False)
    _spans: tuple[tuple[str, str, int, int, int], ...] = field(default=(), repr=False,
                                                               compare=False)
    host_capacity_bytes: int | None = None  # what offloads may pin (NOTE [host memory])
    timed: bool = True  # false: a memory-only trace's run (NOTE [memory-only traces])

    @property
    def ops(self) -> tuple[Op, ...]:
        """The timeline as records, in the order they ended (``timeline`` is the table)."""
        return self._ops

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
        """This run's events in the Chrome trace format (report/chrome.py)."""
        from .report.chrome import run_events
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
    def fits(self) -> bool:
        return self.oom is None

    @property
    def iteration_time_s(self) -> float:
        """NaN where the trace is memory only (NOTE [memory-only traces])."""
        return ns_to_s(self.iteration_time_ns) if self.timed else NAN

    @property
    def slowdown(self) -> float:
        """NaN where the oracle time is 0 or the trace is memory only."""
        if not (self.timed and self.oracle_time_ns):
            return NAN
        return self.iteration_time_ns / self.oracle_time_ns

    def summary(self) -> dict[str, Any]:
        """One flat record (the JSON and sweep-row form). A memory-only trace's run
        (``timed`` false) has NaN for every time and for the time-weighted averages
        (NOTE [memory-only traces]); JSON writes them null."""
        oom = self.oom
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
            "timed": self.timed,
            "iteration_time_s": self.iteration_time_s,
            "oracle_time_s": t(ns_to_s(self.oracle_time_ns)),
            "slowdown": self.slowdown,
            "offloaded_bytes": self.offloaded_bytes,
            "prefetched_bytes": self.prefetched_bytes,
            "peak_host_bytes": self.peak_host_bytes,
            "host_capacity_bytes": self.host_capacity_bytes,
            "stall_time_s": t(ns_to_s(self.stall_time_ns)),
            "host_bound_time_s": t(ns_to_s(self.host_bound_time_ns)),
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
        df = pd.DataFrame([o._asdict() for o in self._ops],
                          columns=["stream", "kind", "layer", "name", "start_ns", "end_ns",
                                   "size_bytes"])
        df["dur_ns"] = df["end_ns"] - df["start_ns"]
        return df.sort_values("start_ns", kind="stable", ignore_index=True)

    @property
    def memory(self) -> pd.DataFrame:
        """Live pool bytes after every change: a step function of time."""
        times, levels = self._mem
        import pandas as pd
        return pd.DataFrame({"time_ns": times, "allocated_bytes": levels})
