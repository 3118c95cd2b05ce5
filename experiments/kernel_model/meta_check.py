"""Meta-device traces against measurements: for every (model, batch size) a measurements
file holds, synthesize a trace on the CPU (`vdnnsim trace --model ... --gpu PRESET`, meta
device plus the preset's kernel model) into OUTDIR, then compare, as `vdnnsim validate`
does, over the uncapped baseline and vdnn_conv runs (issue 12's question: what the
simulator predicts without ever running the model on the GPU).

    .venv/bin/python experiments/kernel_model/meta_check.py MEASUREMENTS.json OUTDIR [--gpu h200] [--all]

Traces already in OUTDIR are reused (delete them after changing the kernel model).
``--all`` keeps every policy and cap the file has; ``--analytic`` times the traces with
the analytic cost model instead of the preset's kernel model (the baseline to beat).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's vdnnsim

from vdnnsim.api import resolve_gpu  # noqa: E402
from vdnnsim.gpu.profile.layers import synthesize_model  # noqa: E402
from vdnnsim.trace import save_trace, trace_from_dict  # noqa: E402
from vdnnsim.measured.validate import format_validation, summarize, validate  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("measurements")
    ap.add_argument("outdir")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--analytic", action="store_true",
                    help="time with the analytic cost model (the preset without its kernel "
                    "model), for comparison")
    args = ap.parse_args(argv)
    gpu = resolve_gpu(args.gpu)
    if args.analytic:
        gpu = replace(gpu, calibration="")
    recs = json.loads(Path(args.measurements).read_text())
    if not args.all:
        recs = [r for r in recs if r["policy"] in ("baseline", "vdnn_conv")
                and not r.get("memory_cap_bytes")]
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    for model, batch in sorted({(r["model"], r["batch_size"]) for r in recs}):
        path = out / f"{model.split(':')[1]}_b{batch}.yaml"
        if not path.exists():
            save_trace(trace_from_dict(synthesize_model(model, batch, gpu), model), path)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(recs, f)
    df = validate(out, f.name, args.gpu)
    print(format_validation(df))
    print(json.dumps(summarize(df), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
