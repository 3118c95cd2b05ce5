"""Rewrite the golden files after an intended change: python -m tests.golden.regen [NAME...]
(NAME: configs, reproduction, figure_cells, validation; default all)."""

from __future__ import annotations

import sys

from . import (config_records, figure_cell_records, reproduction_records, shipped_configs,
               validation_summary, write)


def main(names: list[str]) -> None:
    names = names or ["configs", "reproduction", "figure_cells", "validation"]
    if "configs" in names:
        write("configs", {p.name: config_records(p) for p in shipped_configs()})
    if "reproduction" in names:
        from vdnnsim.paper import reproduce
        write("reproduction", reproduction_records(reproduce()[0]))
    if "figure_cells" in names:
        from vdnnsim.paper import reproduce
        from vdnnsim.paper.cells import figure_cells
        write("figure_cells", figure_cell_records(figure_cells(reproduce()[1])))
    if "validation" in names:
        write("validation", validation_summary())
    print("rewrote tests/golden/" + ", ".join(f"{n}.json" for n in names))


if __name__ == "__main__":
    main(sys.argv[1:])
