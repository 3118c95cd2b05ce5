"""NOTE [optimizer state] against the H200: the profiled traces of traces/h200_torchvision replayed
eager with SGD and with AdamW (``with_optimizer``), beside the runs of collect.sh
(traces/h200_sgd_adamw).

    .venv/bin/python experiments/optimizer_state/compare.py
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim, from any folder
TRACES = ROOT / "traces"

from vdnnsim.api import resolve_gpu, run_trace  # noqa: E402
from vdnnsim.trace.optimizer import with_optimizer  # noqa: E402
from vdnnsim.trace import load_trace  # noqa: E402

CASES = [("resnet50", 128), ("vgg16", 64), ("mobilenet_v2", 128), ("densenet121", 64)]


def rows():
    gpu = resolve_gpu("h200")
    for model, batch in CASES:
        trace = load_trace(TRACES / "h200_torchvision" / f"{model}_b{batch}.yaml")
        for opt in ("sgd", "adamw"):
            got = json.loads((TRACES / "h200_sgd_adamw" / f"{model}_b{batch}_{opt}.json")
                             .read_text())
            r = run_trace(with_optimizer(trace, opt), gpu, "eager", record=False)
            yield (model, batch, opt, r.peak_memory_bytes, got["peak_allocated_bytes"],
                   r.iteration_time_ns / 1e6, got["iteration_ms"])


def main() -> None:
    print("| model | batch | optimizer | predicted peak GiB | measured | error | predicted ms "
          "| measured | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model, batch, opt, pp, mp, pt, mt in rows():
        print(f"| {model} | {batch} | {opt} | {pp / 2**30:.3f} | {mp / 2**30:.3f} "
              f"| {pp / mp - 1:+.1%} | {pt:.1f} | {mt:.1f} | {pt / mt - 1:+.1%} |")


if __name__ == "__main__":
    main()
