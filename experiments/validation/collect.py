"""How the H200 validation set was made: profile each model and batch size into a trace,
then measure real training steps under each runtime policy, with and without a memory cap.

Run on the device machine (see traces/h200_torchvision/README.md); OUTDIR is relative to the working
directory, and the subprocesses import this checkout's vdnnsim from any folder:

    python3 experiments/validation/collect.py profile  OUTDIR      # traces/h200_torchvision/*.yaml
    python3 experiments/validation/collect.py measure  OUTDIR      # measurements.json
    python3 experiments/validation/collect.py smoke    OUTDIR      # a quick check of both
    python3 experiments/validation/collect.py capped OUTDIR        # capped runs, a process each
    python3 experiments/validation/collect.py capped-missing OUTDIR  # those measurements.json lacks
    python3 experiments/validation/collect.py save-on-cpu OUTDIR   # PyTorch's save_on_cpu, a process each
    python3 experiments/validation/collect.py heldout-profile OUTDIR  # traces/h200_torchvision_heldout/*.yaml
    python3 experiments/validation/collect.py heldout-measure OUTDIR  # traces/h200_torchvision_heldout/measurements.json
    python3 experiments/validation/collect.py hostcal OUTDIR       # traces/h200_host_calibration/hostcal.json
    python3 experiments/validation/collect.py hostcal2 OUTDIR      # traces/h200_host_calibration/hostcal2.json
    python3 experiments/validation/collect.py hostcal-measure OUTDIR  # traces/h200_host_calibration/measured.json
    python3 experiments/validation/collect.py hostnoise OUTDIR     # traces/h200_host_noise/: the host's spread
    python3 experiments/validation/collect.py kernels OUTDIR       # traces/h200_host_calibration/kernels.json
    python3 experiments/validation/collect.py reserved OUTDIR      # traces/h200_reserved_remeasured/: one step's own
    python3 experiments/validation/collect.py steady OUTDIR        # traces/h200_reserved_remeasured/steady_*.json
    python3 experiments/validation/collect.py calibrate OUTDIR     # vdnnsim/data/calibration/h200_fp32.json
    python3 experiments/validation/collect.py meta-heldout1 OUTDIR  # traces/h200_kernel_heldout_ten_models/measurements.json
    python3 experiments/validation/collect.py meta-heldout2 OUTDIR  # traces/h200_kernel_heldout_eight_models/measurements.json
    python3 experiments/validation/collect.py meta-heldout3 OUTDIR  # traces/h200_kernel_heldout_gradient_sums/measurements.json
    python3 experiments/validation/collect.py memcheck OUTDIR      # traces/h200_memcheck/: traces, measurements.json
    python3 experiments/validation/collect.py cublas OUTDIR        # traces/h200_memcheck/cublas.json
    python3 experiments/validation/collect.py hostkinds OUTDIR     # traces/h200_host_calibration/profiles/
    python3 experiments/validation/collect.py meta-heldout4 OUTDIR  # traces/h200_kernel_heldout_host_per_layer/measurements.json
    python3 experiments/validation/collect.py meta-heldout5 OUTDIR  # traces/h200_kernel_heldout_broadcast_linear/measurements.json

(The meta-heldout modes were heldout12, heldout12b .. heldout12e, and their folders
traces/h200_heldout12, h200_heldout12b .. e, until issue 27 named them by what they hold;
the old mode names still work.)

Every case is independent: one that fails is logged and the rest go on, and results are
written as they come, so a run cut short still leaves what it measured.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository; its data under traces/
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                          os.environ.get("PYTHONPATH")]))

SETS = {  # model: batch sizes
    "torchvision:vgg16": [64, 128, 256],
    "torchvision:resnet50": [64, 128, 256],
    "torchvision:densenet121": [32, 64, 128],
    "torchvision:mobilenet_v2": [64, 128, 256],
}
# A process that profiled keeps the probe's tensors reachable for a while: measure in a
# fresh process ('measure'), never after 'profile' in the same one.
# Issue 11's held-out set: models and batch sizes nothing in the simulator was tuned on
# (traces/h200_torchvision_heldout/README.md).
HELDOUT = {
    "torchvision:efficientnet_b0": [32, 64, 128],
    "torchvision:convnext_tiny": [32, 64, 128],
    "torchvision:shufflenet_v2_x1_0": [64, 128, 256],
    "torchvision:regnet_y_800mf": [32, 64, 128],
    "torchvision:wide_resnet50_2": [32, 64, 128],
}
# The runtime's host costs are calibrated on these (traces/h200_host_calibration/README.md), kept
# apart from both the validation set and the held-out set.
HOSTCAL = {"torchvision:resnet18": [16], "torchvision:resnet34": [16],
           "torchvision:squeezenet1_0": [16], "torchvision:mnasnet1_0": [16]}
# the second, larger calibration round (session 3): more models, two batch sizes, 15 steps
HOSTCAL2 = {m: [16, 64] for m in (
    "torchvision:resnet18", "torchvision:resnet34", "torchvision:resnet101",
    "torchvision:squeezenet1_0", "torchvision:mnasnet1_0", "torchvision:mnasnet0_5",
    "torchvision:mobilenet_v3_small")}
POLICIES = ["baseline", "vdnn_conv", "vdnn_all"]
# How much the host's speed varies between processes and over minutes on the device
# machine: the held-out set's most host-bound cases, profiled and measured again and again,
# each time in a fresh process (traces/h200_host_noise/README.md). Nothing is fitted to it.
NOISE = {"torchvision:shufflenet_v2_x1_0": 64, "torchvision:regnet_y_800mf": 32}
# Issue 12's held-out set for the calibrated kernel-time model: models in neither the
# calibration (microbenchmarks only), the validation set nor issue 11's held-out set, and
# none of the host-cost calibration models (traces/h200_kernel_heldout_ten_models/README.md).
META_HELDOUT1 = {
    "torchvision:resnext50_32x4d": [32, 64, 128], "torchvision:squeezenet1_1": [32, 64, 128],
    "torchvision:googlenet": [32, 64, 128], "torchvision:mobilenet_v3_large": [32, 64, 128],
    "torchvision:regnet_x_1_6gf": [32, 64, 128], "torchvision:resnet152": [32, 64, 128],
    "torchvision:vgg13": [32, 64, 128], "torchvision:efficientnet_b2": [16, 32, 64],
    "torchvision:mnasnet1_3": [32, 64, 128], "torchvision:shufflenet_v2_x2_0": [64, 128, 256]}
# A second held-out set for the same frozen kernel model (fit of commit 3a74255): eight more
# models in no other set, measured after the first held-out set had been compared
# (traces/h200_kernel_heldout_eight_models/README.md).
META_HELDOUT2 = {
    "torchvision:densenet169": [32, 64, 128], "torchvision:efficientnet_b1": [32, 64, 128],
    "torchvision:regnet_y_1_6gf": [32, 64, 128], "torchvision:resnext101_32x8d": [32, 64, 128],
    "torchvision:wide_resnet101_2": [32, 64, 128], "torchvision:vgg19_bn": [32, 64, 128],
    "torchvision:inception_v3": [32, 64, 128], "torchvision:efficientnet_v2_s": [32, 64, 128]}
# A third held-out set, for the kernel model with autograd's gradient sums (NOTE [gradient
# sums]), which the second set's fast bias led to (traces/h200_kernel_heldout_gradient_sums/README.md).
META_HELDOUT3 = {
    "torchvision:densenet201": [32, 64, 128], "torchvision:efficientnet_b3": [32, 64, 128],
    "torchvision:regnet_y_3_2gf": [32, 64, 128], "torchvision:regnet_x_3_2gf": [32, 64, 128],
    "torchvision:shufflenet_v2_x1_5": [64, 128, 256], "torchvision:mnasnet0_75": [32, 64, 128],
    "torchvision:vgg11": [32, 64, 128], "torchvision:resnext101_64x4d": [32, 64, 128]}
# The fourth held-out set, measured before the model of session 6 (layer norm, views, more
# grouped convs, host costs per kind) was fitted and compared only once it was committed.
META_HELDOUT4 = {
    "torchvision:densenet161": [32, 64, 128], "torchvision:efficientnet_b4": [32, 64, 128],
    "torchvision:regnet_x_8gf": [32, 64, 128], "torchvision:regnet_y_400mf": [32, 64, 128],
    "torchvision:shufflenet_v2_x0_5": [64, 128, 256], "torchvision:vgg16_bn": [32, 64, 128],
    "torchvision:convnext_small": [32, 64, 128], "torchvision:efficientnet_v2_m": [32, 64, 128]}
# The fifth held-out set, measured before the model of session 6's second round (a
# broadcast mul's size, linear layers over many rows) was fitted.
META_HELDOUT5 = {
    "torchvision:regnet_x_400mf": [32, 64, 128], "torchvision:regnet_x_800mf": [32, 64, 128],
    "torchvision:regnet_y_8gf": [32, 64, 128], "torchvision:vgg13_bn": [32, 64, 128],
    "torchvision:vgg19": [32, 64, 128], "torchvision:convnext_base": [32, 64, 128],
    "torchvision:efficientnet_b5": [32, 64, 128], "torchvision:efficientnet_v2_l": [32, 64, 128]}
# The two models issue 12 names for meta-device memory misses: where the cause is looked
# for, so they are validation, not held out.
MEMCHECK = {"torchvision:alexnet": [32, 64, 128], "torchvision:vgg11_bn": [32, 64, 128]}
CAPS_GIB = {12: -1, 8: 1}  # cap: which batch size of each model (index) runs capped


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def do_profile(out: Path, sets: dict, trials: int = 5) -> None:
    """Each model and batch size in a fresh process (`vdnnsim profile`): nothing one leaves
    in the allocator or in cuDNN's caches reaches the next."""
    import subprocess
    out.mkdir(parents=True, exist_ok=True)
    for model, batches in sets.items():
        for b in batches:
            name = model.split(":")[1]
            t0 = time.time()
            r = subprocess.run([sys.executable, "-m", "vdnnsim", "profile", "--model", model,
                                "--batch", str(b), "--trials", str(trials),
                                "-o", str(out / f"{name}_b{b}.yaml")],
                               capture_output=True, text=True)
            if r.returncode != 0:
                log(f"FAILED profile {model} b{b}: {r.stderr[-600:]}")
                continue
            log(f"{r.stdout.strip()} ({time.time() - t0:.1f}s)")


