"""Hand-computed answers on three- and four-layer traces.

Units: U = 1 MiB; the test GPU's link moves U in exactly 1 ms (1e6 ns) each way, so every
number below can be checked on paper. Times in the traces are ns.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from vdnnsim import run_trace
from vdnnsim.engine.allocator import Pool
from vdnnsim.policies import find_prefetch_schedule, liveness, offload_sets
from vdnnsim.policies.plan import policy_marks
from vdnnsim.trace import trace_from_dict

from .conftest import chain_trace, hand_gpu

U = 2**20
MS = 1_000_000
GPU = hand_gpu(bw=U * 1000.0)  # U per ms


def three_convs(bwd2: int = MS // 2):
    return chain_trace([
        {"id": "c1", "size": U, "fwd": MS, "bwd": MS},
        {"id": "c2", "size": U, "fwd": MS, "bwd": bwd2},
        {"id": "c3", "size": U, "fwd": MS, "bwd": MS},
    ], input_bytes=U)


def test_baseline_holds_everything_for_the_whole_iteration():
    t = chain_trace([
        {"id": "c1", "size": 2 * U, "fwd": 3 * MS, "bwd": 5 * MS, "weight": U, "ws": U},
        {"id": "r1", "kind": "relu", "inplace": True, "saves": "y", "fwd": MS, "bwd": MS},
        {"id": "c2", "size": U, "fwd": 2 * MS, "bwd": 4 * MS, "weight": U // 2},
    ], input_bytes=U)
    r = run_trace(t, GPU, "baseline_p")
    # buffers data 1 + c1 2 (r1 aliases it) + c2 1 = 4U; W + dW = 3U; two gradient
    # buffers of the largest gradient (c1: 2U) = 4U; one workspace of 1U
    assert r.peak_memory_bytes == 12 * U
    assert r.avg_memory_bytes == 12 * U
    assert r.iteration_time_ns == (3 + 1 + 2) * MS + (5 + 1 + 4) * MS
    assert r.slowdown == 1.0
    assert r.offloaded_bytes == r.prefetched_bytes == 0
    assert r.fits


def test_vdnn_all_memory_and_prefetch_stall():
    r = run_trace(three_convs(), GPU, "vdnn_all_m")
    # forward: every offload (1 ms) exactly covers its layer (1 ms): no stall, 3 ms.
    # backward c3: its input c2 was offloaded and nobody prefetched it: on-demand fetch,
    #   1 ms stall; then the prefetch of c1's output (for c2) runs under c3's 1 ms.
    # backward c2: prefetch of data (1 ms) outlasts c2's 0.5 ms: 0.5 ms stall at the sync.
    # backward c1: 1 ms.
    assert r.forward_time_ns == 3 * MS
    assert r.iteration_time_ns == 3 * MS + (1 + 1 + 0.5 + 0.5 + 1) * MS
    assert r.stall_time_ns == int(1.5 * MS)
    assert r.offloaded_bytes == r.prefetched_bytes == 3 * U
    # peak: during c3's backward: fetched c2 out + prefetched c1 out + dY(c3) + dX(c2)
    assert r.peak_memory_bytes == 4 * U


def test_offload_longer_than_its_layer_stalls_the_next_layer():
    t = chain_trace([
        {"id": "c1", "size": 2 * U, "fwd": MS // 2, "bwd": MS},
        {"id": "c2", "size": U, "fwd": MS, "bwd": 2 * MS},
    ], input_bytes=U)
    r = run_trace(t, GPU, "vdnn_all_m")
    # forward c1: offloading data (1 ms) outlasts c1 (0.5 ms): 0.5 ms stall.
    # forward c2: offloading c1's output (2 ms) outlasts c2 (1 ms): 1 ms stall.
    assert r.forward_time_ns == 3 * MS
    # backward c2: its own input is fetched on demand first (2 ms stall); the prefetch of
    # data queues behind it on the H2D engine (done at +3 ms, inside c2's 2 ms backward).
    # backward c1: 1 ms.
    assert r.iteration_time_ns == 3 * MS + (2 + 2 + 1) * MS
    assert r.stall_time_ns == int(3.5 * MS)
    tl = r.timeline
    stalls = tl[tl.kind == "stall"]
    assert list(stalls.dur_ns) == [MS // 2, MS, 2 * MS]


def test_vdnn_conv_offloads_only_conv_inputs():
    t = chain_trace([
        {"id": "c1", "size": U, "fwd": MS, "bwd": MS},
        {"id": "p1", "kind": "maxpool", "size": U, "saves": "xy", "fwd": MS, "bwd": MS},
        {"id": "c2", "size": U, "fwd": MS, "bwd": MS},
    ], input_bytes=U)
    lv = liveness(t)
    assert offload_sets(t, lv, conv_only=True) == (("data",), (), ("p1",))
    assert offload_sets(t, lv, conv_only=False) == (("data",), ("c1",), ("p1",))
    r = run_trace(t, GPU, "vdnn_conv_p")
    assert r.offloaded_bytes == 2 * U
    assert r.prefetched_bytes == 2 * U


def test_find_prefetch_layer_stops_at_the_next_conv():
    t = chain_trace([
        {"id": "c1", "fwd": 1, "bwd": 1},
        {"id": "r1", "kind": "relu", "inplace": True, "saves": "y", "fwd": 1, "bwd": 1},
        {"id": "p1", "kind": "maxpool", "saves": "xy", "fwd": 1, "bwd": 1},
        {"id": "c2", "fwd": 1, "bwd": 1},
        {"id": "c3", "fwd": 1, "bwd": 1},
    ])
    # offloads under vdnn_conv: c1 (data), c2 (p1), c3 (c2); none at r1 or p1
    off = offload_sets(t, liveness(t), conv_only=True)
    assert [bool(o) for o in off] == [True, False, False, True, True]
    sched = find_prefetch_schedule(t, off)
    # before c3's backward: c2 (offloaded). Before c2's: scan p1, r1 (not offloaded), c1
    # (offloaded). Before p1's: r1, then c1 already prefetched and a CONV: stop.
    assert sched == (-1, -1, -1, 0, 3)


def test_fork_offloads_once_at_the_last_reader():
    t = trace_from_dict({
        "format": "vdnnsim-trace", "version": 1, "name": "fork", "batch_size": 1,
        "tensors": [{"id": "data", "size_bytes": U, "kind": "input"},
                    {"id": "s", "size_bytes": U}, {"id": "a", "size_bytes": U},
                    {"id": "b", "size_bytes": U}, {"id": "j", "size_bytes": 2 * U}],
        "layers": [
            {"id": "s", "kind": "conv", "inputs": ["data"], "outputs": ["s"],
             "saved": ["data"], "fwd_ns": MS, "bwd_ns": MS},
            {"id": "a", "kind": "conv", "inputs": ["s"], "outputs": ["a"], "saved": ["s"],
             "fwd_ns": MS, "bwd_ns": MS},
            {"id": "b", "kind": "conv", "inputs": ["s"], "outputs": ["b"], "saved": ["s"],
             "fwd_ns": MS, "bwd_ns": MS},
            {"id": "j", "kind": "concat", "inputs": ["a", "b"], "outputs": ["j"],
             "saved": [], "fwd_ns": MS, "bwd_ns": MS},
        ]})
    off = offload_sets(t, liveness(t), conv_only=False)
    assert off == (("data",), (), ("s",), ())  # s moves once, after its last reader b
    r = run_trace(t, GPU, "vdnn_all_m")
    assert r.offloaded_bytes == r.prefetched_bytes == 2 * U
    # the gradient of s is written by b's backward and accumulated by a's: one buffer
    assert r.fits


def _conv_and_pool_fork(pytorch: bool = False):
    """data -> conv s; s read by conv a, then by maxpool p (its last reader); a and p
    joined."""
    t = trace_from_dict({
        "format": "vdnnsim-trace", "version": 1, "name": "fork2", "batch_size": 1,
        "tensors": [{"id": "data", "size_bytes": U, "kind": "input"},
                    {"id": "s", "size_bytes": U}, {"id": "a", "size_bytes": U},
                    {"id": "p", "size_bytes": U}, {"id": "j", "size_bytes": 2 * U}],
        "layers": [
            {"id": "s", "kind": "conv", "inputs": ["data"], "outputs": ["s"],
             "saved": ["data"], "fwd_ns": MS, "bwd_ns": MS},
            {"id": "a", "kind": "conv", "inputs": ["s"], "outputs": ["a"], "saved": ["s"],
             "fwd_ns": MS, "bwd_ns": MS},
            {"id": "p", "kind": "maxpool", "inputs": ["s"], "outputs": ["p"],
             "saved": ["s", "p"], "fwd_ns": MS, "bwd_ns": MS},
            {"id": "j", "kind": "concat", "inputs": ["a", "p"], "outputs": ["j"],
             "saved": [], "fwd_ns": MS, "bwd_ns": MS},
        ]})
    return replace(t, source=replace(t.source, framework="pytorch")) if pytorch else t


def test_vdnn_conv_moves_what_a_conv_reads_even_when_a_pool_reads_it_last():
    """NOTE [conv offload at forks]: s is a conv's input, read last by the pool: the
    paper's runtime moves it (Fig. 12's GoogLeNet bytes), copied by the pool, which then
    carries the offloaded mark so that findPrefetchLayer brings it back."""
    t = _conv_and_pool_fork()
    off = offload_sets(t, liveness(t), conv_only=True)
    assert off == (("data",), (), ("s",), ())
    assert policy_marks(t, "conv", "measured") == (True, True, True, False)
    r = run_trace(t, GPU, "vdnn_conv_m")
    assert r.offloaded_bytes == r.prefetched_bytes == 2 * U
    assert r.fits


def test_pytorch_traces_keep_the_last_reader_rule_of_their_runtime():
    """vdnnsim's PyTorch runtime offloads from the conv modules' hooks: a buffer a pool
    reads last stays, as the runtime that was measured does."""
    t = _conv_and_pool_fork(pytorch=True)
    assert offload_sets(t, liveness(t), conv_only=True) == ((), (), (), ())


def test_the_baseline_keeps_a_third_gradient_buffer_where_the_network_forks():
    """NOTE [fork gradient buffer]: s is read by a and by b, so its gradient is summed in
    a buffer of its own beside the two the baseline reuses; a chain keeps two."""
    from vdnnsim.engine.plan import grad_buffers
    fork = _conv_and_pool_fork()
    r = run_trace(fork, GPU, "baseline_p")
    assert grad_buffers(fork, liveness(fork)) == 3
    assert r.peak_breakdown["gradients"] == 3 * 2 * U  # the largest gradient: j's, 2U
    chain = three_convs()
    assert grad_buffers(chain, liveness(chain)) == 2
    assert run_trace(chain, GPU, "baseline_p").peak_breakdown["gradients"] == 2 * U


def _join(relu_in_place: bool = False):
    """Two convs on the input joined (j), read by conv c, or by an in-place ReLU r on the
    join and c after it."""
    head = "r" if relu_in_place else "j"
    tensors = [{"id": "data", "size_bytes": U, "kind": "input"},
               {"id": "a", "size_bytes": U}, {"id": "b", "size_bytes": U},
               {"id": "j", "size_bytes": 2 * U}, {"id": "c", "size_bytes": U}]
    layers = [{"id": x, "kind": "conv", "inputs": ["data"], "outputs": [x],
               "saved": ["data"], "fwd_ns": MS, "bwd_ns": MS} for x in ("a", "b")]
    layers.append({"id": "j", "kind": "concat", "inputs": ["a", "b"], "outputs": ["j"],
                   "saved": [], "fwd_ns": MS, "bwd_ns": MS})
    if relu_in_place:
        tensors.append({"id": "r", "size_bytes": 2 * U, "alias_of": "j"})
        layers.append({"id": "r", "kind": "relu", "inputs": ["j"], "outputs": ["r"],
                       "saved": ["r"], "fwd_ns": MS, "bwd_ns": MS})
    layers.append({"id": "c", "kind": "conv", "inputs": [head], "outputs": ["c"],
                   "saved": [head], "fwd_ns": MS, "bwd_ns": MS})
    return trace_from_dict({"format": "vdnnsim-trace", "version": 1, "name": "join",
                            "batch_size": 1, "tensors": tensors, "layers": layers})


def test_the_papers_runtime_lets_branches_write_into_the_join():
    """NOTE [join as view]: under the vDNN policies a Torch7 join holds no bytes of its
    own and its readers read the branches' outputs; the baseline keeps Torch's copy."""
    from vdnnsim.policies.plan import join_view
    t = _join()
    v = join_view(t)
    assert v.tensors["j"].size_bytes == 0 and v.layers[3].inputs == ("a", "b")
    assert v.layers[3].saved == ("a", "b") and join_view(t) is v  # worked out once
    r = run_trace(t, GPU, "vdnn_all_m")
    assert r.offloaded_bytes == 3 * U  # data, a and b (the join's 2U is theirs), not 5U
    assert run_trace(t, GPU, "baseline_p").peak_breakdown["activations"] == 6 * U  # j copies
    pt = replace(t, source=replace(t.source, framework="pytorch"))
    assert join_view(pt) is pt  # torch.cat copies


def test_a_join_written_in_place_keeps_its_copy():
    """NOTE [join as view]: a ReLU in place on the join needs the join's own buffer (the
    fuzz campaign's case); the join stays a copy and the run keeps its invariants."""
    from vdnnsim.policies.plan import join_view
    t = _join(relu_in_place=True)
    v = join_view(t)
    assert v.tensors["j"].size_bytes == 2 * U and v.layers[3].inputs == ("j",)
    assert run_trace(t, GPU, "vdnn_all_m").fits


