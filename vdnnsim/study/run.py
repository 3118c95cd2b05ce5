"""Running a study: every point of a StudySpec, one tidy DataFrame row per run.

NOTE [study rows]
Points that share a network, batch size, GPU and dtype share one trace and one oracle, so a
policy sweep costs one trace synthesis. A run that fails (an unknown name in one row, a
trace that does not add up) is reported in its row's ``error`` column and never sinks the
study; a run that does not fit is a result (``fits`` false), not a failure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import VdnnError
from .spec import GPU_KEYS, StudySpec, expand, memory_bytes_of

INPUT_COLUMNS = ["network", "batch_size", "gpu", "dtype", "policy", "memory_bytes",
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


def run_points(points: list[dict[str, Any]], base_dir: str | os.PathLike = ".",
               progress: bool = False) -> pd.DataFrame:
    """Simulate every point (in order) and return one row each."""
    from ..api import build_trace, oracle_time_ns, resolve_gpu, run_trace

    base = Path(base_dir)
    cache: dict[tuple, Any] = {}
    rows = []
    it = points
    if progress:
        from tqdm import tqdm
        it = tqdm(points, desc="runs", unit="run")
    for point in it:
        row: dict[str, Any] = {c: point.get(c) for c in INPUT_COLUMNS}
        try:
            name, over = _gpu_of(point)
            row["gpu"] = name
            if "network" not in point:
                raise VdnnError("network: required key is missing")
            key = _key(point, base)
            if key not in cache:
                gpu = resolve_gpu(name, over or None)
                net = point["network"]
                path = base / str(net)
                trace = build_trace(path if path.exists() else net, point.get("batch_size"),
                                    gpu, point.get("dtype", "fp32"))
                cache[key] = (gpu, trace, oracle_time_ns(trace, gpu))
            gpu, trace, oracle = cache[key]
            r = run_trace(trace, gpu, point.get("policy", "baseline_p"),
                          point.get("policy_options") or {},
                          memory_bytes_of(point.get("memory_bytes")), oracle)
            row.update(r.summary())
            row["error"] = None
        except VdnnError as exc:
            row["error"] = str(exc)
        rows.append(row)
    df = pd.DataFrame(rows)
    unused = [c for c in INPUT_COLUMNS if c in df and df[c].isna().all()
              and c not in ("network", "batch_size", "gpu", "policy")]
    return df.drop(columns=unused)


def run_study(spec: StudySpec, base_dir: str | os.PathLike = ".",
              progress: bool = False) -> pd.DataFrame:
    return run_points(expand(spec), base_dir, progress)
