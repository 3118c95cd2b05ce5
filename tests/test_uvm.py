"""Page-based unified memory (NOTE [uvm] in vdnnsim/engine/uvm.py), on hand-made traces
whose answers can be checked on paper, and on the paper's VGG-16 (256) on the K40."""

from __future__ import annotations

import pytest

from vdnnsim import run_trace
from vdnnsim.api import build_trace, resolve_gpu
from vdnnsim.engine.uvm import UvmParams, UvmSimulation
from vdnnsim.errors import ConfigError
from vdnnsim.policies import get_policy, liveness

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


def test_lru_and_lfu_rank_by_recency_and_by_count():
    t = three_convs()
    fn, fixed = get_policy("uvm_lfu")
    plan = fn(t, GPU, None, {**fixed})
    sim = UvmSimulation(t, GPU, plan, 10 * U, liveness(t))
    sim.last_use = {"a": 5, "b": 9}
    sim.uses = {"a": 7, "b": 1}
    assert sorted("ab", key=sim._rank) == ["b", "a"]  # LFU: b was used once
    sim.p = UvmParams(eviction="lru")
    assert sorted("ab", key=sim._rank) == ["a", "b"]  # LRU: a was used longer ago


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
