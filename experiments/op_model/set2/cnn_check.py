"""The op-level model (NOTE [op model]) on the torchvision CNN runs measured on the H200
(traces/h200_torchvision, traces/h200_kernel_heldout_host_per_layer and 5: fp32, SGD, baseline, uncapped), none of
which the op model was fitted to (its constants come from vdnnsim calibrate --ops only).
Each model is traced op by op on the meta device as any factory model is
(``torchvision.models:NAME``, not the layer-level torchvision front-end and its CNN kernel
model) and replayed as PyTorch runs it; compared with the measured step, and the replay's
host issue time with the measured one where the record has it (heldout4 and 5).

    python experiments/op_model/set2/cnn_check.py [--json]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
SETS = ["traces/h200_torchvision/measurements.json", "traces/h200_kernel_heldout_host_per_layer/measurements.json",
        "traces/h200_kernel_heldout_broadcast_linear/measurements.json"]


def baseline_runs():
    """(set file, record) of every uncapped baseline run of SETS, in order."""
    for path in SETS:
        for m in json.loads((ROOT / path).read_text()):
            if m["policy"] == "baseline" and not m.get("memory_cap_bytes"):
                yield path, m


def main(argv: list[str]) -> int:
    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.errors import VdnnError
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace.optimizer import with_optimizer
    from vdnnsim.trace import trace_from_dict

    gpu = resolve_gpu("h200")
    rows = []
    for path, m in baseline_runs():
        name = m["model"].split(":")[1]
        try:
            d = memory_trace(f"torchvision.models:{name}", m["batch_size"], gpu, "fp32",
                             None, {}, "image:3,224,224:1000")
        except VdnnError as exc:  # a model the meta device cannot build: said, not lost
            print(f"{path.split('/')[1]:20s} {name:20s} {m['batch_size']:4d} not traced: "
                  f"{str(exc)[:120]}", flush=True)
            continue
        r = run_trace(with_optimizer(trace_from_dict(d, name), "sgd"), gpu, "eager")
        host = m.get("host_issue_ms")  # traces/h200_torchvision's records have none
        rows.append({"set": path.split("/")[1], "model": name, "batch": m["batch_size"],
                     "measured_ms": round(m["iteration_ms"], 2),
                     "predicted_ms": round(r.iteration_time_ns / 1e6, 2),
                     "error": round(r.iteration_time_ns / 1e6 / m["iteration_ms"] - 1, 4),
                     "host_issue_ms": round(host, 2) if host else None,
                     "predicted_host_issue_ms": round(r.host_issue_time_ns / 1e6, 2),
                     "predicted_gpu_idle": round(r.host_bound_time_ns
                                                 / r.iteration_time_ns, 3)})
        h = rows[-1]
        print(f"{h['set']:20s} {name:20s} {m['batch_size']:4d} "
              f"{h['measured_ms']:9.2f} {h['predicted_ms']:9.2f} {h['error']:+7.1%}  host "
              + (f"{host:7.2f} {h['predicted_host_issue_ms']:7.2f} "
                 f"{h['predicted_host_issue_ms'] / host - 1:+6.0%}" if host else
                 f"      - {h['predicted_host_issue_ms']:7.2f}      -"), flush=True)
    e = [abs(r["error"]) for r in rows]
    print(f"{len(e)} runs: |error| median {statistics.median(e):.1%}, max {max(e):.1%}; "
          f"signed median {statistics.median(r['error'] for r in rows):+.1%}")
    # NOTE [host mixes]: where the step is host-bound (its host issue within 10% of the
    # step, and the replay's GPU idle a tenth of it waiting for the host: a GPU-bound step
    # whose launch queue fills blocks the host too), the replay's host time against the
    # measured
    hb = [r for r in rows if r["host_issue_ms"] and r["host_issue_ms"] > 0.9 * r["measured_ms"]
          and r["predicted_gpu_idle"] > 0.1]
    if hb:
        he = [r["predicted_host_issue_ms"] / r["host_issue_ms"] - 1 for r in hb]
        print(f"host-bound runs ({len(hb)}): predicted host issue against measured, signed "
              f"median {statistics.median(he):+.1%}, range {min(he):+.1%} .. {max(he):+.1%}")
    if "--json" in argv:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
