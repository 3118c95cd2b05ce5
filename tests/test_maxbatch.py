"""maxbatch: a search whose answer fits and whose next size does not."""

from __future__ import annotations

import math

import vdnnsim
from vdnnsim.study.maxbatch import max_batch


def test_the_answer_fits_and_the_next_size_does_not():
    r = max_batch("vgg16", "k40", "baseline_p")
    b = r["max_batch_size"]
    assert 0 < b < r.get("limit", 1 << 16)
    assert vdnnsim.simulate("vgg16", b, "k40", "baseline_p").fits
    assert not vdnnsim.simulate("vgg16", b + 1, "k40", "baseline_p").fits
    assert r["simulations"] <= 2 * math.ceil(math.log2(b + 1)) + 2
    assert r["slowdown"] == 1.0


def test_offload_raises_the_limit_and_nothing_fits_a_tiny_card():
    base = max_batch("alexnet", "k40", "baseline_p", memory_bytes=2 * 10**9)
    vdnn = max_batch("alexnet", "k40", "vdnn_all_m", memory_bytes=2 * 10**9)
    assert vdnn["max_batch_size"] > base["max_batch_size"] > 0
    assert max_batch("vgg16", "k40", "vdnn_all_m", memory_bytes=10**8)["max_batch_size"] == 0
