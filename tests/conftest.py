"""Shared test helpers: tiny inline traces whose answers can be worked out by hand."""

from __future__ import annotations

import functools
import subprocess
from typing import Any

import pytest

from vdnnsim.hardware import GPU, Link
from vdnnsim.trace import Trace, trace_from_dict

MB = 10**6

try:  # torch (vdnnsim[torch]): one intra-op thread in the test process, see below
    import torch
except ImportError:
    torch = None
# The test process runs torch on one thread: pytest-xdist already runs a worker per core,
# and torch's worker threads on a machine with no core to spare wait for one at every
# parallel op, spinning (a harness test of small ops took 60 CPU seconds so on a loaded
# machine, under 2 on one thread). A test that passes thread counts to a subprocess asks a
# fresh process for its default.
if torch is not None:
    torch.set_num_threads(1)

try:  # transformers, for hf: models (vdnnsim[hf]); tests that need it skip without it
    import transformers  # noqa: F401
    HAS_HF = True
except ImportError:
    HAS_HF = False


def hand_gpu(memory_bytes: int = 10**12, bw: float = 1e9, latency_ns: int = 0,
             duplex: bool = True) -> GPU:
    """A GPU whose link moves 1 byte per ns (1 GB/s): 1 MB takes exactly 1 ms."""
    return GPU("hand", "hand-made", memory_bytes, {"fp32": 1e12, "fp16": 1e12, "bf16": 1e12},
               1e12, 0, False, Link(bw, bw, latency_ns, duplex), "tests")


def chain_trace(layers: list[dict[str, Any]], input_bytes: int = 1 * MB,
                name: str = "hand", framework: str = "torch7") -> Trace:
    """A chain: each layer reads the previous output. A layer dict gives id, kind, size
    (output bytes), fwd/bwd (ns) or algos, optional saves ('x', 'y', 'xy', ''), inplace,
    host_fwd/host_bwd (ns), kernels_fwd/kernels_bwd (commands), and attrs."""
    tensors = [{"id": "data", "size_bytes": input_bytes, "kind": "input"}]
    size = {"data": input_bytes}
    out_layers = []
    prev = "data"
    for d in layers:
        lid = d["id"]
        t = {"id": lid, "size_bytes": d.get("size", input_bytes)}
        if d.get("inplace"):
            t["alias_of"] = prev
            t["size_bytes"] = size[prev]
        size[lid] = t["size_bytes"]
        tensors.append(t)
        saves = d.get("saves", "x")
        saved = ([prev] if "x" in saves else []) + ([lid] if "y" in saves else [])
        layer = {"id": lid, "kind": d.get("kind", "conv"), "inputs": [prev], "outputs": [lid],
                 "saved": saved, "weight_bytes": d.get("weight", 0)}
        if "algos" in d:
            layer["algos"] = d["algos"]
        else:
            layer["fwd_ns"] = d.get("fwd", 0)
            layer["bwd_ns"] = d.get("bwd", 0)
            if d.get("ws"):
                layer["workspace_bytes"] = d["ws"]
        if d.get("host_fwd") or d.get("host_bwd"):
            layer.update(host_fwd_ns=d.get("host_fwd", 0), host_bwd_ns=d.get("host_bwd", 0))
        for k in ("kernels_fwd", "kernels_bwd", "attrs"):
            if k in d:
                layer[k] = d[k]
        out_layers.append(layer)
        prev = lid
    return trace_from_dict({"format": "vdnnsim-trace", "version": 1, "name": name,
                            "batch_size": 1, "source": {"framework": framework},
                            "tensors": tensors, "layers": out_layers})


@pytest.fixture
def gpu() -> GPU:
    return hand_gpu()


@functools.lru_cache(maxsize=None)
def k40_vgg16_plan() -> tuple[Trace, GPU, Any, Any]:
    """The paper's VGG-16 (256) on the K40, and ``search_plan``'s answer for it in 12 GiB
    (the default method, auto: the MILP's plan and the greedy one's, the faster), as
    ``(trace, gpu, plan, search)``: made once in a worker, as several tests hold what that
    answer is (the MILP takes seconds). Nothing reading it changes it."""
    from vdnnsim.api import build_trace, resolve_gpu
    from vdnnsim.planners.greedy import search_plan

    k40 = resolve_gpu("k40")
    trace = build_trace("vgg16", 256, k40)
    plan, search = search_plan(trace, k40, 12 * 2**30)
    return trace, k40, plan, search


