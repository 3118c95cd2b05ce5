"""The op calibration harness (NOTE [op calibration]) on the CPU: every case kind builds,
records the ATen op it stands for with its features, and is timed by a stand-in clock.
The timings themselves are the GPU's (vdnnsim calibrate --ops on the H200)."""

import random

import pytest

torch = pytest.importorskip("torch")

from vdnnsim.gpu import calibrate_ops as co  # noqa: E402


class FakeClock:
    def time_ms(self, fn, budget_ms=10.0):
        fn()
        return 0.01, 0.005


def _small(cases):
    out = []
    for c in cases:
        c = dict(c)
        for k in ("m", "n", "k", "rows", "cols"):
            if k in c:
                c[k] = min(c[k], 96)
        for k, v in (("B", 2), ("H", 2), ("S", 16), ("b", 2)):
            if k in c:
                c[k] = v
        if c["op"].endswith("_step"):
            c["params"] = 5000
        out.append(c)
    return out


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_harness_runs_every_case_kind_on_cpu(monkeypatch, dtype):
    real = co.op_cases
    monkeypatch.setattr(co, "op_cases", lambda rng, n, dt: _small(real(rng, n, dt)))
    real_steps = co.step_cases
    monkeypatch.setattr(co, "step_cases", lambda rng, n: _small(real_steps(rng, n)))
    data = co.calibrate_ops(dtype, scale=0.1, dev=torch.device("cpu"), clock=FakeClock())
    assert data["format"] == co.FORMAT and data["dtype"] == dtype
    recs = data["records"]
    kinds = {r["op"] for r in recs}
    # every streaming op and every GEMM kind was timed (attention's fused kernels have no CPU
    # backend: those cases are logged as skipped, not lost)
    assert set(co.UNARY + co.BINARY + co.OTHER) <= kinds
    assert {"mm", "addmm", "bmm"} <= kinds
    assert all(s["op"] == "sdpa" for s in data["skipped"])
    mm = next(r for r in recs if r["op"] == "mm" and r["pass"] == "fwd")
    main = [o for o in mm["ops"] if o["op"] == "mm"][0]
    assert (main["m"], main["n"], main["k"]) == (mm["m"], mm["n"], mm["k"])
    ln = next(r for r in recs if r["op"] == "layer_norm")
    assert [o["op"] for o in ln["ops"]] == ["native_layer_norm"]
    assert {r["pass"] for r in recs if r["op"] == "gelu"} == {"fwd", "bwd"}
    if dtype == "fp32":
        assert {"adamw_step", "sgd_step"} <= kinds
    assert len(data["host_chains"]) == 2 * len(co.HOST_CHAINS)
    # NOTE [host probe]: each chain's record says how fast the host was beside it
    assert all(c["host_probe_between_ns"] > 0 for c in data["host_chains"])


def test_grid_is_seeded_and_respects_limits():
    a = co.op_cases(random.Random(0), 10, "bf16")
    assert a == co.op_cases(random.Random(0), 10, "bf16")
    for c in a:
        if c["op"] in ("mm", "addmm"):
            assert 2 * c["m"] * c["n"] * c["k"] <= 2e13
        if c["op"] == "sdpa" and c["kernel"] == "flash":
            assert c["D"] <= 256
