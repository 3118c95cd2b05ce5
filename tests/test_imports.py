"""The import graph of vdnnsim/ (issue 27): no cycle, and no import upward.

Built from the source with ``ast``, nothing imported (no torch needed). Every import
statement counts, those inside functions and under ``if TYPE_CHECKING:`` too (a type
checker follows them: a circle there is a circle in the design). ``importlib.import_module`` is
not seen: vdnnsim/__init__.py's lazy names (PEP 562) are the one use, and it imports down.
Importing ``a.b.c`` runs the packages ``a.b``'s ``__init__`` first, so an edge goes to
each such package too, unless the importing module is inside it (a package's own
submodules import each other while it loads, as Python allows).

The layers checked: the engine (vdnnsim/engine/) imports from the rest of vdnnsim only
the trace model, the hardware presets, units, errors, limits and the allocator settings'
reader (allocconf, a leaf); results.py reaches
nothing of vdnnsim/report/ or the CLI, even through other modules; nothing imports the CLI
but ``python -m vdnnsim`` (vdnnsim/__main__.py); code outside vdnnsim/engine/ imports the
engine through its package (``vdnnsim.engine``), never one of its modules.

``VDNNSIM_IMPORTS_ROOT=/path/to/a/checkout`` checks another tree (how the test was seen
to fail on the code before issue 27's change).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("VDNNSIM_IMPORTS_ROOT") or Path(__file__).resolve().parents[1])

ENGINE_MAY_IMPORT = {"vdnnsim.trace.model", "vdnnsim.hardware", "vdnnsim.units",
                     "vdnnsim.errors", "vdnnsim.limits"}


def modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for path in sorted((root / "vdnnsim").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node, in functions and under ``if TYPE_CHECKING:`` too."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts))]


def graph(root: Path = ROOT) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(every edge, the edges an import statement names itself) between vdnnsim's
    modules: the first adds the packages an import loads on the way."""
    mods = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    named: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        own = set(_ancestors(m)) | ({m} if path.name == "__init__.py" else set())
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                subs = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in mods]
                if len(subs) < len(node.names) and source in mods:
                    targets.append(source)  # a name from the module's namespace
                targets += subs
                implied = _ancestors(source) + ([source] if subs else [])
            else:
                targets = [a.name for a in node.names if a.name in mods]
                implied = [p for t in targets for p in _ancestors(t)]
            for t in targets:
                if t != m:
                    named[m].add(t)
                    edges[m].add(t)
            for p in implied:
                if p in mods and p not in own:
                    edges[m].add(p)
    return edges, named


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _path(edges: dict[str, set[str]], comp: list[str]) -> str:
    """One cycle through ``comp``'s first module, as 'a -> b -> a'."""
    members = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    for v in queue:
        for w in sorted(edges[v] & members):
            if w == start:
                hops = [v]
                while prev[hops[-1]] is not None:
                    hops.append(prev[hops[-1]])
                return " -> ".join([*reversed(hops), start])
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return ", ".join(comp)


