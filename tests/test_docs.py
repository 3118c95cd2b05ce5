"""The outputs the documentation shows are the outputs the code prints.

A fenced block right after a line ``<!-- output: COMMAND -->`` in README.md or docs/*.md
is what COMMAND prints when run from the repository root (``vdnnsim`` and ``python`` are
this interpreter's). Change the code, then run the command again and paste its output.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARK = re.compile(r"<!-- output: (?P<cmd>.+?) -->\n```[a-z]*\n(?P<body>.*?)\n```", re.S)


def _blocks() -> list[tuple[str, str, str]]:
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in MARK.finditer(path.read_text()):
            out.append((path.relative_to(ROOT).as_posix(), m["cmd"], m["body"]))
    return out


BLOCKS = _blocks()


def test_the_docs_declare_outputs():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("where,cmd,body", BLOCKS, ids=[f"{w}: {c}" for w, c, _ in BLOCKS])
def test_documented_output_is_current(where: str, cmd: str, body: str):
    argv = shlex.split(cmd)
    if argv[0] == "vdnnsim":
        argv = [sys.executable, "-m", "vdnnsim", *argv[1:]]
    elif argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    got = [line.rstrip() for line in proc.stdout.rstrip("\n").splitlines()]
    want = [line.rstrip() for line in body.splitlines()]
    assert got == want, f"{where}: the output of `{cmd}` changed; paste the new one"
