"""Running a study: every point of a StudySpec, one tidy DataFrame row per run.

NOTE [study rows]
Points that share a network, batch size, GPU and dtype share one trace, so a
policy sweep costs one trace synthesis. A run that fails (an unknown name in one row, a
trace that does not add up) is reported in its row's ``error`` column and never sinks the
study; a run that does not fit is a result (``fits`` false), not a failure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, VdnnError
from .spec import GPU_KEYS, StudySpec, expand, memory_bytes_of
from ..limits import short_repr

if TYPE_CHECKING:  # pandas is imported where a table is built: `vdnnsim trace` never needs it
    import pandas as pd

INPUT_COLUMNS = ["network", "batch_size", "gpu", "policy", "dtype", "memory_bytes",
                 *GPU_KEYS, "policy_options"]


def _gpu_of(point: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    gpu = point.get("gpu", "k40")
    if isinstance(gpu, dict):
        gpu = dict(gpu)
        name = gpu.pop("preset", None)
        if name is None:
            raise VdnnError("gpu: a mapping needs 'preset'")
    else:
        name, gpu = gpu, {}
    for k in GPU_KEYS:
        if k in point:
            gpu[k] = point[k]
    if "memory_bytes" in gpu:
        gpu["memory_bytes"] = memory_bytes_of(gpu["memory_bytes"])
    return str(name), gpu


def _key(point: dict[str, Any], base_dir: Path) -> tuple:
    name, over = _gpu_of(point)
    return (str(point.get("network")), point.get("batch_size"), name,
            tuple(sorted(over.items())), point.get("dtype", "fp32"), str(base_dir))


def _run_group(items: list[tuple[int, dict[str, Any]]], base_dir: str,
               host_cal: Any = None) -> list[tuple[int, dict]]:
    """Simulate points that share one trace; return (index, row) pairs. Module level, so
    that worker processes and Dask workers can run it. ``host_cal``: a HostCalibration
    (hostcal.py); without one a host-bound run gets its band between a fast and a slow
    host (hostspeed.py)."""
    from ..api import build_trace, resolve_gpu, run_trace
    from ..hostspeed import at_host_speed, host_said

    base = Path(base_dir)
    cached: tuple | None = None
    out = []
    for idx, point in items:
        row: dict[str, Any] = {c: point.get(c) for c in INPUT_COLUMNS}
        try:
            name, over = _gpu_of(point)
            row["gpu"] = name
            if "network" not in point:
                raise VdnnError("network: required key is missing")
            if cached is None:
                gpu = resolve_gpu(name, over or None, base)
                net = point["network"]
                path = base / str(net)
                trace = build_trace(path if os.path.exists(path) else net, point.get("batch_size"),
                                    gpu, point.get("dtype", "fp32"))
                host = _calibrated(host_cal, trace, gpu)
                if host and host[0] is not None:
                    trace, gpu = at_host_speed(trace, gpu, host[0])
                cached = (gpu, trace, host)
            gpu, trace, host = cached
            policy, options = point.get("policy", "baseline_p"), point.get("policy_options") or {}
            cap = memory_bytes_of(point.get("memory_bytes"))
            r = run_trace(trace, gpu, policy, options, cap, record=False)
            r = host_said(r, trace, lambda k: run_trace(*at_host_speed(trace, gpu, k), policy,
                                                        options, cap, record=False), host)
            row.update(r.summary())
            row["error"] = None
        except VdnnError as exc:
            row["error"] = str(exc)
        out.append((idx, row))
    return out


def _calibrated(host_cal: Any, trace: Any, gpu: Any) -> tuple[float | None, str] | None:
    """The factor and line of ``host_cal`` for ``trace`` (hostcal.host_factor), or None."""
    if host_cal is None or not trace.timed:
        return None
    from ..hostcal import host_factor
    return host_factor(host_cal, trace, gpu)


def _ignore_sigint() -> None:
    """A sweep worker's initializer: Ctrl-C is the parent's to handle."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _end_pool(pool: Any) -> None:
    """Cancel what has not started and end the workers now (they ignore SIGINT)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())  # gone after shutdown
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(5)


def _groups(points: list[dict[str, Any]], base: Path) -> list[list[tuple[int, dict]]]:
    groups: dict[tuple, list[tuple[int, dict]]] = {}
    for i, p in enumerate(points):
        try:
            key = _key(p, base)
        except VdnnError:
            key = ("error", i)
        groups.setdefault(key, []).append((i, p))
    return list(groups.values())


def run_points(points: list[dict[str, Any]], base_dir: str | os.PathLike = ".",
               progress: bool = False, workers: int | None = None,
               scheduler: str | Any | None = None, host_cal: Any = None) -> pd.DataFrame:
    """Simulate every point and return one row each, in the points' order. ``host_cal``:
    as ``_run_group`` takes it.

    ``workers``: that many local processes; ``scheduler``: a Dask distributed scheduler
    address (or a ``distributed.Client``). The same function runs each group of points
    that share a trace whichever runs it, so the rows are identical.
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or not 1 <= workers <= 1024):
        raise ConfigError(f"workers must be a whole number from 1 to 1024, got "
                          f"{short_repr(workers)}")
    if scheduler is not None and not isinstance(scheduler, str) \
            and type(scheduler).__name__ != "Client":
        raise ConfigError(f"scheduler must be an address or a distributed.Client, got "
                          f"{type(scheduler).__name__}")
    from ..hostcal import as_calibration
    host_cal = as_calibration(host_cal)
    base = str(Path(base_dir))
    groups = _groups(points, Path(base))
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(points), desc="runs", unit="run")
    results: list[tuple[int, dict]] = []

    def take(rows: list[tuple[int, dict]]) -> None:
        results.extend(rows)
        if bar is not None:
            bar.update(len(rows))

    if scheduler is not None:
        from distributed import Client, as_completed
        if isinstance(scheduler, Client):
            client = scheduler
        else:
            try:  # a bad address, or no scheduler there: one line, not dask's traceback
                client = Client(scheduler, timeout="5s")
            except (ValueError, OSError, TimeoutError) as exc:
                raise ConfigError(f"--scheduler {scheduler!r}: no Dask scheduler there "
                                  f"({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})") from None
        try:
            futures = client.map(_run_group, groups, base_dir=base, host_cal=host_cal,
                                 pure=False)
            for fut in as_completed(futures):
                take(fut.result())
        finally:
            if client is not scheduler:
                client.close()
    elif workers and workers > 1 and len(groups) > 1:
        # the workers ignore SIGINT and the parent ends them (NOTE [interrupt]). A worker that
        # took Ctrl-C would treat it as its job's exception and take the next job, or die
        # holding its queue's lock, and the executor's exit would wait on it. A worker that
        # dies otherwise breaks the pool: BrokenProcessPool, not a wait for its lost job
        from concurrent.futures import ProcessPoolExecutor, as_completed as done
        pool = ProcessPoolExecutor(max_workers=min(workers, len(groups)),
                                   initializer=_ignore_sigint)
        try:
            futs = [pool.submit(_run_group, g, base, host_cal) for g in groups]
            for f in done(futs):
                take(f.result())
        except BaseException:
            _end_pool(pool)
            raise
        pool.shutdown()
    else:
        for g in groups:
            take(_run_group(g, base, host_cal))
    if bar is not None:
        bar.close()
    results.sort(key=lambda x: x[0])
    import pandas as pd
    df = pd.DataFrame([row for _, row in results])
    unused = [c for c in INPUT_COLUMNS if c in df and df[c].isna().all()
              and c not in ("network", "batch_size", "gpu", "policy")]
    return df.drop(columns=unused)


def run_study(spec: StudySpec, base_dir: str | os.PathLike = ".", progress: bool = False,
              workers: int | None = None, scheduler: str | Any | None = None,
              host_cal: Any = None) -> pd.DataFrame:
    return run_points(expand(spec), base_dir, progress, workers, scheduler, host_cal)


def write_results(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """CSV or Parquet by the file's suffix, written whole or not at all."""
    from ..errors import ConfigError
    from ..yamlio import write_atomic

    p = Path(path)
    out = df.copy()
    if "policy_options" in out:  # nested mappings: one JSON string per row
        import json
        out["policy_options"] = [json.dumps(v, sort_keys=True) if isinstance(v, dict) else v
                                 for v in out["policy_options"]]
    if p.suffix == ".csv":
        write_atomic(p, lambda f: out.to_csv(f, index=False))
    elif p.suffix == ".parquet":
        write_atomic(p, lambda f: out.to_parquet(f, index=False), binary=True)
    else:
        raise ConfigError(f"{p}: write .csv or .parquet")