def reach(edges: dict[str, set[str]], start: str) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for w in edges[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen - {start}


@pytest.fixture(scope="module")
def built():
    return graph()


def test_the_graph_sees_imports_in_functions_and_packages(tmp_path):
    pkg = tmp_path / "vdnnsim"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("from .b import x\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nx = 1\n"
                                      "if TYPE_CHECKING:\n    from ..a import f\n")
    (pkg / "sub" / "c.py").write_text("from . import b\nimport vdnnsim.a\n")
    edges, named = graph(tmp_path)
    assert edges["vdnnsim.a"] == {"vdnnsim.sub", "vdnnsim.sub.b"}
    assert named["vdnnsim.a"] == {"vdnnsim.sub.b"}
    assert edges["vdnnsim.sub.b"] == {"vdnnsim.a"}  # under TYPE_CHECKING: it counts
    assert edges["vdnnsim.sub.c"] == {"vdnnsim.sub.b", "vdnnsim.a"}  # not its own package
    assert cycles(edges) == [["vdnnsim.a", "vdnnsim.sub", "vdnnsim.sub.b"]]
    (pkg / "sub" / "b.py").write_text("x = 1\n")
    assert cycles(graph(tmp_path)[0]) == []
    (pkg / "sub" / "b.py").write_text("x = 1\ndef g():\n    from .. import a\n")
    found = cycles(graph(tmp_path)[0])
    assert found == [["vdnnsim.a", "vdnnsim.sub", "vdnnsim.sub.b"]]


def test_no_import_cycle(built):
    edges, _ = built
    found = cycles(edges)
    assert not found, "import cycles in vdnnsim/:\n" + "\n".join(
        f"  {len(c)} modules ({', '.join(c)}), as in {_path(edges, c)}" for c in found)


def test_the_engine_imports_only_the_layers_below_it(built):
    _, named = built
    bad = {f"{m} imports {t}" for m, ts in named.items() if m.startswith("vdnnsim.engine")
           for t in ts if not t.startswith("vdnnsim.engine") and t not in ENGINE_MAY_IMPORT}
    assert not bad, "upward imports from vdnnsim/engine/:\n  " + "\n  ".join(sorted(bad))


def test_results_reach_no_report_and_no_cli(built):
    edges, _ = built
    bad = sorted(t for t in reach(edges, "vdnnsim.results")
                 if t.startswith(("vdnnsim.report", "vdnnsim.cli")))
    assert not bad, f"vdnnsim.results reaches {', '.join(bad)}"


def test_nothing_imports_the_cli(built):
    edges, _ = built
    bad = sorted(m for m, ts in edges.items()
                 if any(t == "vdnnsim.cli" or t.startswith("vdnnsim.cli.") for t in ts)
                 and m != "vdnnsim.__main__" and not m.startswith("vdnnsim.cli"))
    assert not bad, f"{', '.join(bad)} import(s) vdnnsim.cli"


def _engine_imports(root: Path = ROOT) -> list[str]:
    """'module imports what' for each import, from outside vdnnsim/engine/, of one of the
    engine's modules: ``vdnnsim.engine.x`` by name, or a module of the package that its
    ``__all__`` does not export (``from vdnnsim.engine import sim``)."""
    init = ast.parse((root / "vdnnsim" / "engine" / "__init__.py").read_text())
    exported: set[str] = set()
    for n in ast.walk(init):
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                             for t in n.targets):
            exported |= set(ast.literal_eval(n.value))
    out = []
    for m, path in modules(root).items():
        if m == "vdnnsim.engine" or m.startswith("vdnnsim.engine."):
            continue
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                names = [f"{source}.{a.name}" for a in node.names]
                if source == "vdnnsim.engine":
                    out += [f"{m} imports {t}" for a, t in zip(node.names, names)
                            if a.name not in exported]
                elif source.startswith("vdnnsim.engine."):
                    out.append(f"{m} imports {source}")
                elif source == "vdnnsim":
                    out += [f"{m} imports {t}" for t in names if t.startswith("vdnnsim.engine.")]
            else:
                out += [f"{m} imports {a.name}" for a in node.names
                        if a.name.startswith("vdnnsim.engine.")]
    return sorted(set(out))


def test_outside_code_imports_the_engine_through_its_package():
    bad = _engine_imports()
    assert not bad, ("imports of the engine's modules from outside vdnnsim/engine/ (import "
                     "from vdnnsim.engine, which exports what they need):\n  "
                     + "\n  ".join(bad))


def test_the_package_rule_sees_a_module_import(tmp_path):
    pkg = tmp_path / "vdnnsim"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engine" / "__init__.py").write_text('from .sim import run\n__all__ = ["run"]\n')
    (pkg / "engine" / "sim.py").write_text("run = 1\n")
    (pkg / "api.py").write_text("from .engine import run\n")
    assert _engine_imports(tmp_path) == []
    (pkg / "api.py").write_text("from .engine import run, sim\n"
                                "def f():\n    from .engine.sim import run\n")
    assert _engine_imports(tmp_path) == ["vdnnsim.api imports vdnnsim.engine.sim"]
    (pkg / "api.py").write_text("import vdnnsim.engine.sim\n")
    assert _engine_imports(tmp_path) == ["vdnnsim.api imports vdnnsim.engine.sim"]
