"""Page-based unified memory (NOTE [uvm] in vdnnsim/engine/uvm.py): the pager alone and in
runs, on hand-made cases whose answers can be checked on paper, and on the paper's VGG-16
(256) on the K40."""

from __future__ import annotations

import pytest

from vdnnsim import run_trace
from vdnnsim.api import build_trace, resolve_gpu
from vdnnsim.engine import replay
from vdnnsim.engine.memory_model import Faults
from vdnnsim.engine.uvm import Pager, UvmParams
from vdnnsim.errors import ConfigError
from vdnnsim.policies import get_policy

from .test_engine_hand import GPU, MS, U, three_convs

PAGES = {"page_bytes": U, "fault_ns": MS}  # one fault per MiB, 1 ms each


def test_with_room_for_everything_only_the_new_batch_moves():
    """Second iteration, unlimited memory: everything the first one made is resident or
    cached; the new input batch (U) faults once (1 ms) and crosses the link (1 ms)."""
    r = run_trace(three_convs(), GPU, "uvm_lru", PAGES)
    assert r.prefetched_bytes == U and r.offloaded_bytes == 0
    assert r.stall_time_ns == 2 * MS
    assert r.iteration_time_ns == 2 * MS + (1 + 1 + 1) * MS + (1 + 0.5 + 1) * MS
    assert r.fits and r.oom is None
    faults = [o for o in r.ops if o.kind == "fetch"]
    assert [(o.name, o.end_ns - o.start_ns, o.size_bytes) for o in faults] == \
        [("c1:fwd:faults", 2 * MS, U)]


@pytest.mark.parametrize("cap", [2, 3, 4, 6])
def test_residency_stays_within_the_capacity_and_time_is_compute_plus_stalls(cap):
    r = run_trace(three_convs(), GPU, "uvm_lru", PAGES, memory_bytes=cap * U)
    assert r.peak_memory_bytes <= cap * U and r.fits
    assert r.iteration_time_ns == int(5.5 * MS) + r.stall_time_ns  # no host costs here
    assert r.prefetched_bytes >= U  # at least the batch


def test_less_memory_never_runs_faster_and_larger_faults_never_slower():
    times = [run_trace(three_convs(), GPU, "uvm_lru", PAGES, memory_bytes=c * U)
             .iteration_time_ns for c in (2, 3, 4, 6)]
    assert times == sorted(times, reverse=True) and times[0] > times[-1]
    per_fault = [run_trace(three_convs(), GPU, "uvm_lru", {**PAGES, "fault_ns": f},
                           memory_bytes=2 * U).iteration_time_ns for f in (0, MS, 2 * MS)]
    assert per_fault[0] < per_fault[1] < per_fault[2]
    # the fault part doubles, the transfers stay: t(2f) - t(f) == t(f) - t(0)
    assert per_fault[2] - per_fault[1] == per_fault[1] - per_fault[0]


def _pager(capacity: int, eviction: str = "lru", **params) -> Pager:
    """A pager of one fault per U page at 1 ms; the test link moves U in 1 ms each way;
    'x' is written on the host (the input batch)."""
    return Pager(capacity, UvmParams(eviction=eviction, page_bytes=U, fault_ns=MS, **params),
                 GPU.link, {"x"})


def test_the_pager_faults_migrates_and_writes_back_by_hand():
    m = _pager(3 * U)
    m.alloc("x", 2 * U, "activations", 0)  # on the host
    m.alloc("a", 2 * U, "activations", 0)  # made on the GPU at its first touch
    assert m.live_bytes == 0
    # a: two pages made where they are touched: two faults, nothing crosses the link
    assert m.access([("a", 2 * U, True)], 1) == Faults(2 * MS, 0)
    # x: 2U to bring in with 1U free: a (dirty) gives up 1U, written back (1 ms); two
    # faults (2 ms) and 2U migrated (2 ms)
    assert m.access([("x", 2 * U, False)], 2) == Faults(5 * MS, 2 * U)
    assert m.resident == {"x": 2 * U, "a": U}
    assert (m.migrated_bytes, m.written_back_bytes, m.faults) == (2 * U, U, 4)
    assert m.peak_live_bytes == 3 * U and m.peak_breakdown == {"resident": 3 * U}
    # a freed: its page stays on the GPU, cached; b takes it without a fault
    m.free("a", 3)
    m.alloc("b", U, "activations", 3)
    assert m.access([("b", U, True)], 4) == Faults(0, 0)
    assert m.by_category == {"resident": 3 * U, "cached": 0}
    assert m.times == [0, 1, 2, 3] and m.levels == [0, 2 * U, 3 * U, 3 * U]


