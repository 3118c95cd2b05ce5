"""Later variants of vDNN: a fixed prefetch distance (NOTE [prefetch distance]) and
first-fit placement (NOTE [placement]); the no-sync variant is tested with the engine
(tests/test_engine_hand.py)."""

from __future__ import annotations

import pytest

from vdnnsim import run_trace
from vdnnsim.engine.allocator import Pool
from vdnnsim.errors import ConfigError
from vdnnsim.policies.builtin import distance_schedule

from .test_engine_hand import GPU, MS, U, three_convs


def test_a_layers_offloads_come_back_k_layers_above_it():
    offload = (("data",), (), ("c2",), ("c3",), ())
    assert distance_schedule(offload, 1) == (-1, 0, -1, 2, 3)
    assert distance_schedule(offload, 2) == (-1, -1, 0, -1, 2)  # c3's: on demand
    assert distance_schedule(offload, 9) == (-1,) * 5


def test_distance_one_on_three_convs():
    """vdnn_all_m: c1, c2, c3 offload data, c1, c2 (1 ms each way). Distance 1: c3's
    backward prefetches c2's offload (c1, 1 ms, under its 1 ms), c2's prefetches c1's
    (data, 1 ms, over its 0.5 ms: 0.5 ms stall at the sync); c3's own input (c2) was
    prefetched by nobody: on demand, 1 ms. The same as findPrefetchLayer here."""
    paper = run_trace(three_convs(), GPU, "vdnn_all_m")
    near = run_trace(three_convs(), GPU, "vdnn_all_m", {"distance": 1})
    assert near.iteration_time_ns == paper.iteration_time_ns == 7 * MS
    assert near.stall_time_ns == int(1.5 * MS)


def test_first_fit_takes_the_lowest_hole_best_fit_the_smallest():
    def pool(first: bool) -> Pool:
        p = Pool(10 * U)
        p.first_fit = first
        for k, n in zip("abcde", (1, 3, 1, 2, 1)):
            p.alloc(k, n * U, "x", 0)
        p.free("b", 1)  # hole of 3U at 1U
        p.free("d", 1)  # hole of 2U at 5U
        p.alloc("f", 2 * U, "x", 2)
        return p
    assert pool(False)._blocks["f"][0] == 5 * U
    assert pool(True)._blocks["f"][0] == 1 * U
    p = pool(True)
    assert p.transient("t", U, "x", 3, 4)  # the 1U left at 3U: first fit
    assert p.oom is None


def test_placement_is_refused_for_pytorch_traces_and_checked():
    from dataclasses import replace
    t = three_convs()
    r = run_trace(t, GPU, "vdnn_all_m", {"placement": "first"})
    assert r.fits
    pt = replace(t, source=replace(t.source, framework="pytorch"))
    with pytest.raises(ConfigError, match="Torch7 traces"):
        run_trace(pt, GPU, "vdnn_all_m", {"placement": "first"})
    with pytest.raises(ConfigError, match="placement must be one of best, first"):
        run_trace(t, GPU, "vdnn_all_m", {"placement": "worst"})
    with pytest.raises(ConfigError, match="distance must be an integer"):
        run_trace(t, GPU, "vdnn_dyn", {"distance": -1})
