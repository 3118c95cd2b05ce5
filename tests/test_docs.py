"""What the documentation shows of the program is what the program does (NOTE [doc checks] in
tests/doccheck.py says what is checked and how to mark a block).

After a change that alters an output: run the command again (from the repository root; in a
transcript, in order, with ``/tmp/vdnn_docs`` a fresh folder) and paste what it prints.
"""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from tests import doccheck as dc
from tests.doccheck import ROOT, Block, DocError, Session

BLOCKS = dc.all_blocks()
DOCS = {dc.rel(p): p.read_text() for p in dc.doc_paths()}
OUTPUTS = [b for b in BLOCKS if b.mark in ("output", "output (first lines)")]
REPO_FILES = [b for b in BLOCKS if b.mark == "file" and not b.arg.startswith(dc.WORKSPACE)]
SESSIONS = sorted({b.doc for b in BLOCKS if (b.is_transcript and b.mark != "not run")
                   or (b.mark in ("file", "files") and b.arg.startswith(dc.WORKSPACE))})


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return dc.environment(tmp_path_factory.mktemp("bin"))


_RUNS: dict[str, object] = {}  # the same command in several docs runs once


def _output(cmd: str, env):
    if cmd not in _RUNS:
        _RUNS[cmd] = dc.run_output_command(cmd, env)
    return _RUNS[cmd]


def test_the_docs_declare_outputs():
    assert len(OUTPUTS) >= 30 and len(SESSIONS) >= 3


@pytest.mark.parametrize("block", [
    pytest.param(b, marks=pytest.mark.slow) if b.arg.startswith("python experiments/") else b
    for b in OUTPUTS], ids=[f"{b.doc}: {b.arg}" for b in OUTPUTS])
def test_documented_output_is_current(block: Block, env):
    proc = _output(block.arg, env)
    assert proc.returncode == 0, proc.stderr
    got = dc.lines_of(proc.stdout)
    want = dc.lines_of(block.body)
    if block.mark == "output (first lines)":
        got = got[:len(want)]
    assert dc.matches(got, want), (f"{block.where}: the output of `{block.arg}` changed; "
                                   "paste the new one:\n" + "\n".join(got))


@pytest.mark.parametrize("block", REPO_FILES, ids=[f"{b.doc}: {b.arg}" for b in REPO_FILES])
def test_shown_file_is_the_file(block: Block):
    path = ROOT / block.arg
    assert path.is_file(), f"{block.where}: {block.arg} does not exist"
    assert dc.lines_of(path.read_text()) == dc.lines_of(block.body), \
        f"{block.where}: {block.arg} changed; show it as it is"


@pytest.mark.parametrize("doc", SESSIONS)
def test_transcripts_print_what_the_doc_shows(doc: str, tmp_path, env):
    """The doc's files and transcripts, in order, in one fresh /tmp/vdnn_docs."""
    session = Session(tmp_path / "vdnn_docs", env)
    session.workspace.mkdir()
    for block in (b for b in BLOCKS if b.doc == doc):
        if block.mark in ("file", "files") and block.arg.startswith(dc.WORKSPACE):
            session.write_files(block)
        elif block.is_transcript and block.mark != "not run":
            session.transcript(block)
    assert not session.problems, "\n\n".join(session.problems)


def test_gpu_commands_are_marked_not_run_and_parse():
    """``vdnnsim profile/measure/calibrate`` need a CUDA GPU: shown, not run, but parsed."""
    problems = []
    for b in BLOCKS:
        if not b.is_transcript:
            continue
        for step in dc.transcript_steps(b):
            argv = shlex.split(step.command, comments=True)
            sub = argv[1] if len(argv) > 1 and argv[0] == "vdnnsim" else None
            if b.mark == "not run":
                if argv[0] == "vdnnsim":
                    err = dc.parse_error(argv[1:])
                    if err:
                        problems.append(f"{b.doc}:{step.line}: `{step.command}`: {err}")
            elif sub in dc.GPU_ONLY:
                problems.append(f"{b.doc}:{step.line}: `{step.command}` needs a CUDA GPU: "
                                "mark its block <!-- not run: needs a CUDA GPU -->")
    assert not problems, "\n".join(problems)


