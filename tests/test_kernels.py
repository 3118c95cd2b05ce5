"""NOTE [kernel counts]: how the profiler's kernel counts are split among layers, the
counter on a real model (on a CPU: its markers, no GPU commands), and the counts' place in
the trace format."""

from __future__ import annotations

import pytest

from vdnnsim.trace import trace_from_dict
from vdnnsim.trace.io import trace_to_dict

from .conftest import chain_trace

torch = pytest.importorskip("torch")


def _events(items):
    """Chrome-trace events: ('m', ts, thread, tag) markers, ('c', ts, thread) commands."""
    out = []
    for it in items:
        if it[0] == "m":
            out.append({"ph": "X", "ts": it[1], "pid": 1, "tid": it[2],
                        "cat": "user_annotation", "name": "vdnnsim:" + it[3]})
        else:
            out.append({"ph": "X", "ts": it[1], "pid": 1, "tid": it[2],
                        "cat": it[3] if len(it) > 3 else "cuda_runtime",
                        "name": it[4] if len(it) > 4 else "cudaLaunchKernel"})
    return out


def test_commands_belong_to_the_marker_before_them_on_their_thread():
    from vdnnsim.gpu.profile.kernels import split_commands
    ev = _events([
        ("m", 0, 1, "f:-1"), ("c", 1, 1), ("c", 2, 1),  # layer a: 2
        ("m", 3, 1, "f:0"), ("m", 4, 1, "f:1"),  # layer b: none (a view)
        ("c", 5, 1, "cuda_driver", "cuLaunchKernelEx"),  # the loss: 1, a driver launch
        ("m", 6, 1, "f:2"), ("c", 7, 1),  # the first gradient: the loss's backward
        ("m", 7.5, 2, "b:2"), ("c", 7.6, 2, "cuda_runtime", "cudaMemsetAsync"),
        ("m", 7.7, 2, "b:1"), ("m", 7.8, 2, "b:0"), ("c", 7.9, 2), ("c", 7.95, 2),
        ("c", 7.97, 2, "cuda_runtime", "cudaEventRecord"),  # not a command that is counted
        ("m", 8, 1, "b:end"), ("c", 9, 1), ("c", 10, 1), ("m", 11, 1, "step"),
    ])
    counts, opt = split_commands(ev, ["a", "b"])
    assert counts == {"a": (2, 2), "b": (0, 0), "loss": (1, 2)}
    assert opt == 2


def test_only_the_compute_streams_commands_count():
    """A library that forks work onto streams of its own (cuDNN's FFT engines: 1,056 of a
    ConvNeXt-T depthwise backward's 1,060 kernels at batch 128 on the H200) fills their
    queues, not the compute stream's: a command counts only when its GPU activity ran on
    the stream of the step's first activity."""
    from vdnnsim.gpu.profile.kernels import split_commands

    def launch(ts, tid, corr):
        return {"ph": "X", "ts": ts, "pid": 1, "tid": tid, "cat": "cuda_runtime",
                "name": "cudaLaunchKernel", "args": {"correlation": corr}}

    def kernel(ts, corr, stream):
        return {"ph": "X", "ts": ts, "pid": 0, "tid": stream, "cat": "kernel",
                "name": "k", "args": {"correlation": corr, "stream": stream}}

    ev = _events([("m", 0, 1, "f:-1"), ("m", 10, 1, "f:0"), ("m", 20, 1, "f:1"),
                  ("m", 30, 2, "b:1"), ("m", 40, 2, "b:0"), ("m", 50, 1, "b:end"),
                  ("m", 60, 1, "step")])
    ev += [launch(1, 1, 1), kernel(100, 1, 7),  # layer a's forward, on the compute stream
           launch(21, 1, 2), kernel(101, 2, 7),  # the loss
           launch(41, 2, 3), kernel(102, 3, 7)]  # layer a's backward: one on stream 7,
    for c in range(4, 10):  # six on the library's streams, more than stream 7 ran
        ev += [launch(41 + c, 2, c), kernel(103 + c, c, 30 + c % 2)]
    ev.append(launch(42, 2, 99))  # a launch without a GPU activity in the trace counts
    # a memset on the library's stream is left out like its kernels; an activity that
    # names no stream (earliest of all here) neither sets the compute stream nor is left out
    ev += [{**launch(43, 2, 50), "name": "cudaMemsetAsync"},
           {**kernel(104, 50, 31), "cat": "gpu_memset"},
           {**launch(44, 2, 51), "name": "cudaMemsetAsync"},
           {"ph": "X", "ts": 50, "pid": 0, "tid": 0, "cat": "gpu_memset", "name": "m"}]
    left_out: list[int] = []
    counts, _ = split_commands(ev, ["a", "b"], left_out)
    assert counts == {"a": (1, 3), "b": (0, 0), "loss": (1, 0)}
    assert left_out == [7]  # the profile's note says how many
    legacy, _ = split_commands([e for e in ev if e.get("cat") != "kernel"], ["a", "b"])
    assert legacy["a"] == (1, 10)  # without GPU activities every launch counts


def test_the_counter_marks_every_layer_of_a_real_model():
    from vdnnsim.gpu.profile import kernels
    from vdnnsim.gpu.probe.fx import probe
    from vdnnsim.gpu.model.build import build_model
    from vdnnsim.gpu.profile.layers import DTYPES

    model, shape, name = build_model("zoo:alexnet")
    p = probe(model, shape, 2, "cpu", DTYPES["fp32"], name)
    seen = {}
    real = kernels.split_commands

    def spy(events, names, left_out=None):
        seen["tags"] = [e["name"] for e in events if str(e.get("name", "")).startswith(
            "vdnnsim:")]
        return real(events, names, left_out)

    kernels.split_commands = spy
    try:
        counts, _ = kernels.count_kernels(model, p, warmup=1)
    finally:
        kernels.split_commands = real
    names = [n.name for n in p.nodes]
    assert list(counts) == names  # every layer, the loss last
    assert all(c == (0, 0) for c in counts.values())  # a CPU issues no GPU commands
    n = len(names) - 1
    tags = seen["tags"]
    # a marker before the first layer and after every forward (the loss's too), one
    # before each backward node that has one, and the two of the step
    assert tags[:n + 2] == ["vdnnsim:f:-1"] + [f"vdnnsim:f:{k}" for k in range(n + 1)]
    assert tags[-2:] == ["vdnnsim:b:end", "vdnnsim:step"]
    assert tags[n + 2] == f"vdnnsim:b:{n}"  # backward starts at the loss


def test_kernel_counts_round_trip_and_are_optional():
    t = chain_trace([{"id": "c1", "fwd": 1, "bwd": 1, "kernels_fwd": 3, "kernels_bwd": 0},
                     {"id": "c2", "fwd": 1, "bwd": 1}], framework="pytorch")
    assert (t.layers[0].kernels_fwd, t.layers[0].kernels_bwd) == (3, 0)
    assert t.layers[1].kernels_fwd is None and t.layers[1].kernels_bwd is None
    d = trace_to_dict(t)
    assert d["layers"][0]["kernels_fwd"] == 3 and "kernels_fwd" not in d["layers"][1]
    assert trace_from_dict(d) == t