def test_in_place_relu_buffer_moves_once():
    t = chain_trace([
        {"id": "c1", "size": U, "fwd": MS, "bwd": MS},
        {"id": "r1", "kind": "relu", "inplace": True, "saves": "y", "fwd": MS, "bwd": MS},
        {"id": "c2", "size": U, "fwd": MS, "bwd": MS},
    ], input_bytes=U)
    off = offload_sets(t, liveness(t), conv_only=False)
    assert off == (("data",), (), ("c1",))  # r1 overwrites c1 in place: never offloads it
    r = run_trace(t, GPU, "vdnn_all_m")
    assert r.offloaded_bytes == r.prefetched_bytes == 2 * U


def test_algorithm_choice_m_and_p():
    algos = [{"name": "implicit_gemm", "fwd_ns": 4 * MS, "bwd_ns": 8 * MS},
             {"name": "fft", "fwd_ns": MS, "bwd_ns": 2 * MS, "fwd_workspace_bytes": 3 * U,
              "bwd_workspace_bytes": 5 * U}]
    t = chain_trace([{"id": "c1", "size": U, "algos": algos}], input_bytes=U)
    m, p = run_trace(t, GPU, "baseline_m"), run_trace(t, GPU, "baseline_p")
    assert m.iteration_time_ns == 12 * MS and p.iteration_time_ns == 3 * MS
    assert p.peak_memory_bytes - m.peak_memory_bytes == 5 * U  # the larger workspace
    assert m.slowdown == 4.0 and p.slowdown == 1.0
    # layer-wise: the workspace lives only while its pass runs
    lw = run_trace(t, GPU, "vdnn_all_p")
    assert lw.algos == ("fft",)


