"""Every claim of `vdnnsim reproduce` under the four combinations of the two readings of
the paper (docs/reproduction.md): the offload marks (measured, text) and the baseline
memory reductions are taken against (baseline_p, class).
Run from the repository root: python experiments/examples/readings.py"""

from vdnnsim.paper import reproduce
from vdnnsim.paper.reproduce import run_paper_studies

frames = {r: run_paper_studies(reading=r) for r in ("measured", "text")}
combos = [(r, ref) for r in ("measured", "text") for ref in ("baseline_p", "class")]
tables = {c: reproduce(frames=frames[c[0]], reference=c[1])[0] for c in combos}
first = tables[combos[0]]
names = {"baseline_p": "p", "class": "cls"}
print(f"{'claim':44s} {'gpu':5s} {'unit':9s} {'paper':>6s}  "
      + "  ".join(f"{r[:4] + '/' + names[ref]:>9s}" for r, ref in combos))
for i, row in first.iterrows():
    cells = []
    for c in combos:
        v = tables[c].iloc[i]
        cells.append(f"{v.vdnnsim:8.2f}{' ' if v.met else '*'}")
    gpu = "K40" if row.gpu == "k40" else "TX"
    print(f"{row.id:44s} {gpu:5s} {row.unit_label:9s} {row.paper:6.2f}  " + "  ".join(cells))
print(f"{'claims met':44s} {'':5s} {'':9s} {'':6s}  "
      + "  ".join(f"{int(tables[c].met.sum()):8d} " for c in combos))
print("columns: offload marks | reference (p: baseline_p, cls: the policy's own algorithm "
      "class); * = outside the claim's tolerance; yes/no as 1/0")
