"""NOTE [cublas workspaces]: a replayed first step allocates the cuBLAS workspaces at the
first matmuls, inside the step; a one-iteration replay has them at its start."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

from vdnnsim import run_trace
from vdnnsim.engine.caching import CachingPool
from vdnnsim.engine.compile import LT_WORKSPACE, cublas_workspaces
from vdnnsim.trace.optimizer import with_optimizer

from .conftest import chain_trace, hand_gpu

M = 2**20
W = 65 * M  # the h200 preset's: two handles' 32 MiB and cuBLASLt's 1 MiB


def _net(resident: int = W):
    """conv a (64 MiB, read by b's forward only), conv b, then two Linear layers."""
    t = chain_trace([{"id": "a", "size": 64 * M, "fwd": 10**6, "bwd": 10**6, "weight": M},
                     {"id": "b", "size": 8 * M, "fwd": 10**6, "bwd": 10**6, "weight": M,
                      "saves": ""},
                     {"id": "f0", "kind": "fc", "size": M, "fwd": 10**6, "bwd": 10**6,
                      "weight": 4 * M},
                     {"id": "f1", "kind": "fc", "size": M, "fwd": 10**6, "bwd": 10**6,
                      "weight": 4 * M}],
                    input_bytes=8 * M, framework="pytorch")
    return replace(t, resident_bytes=resident, step_ns=10**6)


def _gpu():
    return replace(hand_gpu(), cublas_workspace_bytes=W)


def _allocs(trace, gpu):
    """(iteration, key, segment) of every allocation, in order."""
    seen, it = [], [0]
    real, nxt = CachingPool.alloc, CachingPool.next_iteration

    def alloc(pool, key, *a, **kw):
        ok = real(pool, key, *a, **kw)
        if key in pool:
            seen.append((it[0], key, pool._blocks[key][0]))
        return ok

    def next_iteration(pool):
        it[0] += 1
        nxt(pool)
    with mock.patch.object(CachingPool, "alloc", alloc), \
            mock.patch.object(CachingPool, "next_iteration", next_iteration):
        r = run_trace(trace, gpu, "eager")
    return seen, r


def test_the_split_is_two_handles_and_cublaslt_at_the_first_matmuls():
    t = _net()
    ws = cublas_workspaces(t, W, W)
    assert ws is not None
    assert (ws.fwd_layer, ws.bwd_layer) == (2, 3)  # f0 in the forward, f1 in the backward
    assert ws.fwd == (32 * M, LT_WORKSPACE) and ws.bwd == (32 * M,)
    assert cublas_workspaces(t, 0, W) is None  # a preset without them
    assert cublas_workspaces(t, W, W - 1) is None  # a trace whose resident memory lacks them
    convs = replace(t, layers=t.layers[:2])
    assert cublas_workspaces(convs, W, W) is None  # no matmul: no handle ever made
    odd = cublas_workspaces(t, 4 * M + 1, 8 * M)  # not two handles and cuBLASLt's
    assert odd is not None and odd.fwd == (4 * M + 1,) and odd.bwd == ()


def test_a_replayed_first_step_allocates_them_at_the_first_matmuls_in_freed_blocks():
    t = with_optimizer(_net(), "adamw")  # a stateful optimizer: a warm-up step is replayed
    seen, r = _allocs(t, _gpu())
    first = [k for i, k, _ in seen if i == 0]
    assert ("resident", "") not in first  # nothing else resident: none at the start
    fwd = first.index(("resident", "cublas:forward:0"))
    assert first[fwd - 1] == "f0"  # after the first Linear's output, then cuBLASLt's
    assert first[fwd + 1] == ("resident", "cublas:forward:1")
    bwd = first.index(("resident", "cublas:backward:0"))
    assert first[bwd - 1] == ("grad", "f0")  # the backward's first matmul: f1's input grad
    seg = {k: s for i, k, s in seen if i == 0}
    # the 32 MiB workspace goes into the block a's output left (freed after b's forward),
    # not a segment of its own: that segment is held for good
    assert seg[("resident", "cublas:forward:0")] == seg["a"]
    assert not any(k[0] == "resident" for i, k, _ in seen if i == 1
                   if isinstance(k, tuple))  # the reported step finds them allocated
    assert r.peak_breakdown["resident"] == W


def test_a_one_iteration_replay_has_them_at_its_start():
    seen, r = _allocs(_net(), _gpu())  # SGD, no tuning replayed: one iteration
    assert seen[0][1] == ("resident", "")  # the whole of resident_bytes, before the step
    assert not any(isinstance(k, tuple) and k[1].startswith("cublas") for _, k, _ in seen)
    assert r.peak_breakdown["resident"] >= W
