"""Session 29's host study (host_study.sh; NOTE [host mixes]): on the machine that ran it,
each run's measured host time per phase of the step (host_gap.py) against the op model's
host costs fitted to that machine's host-only calibrations, with and without the mixed
chains' factor. The GPU classes stay the H200's shipped ones (the host's costs do not read
them).

    python experiments/op_model/host_study.py DIR [--json]

DIR: the unpacked host_study folder (host_1.json, host_2.json, RUN.json).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from importlib import resources
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
HERE = ROOT / "experiments" / "op_model"
GPU_FILES = ("bf16", "fp32", "cnn_bf16", "cnn_fp32")  # the shipped GPU classes


def models(host_files: list[dict]):
    """The op model with the study's host files, without and with the mixes' factor (one
    fit: the factor is the fitted host's ``mix`` entry)."""
    from vdnnsim.costs import ops as opmodel
    from vdnnsim.hardware import gpu_preset
    gpu = gpu_preset("h200")
    d = resources.files("vdnnsim").joinpath("data", "calibration")
    raws = [json.loads(d.joinpath(f"h200_ops_{x}.json").read_text()) for x in GPU_FILES]
    fitted = opmodel.fit(raws + host_files, dict(gpu.peak_flops), gpu.mem_bw_bytes_per_s,
                         raws[0]["gpu"]["sm_count"])
    plain = dict(fitted, host={k: v for k, v in fitted["host"].items() if k != "mix"})
    return [opmodel.OpModel(f, dict(gpu.peak_flops), gpu.mem_bw_bytes_per_s,
                            fitted["sm_count"], "host study") for f in (plain, fitted)]


def predict(om, spec: str, batch: int, dtype: str, seq: int | None, opt: str) -> dict:
    from vdnnsim.api import resolve_gpu
    from vdnnsim.gpu.probe import aten as aten_probe
    real = aten_probe.op_model_for
    aten_probe.op_model_for = lambda gpu: om
    try:
        inp = "image:3,224,224:1000" if spec.startswith("torchvision.models:") else None
        d = aten_probe.memory_trace(spec, batch, resolve_gpu("h200"), dtype, seq, {}, inp)
    finally:
        aten_probe.op_model_for = real
    L = d["layers"]
    return {"forward": sum(x.get("host_fwd_ns", 0) for x in L) / 1e6,
            "backward": sum(x.get("host_bwd_ns", 0) for x in L) / 1e6,
            "step": d["optimizer_steps"][opt][1] / 1e6}


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    hosts = [json.loads(p.read_text()) for p in sorted(folder.glob("host_*.json"))]
    for i, h in enumerate(hosts, 1):  # two processes: keep both, apart
        for c in h["host_chains"] + h.get("host_mixes", []):
            c["process"] = i
    plain, mixed = models(hosts)
    print("mix factors (fwd, bwd, chains):", mixed.fitted["host"].get("mix"))
    rows = []
    for p in sorted(folder.glob("*.json")):
        if p.name.startswith(("host_", "warmup")):
            continue
        try:
            r = json.loads(p.read_text())
        except ValueError:  # a run that failed there: its .err says why
            print(f"{p.stem}: no result (see {p.stem}.err)")
            continue
        name, b, dt, seq = r["run"].split()
        seq = None if seq == "None" else int(seq)
        if ":" in name:
            spec = name.replace("torchvision:", "torchvision.models:")
        else:
            where = HERE if r["set"] == "set1" else HERE / r["set"]
            spec = f"hf:{where / (name + '.yaml')}"
        m = r["host_ms"]
        a, c = predict(plain, spec, int(b), dt, seq, r["optimizer"]), \
            predict(mixed, spec, int(b), dt, seq, r["optimizer"])
        meas = m["forward"] + m["backward"] + m["step"]
        row = {"run": f"{name.split(':')[-1]} {dt}", "measured": m,
               "chains": a, "mixed": c,
               "error_chains": sum(a.values()) / meas - 1,
               "error_mixed": sum(c.values()) / meas - 1}
        rows.append(row)
        print(f"{row['run']:34s} measured fwd {m['forward']:6.1f} bwd {m['backward']:6.1f} "
              f"step {m['step']:5.1f} | chains {a['forward']:6.1f} {a['backward']:6.1f} "
              f"{a['step']:5.1f} ({row['error_chains']:+.0%}) | mixed {c['forward']:6.1f} "
              f"{c['backward']:6.1f} {c['step']:5.1f} ({row['error_mixed']:+.0%})")
    for k in ("error_chains", "error_mixed"):
        e = [abs(r[k]) for r in rows]
        print(f"{k}: median |error| {statistics.median(e):.1%}, max {max(e):.1%}")
    if "--json" in argv:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
