"""NOTE [kineto attribution]: module ranges in a real torch.profiler trace (CPU), a hand-made
GPU trace whose answer is worked out by hand, and load_trace's one-line errors."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vdnnsim.errors import ConfigError
from vdnnsim.measured import kineto, tracefile
from vdnnsim.measured.kineto import MODULE_PREFIX, attribute, load_trace


# ---------------------------------------------------------------- real traces (CPU)

def _leaves(model):
    return {p for p, m in model.named_modules() if not list(m.children())}


def _profile(tmp_path, model, x, y, steps=2):
    """Warm-up, then ``steps`` SGD steps under torch.profiler, each in a step range."""
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = nn.functional.cross_entropy(out.reshape(len(y), -1), y)
        loss.backward()
        opt.step()

    with kineto.module_ranges(model):
        step()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                     profile_memory=True) as prof:
            for k in range(steps):
                with kineto.step_range(k):
                    step()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return path


def _outermost_ops_ns(events, start, end):
    """Independently of kineto.py: the summed durations of the cpu_ops starting in
    [start, end) that no other cpu_op of their thread encloses (= the sum of all their
    self times)."""
    ops = sorted(((round(e["ts"] * 1000), round(e["dur"] * 1000), e["tid"]) for e in events
                  if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda o: (o[2], o[0], -o[1]))
    total, reach = 0, {}
    for ts, dur, tid in ops:
        if ts >= reach.get(tid, -1):
            reach[tid] = ts + dur
            if start <= ts < end:
                total += dur
    return total


def _check_real(path, model, ran):
    a = attribute(str(path))
    assert a.time_source == kineto.TIME_CPU
    assert [s.index for s in a.steps] == [0, 1]
    assert a.warnings == []
    assert a.outside_steps.activities == 0
    events = json.loads(path.read_text())["traceEvents"]
    for st in a.steps:
        assert sum(st.buckets.values()) == st.device_total_ns  # nothing dropped
        assert st.device_total_ns == _outermost_ops_ns(events, st.start_ns, st.end_ns)
        assert st.unattributed.device_ns == 0 and st.unattributed.activities == 0
        assert st.optimizer.device_ns > 0 and st.optimizer.calls == 1
        assert st.optimizer.host_ns >= st.optimizer.device_ns
        assert 0 < st.device_busy_ns <= st.wall_ns
        assert st.outside.forward.device_ns > 0 and st.outside.backward.device_ns > 0  # the loss
        assert "NllLossBackward0" in st.outside.backward_nodes
        for p in ran:
            mt = st.modules[p]
            assert mt.forward.calls >= 1, p
            assert mt.forward.device_ns > 0 and mt.backward.device_ns > 0, p
            assert mt.forward.host_ns > 0 and mt.backward.host_ns > 0, p
        assert set(st.modules) <= {p for p, _ in model.named_modules()}
        assert st.memory[-1].allocated_bytes > 0 and st.memory[-1].events > 0
        assert st.memory[-1].reserved_bytes == 0  # a CPU trace has none
    return a


def test_sequential_cnn(tmp_path):
    torch = pytest.importorskip("torch")
    from torch import nn
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                      nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    a = _check_real(_profile(tmp_path, m, torch.randn(2, 3, 6, 6), torch.tensor([1, 3])),
                    m, _leaves(m))
    for st in a.steps:
        conv = st.modules["0"]
        assert conv.backward_nodes == {"ConvolutionBackward0": 1,
                                       "torch::autograd::AccumulateGrad": 2}
        assert st.modules["1"].backward_nodes["NativeBatchNormBackward0"] == 1
        assert st.modules["4"].backward_nodes["AddmmBackward0"] == 1
        for p, mt in st.modules.items():  # the conv's backward node nowhere else
            assert p == "0" or "ConvolutionBackward0" not in mt.backward_nodes
        assert list(st.modules)[:2] == ["", "0"]  # first call first
        root = st.modules[""]
        assert root.forward.calls == 1 and root.forward.device_ns == 0  # no op of its own


def test_module_called_twice(tmp_path):
    torch = pytest.importorskip("torch")
    from torch import nn

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)
            self.act = nn.ReLU()
            self.alias = self.lin  # shared: counted under its first path, "lin"
            self.head = nn.Linear(6, 3)

        def forward(self, x):
            return self.head(self.alias(self.act(self.lin(x))))

    torch.manual_seed(0)
    m = Twice()
    a = _check_real(_profile(tmp_path, m, torch.randn(4, 6), torch.tensor([0, 1, 2, 0])),
                    m, {"lin", "act", "head"})
    for st in a.steps:
        assert "alias" not in st.modules
        lin = st.modules["lin"]
        assert lin.forward.calls == 2
        assert lin.backward_nodes["AddmmBackward0"] == 2
        assert st.modules["head"].forward.calls == 1


def test_transformer_encoder_layer(tmp_path):
    torch = pytest.importorskip("torch")
    from torch import nn
    torch.manual_seed(0)
    m = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.1,
                                   batch_first=True)
    path = _profile(tmp_path, m, torch.randn(2, 3, 8), torch.tensor([1, 2, 3, 4, 5, 6]))
    # out_proj is a leaf that MultiheadAttention uses without calling it: no range
    ran = _leaves(m) - {"self_attn.out_proj"}
    assert {"linear1", "linear2", "norm1", "norm2", "dropout", "dropout1"} <= ran
    a = _check_real(path, m, ran)
    for st in a.steps:
        assert "self_attn.out_proj" not in st.modules
        attn = st.modules["self_attn"]
        assert attn.forward.device_ns > 0 and attn.backward.device_ns > 0
        assert st.modules["norm1"].backward_nodes["NativeLayerNormBackward0"] == 1


def test_module_ranges_close_on_raise_and_unhook(tmp_path):
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.profiler import ProfilerActivity, profile

    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.fail = True

        def forward(self, x):
            if self.fail:
                raise RuntimeError("boom")
            return x

    m = nn.Sequential(nn.Linear(4, 4), Boom())
    x = torch.randn(2, 4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with kineto.module_ranges(m):
            with kineto.step_range(0):
                with pytest.raises(RuntimeError, match="boom"):
                    m(x)
            m[1].fail = False
            with kineto.step_range(1):
                m(x)
    for mod in m.modules():
        assert not mod._forward_hooks and not mod._forward_pre_hooks
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    ev = json.loads(path.read_text())["traceEvents"]
    ranges = [e for e in ev if e.get("cat") == "user_annotation"]
    step1 = next(e for e in ranges if e["name"] == "vdnnsim.step#1")
    mods = [e for e in ranges if e["name"].startswith(MODULE_PREFIX)]
    # two calls of each module: the failed one's ranges all closed before step 1
    assert sorted(e["name"] for e in mods) == sorted(
        [MODULE_PREFIX, MODULE_PREFIX + "0", MODULE_PREFIX + "1"] * 2)
    failed = [e for e in mods if e["ts"] < step1["ts"]]
    assert len(failed) == 3
    assert all(e["ts"] + e["dur"] <= step1["ts"] for e in failed)
    a = attribute(str(path))
    assert [st.modules["1"].forward.calls for st in a.steps] == [1, 1]


def test_import_needs_no_torch():
    code = ("import sys; sys.modules['torch'] = None; from vdnnsim.measured import kineto; "
            "kineto.attribute({'traceEvents': [{'ph': 'X', 'cat': 'cpu_op', 'name': 'a', "
            "'pid': 1, 'tid': 1, 'ts': 1.0, 'dur': 2.5}]}); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


# ---------------------------------------------------------------- a real GPU trace

H200_TRACE = Path(__file__).parent / "data" / "kineto_h200_2steps.json.gz"  # how: its .py


def test_real_cuda_trace():
    """Two AdamW steps of a conv + transformer model on an H200: backward runs on the
    autograd engine's own thread, outside the step ranges' nesting."""
    events = json.loads(gzip.decompress(H200_TRACE.read_bytes()))["traceEvents"]
    def tids(prefix):
        return {e["tid"] for e in events if e.get("ph") == "X" and e["name"].startswith(prefix)}
    assert tids(MODULE_PREFIX).isdisjoint(tids(kineto.BACKWARD_PREFIX))
    a = attribute(H200_TRACE)
    assert a.time_source == kineto.TIME_GPU and a.warnings == []
    assert [st.index for st in a.steps] == [0, 1]
    every = [round(e["dur"] * 1000) for e in events if e.get("cat") in kineto.GPU_CATS]
    gaps = sum(st.gap_ns for st in a.steps) + a.outside_steps.gap_ns
    assert sum(st.device_total_ns for st in a.steps) + a.outside_steps.device_ns \
        == sum(every) + gaps
    assert sum(st.activities for st in a.steps) + a.outside_steps.activities == len(every)
    leaves = {"c.0", "c.1", "c.2", "lin", "enc.self_attn", "enc.dropout1", "enc.norm1",
              "enc.linear1", "enc.dropout", "enc.linear2", "enc.dropout2", "enc.norm2",
              "lin2", "out"}
    for st in a.steps:
        assert sum(st.buckets.values()) == st.device_total_ns
        assert st.unattributed == kineto.Cost()
        assert leaves <= set(st.modules) and "enc.self_attn.out_proj" not in st.modules
        for p in leaves:
            assert st.modules[p].forward.device_ns > 0 and st.modules[p].backward.device_ns > 0
        assert st.modules["c.0"].backward_nodes == {"ConvolutionBackward0": 1,
                                                   "torch::autograd::AccumulateGrad": 2}
        assert st.modules["c.1"].backward_nodes["CudnnBatchNormBackward0"] == 1
        assert st.optimizer.device_ns > 0 and st.zero_grad.device_ns > 0  # set_to_none=False
        assert st.outside.forward.activities > 0 and st.outside.backward.device_ns > 0
        assert 0 < st.device_busy_ns <= st.device_total_ns - st.gap_ns < st.wall_ns
        # a host-bound step: each kernel launched after its stream went idle, so its gap is
        # its launch latency, a microsecond or two (NOTE [kineto attribution])
        assert 1_000 * st.activities < st.gap_ns < 3_000 * st.activities
        [(dev, peak)] = st.memory.items()  # the GPU's, not the host's (Device Type 0)
        assert dev == 0 and 0 < peak.allocated_bytes <= peak.reserved_bytes


# ---------------------------------------------------------------- a GPU trace by hand

HOST, BWD, GPU = (1, 1), (1, 2), (0, 7)  # (pid, tid): main thread, autograd thread, stream


def _x(where, cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": where[0], "tid": where[1],
            "ts": ts, "dur": dur, "args": args}


def _op(name, ts, dur, seq=None, fwd_tid=None, where=HOST):
    args = {} if seq is None else {"Sequence number": seq, "Fwd thread id": fwd_tid}
    return _x(where, "cpu_op", name, ts, dur, **args)


def _ann(name, ts, dur):
    return _x(HOST, "user_annotation", name, ts, dur)


def _launch(ts, corr, where=HOST):
    return _x(where, "cuda_runtime", "cudaLaunchKernel", ts, 1, correlation=corr)


def _kernel(ts, dur, corr, cat="kernel"):
    return _x(GPU, cat, f"k{corr}", ts, dur, correlation=corr)


def _mem(ts, alloc, reserved, dtype=1):
    return {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]",
            "pid": 1, "tid": 1, "ts": ts, "args": {"Total Allocated": alloc,
                                                   "Total Reserved": reserved,
                                                   "Device Id": 0 if dtype else -1,
                                                   "Device Type": dtype}}


def hand_trace():
    """One step (0..1000 us). Device ns per bucket, worked out by hand in the test. One
    stream: each kernel's queued gap (NOTE [kineto attribution]) is its start less the
    later of its launch's end and the previous kernel's end."""
    ev = [
        _ann("vdnnsim.step#0", 0, 1000),
        _ann("Optimizer.zero_grad#SGD.zero_grad", 1, 4), _launch(2, 1),
        _kernel(10, 2, 1, cat="gpu_memset"),  # zero_grad: 2 us + a 7 us gap (launch ends at 3)
        _ann(MODULE_PREFIX, 10, 300),  # the root
        _op("aten::to", 12, 3, seq=6, fwd_tid=0),  # seq 6 too, but starts before relu
        _ann(MODULE_PREFIX + "fc", 20, 100),
        _op("aten::linear", 21, 90, seq=5, fwd_tid=0),
        _op("aten::addmm", 30, 70, seq=5, fwd_tid=0), _launch(40, 2),
        _kernel(100, 30, 2),  # fc forward: 30 us (its 59 us gap is over the bound)
        _op("aten::add", 125, 10, seq=7, fwd_tid=0), _launch(127, 4),
        _kernel(128, 5, 4),  # root forward: 5 us (overlaps the gemm by 2 us: no gap)
        _ann(MODULE_PREFIX + "act", 150, 50),
        _op("aten::relu", 155, 40, seq=6, fwd_tid=0),
        {**_launch(160, 3), "args": {}},  # linked only by the ac2g flow
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 3, "pid": 1, "tid": 1, "ts": 160},
        {**_kernel(170, 7, 3), "args": {}},  # act forward: 7 us + 9 us gap
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 3, "pid": 0, "tid": 7, "ts": 170,
         "bp": "e"},
        _op("aten::mse_loss", 320, 20, seq=8, fwd_tid=0), _launch(325, 5),
        _kernel(330, 4, 5),  # outside modules, forward: 4 us + 4 us gap
        _op("aten::item", 342, 10), _launch(344, 11),
        _kernel(346, 1.5, 11, cat="gpu_memcpy"),  # outside modules, forward: 1.5 + 1 us
        # backward, on the autograd thread
        _op("autograd::engine::evaluate_function: MseLossBackward0", 400, 20, 8, 1, BWD),
        _launch(405, 6, BWD), _kernel(410, 3, 6),  # outside modules, backward: 3 + 4 us
        _op("autograd::engine::evaluate_function: AddBackward0", 430, 10, 7, 1, BWD),
        _op("autograd::engine::evaluate_function: ReluBackward0", 450, 20, 6, 1, BWD),
        _launch(455, 7, BWD), _kernel(460, 6, 7),  # act backward: 6 + 4 us
        _op("autograd::engine::evaluate_function: AddmmBackward0", 480, 40, 5, 1, BWD),
        _op("AddmmBackward0", 481, 38, 5, 1, BWD), _op("aten::mm", 485, 30, where=BWD),
        _launch(490, 8, BWD), _kernel(495, 20, 8),  # fc backward: 20 + 4 us
        _op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 530, 10,
            where=BWD),
        _op("torch::autograd::AccumulateGrad", 531, 8, where=BWD), _launch(533, 9, BWD),
        _kernel(540, 2, 9),  # fc backward (the AccumulateGrad heuristic): 2 + 6 us
        _ann("Optimizer.step#SGD.step", 600, 50),
        _op("aten::_foreach_add_", 610, 20), _launch(612, 10),
        _kernel(620, 8, 10),  # optimizer: 8 + 7 us
        _kernel(700, 1, 99),  # no launch: unattributed, 1 us, no gap
        _launch(1100, 12), _kernel(1110, 0.5, 12),  # after the step: outside steps, 0.5 + 9
        _mem(100, 1000, 4096), _mem(200, 3000, 8192), _mem(300, 2000, 8192),
        _mem(310, 999999, 0, dtype=0),  # host memory: not the device's
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    ]
    return {"schemaVersion": 1, "traceEvents": ev}


def test_hand_gpu_trace():
    a = attribute(hand_trace())
    assert a.time_source == kineto.TIME_GPU
    assert a.outside_steps == kineto.Cost(device_ns=500 + 9_000, activities=1, gap_ns=9_000)
    [st] = a.steps
    assert (st.index, st.name, st.start_ns, st.end_ns, st.wall_ns) == (
        0, "vdnnsim.step#0", 0, 1_000_000, 1_000_000)
    assert list(st.modules) == ["", "fc", "act"]
    fc, act, root = st.modules["fc"], st.modules["act"], st.modules[""]
    assert (fc.forward.device_ns, fc.backward.device_ns) == (30_000, 22_000 + 10_000)
    assert (fc.forward.gap_ns, fc.backward.gap_ns) == (0, 10_000)
    assert fc.backward_nodes == {"AddmmBackward0": 1, "torch::autograd::AccumulateGrad": 1}
    assert (act.forward.device_ns, act.backward.device_ns) == (7_000 + 9_000, 6_000 + 4_000)
    assert act.backward_nodes == {"ReluBackward0": 1}  # the last seq-6 op, not aten::to
    assert (root.forward.device_ns, root.backward.device_ns) == (5_000, 0)
    assert root.backward_nodes == {"AddBackward0": 1}
    assert (st.outside.forward.device_ns, st.outside.backward.device_ns) == (
        5_500 + 5_000, 3_000 + 4_000)
    assert st.outside.backward_nodes == {"MseLossBackward0": 1}
    assert st.buckets == {"modules (forward)": 42_000 + 9_000,
                          "modules (backward)": 28_000 + 14_000,
                          "loss/outside modules": 8_500 + 9_000, "optimizer": 8_000 + 7_000,
                          "zero_grad": 2_000 + 7_000, "unattributed": 1_000}
    assert st.gap_ns == 46_000
    assert st.device_total_ns == 89_500 + 46_000 == sum(st.buckets.values())
    assert st.activities == 12
    assert st.device_busy_ns == 89_500 - 2_000  # the kernels' union: no gaps
    # host: forward exclusive of child ranges; backward the top-level backward ops
    assert (root.forward.host_ns, fc.forward.host_ns, act.forward.host_ns) == (
        150_000, 100_000, 50_000)
    assert (root.backward.host_ns, fc.backward.host_ns, act.backward.host_ns) == (
        10_000, 50_000, 20_000)
    assert (fc.forward.calls, fc.backward.calls, fc.forward.activities) == (1, 2, 1)
    assert st.outside.forward == kineto.Cost(5_500 + 5_000, 30_000, 2, 2, 5_000)
    assert st.outside.backward == kineto.Cost(3_000 + 4_000, 20_000, 1, 1, 4_000)
    assert st.optimizer == kineto.Cost(8_000 + 7_000, 50_000, 1, 1, 7_000)
    assert st.zero_grad == kineto.Cost(2_000 + 7_000, 4_000, 1, 1, 7_000)
    assert st.unattributed == kineto.Cost(1_000, 0, 0, 1)
    assert st.memory == {0: kineto.MemoryPeak(3000, 8192, 3)}
    text = "\n".join(a.warnings)
    assert "1 of 13 GPU activities have no launch" in text
    assert ("1000 ns (0.7%) of device time unattributed in 1 of 1 steps; most in "
            "vdnnsim.step#0: 1000 ns (0.7%)") in text
    assert "1 activities (9500 ns) ran outside every vdnnsim.step range" in text


def test_hand_trace_without_steps_is_one_step():
    d = hand_trace()
    d["traceEvents"] = [e for e in d["traceEvents"] if e["name"] != "vdnnsim.step#0"]
    a = attribute(d)
    [st] = a.steps
    assert (st.index, st.name) == (None, "whole trace")
    assert st.device_total_ns == 90_000 + 55_000 == sum(st.buckets.values())  # the late one too
    assert a.outside_steps == kineto.Cost()


def test_backward_op_without_forward_is_unattributed_loudly():
    d = hand_trace()
    for e in d["traceEvents"]:
        if e["name"] == "aten::relu":
            e["args"] = {}  # no forward op with sequence number 6 after aten::to ...
        if e["name"] == "aten::to":
            e["args"] = {}  # ... nor before
    a = attribute(d)
    st = a.steps[0]
    assert st.unattributed.device_ns == 1_000 + 6_000 + 4_000 and st.unattributed.calls == 1
    assert "act" in st.modules and st.modules["act"].backward.device_ns == 0
    assert "1 backward ops not attributed: ReluBackward0 (no forward op with sequence " \
        "number 6)" in a.warnings
    assert sum(st.buckets.values()) == st.device_total_ns


S7, S8 = (0, 7), (0, 8)  # two streams of device 0


def _on(stream, ts, dur, corr):
    return _x(stream, "kernel", f"k{corr}", ts, dur, correlation=corr)


def gap_trace():
    """NOTE [kineto attribution] (Gaps): one step, a forward module range per case; the
    kernels' queued gaps worked out by hand in the test."""
    ev = [
        _ann("vdnnsim.step#0", 0, 1000),
        _ann(MODULE_PREFIX + "a", 5, 15), _launch(10, 1),
        _on(S7, 11, 50, 1),  # starts as its launch returns: no gap
        _ann(MODULE_PREFIX + "b", 25, 15), _launch(30, 2),  # launched while k1 runs ...
        _on(S7, 64, 20, 2),  # ... and starts 3 us after k1 ends: a 3 us gap
        _ann(MODULE_PREFIX + "c", 95, 15), _launch(100, 3),  # launched after k2 ended:
        _on(S7, 103, 10, 3),  # only ts - launch end = 2 us
        _ann(MODULE_PREFIX + "d", 115, 15), _launch(120, 4),
        _on(S7, 181, 10, 4),  # 60 us after its launch: over the bound, no gap
        _ann(MODULE_PREFIX + "e", 198, 50),
        _launch(200, 5), _launch(203, 6),
        _on(S7, 206, 20, 6),  # 2 us after its launch, nothing on S8 meanwhile: 2 us
        _on(S8, 229, 10, 5),  # waited for k6 on the other stream: no gap (3 us after k6
        _launch(232, 7),      # ended, 28 after its own launch)
        _on(S7, 236, 4, 7),  # 3 us after its launch, but k5 runs on S8 meanwhile: no gap
        _on(S7, 242, 1, 99),  # no launch: unattributed, no gap
    ]
    return {"schemaVersion": 1, "traceEvents": ev}