def test_every_mark_is_one_the_checker_knows():
    """A misspelt mark would leave its block unchecked."""
    comments = [(doc, line) for doc, text in DOCS.items() for line in text.splitlines()
                if line.startswith("<!--")]
    assert comments
    unknown = [f"{doc}: {line}" for doc, line in comments if not dc.MARK.match(line)]
    assert not unknown, "\n".join(unknown)
    assert dc.MARK.match("<!-- output: vdnnsim list -->")
    assert not dc.MARK.match("<!-- outptu: vdnnsim list -->")


def test_not_run_marks_give_a_reason():
    for b in BLOCKS:
        if b.mark == "not run":
            assert len(b.arg.split()) >= 3, f"{b.where}: say why it is not run"


def test_every_plain_block_is_checked():
    """A fenced block without a language holds the program's words: a transcript, an
    output, a file, a synopsis, or a block marked not run. Prose blocks take ``text``."""
    problems = []
    for b in BLOCKS:
        if b.lang or b.mark or b.is_transcript:
            continue
        if all(line.startswith(("vdnnsim ", "python")) for _, line in dc.logical_lines(b.body)):
            continue  # a synopsis: test_synopses_name_real_commands_and_options
        problems.append(f"{b.where}: a plain block the doc checker does not check: make it a "
                        "transcript ($ lines), mark it (output/file/not run), or give it a "
                        "language (text)")
    assert not problems, "\n".join(problems)


def test_command_lists_parse():
    """``bash`` blocks list commands without their output: each must parse and name files
    that exist."""
    problems = []
    for b in BLOCKS:
        if b.lang != "bash" or b.is_transcript:
            continue
        for offset, line in dc.logical_lines(b.body):
            problems += [f"{b.doc}:{b.line + 1 + offset}: {p}"
                         for p in dc.check_command_line(line)]
    assert not problems, "\n".join(problems)


def _synopses() -> list[tuple[str, str, bool]]:
    """(where, text, complete) for every synopsis: the command headings of configs.md (which
    must be complete), code spans and plain blocks starting with ``vdnnsim``."""
    out = []
    for doc, text in DOCS.items():
        for m in re.finditer(r"^#+ `(vdnnsim [^`]+)`", text, re.M):
            out.append((doc, m[1], doc == "docs/configs.md"))
        for span in dc.code_spans(text):
            if re.match(r"(\.venv/bin/)?vdnnsim [a-z]", span):
                out.append((doc, span, False))
    for b in BLOCKS:
        if not b.lang and not b.mark and not b.is_transcript:
            for _, line in dc.logical_lines(b.body):
                out.append((b.where, line.split("  #")[0].strip(), False))
    return out


def test_synopses_name_real_commands_and_options():
    problems = [f"{where}: {p}" for where, text, complete in _synopses()
                for p in dc.synopsis_problems(text, complete)]
    problems += [f"{where}: {p}" for where, text, _ in _synopses()
                 if text.startswith("python") for p in dc.check_command_line(text)]
    assert not problems, "\n".join(problems)


def test_every_command_has_a_heading_in_configs_md():
    documented = set(re.findall(r"^### `vdnnsim ([a-z]+)", DOCS["docs/configs.md"], re.M))
    assert documented == set(dc.subparsers()), "docs/configs.md: one heading per command"


def test_extras_named_in_the_docs_exist():
    problems = [f"{doc}: {p}" for doc, text in DOCS.items() for p in dc.check_extras(text)]
    assert not problems, "\n".join(problems)


def test_make_test_installs_the_extras_the_docs_say():
    dev = dc.makefile_dev_extras()
    assert dev, "the Makefile's test install names its extras"
    for doc, text in DOCS.items():
        for line in text.splitlines():
            if "make test" in line:
                for m in dc.EXTRA.finditer(line):
                    assert set(re.split(r"[,\s]+", m[1])) == dev, \
                        f"{doc}: make test installs [{','.join(sorted(dev))}]: {line.strip()}"


def test_policy_names_in_the_docs_exist():
    from vdnnsim.policies.registry import policy_names
    known = set(policy_names()) | dc.measure_policies()
    problems = [f"{doc}: `{span}` is not a policy ({', '.join(sorted(known))})"
                for doc, text in DOCS.items() for span in dc.code_spans(text)
                if re.fullmatch(r"(vdnn|baseline|uvm)_[a-z_]+", span) and span not in known]
    assert not problems, "\n".join(problems)


