"""The machinery of tests/test_docs.py: what in README.md and docs/*.md is checked, and how.

NOTE [doc checks]
Everything the documentation quotes of the program (what a command prints, a file, a
command line, a name) is checked against the program, so that it cannot drift:

- ``<!-- output: COMMAND -->`` then a fenced block (or a markdown table): what COMMAND
  prints, run from the repository root. ``<!-- output (first lines): COMMAND -->``: the
  first lines of it.
- A fenced block whose first line starts with ``$ `` is a transcript: each ``$ COMMAND``
  is run by bash (a ``vdnnsim`` line without shell syntax in this process, as an output
  mark's), in order, each block starting in the repository root (a ``cd`` holds for
  the block's later lines), and what follows it up to the next ``$`` is what it prints
  (stdout, then stderr). ``/tmp/vdnn_docs`` is a fresh folder for each document (its
  transcripts and files share it). A command whose shown output ends in
  ``vdnnsim: error: ...`` must exit 2, any other 0.
- In expected output, a line ``...`` (alone, unindented) stands for any number of lines.
- ``<!-- file: PATH -->`` then a fenced block: the content of PATH. A repository file
  must be exactly that (the docs show it as it is); a file under ``/tmp/vdnn_docs`` is
  written there for the document's transcripts. ``<!-- files: DIR -->`` then a YAML
  block ``NAME: CONTENT``: several small files (a mapping or list is written as YAML, a
  string as it is). ``<!-- files: DIR from BASE -->`` then lines ``NAME: EDIT; EDIT``:
  files made from the YAML file BASE, each changed by its edits (``PATH = YAML``,
  ``del PATH``, ``PATH <-> PATH``; a PATH is ``key[1].key``).
- ``<!-- not run: REASON -->`` before a block: not run here (``vdnnsim profile``,
  ``measure`` and ``calibrate`` need a CUDA GPU; a few scripts take minutes). Its
  ``vdnnsim`` command lines must still parse with the real argument parser. A transcript
  with a GPU-only command and no such mark is an error, and so is a fenced block without
  a language that is neither a transcript, an output, a file nor marked.
- ``bash`` blocks without ``$`` are command lists: each line is parsed, not run: a
  ``vdnnsim`` line by the real parser (and the repository files it reads must exist),
  ``make TARGET`` against the Makefile, ``pip install`` extras against setup.cfg,
  ``python SCRIPT`` / ``python -m MODULE`` against the files and modules.
- A synopsis (a heading or code span or unmarked line starting ``vdnnsim SUB``): SUB is a
  command, each ``--flag`` is one of its options, and each ``a|b|c`` is among the flag's
  choices; in docs/configs.md's command headings, all of the options and choices.
- Names: a code span that looks like a policy (``vdnn_*``, ``baseline_*``, ``uvm_*``) is
  one (or one of ``vdnnsim measure --policy``'s); YAML blocks name real policies and
  policy options; ``hf:name`` is a shipped model; every ``vdnnsim[EXTRA]`` / ``.[EXTRA]``
  is an extra of setup.cfg; ``<!-- all: policies, gpus, networks -->`` before a paragraph:
  it names every one of them.
"""

from __future__ import annotations

import argparse
import configparser
import copy
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKSPACE = "/tmp/vdnn_docs"
GPU_ONLY = frozenset({"profile", "measure", "calibrate"})
OUTPUT_OPTIONS = frozenset({"-o", "--output", "--out", "--chrome-trace"})
ERROR_LINE = re.compile(r"^vdnnsim(?: [a-z]+)?: error: ")
MARK = re.compile(r"^<!-- (?P<kind>output \(first lines\)|output|file|files|not run|all): "
                  r"(?P<arg>.*?) -->$")
ELLIPSIS = "..."
# what bash would read as more than words split on spaces (quotes, escapes, expansions,
# redirections, several commands)
SHELL_SYNTAX = re.compile(r"[^\w ./:,+@%=-]")


