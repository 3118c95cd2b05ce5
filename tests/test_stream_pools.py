"""NOTE [stream pools], NOTE [allocator costs]: segments serve the stream they were made
for; a release of the cache under a cap is counted, and the engine charges it on presets
that measured the driver's calls."""

from __future__ import annotations

import dataclasses

from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.engine.caching import CachingPool
from vdnnsim.trace import load_trace

MiB = 1 << 20
PLAN256 = "traces/h200_timm_heldout/measured_planned/plan256/cspresnet50.b256.yaml.gz"


def test_a_copy_streams_block_is_not_reused_by_the_compute_stream():
    pool = CachingPool(1 << 40)
    pool.alloc("p", 100 * MiB, "activations", 0, stream="h2d")
    pool.free("p", 1)
    assert pool.reserved_bytes == 100 * MiB
    # the compute stream cannot take the free 100 MiB: a segment of its own
    pool.alloc("a", 100 * MiB, "activations", 2)
    assert pool.reserved_bytes == 200 * MiB
    # the copy stream can
    pool.alloc("q", 100 * MiB, "activations", 3, stream="h2d")
    assert pool.reserved_bytes == 200 * MiB


def test_a_release_under_the_cap_is_counted_and_frees_every_streams_segments():
    pool = CachingPool(150 * MiB)
    pool.alloc("p", 100 * MiB, "activations", 0, stream="h2d")
    pool.free("p", 1)
    assert not pool.would_release(100 * MiB, "h2d")  # its own free block
    assert pool.would_release(100 * MiB)  # the compute stream needs a segment past the cap
    pool.alloc("a", 100 * MiB, "activations", 2)
    assert (pool.released, pool.remade) == (1, 1) and pool.reserved_bytes == 100 * MiB
    pool.free("a", 3)
    pool.alloc("q", 100 * MiB, "activations", 4, stream="h2d")  # and back again
    assert (pool.released, pool.remade) == (2, 2) and pool.oom is None


def test_releases_cost_time_only_where_the_preset_measured_them():
    """The capped block plan of a factory CNN (session 11 on the H200) releases the cache
    as the allocator did there; the driver's calls cost the host time on the h200 preset
    and nothing with them zeroed."""
    t = load_trace(PLAN256)
    g = resolve_gpu("h200")
    free = dataclasses.replace(g, host=dataclasses.replace(g.host, segment_malloc_ns=0,
                                                          segment_free_ns=0))
    cap = 12 << 30
    charged = run_trace(t, g, "vdnn_blocks", {"blocks": 7}, cap, record=True)
    uncharged = run_trace(t, free, "vdnn_blocks", {"blocks": 7}, cap, record=False)
    assert charged.fits and uncharged.fits
    assert charged.iteration_time_ns > uncharged.iteration_time_ns
    assert any("cudaFree synchronises" in o.name for o in charged.ops)
    # uncapped, no release and so no cost: the same time either way
    a = run_trace(t, g, "vdnn_blocks", {"blocks": 7}, None, record=False)
    b = run_trace(t, free, "vdnn_blocks", {"blocks": 7}, None, record=False)
    assert a.iteration_time_ns == b.iteration_time_ns