def _configs_in_yaml_blocks():
    for b in BLOCKS:
        if b.lang != "yaml" or b.mark == "files":
            continue
        try:
            data = yaml.safe_load(b.body)
        except yaml.YAMLError:
            continue
        if isinstance(data, dict):
            yield b, data
    for doc, text in DOCS.items():
        for span in dc.code_spans(text):
            if span.startswith(("policy_options: {", "policies: [", "policy: ")):
                try:
                    data = yaml.safe_load(span)
                except yaml.YAMLError:
                    continue
                if isinstance(data, dict):
                    yield Block(doc, 0, "span", span), data


def test_policies_and_options_in_yaml_exist():
    options = dc.policy_options()
    checked = list(_configs_in_yaml_blocks())
    assert len(checked) >= 8
    problems = [f"{b.where}: {p}" for b, data in checked
                for p in dc.config_policy_problems(data, options)]
    assert not problems, "\n".join(problems)


def test_all_marks_name_every_one():
    """``<!-- all: policies, gpus, networks -->``: the next paragraph names each."""
    from vdnnsim.hardware import preset_names
    from vdnnsim.network import ZOO
    from vdnnsim.policies.registry import policy_names
    names = {"policies": policy_names(), "gpus": preset_names(), "networks": list(ZOO)}
    seen = 0
    for doc, text in DOCS.items():
        for m in re.finditer(r"^<!-- all: (.*?) -->\n(.*?)(?:\n\n|\Z)", text, re.M | re.S):
            seen += 1
            spans = set(re.findall(r"`([^`]+)`", m[2]))
            for what in (w.strip() for w in m[1].split(",")):
                missing = [n for n in names[what] if n not in spans]
                assert not missing, f"{doc}: the paragraph after the mark misses {what} {missing}"
    assert seen


def test_error_messages_quoted_in_prose_are_shown_by_a_transcript():
    """An error line quoted in a sentence is one a checked transcript prints."""
    shown = {line for b in BLOCKS if b.is_transcript and b.mark != "not run"
             for step in dc.transcript_steps(b) for line in step.want}
    quoted = [(doc, span) for doc, text in DOCS.items() for span in dc.code_spans(text)
              if dc.ERROR_LINE.match(span) and not span.endswith(("...", ": "))]
    assert quoted
    missing = [f"{doc}: `{span}`" for doc, span in quoted if span not in shown]
    assert not missing, "quoted but not in any transcript:\n" + "\n".join(missing)


def test_hf_models_named_exist():
    from vdnnsim.gpu.model.hf import shipped
    known = set(shipped())
    problems = [f"{doc}: `{name}` is not a shipped hf model ({', '.join(sorted(known))})"
                for doc, text in DOCS.items()
                for name in re.findall(r"hf:([a-z0-9][a-z0-9/._-]*[a-z0-9])", text)
                if name not in known and not name.endswith(".yaml")]
    assert not problems, "\n".join(problems)


# -- the checker itself can fail ---------------------------------------------------------------

def test_ellipsis_matching():
    got = ["a", "b", "c", "d"]
    assert dc.matches(got, ["a", "...", "d"]) and dc.matches(got, ["...", "c", "d"])
    assert dc.matches(got, ["...", "b", "...", "d"]) and dc.matches(got, ["a", "b", "...", ])
    assert not dc.matches(got, ["a", "...", "c"]) and not dc.matches(got, ["b", "..."])
    assert not dc.matches(got, ["...", "c", "b", "..."]) and not dc.matches(got, ["a", "b"])
    assert dc.matches([], []) and not dc.matches([], ["a"])
    assert dc.matches(["a"], ["a", "...", ]) and not dc.matches(["a"], ["a", "...", "a"])


