"""The built wheel holds the whole package: every module and every data file git tracks
under vdnnsim/, and it builds without a warning from setuptools about its configuration.

An editable install finds modules and data in the source tree whatever the packaging says,
so only a built wheel shows what `pip install vdnnsim` would get (a folder without an
``__init__.py`` or a data file outside ``package_data`` is silently left out). Installing
that wheel into a fresh virtual environment and running it is .ci/run's job
(`make wheel-check`), which needs PyPI for the dependencies.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tracked() -> set[str]:
    out = subprocess.run(["git", "ls-files", "vdnnsim"], cwd=ROOT, capture_output=True,
                         text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout: the tracked files are unknown")
    return {p for p in out.stdout.splitlines() if "__pycache__" not in p}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    try:
        import setuptools  # noqa: F401
    except ImportError:
        pytest.skip("setuptools is not installed: the wheel cannot be built offline")
    src = tmp_path_factory.mktemp("src")
    # a copy of what git tracks, so the build's own build/ and egg-info stay out of the tree
    for rel in _tracked() | {"setup.cfg", "pyproject.toml", "README.md"}:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-v", "-w", str(dist), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = list(dist.glob("vdnnsim-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0], proc.stdout + proc.stderr


def test_wheel_holds_every_tracked_file(built):
    wheel, _ = built
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    missing = sorted(_tracked() - names)
    assert not missing, f"the wheel leaves out {len(missing)} file(s): {missing[:10]}"
    assert "vdnnsim/engine/__init__.py" in names
    assert not [n for n in names if n.startswith(("tests/", "traces/", "docs/", "experiments/"))]


def test_wheel_builds_without_configuration_warnings(built):
    _, log = built
    # setuptools' warnings about the project's configuration (a folder of data that is no
    # package, a deprecated key); "byte-compiling is disabled" and pip's index notes are
    # about this machine, not the project
    bad = [line.strip() for line in log.splitlines()
           if ("SetuptoolsDeprecationWarning" in line or "_Warning" in line
               or "is absent from the `packages` configuration" in line
               or "Package would be ignored" in line)]
    assert not bad, "\n".join(bad[:10])