def do_measure(out: Path, sets: dict, caps: dict, iters: int = 5, extra: list | None = None,
               policies: list | None = None) -> None:
    from vdnnsim.gpu.measure.harness import measure
    out.mkdir(parents=True, exist_ok=True)
    path = out / "measurements.json"
    records = json.loads(path.read_text()) if path.exists() else []
    cases = [(m, b, p, None) for m, bs in sets.items() for b in bs
             for p in policies or POLICIES]
    for cap, idx in caps.items():
        cases += [(m, bs[idx], p, cap * 2**30) for m, bs in sets.items() for p in POLICIES]
    cases += extra or []
    for m, b, p, cap in cases:
        t0 = time.time()
        try:
            rec = measure(m, b, p, cap, warmup=2, iters=iters)
            records.append(rec)
            path.write_text(json.dumps(records, indent=1))
            log(f"measured {m} b{b} {p} cap={cap}: fits={rec['fits']} "
                f"{rec.get('iteration_ms', 0):.1f} ms "
                f"alloc={rec.get('peak_allocated_bytes', 0) / 2**30:.2f} GiB "
                f"({time.time() - t0:.1f}s)")
        except Exception:
            log(f"FAILED measure {m} b{b} {p}:\n{traceback.format_exc()}")


def do_measure_isolated(out: Path, cases: list) -> None:
    """Each case in a fresh process: an out-of-memory error in one leaves tensors reachable
    from its traceback, which would crowd the next capped run."""
    import subprocess
    out.mkdir(parents=True, exist_ok=True)
    path = out / "measurements_isolated.json"
    records = json.loads(path.read_text()) if path.exists() else []
    for m, b, p, cap in cases:
        cmd = [sys.executable, "-m", "vdnnsim", "measure", "--model", m, "--batch", str(b),
               "--policy", p, "--warmup", "2", "--iters", "5", "--json"]
        if cap:
            cmd += ["--memory-cap-gb", str(cap / 2**30)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            log(f"FAILED {m} b{b} {p} cap={cap}: {r.stderr[-300:]}")
            continue
        rec = json.loads(r.stdout)
        records.append(rec)
        path.write_text(json.dumps(records, indent=1))
        log(f"measured {m} b{b} {p} cap={cap}: fits={rec['fits']} "
            f"alloc={rec.get('peak_allocated_bytes', 0) / 2**30:.2f} GiB")


def do_hostnoise(out: Path, rounds: int = 3) -> None:
    """Round after round, each case profiled once and measured twice (baseline, 20 steps),
    every one in a fresh process; what each says of the host is kept side by side."""
    import re
    import subprocess
    out.mkdir(parents=True, exist_ok=True)
    path = out / "hostnoise.json"
    rows: list[dict] = []
    for k in range(rounds):
        for m, b in NOISE.items():
            name = m.split(":")[1]
            t0 = time.time()
            y = out / f"{name}_b{b}_r{k}.yaml"
            r = subprocess.run([sys.executable, "-m", "vdnnsim", "profile", "--model", m,
                                "--batch", str(b), "--trials", "5", "-o", str(y)],
                               capture_output=True, text=True)
            if r.returncode == 0:
                import yaml
                note = " ".join(yaml.safe_load(y.read_text())["source"]["note"].split())
                f = re.search(r"one step took ([\d.]+) ms with the timestamps, ([\d.]+) ms", note)
                h = re.search(r"forward pass in ([\d.]+) ms and the backward in ([\d.]+) ms", note)
                rows.append({"round": k, "model": m, "batch_size": b, "what": "profile",
                             "at_s": round(t0, 1), "plain_step_ms": float(f.group(2)),
                             "host_fwd_ms": float(h.group(1)), "host_bwd_ms": float(h.group(2))})
                log(f"profile {name} b{b} round {k}: plain step {f.group(2)} ms, host "
                    f"{h.group(1)} + {h.group(2)} ms")
            else:
                log(f"FAILED profile {m} b{b}: {r.stderr[-300:]}")
            for _ in range(2):
                t0 = time.time()
                r = subprocess.run([sys.executable, "-m", "vdnnsim", "measure", "--model", m,
                                    "--batch", str(b), "--policy", "baseline", "--warmup", "3",
                                    "--iters", "20", "--json"], capture_output=True, text=True)
                if r.returncode != 0:
                    log(f"FAILED measure {m} b{b}: {r.stderr[-300:]}")
                    continue
                rec = json.loads(r.stdout)
                rows.append({"round": k, "model": m, "batch_size": b, "what": "measure",
                             "at_s": round(t0, 1), "iteration_ms": rec["iteration_ms"],
                             "iteration_ms_all": rec["iteration_ms_all"],
                             "host_issue_ms": rec.get("host_issue_ms")})
                log(f"measure {name} b{b} round {k}: {rec['iteration_ms']:.2f} ms, host issue "
                    f"{rec.get('host_issue_ms', 0):.2f} ms")
            path.write_text(json.dumps(rows, indent=1))


def do_kernels(out: Path) -> None:
    """The launch queue's depth (NOTE [kernel counts]), then each layer's command count
    for every model and batch size of the three sets, in one process (counts, not memory
    or time, are what is read)."""
    import torch

    from vdnnsim.gpu.probe.fx import probe
    from vdnnsim.gpu.profile.kernels import count_kernels, launch_queue_depth
    from vdnnsim.gpu.model.build import build_model
    from vdnnsim.gpu.profile.layers import DTYPES, _rename
    out.mkdir(parents=True, exist_ok=True)
    path = out / "kernels.json"
    q = launch_queue_depth()
    log(f"launch queue: {q}")
    result: dict = {"launch_queue": q, "gpu": torch.cuda.get_device_name(),
                    "torch": torch.__version__, "models": []}
    path.write_text(json.dumps(result, indent=1))
    torch.backends.cudnn.benchmark = True
    for group, sets in (("calibration", HOSTCAL2), ("validation", SETS),
                        ("heldout", HELDOUT)):
        for m, batches in sets.items():
            for b in batches:
                t0 = time.time()
                try:
                    model, shape, name = build_model(m)
                    names = _rename(model)
                    p = probe(model, shape, b, "cuda", DTYPES["fp32"], name)
                    counts, opt = count_kernels(model, p)
                    del p
                    torch.cuda.empty_cache()
                except Exception:
                    log(f"FAILED kernels {m} b{b}:\n{traceback.format_exc()}")
                    continue
                layers = {names.get(k, k): v for k, v in counts.items()}
                result["models"].append({"group": group, "model": m, "batch_size": b,
                                         "optimizer": opt, "layers": layers})
                path.write_text(json.dumps(result, indent=1))
                log(f"kernels {m} b{b}: {sum(f for f, _ in layers.values())} forward, "
                    f"{sum(k for _, k in layers.values())} backward, {opt} optimizer "
                    f"({time.time() - t0:.1f}s)")


def do_hostcal(out: Path, sets: dict, steps: int = 7) -> None:
    """The host's time to issue each pass of a step, eager and under the vDNN runtime, with
    what the runtime did (layers, offloads, fetches, saved-tensor packs): the data the
    runtime's host costs are fitted on (NOTE [host costs] in vdnnsim/hardware.py)."""
    import torch
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cudnn.benchmark = True
    rows = []
    for spec, batches in sets.items():
        for batch in batches:
            for policy in POLICIES:
                try:
                    rows.append(_hostcal_one(spec, batch, policy, steps))
                except Exception:
                    log(f"FAILED hostcal {spec} b{batch} {policy}:\n{traceback.format_exc()}")
                    continue
                (out / "hostcal.json").write_text(json.dumps(rows, indent=1))
                torch.cuda.empty_cache()


def _hostcal_one(spec: str, batch: int, policy: str, steps: int) -> dict:
    import statistics

    import torch

    from vdnnsim.gpu.runtime.vdnn import VDNN
    from vdnnsim.gpu.model.workload import build_workload, training_step
    work = build_workload(spec)
    model = work.model.cuda().train()
    vd = VDNN(model, work.shape, policy)
    net = vd if policy != "baseline" else None
    train = training_step(work, batch, "cuda", runner=net)  # NOTE [training step]
    h: dict[str, list[float]] = {"fwd": [], "bwd": [], "step": [], "gpu": []}

    def step(timed: bool) -> None:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
            enable_timing=True)
        s.record()
        t: dict[str, float] = {}
        train(mark=lambda point, loss: t.__setitem__(point, time.perf_counter()))
        if net is vd:
            vd.end_iteration()
        t3 = time.perf_counter()
        e.record()
        e.synchronize()
        if timed:
            h["fwd"].append((t["forward"] - t["start"]) * 1e3)
            h["bwd"].append((t["backward"] - t["forward"]) * 1e3)
            h["step"].append((t3 - t["backward"]) * 1e3)
            h["gpu"].append(s.elapsed_time(e))

    for _ in range(3):
        step(False)
    before = dict(vd.stats)
    for _ in range(steps):
        step(True)
    per = {k: (vd.stats[k] - before[k]) // steps for k in vd.stats}
    row = {"model": spec, "batch_size": batch, "policy": policy,
           "layers": len(vd.index), **{f"host_{k}_ms": statistics.median(v)
                                       for k, v in h.items() if k != "gpu"},
           "step_ms": statistics.median(h["gpu"]), "runtime": per,
           "host_ms_all": h}
    log(f"hostcal {spec} b{batch} {policy}: host fwd {row['host_fwd_ms']:.2f} "
        f"bwd {row['host_bwd_ms']:.2f} step {row['host_step_ms']:.2f} ms, GPU "
        f"{row['step_ms']:.2f} ms, {per}")
    return row


def do_cublas(out: Path) -> None:
    """Small synthetic models, none of any set: after three SGD training steps, the bytes
    that clearing cuBLAS's workspaces returns. Does a model without a linear layer hold
    them too (a conv's bias gradient, the loss)?"""
    import torch
    from torch import nn

    from vdnnsim.gpu.model.workload import Workload, training_step
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    models = {
        "conv_bias": lambda: nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                                           nn.Conv2d(16, 10, 1), nn.AdaptiveAvgPool2d(1),
                                           nn.Flatten()),
        "conv_nobias": lambda: nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False),
                                             nn.ReLU(), nn.Conv2d(16, 10, 1, bias=False),
                                             nn.AdaptiveAvgPool2d(1), nn.Flatten()),
        "conv_linear": lambda: nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                                             nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                             nn.Linear(16, 10)),
        "forward_only_linear": None,
    }
    res = {}
    for name, make in models.items():
        torch._C._cuda_clearCublasWorkspaces()
        torch.cuda.empty_cache()
        if make is None:  # a linear layer's forward alone, no backward
            lin = nn.Linear(16, 10).to(dev)
            with torch.no_grad():
                lin(torch.randn(8, 16, device=dev))
        else:
            work = Workload(make(), name, "image", (3, 32, 32), 10)
            train = training_step(work, 8, dev)  # NOTE [training step]: SGD
            for _ in range(3):
                train()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch._C._cuda_clearCublasWorkspaces()
        res[name] = before - torch.cuda.memory_allocated()
        log(f"{name}: cuBLAS workspaces {res[name]} bytes")
    (out / "cublas.json").write_text(json.dumps(res, indent=1))