def doc_paths() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:  # a document outside the repository (the checker's own tests)
        return str(path)


# -- the documents' parts ---------------------------------------------------------------------

@dataclass
class Block:
    doc: str
    line: int  # of the opening fence (1-based); of the first row for a table
    lang: str  # the fence's language; "table" for a markdown table after a mark
    body: str
    mark: str = ""  # kind of the HTML comment just above ("" if none)
    arg: str = ""  # its argument

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def is_transcript(self) -> bool:
        return self.body.startswith("$ ")


def blocks(text: str, doc: str = "?") -> list[Block]:
    """Every fenced block, and every markdown table right after a mark, in order."""
    lines = text.split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = MARK.match(lines[i - 1]) if i else None
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append(Block(doc, i + 1, line[3:].strip(), "\n".join(lines[i + 1:j]),
                             m["kind"] if m else "", m["arg"] if m else ""))
            i = j + 1
            continue
        if line.startswith("|") and m:
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(Block(doc, i + 1, "table", "\n".join(lines[i:j]), m["kind"], m["arg"]))
            i = j
            continue
        i += 1
    return out


def all_blocks() -> list[Block]:
    return [b for p in doc_paths() for b in blocks(p.read_text(), rel(p))]


def prose(text: str) -> str:
    """The text outside fenced blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", prose(text))


# -- comparing outputs ------------------------------------------------------------------------

def lines_of(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip("\n").splitlines()] if text.strip() else []


def matches(got: list[str], want: list[str]) -> bool:
    """``want`` against ``got``, where a line ``...`` in ``want`` stands for any lines."""
    parts = [[]]  # runs of literal lines between the ellipses
    for line in want:
        if line == ELLIPSIS:
            parts.append([])
        else:
            parts[-1].append(line)
    if len(parts) == 1:
        return got == want
    first, *middle, last = parts
    if got[:len(first)] != first or len(got) < len(first) + len(last):
        return False
    if last and got[len(got) - len(last):] != last:
        return False
    pos, end = len(first), len(got) - len(last)
    for part in middle:
        for k in range(pos, end - len(part) + 1):
            if got[k:k + len(part)] == part:
                pos = k + len(part)
                break
        else:
            return False
    return True


def expected_exit(want: list[str]) -> int:
    shown = [line for line in want if line != ELLIPSIS]
    if shown and ERROR_LINE.match(shown[-1]):
        return 2
    if shown and shown[-1].startswith("vdnnsim: internal error: "):
        return 3
    return 0


# -- running commands -------------------------------------------------------------------------

def environment(bin_dir: Path) -> dict[str, str]:
    """``vdnnsim`` and ``python`` are this interpreter's, importing this checkout's vdnnsim
    from any folder; argparse wraps at 80 columns."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, args in (("vdnnsim", '-m vdnnsim "$@"'), ("python", '"$@"'), ("python3", '"$@"')):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" {args}\n')
        shim.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["COLUMNS"] = "80"
    env.pop("MPLBACKEND", None)
    return env


def run_output_command(cmd: str, env: dict[str, str], in_process: bool = True
                       ) -> subprocess.CompletedProcess[str]:
    """An ``output:`` mark's command, from the repository root (no shell). A ``vdnnsim``
    command, a ``python`` script or a ``python -m`` module runs in this process
    (:func:`run_in_process`) unless ``in_process`` is false: what it prints is what a fresh
    process prints, without seconds of interpreter start and imports per command."""
    argv = shlex.split(cmd)
    if argv[0].endswith("python") or argv[0].endswith("python3"):
        argv = ["python", *argv[1:]]
    if in_process and (argv[0] == "vdnnsim" or argv[0] == "python" and len(argv) > 1
                       and (argv[1] == "-m" or argv[1].endswith(".py"))):
        return run_in_process(argv, env)
    if argv[0] == "vdnnsim":
        argv = [sys.executable, "-m", "vdnnsim", *argv[1:]]
    elif argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


