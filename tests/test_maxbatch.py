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


def test_sizes_beyond_the_simulated_scale_count_as_not_fitting():
    # a 1 PiB cap: every VGG-16 batch the simulator can model fits, so the search runs into
    # the 1 PiB bound on the network's bytes, which must stop it without an error
    r = max_batch("vgg16", "h200", "baseline_p", memory_bytes=2**50, limit=2**40)
    b, beyond = r["max_batch_size"], r["beyond_scale_at"]
    assert 0 < b < beyond <= 2**40
    assert vdnnsim.simulate("vgg16", b, "h200", "baseline_p", memory_bytes=2**50).fits
    try:
        vdnnsim.simulate("vgg16", beyond, "h200", "baseline_p", memory_bytes=2**50)
    except vdnnsim.VdnnError as exc:
        assert "1 PiB" in str(exc)
    else:
        raise AssertionError(f"batch {beyond} was simulated, yet reported beyond the scale")