def test_queued_gaps():
    a = attribute(gap_trace())
    assert a.warnings == ["1 of 8 GPU activities have no launch event (correlation / ac2g "
                          "flow): unattributed",
                          "1000 ns (0.8%) of device time unattributed in 1 of 1 steps; most "
                          "in vdnnsim.step#0: 1000 ns (0.8%)"]
    [st] = a.steps
    fwd = {p: (m.forward.device_ns, m.forward.gap_ns) for p, m in st.modules.items()}
    assert fwd == {"a": (50_000, 0), "b": (20_000 + 3_000, 3_000), "c": (10_000 + 2_000, 2_000),
                   "d": (10_000, 0), "e": (10_000 + 20_000 + 4_000 + 2_000, 2_000)}
    assert st.unattributed == kineto.Cost(1_000, 0, 0, 1)
    assert st.gap_ns == 7_000
    assert st.device_total_ns == 125_000 + 7_000 == sum(st.buckets.values())
    # the union of the kernels, gaps not in it: k5 and k7 overlap by 3 us
    assert st.device_busy_ns == 125_000 - 3_000
    assert kineto.GAP_BOUND_NS == 50_000


def test_queued_gap_bound_and_streams(monkeypatch):
    """The 60 us wait is counted under a larger bound; merged into one stream, k5 would
    take k6's end as its stream's and a 3 us gap: on its own stream it has none."""
    d = gap_trace()
    with monkeypatch.context() as m:
        m.setattr(kineto, "GAP_BOUND_NS", 60_000)
        assert attribute(d).steps[0].modules["d"].forward.gap_ns == 60_000
    for e in d["traceEvents"]:
        if e.get("tid") == 8:
            e["tid"] = 7
    st = attribute(d).steps[0]
    # one stream: k5 queued behind k6 (3 us), and k7 behind k5 (ts 236 < 239: none)
    assert st.modules["e"].forward.gap_ns == 2_000 + 3_000
    assert st.device_total_ns == sum(st.buckets.values())


