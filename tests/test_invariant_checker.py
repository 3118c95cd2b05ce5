"""The engine's own checks (NOTE [invariants]) fire on a broken replay and stay silent on
sound ones."""

from __future__ import annotations

import pytest

from vdnnsim.engine import replay
from vdnnsim.engine.allocator import Pool
from vdnnsim.engine.invariants import InvariantViolation, StreamClock
from vdnnsim.engine.sim import Simulation
from vdnnsim.policies import get_policy, liveness
from vdnnsim.policies.plan import Plan

from .conftest import chain_trace, hand_gpu

U = 2**20
GPU = hand_gpu(bw=U * 1000.0)


def _three():
    return chain_trace([{"id": f"c{i}", "size": U, "fwd": 1000, "bwd": 1000}
                        for i in range(3)], input_bytes=U)


def test_a_backward_pass_that_would_read_a_buffer_left_on_the_host_is_caught(monkeypatch):
    t = _three()
    fn, fixed = get_policy("vdnn_all_m")
    plan = fn(t, GPU, None, dict(fixed))
    replay(t, GPU, plan, None, liveness(t))  # sound: no complaint

    def lost(self, buf, layer, on_demand=False):  # an engine that forgets to copy back
        return None

    monkeypatch.setattr(Simulation, "_prefetch", lost)
    with pytest.raises(InvariantViolation, match=r"backward pass reads a buffer that is on "
                       r"the host \(layer c2, tensor c1\)"):
        replay(t, GPU, plan, None, liveness(t))


def test_a_buffer_sent_to_the_host_before_its_reader_ran_is_caught():
    t = _three()
    fn, fixed = get_policy("vdnn_all_m")
    good = fn(t, GPU, None, dict(fixed))
    # layer c1 offloads its own output, which c2 has not read yet
    bad = Plan("broken", "layer_wise", good.algos, ((), ("c1",), ()), (-1, -1, -1))
    with pytest.raises(InvariantViolation, match=r"forward pass reads a buffer that is on "
                       r"the host \(layer c2, tensor c1\); this is a bug in vdnnsim: please "
                       r"report it with the input$"):
        replay(t, GPU, bad, None, liveness(t))


def test_live_bytes_never_go_negative():
    pool = Pool(None)
    pool.alloc("a", 1024, "activations", 0)
    with pytest.raises(InvariantViolation, match="fell to -1024"):
        pool._given_back("a", 2048, "activations", 1)  # a free of more than was taken


def test_a_stream_runs_one_op_at_a_time():
    clock = StreamClock("d2h")
    clock.op(0, 10, "l1", "a copy")
    clock.op(10, 20, "l2", "a copy")  # back to back is fine
    with pytest.raises(InvariantViolation, match="d2h stream ran a copy from 15 to 30"):
        clock.op(15, 30, "l3", "a copy")


def test_the_cli_reports_a_violation_as_a_bug_with_exit_code_3(tmp_path, monkeypatch, capsys):
    import vdnnsim.cli as cli
    from vdnnsim.engine import sim

    def broken(self):
        raise InvariantViolation("made up for the test", "c1", "c1")

    monkeypatch.setattr(sim.Simulation, "_check_end", broken)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("network: alexnet\nbatch_size: 2\npolicy: vdnn_all_m\n")
    assert cli.main(["run", str(cfg)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vdnnsim: internal error: made up")
    assert "please report it" in err
