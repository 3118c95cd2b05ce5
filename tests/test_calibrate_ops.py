"""The op calibration harness (NOTE [op calibration]) on the CPU: every case kind builds,
records the ATen op it stands for with its features, and is timed by a stand-in clock.
The timings themselves are the GPU's (vdnnsim calibrate --ops on the H200)."""

import random

import pytest

torch = pytest.importorskip("torch")

from vdnnsim.gpu.calibrate import ops as co  # noqa: E402


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


def _small_cnn(cases):
    out = []
    for c in cases:
        c = dict(c, batch=2, h=min(c["h"], 9))
        if c["op"] == "conv":
            dw = c["groups"] == c["c"] and c["c"] > 1
            c["c"] = min(c["c"], 16) if c["c"] > 3 else 3
            c["groups"] = c["c"] if dw else 1
            c["k_out"] = c["c"] if dw else min(c["k_out"], 16)
        else:
            c["c"] = min(c["c"], 32)
        out.append(c)
    return out


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_harness_runs_every_case_kind_on_cpu(monkeypatch, dtype):
    real = co.op_cases
    monkeypatch.setattr(co, "op_cases", lambda rng, n, dt: _small(real(rng, n, dt)))
    real_cnn = co.cnn_cases
    monkeypatch.setattr(co, "cnn_cases",
                        lambda rng, n, dt, grid: _small_cnn(real_cnn(rng, n, dt, grid)))
    real_norms = co.norm_cases  # full size, these are feature maps of up to 2 GiB each
    monkeypatch.setattr(co, "norm_cases",
                        lambda rng, n, dt, grid: _small_cnn(real_norms(rng, n, dt, grid)))
    real_steps = co.step_cases
    monkeypatch.setattr(co, "step_cases", lambda rng, n: _small(real_steps(rng, n)))
    real_video = co.video_cases  # full size, 3-D convolutions of up to 2 GiB each
    monkeypatch.setattr(co, "video_cases", lambda rng, n, dt: [
        dict(c, batch=1, c=min(c["c"], 8), k_out=min(c["k_out"], 8), t=min(c["t"], 4),
             h=min(c["h"], 16)) for c in real_video(rng, n, dt)])
    data = co.calibrate_ops(dtype, scale=0.1, dev=torch.device("cpu"), clock=FakeClock())
    assert data["format"] == co.FORMAT and data["dtype"] == dtype
    recs = data["records"]
    kinds = {r["op"] for r in recs}
    # every streaming op and every GEMM kind was timed (attention's fused kernels have no CPU
    # backend: those cases are logged as skipped, not lost)
    assert set(co.UNARY + co.BINARY + co.OTHER) <= kinds
    assert {"mm", "addmm", "bmm", "conv3d"} <= kinds
    c3 = next(r for r in recs if r["op"] == "conv3d")
    assert [o for o in c3["ops"] if o["op"] == "convolution"][0]["nd"] == 3
    assert all(s["op"] == "sdpa" for s in data["skipped"])
    mm = next(r for r in recs if r["op"] == "mm" and r["pass"] == "fwd")
    main = [o for o in mm["ops"] if o["op"] == "mm"][0]
    assert (main["m"], main["n"], main["k"]) == (mm["m"], mm["n"], mm["k"])
    ln = next(r for r in recs if r["op"] == "layer_norm")
    assert [o["op"] for o in ln["ops"]] == ["native_layer_norm"]
    assert {r["pass"] for r in recs if r["op"] == "gelu"} == {"fwd", "bwd"}
    if dtype == "fp32":
        assert {"adamw_step", "sgd_step"} <= kinds
    # the CNN grid: convolutions in both memory formats, dense and depthwise, each recorded
    # as the op the model keys on (NOTE [op features]), and every 4-D streaming op
    from vdnnsim.costs.opfit import _main_op
    from vdnnsim.costs.ops import conv_kind
    assert set(co.CNN_STREAMING) <= kinds
    convs = [_main_op(r) for r in recs if r["op"] == "conv" and r["pass"] == "fwd"]
    assert {conv_kind(f) for f in convs} == {"dense", "dw", "dense_cl", "dw_cl"}
    for r in recs:
        if r["op"] in co.CNN_STREAMING:
            assert _main_op(r) is not None, r["op"]
    assert data["classes"] == "all" and data["numerics"]["cudnn_allow_tf32"] is not None
    assert len(data["host_chains"]) == 2 * len(co.HOST_CHAINS)
    # NOTE [host probe]: each chain's record says how fast the host was beside it
    assert all(c["host_probe_between_ns"] > 0 for c in data["host_chains"])


