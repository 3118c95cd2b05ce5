"""NOTE [module timing]: the profiler of any model: the op probe on a real device, block
regions, the split of measured module times over ops, the profile's own check
(NOTE [profile check]), ``vdnnsim profile --model hf:...``.
On a CPU (the wall clock standing in for events) everywhere; the last test on a CUDA GPU
only, against vdnnsim's own measurement harness."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from vdnnsim.api import resolve_gpu, run_trace  # noqa: E402
from vdnnsim.cli import main  # noqa: E402
from vdnnsim.gpu.probe import aten as aten_probe  # noqa: E402
from vdnnsim.gpu.probe.aten import choose_blocks, find_blocks, module_paths, probe_ops  # noqa: E402,E501
from vdnnsim.gpu.profile.layers import assemble  # noqa: E402
from vdnnsim.gpu.profile.ops import check_profile, module_regions, split_times  # noqa: E402
from vdnnsim.trace.optimizer import with_optimizer  # noqa: E402
from vdnnsim.trace import load_trace, trace_from_dict  # noqa: E402

from .conftest import HAS_HF  # noqa: E402

needs_hf = pytest.mark.skipif(not HAS_HF, reason="needs transformers")
TINY_GPT2 = ["--model-arg", "n_layer=2", "--model-arg", "n_embd=64", "--model-arg",
             "n_head=4", "--model-arg", "vocab_size=500"]


class _Net(nn.Module):
    def __init__(self, n: int = 3, d: int = 32):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(),
                                                  nn.Linear(4 * d, d)) for _ in range(n))
        self.small = nn.ModuleList([nn.Linear(d, d), nn.Linear(d, d)])  # fewer parameters
        self.out = nn.Linear(d, 10)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = x + b(x)
        return self.out(x)


def _loss(m, b):
    return nn.functional.cross_entropy(m(b["x"]), b["y"])


def test_blocks_are_the_largest_module_list():
    net = _Net()
    assert find_blocks(net) == list(net.blocks)
    assert find_blocks(nn.Sequential(nn.Linear(2, 2))) == []


def test_regions_follow_the_blocks():
    net = _Net(n=3)
    calls = []
    handles = module_paths(net, lambda path: None, calls)
    net(torch.randn(2, 32))
    for h in handles:
        h.remove()
    # every call with the call it ran in: the root, then its children in call order
    assert calls[0] == ("", -1) and calls[1] == ("inp", 0)
    assert [c for c in calls if c[0] == "blocks.1.0"] == [("blocks.1.0", 6)]
    b = {"x": torch.randn(4, 32), "y": torch.randint(0, 10, (4,))}
    p = probe_ops(net, b, _loss, "net", None)
    assert p.blocks == ["blocks.0", "blocks.1", "blocks.2"]  # the ModuleList's items
    regions = [n.attrs["block"] for n in p.nodes]
    assert [n.attrs.get("block_path") for n in p.nodes if "block_path" in n.attrs] == \
        p.blocks
    assert regions == sorted(regions) and set(regions) == {0, 1, 2, 3, 4}
    # each block region holds its two linears (addmm), the head its linear and the loss
    assert [n.op for n in p.nodes if n.attrs["block"] == 2].count("aten.addmm.default") == 2
    assert any("log_softmax" in n.op for n in p.nodes if n.attrs["block"] == 4)


def test_probe_without_holding_outputs_is_the_same_graph(monkeypatch):
    """On a real device the recorder lets dead outputs go (a finalizer forgets their
    storage); the graph must be what holding every output gives."""
    net = _Net(n=2)
    b = {"x": torch.randn(8, 32), "y": torch.randint(0, 10, (8,))}

    def graph(hold: bool):
        real = aten_probe._Recorder.__init__

        def init(self, params, data, hold_all=True):
            real(self, params, data, hold_all=hold)
        monkeypatch.setattr(aten_probe._Recorder, "__init__", init)
        p = probe_ops(net, b, _loss, "net", None)
        monkeypatch.undo()
        return [(n.name, n.inputs, [(s.tensor, s.nbytes, s.role) for s in n.saved],
                 n.out_nbytes, n.alias_of) for n in p.nodes]
    assert graph(False) == graph(True)


def test_split_keeps_each_region_total_and_replays_a_gpu_bound_step():
    """Each region's measured GPU and host times are spread over its ops and sum back;
    replayed by the engine with the host far ahead, the passes end where the profile's
    did."""
    net = _Net(n=2)
    b = {"x": torch.randn(8, 32), "y": torch.randint(0, 10, (8,))}
    p = probe_ops(net, b, _loss, "net", None)
    t = {"fwd_ms": [1.0, 2.0, 3.0, 0.5], "bwd_ms": [0.25, 4.0, 6.0, 1.0],
         "host_fwd_ms": [0.01, 0.02, 0.03, 0.04], "host_bwd_ms": [0.04, 0.03, 0.02, 0.01]}
    times, hosts = split_times(p.nodes, t, resolve_gpu("h200"))
    for r in range(4):
        ops = [n for n in p.nodes if n.attrs["block"] == r]
        for k, key in ((0, "fwd_ms"), (1, "bwd_ms")):
            assert sum(times[n.name][k] for n in ops) == pytest.approx(t[key][r] * 1e6,
                                                                       abs=len(ops))
            assert sum(hosts[n.name][k] for n in ops) == pytest.approx(
                t["host_" + key][r] * 1e6, abs=len(ops))
    trace = trace_from_dict(assemble(p, times=times, hosts=hosts), "net")
    r = run_trace(trace, resolve_gpu("h200"), "eager", record=False)
    assert r.forward_time_ns / 1e6 == pytest.approx(sum(t["fwd_ms"]), rel=0.01)
    assert r.iteration_time_s * 1e3 == pytest.approx(sum(t["fwd_ms"]) + sum(t["bwd_ms"]),
                                                     rel=0.01)
    mm = [n for n in p.nodes if n.flops]
    assert mm and all(times[n.name][0] > 0 for n in mm)  # a matmul is never free
    views = [n for n in p.nodes if n.alias_of is not None and n.kind == "flatten"]
    assert all(times[n.name][:2] == (0, 0) for n in views)


@needs_hf
def test_profile_cli_on_cpu(tmp_path, capsys):
    out = tmp_path / "g.yaml.gz"
    rc = main(["profile", "--model", "hf:gpt2", *TINY_GPT2, "--seq-len", "16", "-b", "2",
               "--device", "cpu", "--trials", "1", "-o", str(out)])
    assert rc == 0
    t = load_trace(out)
    assert t.source.kind == "profiled" and t.layers
    assert t.source.host_probe_ns > 0  # NOTE [host probe]
    assert "(0.0% of it idle gaps between kernels)" in t.source.note  # a CPU has none
    blocks = {layer.attrs["block"] for layer in t.layers}
    assert blocks == {0, 1, 2, 3}
    assert sum(layer.algos[0].fwd_ns for layer in t.layers) > 0
    r = run_trace(with_optimizer(t, "adamw"), resolve_gpu("h200"), "eager", record=False)
    assert not r.oom and r.iteration_time_s > 0


def test_profile_cli_bad_input(tmp_path, capsys):
    rc = main(["profile", "--model", "hf:no-such-model", "-b", "2", "--device", "cpu",
               "-o", str(tmp_path / "x.yaml")])
    assert rc == 2
    assert "no-such-model" in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()


@needs_hf
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("precision", ["fp32", "autocast-bf16"])
def test_profiled_gpt2_predicts_its_measurement(precision):
    """On the GPU: a profiled GPT-2 (4 layers) replayed against vdnnsim measure's own run
    of the same step, in another order (the profile first)."""
    from vdnnsim.gpu.measure.harness import measure
    from vdnnsim.gpu.profile.ops import profile_workload

    kw = {"n_layer": 4}
    d = profile_workload("hf:gpt2", 8, precision, 256, model_kwargs=kw)
    gc.collect()  # nothing of the profile may stay on the GPU (measure collects too)
    assert torch.cuda.memory_allocated() < 2**27  # the cuBLAS workspaces stay (resident)
    rec = measure("hf:gpt2", 8, dtype=precision, optimizer="adamw", seq_len=256,
                  model_kwargs=kw)
    trace = with_optimizer(trace_from_dict(d, "gpt2"), "adamw")
    sim = run_trace(trace, resolve_gpu("h200"), "eager", record=False)
    assert sim.peak_memory_bytes == pytest.approx(rec["peak_allocated_bytes"], rel=0.02)
    assert sim.iteration_time_s * 1e3 == pytest.approx(rec["iteration_ms"], rel=0.15)


@pytest.mark.slow
def test_committed_profiles_predict_the_h200_runs():
    """Issue 14's targets on the committed profiles (traces/h200_transformers/profiled) against the
    runs measured after them: peak allocated memory 2% median / 5% max (met on every set);
    step time 5% median (met on the main set) / 15% max (missed on the host-bound runs,
    pinned here: docs/validation.md, "Transformers, profiled")."""
    import statistics
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parents[1] / "experiments" / "transformers"
    sys.path.insert(0, str(here))
    try:
        from profiled_check import rows
        got = list(rows("all"))
    finally:
        sys.path.remove(str(here))
    assert len(got) == 46
    for which in ("main", "heldout", "extra"):
        mem = [abs(sim.peak_memory_bytes / r["peak_allocated_bytes"] - 1)
               for name, r, _, sim, _ in got if name == which]
        assert statistics.median(mem) <= 0.02 and max(mem) <= 0.05, which
    main_t = [abs(sim.iteration_time_s * 1e3 / r["iteration_ms"] - 1)
              for name, r, _, sim, _ in got if name == "main"]
    assert statistics.median(main_t) <= 0.05
    assert 0.15 < max(main_t) < 0.20  # Llama-1B bf16 at 512 tokens (docs/validation.md)
    # the replay against the profile's own plain step: the model's part of a miss
    replay = [abs(sim.iteration_time_s * 1e3 / plain - 1) for _, _, _, sim, plain in got]
    assert statistics.median(replay) <= 0.01 and max(replay) <= 0.10


def _module_times(mods, host_fwd=1.0, host_bwd=1.0):
    return {"modules": mods, "host_fwd_pass_ms": host_fwd, "host_bwd_pass_ms": host_bwd}


def test_a_module_without_ops_gives_its_time_to_the_nearest_one_with_some():
    """NOTE [module timing]: every measured ns lands on an op: a path the probe saw no op
    of goes up to its nearest enclosing path that has some; host times are scaled to the
    plain steps' issue times in the profiler's proportions."""
    net = _Net(n=2)
    b = {"x": torch.randn(8, 32), "y": torch.randint(0, 10, (8,))}
    p = probe_ops(net, b, _loss, "net", None)
    have = {n.attrs["module"] for n in p.nodes}
    assert {"inp", "blocks.0.0", "blocks.0.1", "out", aten_probe.OUTSIDE} <= have
    ms = 1e6
    mods = {"blocks.0.0": {"fwd": 2 * ms, "bwd": 4 * ms, "hf": 0.4 * ms, "hb": 0.2 * ms},
            "blocks.0.2.nothing": {"fwd": 1 * ms, "bwd": 1 * ms, "hf": 0.4 * ms, "hb": 0.2 * ms},
            "blocks.1": {"fwd": 3 * ms, "bwd": 5 * ms, "hf": 0.2 * ms, "hb": 0.6 * ms},
            aten_probe.OUTSIDE: {"fwd": 0.5 * ms, "bwd": 0.5 * ms, "hf": 0, "hb": 0}}
    r = module_regions(p.nodes, _module_times(mods, host_fwd=0.5, host_bwd=2.0))
    assert r["fwd_ms"]["blocks.0.0"] == 2 and r["fwd_ms"]["blocks.0.2"] == 1
    assert "blocks.1" not in r["fwd_ms"] and r["bwd_ms"][""] == 5  # no op of its own
    assert sum(r["fwd_ms"].values()) == pytest.approx(6.5)
    assert sum(r["host_fwd_ms"].values()) == pytest.approx(0.5)  # the plain steps' total
    assert sum(r["host_bwd_ms"].values()) == pytest.approx(2.0)
    assert r["host_fwd_ms"]["blocks.0.0"] == pytest.approx(0.2)  # its share of 1.0: 0.4
    times, hosts = split_times(p.nodes, r, resolve_gpu("h200"), key="module")
    assert sum(v[0] for v in times.values()) == pytest.approx(6.5e6, abs=len(times))
    assert sum(v[1] for v in times.values()) == pytest.approx(10.5e6, abs=len(times))


def test_the_profile_check_refuses_a_profile_that_loses_time():
    """NOTE [profile check]: lost GPU time, or a replay off the plain steps by more than
    they repeat, is the reason the profile is refused; within both it passes."""
    net = _Net(n=2)
    b = {"x": torch.randn(8, 32), "y": torch.randint(0, 10, (8,))}
    p = probe_ops(net, b, _loss, "net", None)
    fwd = {n.name: (1_000_000, 2_000_000, 0, 0) for n in p.nodes}
    d = assemble(p, times=fwd, source={"kind": "profiled", "gpu": "h200"})
    n = len(p.nodes)
    base = {"device_total_ns": 3e6 * n, "outside_steps_ns": 0, "unattributed_ns": 0}
    gpu = resolve_gpu("h200")
    r = run_trace(trace_from_dict(d, "t"), gpu, "eager", record=False)
    ms = r.iteration_time_ns / 1e6
    ok = {**base, "plain_ms": ms * 1.05, "plain_min_ms": ms, "plain_max_ms": ms * 1.06}
    assert check_profile(d, ok, gpu, cuda=True) is None
    lost = {**ok, "unattributed_ns": 0.05 * base["device_total_ns"]}
    assert "could not be given to a module" in check_profile(d, lost, gpu, cuda=True)
    slow = {**ok, "plain_ms": ms * 2, "plain_min_ms": ms * 1.95, "plain_max_ms": ms * 2.05}
    why = check_profile(d, slow, gpu, cuda=True)
    assert why and "replays in" in why and "-50.0%" in why
    noisy = {**slow, "plain_min_ms": ms * 1.2, "plain_max_ms": ms * 3.2}  # repeats within 100%
    assert check_profile(d, noisy, gpu, cuda=True) is None
    assert check_profile(d, slow, gpu, cuda=False) is None  # a CPU: the attribution only


class _Cnn(nn.Module):
    """No ModuleList: a stem, two Sequential stages of blocks, a ReLU shared by every
    call, a module called twice and a head (NOTE [blocks])."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.ReLU()
        self.stages = nn.Sequential(*[nn.Sequential(*[nn.Conv2d(8, 8, 3, padding=1)
                                                      for _ in range(3)]) for _ in range(2)])
        self.twice = nn.Conv2d(8, 8, 1)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        x = self.act(self.stem(x))
        for s in self.stages:
            for c in s:
                x = self.act(c(x))
        x = self.twice(self.twice(x))
        return self.head(x.mean((2, 3)))