def test_out_of_memory_names_tensor_layer_and_time():
    t = three_convs()
    r = run_trace(t, GPU, "vdnn_all_m", memory_bytes=3 * U)
    assert not r.fits
    assert (r.oom.layer, r.oom.phase, r.oom.tensor) == ("c3", "backward", "grad:c2")
    assert r.oom.time_ns == 4 * MS  # after the 1 ms on-demand fetch that opened c3's step
    assert r.peak_memory_bytes == 4 * U  # what it would have needed
    assert run_trace(t, GPU, "vdnn_all_m", memory_bytes=4 * U).fits


def test_no_sync_releases_on_copy_completion():
    t = chain_trace([
        {"id": "c1", "size": 2 * U, "fwd": MS // 2, "bwd": MS},
        {"id": "c2", "size": U, "fwd": MS, "bwd": 2 * MS},
    ], input_bytes=U)
    synced = run_trace(t, GPU, "vdnn_all_m")
    free = run_trace(t, GPU, "vdnn_all_m", {"sync": False})
    assert free.forward_time_ns == int(1.5 * MS)  # no end-of-layer waits
    assert free.iteration_time_ns < synced.iteration_time_ns
    # but a buffer leaves the GPU only once its copy has landed AND its layer is done:
    # data (1U) lands at 1 ms, after c1 ended at 0.5 ms: released then. c1's output (2U)
    # queues behind data on the D2H engine and would land at 3 ms; backward starts at 1.5 ms
    # and needs it first, so it never leaves: only data is fetched back.
    m = free.memory.set_index("time_ns").allocated_bytes
    assert m[MS // 2] == 4 * U  # data + c1 out + c2 out
    assert m[MS] == 3 * U  # data released on landing
    assert m[int(1.5 * MS)] == 6 * U  # c1 out kept, data back, dY(c2), dX(c2)
    assert free.prefetched_bytes == U and free.offloaded_bytes == 3 * U


def test_half_duplex_link_serialises_directions():
    """Without the end-of-layer sync, c2's 4 ms offload of c1's output is still on the
    link when backward prefetches data (1 ms) at 2 ms. Duplex: the prefetch runs beside it,
    lands at 3 ms, and c1's backward starts on time. Half duplex: it waits for the offload
    to finish at 5 ms and lands at 6 ms: c1's backward waits 3 ms."""
    t = chain_trace([{"id": "c1", "size": 4 * U, "fwd": MS, "bwd": MS},
                     {"id": "c2", "size": U, "fwd": MS, "bwd": MS}], input_bytes=U)
    opts = {"sync": False}
    full = run_trace(t, GPU, "vdnn_all_m", opts)
    half = run_trace(t, hand_gpu(bw=U * 1000.0, duplex=False), "vdnn_all_m", opts)
    assert (full.iteration_time_ns, full.stall_time_ns) == (4 * MS, 0)
    assert (half.iteration_time_ns, half.stall_time_ns) == (7 * MS, 3 * MS)
    h2d = half.timeline[half.timeline.stream == "h2d"]
    assert list(zip(h2d.start_ns, h2d.end_ns)) == [(5 * MS, 6 * MS)]


def test_pool_fragmentation_is_reported():
    pool = Pool(3 * U)
    for k in "abc":
        pool.alloc(k, U, "x", 0)
    pool.free("a", 1)
    pool.free("c", 2)
    pool.alloc("big", 2 * U, "x", 3, "L", "forward")
    assert pool.oom is not None and pool.oom.fragmented
    assert (pool.oom.free_bytes, pool.oom.largest_free_bytes) == (2 * U, U)
    assert pool.peak_footprint_bytes > 3 * U  # placed above capacity to go on


def test_pool_best_fit_and_coalescing():
    pool = Pool(10 * U)
    for k, n in zip("abcde", (1, 3, 1, 2, 1)):
        pool.alloc(k, n * U, "x", 0)
    pool.free("b", 1)  # hole of 3U at 1U
    pool.free("d", 1)  # hole of 2U at 5U
    pool.alloc("f", 2 * U, "x", 2)  # best fit: the 2U hole
    assert pool._blocks["f"][0] == 5 * U
    pool.free("a", 3)
    pool.free("c", 3)  # a, b, c coalesce into 0..5U
    pool.alloc("g", 5 * U, "x", 4)
    assert pool._blocks["g"][0] == 0 and pool.oom is None


@pytest.mark.parametrize("policy", ["vdnn_all_m", "vdnn_conv_p", "vdnn_dyn"])
def test_average_memory_is_time_weighted(policy):
    r = run_trace(three_convs(), GPU, policy)
    m = r.memory
    times = list(m.time_ns) + [r.iteration_time_ns]
    area = sum(lvl * (times[k + 1] - times[k]) for k, lvl in enumerate(m.allocated_bytes)
               if times[k] < r.iteration_time_ns)
    assert r.avg_memory_bytes == pytest.approx(area / r.iteration_time_ns)
    assert 0 < r.avg_memory_bytes <= r.peak_memory_bytes


def _pool_chain():
    """data (2U) -> c1 (4U) -> r1 in place -> p1 max pool (U) -> c2 (U), 1 ms each."""
    return chain_trace([
        {"id": "c1", "size": 4 * U, "fwd": MS, "bwd": MS},
        {"id": "r1", "kind": "relu", "inplace": True, "saves": "y", "fwd": MS, "bwd": MS},
        {"id": "p1", "kind": "maxpool", "size": U, "saves": "xy", "fwd": MS, "bwd": MS},
        {"id": "c2", "size": U, "fwd": MS, "bwd": MS},
    ], input_bytes=2 * U)


def test_offload_marks_decide_where_find_prefetch_layer_stops():
    t = _pool_chain()
    off = offload_sets(t, liveness(t), conv_only=False)
    assert off == (("data",), (), ("c1",), ("p1",))  # r1 writes c1's buffer: copies nothing
    # 'text': only copying layers are marked. Before p1's backward the scan passes r1 and
    # takes c1 (data); before c2's it takes p1 (c1's buffer).
    assert find_prefetch_schedule(t, off) == (-1, -1, 0, 2)
    # 'measured' under vDNN_all: every layer is marked, so before p1's backward the scan
    # stops at r1 (a no-op), and data comes back during r1's backward instead.
    assert find_prefetch_schedule(t, off, (True,) * 4) == (-1, 0, -1, 2)


@pytest.mark.parametrize("reading,peak_u", [("text", 12), ("measured", 10)])
def test_offload_marks_set_the_peak_at_the_pool(reading, peak_u):
    r = run_trace(_pool_chain(), GPU, "vdnn_all_m", {"reading": reading})
    # p1's backward holds its input (c1's buffer, 4U), its output (U), both gradients
    # (U + 4U): 10U. Under 'text' data's 2U prefetch is issued beside them: 12U. Under
    # 'measured' it is issued at r1's backward, when p1's output and its gradient are
    # gone: 4U + 4U + 2U = 10U. Every other step holds less.
    assert r.peak_memory_bytes == peak_u * U
    assert r.offloaded_bytes == r.prefetched_bytes == 2 * U + 4 * U + U


def test_pytorch_traces_keep_the_marks_of_the_runtime_that_was_measured():
    from dataclasses import replace

    from vdnnsim.policies import get_policy
    t = chain_trace([
        {"id": "c0", "size": U, "fwd": MS, "bwd": MS},
        {"id": "c1", "size": 4 * U, "fwd": MS, "bwd": MS},
        {"id": "r1", "kind": "relu", "inplace": True, "saves": "y", "fwd": MS, "bwd": MS},
        {"id": "p1", "kind": "maxpool", "size": U, "saves": "xy", "fwd": MS, "bwd": MS},
        {"id": "c2", "size": U, "fwd": MS, "bwd": MS},
    ])
    pt = replace(t, source=replace(t.source, framework="pytorch"))
    fn, fixed = get_policy("vdnn_all_m")
    # vdnnsim's PyTorch runtime marks the layers that copy, as the text reads: before
    # p1's backward the scan passes r1 and takes c1 (c0's output)
    assert fn(pt, GPU, None, dict(fixed)).prefetch == (-1, -1, -1, 1, 3)
    assert fn(pt, GPU, None, {**fixed, "reading": "text"}).prefetch == (-1, -1, -1, 1, 3)
    # a Torch7 trace under 'measured' stops at r1 and fetches c1's input at r1's backward
    # (and c0, which copies the network input there, is prefetched at c1's)
    assert fn(t, GPU, None, dict(fixed)).prefetch == (-1, 0, 1, -1, 3)


# -- the host in the loop (NOTE [host], NOTE [deferred free]) -----------------------------------
def test_a_slow_host_sets_the_pace():
    """PyTorch semantics, eager. The host takes 3 ms to issue each forward pass, nothing for
    the backward. c1 runs 3-4 ms; c2 is issued at 6 and runs 6-7; both backward passes are
    issued at 6 and run 7-8 and 8-9. The compute stream waits 3 + 2 ms for the host."""
    t = chain_trace([{"id": "c1", "fwd": MS, "bwd": MS, "host_fwd": 3 * MS},
                     {"id": "c2", "fwd": MS, "bwd": MS, "host_fwd": 3 * MS}],
                    framework="pytorch")
    r = run_trace(t, GPU, "eager")
    assert r.iteration_time_ns == 9 * MS
    assert r.host_bound_time_ns == 5 * MS and r.stall_time_ns == 0
    assert r.host_issue_time_ns == 6 * MS  # NOTE [host issue]: done issuing at 6, not 9
    host = r.timeline[r.timeline.stream == "host"]
    assert list(zip(host.name, host.start_ns, host.end_ns)) == [("c1:fwd", 0, 3 * MS),
                                                                ("c2:fwd", 3 * MS, 6 * MS)]


def test_a_full_launch_queue_holds_the_host_back():
    """NOTE [launch queue]. Eager PyTorch, four layers of 10 ms forward (backward: none),
    one command per pass, issued by a host that takes 1 ms per forward; the queue holds 2
    commands. c1 is issued at 1 and runs 1-11, c2 (issued at 2) 11-21, c3 (at 3) 21-31:
    at 3, c1 has started, so two are queued. c4 would be a third: the host waits until c2
    starts at 11 and issues c4 then (it runs 31-41, as it would have). Each backward
    launch then waits for one more start: c4's until c3 starts (21), c3's until 31, c2's
    until 41, when the rest have started and c1's goes at once. The GPU never waits."""
    layers = [{"id": f"c{i}", "fwd": 10 * MS, "bwd": 0, "host_fwd": MS, "kernels_fwd": 1,
               "kernels_bwd": 1} for i in range(1, 5)]
    t = chain_trace(layers, framework="pytorch")
    free = run_trace(t, GPU, "eager")
    gpu = replace(GPU, host=replace(GPU.host, launch_queue=2))
    held = run_trace(t, gpu, "eager")
    assert held.iteration_time_ns == free.iteration_time_ns == 41 * MS
    assert held.host_bound_time_ns == free.host_bound_time_ns == MS
    host = held.timeline[held.timeline.stream == "host"]
    waits = host[host.kind == "wait"]
    assert list(zip(waits.name, waits.start_ns // MS, waits.end_ns // MS)) == [
        ("launch queue full", 4, 11), ("launch queue full", 11, 21),
        ("launch queue full", 21, 31), ("launch queue full", 31, 41)]
    assert free.timeline[free.timeline.kind == "wait"].empty
    # the preset's mean stands in for a trace without counts: with 3 commands a layer
    # (more than the queue holds) each launch waits for the one before it to start: c2 is
    # issued at 2 (c1 started at 1), c3 at 3 waits for c2 (11), c4 at 12 for c3 (21)
    bare = chain_trace([{k: v for k, v in d.items() if not k.startswith("kernels")}
                        for d in layers], framework="pytorch")
    gpu3 = replace(gpu, host=replace(gpu.host, layer_kernels_fwd=3.0))
    r = run_trace(bare, gpu3, "eager")
    w = r.timeline[(r.timeline.stream == "host") & (r.timeline.kind == "wait")]
    assert list(zip(w.start_ns // MS, w.end_ns // MS))[:2] == [(3, 11), (12, 21)]


def _deferred(host_fwd: int):
    big = 16 << 20  # large-pool blocks whose segments are exactly their size
    return chain_trace([{"id": f"c{i}", "size": big, "fwd": MS, "bwd": MS,
                         "host_fwd": host_fwd} for i in range(1, 5)],
                       input_bytes=big, framework="pytorch")


def test_a_block_a_copy_used_is_reused_only_once_the_host_sees_the_copy_done():
    """vdnn_all: each layer offloads its input, which is then freed with record_stream.
    A host far ahead of the copies (no host cost) cannot reuse those blocks and grows new
    segments; a host slower than the copies (100 ms per layer) finds them done and reuses
    them. Allocated memory is the same; reserved is not."""
    gpu = hand_gpu()
    fast = run_trace(_deferred(0), gpu, "vdnn_all_p")
    slow = run_trace(_deferred(100 * MS), gpu, "vdnn_all_p")
    assert fast.peak_memory_bytes == slow.peak_memory_bytes
    assert fast.peak_footprint_bytes > slow.peak_footprint_bytes
    # under a cap at the slow host's reserved peak the fast host still fits: the allocator
    # synchronises on the copies' events, frees the blocks and retries (the GPU then waits)
    capped = run_trace(_deferred(0), gpu, "vdnn_all_p", memory_bytes=slow.peak_footprint_bytes)
    assert capped.fits and capped.peak_footprint_bytes <= slow.peak_footprint_bytes
    waits = capped.timeline[(capped.timeline.stream == "host")
                            & (capped.timeline.kind == "wait")]
    assert "allocator: synchronize_and_free_events" in set(waits.name)
    assert capped.iteration_time_ns >= fast.iteration_time_ns


@pytest.mark.parametrize("framework", ["torch7", "pytorch"])
def test_host_memory_bounds_what_offloads_may_pin(framework):
    """NOTE [host memory]: a host that holds the run's peak of pinned bytes fits it; one
    byte less, and the offload that crosses it is the run's out-of-memory, whatever the GPU
    pool says. Torch7's vdnn_all_m pins data, c1 and c2 (3U) by the end of the forward
    pass; the offload of c2, issued at c3's start (2 ms), crosses a host of 3U - 1."""
    from vdnnsim.report import format_table

    t = chain_trace([{"id": f"c{i}", "size": U, "fwd": MS, "bwd": MS} for i in (1, 2, 3)],
                    input_bytes=U, framework=framework)
    peak = run_trace(t, GPU, "vdnn_all_m").peak_host_bytes
    assert peak >= U
    ok = run_trace(t, replace(GPU, host_memory_bytes=peak), "vdnn_all_m")
    assert ok.fits and ok.peak_host_bytes == peak
    r = run_trace(t, replace(GPU, host_memory_bytes=peak - 1), "vdnn_all_m")
    assert not r.fits
    o = r.oom
    assert (o.phase, o.kind, o.reason, o.fragmented) == ("forward", "host", "host memory",
                                                         False)
    assert o.requested_bytes == U and o.free_bytes == U - 1
    if framework == "torch7":
        assert peak == 3 * U
        assert (o.tensor, o.layer, o.time_ns) == ("c2", "c3", 2 * MS)
    # the rest of the run is as without the bound: what it would have needed
    assert (r.peak_memory_bytes, r.iteration_time_ns) == (ok.peak_memory_bytes,
                                                          ok.iteration_time_ns)
    s = r.summary()
    assert (s["fits"], s["oom_reason"], s["oom_tensor"], s["host_capacity_bytes"]) == (
        False, "host memory", o.tensor, peak - 1)
    assert ok.summary()["oom_reason"] is None
    row = format_table([r]).splitlines()[-1]
    assert "no (host memory)" in row
    assert f"{o.layer} forward: offload of {o.tensor} (host memory full)" in row
    # no offload, no host memory: the baseline fits a host of one byte
    assert run_trace(t, replace(GPU, host_memory_bytes=1), "baseline_p").fits


def test_vdnn_dyn_reports_a_host_too_small_for_any_offload():
    """A 4U pool needs vDNN_all; a 1U host cannot hold its offloads: no plan fits, and the
    run says why (step 1, host memory), rather than fitting on the GPU alone."""
    t = three_convs()
    fits = run_trace(t, GPU, "vdnn_dyn", memory_bytes=4 * U)
    assert fits.fits and fits.offloaded_bytes > 0
    r = run_trace(t, replace(GPU, host_memory_bytes=U), "vdnn_dyn", memory_bytes=4 * U)
    assert not r.fits and r.oom.reason == "host memory"
    assert r.notes[0].startswith("step 1")


def test_layer_average_is_the_mean_of_each_layer_pass_peak():
    """NOTE [layer average]: the mean over the compute stream's forward and backward ops of
    the memory allocated at each one's peak, the same whether or not the run records its
    timeline, and not the time-weighted mean where layers differ in length."""
    from vdnnsim.api import build_trace, resolve_gpu, run_trace

    gpu = resolve_gpu("titanx_maxwell")
    trace = build_trace("alexnet", 32, gpu)
    for policy in ("vdnn_all_p", "baseline_m"):
        r = run_trace(trace, gpu, policy)
        mem = r.memory
        peaks = []
        for op in r.ops:
            if op.stream == "compute" and op.kind in ("fwd", "bwd") and op.end_ns > op.start_ns:
                during = mem[(mem.time_ns < op.end_ns)]
                before = during[during.time_ns <= op.start_ns].allocated_bytes.iloc[-1]
                inside = during[during.time_ns > op.start_ns].allocated_bytes
                peaks.append(max([before, *inside]))
        assert r.layer_avg_memory_bytes == pytest.approx(sum(peaks) / len(peaks))
        quiet = run_trace(trace, gpu, policy, record=False)
        assert quiet.layer_avg_memory_bytes == pytest.approx(r.layer_avg_memory_bytes)
        s = quiet.summary()
        assert s["layer_avg_managed_bytes"] == round(r.layer_avg_memory_bytes - r.weight_bytes)
    vdnn = run_trace(trace, gpu, "vdnn_all_p")
    assert abs(vdnn.layer_avg_memory_bytes / vdnn.avg_memory_bytes - 1) > 0.05
    uvm = run_trace(trace, gpu, "uvm_lru")  # the paged engine keeps its spans too
    assert len(uvm._layer_spans) > 10 and uvm.layer_avg_memory_bytes <= uvm.peak_memory_bytes
