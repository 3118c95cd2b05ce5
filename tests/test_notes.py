"""Comments as rules: the checks that keep the NOTE blocks short, named and defined once.

NOTE [note rules]
A definition is a docstring line, or a comment with nothing else on its line, that is
exactly NOTE, a space and the name in square brackets. Its body is the non-blank lines
after it up to the first blank line, the next definition, or the end of its comment block
(consecutive comment-only lines) or docstring: at most 12 lines. Each name is defined once
in vdnnsim/ or tests/. A reference (the marker inside other text; a list: the marker then
", [other name]") in a comment or docstring of vdnnsim/ or tests/, in docs/**/*.md,
README.md or vdnnsim's data files names a defined NOTE and stands on one line. vdnnsim/
holds at most 400 markers, none in a string literal other than a docstring (those reach
help, error and printed text), and its Python files name no session numbers.

The checks read the source (tokenize, ast) and never import vdnnsim; each is a function of
source text, tried on tiny inline samples below as well as on the tree. A string literal in
tests/ that is not a docstring is data (this file's samples), not a reference.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_MARKERS = 400
MAX_BODY_LINES = 12

MARKER = re.compile(r"NOTE \[")
DEFINITION = re.compile(r"NOTE \[([^\[\]]+)\]")
# a reference and the names listed after it with ", [name]" (not a markdown link "[b](x)")
REFERENCE = re.compile(r"NOTE \[([^\[\]]+)\]((?:,\s*\[[^\[\]]+\](?!\())*)")
LISTED = re.compile(r"\[([^\[\]]+)\]")
# a marker split over a line break: the word ending a line before a "[", a bracket left
# open at the line's end, a list ending in a comma; or spelled with no space or two
WORD_END = re.compile(r"\bNOTE\s*$")
OPEN_END = re.compile(r"NOTE \[[^\]]*$")
LIST_END = re.compile(r"NOTE \[[^\[\]]+\](?:,\s*\[[^\[\]]+\])*,\s*$")
MISSPELT = re.compile(r"\bNOTE(?:\s{2,}|)\[")
# session numbers: "session 25", "sessions 23-33", "session25", "Session_7"; folder names
# such as "h100_s32" or "s28/" (an s and two or more digits standing alone or after "_")
SESSION = re.compile(r"(?i:\bsessions?[\s_-]*\d+)|(?<![A-Za-z0-9])s\d{2,}(?![A-Za-z0-9])")


@dataclass(frozen=True)
class Line:
    """One line of prose: a comment's or docstring's text, or a markdown line."""

    path: str
    lineno: int
    text: str  # stripped of the comment sign or the quotes, and of surrounding blanks
    block: int  # lines of one comment block, docstring or markdown file share it
    alone: bool = True  # false for a comment after code on its line


@dataclass
class Scan:
    """What one file says in prose, and where its other string literals are."""

    path: str
    python: bool
    lines: list[Line] = field(default_factory=list)
    strings: list[tuple[int, str]] = field(default_factory=list)  # (lineno, value)
    raw: str = ""


def _string_nodes(tree: ast.AST) -> tuple[list[ast.Constant], list[ast.expr]]:
    """(docstrings, other string literals): a docstring is every string that is a statement
    of its own (module, class and function docstrings and the attribute docstrings after
    an assignment: none reaches the program's output); an f-string is one literal."""
    docs: list[ast.Constant] = []
    other: list[ast.expr] = []
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            docs.append(node.value)
            inside.add(id(node.value))
        elif isinstance(node, ast.JoinedStr):
            other.append(node)
            inside.update(id(v) for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in inside:
            other.append(node)
    return docs, other


def _char_col(line: str, byte_col: int) -> int:
    return len(line.encode()[:byte_col].decode(errors="ignore"))


def scan_python(text: str, path: str = "<src>") -> Scan:
    """The comments and docstrings of Python source ``text`` as lines of prose."""
    scan = Scan(path, True, raw=text)
    if "NOTE" not in text:  # nothing to find; the session check reads ``raw``
        return scan
    src = text.splitlines()
    docs, strings = _string_nodes(ast.parse(text))
    block = 0
    for node in docs:
        block += 1
        first, last = node.lineno, node.end_lineno or node.lineno
        for lineno in range(first, last + 1):
            line = src[lineno - 1]
            if lineno == last:
                line = line[:_char_col(line, node.end_col_offset or len(line.encode()))]
                line = re.sub(r"(\"\"\"|'''|\"|')$", "", line)
            if lineno == first:
                line = line[_char_col(line, node.col_offset):]
                line = re.sub(r"^[rRuU]?(\"\"\"|'''|\"|')", "", line)
            scan.lines.append(Line(path, lineno, line.strip(), block))
    for node in strings:
        if isinstance(node, ast.JoinedStr):
            scan.strings.append((node.lineno, "".join(
                v.value for v in node.values
                if isinstance(v, ast.Constant) and isinstance(v.value, str))))
        else:
            scan.strings.append((node.lineno, node.value))
    previous = -2
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type != tokenize.COMMENT:
            continue
        lineno = tok.start[0]
        alone = not src[lineno - 1][:tok.start[1]].strip()
        if not (alone and previous == lineno - 1):
            block += 1
        previous = lineno if alone else -2
        scan.lines.append(Line(path, lineno, tok.string.lstrip("#").strip(), block, alone))
    scan.lines.sort(key=lambda ln: ln.lineno)
    return scan


def scan_text(text: str, path: str = "<doc>") -> Scan:
    """A markdown or data file: every line is prose (a YAML comment's ``#`` kept)."""
    return Scan(path, False, [Line(path, i, line.strip(), 0)
                       for i, line in enumerate(text.splitlines(), 1)], raw=text)


def _blocks(scan: Scan) -> list[list[Line]]:
    out: dict[int, list[Line]] = {}
    for line in scan.lines:
        out.setdefault(line.block, []).append(line)
    return list(out.values())


def definitions(scan: Scan) -> list[tuple[str, Line, int]]:
    """(name, definition line, body lines) of each NOTE a Python file defines."""
    if not scan.python:
        return []
    out = []
    for block in _blocks(scan):
        for i, line in enumerate(block):
            m = DEFINITION.fullmatch(line.text)
            if not (m and line.alone):
                continue
            body = 0
            for after in block[i + 1:]:
                if not after.text or DEFINITION.fullmatch(after.text):
                    break
                body += 1
            out.append((m.group(1), line, body))
    return out


def references(scan: Scan) -> list[tuple[str, Line]]:
    """(name, line) of each NOTE a file names that is not a definition line."""
    out = []
    for line in scan.lines:
        if scan.python and line.alone and DEFINITION.fullmatch(line.text):
            continue
        for m in REFERENCE.finditer(line.text):
            out.append((m.group(1), line))
            out.extend((name, line) for name in LISTED.findall(m.group(2)))
    return out


def _where(line: Line) -> str:
    return f"{line.path}:{line.lineno}"


def check_defined_once(scans: list[Scan]) -> list[str]:
    seen: dict[str, list[Line]] = {}
    for scan in scans:
        for name, line, _ in definitions(scan):
            seen.setdefault(name, []).append(line)
    return [f"NOTE [{name}] defined {len(lines)} times: "
            + ", ".join(_where(ln) for ln in lines)
            + " (a reference alone on its line reads as a definition: write (NOTE [...]))"
            for name, lines in sorted(seen.items()) if len(lines) > 1]


def check_body_length(scans: list[Scan]) -> list[str]:
    return [f"{_where(line)}: NOTE [{name}] has {body} lines, more than {MAX_BODY_LINES}"
            for scan in scans for name, line, body in definitions(scan)
            if body > MAX_BODY_LINES]


def check_references(scans: list[Scan], defining: list[Scan]) -> list[str]:
    defined = {name for scan in defining for name, _, _ in definitions(scan)}
    return [f"{_where(line)}: NOTE [{name}] is defined nowhere in vdnnsim/ or tests/"
            for scan in scans for name, line in references(scan) if name not in defined]


def check_splits(scans: list[Scan]) -> list[str]:
    out = []
    for scan in scans:
        lines = scan.lines
        for i, line in enumerate(lines):
            nxt = lines[i + 1] if i + 1 < len(lines) else None
            continued = (nxt is not None and nxt.block == line.block
                         and nxt.lineno == line.lineno + 1 and nxt.text.startswith("["))
            if (OPEN_END.search(line.text)
                    or continued and (WORD_END.search(line.text) or LIST_END.search(line.text))):
                out.append(f"{_where(line)}: a NOTE marker split across a line break: "
                           f"{line.text[-60:]!r}")
            elif MISSPELT.search(line.text):
                out.append(f"{_where(line)}: a NOTE marker takes one space before its "
                           f"bracket: {line.text[-60:]!r}")
    return out


def count_markers(texts: dict[str, str]) -> int:
    return sum(len(MARKER.findall(text)) for text in texts.values())


def check_strings(scans: list[Scan]) -> list[str]:
    return [f"{scan.path}:{lineno}: NOTE name in a string that can reach the user: "
            f"{value.strip()[:70]!r}"
            for scan in scans for lineno, value in scan.strings
            if re.search(r"NOTE\s*\[", value)]


def check_sessions(scans: list[Scan]) -> list[str]:
    return [f"{scan.path}:{i}: a session number is history, not code: {m.group(0)!r}"
            for scan in scans for i, line in enumerate(scan.raw.splitlines(), 1)
            for m in [SESSION.search(line)] if m]


# --- the tree -------------------------------------------------------------------------

def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@cache
def _package_files() -> dict[str, str]:
    """Every text file under vdnnsim/ (what grep -r counts the markers in)."""
    out = {}
    for path in sorted((ROOT / "vdnnsim").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            try:
                out[_rel(path)] = path.read_text()
            except UnicodeDecodeError:
                continue
    return out


@cache
def _package_python() -> tuple[Scan, ...]:
    return tuple(scan_python(text, path) for path, text in _package_files().items()
                 if path.endswith(".py"))


@cache
def _test_python() -> tuple[Scan, ...]:
    return tuple(scan_python(p.read_text(), _rel(p))
                 for p in sorted((ROOT / "tests").rglob("*.py")))


@cache
def _prose() -> tuple[Scan, ...]:
    """docs/**/*.md, README.md and vdnnsim's data files that mention a NOTE."""
    paths = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
    scans = [scan_text(p.read_text(), _rel(p)) for p in paths]
    scans += [scan_text(text, path) for path, text in _package_files().items()
              if not path.endswith(".py") and "NOTE" in text]
    return tuple(scans)


def _fail(problems: list[str]) -> None:
    if problems:
        shown = "\n".join(problems[:60])
        more = f"\n... and {len(problems) - 60} more" if len(problems) > 60 else ""
        pytest.fail(f"{len(problems)} problem(s):\n{shown}{more}", pytrace=False)


def test_each_note_defined_once() -> None:
    _fail(check_defined_once(list(_package_python() + _test_python())))


def test_note_bodies_at_most_twelve_lines() -> None:
    _fail(check_body_length(list(_package_python() + _test_python())))


def test_references_name_defined_notes() -> None:
    code = list(_package_python() + _test_python())
    _fail(check_references(code + list(_prose()), code))


def test_no_marker_split_across_lines() -> None:
    _fail(check_splits(list(_package_python() + _test_python() + _prose())))


def test_at_most_400_markers_in_the_package() -> None:
    n = count_markers(_package_files())
    assert n <= MAX_MARKERS, f"vdnnsim/ holds {n} 'NOTE [' markers, more than {MAX_MARKERS}"


def test_no_note_in_user_facing_strings() -> None:
    _fail(check_strings(list(_package_python())))


def test_no_session_numbers_in_the_package() -> None:
    _fail(check_sessions(list(_package_python())))


# --- each check fails on a small example ------------------------------------------------

GOOD = '''"""A module.

NOTE [alpha]
One rule,
in two lines.

More prose, not the NOTE's.
"""

# NOTE [beta]
# Another rule.
x = 1  # NOTE [alpha], [beta]
y = 2  # NOTE [beta]
'''


def test_checks_pass_a_good_sample() -> None:
    scans = [scan_python(GOOD, "good.py")]
    assert {n for n, _, _ in definitions(scans[0])} == {"alpha", "beta"}
    assert [n for n, _ in references(scans[0])] == ["alpha", "beta", "beta"]
    for check in (check_defined_once, check_body_length, check_splits, check_strings,
                  check_sessions):
        assert check(scans) == [], check.__name__
    assert check_references(scans, scans) == []


def test_defined_twice_fails() -> None:
    twice = [scan_python(GOOD, "a.py"), scan_python("# NOTE [alpha]\n# Again.\n", "b.py")]
    assert check_defined_once(twice)[0].startswith("NOTE [alpha] defined 2 times: a.py:3, b.py:1")


def test_long_body_fails() -> None:
    long = "# NOTE [gamma]\n" + "".join(f"# line {i}\n" for i in range(13)) + "y = 2\n"
    assert check_body_length([scan_python(long, "c.py")]) == [
        "c.py:1: NOTE [gamma] has 13 lines, more than 12"]
    doc = '"""NOTE [gamma]\n' + "".join(f"line {i}\n" for i in range(12)) + '"""\n'
    assert check_body_length([scan_python(doc, "d.py")]) == []
    ended = "# NOTE [gamma]\n# one\n#\n" + "".join(f"# more {i}\n" for i in range(20))
    assert check_body_length([scan_python(ended, "e.py")]) == []


def test_undefined_reference_fails() -> None:
    code = [scan_python(GOOD, "good.py")]
    doc = scan_text("See NOTE [alpha], [gamma] and NOTE [delta] ([docs](x.md)).\n", "x.md")
    assert check_references(code + [doc], code) == [
        "x.md:1: NOTE [gamma] is defined nowhere in vdnnsim/ or tests/",
        "x.md:1: NOTE [delta] is defined nowhere in vdnnsim/ or tests/"]
    link = scan_text("NOTE [alpha], [a link](x.md)\n", "y.md")
    assert check_references([link], code) == []


def test_split_marker_fails() -> None:
    split = "# the rule (NOTE [block\n# timing]) here\n# NOTE\n# [alpha]\n"
    assert [p.split(":")[1] for p in check_splits([scan_python(split, "s.py")])] == ["1", "3"]
    doc = scan_text("as NOTE\n[alpha] says, and NOTE [alpha],\n[beta] too\n", "s.md")
    assert [p.split(":")[1] for p in check_splits([doc])] == ["1", "2"]
    spaced = scan_text("see NOTE  [alpha] or NOTE[beta]\n", "t.md")
    assert len(check_splits([spaced])) == 1
    fine = scan_text("a NOTE\nis a word; NOTE [alpha] is a marker\n", "u.md")
    assert check_splits([fine]) == []


def test_marker_count() -> None:
    assert count_markers({"a.py": "# NOTE [a]\n# NOTE [b], NOTE [c]", "b.md": "NOTE [a]"}) == 4


def test_note_in_a_string_fails() -> None:
    src = ('"""NOTE [alpha] in a docstring is fine."""\n'
           'HELP = "the cap (NOTE [alpha])"\n'
           'def f(n):\n    """Docstring."""\n    raise ValueError(f"{n} too big (NOTE [beta])")\n'
           'OK = "no marker"\n')
    assert check_strings([scan_python(src, "h.py")]) == [
        "h.py:2: NOTE name in a string that can reach the user: 'the cap (NOTE [alpha])'",
        "h.py:5: NOTE name in a string that can reach the user: 'too big (NOTE [beta])'"]


def test_session_numbers_fail() -> None:
    src = ("# measured in session 25\n# sessions 23-33 agree\n"
           "PATH = 'traces/cpu_step/h100_s32/x.json'  # session25\n"
           "# the sessions of a server, s3 of a vector, s16le, fp32s, 'dims'\n")
    found = check_sessions([scan_python(src, "k.py")])
    assert [p.split(":")[1] for p in found] == ["1", "2", "3"]


# --- mending split markers (for the tree's owners: python tests/test_notes.py FILE...) ---

def mend_splits(text: str, path: str = "<doc>") -> str:
    """``text`` with each marker that a line break splits moved whole onto the next line of
    the same comment block, docstring or markdown paragraph (after its indentation and
    ``#``); where the two lines are not of one block, or the next starts a list item, the
    split is left for a person."""
    python = path.endswith(".py")
    scan = scan_python(text, path) if python else scan_text(text, path)
    prose = {ln.lineno: ln for ln in scan.lines if ln.alone}
    lines = text.split("\n")
    for i in range(len(lines) - 1):
        here, there = prose.get(i + 1), prose.get(i + 2)
        if here is None or there is None or here.block != there.block:
            continue
        line, nxt = lines[i], lines[i + 1]
        m = OPEN_END.search(line)
        if m is None:
            m = next((x for x in (WORD_END.search(line), LIST_END.search(line))
                      if x and there.text.startswith("[")), None)
        lead = re.match(r"\s*(?:#\s*)?", nxt).group(0)
        if m is None or not nxt.strip() or re.match(r"[-*] |\d+\. ", nxt[len(lead):]):
            continue
        start = m.start() - 1 if line[:m.start()].endswith("(") else m.start()
        if not line[:start].strip().strip("#").strip("\"'").strip():
            continue
        lines[i] = line[:start].rstrip()
        lines[i + 1] = lead + line[start:].strip() + " " + nxt[len(lead):]
    return "\n".join(lines)


def test_mend_splits() -> None:
    md = "a rule (NOTE [block\n  timing]) here, and NOTE\n[alpha] too\n- NOTE [a\n- b]\n"
    assert mend_splits(md) == ("a rule\n  (NOTE [block timing]) here, and\nNOTE [alpha] too\n"
                               "- NOTE [a\n- b]\n")
    py = "    # the rule (NOTE [block\n    # timing]) here\nx = 1  # NOTE [a\n# b]\n"
    assert mend_splits(py, "m.py") == ("    # the rule\n    # (NOTE [block timing]) here\n"
                                       "x = 1  # NOTE [a\n# b]\n")
    doc = '"""Text, NOTE [block\ntiming] applies."""\n'
    assert mend_splits(doc, "d.py") == '"""Text,\nNOTE [block timing] applies."""\n'


if __name__ == "__main__":
    import sys
    for name in sys.argv[1:]:
        path = Path(name)
        old = path.read_text()
        new = mend_splits(old, name)
        if new != old:
            path.write_text(new)
            print(f"mended {name}")
