"""The engine's shape (issue 27): small files, one place that builds a simulation, a plan
that is checked by compiling it (NOTE [compile]), and runs that do not depend on the hash
seed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from vdnnsim.api import build_trace, resolve_gpu
from vdnnsim.engine import replay
from vdnnsim.engine.compile import PlanError
from vdnnsim.policies import get_policy

ROOT = Path(__file__).resolve().parent.parent


def test_no_engine_file_over_400_lines():
    long = {p.name: n for p in (ROOT / "vdnnsim" / "engine").glob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_simulation_has_slots_not_a_dict():
    """NOTE [engine speed]: every part of the simulation declares slots, so an instance
    has no __dict__ (one part without them brings the dict, and its lookups, back)."""
    from vdnnsim.engine.sim import Simulation
    assert Simulation.__dictoffset__ == 0 and "__dict__" not in dir(Simulation)
    assert all("__slots__" in vars(c) for c in Simulation.__mro__[:-1])


def test_replay_returns_a_frozen_record():
    """A caller gets the run's record, not the simulation: nothing it can change."""
    import dataclasses

    from vdnnsim.engine import Replayed
    g = resolve_gpu("k40")
    t = build_trace("vgg16", 32, g)
    fn, fixed = get_policy("vdnn_all_p")
    sim = replay(t, g, fn(t, g, g.memory_bytes, dict(fixed)), g.memory_bytes)
    assert type(sim) is Replayed and sim.fits and sim.end_ns > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        sim.end_ns = 1  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        sim.not_an_attribute = 1  # type: ignore[attr-defined]


def test_one_construction_site():
    """NOTE [replay]: only engine/replay.py constructs a simulation."""
    made = re.compile(r"\b(Uvm)?Simulation\(")
    sites = []
    for folder in ("vdnnsim", "bench", "docs", "experiments"):
        for p in (ROOT / folder).rglob("*.py"):
            for k, line in enumerate(p.read_text().splitlines(), 1):
                if made.search(line) and not line.lstrip().startswith("class "):
                    sites.append(f"{p.relative_to(ROOT)}:{k}")
    assert sites and all(s.startswith("vdnnsim/engine/replay.py:") for s in sites), sites


def _plan(policy="vdnn_all_p"):
    g = resolve_gpu("k40")
    t = build_trace("vgg16", 32, g)
    fn, fixed = get_policy(policy)
    return t, g, fn(t, g, g.memory_bytes, dict(fixed))


def test_a_sound_plan_compiles_and_replays():
    t, g, plan = _plan()
    plan.check(t)
    assert replay(t, g, plan, g.memory_bytes).end_ns > 0


@pytest.mark.parametrize("change, says", [
    (lambda p: {"algos": p.algos[:-1]}, "for a trace of"),
    (lambda p: {"algos": (99,) + p.algos[1:]}, "has no algorithm 99"),
    (lambda p: {"offload": (("nowhere",),) + p.offload[1:]}, "offloads nowhere"),
    (lambda p: {"prefetch": p.prefetch[:-1] + (1000,)}, "outside the trace"),
    (lambda p: {"algos": (-1,) + p.algos[1:]}, "has no algorithm -1"),
    (lambda p: {"prefetch": (-2,) + p.prefetch[1:]}, "outside the trace"),
    (lambda p: {"prefetch": (float("nan"),) + p.prefetch[1:]}, "outside the trace"),
    (lambda p: {"recompute": ((3, 1),)}, "segment 3..1"),
])
def test_a_plan_that_does_not_fit_its_trace_does_not_compile(change, says):
    t, g, plan = _plan()
    bad = replace(plan, **change(plan))
    with pytest.raises(PlanError, match=re.escape(says)):
        bad.check(t)
    with pytest.raises(PlanError, match=re.escape(says)):  # nor does the engine run it
        replay(t, g, bad, g.memory_bytes)


SPANS = """
import hashlib
from vdnnsim.api import build_trace, resolve_gpu, run_trace
g = resolve_gpu("k40")
r = run_trace(build_trace("googlenet", 32, g), g, "checkpoint")
print(hashlib.sha1(repr((r.ops, r._mem, r._spans)).encode()).hexdigest())
"""


