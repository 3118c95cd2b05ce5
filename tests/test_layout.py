"""The repository's layout (issue 27): traces/ holds data only, each data set with a
README.md and a line in traces/README.md; the scripts that make or check a data set live
in experiments/, in a folder named as the data set's, and find their data whatever the
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


def test_traces_holds_no_script():
    found = sorted(str(p.relative_to(ROOT)) for p in TRACES.rglob("*")
                   if p.suffix in SCRIPTS and p.is_file())
    assert not found, (f"scripts under traces/ ({', '.join(found)}): move them to "
                       "experiments/<data set>/ (experiments/README.md)")


def test_every_data_set_has_a_readme_and_a_line_in_the_index():
    index = (TRACES / "README.md").read_text()
    listed = set(re.findall(r"^\| `([\w.-]+)/`", index, re.M))
    # one line may name a numbered series: `h200_meta_heldout1/` .. `h200_meta_heldout5/`
    for m in re.finditer(r"^\| `(\w+?)(\d+)/` \.\. `\1(\d+)/`", index, re.M):
        listed |= {f"{m[1]}{k}" for k in range(int(m[2]), int(m[3]) + 1)}
    for name in _datasets():
        assert (TRACES / name / "README.md").is_file(), f"traces/{name} has no README.md"
        assert name in listed, f"traces/README.md does not list {name}"
    assert listed <= set(_datasets()), f"traces/README.md lists {sorted(listed - set(_datasets()))}"


def test_each_experiments_folder_is_named_as_a_data_set():
    folders = sorted(p.name for p in EXPERIMENTS.iterdir()
                     if p.is_dir() and p.name != "__pycache__")
    assert folders and set(folders) <= set(_datasets()), (
        f"experiments/ folders without a data set: {sorted(set(folders) - set(_datasets()))}")
    listed = (EXPERIMENTS / "README.md").read_text()
    for p in sorted(EXPERIMENTS.rglob("*")):
        if p.suffix in SCRIPTS and "__pycache__" not in p.parts:
            rel = p.relative_to(EXPERIMENTS).as_posix()
            assert rel in listed or p.name in listed, f"experiments/README.md lacks {rel}"


def test_scripts_find_their_data_from_any_folder(tmp_path):
    """Run from an empty folder with no PYTHONPATH: each finds the repository (its vdnnsim,
    its traces/) from its own path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for script, want in (("h200_hf/table.py", "| main | gpt2 | 124M | 8 | 256 | fp32 |"),
                         ("h200_calib/kernels.py", "per layer 1.70 commands forward")):
        r = subprocess.run([sys.executable, str(EXPERIMENTS / script)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert want in r.stdout, (script, r.stdout[:500])
    assert not any(tmp_path.iterdir())