def test_transcripts_catch_a_wrong_output_and_exit_code(tmp_path, env):
    text = ("```\n$ cd /tmp/vdnn_docs && echo hi > f.txt && cat f.txt\nhi\n$ cat f.txt\nhi\n```\n"
            "```\n$ pwd\n/work\n```\n"
            "```\n$ vdnnsim run nosuch.yaml\nvdnnsim: error: nosuch.yaml: no such file\n"
            "$ vdnnsim list networks\n...\n$ false\n```\n")
    session = Session(tmp_path / "vdnn_docs", env)
    session.workspace.mkdir()
    for b in dc.blocks(text, "t.md"):
        session.transcript(b)
    assert (tmp_path / "vdnn_docs" / "f.txt").read_text() == "hi\n"
    # the cd held for the block's second line only; pwd is the repository root; `false` exits 1
    assert len(session.problems) == 2, session.problems
    assert session.problems[0].startswith("t.md:8: `pwd`") and str(ROOT) in session.problems[0]
    assert "`false` exited 1" in session.problems[1]


def test_marks_are_read(tmp_path):
    text = ("<!-- file: /tmp/vdnn_docs/a.yaml -->\n```yaml\nx: 1\n```\n"
            "<!-- files: /tmp/vdnn_docs/sub -->\n```yaml\nb.yaml: {y: 2}\nc.yaml: \"z: [\\n\"\n```\n"
            "<!-- files: /tmp/vdnn_docs/bad from docs/examples/tiny_trace.yaml -->\n```text\n"
            "v.yaml: version = 2; del tensors[0].shape\n"
            "s.yaml: layers[1] <-> layers[2]; tensors[5] = {id: new, size_bytes: 4}\n```\n"
            "<!-- output (first lines): vdnnsim list -->\n| a |\n| b |\n\ntext\n")
    bs = dc.blocks(text, "t.md")
    assert [(b.mark, b.lang) for b in bs] == [("file", "yaml"), ("files", "yaml"),
                                              ("files", "text"), ("output (first lines)",
                                                                   "table")]
    session = Session(tmp_path / "vdnn_docs", {})
    session.workspace.mkdir()
    for b in bs[:3]:
        session.write_files(b)
    w = session.workspace
    assert yaml.safe_load((w / "a.yaml").read_text()) == {"x": 1}
    assert yaml.safe_load((w / "sub" / "b.yaml").read_text()) == {"y": 2}
    assert (w / "sub" / "c.yaml").read_text() == "z: [\n"
    v = yaml.safe_load((w / "bad" / "v.yaml").read_text())
    assert v["version"] == 2 and "shape" not in v["tensors"][0]
    s = yaml.safe_load((w / "bad" / "s.yaml").read_text())
    assert [x["id"] for x in s["layers"]] == ["conv1", "pool1", "relu1", "fc1"]
    assert s["tensors"][5] == {"id": "new", "size_bytes": 4}
    with pytest.raises(DocError):
        session.write_files(Block("t.md", 1, "text", "x.yaml: nokey[3] = 1", "files",
                                  "/tmp/vdnn_docs from docs/examples/tiny_trace.yaml"))
    with pytest.raises(DocError):
        session.path("/etc/passwd")


def test_command_line_and_synopsis_checks_fail_where_they_should():
    assert dc.check_command_line("vdnnsim run configs/demo.yaml --json  # ok") == []
    assert dc.check_command_line("vdnnsim trace vgg16 -o out/x.yaml") == []  # an output
    assert dc.check_command_line("vdnnsim run configs/nosuch.yaml")  # a missing input
    assert dc.check_command_line("vdnnsim run configs/demo.yaml --jsn")  # a wrong flag
    assert dc.check_command_line("vdnnsim frobnicate")
    assert dc.check_command_line("make test demo") == [] and dc.check_command_line("make tset")
    assert dc.check_command_line("pip install -e '.[torch,hf]'") == []
    assert dc.check_command_line("pip install -e '.[torhc]'")
    assert dc.check_command_line("python bench/nosuch.py") and dc.check_command_line("rm -rf x")
    assert dc.check_command_line("python -m vdnnsim.nosuch")
    assert dc.synopsis_problems("vdnnsim plot {memory,timeline,sweep,validation} IN -o OUT") == []
    assert dc.synopsis_problems("vdnnsim plot {memory,timeline} IN -o OUT")
    assert dc.synopsis_problems("vdnnsim run CONFIG [--jsn]")
    assert dc.synopsis_problems("vdnnsim reproduce --reading measured|txt")
    assert dc.synopsis_problems("vdnnsim frob")
    assert dc.synopsis_problems("vdnnsim list [what]", complete=True) == []
    assert dc.synopsis_problems("vdnnsim run CONFIG [--json]", complete=True)  # --chrome-trace
    assert dc.synopsis_problems("vdnnsim reproduce [--reading measured]") == []
    assert dc.synopsis_problems("vdnnsim calibrate -o F [--dtype fp32|fp16]", complete=True)