# Python's own warning filters in a fresh process (no -W, no PYTHONWARNINGS): a script run in
# the test process sees these, not pytest's, and every warning is new to it again
_FRESH_FILTERS = [("default", None, DeprecationWarning, "__main__", 0),
                  ("ignore", None, DeprecationWarning, None, 0),
                  ("ignore", None, PendingDeprecationWarning, None, 0),
                  ("ignore", None, ImportWarning, None, 0),
                  ("ignore", None, ResourceWarning, None, 0)]


def run_in_process(argv: list[str], env: dict[str, str], cwd: Path = ROOT
                   ) -> subprocess.CompletedProcess[str]:
    """``vdnnsim ARGS``, ``python SCRIPT ARGS`` or ``python -m MODULE ARGS`` run here as
    ``__main__``, from ``cwd`` (the repository root), with ``env``'s COLUMNS and MPLBACKEND; its exit
    code, stdout and stderr as ``subprocess.run`` gives them. What the run changes of this
    process is put back: the working folder, ``sys.argv``, ``sys.path``, the modules a script
    imported from beside it (two scripts' ``check`` modules are not one), the environment,
    warning filters, SIGINT's handler and torch's thread count."""
    import contextlib
    import io
    import runpy
    import signal
    import warnings

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_argv, saved_path = dict(os.environ), sys.argv[:], sys.path[:]
    modules, here, sigint = set(sys.modules), os.getcwd(), signal.getsignal(signal.SIGINT)
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    code: Any = 0
    try:
        os.chdir(cwd)
        for key in ("COLUMNS", "MPLBACKEND"):
            if key in env:
                os.environ[key] = env[key]
            else:
                os.environ.pop(key, None)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings():
            warnings.resetwarnings()
            warnings.showwarning = warnings._showwarning_orig  # to stderr, not pytest's record
            for action, _msg, cat, mod, lineno in reversed(_FRESH_FILTERS):
                warnings.filterwarnings(action, category=cat, module=mod or "", lineno=lineno)
            try:
                if argv[0] == "vdnnsim":
                    from vdnnsim.cli import main
                    code = main(argv[1:])
                elif argv[1] == "-m":
                    sys.argv = [argv[2], *argv[3:]]
                    runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
                else:
                    script = str(ROOT / argv[1])
                    sys.argv = [script, *argv[2:]]
                    sys.path.insert(0, str(Path(script).parent))
                    runpy.run_path(script, run_name="__main__")
            except SystemExit as exc:
                code = exc.code
                if code is not None and not isinstance(code, int):
                    print(code, file=sys.stderr)
                    code = 1
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv[:], sys.path[:] = saved_argv, saved_path
        for name in set(sys.modules) - modules:
            path = getattr(sys.modules[name], "__file__", None) or ""
            if path.startswith(str(ROOT / "experiments")):
                del sys.modules[name]
        signal.signal(signal.SIGINT, sigint)
        if threads is not None:
            torch.set_num_threads(threads)
    return subprocess.CompletedProcess(argv, int(code or 0), out.getvalue(), err.getvalue())


@dataclass
class Step:
    """One ``$`` line of a transcript and what the document shows it printing."""
    command: str
    want: list[str]
    line: int


def transcript_steps(block: Block) -> list[Step]:
    steps: list[Step] = []
    lines = block.body.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            raise DocError(f"{block.where}: a transcript line outside a command: {line!r}")
        cmd, start = line[2:], i
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd[:-1].rstrip() + " " + lines[i].strip()
        i += 1
        want = []
        while i < len(lines) and not lines[i].startswith("$ "):
            want.append(lines[i].rstrip())
            i += 1
        steps.append(Step(cmd, want, block.line + 1 + start))
    return steps


class DocError(Exception):
    """A part of a document the checker cannot read (a malformed mark or block)."""


