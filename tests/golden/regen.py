"""Rewrite the golden files after an intended change: python -m tests.golden.regen [NAME...]
(NAME: configs, reproduction, validation; default all)."""

from __future__ import annotations

import sys

from . import config_records, reproduction_records, shipped_configs, validation_summary, write


def main(names: list[str]) -> None:
    names = names or ["configs", "reproduction", "validation"]
    if "configs" in names:
        write("configs", {p.name: config_records(p) for p in shipped_configs()})
    if "reproduction" in names:
        from vdnnsim.paper import reproduce
        write("reproduction", reproduction_records(reproduce()[0]))
    if "validation" in names:
        write("validation", validation_summary())
    print("rewrote tests/golden/" + ", ".join(f"{n}.json" for n in names))


if __name__ == "__main__":
    main(sys.argv[1:])
