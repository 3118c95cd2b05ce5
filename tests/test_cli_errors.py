"""Every bad input to the `vdnnsim` command ends in one line on stderr and exit code 2, with
no traceback, nothing on stdout and no file left behind (NOTE [user errors]).

The commands run in this process (conftest.run_cli: ``vdnnsim.cli.main`` with its own stdout
and stderr, as a pipe would carry them, and warnings shown there as a fresh interpreter
shows them): a fresh interpreter for each of some 160 cases cost over a minute of imports
and checked nothing more, since every message and exit code comes from ``main``. A real
``python -m vdnnsim`` process runs where the process is the point: the entry point's own
contract (``test_the_entry_point_is_what_main_says``: a bad config, a bad argument and a
good run give the same exit code, stdout and stderr in a fresh process as in-process, with
no traceback; ``test_help_from_the_entry_point``), and the FIFO, which a regression would
leave blocked for ever (a subprocess has a timeout, this process has none).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from .conftest import run_cli

# `vdnnsim: error: ...` from our handler, `vdnnsim run: error: ...` from argparse.
ERROR_LINE = re.compile(r"^vdnnsim(?: (?:run|trace|list))?: error: \S")


def vdnnsim(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``vdnnsim ARGS`` in ``cwd``, run in this process, under umask 022 so that the mode of
    a written file is known."""
    old = os.umask(0o022)
    try:
        return run_cli(list(args), cwd=cwd)
    finally:
        os.umask(old)