@dataclass
class Session:
    """One document's transcripts and files, sharing a fresh ``/tmp/vdnn_docs``."""
    workspace: Path
    env: dict[str, str]
    problems: list[str] = field(default_factory=list)

    def path(self, shown: str) -> Path:
        """A path as the docs write it, as it is here."""
        if shown == WORKSPACE or shown.startswith(WORKSPACE + "/"):
            return self.workspace / shown[len(WORKSPACE):].lstrip("/")
        raise DocError(f"{shown}: files a document makes live under {WORKSPACE}")

    def run(self, cmd: str, cwd: Path) -> tuple[int, list[str], Path]:
        cmd = cmd.replace(WORKSPACE, str(self.workspace))
        if cmd.startswith("vdnnsim ") and not SHELL_SYNTAX.search(cmd):
            # a plain command line, which bash would only split on spaces: in this process
            # (no interpreter start and imports), as an output mark's command
            proc = run_in_process(cmd.split(), self.env, cwd)
        else:
            state = self.workspace.parent / ".cwd"
            script = cmd + f'\n__rc=$?; pwd > "{state}"; exit $__rc\n'
            proc = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True,
                                  text=True, timeout=600, env=self.env)
            cwd = Path(state.read_text().strip()) if state.exists() else cwd
        got = lines_of(proc.stdout) + lines_of(proc.stderr)
        got = [line.replace(str(self.workspace), WORKSPACE) for line in got]
        return proc.returncode, got, cwd

    def transcript(self, block: Block) -> None:
        cwd = ROOT
        for step in transcript_steps(block):
            rc, got, cwd = self.run(step.command, cwd)
            want_rc = expected_exit(step.want)
            if not matches(got, step.want) or rc != want_rc:
                self.problems.append(
                    f"{block.doc}:{step.line}: `{step.command}` exited {rc} (the doc implies "
                    f"{want_rc}) and printed:\n" + "\n".join(got or ["(nothing)"])
                    + "\n--- the doc shows:\n" + "\n".join(step.want or ["(nothing)"]))

    def write_files(self, block: Block) -> None:
        if block.mark == "file":
            target = self.path(block.arg)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.body + "\n")
            return
        folder_arg, _, base = block.arg.partition(" from ")
        folder = self.path(folder_arg.strip())
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files_of(block, base.strip()).items():
            (folder / name).write_text(text)


def files_of(block: Block, base: str = "") -> dict[str, str]:
    """The files a ``files:`` block describes: name -> text."""
    out: dict[str, str] = {}
    if not base:
        data = yaml.safe_load(block.body)
        if not isinstance(data, dict):
            raise DocError(f"{block.where}: a files block is a mapping NAME: CONTENT")
        for name, content in data.items():
            out[str(name)] = (content if content.endswith("\n") else content + "\n") \
                if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        return out
    original = yaml.safe_load((ROOT / base).read_text())
    for line in block.body.splitlines():
        if not line.strip():
            continue
        name, sep, edits = line.partition(":")
        if not sep:
            raise DocError(f"{block.where}: {line!r} is not NAME: EDIT; EDIT")
        data = copy.deepcopy(original)
        for edit in edits.split(";"):
            apply_edit(data, edit.strip(), f"{block.where} ({name})")
        out[name.strip()] = yaml.safe_dump(data, sort_keys=False)
    return out


def _steps(path: str) -> list[str | int]:
    out: list[str | int] = []
    for part in path.split("."):
        m = re.fullmatch(r"([^\[\]]*)((?:\[\d+\])*)", part)
        if not m:
            raise DocError(f"{path!r} is not a key path such as layers[1].fwd_ns")
        if m[1]:
            out.append(m[1])
        out += [int(k) for k in re.findall(r"\[(\d+)\]", m[2])]
    return out


def _parent(data: Any, path: str) -> tuple[Any, str | int]:
    steps = _steps(path)
    for s in steps[:-1]:
        data = data[s]
    return data, steps[-1]


