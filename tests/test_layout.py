"""The repository's layout: traces/ holds data only, each data set with a README.md and a
line in traces/README.md; the scripts that make, check or quote the data live in
experiments/, grouped by the question they answer, each with a line in
experiments/README.md; docs/ holds no script; the scripts find their data whatever the
working directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"
EXPERIMENTS = ROOT / "experiments"
SCRIPTS = (".py", ".sh")


def _datasets() -> list[str]:
    return sorted(p.name for p in TRACES.iterdir() if p.is_dir())


def _scripts(under: Path) -> list[Path]:
    return sorted(p for p in under.rglob("*")
                  if p.suffix in SCRIPTS and p.is_file() and "__pycache__" not in p.parts)


def test_traces_and_docs_hold_no_script():
    found = [str(p.relative_to(ROOT)) for p in _scripts(TRACES) + _scripts(ROOT / "docs")]
    assert not found, (f"scripts under traces/ or docs/ ({', '.join(found)}): move them to "
                       "experiments/<question>/ (experiments/README.md)")


def test_every_data_set_has_a_readme_and_a_line_in_the_index():
    index = (TRACES / "README.md").read_text()
    listed = set(re.findall(r"^\| `([\w.-]+)/` \|", index, re.M))
    for name in _datasets():
        assert (TRACES / name / "README.md").is_file(), f"traces/{name} has no README.md"
        assert name in listed, f"traces/README.md does not list {name}"
    assert listed <= set(_datasets()), f"traces/README.md lists {sorted(listed - set(_datasets()))}"


def test_no_data_set_is_named_by_history():
    """Sets and their folders are named by what they hold, not by the session, issue,
    device call or loan that made them (traces/README.md's table gives the old names)."""
    history = re.compile(r"^(session\d+\w*|issue\d+|call\d+(-\w+)?|loan\d+)$|_(s\d+|issue\d+)$")
    named = sorted(str(p.relative_to(TRACES)) for p in TRACES.rglob("*")
                   if p.is_dir() and history.search(p.name))
    assert not named, f"folders under traces/ named by history: {named}"


def test_every_experiments_script_is_in_the_index():
    folders = sorted(p.name for p in EXPERIMENTS.iterdir()
                     if p.is_dir() and p.name != "__pycache__")
    index = (EXPERIMENTS / "README.md").read_text()
    listed = set(re.findall(r"^\| `([\w.-]+)/` \|", index, re.M))
    assert set(folders) == listed, (
        f"experiments/README.md's folders {sorted(listed)} against {folders}")
    loose = [p.name for p in _scripts(EXPERIMENTS) if p.parent == EXPERIMENTS]
    assert not loose, f"scripts directly under experiments/ ({loose}): put each in its question's folder"
    for p in _scripts(EXPERIMENTS):
        rel = p.relative_to(EXPERIMENTS).as_posix()
        assert f"| `{rel}` |" in index, f"experiments/README.md has no line for {rel}"


def test_scripts_find_their_data_from_any_folder(tmp_path):
    """Run from an empty folder with no PYTHONPATH: each finds the repository (its vdnnsim,
    its traces/) from its own path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for script, want in (("transformers/table.py", "| main | gpt2 | 124M | 8 | 256 | fp32 |"),
                         ("host_costs/kernels.py", "per layer 1.70 commands forward")):
        r = subprocess.run([sys.executable, str(EXPERIMENTS / script)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert want in r.stdout, (script, r.stdout[:500])
    assert not any(tmp_path.iterdir())