def test_blocks_of_a_model_without_a_module_list_are_cut_from_its_calls():
    net = _Cnn()
    b = {"x": torch.randn(2, 3, 8, 8), "y": torch.randint(0, 10, (2,))}
    p = probe_ops(net, b, _loss, "cnn", None)
    # the stages opened into their convolutions; the shared ReLU (no parameters) and the
    # module called twice are no blocks
    assert p.blocks == ["stem"] + [f"stages.{i}.{j}" for i in range(2) for j in range(3)] + \
        ["head"]
    regions = [n.attrs["block"] for n in p.nodes]
    assert regions == sorted(regions)
    # the convolution called twice runs in the region of the block before it
    twice = [n for n in p.nodes if n.attrs["module"] == "twice"]
    assert len(twice) == 2 and {n.attrs["block"] for n in twice} == {7}
    assert [n.attrs["block_path"] for n in p.nodes if "block_path" in n.attrs] == p.blocks


class _SharedAct(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.act = act

    def forward(self, x):
        return self.act(self.fc(x))


def test_a_module_shared_by_blocks_runs_in_the_block_that_calls_it():
    """NOTE [blocks]: one GELU in four blocks is named by its first path (blocks 1's); its
    ops in later blocks stay in those blocks' regions (the review found them sent back)."""
    act = nn.GELU()
    net = nn.Sequential(nn.Linear(32, 32), *[_SharedAct(act) for _ in range(4)],
                        nn.Linear(32, 10))
    b = {"x": torch.randn(4, 32), "y": torch.randint(0, 10, (4,))}
    p = probe_ops(net, b, _loss, "seq", None)
    assert p.blocks == ["0", "1", "2", "3", "4", "5"]
    regions = [n.attrs["block"] for n in p.nodes]
    assert regions == sorted(regions)
    gelus = [n.attrs["block"] for n in p.nodes if n.attrs["module"] == "1.act"]
    assert gelus == [2, 3, 4, 5]
    assert [n.attrs["block_path"] for n in p.nodes if "block_path" in n.attrs] == p.blocks


def test_the_memory_step_reads_the_allocator_between_backward_and_the_optimizer(monkeypatch):
    """NOTE [module timing]: step_memory's CUDA readings, on a CPU with the allocator's
    statistics stood in for: what is allocated before the optimizer is read once the
    gradients are there and before AdamW has made its state (NOTE [training step]'s
    "backward" mark), the peak after its step; the gradients are freed at the end."""
    from vdnnsim.gpu.profile.ops import step_memory
    from vdnnsim.gpu.model.workload import build_workload, training_step
    w = build_workload("torch.nn:Linear", input_spec="image:1,1,12:7",
                       model_kwargs={"in_features": 12, "out_features": 7})
    step = training_step(w, 3, "cpu", "fp32", "adamw")
    calls = []

    def read(what, value=None):
        def call():
            grads = all(p.grad is not None for p in w.model.parameters())
            calls.append((what, grads, len(step.optimizer.state)))
            return value
        return call
    monkeypatch.setattr(torch.cuda, "synchronize", read("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", read("reset"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", read("allocated", 100))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", read("peak", 160))
    state, temp = step_memory(step, cuda=True)
    assert calls == [("sync", True, 0), ("reset", True, 0), ("allocated", True, 0),
                     ("peak", True, 2)]
    assert (state, temp) == (0, 60)  # the moments are on the CPU: not the device's state
    assert all(p.grad is None for p in w.model.parameters())