def test_a_pass_larger_than_the_gpu_thrashes():
    """3U touched on a 2U GPU: the excess U is written back and migrated again within
    the pass: 3 faults of first touch + 1 of the round trip, 1 ms each way."""
    m = _pager(2 * U)
    m.alloc("a", 3 * U, "activations", 0)
    assert m.access([("a", 3 * U, True)], 1) == Faults(4 * MS + MS + MS, U)
    assert m.resident == {"a": 2 * U} and m.live_bytes == 2 * U


@pytest.mark.parametrize("eviction, evicted", [("lru", "a"), ("lfu", "b")])
def test_lru_evicts_the_least_recent_lfu_the_least_frequent(eviction, evicted):
    """a is touched twice, then b once; c needs a page of a full GPU: LRU takes a's (used
    longer ago), LFU b's (used once)."""
    m = _pager(2 * U, eviction)
    for k in "abc":
        m.alloc(k, U, "activations", 0)
    for k in "aab":
        m.access([(k, U, False)], 1)
    m.access([("c", U, True)], 2)
    assert m.resident[evicted] == 0
    assert sum(m.resident.values()) == 2 * U


def test_a_workspace_is_made_for_its_pass_and_freed_after_it():
    m = _pager(4 * U)
    assert m.transient(("workspace", "c1"), U, "workspace", 1, 3)
    assert ("workspace", "c1") not in m  # not before the pass touches it
    assert m.access([], 2) == Faults(MS, 0)  # made at 1, touched at 2 (a fault, made
    assert ("workspace", "c1") not in m and m.cached == U  # on the GPU), freed at 3
    assert m.times == [0, 2, 3] and m.levels == [0, U, U]  # (its page stays, cached)


def test_a_unified_memory_plan_runs_on_the_one_executor():
    """NOTE [replay]: no second engine; the pager is the simulation's memory."""
    t = three_convs()
    fn, fixed = get_policy("uvm_lru")
    sim = replay(t, GPU, fn(t, GPU, 4 * U, {**PAGES, **fixed}), 4 * U)
    assert sim.paged
    assert sim.end_ns == run_trace(t, GPU, "uvm_lru", PAGES, memory_bytes=4 * U) \
        .iteration_time_ns


def test_the_papers_argument_vgg16_256_on_the_k40():
    """docs/policies.md, 'Unified memory': with 4 KiB pages at 45 us a fault UVM is an
    order of magnitude slower than vDNN_dyn; 2 MiB pages bring it near."""
    gpu = resolve_gpu("k40")
    trace = build_trace("vgg16", 256, gpu)
    dyn = run_trace(trace, gpu, "vdnn_dyn", record=False)
    small = run_trace(trace, gpu, "uvm_lru", record=False)
    large = run_trace(trace, gpu, "uvm_lru", {"prefetch_bytes": 2 * 2**20}, record=False)
    assert dyn.fits and small.fits and large.fits
    assert small.peak_memory_bytes <= gpu.memory_bytes
    assert small.iteration_time_ns > 10 * dyn.iteration_time_ns
    assert dyn.iteration_time_ns < large.iteration_time_ns < 1.5 * dyn.iteration_time_ns


@pytest.mark.parametrize("opts,frag", [
    ({"page_bytes": 100}, "page_bytes must be an integer from 512"),
    ({"fault_batch": 0}, "fault_batch must be an integer from 1"),
    ({"fault_ns": True}, "fault_ns must be an integer"),
    ({"algo": "x"}, "algo must be m or p"),
    ({"pages": 4}, "unknown option(s) pages"),
])
def test_bad_options_are_clear_errors(opts, frag):
    with pytest.raises(ConfigError, match=frag.replace("(", r"\(").replace(")", r"\)")):
        run_trace(three_convs(), GPU, "uvm_lru", opts)