def test_the_cnn_grid_leaves_the_transformer_grid_of_a_seed_as_it_was():
    """--classes: the shipped files' cases, in order, are their grids' (the transformer grid
    of seed 0 unchanged by the CNN grid, which has a seed of its own); each memory format
    has its dense and depthwise convolutions."""
    import json
    from importlib import resources
    cal = resources.files("vdnnsim").joinpath("data", "calibration")
    for dtype, classes, name in (("fp32", "transformer", "fp32"), ("bf16", "transformer", "bf16"),
                                 ("fp32", "cnn", "cnn_fp32"), ("bf16", "cnn", "cnn_bf16")):
        raw = json.loads(cal.joinpath(f"h200_ops_{name}.json").read_text())
        grid = co._todo(classes, raw.get("scale", 1.0), raw.get("seed", 0), dtype,
                        raw.get("grid", 1))  # the shipped CNN files are grid 1's
        skipped = [{k: v for k, v in c.items() if k != "error"} for c in raw["skipped"]]
        # the shipped file's cases, in order, are the grid's (less what it skipped)
        keys = lambda c: tuple(sorted((k, v) for k, v in c.items()  # noqa: E731
                                      if k not in ("pass", "ops", "time_ns", "host_ns",
                                                   "workspace_bytes")))
        seen = []
        for r in raw["records"]:
            k = keys(r)
            if not seen or seen[-1] != k:
                seen.append(k)
        assert seen == [keys(c) for c in grid if c not in skipped], name
    cnn = co._todo("cnn", 1.0, 0, "bf16")
    video = co._todo("video", 1.0, 0, "bf16")
    assert co._todo("all", 1.0, 0, "bf16") == co._todo("transformer", 1.0, 0, "bf16") + cnn \
        + co._todo("norms", 1.0, 0, "bf16") + video
    # the video grid: 3-D convolutions of each kind video CNNs have, within the memory caps
    assert len(video) == 100 and {c["op"] for c in video} == {"conv3d"}
    assert {(c["kt"], c["kh"]) for c in video} >= {(3, 3), (1, 1), (1, 3), (3, 1)}
    assert all(c["batch"] * max(c["c"], c["k_out"]) * c["t"] * c["h"] ** 2 * 2 <= 2**31
               for c in video)
    convs = [c for c in cnn if c["op"] == "conv"]
    for cl in (False, True):
        dw = [c for c in convs if c["cl"] == cl and c["groups"] == c["c"] > 1]
        assert len(dw) == 40 and sum(c["cl"] == cl for c in convs) == 140
    for c in convs:
        assert c["c"] % c["groups"] == 0 and c["k_out"] % c["groups"] == 0
    with pytest.raises(ValueError):
        co._todo("rnn", 1.0, 0, "fp32")


def test_grid_is_seeded_and_respects_limits():
    a = co.op_cases(random.Random(0), 10, "bf16")
    assert a == co.op_cases(random.Random(0), 10, "bf16")
    for c in a:
        if c["op"] in ("mm", "addmm"):
            assert 2 * c["m"] * c["n"] * c["k"] <= 2e13
        if c["op"] == "sdpa" and c["kernel"] == "flash":
            assert c["D"] <= 256


def test_host_mixes_draw_every_kind_and_keep_their_counts():
    """NOTE [host mixes]: on the CPU (a smoke test of the harness; the host's times are a
    GPU machine's): each family's chains draw from its kinds in varied proportions, a cast
    link counts its two casts, and every mix is timed forward and backward."""
    mixes = co.host_mixes(torch.device("cpu"), torch.float32, sequences=3, length=24)
    assert [m["family"] for m in mixes] == ["transformer"] * 3 + ["cnn"] * 3
    for m in mixes:
        kinds = co.MIX_FAMILIES[m["family"]]
        assert set(m["counts"]) == set(kinds)
        links = sum(n // 2 if k == "cast" else n for k, n in m["counts"].items())
        assert links == 24 and m["ops"] == sum(m["counts"].values())
        assert m["counts"].get("cast", 0) % 2 == 0  # fp32: a cast link's two, no other
        assert m["host_fwd_ns"] > 0 and m["host_bwd_ns"] > 0 and m["host_probe_between_ns"] > 0
    shares = {tuple(m["counts"].values()) for m in mixes if m["family"] == "transformer"}
    assert len(shares) == 3  # proportions differ from one chain to the next
    # seeded: the same draws again
    again = co.host_mixes(torch.device("cpu"), torch.float32, sequences=3, length=24)
    assert [m["counts"] for m in again] == [m["counts"] for m in mixes]
    # under autocast every link's own weight is cast, and counted so: at least one cast a
    # linear link beyond the cast links' own two
    auto = co.host_mixes(torch.device("cpu"), torch.float32, torch.bfloat16, sequences=3,
                         length=24)
    for m, plain in zip(auto, mixes):
        assert m["counts"]["cast"] >= plain["counts"].get("cast", 0) \
            + plain["counts"].get("linear", 0) + plain["counts"].get("conv", 0)


def test_cnn_grid_covers_high_resolution_stages_within_its_limits():
    """The CNN grid (version 2) draws dense convolutions on 224 x 224 maps of 32-64 channels
    (VGG's and U-Net's first stage), not only stems, and keeps every tensor within 2 GiB;
    grid 1 (the shipped files') had none."""
    assert co.GRID == 2
    assert not [c for c in co.cnn_cases(random.Random(2), 10, "fp32", 1)
                if c["op"] == "conv" and c["h"] == 224 and c["c"] > 3]
    for dt, e in (("fp32", 4), ("bf16", 2)):
        cases = co.cnn_cases(random.Random(2), 10, dt)
        wide = [c for c in cases if c["op"] == "conv" and c["h"] == 224 and c["c"] >= 32]
        assert wide and any(c["groups"] == 1 and c["kh"] == 3 for c in wide)
        for c in cases:
            assert c["batch"] * c["c"] * c["h"] ** 2 * e <= 2**31