def apply_edit(data: Any, edit: str, where: str) -> None:
    try:
        if edit.startswith("del "):
            parent, key = _parent(data, edit[4:].strip())
            del parent[key]
        elif "<->" in edit:
            a, b = (p.strip() for p in edit.split("<->"))
            pa, ka = _parent(data, a)
            pb, kb = _parent(data, b)
            pa[ka], pb[kb] = pb[kb], pa[ka]
        elif "=" in edit:
            path, value = (p.strip() for p in edit.split("=", 1))
            parent, key = _parent(data, path)
            if isinstance(parent, list) and key == len(parent):
                parent.append(yaml.safe_load(value))
            else:
                parent[key] = yaml.safe_load(value)
        else:
            raise DocError(f"{where}: {edit!r} is not PATH = YAML, del PATH or PATH <-> PATH")
    except (KeyError, IndexError, TypeError) as exc:
        raise DocError(f"{where}: {edit!r} does not apply: {exc!r}") from None


# -- the real parser, extras, make targets, names ---------------------------------------------

def parser() -> argparse.ArgumentParser:
    from vdnnsim.cli import build_parser
    return build_parser()


def subparsers(p: argparse.ArgumentParser | None = None) -> dict[str, argparse.ArgumentParser]:
    p = p or parser()
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("vdnnsim's parser has no commands")


def parse_error(argv: list[str]) -> str | None:
    """None if the real parser accepts ``vdnnsim ARGV``, else its message."""
    import contextlib
    import io
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser().parse_args(argv)
    except SystemExit as exc:
        return err.getvalue().strip() or f"exit {exc.code}"
    return None


def setup_extras() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return set(cfg["options.extras_require"])


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return {m for m in re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, re.M)}


def makefile_dev_extras() -> set[str]:
    m = re.search(r"install -q (?:--no-compile )?-e '\.\[([^\]]+)\]'", (ROOT / "Makefile").read_text())
    return set(m[1].split(",")) if m else set()


def measure_policies() -> set[str]:
    for action in subparsers()["measure"]._actions:
        if "--policy" in action.option_strings:
            return set(action.choices or ())
    return set()


def policy_options() -> dict[str, set[str]]:
    """Each policy's options, as its own refusal of an unknown one lists them."""
    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.errors import ConfigError
    from vdnnsim.trace import load_trace
    from vdnnsim.policies.registry import policy_names

    trace = load_trace(ROOT / "docs" / "examples" / "tiny_trace.yaml")
    gpu = resolve_gpu("k40")
    out: dict[str, set[str]] = {}
    for name in policy_names():
        try:
            run_trace(trace, gpu, name, {"no_such_option": 1}, record=False)
        except ConfigError as exc:
            m = re.search(r"known: (.*)$", str(exc))
            out[name] = set(m[1].split(", ")) if m else set()
        else:
            raise AssertionError(f"policy {name} took an unknown option")
    return out


def config_policy_problems(data: dict, options: dict[str, set[str]]) -> list[str]:
    """A run config or study (as YAML data) names real policies, with options they take
    (``options``: each policy's); options given without a policy must be some policy's."""
    problems = []
    for d in [data, data.get("base"), *(data.get("runs") or [])]:
        if not isinstance(d, dict):
            continue
        named = list(d.get("policies") or ([d["policy"]] if "policy" in d else []))
        if d is data:
            named += list((data.get("sweep") or {}).get("policy") or [])
        problems += [f"no policy {p!r}" for p in named if p not in options]
        opts = set(d.get("policy_options") or {})
        for p in (p for p in named if p in options):
            if opts - options[p]:
                problems.append(f"policy {p} has no option(s) {sorted(opts - options[p])}")
        if opts and not named and not any(opts <= o for o in options.values()):
            problems.append(f"no policy takes the option(s) {sorted(opts)}")
    return problems


# -- command lines in documents ---------------------------------------------------------------

def logical_lines(body: str) -> list[tuple[int, str]]:
    """(offset, line) with backslash continuations joined."""
    out: list[tuple[int, str]] = []
    lines = body.split("\n")
    i = 0
    while i < len(lines):
        start, line = i, lines[i]
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i].strip()
        if line.strip():
            out.append((start, line))
        i += 1
    return out


