"""maxbatch: a search whose answer fits and whose next size does not."""

from __future__ import annotations

import json
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
    # NOTE [maxbatch]: what stops the next size, as that run's out-of-memory says
    assert r["bound"] == "capacity"
    assert vdnnsim.simulate("vgg16", b + 1, "k40", "baseline_p").oom.reason == "capacity"


def test_offload_raises_the_limit_and_nothing_fits_a_tiny_card():
    base = max_batch("alexnet", "k40", "baseline_p", memory_bytes=2 * 10**9)
    vdnn = max_batch("alexnet", "k40", "vdnn_all_m", memory_bytes=2 * 10**9)
    assert vdnn["max_batch_size"] > base["max_batch_size"] > 0
    none = max_batch("vgg16", "k40", "vdnn_all_m", memory_bytes=10**8)
    assert (none["max_batch_size"], none["bound"]) == (0, "capacity")


def test_sizes_beyond_the_simulated_scale_count_as_not_fitting():
    # a 1 PiB cap: every VGG-16 batch the simulator can model fits, so the search runs into
    # the 1 PiB bound on the network's bytes, which must stop it without an error
    r = max_batch("vgg16", "h200", "baseline_p", memory_bytes=2**50, limit=2**40)
    b, beyond = r["max_batch_size"], r["beyond_scale_at"]
    assert 0 < b < beyond <= 2**40
    assert r["bound"] == "scale" and beyond == b + 1
    assert vdnnsim.simulate("vgg16", b, "h200", "baseline_p", memory_bytes=2**50).fits
    try:
        vdnnsim.simulate("vgg16", beyond, "h200", "baseline_p", memory_bytes=2**50)
    except vdnnsim.VdnnError as exc:
        assert "1 PiB" in str(exc)
    else:
        raise AssertionError(f"batch {beyond} was simulated, yet reported beyond the scale")


def test_a_fragmented_pool_is_named_as_the_bound():
    """AlexNet under vdnn_dyn on the K40: the next batch's live bytes would fit, but no
    free block is large enough (the answer a user would otherwise read as capacity)."""
    r = max_batch("alexnet", "k40", "vdnn_dyn")
    b = r["max_batch_size"]
    assert r["bound"] == "fragmentation"
    nxt = vdnnsim.simulate("alexnet", b + 1, "k40", "vdnn_dyn")
    assert not nxt.fits and nxt.oom.fragmented and nxt.oom.reason == "fragmentation"


def test_host_memory_bounds_the_answer():
    """NOTE [host memory]: with a 1.5 GB host, AlexNet under vdnn_all_m in a 2 GB pool
    stops where its offloads outgrow the host, below the pool's own answer."""
    free = max_batch("alexnet", "k40", "vdnn_all_m", memory_bytes=2 * 10**9)
    r = max_batch("alexnet", "k40", "vdnn_all_m", memory_bytes=2 * 10**9,
                  host_memory_bytes="1.5 GB")
    b = r["max_batch_size"]
    assert free["bound"] == "fragmentation" and free["peak_host_bytes"] > 1.5e9
    assert 0 < b < free["max_batch_size"]
    assert r["bound"] == "host memory" and r["host_capacity_bytes"] == 1.5e9
    assert r["peak_host_bytes"] <= 1.5e9
    over = {"host_memory_bytes": "1.5 GB"}
    assert vdnnsim.simulate("alexnet", b, "k40", "vdnn_all_m", gpu_overrides=over,
                            memory_bytes=2 * 10**9).fits
    nxt = vdnnsim.simulate("alexnet", b + 1, "k40", "vdnn_all_m", gpu_overrides=over,
                           memory_bytes=2 * 10**9)
    assert nxt.oom.reason == "host memory" and nxt.peak_host_bytes > 1.5e9


def test_the_limit_itself_is_tried():
    """A limit between two doublings: the answer is the limit when it fits (not the
    doubling below it), and the largest fit below it when it does not."""
    r = max_batch("alexnet", "k40", "baseline_p", limit=100)
    assert (r["max_batch_size"], r["at_limit"], r["bound"]) == (100, True, "limit")
    r = max_batch("vgg16", "k40", "baseline_p", limit=120)  # 112 fits, 113 does not
    assert (r["max_batch_size"], r["at_limit"], r["bound"]) == (112, False, "capacity")


def test_the_command_prints_the_bound_and_takes_a_host_size(capsys):
    from vdnnsim.cli import main

    args = ["maxbatch", "-n", "alexnet", "-g", "k40", "-p", "vdnn_all_m", "--memory", "2 GB"]
    assert main(args + ["--host-memory", "1.5 GB"]) == 0
    head, row = capsys.readouterr().out.splitlines()
    assert head.split()[-2:] == ["sims", "bound"] and "host GB" in head
    assert row.endswith("  host memory")
    assert main(args + ["--host-memory", "1.5 GB", "--json"]) == 0
    [rec] = json.loads(capsys.readouterr().out)
    assert (rec["bound"], rec["host_capacity_bytes"]) == ("host memory", 1.5e9)
    assert main(args + ["--host-memory", "lots"]) == 2
    assert capsys.readouterr().err.startswith("vdnnsim: error: --host-memory: 'lots'")
