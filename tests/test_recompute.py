"""Activation checkpointing (NOTE [recompute]) on a hand-made chain, checked on paper."""

from __future__ import annotations

import pytest

from vdnnsim import run_trace
from vdnnsim.errors import ConfigError
from vdnnsim.policies.recompute import sequential_segments

from .conftest import chain_trace
from .test_engine_hand import GPU, MS, U


def four_convs():
    return chain_trace([{"id": f"c{i}", "size": U, "fwd": MS, "bwd": MS} for i in range(1, 5)],
                       input_bytes=U)


def test_checkpoint_sequential_splits_as_pytorch_does():
    assert sequential_segments(4, 2) == ((0, 1),)
    assert sequential_segments(10, 3) == ((0, 2), (3, 5))  # the last chunk (6-9) runs plain
    assert sequential_segments(4, 1) == ()
    assert sequential_segments(3, 5) == ()


def test_one_checkpointed_segment_on_four_convs():
    """Segment c1-c2. Forward drops c1 (only c2 keeps it) after c2's forward: 3U where
    eager holds 4U. Backward: c4, c3 as usual; then c1 and c2 run forward again (2 ms; c1
    back under its own key, c2's recomputed output transient), then c2 and c1 backward.
    Memory (U): 2, 3, 3, 4 | 5, 4 | 3, 4 (recompute) | 4, 2 | 0: peak 5U against eager's 6U."""
    eager = run_trace(four_convs(), GPU, "eager")
    r = run_trace(four_convs(), GPU, "checkpoint", {"segments": 2})
    assert eager.iteration_time_ns == 8 * MS and eager.peak_memory_bytes == 6 * U
    assert r.iteration_time_ns == 10 * MS and r.peak_memory_bytes == 5 * U
    compute = [(o.kind, o.name, o.start_ns // MS) for o in r.ops if o.stream == "compute"]
    assert compute[4:8] == [("bwd", "c4:bwd", 4), ("bwd", "c3:bwd", 5),
                            ("recompute", "c1:recompute", 6), ("recompute", "c2:recompute", 7)]
    times, levels = r.memory_steps
    assert [lv // U for lv in levels] == [2, 3, 3, 4, 5, 4, 3, 4, 4, 2, 0]
    assert [t // MS for t in times] == list(range(11))
    assert r.fits and r.offloaded_bytes == 0


def test_checkpoint_with_offload_never_moves_what_it_drops_or_rereads():
    r = run_trace(four_convs(), GPU, "checkpoint", {"segments": 2, "offload": "all"})
    # c1 is dropped and data is the segment's input: only c2 and c3 may move
    assert r.fits and r.offloaded_bytes == r.prefetched_bytes == 2 * U


@pytest.mark.parametrize("opts,frag", [
    ({"segments": 0}, "segments must be an integer from 1 to the layer count (4)"),
    ({"offload": "some"}, "offload must be none, conv or all"),
    ({"algo": 3}, "algo must be m or p"),
    ({"every": 2}, "unknown option(s) every"),
])
def test_bad_checkpoint_options_are_clear_errors(opts, frag):
    with pytest.raises(ConfigError) as e:
        run_trace(four_convs(), GPU, "checkpoint", opts)
    assert frag in str(e.value)
