"""NOTE [backward workspaces]: a backward pass's workspaces one by one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vdnnsim import run_trace
from vdnnsim.errors import TraceError
from vdnnsim.trace.io import load_trace, save_trace

from .conftest import chain_trace, hand_gpu

M = 2**20


def test_a_backward_passs_workspaces_are_allocated_one_after_the_other():
    """NOTE [backward workspaces]: backward data's workspace (20 MiB), freed, then backward
    filter's (22 MiB), which its segment cannot hold: both segments stay reserved, where
    the largest alone made one."""
    one = chain_trace([{"id": "c", "size": 4 * M, "weight": 0,
                        "algos": [{"name": "a", "fwd_ns": 10**6, "bwd_ns": 10**6,
                                   "bwd_workspace_bytes": 22 * M}]}],
                      input_bytes=4 * M, framework="pytorch")
    a = one.layers[0].algos[0]
    two = replace(one, layers=(replace(one.layers[0], algos=(
        replace(a, bwd_workspaces=(20 * M, 22 * M)),)),))
    r1, r2 = run_trace(one, hand_gpu(), "eager"), run_trace(two, hand_gpu(), "eager")
    assert r2.peak_footprint_bytes - r1.peak_footprint_bytes == 20 * M
    assert r2.peak_memory_bytes == r1.peak_memory_bytes  # never both allocated at once


def test_backward_workspaces_round_trip_and_their_largest_is_the_backward_workspace(
        tmp_path):
    t = chain_trace([{"id": "c", "size": M,
                      "algos": [{"name": "a", "fwd_ns": 1, "bwd_ns": 1,
                                 "bwd_workspace_bytes": 3 * M}]}], framework="pytorch")
    a = t.layers[0].algos[0]
    t = replace(t, layers=(replace(t.layers[0], algos=(
        replace(a, bwd_workspaces=(M, 3 * M)),)),))
    save_trace(t, tmp_path / "t.yaml")
    assert load_trace(tmp_path / "t.yaml").layers[0].algos[0].bwd_workspaces == (M, 3 * M)
    text = (tmp_path / "t.yaml").read_text().replace(", 3145728]", ", 2097152]")
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(TraceError, match="bwd_workspaces"):
        load_trace(tmp_path / "bad.yaml")


def test_the_profilers_backward_calls_are_the_convolutions_own():
    """NOTE [backward workspaces]: the profiler measures each of a conv's backward calls
    alone (on CUDA); here, on the CPU, that those calls are the backward's: the input's
    gradient, then the weight's, as autograd computes them."""
    torch = pytest.importorskip("torch")
    from vdnnsim.gpu.profile.layers import conv_backward_calls
    conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1, groups=1)
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    out = conv(x)
    g = torch.randn_like(out)
    gx, gw = torch.autograd.grad(out, (x, conv.weight), g)
    calls = conv_backward_calls(conv, x, g)
    assert len(calls) == 2
    assert torch.allclose(calls[0]()[0], gx, atol=1e-5)
    assert torch.allclose(calls[1]()[1], gw, atol=1e-5)
    assert len(conv_backward_calls(conv, x.detach(), g)) == 1  # no input gradient
    same = torch.nn.Conv2d(3, 4, 3, padding="same")
    assert conv_backward_calls(same, x, g) == []

