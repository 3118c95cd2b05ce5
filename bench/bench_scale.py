"""Scale: a 100,000-layer chain, as a network spec and as a trace, through every stage a
user runs: `vdnnsim trace` (shape inference, cost model, YAML out) and `vdnnsim run` (YAML
in, the graph checks, simulation). Each stage is timed once per repetition in this
process; the medians are reported, with the end-to-end CLI times of the two commands.

    .venv/bin/python bench/bench_scale.py [--layers 100000] [--repeat 3] [--json out.json]

Issue 10's target: the chain traces and simulates in under 10 s. The spec is timed both
as YAML and as JSON (a YAML document that vdnnsim reads with json: NOTE [large files]),
and "build + simulate" adds the JSON spec's build to each policy's simulation: what
`vdnnsim.simulate` of the chain costs in one process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

JSON_BUILD = "spec file (JSON) -> trace"

POLICIES = ["baseline_p", "vdnn_all_p", "vdnn_conv_p", "vdnn_dyn"]


def chain_spec(n: int) -> dict:
    """conv -> in-place relu pairs (n layers), small maps so that memory is no issue."""
    layers = []
    for i in range(n // 2):
        layers.append({"name": f"c{i}", "type": "conv", "out": 8, "kernel": 3, "pad": 1})
        layers.append({"name": f"r{i}", "type": "relu"})
    return {"name": f"chain{n}", "input": [8, 8, 8], "batch_size": 2, "layers": layers}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from vdnnsim.api import build_trace, resolve_gpu, run_trace
    from vdnnsim.trace import load_trace, save_trace

    gpu = resolve_gpu("k40")
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, trace_path = Path(tmp) / "chain.yaml", Path(tmp) / "chain_trace.yaml"
        json_path = Path(tmp) / "chain.json"
        spec_path.write_text(yaml.safe_dump(chain_spec(args.layers), sort_keys=False))
        json_path.write_text(json.dumps(chain_spec(args.layers)))
        for _ in range(args.repeat):
            box: dict = {}
            stages = {
                "spec file (YAML) -> trace (shapes, cost model)":
                    lambda: box.update(t=build_trace(spec_path, None, gpu)),
                JSON_BUILD: lambda: box.update(t=build_trace(json_path, None, gpu)),
                "trace -> YAML": lambda: save_trace(box["t"], trace_path),
                "YAML -> trace (checks)": lambda: box.update(t=load_trace(trace_path)),
            }
            for name, fn in stages.items():
                samples.setdefault(name, []).append(timed(fn))
            for p in POLICIES:
                samples.setdefault(f"simulate {p}", []).append(
                    timed(lambda p=p: run_trace(box["t"], gpu, p, record=False)))
        cli = [sys.executable, "-m", "vdnnsim"]
        cfg = Path(tmp) / "run.yaml"
        cfg.write_text(f"network: {trace_path.name}\ngpu: k40\npolicy: vdnn_dyn\n")
        for _ in range(args.repeat):
            samples.setdefault("CLI: vdnnsim trace SPEC -o FILE", []).append(timed(
                lambda: subprocess.run([*cli, "trace", str(spec_path), "-o", str(trace_path)],
                                       check=True, capture_output=True)))
            samples.setdefault("CLI: vdnnsim run (vdnn_dyn)", []).append(timed(
                lambda: subprocess.run([*cli, "run", str(cfg)], check=True,
                                       capture_output=True)))
    rows = {k: statistics.median(v) for k, v in samples.items()}
    for p in POLICIES:
        rows[f"build (JSON spec) + simulate {p}"] = rows[JSON_BUILD] + rows[f"simulate {p}"]
    width = max(map(len, rows))
    print(f"{args.layers}-layer chain, median of {args.repeat}:")
    for k, v in rows.items():
        print(f"  {k:{width}s} {v:7.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"layers": args.layers, "seconds": rows},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
