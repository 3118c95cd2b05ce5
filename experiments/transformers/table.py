"""The committed H200 transformer runs as a table (traces/h200_transformers/README.md):
python experiments/transformers/table.py"""

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "traces" / "h200_transformers"
RECORDED_HELD = "traces/h200_hf/heldout/"  # the records name the folder as it was then


def main() -> None:
    print("| set | model | params | batch | seq | precision | step ms | host issue ms "
          "| peak allocated GiB | forward peak | backward peak | step peak |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in ("main", "heldout"):
        for line in (DATA / f"{name}.jsonl").read_text().splitlines():
            r = json.loads(line)
            ph = r["phases"]
            model = r["model"].removeprefix("hf:").replace(RECORDED_HELD, "")
            print(f"| {name} | {model.removesuffix('.yaml')} | {r['parameters'] / 1e6:.0f}M "
                  f"| {r['batch_size']} | {r['seq_len'] or '-'} | {r['dtype']} "
                  f"| {r['iteration_ms']:.1f} | {r['host_issue_ms']:.1f} "
                  f"| {r['peak_allocated_bytes'] / 2**30:.2f} "
                  f"| {ph['forward_peak'] / 2**30:.2f} | {ph['backward_peak'] / 2**30:.2f} "
                  f"| {ph['step_peak'] / 2**30:.2f} |")


if __name__ == "__main__":
    main()
