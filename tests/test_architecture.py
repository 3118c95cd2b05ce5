"""docs/architecture.md's tour matches the folders: its layout table names every folder of
vdnnsim/ (the package data aside) and, in that folder's row, every module in it; every
folder it names exists; every top-level module is named on the page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vdnnsim"
DOC = ROOT / "docs" / "architecture.md"


def folders() -> dict[str, list[str]]:
    """Each package folder (relative, as 'vdnnsim/x/'), with its modules' file names."""
    out = {}
    for init in sorted(PACKAGE.rglob("__init__.py")):
        folder = init.parent
        if folder == PACKAGE or "data" in folder.relative_to(PACKAGE).parts:
            continue
        rel = folder.relative_to(ROOT).as_posix() + "/"
        out[rel] = sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py")
    return out


def rows(text: str) -> dict[str, str]:
    """The layout table's rows by the folder in their first cell."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\| `(vdnnsim/[\w/]+/)` \|", line)
        if m:
            out[m.group(1)] = line
    return out


def test_every_folder_and_module_is_in_the_tour():
    table = rows(DOC.read_text())
    missing = []
    for folder, modules in folders().items():
        row = table.get(folder)
        if row is None:
            missing.append(f"{folder} has no row")
            continue
        missing += [f"{folder}{m} is not named in its row" for m in modules
                    if f"`{m}`" not in row and f"`{m} " not in row]
    assert not missing, "docs/architecture.md's layout table:\n  " + "\n  ".join(missing)


def test_the_tour_names_only_folders_that_exist():
    gone = sorted(f for f in rows(DOC.read_text()) if not (ROOT / f).is_dir())
    assert not gone, f"docs/architecture.md names folders that do not exist: {gone}"


def test_every_top_level_module_is_named():
    text = DOC.read_text()
    missing = sorted(p.name for p in PACKAGE.glob("*.py")
                     if p.name not in ("__init__.py", "__main__.py") and f"`{p.name}`" not in text)
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_the_check_sees_a_missing_module(tmp_path):
    row = "| `vdnnsim/x/` | owns | imports | `a.py` (the a) |"
    assert rows(row) == {"vdnnsim/x/": row}
    assert "`b.py`" not in rows(row)["vdnnsim/x/"]


MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 120


def test_no_file_over_600_lines_and_no_function_over_120():
    """Small files of one job, and functions a reader can hold (issue 55's limits)."""
    import ast

    big, long = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        rel = path.relative_to(ROOT).as_posix()
        if len(text.splitlines()) > MAX_FILE_LINES:
            big.append(f"{rel}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text, rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{rel}:{node.lineno} {node.name}: {n} lines")
    assert not big and not long, "\n  ".join(["too large:", *big, *long])