OLD_MODES = {"heldout12": "meta-heldout1", "heldout12b": "meta-heldout2",
             "heldout12c": "meta-heldout3", "heldout12d": "meta-heldout4",
             "heldout12e": "meta-heldout5"}  # the modes' names before issue 27


def main() -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", help="the mode (above)")
    p.add_argument("out", type=Path, help="the folder to write into")
    args = p.parse_args()
    what, out = args.what, args.out
    what = OLD_MODES.get(what, what)
    if what == "profile":
        do_profile(out, SETS)
    elif what == "measure":
        extra = [("torchvision:vgg16", b, "save_on_cpu", None) for b in (64, 128, 256)]
        do_measure(out, SETS, CAPS_GIB, extra=extra)  # in a process that profiled nothing
    elif what == "profile-all":  # smoke first, then the full profile set
        small = {"torchvision:resnet18": [16], "zoo:alexnet": [32]}
        do_profile(out / "smoke", small, trials=2)
        do_measure(out / "smoke", small, {}, iters=2)
        do_profile(out / "traces", SETS)
    elif what in ("capped", "capped-missing"):
        cases = [(m, bs[idx], p, cap * 2**30) for cap, idx in CAPS_GIB.items()
                 for m, bs in SETS.items() for p in POLICIES]
        if what == "capped-missing":  # those the committed measurements.json lacks
            have = {(r["model"], r["batch_size"], r["policy"], r["memory_cap_bytes"])
                    for r in json.loads((ROOT / "traces" / "h200_torchvision" / "measurements.json")
                                        .read_text())}
            cases = [c for c in cases if c not in have]
        else:
            cases += [("torchvision:vgg16", b, "save_on_cpu", None) for b in (64, 128, 256)]
        do_measure_isolated(out, cases)
    elif what == "save-on-cpu":
        do_measure_isolated(out, [("torchvision:vgg16", b, "save_on_cpu", None)
                                  for b in (64, 128, 256)])
    elif what == "heldout-profile":
        do_profile(out, HELDOUT)
    elif what == "heldout-measure":
        do_measure(out, HELDOUT, {})  # uncapped, one process
        seen = {(r["model"], r["batch_size"], r["policy"]): r
                for r in json.loads((out / "measurements.json").read_text())}
        cases = []
        for m, bs in HELDOUT.items():
            r = seen.get((m, bs[1], "vdnn_conv"))
            if r and r.get("fits"):  # just below and just above the measured reserved peak
                for f in (0.97, 1.03):
                    cases.append((m, bs[1], "vdnn_conv", int(r["peak_reserved_bytes"] * f)))
            cases += [(m, bs[-1], p, 12 * 2**30) for p in POLICIES]
        do_measure_isolated(out, cases)
    elif what == "hostcal":
        do_hostcal(out, HOSTCAL)
    elif what == "hostcal2":
        do_hostcal(out, HOSTCAL2, steps=15)
    elif what == "hostcal-measure":  # the calibration models through `vdnnsim measure`'s harness
        do_measure(out, HOSTCAL2, {})
    elif what == "reserved":  # the worst reserved-memory runs again, with one step's own peak
        g = 2**30
        do_measure_isolated(out, [
            ("torchvision:vgg16", 64, "baseline", None),
            ("torchvision:vgg16", 128, "vdnn_conv", None),
            ("torchvision:densenet121", 128, "vdnn_all", None),
            ("torchvision:mobilenet_v2", 128, "vdnn_conv", None),
            ("torchvision:mobilenet_v2", 256, "vdnn_all", 12 * g),
            ("torchvision:regnet_y_800mf", 64, "vdnn_all", None),
            ("torchvision:regnet_y_800mf", 128, "baseline", None),
            ("torchvision:wide_resnet50_2", 128, "vdnn_conv", None),
            ("torchvision:convnext_tiny", 128, "vdnn_all", None)])
    elif what == "steady":  # both sets' uncapped runs again, each set in one process, as
        import subprocess  # they were first measured, now with one step's own reserved peak
        for name in ("validation", "heldout"):
            r = subprocess.run([sys.executable, __file__, f"steady-{name}", str(out / name)])
            log(f"steady {name}: rc {r.returncode}")
    elif what == "steady-validation":
        do_measure(out, SETS, {})
    elif what == "steady-heldout":
        do_measure(out, HELDOUT, {})
    elif what == "kernels":
        do_kernels(out)
    elif what == "calibrate":  # the kernel-time model's microbenchmarks (NOTE [calibration])
        import subprocess
        out.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([sys.executable, "-m", "vdnnsim", "calibrate", "-o",
                            str(out / "h200_fp32.json")])
        log(f"calibrate: rc {r.returncode}")
    elif what == "cublas":  # which models hold cuBLAS workspaces (NOTE [resident memory])
        do_cublas(out)
    elif what == "meta-heldout5":  # the fifth held-out set, as the first
        do_measure(out, META_HELDOUT5, {}, policies=["baseline", "vdnn_conv"])
    elif what == "meta-heldout4":  # the fourth held-out set, as the first
        do_measure(out, META_HELDOUT4, {}, policies=["baseline", "vdnn_conv"])
    elif what == "hostkinds":  # per-layer host times of the host-cost calibration models
        do_profile(out, {m: [16] for m in HOSTCAL2}, trials=5)
    elif what == "meta-heldout3":  # the third held-out set, as the first
        do_measure(out, META_HELDOUT3, {}, policies=["baseline", "vdnn_conv"])
    elif what == "meta-heldout2":  # the second held-out set, as the first
        do_measure(out, META_HELDOUT2, {}, policies=["baseline", "vdnn_conv"])
    elif what == "meta-heldout1":  # baseline and vdnn_conv, uncapped, one process
        do_measure(out, META_HELDOUT1, {}, policies=["baseline", "vdnn_conv"])
    elif what == "memcheck":  # profiled traces and baseline runs of MEMCHECK
        do_profile(out, {m: bs[-1:] for m, bs in MEMCHECK.items()}, trials=3)
        do_measure(out, MEMCHECK, {}, policies=["baseline"])
    elif what == "hostnoise":
        do_hostnoise(out)
    elif what == "smoke":
        small = {"torchvision:resnet18": [16], "zoo:alexnet": [32]}
        do_profile(out, small, trials=2)
        do_measure(out, small, {1: 0}, iters=2)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