def test_a_run_does_not_depend_on_the_hash_seed():
    """Checkpointed segments once freed their dropped buffers in a set's order, which
    changes with PYTHONHASHSEED: the tensor lifetimes came out in another order in each
    process."""
    out = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out.add(subprocess.run([sys.executable, "-c", SPANS], env=env, cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout)
    assert len(out) == 1, out


def test_trace_analyses_are_kept_on_their_trace_alone():
    """NOTE [trace analyses]: what a policy derives from a trace is worked out once and kept
    on that trace; a changed copy (dataclasses.replace) works it out again, and an analysis
    asked with another liveness than the trace's own is not kept."""
    from vdnnsim.api import oracle_time_ns
    from vdnnsim.engine.plan import _liveness
    from vdnnsim.policies import liveness, offload_sets

    gpu = resolve_gpu("k40")
    t = build_trace("vgg16", 64, gpu)
    assert t.fastest_algos == tuple(layer.fastest_algo() for layer in t.layers)
    assert t.leanest_algos == tuple(layer.leanest_algo() for layer in t.layers)
    assert t.weight_bytes == sum(layer.weight_bytes for layer in t.layers)
    assert oracle_time_ns(t, gpu) == t.step_ns + sum(
        layer.algos[layer.fastest_algo()].time_ns for layer in t.layers)
    sets = offload_sets(t, liveness(t), False)
    assert offload_sets(t, liveness(t), False) is sets  # kept
    other = offload_sets(t, _liveness(t), False)
    assert other == sets and other is not sets  # worked out, not kept
    assert offload_sets(t, liveness(t), True) != sets  # vDNN_conv's own
    t2 = replace(t, step_ns=t.step_ns + 5)
    assert "_memo" not in t2.__dict__
    assert oracle_time_ns(t2, gpu) == oracle_time_ns(t, gpu) + 5


@pytest.mark.parametrize("policy", ["vdnn_all_p", "vdnn_conv_m"])
def test_a_pass_stopped_at_its_oom_answers_where_and_keeps_no_curve(policy):
    """NOTE [memory time]: a pass that stops at its out-of-memory (vdnn_dyn's and the
    planners' profiling passes) reports the out-of-memory a whole run reports, time
    included, and has no curve or lifetimes that could be read as a run's."""
    gpu = resolve_gpu("k40")
    trace = build_trace("vgg16", 256, gpu)
    fn, fixed = get_policy(policy)
    plan = fn(trace, gpu, 8 * 2**30, dict(fixed))
    whole = replay(trace, gpu, plan, 8 * 2**30)
    stopped = replay(trace, gpu, plan, 8 * 2**30, stop_at_oom=True)
    assert whole.oom is not None and not whole.stopped and stopped.stopped
    assert stopped.oom == whole.oom
    assert stopped.memory_steps is None and stopped.spans == ()
    assert whole.memory_steps[0] and whole.spans


@pytest.mark.parametrize("end_ns", [10**9, 37_625_658_688, 2**47 + 5])
def test_the_average_is_exact_in_int64_limbs(end_ns):
    """NOTE [engine speed]: the time-weighted average is summed in int64 over 16-bit limbs
    of the levels (Python's integers of this size cost several digits each); it must be
    the exact integer sum divided once, as Python's own arithmetic gives, also where one
    product (levels to 2**47 bytes) or the sum overflows int64, and past 2**47 ns, where
    the limbs could overflow and Python's integers take over."""
    import bisect
    import operator

    import numpy as np

    from vdnnsim.engine.allocator import Pool
    rng = np.random.default_rng(7)
    n = 5000
    times = sorted(rng.integers(1, end_ns, n - 1).tolist())
    times = [0] + times
    levels = rng.integers(0, 2**47, n).tolist()
    pool = Pool(None)
    pool.times, pool.levels = times, levels
    pool.curve = (np.array(times, dtype=np.int64), np.array(levels, dtype=np.int64))
    k = bisect.bisect_left(times, end_ns)
    exact = sum(map(operator.mul, levels[:k], map(operator.sub, times[1:k] + [end_ns],
                                                     times[:k]))) / end_ns
    assert max(levels) * end_ns > 2**63  # the products leave int64: limbs are needed
    assert pool.average_bytes(end_ns) == exact
    pool.curve = None  # the lists alone (a curve not yet on the GPU's clock)
    assert pool.average_bytes(end_ns) == exact


def test_the_timeline_is_op_records():
    """The simulation keeps plain tuples; RunResult.ops makes them Op records once, and
    the timeline table has the same rows."""
    from vdnnsim.api import run_trace
    from vdnnsim.engine.sim import Op
    g = resolve_gpu("k40")
    r = run_trace(build_trace("vgg16", 32, g), g, "vdnn_all_p")
    ops = r.ops
    assert ops and all(type(o) is Op for o in ops)
    assert r.ops is ops  # made once
    assert {o.kind for o in ops} >= {"fwd", "bwd", "offload", "prefetch"}
    df = r.timeline
    assert len(df) == len(ops)
    assert sorted(df.itertuples(index=False, name=None)) == sorted(
        (*o, o.end_ns - o.start_ns) for o in ops)


def test_no_inline_allocation_while_a_deferred_free_is_pending(monkeypatch):
    """NOTE [engine speed]: the walks allocate inline only where no deferred free is
    pending; else PyTorch's malloc first releases the blocks whose events have completed
    (NOTE [deferred free]). The backward walk once tested the wrong list (its own inputs'
    fetches still in flight, under the same name), so on a preset without allocator-cost
    calibration (here the A100) a vDNN run under PyTorch semantics allocated past blocks
    it should have reused: MobileNetV2 (128) under vdnn_all_p in half the baseline's
    reserved memory reported an out-of-memory at 6.52 GB reserved that fits in 6.14."""
    from vdnnsim.api import run_trace
    from vdnnsim.engine.sim import Simulation
    from vdnnsim.trace.io import load_trace
    trace = load_trace(ROOT / "traces" / "h200_torchvision" / "mobilenet_v2_b128.yaml")
    gpu = resolve_gpu("a100")
    assert not (gpu.host.segment_malloc_ns or gpu.host.segment_free_ns)  # the inline path
    cap = run_trace(trace, gpu, "baseline_p", record=False).peak_footprint_bytes // 2
    pending_at_inline: list[int] = []
    run = Simulation.run

    def watched(sim):
        alloc = sim.pool.alloc

        def check(*a, **k):
            if sys._getframe(1).f_code.co_name in ("_forward", "_backward"):
                pending_at_inline.append(len(sim._pending))
            return alloc(*a, **k)
        sim.pool.alloc = check
        return run(sim)
    monkeypatch.setattr(Simulation, "run", watched)
    r = run_trace(trace, gpu, "vdnn_all_p", memory_bytes=cap, record=False)
    assert pending_at_inline and not any(pending_at_inline)
    assert r.oom is None


def test_a_trace_is_freed_by_its_reference_count():
    """NOTE [paused gc]: traces and what is kept on them are acyclic, so a trace goes when
    its last reference does, with the collector off (a memo once held a Torch7 trace
    without concats as its own join view: a cycle)."""
    import gc
    import weakref

    from vdnnsim.api import run_trace
    g = resolve_gpu("k40")
    t = build_trace("vgg16", 64, g)
    run_trace(t, g, "vdnn_dyn")
    ref = weakref.ref(t)
    was = gc.isenabled()
    gc.disable()
    try:
        del t
        assert ref() is None
    finally:
        if was:
            gc.enable()


def test_a_key_retired_twice_before_its_first_event_gives_back_both_blocks():
    """NOTE [deferred free]: a buffer's offloaded block waits for its copy's event; the
    buffer is prefetched back, used and freed, and its new block waits too, before the first
    event has been seen. Both blocks come back, oldest first (until session 23 the second
    retirement overwrote the first, whose memory the books then lost for good: the Llama
    block runs' reserved peaks were up to 4 GiB high and capped runs called out of memory),
    and the books balance (what every run's end check asks)."""
    from vdnnsim.engine.caching import CachingPool
    from vdnnsim.engine.memory import RetiredKeys

    MiB = 1 << 20
    pool = CachingPool(None)
    pool.alloc("x", 30 * MiB, "activations", 0)
    first = pool.live["x"]
    pool.retire("x", 1)
    pool.alloc("x", 30 * MiB, "activations", 2)  # the prefetched copy: another block
    second = pool.live["x"]
    assert first[:2] != second[:2]
    pool.retire("x", 3)
    assert pool.unaccounted_bytes() == 0
    pool.release("x", 4)  # the offload's event: the first block is free again
    assert pool._free[first[0]] == {0: 30 * MiB} and pool._free[second[0]] == {}
    pool.release("x", 5)
    assert pool.live_bytes == 0 and pool.unaccounted_bytes() == 0
    assert sum(sum(f.values()) for f in pool._free.values()) == pool.reserved_bytes
    keys = RetiredKeys()
    keys.add("x")
    keys.add("x")
    keys.discard("x")
    assert "x" in keys
    keys.discard("x")
    assert "x" not in keys and not keys


def test_the_llama_block_runs_lose_no_block_and_fit_as_measured():
    """traces/h200_reserved_heldout/llama_block_history: the 12- and 22-block runs fit 22 GiB on the H200 with
    PyTorch's default allocator; with the fix above the engine fits them too (before it, it
    ran out of memory at AdamW's temporaries with 4 GiB of retired blocks lost)."""
    from pathlib import Path

    from vdnnsim.api import resolve_gpu, run_trace
    from vdnnsim.trace import load_trace

    t = load_trace(Path(__file__).resolve().parents[1] / "traces" / "h200_llama_22gib" / "profiles_plans" / "llama-1b-b2-s2048-bf16.yaml.gz")
    for k in (12, 22):
        assert run_trace(t, resolve_gpu("h200"), "vdnn_blocks", {"blocks": k}, 22 << 30,
                         record=False).fits


def test_policies_take_the_run_s_context_as_an_argument():
    """NOTE [planning allocator]: what a policy knows of its run comes in its context
    argument (no context variable anywhere in the policies); vdnn_blocks' budget search is
    the planner the context hands it."""
    import pathlib

    import vdnnsim.policies
    from vdnnsim.errors import ConfigError
    from vdnnsim.policies import PolicyContext
    from vdnnsim.policies.blocks import vdnn_blocks
    root = pathlib.Path(vdnnsim.policies.__file__).parent
    assert not [p.name for p in root.glob("*.py") if "ContextVar" in p.read_text()]
    asked = []

    def planner(trace, gpu, budget, allocator=None):
        asked.append((budget, allocator))
        raise ConfigError("planned")
    g = resolve_gpu("k40")
    t = build_trace("vgg16", 32, g)
    with pytest.raises(ConfigError, match="needs the block planner"):
        vdnn_blocks(t, g, None, {"budget": 10**9})
    with pytest.raises(ConfigError, match="planned"):
        vdnn_blocks(t, g, None, {"budget": 10**9}, PolicyContext("settings", planner))
    assert asked == [(10**9, "settings")]
