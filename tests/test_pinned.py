"""NOTE [pinned pool]: the host's pinned memory that offloads keep, as PyTorch's caching
host allocator keeps it, and the committed H200 measurements of it
(traces/h200_reserved_heldout/set_a/snap: `torch.cuda.host_memory_stats()` after the timed
steps of nine offloading runs)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from vdnnsim.api import build_trace, resolve_gpu, run_trace
from vdnnsim.engine.pinned import PinnedPool, pinned_block
from vdnnsim.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
SNAP = ROOT / "traces" / "h200_reserved_heldout" / "set_a" / "snap"
POLICY = {"vdnn_all": "vdnn_all_p", "vdnn_conv": "vdnn_conv_p"}  # as validate maps them


def test_blocks_are_powers_of_two_reused_by_size_and_never_returned():
    assert [pinned_block(n) for n in (1, 2, 3, 1000, 1024, 1025)] == \
        [1, 2, 4, 1024, 1024, 2048]
    p = PinnedPool()
    p.take(600)
    p.take(1000)  # the same 1 KiB size, both held: two blocks
    assert (p.reserved_bytes, p.blocks) == (2048, 2)
    p.give(600)
    p.take(513)  # reuses the free 1 KiB block
    p.take(3000)  # a 4 KiB block: none free of that size
    assert (p.reserved_bytes, p.blocks) == (2048 + 4096, 3)
    p.give(513), p.give(1000), p.give(3000)
    assert p.reserved_bytes == 6144  # kept, as PyTorch keeps them


def test_a_pytorch_offload_run_pins_the_power_of_two_blocks_of_its_copies():
    gpu = resolve_gpu("h200")
    trace = load_trace(ROOT / "traces" / "h200_torchvision" / "vgg16_b64.yaml")  # PyTorch's runtime
    r = run_trace(trace, gpu, "vdnn_conv_p")
    sizes = [op.size_bytes for op in r.ops if op.kind == "offload"]
    assert sizes and r.pinned_host_bytes == sum(pinned_block(s) for s in sizes)
    assert r.pinned_host_bytes > r.peak_host_bytes == r.offloaded_bytes
    assert r.summary()["pinned_host_bytes"] == r.pinned_host_bytes
    titan = resolve_gpu("titanx_maxwell")  # the paper's Torch7 runtime: pinned per copy
    torch7 = run_trace(build_trace("vgg16", 64, titan), titan, "vdnn_conv_p")
    assert torch7.pinned_host_bytes == torch7.peak_host_bytes > 0
    assert run_trace(trace, gpu, "eager").pinned_host_bytes == 0


def _snapshots():
    for f in sorted(SNAP.glob("*.json")):
        rec = json.loads(f.read_text())
        if rec.get("offloads"):
            yield f.stem, rec


@pytest.mark.parametrize("name,rec", list(_snapshots()), ids=lambda x: x if isinstance(x, str) else "")
def test_each_measured_run_offloads_what_the_replay_offloads(name, rec):
    net, batch = rec["model"].split(":")[1], rec["batch_size"]
    trace = load_trace(ROOT / "traces" / "h200_torchvision" / f"{net}_b{batch}.yaml")
    r = run_trace(trace, resolve_gpu("h200"), POLICY[rec["policy"]], record=False)
    assert r.offloaded_bytes == rec["offloaded_bytes"]


def test_the_pinned_pool_against_the_h200():
    """Nine runs: the prediction is low by 2-4% on seven, and by one 1 or 2 GiB block (26%)
    on VGG-16: each run kept one block (DenseNet-121 at 128: two) more than its copies
    needed at once, a block asked for while its size's last block was still in flight,
    which the pool does not model (NOTE [pinned pool]); with every step synchronised the
    H200 held exactly the predicted blocks (pinned_pool)."""
    errs = []
    for name, rec in _snapshots():
        net, batch = rec["model"].split(":")[1], rec["batch_size"]
        trace = load_trace(ROOT / "traces" / "h200_torchvision" / f"{net}_b{batch}.yaml")
        r = run_trace(trace, resolve_gpu("h200"), POLICY[rec["policy"]], record=False)
        host = rec["host_memory_stats"]
        assert 1 <= host["allocations.current"] - rec["offloads"] <= 2
        measured = host["allocated_bytes.current"]
        assert r.pinned_host_bytes < measured  # the unmodelled block only adds
        errs.append((r.pinned_host_bytes - measured) / measured)
    assert len(errs) == 9
    assert statistics.median(abs(e) for e in errs) < 0.05
    assert max(abs(e) for e in errs) < 0.30
    vgg = load_trace(ROOT / "traces" / "h200_torchvision" / "vgg16_b64.yaml")
    r = run_trace(vgg, resolve_gpu("h200"), "vdnn_conv_p", record=False)
    probe = [json.loads(x) for x in
             (SNAP.parent.parent / "pinned_pool" / "pinned_probe.jsonl").open()]
    for p in probe:  # synchronised steps: exactly the prediction; unsynchronised: more
        if p["sync"]:
            assert (p["blocks"], p["pinned_bytes"]) == (12, r.pinned_host_bytes)
        else:
            assert p["pinned_bytes"] > r.pinned_host_bytes