def experiment(relpath: str) -> Any:
    """An experiments/ script (``experiments/<relpath>``) loaded as a module, for tests
    that hold what it prints (the scripts are not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "experiments" / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def block_step_grads(work: Any, rt: Any) -> tuple[dict, dict]:
    """One training step's gradients on a CUDA GPU (no optimizer step) with the block
    runtime ``rt`` (or none), and its stats; the runtime removed after it."""
    import torch
    from vdnnsim.gpu.model.workload import training_step

    step = training_step(work, 8, "cuda", "fp32", "sgd")
    step.optimizer.zero_grad(set_to_none=True)
    step.backward(step.forward())
    if rt is not None:
        rt.end_iteration()
    torch.cuda.synchronize()
    out = {n: p.grad.detach().clone() for n, p in work.model.named_parameters()
           if p.grad is not None}
    stats = dict(rt.stats) if rt is not None else {}
    if rt is not None:
        rt.remove()
    return out, stats


def run_cli(argv: list[str], cwd: Any = None) -> subprocess.CompletedProcess[str]:
    """``vdnnsim ARGV`` run in this process (``vdnnsim.cli.main``), its exit code, stdout and
    stderr as ``subprocess.run(..., capture_output=True, text=True)`` gives them: for tests
    that check what a command does, where a fresh interpreter (seconds of imports) is not
    the point. Tests of the real entry point (exit codes, Ctrl-C, import-time behaviour)
    keep their subprocesses.

    What a fresh process would show, this shows too: stdout and stderr are UTF-8 byte
    streams as a pipe's are (strict on stdout, backslashreplace on stderr, so text a pipe
    cannot carry fails here as it would there), and a warning goes to stderr under
    Python's default filters, not to pytest's record of warnings, where a stray one would
    pass unseen by a test that stderr is one line. The working directory, the SIGINT
    handler and the warning filters the command sets are put back afterwards."""
    import contextlib
    import io
    import os
    import signal
    import warnings

    from vdnnsim.cli import main

    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
             line: Any = None) -> None:  # the interpreter's own, to the stderr of the moment
        import sys
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    here, sigint = os.getcwd(), signal.getsignal(signal.SIGINT)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings():
            warnings.resetwarnings()  # a fresh interpreter's filters (no -W, no PYTHONWARNINGS)
            for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning,
                             DeprecationWarning):
                warnings.simplefilter("ignore", category)
            warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
            warnings.showwarning = show
            try:
                code = main([str(a) for a in argv])
            except SystemExit as exc:  # argparse's errors and --help
                code = exc.code
                if code is not None and not isinstance(code, int):  # as the interpreter does
                    print(code, file=err)
                    code = 1
    finally:
        os.chdir(here)
        signal.signal(signal.SIGINT, sigint)
    texts = []
    for stream in (out, err):
        stream.flush()
        text = stream.buffer.getvalue().decode("utf-8")  # text=True's universal newlines:
        texts.append(text.replace("\r\n", "\n").replace("\r", "\n"))
    return subprocess.CompletedProcess(["vdnnsim", *map(str, argv)], int(code or 0), *texts)



# The longest of the slow tests, longest first (about 27 s down to 5 s on 2 cores).
LONGEST_FIRST = ("[llama_7b]", "::test_fuzz_contract", "[tensor_plans]", "meta_check.py]",
                 "::test_on_the_k40_the_milp_", "::test_resnet50_256_in_12_gib_",
                 "block_mix.py]", "[llama_24gb]", "::test_committed_profiles_predict_",
                 "op_model/check.py]", "profiled_check.py]", "beyond_vdnn/compare.py]",
                 "op_model/check.py --set set2]", "::test_the_h200_transformer_runs_")


def pytest_collection_modifyitems(config: Any, items: list) -> None:
    """The tests marked slow first, the longest of them (LONGEST_FIRST) before the others:
    pytest-xdist's workers then start on the longest and end on the many short ones, not
    one worker alone on a notebook. (A worker under --dist worksteal keeps the test it
    runs and the one after it: a long test there at the end runs alone.)"""
    def order(item: Any) -> tuple[bool, int]:
        rank = next((i for i, part in enumerate(LONGEST_FIRST) if part in item.nodeid),
                    len(LONGEST_FIRST))
        return item.get_closest_marker("slow") is None, rank

    items.sort(key=order)


def pytest_configure(config: Any) -> None:
    """NOTE [trace cache] for the whole session: one folder that the controller makes before
    pytest-xdist starts its workers (they, the notebooks' kernels and every subprocess
    inherit the environment) and removes at the end."""
    import os
    import tempfile

    from vdnnsim.gpu.probe.cache import ENV

    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        _cache_milp_answers()  # where tests run: a worker, or a run without workers
    if hasattr(config, "workerinput") or os.environ.get(ENV):
        return
    folder = tempfile.mkdtemp(prefix="vdnnsim-trace-cache-")
    os.environ[ENV] = folder
    config._vdnnsim_trace_cache = folder


def _fields(x: Any) -> Any:
    """``x`` as plain data: a dataclass as its type and its fields' values (a trace's cached
    views left out), a mapping's items and a sequence's items in order, recursively."""
    import dataclasses

    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__qualname__,
                *(_fields(getattr(x, f.name)) for f in dataclasses.fields(x)))
    if isinstance(x, dict):
        return ("dict", *((_fields(k), _fields(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, *map(_fields, x))
    return x


def _cache_milp_answers() -> None:
    """NOTE [milp cache]
    Tests and a documented script solve the same MILP programs, seconds each (the K40's
    VGG-16 (256) in 12 GiB in each worker, `vdnnsim plan` and compare.py). In the test
    processes, not their subprocesses (a Ctrl-C test must still find the solver running),
    ``milp_plan`` keeps its answers in the session's folder of NOTE [trace cache], keyed
    by its arguments' fields (a trace's, not the views it worked out and kept: any
    difference misses), vdnnsim's source and scipy's version. A hit is the pickled answer
    read back, as a miss returns it too (no two callers share an object); a test that
    monkeypatches solves afresh (the folder is unset there)."""
    import fcntl
    import hashlib
    import inspect
    import os
    import pickle
    import tempfile
    from pathlib import Path

    from vdnnsim.gpu.probe.cache import ENV, _source_hash
    from vdnnsim.planners import milp

    solve = milp.milp_plan
    if hasattr(solve, "__wrapped__"):
        return
    signature = inspect.signature(solve)

    @functools.wraps(solve)
    def milp_plan(*args: Any, **kwargs: Any) -> Any:
        folder = os.environ.get(ENV)
        if not folder:
            return solve(*args, **kwargs)
        import scipy

        call = signature.bind(*args, **kwargs)
        call.apply_defaults()
        key = pickle.dumps((_fields(tuple(call.arguments.items())), _source_hash(),
                            scipy.__version__), protocol=5)
        path = Path(folder) / f"milp-{hashlib.sha256(key).hexdigest()}.pickle"
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one process solves, the others wait for it
            try:
                if not path.exists():
                    answer = pickle.dumps(solve(*args, **kwargs), protocol=5)
                    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".part")
                    with os.fdopen(fd, "wb") as f:
                        f.write(answer)
                    os.replace(tmp, path)  # whole or not at all
                return pickle.loads(path.read_bytes())
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    milp.milp_plan = milp_plan


def pytest_unconfigure(config: Any) -> None:
    import shutil

    folder = getattr(config, "_vdnnsim_trace_cache", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_trace_cache_where_patched(request: Any) -> Any:
    """A test that monkeypatches may change what a trace would be: it traces afresh."""
    if "monkeypatch" in request.fixturenames:
        from vdnnsim.gpu.probe.cache import ENV

        request.getfixturevalue("monkeypatch").delenv(ENV, raising=False)
    yield