def test_overlapping_steps_refused():
    d = hand_trace()
    d["traceEvents"].append(_ann("vdnnsim.step#1", 900, 200))
    with pytest.raises(ConfigError, match="overlap"):
        attribute(d)


# ---------------------------------------------------------------- load_trace

def test_load_trace_gz_round_trip(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps(hand_trace()).encode()))
    assert attribute(str(p)).steps[0].device_total_ns == 89_500 + 46_000


@pytest.mark.parametrize("content, expected", [
    ("{not json", "not JSON (line 1); expected a torch.profiler trace"),
    ('{"schemaVersion": 1}', "a JSON object without a traceEvents list; expected"),
    ("[1, 2]", "a JSON list; expected a torch.profiler trace"),
    ('{"traceEvents": [{"ph": "X", "cat": "fwd", "name": "conv1", "ts": 0, "dur": 1}]}',
     "hold no torch.profiler event"),
    (b"\xff\xfe", "not UTF-8 text"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "x", "dur": 1}]}',
     "trace event 0 ('a'): its ts/dur are not finite"),
])
def test_load_trace_errors(tmp_path, content, expected):
    p = tmp_path / "bad.json"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigError) as exc:
        attribute(str(p))
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(str(p)) and expected in msg


def test_load_trace_directory_and_missing(tmp_path):
    with pytest.raises(ConfigError, match=r"is a directory, not a torch.profiler trace"):
        load_trace(tmp_path)
    with pytest.raises(ConfigError, match=r"nope.json: no such file$"):
        load_trace(tmp_path / "nope.json")
    with pytest.raises(ConfigError, match="expected a torch.profiler trace file path"):
        load_trace(42)


def test_load_trace_gz_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(tracefile, "MAX_TRACE_BYTES", 100)
    p = tmp_path / "big.json.gz"
    p.write_bytes(gzip.compress(json.dumps(hand_trace()).encode()))
    with pytest.raises(ConfigError, match="more than 100 bytes once decompressed"):
        load_trace(p)


def test_cpu_ops_on_cuda_without_gpu_activity_warn():
    """Profiled without ProfilerActivity.CUDA: the self times stand in, and it says so."""
    d = {"traceEvents": [
        _op("aten::mm", 0, 10), _op("aten::empty", 2, 3),
        _mem(3, 4096, 2 << 20), _mem(4, 512, 0, dtype=0)]}
    a = attribute(d)
    assert a.time_source == kineto.TIME_CPU
    st = a.steps[0]
    assert st.outside.forward == kineto.Cost(10_000, 10_000, 1, 2)
    assert st.memory == {0: kineto.MemoryPeak(4096, 2 << 20, 1)}  # the GPU's, not the host's
    assert any("CUDA memory events but no GPU activity" in w for w in a.warnings)
