"""Meta-device memory traces (NOTE [op probe]) against the H200 transformer runs: each
record's model built on the meta device, its step probed op by op in the record's
precision, replayed eager with AdamW (NOTE [optimizer state]) on the H200 preset; the
predicted peak allocated memory beside the measured one.

    python experiments/transformers/meta_check.py [main|heldout|all]
"""

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim, from any folder
DATA = ROOT / "traces" / "h200_transformers"
RECORDED_HELD = "traces/h200_hf/heldout/"  # the records name the folder as it was then


def spec(model: str) -> str:
    """A record's model spec, a held-out model's file (``hf:traces/...``, from the
    repository root) made absolute."""
    old = "hf:traces/h200_hf/"  # the records keep the folder's name when they were made
    if model.startswith(old):
        model = "hf:traces/h200_transformers/" + model[len(old):]
    return f"hf:{ROOT / model[3:]}" if model.startswith("hf:traces/") else model


def rows(which: str = "all", reverse: bool = False):
    """(set, record, predicted, measured) for each run, in the files' order or (``reverse``)
    the other way round."""
    import io
    from contextlib import redirect_stderr

    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace.optimizer import with_optimizer
    from vdnnsim.trace import trace_from_dict

    gpu = resolve_gpu("h200")
    for name in ("heldout", "main") if reverse else ("main", "heldout"):
        if which not in (name, "all"):
            continue
        lines = (DATA / f"{name}.jsonl").read_text().splitlines()
        for line in reversed(lines) if reverse else lines:
            r = json.loads(line)
            with redirect_stderr(io.StringIO()):  # transformers' notes about its configs
                d = memory_trace(spec(r["model"]), r["batch_size"], gpu, r["dtype"],
                                 r["seq_len"])
            trace = with_optimizer(trace_from_dict(d, r["model"]), r["optimizer"])
            got = run_trace(trace, gpu, "eager", record=False).peak_memory_bytes
            yield name, r, got, r["peak_allocated_bytes"]


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    errs: dict[str, list[float]] = {}
    print("| set | model | batch | seq | precision | predicted GiB | measured GiB | error |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r, got, want in rows(which):
        e = got / want - 1
        errs.setdefault(name, []).append(abs(e))
        model = r["model"].removeprefix("hf:").replace(RECORDED_HELD, "")
        print(f"| {name} | {model.removesuffix('.yaml')} | {r['batch_size']} "
              f"| {r['seq_len'] or '-'} | {r['dtype']} | {got / 2**30:.2f} "
              f"| {want / 2**30:.2f} | {e:+.1%} |")
    for name, v in errs.items():
        print(f"{name}: {len(v)} runs, |error| median {statistics.median(v):.1%}, "
              f"max {max(v):.1%}")


if __name__ == "__main__":
    main()