TOP = {p.name for p in ROOT.iterdir()}


def input_paths(argv: list[str]) -> list[str]:
    """Tokens of a command line that name repository files it reads."""
    out = []
    for k, tok in enumerate(argv):
        if tok.startswith("-") or (k and argv[k - 1] in OUTPUT_OPTIONS):
            continue
        value = tok.split("=", 1)[-1]
        if "/" in value and value.split("/")[0] in TOP:
            out.append(value)
    return out


def check_command_line(line: str) -> list[str]:
    """Problems with one line of a command list (parsed, never run)."""
    try:
        argv = shlex.split(line, comments=True)
    except ValueError as exc:
        return [f"cannot split {line!r}: {exc}"]
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", argv[0]):
        argv = argv[1:]
    if not argv:
        return []
    cmd, args = argv[0], argv[1:]
    problems = []
    if cmd.endswith("vdnnsim"):
        err = parse_error(args)
        if err:
            problems.append(f"`{line.strip()}`: {err}")
    elif cmd.endswith(("python", "python3")):
        if args[:1] == ["-m"]:
            import importlib.util
            if len(args) < 2 or importlib.util.find_spec(args[1]) is None:
                problems.append(f"`{line.strip()}`: no module {args[1:2]}")
            elif args[1] == "vdnnsim":
                err = parse_error(args[2:])
                if err:
                    problems.append(f"`{line.strip()}`: {err}")
        elif not args or not (ROOT / args[0]).is_file():
            problems.append(f"`{line.strip()}`: no script {args[:1]}")
    elif cmd == "make":
        missing = [t for t in args if not t.startswith("-") and t not in make_targets()]
        if missing:
            problems.append(f"`{line.strip()}`: the Makefile has no target {missing}")
    elif cmd == "pip":
        problems += [f"`{line.strip()}`: {p}" for p in check_extras(line)]
    elif cmd != "cd":
        problems.append(f"`{line.strip()}`: the doc checker does not know the command {cmd!r}; "
                        "show it as a transcript or teach tests/doccheck.py")
    for p in input_paths(args):
        if not (ROOT / p).exists():
            problems.append(f"`{line.strip()}`: {p} does not exist")
    return problems


EXTRA = re.compile(r"(?:vdnnsim|(?<![\w/])\.)\[([a-z,\s]+)\]")


def check_extras(text: str) -> list[str]:
    known = setup_extras()
    return [f"extra {e!r} is not in setup.cfg's extras_require ({', '.join(sorted(known))})"
            for m in EXTRA.finditer(text) for e in re.split(r"[,\s]+", m[1])
            if e and e not in known]