def test_plain_blocks_and_gpu_commands_are_caught():
    text = ("```\nsome output\n```\n"
            "```\n$ vdnnsim measure --model torchvision:vgg16 -b 2\n```\n"
            "<!-- not run: needs a CUDA GPU -->\n```\n$ vdnnsim measure --modle x -b 2\n```\n")
    bs = dc.blocks(text, "t.md")
    assert not bs[0].is_transcript and not bs[0].mark and not bs[0].lang
    assert bs[1].is_transcript and not bs[1].mark
    assert bs[2].mark == "not run"
    assert dc.parse_error(shlex.split(dc.transcript_steps(bs[2])[0].command)[1:])
    assert dc.parse_error(shlex.split(dc.transcript_steps(bs[1])[0].command)[1:]) is None
    assert dc.expected_exit(["vdnnsim: error: x"]) == 2
    assert dc.expected_exit(["vdnnsim run: error: x", "..."]) == 2
    assert dc.expected_exit(["wrote x"]) == 0


def test_config_policy_problems():
    options = {"a": {"sync"}, "b": {"sync", "file"}}
    assert dc.config_policy_problems({"policy": "a", "policy_options": {"sync": 1}}, options) == []
    assert dc.config_policy_problems({"policies": ["a", "c"]}, options)  # no policy c
    assert dc.config_policy_problems({"policy": "a", "policy_options": {"file": 1}}, options)
    assert dc.config_policy_problems({"policy_options": {"file": 1}}, options) == []  # b takes it
    assert dc.config_policy_problems({"policy_options": {"nope": 1}}, options)
    assert dc.config_policy_problems({"sweep": {"policy": ["a", "z"]}}, options)
    assert dc.config_policy_problems({"runs": [{"policy": "z"}]}, options)


def test_extras_check_reads_both_spellings():
    assert dc.check_extras("pip install 'vdnnsim[hf]' and '.[dev,torch]'") == []
    assert len(dc.check_extras("vdnnsim[dev,gpu] and .[cuda]")) == 2
    assert dc.check_extras("a list [x] or foo.[y] or ab[z]") == []


def test_refresh_pastes_what_the_commands_print(tmp_path, env):
    doc = tmp_path / "t.md"
    doc.write_text("<!-- output: vdnnsim list networks -->\n```\nnetworks: old\n...\n```\n\n"
                   "<!-- file: /tmp/vdnn_docs/a.txt -->\n```text\nhello\n```\n\n"
                   "```\n$ cat /tmp/vdnn_docs/a.txt\nbye\n$ vdnnsim list gpus\n...\n```\n")
    changed = dc.refresh(doc, env, tmp_path / "ws" / "vdnn_docs")
    assert len(changed) == 2, changed
    text = doc.read_text()
    assert "networks: alexnet, overfeat" in text and "networks: old" not in text
    assert "$ cat /tmp/vdnn_docs/a.txt\nhello\n$ vdnnsim list gpus\n...\n```" in text
    assert dc.refresh(doc, env, tmp_path / "ws2" / "vdnn_docs") == []  # now it holds


def test_pasting_into_an_empty_output_block_keeps_the_rest_of_the_doc(tmp_path, monkeypatch):
    """An empty block after an output mark is filled, and its closing fence and everything
    after it stay (the fence was once taken by the paste, and the next paste the doc's
    tail)."""
    doc = tmp_path / "d.md"
    doc.write_text("a\n\n<!-- output: python -c \"print('x')\" -->\n```\n```\n\ntail\n\n"
                   "```\nkept\n```\n")
    monkeypatch.setattr(dc, "ROOT", tmp_path)
    env = dc.environment(tmp_path / "bin")
    for _ in range(2):
        dc.refresh(doc, env, tmp_path / "ws")
    assert doc.read_text() == ("a\n\n<!-- output: python -c \"print('x')\" -->\n```\nx\n```"
                               "\n\ntail\n\n```\nkept\n```\n")
