"""NOTE [expandable segments] and NOTE [allocator settings]: the caching allocator with
``expandable_segments:True``, by hand on the pool and through a run; the settings' checks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vdnnsim import run_trace
from vdnnsim.config import config_from_dict
from vdnnsim.engine.caching import AllocatorSettings, CachingPool, allocator_settings
from vdnnsim.engine.expandable import ExpandablePool
from vdnnsim.errors import ConfigError

from .conftest import chain_trace, hand_gpu

M = 2**20


def _sequence(pool):
    """A 5 MiB block, a 30 MiB block, the first freed, then an 8 MiB block."""
    pool.alloc("a", 5 * M, "activations", 0)
    pool.alloc("b", 30 * M, "activations", 1)
    pool.free("a", 2)
    pool.alloc("c", 8 * M, "activations", 3)
    return pool


def test_one_growing_segment_maps_20_mib_pages_at_its_end():
    """a maps one 20 MiB page (a at 0..5, free 5..20); b needs 30 MiB: the free 15 at the
    end plus one more page (40 mapped, b at 5..35); a's 5 MiB are freed; c (8 MiB) fits in
    no free block (0..5, 35..40), so the end grows by a page from 35: 60 MiB mapped. Fixed
    segments reserve 20 (a's, reused by c) + 30 (b's own) = 50."""
    e, f = _sequence(ExpandablePool(None)), _sequence(CachingPool(None))
    assert e.peak_footprint_bytes == e.reserved_bytes == 60 * M
    assert f.peak_footprint_bytes == 50 * M
    assert e.peak_live_bytes == f.peak_live_bytes == 38 * M
    assert e._blocks["c"][1:3] == (35 * M, 8 * M)  # offset, size in the one segment


def test_releasing_the_cache_unmaps_whole_free_pages_and_shortens_the_end():
    """x, y, z tile three 20 MiB pages; x and z are freed (free: 0..20, 40..60). A 30 MiB
    request fits no free block; at the end it would need one more page (80 MiB) past a
    70 MiB cap, so the cache is released: both free pages are unmapped (a hole at 0..20;
    40..60 at the end shortens the segment to 40): 20 MiB mapped. The hole holds only 20,
    so the request maps two pages from 40: 60 MiB, under the cap."""
    p = ExpandablePool(70 * M)
    for i, k in enumerate("xyz"):
        p.alloc(k, 20 * M, "activations", i)
    p.free("x", 3)
    p.free("z", 4)
    assert p.alloc("d", 30 * M, "activations", 5)
    assert p.released == 2 and p.released_bytes == 40 * M
    assert p.reserved_bytes == 60 * M and p.oom is None
    assert p._blocks["d"][1] == 40 * M


def test_out_of_memory_when_the_pages_still_do_not_fit():
    """As above with only x freed and a 60 MiB cap: the release unmaps x's page (a hole
    too small for 30 MiB), the end still needs two pages: 80 MiB, out of memory (the
    request is placed anyway, NOTE [out of memory])."""
    p = ExpandablePool(60 * M)
    for i, k in enumerate("xyz"):
        p.alloc(k, 20 * M, "activations", i)
    p.free("x", 3)
    p.alloc("d", 30 * M, "activations", 4)
    assert p.released == 1 and p.oom is not None and p.oom.requested_bytes == 40 * M
    assert p.reserved_bytes == 80 * M


def test_a_hole_in_the_middle_is_filled_first_at_the_lowest_address():
    """Blocks x (20), y (20), z (20) MiB tile three pages; y freed and the cache released
    unmaps its page (a hole at 20..40, 40 MiB mapped); a 10 MiB request maps that hole's
    page, not a new one at the end."""
    p = ExpandablePool(None)
    for i, k in enumerate("xyz"):
        p.alloc(k, 20 * M, "activations", i)
    p.free("y", 3)
    p._release_cached()
    assert p.reserved_bytes == 40 * M
    p.alloc("w", 10 * M, "activations", 4)
    assert p.reserved_bytes == 60 * M and p._blocks["w"][1] == 20 * M


def test_a_run_takes_the_settings_and_reserves_what_one_segment_needs():
    """A PyTorch chain whose activations grow (3, 6, 12 MiB): fixed segments strand the
    freed smaller ones; one expandable segment reuses their space."""
    t = chain_trace([{"id": f"c{i}", "size": s * M, "fwd": 10**6, "bwd": 10**6}
                     for i, s in enumerate((3, 6, 12, 24))], input_bytes=M,
                    framework="pytorch")
    fixed = run_trace(t, hand_gpu(), "eager", record=False)
    exp = run_trace(t, hand_gpu(), "eager", record=False,
                    allocator={"expandable_segments": True})
    same = run_trace(t, hand_gpu(), "eager", record=False, allocator="expandable_segments:True")
    assert exp.peak_memory_bytes == fixed.peak_memory_bytes
    assert exp.peak_footprint_bytes == same.peak_footprint_bytes
    assert exp.peak_footprint_bytes < fixed.peak_footprint_bytes
    assert exp.peak_footprint_bytes % (2 * M) == 0  # whole pages


@pytest.mark.parametrize("value, message", [
    ({"max_split_size_mb": 128}, "max_split_size_mb is not modelled"),
    ({"expandable_segment": True}, "unknown setting 'expandable_segment'"),
    ({"expandable_segments": "yes"}, "must be true or false"),
    ("expandable_segments", "is not KEY:VALUE"),
    (["expandable_segments"], "must be a mapping"),
])
def test_settings_the_model_does_not_follow_are_refused(value, message):
    with pytest.raises(ConfigError, match=message):
        allocator_settings(value)


def test_settings_read_like_pytorch_alloc_conf():
    assert allocator_settings("expandable_segments:True") == AllocatorSettings(True)
    assert allocator_settings("expandable_segments:false").default
    assert allocator_settings(None).default and allocator_settings({}).default
    assert AllocatorSettings(True).conf() == "expandable_segments:True"


def test_a_torch7_trace_has_no_allocator_settings():
    t = chain_trace([{"id": "c1", "size": M, "fwd": 1, "bwd": 1}])
    with pytest.raises(ConfigError, match="apply to PyTorch traces"):
        run_trace(t, hand_gpu(), "baseline_p", allocator={"expandable_segments": True})
    run_trace(t, hand_gpu(), "baseline_p", allocator={"expandable_segments": False})


def test_run_configs_take_allocator_settings_and_reject_unknown_keys():
    cfg = config_from_dict({"network": "vgg16", "allocator": {"expandable_segments": True}})
    assert cfg.allocator.expandable_segments is True
    with pytest.raises(ConfigError, match="allocator"):
        config_from_dict({"network": "vgg16", "allocator": {"max_split": 1}})
    with pytest.raises(ConfigError, match="allocator"):
        config_from_dict({"network": "vgg16", "allocator": {"expandable_segments": "yes"}})