def synopsis_problems(text: str, complete: bool = False) -> list[str]:
    """A synopsis ``vdnnsim SUB [--flag VALUE] [--choice a|b] ...``: SUB, its flags and choices
    exist; with ``complete``, it names every option and choice of SUB."""
    tokens = text.replace("[", " ").replace("]", " ").split()
    if tokens and tokens[0].endswith("/vdnnsim"):
        tokens[0] = "vdnnsim"
    if len(tokens) < 2 or tokens[0] != "vdnnsim" or not re.fullmatch(r"[a-z]+", tokens[1]):
        return []
    subs = subparsers()
    sub = tokens[1]
    if sub not in subs:
        return [f"`{text}`: vdnnsim has no command {sub!r} ({', '.join(subs)})"]
    actions = [a for a in subs[sub]._actions if a.help != argparse.SUPPRESS
               and not isinstance(a, argparse._HelpAction)]
    by_flag = {s: a for a in actions for s in a.option_strings}
    problems, named = [], set()
    for k, tok in enumerate(tokens[2:], 2):
        tok = tok.strip(",.;:()")
        if tok.startswith("-") and len(tok) > 1:
            flag = tok.split("=", 1)[0]
            if flag not in by_flag:
                problems.append(f"`{text}`: vdnnsim {sub} has no option {flag}")
                continue
            action = by_flag[flag]
            named.add(id(action))
            value = tok.split("=", 1)[1] if "=" in tok else (
                tokens[k + 1] if k + 1 < len(tokens) else "")
            if action.choices and "|" in value:
                alts = set(value.strip(",.;:()").split("|"))
                if not alts <= set(action.choices) or (complete and alts != set(action.choices)):
                    problems.append(f"`{text}`: {flag} takes {'|'.join(action.choices)}, "
                                    f"the doc says {value}")
        elif tok.startswith("{") and tok.endswith("}"):
            alts = set(tok[1:-1].split(","))
            pos = [a for a in actions if not a.option_strings and a.choices]
            if not pos or alts != set(pos[0].choices):
                problems.append(f"`{text}`: the choices are "
                                f"{{{','.join(pos[0].choices) if pos else ''}}}")
            elif pos:
                named.add(id(pos[0]))
    if complete:
        missing = [a.option_strings[0] for a in actions if a.option_strings
                   and id(a) not in named]
        if missing:
            problems.append(f"`{text}`: the synopsis leaves out {', '.join(missing)}")
    return problems


# -- pasting new outputs ----------------------------------------------------------------------

def refresh(path: Path, env: dict[str, str], workspace: Path) -> list[str]:
    """Rewrite ``path`` with what its output marks and transcripts print now; a block whose
    ``...`` elision no longer matches is replaced whole (elide it again by hand). Returns
    what changed."""
    text = path.read_text()
    doc = rel(path)
    session = Session(workspace, env)
    workspace.mkdir(parents=True, exist_ok=True)
    new_bodies: dict[int, str] = {}
    changed = []
    for b in blocks(text, doc):
        if b.mark in ("file", "files") and b.arg.startswith(WORKSPACE):
            session.write_files(b)
        elif b.mark in ("output", "output (first lines)"):
            proc = run_output_command(b.arg, env)
            got, want = lines_of(proc.stdout), lines_of(b.body)
            if b.mark == "output (first lines)":
                got = got[:len(want)]
            if proc.returncode == 0 and not matches(got, want):
                new_bodies[b.line] = "\n".join(got)
                changed.append(f"{b.where}: {b.arg}")
        elif b.is_transcript and b.mark != "not run":
            cwd, out = ROOT, []
            for step in transcript_steps(b):
                rc, got, cwd = session.run(step.command, cwd)
                ok = matches(got, step.want) and rc == expected_exit(step.want)
                out += [f"$ {step.command}", *(step.want if ok else got)]
                if not ok:
                    changed.append(f"{doc}:{step.line}: {step.command}")
            new_bodies[b.line] = "\n".join(out)
    lines = text.split("\n")
    for b in sorted((b for b in blocks(text, doc) if b.line in new_bodies),
                    key=lambda b: -b.line):
        first = b.line if b.lang != "table" else b.line - 1  # the fence, or the row before
        if b.lang == "table":
            n = len(b.body.split("\n"))
        else:  # up to the closing fence: an empty block has no line ("".split gives one)
            n = 0
            while first + n < len(lines) and not lines[first + n].startswith("```"):
                n += 1
        lines[first:first + n] = new_bodies[b.line].split("\n")
    path.write_text("\n".join(lines))
    return changed


def main(argv: list[str]) -> int:
    """``python -m tests.doccheck [DOC ...]``: paste the current outputs into the docs (all
    of them by default), then say which changed; review the diff before committing."""
    import tempfile
    paths = [ROOT / a for a in argv] if argv else doc_paths()
    with tempfile.TemporaryDirectory() as tmp:
        env = environment(Path(tmp) / "bin")
        for k, path in enumerate(paths):
            for what in refresh(path, env, Path(tmp) / f"doc{k}" / "vdnn_docs"):
                print(f"updated {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
