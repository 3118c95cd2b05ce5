"""The one memory interface (NOTE [memory interface] in vdnnsim/engine/memory_model.py):
the CNMeM pool, the caching allocator and the unified-memory pager implement it, and a
pool's access costs nothing."""

from __future__ import annotations

import pytest

from vdnnsim.engine.allocator import Accounting, Pool
from vdnnsim.engine.caching import CachingPool
from vdnnsim.engine.memory_model import NO_FAULTS, MemoryModel
from vdnnsim.engine.uvm import Pager, UvmParams

from .test_engine_hand import GPU, U

MEMORIES = {
    "cnmem": lambda: Pool(4 * U),
    "caching": lambda: CachingPool(64 * U),
    "pager": lambda: Pager(4 * U, UvmParams(), GPU.link, frozenset()),
}


@pytest.mark.parametrize("kind", MEMORIES)
def test_each_memory_implements_the_interface(kind):
    m = MEMORIES[kind]()
    assert isinstance(m, MemoryModel)
    assert m.alloc("a", U, "activations", 1) and "a" in m and m.live_keys() == ["a"]
    m.free("a", 2)
    assert "a" not in m and m.live_keys() == []


def test_the_books_alone_are_not_a_memory():
    """The check above can fail: the accounting every model shares allocates nothing."""
    assert not isinstance(Accounting(None), MemoryModel)


@pytest.mark.parametrize("kind", ["cnmem", "caching"])
def test_a_pools_access_costs_nothing_and_changes_nothing(kind):
    m = MEMORIES[kind]()
    m.alloc("a", U, "activations", 1)
    before = (m.live_bytes, list(m.times), list(m.levels))
    assert m.access([("a", U, False), ("b", U, True)], 2) == NO_FAULTS
    assert (m.live_bytes, m.times, m.levels) == before and "b" not in m