def vdnnsim_process(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m vdnnsim ARGS`` in ``cwd``: a real process, for the entry point's own
    contract."""
    def umask() -> None:  # so that the mode of a written file is known
        os.umask(0o022)

    return subprocess.run([sys.executable, "-m", "vdnnsim", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, preexec_fn=umask)


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (hidden ones too) with its content."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_user_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    err = proc.stderr
    assert "Traceback" not in err, err
    assert proc.returncode == 2, (proc.returncode, err)
    assert err.endswith("\n") and len(err.splitlines()) == 1, err
    assert ERROR_LINE.match(err), err
    assert proc.stdout == "", proc.stdout
    for f in fragments:
        assert f in err, f"{f!r} not in {err!r}"
    return err


def run_config(tmp_path: Path, text: str, *fragments: str,
               extra: dict[str, str] | None = None) -> str:
    """Write the config (and any extra files), run it, check the error, check no file
    appeared or changed."""
    (tmp_path / "cfg.yaml").write_text(text)
    for name, content in (extra or {}).items():
        (tmp_path / name).write_text(content)
    before = files_under(tmp_path)
    err = assert_user_error(vdnnsim(tmp_path, "run", "cfg.yaml"), *fragments)
    assert files_under(tmp_path) == before
    return err


# -- run configs -----------------------------------------------------------------------------

GOOD_CONFIG = "network: vgg16\nbatch_size: 2\npolicy: baseline_p\n"

CONFIG_CASES = [
    # (id, config text, fragments the one line must hold)
    ("malformed_yaml", "network: [vgg16\n", ["cfg.yaml", "malformed YAML", "line 2"]),
    ("two_documents", "network: vgg16\n---\nbatch_size: 2\n", ["cfg.yaml", "malformed YAML"]),
    ("deeply_nested", "network: " + "[" * 5000 + "]" * 5000 + "\n",
     ["cfg.yaml", "malformed YAML", "nest"]),
    ("top_level_list", "- network: vgg16\n- batch_size: 2\n",
     ["cfg.yaml", "expected a mapping", "list"]),
    ("top_level_scalar", "vgg16\n", ["cfg.yaml", "expected a mapping", "str"]),
    ("empty_file", "", ["cfg.yaml", "expected a mapping", "empty"]),
    ("unknown_top_key", GOOD_CONFIG + "colour: red\n", ["cfg.yaml", "colour", "unknown key"]),
    ("network_missing", "batch_size: 2\n", ["cfg.yaml", "network", "required key"]),
    ("network_empty", "network: ''\n", ["cfg.yaml", "network"]),
    ("network_not_string", "network: 5\n", ["cfg.yaml", "network"]),
    ("unknown_network", "network: vgg17\n",
     ["unknown network 'vgg17'", "known:", "alexnet", "vgg16"]),
    ("network_file_missing", "network: nets/foo.yaml\n", ["nets/foo.yaml", "no such file"]),
    ("unknown_gpu", GOOD_CONFIG + "gpu: k41\n", ["unknown GPU preset 'k41'", "known:", "k40"]),
    ("unknown_gpu_in_mapping", GOOD_CONFIG + "gpu: {preset: k41}\n",
     ["unknown GPU preset 'k41'", "known:", "k40"]),
    ("gpu_unknown_override", GOOD_CONFIG + "gpu: {preset: k40, colour: red}\n",
     ["cfg.yaml", "gpu.colour", "unknown key"]),
    ("gpu_bad_memory", GOOD_CONFIG + "gpu: {preset: k40, memory_bytes: lots}\n",
     ["cfg.yaml", "gpu.memory_bytes", "'lots'"]),
    ("gpu_zero_link", GOOD_CONFIG + "gpu: {preset: k40, link_bw_bytes_per_s: 0}\n",
     ["cfg.yaml", "gpu.link_bw_bytes_per_s", "between 1e+06 and 1e+15", "got 0"]),
    ("gpu_mapping_without_preset", GOOD_CONFIG + "gpu: {memory_bytes: 12 GiB}\n",
     ["cfg.yaml", "gpu.preset", "required key"]),
    ("gpu_number", GOOD_CONFIG + "gpu: 5\n", ["cfg.yaml", "gpu"]),
    ("unknown_policy", "network: vgg16\nbatch_size: 2\npolicy: nope\n",
     ["unknown policy 'nope'", "known:", "baseline_p", "vdnn_dyn"]),
    ("unknown_policy_in_list", "network: vgg16\nbatch_size: 2\n"
     "policies: [baseline_p, nope]\n", ["unknown policy 'nope'", "known:", "vdnn_dyn"]),
    ("unknown_policy_option", GOOD_CONFIG + "policy_options: {foo: 1}\n",
     ["baseline_p", "unknown option", "foo"]),
    ("unknown_dyn_option", "network: vgg16\nbatch_size: 2\npolicy: vdnn_dyn\n"
     "policy_options: {foo: 1}\n", ["vdnn_dyn", "unknown option", "foo", "sync"]),
    ("sync_not_boolean", "network: vgg16\nbatch_size: 2\npolicy: vdnn_all_p\n"
     "policy_options: {sync: 'false'}\n", ["vdnn_all_p", "sync must be true or false"]),
    ("reading_unknown", "network: vgg16\nbatch_size: 2\npolicy: vdnn_dyn\n"
     "policy_options: {reading: paper}\n", ["vdnn_dyn", "reading must be one of",
                                            "measured, text", "'paper'"]),
    ("policy_empty", "network: vgg16\nbatch_size: 2\npolicy: ''\n", ["cfg.yaml", "policy"]),
    ("policy_options_not_mapping", GOOD_CONFIG + "policy_options: 5\n",
     ["cfg.yaml", "policy_options"]),
    ("policy_and_policies", GOOD_CONFIG + "policies: [vdnn_dyn]\n",
     ["cfg.yaml", "'policy' or 'policies', not both"]),
    ("policies_empty", "network: vgg16\nbatch_size: 2\npolicies: []\n",
     ["cfg.yaml", "policies"]),
    ("batch_negative", "network: vgg16\nbatch_size: -3\n",
     ["cfg.yaml", "batch_size", "at least 1"]),
    ("batch_zero", "network: vgg16\nbatch_size: 0\n",
     ["cfg.yaml", "batch_size", "at least 1"]),
    ("batch_not_numeric", "network: vgg16\nbatch_size: abc\n",
     ["cfg.yaml", "batch_size", "whole number"]),
    ("batch_fraction", "network: vgg16\nbatch_size: 2.5\n",
     ["cfg.yaml", "batch_size", "whole number"]),
    ("batch_boolean", "network: vgg16\nbatch_size: true\n",
     ["cfg.yaml", "batch_size", "boolean"]),
    ("batch_beyond_simulation", "network: vgg16\nbatch_size: " + "1" + "0" * 30 + "\n",
     ["vgg16", "batch size", "1 PiB"]),
    ("batch_beyond_floats", "network: vgg16\nbatch_size: " + "1" + "0" * 400 + "\n",
     ["vgg16", "batch size", "1 PiB"]),
    # NOTE [whole numbers]: 1e12 (a string to YAML 1.1) is a whole number, past the scale
    ("batch_1e12", "network: vgg16\nbatch_size: 1e12\n",
     ["cfg.yaml", "batch size 1000000000000", "1 PiB"]),
    ("batch_float_fraction", "network: vgg16\nbatch_size: 2.5e0\n",
     ["cfg.yaml", "batch_size", "whole number", "2.5e0"]),
    ("batch_infinite", "network: vgg16\nbatch_size: .inf\n",
     ["cfg.yaml", "batch_size", "finite whole number"]),
    ("latency_fraction", GOOD_CONFIG + "gpu: {preset: k40, link_latency_ns: 2.5}\n",
     ["cfg.yaml", "gpu.link_latency_ns", "whole number", "2.5"]),
    ("distance_fraction", "network: vgg16\nbatch_size: 2\npolicy: vdnn_all_m\n"
     "policy_options: {distance: 1.5}\n", ["vdnn_all_m", "option distance", "1.5"]),
    ("host_memory_zero", GOOD_CONFIG + "gpu: {preset: k40, host_memory_bytes: 0}\n",
     ["cfg.yaml", "gpu.host_memory_bytes", "at least 1 byte"]),
    ("memory_words", GOOD_CONFIG + "memory_bytes: lots\n",
     ["cfg.yaml", "memory_bytes", "'lots'", "not a byte count"]),
    ("memory_negative_string", GOOD_CONFIG + "memory_bytes: '-5'\n",
     ["cfg.yaml", "memory_bytes", "'-5'"]),
    ("memory_negative_number", GOOD_CONFIG + "memory_bytes: -5\n",
     ["cfg.yaml", "memory_bytes", "negative"]),
    ("memory_fraction", GOOD_CONFIG + "memory_bytes: 1.5\n",
     ["cfg.yaml", "memory_bytes", "whole number"]),
    ("memory_unknown_unit", GOOD_CONFIG + "memory_bytes: 12 GiBs\n",
     ["cfg.yaml", "memory_bytes", "'12 GiBs'"]),
    ("dtype_not_allowed", GOOD_CONFIG + "dtype: fp64\n", ["cfg.yaml", "dtype", "'fp32'"]),
]


@pytest.mark.parametrize("text, fragments", [c[1:] for c in CONFIG_CASES],
                         ids=[c[0] for c in CONFIG_CASES])
def test_run_bad_config(tmp_path: Path, text: str, fragments: list[str]) -> None:
    run_config(tmp_path, text, *fragments)


ENTRY_POINT_CASES = [
    # (id, files to write, argv): a user error from main's handler, one from argparse, and a
    # run that succeeds
    ("bad_config", {"cfg.yaml": "network: [vgg16\n"}, ["run", "cfg.yaml"]),
    ("bad_argument", {}, ["run", "cfg.yaml", "--fast"]),
    ("good_run", {"cfg.yaml": GOOD_CONFIG}, ["run", "--json", "cfg.yaml"]),
]


@pytest.mark.parametrize("files, args", [c[1:] for c in ENTRY_POINT_CASES],
                         ids=[c[0] for c in ENTRY_POINT_CASES])
def test_the_entry_point_is_what_main_says(tmp_path: Path, files: dict[str, str],
                                           args: list[str]) -> None:
    """`python -m vdnnsim` in a fresh interpreter gives what ``main`` gives in this process,
    on which the rest of this file relies: the same exit code, stdout and stderr, and a
    user error is exit 2 and exactly one stderr line, with no traceback."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    real, here = vdnnsim_process(tmp_path, *args), vdnnsim(tmp_path, *args)
    assert (real.returncode, real.stdout, real.stderr) == \
        (here.returncode, here.stdout, here.stderr)
    if real.returncode:
        assert_user_error(real)
    else:
        assert real.stderr == "" and json.loads(real.stdout)[0]["policy"] == "baseline_p"


def test_help_from_the_entry_point(tmp_path: Path) -> None:
    """`python -m vdnnsim --help`: the usage on stdout, exit 0, nothing on stderr."""
    proc = vdnnsim_process(tmp_path, "--help")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("usage: vdnnsim") and "run" in proc.stdout


def test_run_good_config_succeeds(tmp_path: Path) -> None:
    """The base the bad configs are made from runs, so their failures are their own."""
    (tmp_path / "cfg.yaml").write_text(GOOD_CONFIG + "memory_bytes: 12 GiB\n"
                                       "gpu: {preset: k40, link_bw_bytes_per_s: 1.0e+10}\n")
    proc = vdnnsim(tmp_path, "run", "--json", "cfg.yaml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    [record] = json.loads(proc.stdout)
    assert record["batch_size"] == 2 and record["capacity_bytes"] == 12 * 2**30


def test_run_missing_file(tmp_path: Path) -> None:
    assert_user_error(vdnnsim(tmp_path, "run", "nope.yaml"), "nope.yaml", "no such file")
    assert files_under(tmp_path) == {}


def test_run_directory(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    assert_user_error(vdnnsim(tmp_path, "run", "d"), "d", "is a directory")


def test_run_undecodable_file(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_bytes(b"network: \xff\xfe\n")
    assert_user_error(vdnnsim(tmp_path, "run", "cfg.yaml"), "cfg.yaml", "cannot read")


def test_run_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A real process: were the FIFO opened, it would block for ever, and only a
    subprocess has a timeout to end it."""
    os.mkfifo(tmp_path / "cfg.yaml")  # no writer: opening it would block for ever
    assert_user_error(vdnnsim_process(tmp_path, "run", "cfg.yaml"), "cfg.yaml",
                      "not a regular file")


@pytest.mark.parametrize("text", ['{"network": "a\\udcffb", "batch_size": 2}',
                                  'network: vgg16\nbatch_size: 2\nname: "x\\udcff"\n'])
def test_run_lone_surrogate_escape(tmp_path: Path, text: str) -> None:
    (tmp_path / "cfg.yaml").write_text(text)
    assert_user_error(vdnnsim(tmp_path, "run", "cfg.yaml"), "cfg.yaml")


# -- network specs referenced from a config --------------------------------------------------

NET_HEAD = "name: tiny\ninput: [3, 8, 8]\nlayers:\n"
GOOD_NET_LAYERS = ["{name: c1, type: conv, out: 4, kernel: 3}", "{name: r1, type: relu}",
                   "{name: f, type: flatten}", "{name: fc, type: fc, out: 10}"]
NET_CONFIG = "network: net.yaml\nbatch_size: 2\npolicy: baseline_p\n"


def net(*layers: str, head: str = NET_HEAD) -> str:
    return head + "".join(f"  - {layer}\n" for layer in layers)


NET_CASES = [
    ("unknown_layer_type",
     net(GOOD_NET_LAYERS[0], "{name: c2, type: convolution, out: 4, kernel: 3}"),
     ["net.yaml", "layers[1].type", "'conv'"]),
    ("conv_without_out", net("{name: c1, type: conv, kernel: 3}"),
     ["net.yaml", "layers[0]", "needs 'out'"]),
    ("pool_without_kernel", net("{name: p1, type: maxpool}"),
     ["net.yaml", "layers[0]", "needs 'kernel'"]),
    ("unknown_layer_key", net("{name: c1, type: conv, out: 4, kernel: 3, colour: red}"),
     ["net.yaml", "layers[0].colour", "unknown key"]),
    ("input_names_unknown_layer",
     net(GOOD_NET_LAYERS[0], "{name: c2, type: conv, out: 4, kernel: 1, inputs: [ghost]}"),
     ["net.yaml", "layers[1] (c2)", "'ghost'"]),
    ("input_names_later_layer",
     net("{name: c1, type: conv, out: 4, kernel: 3, inputs: [r1]}", "{name: r1, type: relu}"),
     ["net.yaml", "layers[0] (c1)", "'r1'"]),
    ("kernel_larger_than_input", net("{name: c1, type: conv, out: 4, kernel: 11}"),
     ["net.yaml", "layers[0] (c1)", "8x8", "kernel 11"]),
    ("pool_larger_than_input", net("{name: p1, type: maxpool, kernel: 9}"),
     ["net.yaml", "layers[0] (p1)", "kernel 9"]),
    ("duplicate_layer_name", net(GOOD_NET_LAYERS[0], "{name: c1, type: relu}"),
     ["net.yaml", "layers[1]", "duplicate layer name 'c1'"]),
    ("conv_in_place", net("{name: c1, type: conv, out: 4, kernel: 3, inplace: true}"),
     ["net.yaml", "layers[0] (c1)", "in place"]),
    ("groups_do_not_divide", net("{name: c1, type: conv, out: 4, kernel: 3, groups: 2}"),
     ["net.yaml", "layers[0] (c1)", "groups"]),
    ("conv_two_inputs",
     net(GOOD_NET_LAYERS[0], "{name: c2, type: conv, out: 4, kernel: 1, inputs: [data, c1]}"),
     ["net.yaml", "layers[1] (c2)", "one input"]),
    ("add_shapes_differ",
     net(GOOD_NET_LAYERS[0], "{name: s, type: add, inputs: [data, c1]}"),
     ["net.yaml", "layers[1] (s)", "differ in shape"]),
    ("no_layers", NET_HEAD.replace("layers:\n", "layers: []\n"), ["net.yaml", "layers"]),
    ("input_not_three_dims", net("{name: r1, type: relu}", head=NET_HEAD.replace(
        "[3, 8, 8]", "[3, 8]")), ["net.yaml", "input"]),
    ("negative_stride", net("{name: c1, type: conv, out: 4, kernel: 3, stride: -1}"),
     ["net.yaml", "layers[0].stride"]),
    ("fractional_out", net("{name: c1, type: conv, out: 4.5, kernel: 3}"),
     ["net.yaml", "layers[0].out", "whole number", "4.5"]),
    ("output_beyond_simulation", net("{name: f, type: flatten}",
                                     "{name: fc, type: fc, out: 1000000000000000}"),
     ["net.yaml", "tiny", "1 PiB"]),
]


@pytest.mark.parametrize("spec, fragments", [c[1:] for c in NET_CASES],
                         ids=[c[0] for c in NET_CASES])
def test_run_bad_network_spec(tmp_path: Path, spec: str, fragments: list[str]) -> None:
    run_config(tmp_path, NET_CONFIG, *fragments, extra={"net.yaml": spec})


def test_run_network_spec_without_batch_size(tmp_path: Path) -> None:
    run_config(tmp_path, "network: net.yaml\n", "tiny", "batch_size",
               extra={"net.yaml": net(*GOOD_NET_LAYERS)})


def test_run_good_network_spec_succeeds(tmp_path: Path) -> None:
    (tmp_path / "net.yaml").write_text(net(*GOOD_NET_LAYERS))
    (tmp_path / "cfg.yaml").write_text(NET_CONFIG)
    proc = vdnnsim(tmp_path, "run", "cfg.yaml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and "tiny" in proc.stdout


# -- trace files referenced from a config ----------------------------------------------------

def good_trace() -> dict[str, Any]:
    """data -> a -> b, the shape of conftest.chain_trace."""
    return {"format": "vdnnsim-trace", "version": 1, "name": "hand", "batch_size": 1,
            "tensors": [{"id": "data", "size_bytes": 1000, "kind": "input"},
                        {"id": "a", "size_bytes": 1000},
                        {"id": "b", "size_bytes": 1000}],
            "layers": [{"id": "a", "kind": "conv", "inputs": ["data"], "outputs": ["a"],
                        "saved": ["data"], "fwd_ns": 10, "bwd_ns": 20},
                       {"id": "b", "kind": "relu", "inputs": ["a"], "outputs": ["b"],
                        "saved": ["a"], "fwd_ns": 10, "bwd_ns": 20}]}


def tensor(i: int, **kw: Any) -> Callable[[dict[str, Any]], None]:
    return lambda t: t["tensors"][i].update(kw)


def layer(i: int, **kw: Any) -> Callable[[dict[str, Any]], None]:
    return lambda t: t["layers"][i].update(kw)


def top(**kw: Any) -> Callable[[dict[str, Any]], None]:
    return lambda t: t.update(kw)


def drop_layer_key(i: int, key: str) -> Callable[[dict[str, Any]], None]:
    return lambda t: t["layers"][i].pop(key)


TRACE_CASES = [
    ("negative_size", tensor(1, size_bytes=-5),
     ["tr.yaml", "tensors[1].size_bytes", "negative"]),
    ("non_numeric_size", tensor(1, size_bytes="big"),
     ["tr.yaml", "tensors[1].size_bytes", "'big'"]),
    ("fractional_size", tensor(1, size_bytes=2.5),
     ["tr.yaml", "tensors[1].size_bytes", "whole number"]),
    ("size_beyond_simulation", tensor(1, size_bytes=10**19), ["tr.yaml", "1 PiB"]),
    ("cycle", layer(0, inputs=["b"], saved=["b"]), ["tr.yaml", "cycle", "a -> b -> a"]),
    ("read_before_write", lambda t: (t["layers"][0].update(inputs=["b"], saved=[]),
                                     t["layers"][1].update(inputs=["data"], saved=[])),
     ["tr.yaml", "layers[0] (a)", "before", "layers[1] (b)"]),
    ("duplicate_tensor_id", tensor(2, id="a"),
     ["tr.yaml", "tensors[2].id", "duplicate tensor id 'a'"]),
    ("duplicate_layer_id", layer(1, id="a"),
     ["tr.yaml", "layers[1].id", "duplicate layer id 'a'"]),
    ("unknown_input_tensor", layer(1, inputs=["ghost"], saved=[]),
     ["tr.yaml", "layers[1] (b).inputs[0]", "unknown tensor 'ghost'"]),
    ("unknown_saved_tensor", layer(1, saved=["ghost"]),
     ["tr.yaml", "layers[1] (b).saved[0]", "'ghost'"]),
    ("saved_not_read_or_written", layer(1, saved=["data"]),
     ["tr.yaml", "layers[1] (b).saved[0]", "'data'"]),
    ("tensor_written_twice", layer(1, outputs=["a"]),
     ["tr.yaml", "layers[1] (b).outputs[0]", "'a'", "already written"]),
    ("tensor_written_by_nobody", lambda t: t["tensors"].append({"id": "z", "size_bytes": 1}),
     ["tr.yaml", "'z'", "written by no layer"]),
    ("unknown_alias", tensor(2, alias_of="ghost"), ["tr.yaml", "tensors[2].alias_of", "'ghost'"]),
    ("wrong_version", top(version=2), ["tr.yaml", "version"]),
    ("wrong_format", top(format="vdnnsim-trace-2"), ["tr.yaml", "format"]),
    ("unknown_top_key", top(colour="red"), ["tr.yaml", "colour", "unknown key"]),
    ("unknown_layer_key", layer(0, colour="red"), ["tr.yaml", "layers[0].colour", "unknown key"]),
    ("unknown_tensor_kind", tensor(1, kind="weights"), ["tr.yaml", "tensors[1].kind"]),
    ("layer_without_times", drop_layer_key(0, "fwd_ns"),
     ["tr.yaml", "layers[0]", "fwd_ns and bwd_ns"]),
    ("negative_time", layer(0, fwd_ns=-1), ["tr.yaml", "layers[0].fwd_ns"]),
    ("fractional_time", layer(0, fwd_ns=2.5),
     ["tr.yaml", "layers[0].fwd_ns", "whole number", "2.5"]),
    ("time_word", layer(0, fwd_ns="soon"), ["tr.yaml", "layers[0].fwd_ns", "'soon'"]),
    ("time_beyond_floats", layer(0, fwd_ns=10**400), ["tr.yaml", "layers[0].fwd_ns"]),
    ("no_layers", top(layers=[]), ["tr.yaml", "layers"]),
    ("zero_batch", top(batch_size=0), ["tr.yaml", "batch_size"]),
]


def write_trace(path: Path, mutate: Callable[[dict[str, Any]], Any] | None = None) -> None:
    t = copy.deepcopy(good_trace())
    if mutate:
        mutate(t)
    path.write_text(yaml.safe_dump(t, sort_keys=False))


@pytest.mark.parametrize("mutate, fragments", [c[1:] for c in TRACE_CASES],
                         ids=[c[0] for c in TRACE_CASES])
def test_run_bad_trace(tmp_path: Path, mutate: Callable[[dict[str, Any]], Any],
                       fragments: list[str]) -> None:
    write_trace(tmp_path / "tr.yaml", mutate)
    run_config(tmp_path, "network: tr.yaml\npolicy: vdnn_all_m\n", *fragments)


def test_run_trace_at_another_batch_size(tmp_path: Path) -> None:
    write_trace(tmp_path / "tr.yaml")
    run_config(tmp_path, "network: tr.yaml\nbatch_size: 4\n", "tr.yaml", "batch size 1", "4")


def test_run_good_trace_succeeds(tmp_path: Path) -> None:
    write_trace(tmp_path / "tr.yaml")
    (tmp_path / "cfg.yaml").write_text("network: tr.yaml\nbatch_size: 1\npolicy: vdnn_all_m\n")
    proc = vdnnsim(tmp_path, "run", "--json", "cfg.yaml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    [record] = json.loads(proc.stdout)
    assert record["network"] == "hand" and record["policy"] == "vdnn_all_m"


# -- the trace command and the argument parser -----------------------------------------------

TRACE_CMD_CASES = [
    ("unknown_network", ["vgg17", "-o", "out/x.yaml"],
     ["unknown network 'vgg17'", "known:", "vgg16"]),
    ("unknown_network_to_stdout", ["vgg17", "-o", "-"], ["unknown network 'vgg17'"]),
    ("unknown_gpu", ["vgg16", "--gpu", "k41", "-o", "out/x.yaml"],
     ["unknown GPU preset 'k41'", "known:", "k40"]),
    ("batch_zero", ["vgg16", "--batch-size", "0", "-o", "out/x.yaml"], ["--batch-size"]),
    ("batch_negative", ["vgg16", "-b", "-3", "-o", "out/x.yaml"], ["--batch-size"]),
    ("batch_not_numeric", ["vgg16", "-b", "abc", "-o", "out/x.yaml"],
     ["vdnnsim trace: error:", "--batch-size", "'abc'"]),
    ("batch_beyond_simulation", ["vgg16", "-b", "100000000000", "-o", "out/x.yaml"],
     ["vgg16", "1 PiB"]),
    ("dtype_not_allowed", ["vgg16", "--dtype", "fp64", "-o", "out/x.yaml"],
     ["vdnnsim trace: error:", "--dtype", "'fp64'"]),
    ("no_output", ["vgg16"], ["vdnnsim trace: error:", "--output"]),
    ("folder_does_not_exist", ["vgg16", "-b", "2", "-o", "nosuch/x.yaml"],
     ["nosuch/x.yaml", "folder nosuch does not exist"]),
    ("output_is_a_folder", ["vgg16", "-b", "2", "-o", "out"], ["out", "is a directory"]),
    ("bad_network_spec", ["net.yaml", "-b", "2", "-o", "out/x.yaml"],
     ["net.yaml", "layers[0] (c1)", "kernel 11"]),
    ("network_file_missing", ["nonet.yaml", "-o", "out/x.yaml"], ["nonet.yaml", "no such file"]),
    ("trace_at_another_batch", ["tr.yaml", "-b", "3", "-o", "out/x.yaml"],
     ["tr.yaml", "batch size 1", "3"]),
]


@pytest.mark.parametrize("args, fragments", [c[1:] for c in TRACE_CMD_CASES],
                         ids=[c[0] for c in TRACE_CMD_CASES])
def test_trace_bad_input_writes_nothing(tmp_path: Path, args: list[str],
                                        fragments: list[str]) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "net.yaml").write_text(net("{name: c1, type: conv, out: 4, kernel: 11}"))
    write_trace(tmp_path / "tr.yaml")
    before = files_under(tmp_path)
    assert_user_error(vdnnsim(tmp_path, "trace", *args), *fragments)
    assert files_under(tmp_path) == before  # no output, no temporary file
    assert not (tmp_path / "nosuch").exists()
    assert list((tmp_path / "out").iterdir()) == []


PARSER_CASES = [
    ("no_command", [], ["vdnnsim: error:", "command"]),
    ("unknown_command", ["frobnicate"], ["vdnnsim: error:", "'frobnicate'"]),
    ("run_without_config", ["run"], ["vdnnsim run: error:", "config"]),
    ("run_unknown_flag", ["run", "cfg.yaml", "--fast"], ["vdnnsim: error:", "--fast"]),
    ("list_unknown_topic", ["list", "foo"], ["vdnnsim list: error:", "'foo'"]),
    ("profile_zero_trials", ["profile", "--model", "zoo:alexnet", "-b", "2", "--trials", "0",
                             "-o", "x.yaml"], ["--trials must be from 1 to 10,000"]),
    ("measure_zero_iters", ["measure", "--model", "zoo:alexnet", "-b", "2", "--iters", "0"],
     ["--iters must be from 1 to 10,000"]),
    ("measure_negative_warmup", ["measure", "--model", "zoo:alexnet", "-b", "2",
                                 "--warmup", "-1"], ["--warmup must be from 0 to 10,000"]),
    ("measure_zero_cap_gb", ["measure", "--model", "zoo:alexnet", "-b", "2",
                             "--memory-cap-gb", "0"], ["--memory-cap-gb must be more than 0"]),
    ("measure_nan_cap_gb", ["measure", "--model", "zoo:alexnet", "-b", "2",
                            "--memory-cap-gb", "nan"], ["--memory-cap-gb must be more than 0"]),
    ("measure_huge_cap_gb", ["measure", "--model", "zoo:alexnet", "-b", "2",
                             "--memory-cap-gb", "2000000"], ["at most 1 PiB (2**20 GiB)"]),
    ("measure_word_cap", ["measure", "--model", "zoo:alexnet", "-b", "2",
                          "--memory-cap", "lots"], ["--memory-cap: 'lots' is not a byte count"]),
    ("measure_zero_cap", ["measure", "--model", "zoo:alexnet", "-b", "2",
                          "--memory-cap", "0"], ["--memory-cap: a memory capacity must be at "
                                                 "least 1 byte"]),
    ("measure_negative_cap", ["measure", "--model", "zoo:alexnet", "-b", "2",
                              "--memory-cap=-1GiB"], ["--memory-cap: '-1GiB' is not a byte"]),
    ("measure_nan_cap", ["measure", "--model", "zoo:alexnet", "-b", "2",
                         "--memory-cap", "nan"], ["--memory-cap: 'nan' is not a byte count"]),
    ("measure_huge_cap", ["measure", "--model", "zoo:alexnet", "-b", "2",
                          "--memory-cap", "1e30"], ["--memory-cap: byte count '1e30' is more"]),
    ("measure_bare_gib_cap", ["measure", "--model", "zoo:alexnet", "-b", "2",
                              "--memory-cap", "GiB"], ["--memory-cap: 'GiB' is not a byte"]),
]


@pytest.mark.parametrize("args, fragments", [c[1:] for c in PARSER_CASES],
                         ids=[c[0] for c in PARSER_CASES])
def test_bad_arguments(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    assert_user_error(vdnnsim(tmp_path, *args), *fragments)
    assert files_under(tmp_path) == {}


def test_trace_then_run_round_trip(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    proc = vdnnsim(tmp_path, "trace", "vgg16", "-b", "2", "-o", "tmp/x.yaml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout.startswith("wrote tmp/x.yaml: vgg16, batch 2")
    written = tmp_path / "tmp" / "x.yaml"
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == ["x.yaml"]  # no temp file
    assert written.stat().st_mode & 0o777 == 0o644  # the umask's mode, not mkstemp's 0600
    assert yaml.safe_load(written.read_text())["batch_size"] == 2

    (tmp_path / "cfg.yaml").write_text("network: tmp/x.yaml\nbatch_size: 2\n"
                                       "policies: [baseline_p, vdnn_all_m]\n")
    proc = vdnnsim(tmp_path, "run", "--json", "cfg.yaml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    records = json.loads(proc.stdout)
    assert [(r["network"], r["batch_size"], r["policy"]) for r in records] == [
        ("vgg16", 2, "baseline_p"), ("vgg16", 2, "vdnn_all_m")]


def test_trace_over_an_existing_file_keeps_it_on_error(tmp_path: Path) -> None:
    """A failed command leaves the old file as it was, not a half-written one."""
    (tmp_path / "x.yaml").write_text("old\n")
    assert_user_error(vdnnsim(tmp_path, "trace", "vgg16", "--gpu", "k41", "-o", "x.yaml"),
                      "k41")
    assert files_under(tmp_path) == {"x.yaml": b"old\n"}


# -- integers written as floats (NOTE [whole numbers]) ---------------------------------------

@pytest.mark.parametrize("value, want", [
    (12, 12), (12.0, 12), ("1e12", 10**12), ("12.8e9", 12_800_000_000), (" 1_000 ", 1000),
    (2.5, "whole number, got 2.5"), ("2.5", "whole number"), (True, "boolean"),
    ("abc", "'abc'"), (float("inf"), "finite"), ("-inf", "finite"), ("nan", "whole number"),
    ("1e99999", "at most 4,000 digits"), (None, "None"), ([3], "[3]")])
def test_one_rule_for_whole_numbers(value: Any, want: Any) -> None:
    from vdnnsim.limits import whole_number
    if isinstance(want, int):
        got = whole_number(value, "n")
        assert got == want and type(got) is int
    else:
        with pytest.raises(ValueError, match=re.escape(want)):
            whole_number(value, "n")


def test_whole_numbers_written_as_floats_are_accepted(tmp_path: Path) -> None:
    """Every integer field takes the spellings bandwidths take: 1e1 (a string to YAML
    1.1), 1.0e+4, 4.0."""
    write_trace(tmp_path / "tr.yaml", layer(0, fwd_ns="1e3", bwd_ns=20.0))
    (tmp_path / "net.yaml").write_text(net("{name: c1, type: conv, out: 4.0, kernel: 3e0}",
                                           "{name: f, type: flatten}",
                                           "{name: fc, type: fc, out: '1e1'}"))
    (tmp_path / "cfg.yaml").write_text(
        "network: net.yaml\nbatch_size: 1e1\npolicy: vdnn_all_m\n"
        "policy_options: {distance: 1.0}\ngpu: {preset: k40, link_latency_ns: 1.0e+4}\n")
    (tmp_path / "tr_cfg.yaml").write_text("network: tr.yaml\npolicy: vdnn_all_m\n")
    for cfg, want in (("cfg.yaml", ("tiny", 10)), ("tr_cfg.yaml", ("hand", 1))):
        proc = vdnnsim(tmp_path, "run", "--json", cfg)
        assert proc.returncode == 0, proc.stderr
        [record] = json.loads(proc.stdout)
        assert (record["network"], record["batch_size"]) == want


# -- a file of another kind where one kind is expected (NOTE [file kinds]) ------------------

PLAN = {"format": "vdnnsim-plan", "version": 1, "network": "vgg16", "batch_size": 2,
        "layers": []}
MEASUREMENTS = [{"model": "torchvision:vgg16", "batch_size": 2, "policy": "baseline",
                 "fits": False}]

KIND_CASES = [
    ("trace_as_config", ["run", "tr.yaml"],
     ["tr.yaml: this is a vdnnsim trace, not a run config; name it as `network: tr.yaml` "
      "in a run config"]),
    ("spec_as_config", ["run", "net.yaml"],
     ["net.yaml: this is a network spec, not a run config", "`network: net.yaml`"]),
    ("trace_as_sweep", ["sweep", "tr.yaml"], ["tr.yaml: this is a vdnnsim trace"]),
    ("config_as_network", ["run", "outer.yaml"],
     ["outer.yaml: network: cfg.yaml: this is a run config, not a network spec or trace; "
      "run it with `vdnnsim run cfg.yaml`"]),
    ("config_to_trace", ["trace", "cfg.yaml", "-o", "out/x.yaml"],
     ["cfg.yaml: this is a run config, not a network spec or trace"]),
    ("study_to_plan", ["plan", "st.yaml", "--budget", "1 GiB"],
     ["st.yaml: this is a study, not a run config", "`vdnnsim sweep st.yaml`"]),
    ("study_to_plot_memory", ["plot", "memory", "st.yaml", "-o", "out/x.png"],
     ["st.yaml: this is a study, not a run config"]),
    ("plan_as_config", ["run", "plan.yaml"],
     ["plan.yaml: this is a vdnnsim plan file, not a run config",
      "`policy: planned` and `policy_options: {file: plan.yaml}`"]),
    ("measurements_as_config", ["run", "m.json"],
     ["m.json: this is a list of measurements (vdnnsim measure --json), not a run config",
      "`vdnnsim validate TRACES m.json`"]),
    ("calibration_as_config", ["run", "cal.json"],
     ["cal.json: this is a vdnnsim calibration file, not a run config"]),
    ("measurements_as_traces", ["validate", "m.json", "m.json"],
     ["m.json: this is a list of measurements", "not a trace"]),
    ("config_as_measurements", ["validate", "tr.yaml", "cfg.yaml"],
     ["cfg.yaml: this is a run config, not a list of measurements"]),
    ("trace_as_measurements", ["validate", "tr.yaml", "tr.yaml"],
     ["tr.yaml: this is a vdnnsim trace, not a list of measurements"]),
    ("measurements_folder", ["validate", "tr.yaml", "out"],
     ["out: is a folder; expected a JSON file of measurement records"]),
]


@pytest.mark.parametrize("args, fragments", [c[1:] for c in KIND_CASES],
                         ids=[c[0] for c in KIND_CASES])
def test_a_file_of_another_kind_is_named(tmp_path: Path, args: list[str],
                                         fragments: list[str]) -> None:
    (tmp_path / "out").mkdir()
    write_trace(tmp_path / "tr.yaml")
    (tmp_path / "net.yaml").write_text(net(*GOOD_NET_LAYERS))
    (tmp_path / "cfg.yaml").write_text(GOOD_CONFIG)
    (tmp_path / "outer.yaml").write_text("network: cfg.yaml\n")
    (tmp_path / "st.yaml").write_text("base: {network: vgg16}\nsweep: {batch_size: [1, 2]}\n")
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(PLAN))
    (tmp_path / "m.json").write_text(json.dumps(MEASUREMENTS))
    (tmp_path / "cal.json").write_text(json.dumps({"format": "vdnnsim-calibration",
                                                   "records": []}))
    before = files_under(tmp_path)
    assert_user_error(vdnnsim(tmp_path, *args), *fragments)
    assert files_under(tmp_path) == before


def test_the_file_kinds_are_the_writers_formats() -> None:
    """NOTE [file kinds] recognises files by the format names their writers put in."""
    from vdnnsim.planners.planfile import BLOCK_FORMAT
    from vdnnsim.planners.planfile import FORMAT as PLAN_FORMAT
    from vdnnsim.trace.schema import FORMAT as TRACE_FORMAT
    from vdnnsim.yamlio import FORMATS, file_kind

    source = (Path(__file__).parents[1] / "vdnnsim" / "gpu" / "calibrate" / "kernels.py").read_text()
    calibration = re.search(r'^FORMAT = "([^"]+)"', source, re.M).group(1)
    assert FORMATS == {TRACE_FORMAT: "trace", PLAN_FORMAT: "plan", BLOCK_FORMAT: "plan",
                       calibration: "calibration"}
    assert file_kind({"network": "vgg16", "format": "x"}) == "run config"
    assert file_kind([{"model": "m", "policy": "p"}]) is None  # no fits: not a record
    assert file_kind([]) is None and file_kind("text") is None


# -- -o/--output checked before the work -----------------------------------------------------

OUTPUT_CASES = [
    # the input is missing too: the output's error shows it is checked first
    ("plan", ["plan", "missing.yaml", "--budget", "1 GiB", "-o", "nosuch/p.yaml"]),
    ("sweep", ["sweep", "missing.yaml", "-o", "nosuch/r.csv"]),
    ("plot", ["plot", "memory", "missing.yaml", "-o", "nosuch/x.png"]),
    ("trace", ["trace", "vgg17", "-o", "nosuch/x.yaml"]),
    ("profile", ["profile", "--model", "zoo:alexnet", "-b", "2", "-o", "nosuch/x.yaml"]),
    ("calibrate", ["calibrate", "-o", "nosuch/x.json"]),
    ("run_chrome_trace", ["run", "missing.yaml", "--chrome-trace", "nosuch/t.json"]),
]


@pytest.mark.parametrize("args", [c[1] for c in OUTPUT_CASES], ids=[c[0] for c in OUTPUT_CASES])
def test_the_output_path_is_checked_before_the_work(tmp_path: Path, args: list[str]) -> None:
    assert_user_error(vdnnsim(tmp_path, *args), "nosuch/", "folder nosuch does not exist")
    assert files_under(tmp_path) == {}


def test_plan_checks_its_output_before_searching(tmp_path: Path) -> None:
    """The search prints as it goes: nothing on stdout means it never ran."""
    (tmp_path / "cfg.yaml").write_text(GOOD_CONFIG)
    (tmp_path / "out").mkdir()
    for out, fragment in (("/missing/dir/p.yaml", "folder /missing/dir does not exist"),
                          ("out", "out: is a directory, not a file name")):
        assert_user_error(vdnnsim(tmp_path, "plan", "cfg.yaml", "--budget", "1 GiB", "-o",
                                  out), fragment)
    assert files_under(tmp_path) == {"cfg.yaml": GOOD_CONFIG.encode()}


def test_reproduce_checks_its_folder_before_the_studies(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x")
    assert_user_error(vdnnsim(tmp_path, "reproduce", "--studies", "missing", "-o",
                              "f.txt/sub/out"), "cannot make this folder: f.txt is a file")
    assert files_under(tmp_path) == {"f.txt": b"x"}


def test_an_unwritable_folder_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root writes anywhere, so os.access stands in for a read-only folder."""
    from vdnnsim.errors import ConfigError
    from vdnnsim.yamlio import check_writable, write_text_atomic

    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    for call in (lambda: check_writable(tmp_path / "x.yaml"),
                 lambda: check_writable(tmp_path / "new" / "dir", folder=True),
                 lambda: write_text_atomic(tmp_path / "x.yaml", "x")):
        with pytest.raises(ConfigError, match="is not writable"):
            call()
    assert list(tmp_path.iterdir()) == []


# -- vdnnsim measure --memory-cap (issue 27) -------------------------------------------------

@pytest.mark.parametrize("size, nbytes", [("12GiB", 12 * 2**30), ("12 GiB", 12 * 2**30),
                                          ("12.5GB", 12_500_000_000), ("1e9", 10**9),
                                          ("4096", 4096)])
def test_memory_cap_takes_a_byte_size(size: str, nbytes: int, capsys) -> None:
    """--memory-cap SIZE is the byte-size parser's (GB is 10^9 bytes, GiB 2^30)."""
    from vdnnsim.cli import build_parser
    from vdnnsim.cli.common import memory_cap as _memory_cap

    args = build_parser().parse_args(["measure", "--model", "zoo:alexnet", "-b", "2",
                                      "--memory-cap", size])
    assert _memory_cap(args) == nbytes
    assert capsys.readouterr().err == ""


def test_the_deprecated_memory_cap_gb_still_means_gib(capsys) -> None:
    """Committed scripts say --memory-cap-gb 12: still 12 GiB, with one line saying so."""
    from vdnnsim.cli import build_parser
    from vdnnsim.cli.common import memory_cap as _memory_cap

    p = build_parser()
    args = p.parse_args(["measure", "--model", "zoo:alexnet", "-b", "2", "--memory-cap-gb",
                         "12.5"])
    assert _memory_cap(args) == int(12.5 * 2**30)
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "deprecated" in err and "--memory-cap" in err
    assert "--memory-cap-gb" not in p.format_help() + subparser_help(p, "measure")
    assert "--memory-cap SIZE" in subparser_help(p, "measure")


def subparser_help(parser, name: str) -> str:
    import argparse
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name].format_help()


def test_memory_cap_and_its_old_spelling_together_are_one_line(tmp_path: Path) -> None:
    proc = vdnnsim(tmp_path, "measure", "--model", "zoo:alexnet", "-b", "2", "--memory-cap",
                   "12GiB", "--memory-cap-gb", "12")
    assert_user_error(proc, "give --memory-cap, not both")
