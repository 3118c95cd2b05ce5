"""The op model (NOTE [op model]) on cards it was never calibrated on, against NeuSight's
public per-kernel measurements (traces/neusight_kernels/, its README gives the provenance
and how the records were taken): 2-D convolutions, and GEMMs (``nn.Linear`` as ``addmm``,
``torch.bmm``) as a control. Nothing is fitted or changed here: each record's op features
(NOTE [op features]) are timed by the op model vdnnsim uses for that card, and the error is
``(predicted - measured) / measured``.

What vdnnsim times each card with (NOTE [op spec rule]: the H200's fitted op model with the
card's peaks, bandwidth and SM count, ``predict_for``):

- a card with a preset of its own model: the preset (``h100``, ``p100``);
- a card whose preset is another variant of its chip: the preset with the variant's
  datasheet bandwidth or peaks as a run config's ``gpu`` overrides would give them (A100
  PCIe 80 GB and 40 GB: ``a100`` at 1935 and 1555 GB/s; V100 PCIe: ``v100`` with its peaks
  scaled by 14.0/15.7 TFLOP/s);
- a card without a preset (T4, L4, P4): a GPU given by its datasheet specs (SM count, fp32,
  TF32 and fp16 peaks, bandwidth), as ``predict_for`` takes any GPU with specs.

The convolutions do not map cleanly in one respect, shown as a what-if row: NeuSight timed
them with ``torch.backends.cudnn.allow_tf32 = False``, so on an Ampere card (the A100)
cuDNN ran fp32 on CUDA cores, while vdnnsim's fp32 convolution classes (fitted on the H200
with PyTorch's default, TF32) take the TF32 peak. ``fp32 math`` times the same classes
against the fp32 peak instead; on the pre-Ampere cards both are the same (no TF32 there).

NeuSight timed each call with CUDA events around it (the host's dispatch up to the launch
included, where the GPU idles), while the op model is GPU time: the second table keeps the
records measured at least ``--min-ms`` (0.5 ms), where that dispatch is a few percent.
``--by-algo`` splits the convolutions by the cuDNN algorithm their kernels show, and those
with a feature beyond ``clip`` sd of the H200's cases (the class clips it) apart.

    python experiments/op_model/neusight_kernels.py [--min-ms MS] [--by-algo] [--json OUT]
        (its output with --by-algo: experiments/op_model/neusight_kernels.txt)
    python experiments/op_model/neusight_kernels.py --extract NEUSIGHT_CHECKOUT
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim (experiments/README.md)
DATA = ROOT / "traces" / "neusight_kernels"
NEUSIGHT_COMMIT = "6945927d9afcca2b9daf021f8395e53edc5b4eef"
DATASET = Path("scripts/asplos/data/dataset")  # NeuSight's kernel data (never its label/)
SOURCES = {  # extract file -> NeuSight's files it is made from
    "conv.csv": sorted(f"train/collect/conv/p2.1.0/{d}.csv" for d in (
        "NVIDIA A100 80GB PCIe", "Tesla P100-PCIE-16GB", "Tesla P4", "Tesla T4",
        "Tesla V100-PCIE-32GB")),
    "linear.csv": ["test/linear.csv"],
    "bmm.csv": ["test/bmm.csv"],
}
# NeuSight's device name -> (key, the vdnnsim preset it is timed from or None, changes)
CARDS = {
    "NVIDIA H100 80GB HBM3": ("h100_sxm", "h100", {}),
    "NVIDIA A100 80GB PCIe": ("a100_pcie_80g", "a100", {"mem_bw_bytes_per_s": 1935e9}),
    "NVIDIA A100-PCIE-40GB": ("a100_pcie_40g", "a100", {"mem_bw_bytes_per_s": 1555e9}),
    "NVIDIA L4": ("l4", None, {}),
    "Tesla V100-PCIE-32GB": ("v100_pcie", "v100", {"peak_flops_scale": 14.0 / 15.7}),
    "Tesla P100-PCIE-16GB": ("p100_pcie", "p100", {}),
    "Tesla T4": ("t4", None, {}),
    "Tesla P4": ("p4", None, {}),
}
# cards without a preset: NVIDIA's datasheets (dense rates; fp16 on tensor cores where the
# chip has them). T4: 2560 CUDA cores in 40 SMs, 8.1 TFLOP/s fp32, 65 fp16, 320 GB/s. L4:
# 7424 cores in 58 SMs, 30.3 fp32, TF32 120 and fp16 242 with sparsity (60 and 121 dense),
# 300 GB/s. P4 (GP104): 2560 cores in 20 SMs, 5.5 fp32, no fast fp16, 192 GB/s.
SPECS = {
    "t4": dict(sm_count=40, mem_bw_bytes_per_s=320e9,
               peak_flops={"fp32": 8.1e12, "fp16": 65e12, "bf16": 8.1e12}),
    "l4": dict(sm_count=58, mem_bw_bytes_per_s=300e9,
               peak_flops={"fp32": 30.3e12, "tf32": 60e12, "fp16": 121e12, "bf16": 121e12}),
    "p4": dict(sm_count=20, mem_bw_bytes_per_s=192e9,
               peak_flops={"fp32": 5.5e12, "fp16": 5.5e12, "bf16": 5.5e12}),
}
ORDER = [k for k, _, _ in CARDS.values()]


# ---- the extract ------------------------------------------------------------------------

def conv_algo(kernels: str) -> str:
    """The cuDNN algorithm a record's kernels show."""
    k = kernels.lower()
    if "fft" in k:
        return "fft"
    if "winograd_nonfused" in k:
        return "winograd_nonfused"
    if "winograd" in k:
        return "winograd"
    if "explicit_convolve" in k or "im2col" in k:
        return "gemm"
    if re.search(r"implicit_convolve|precomputed_convolve|scudnn_\d+x\d+", k):
        return "implicit_gemm"
    return "other"


def extract(src: Path) -> None:
    """Write the extract from a NeuSight checkout (its dataset/ folders only)."""
    DATA.mkdir(parents=True, exist_ok=True)
    short = {name: key for name, (key, _, _) in CARDS.items()}
    for out, files in SOURCES.items():
        rows = []
        for f in files:
            with open(src / DATASET / f, newline="") as fh:
                for r in csv.DictReader(fh):
                    assert (r["Torch Version"], r["CUDNN Version"], r["CUDA Version"]) == \
                        ("p2.1.0", "8902", "cu121"), r
                    ms = f"{float(r['Latency']):.5g}"
                    dev = short[r["Device"]]
                    if out == "conv.csv":
                        rows.append([dev, r["B"], r["Input_Channel"], r["Output_Channel"],
                                     r["Kernel_Szie"], r["Input_Size"], r["Stride"],
                                     r["Padding"], ms, conv_algo(r["Kernels"])])
                    else:
                        rows.append([dev, r["B"], r["M"], r["N"], r["K"], ms])
        head = (["device", "batch", "c_in", "c_out", "kernel", "size", "stride", "padding",
                 "latency_ms", "algo"] if out == "conv.csv"
                else ["device", "B", "M", "N", "K", "latency_ms"])
        rows.sort(key=lambda r: (ORDER.index(r[0]), *map(int, r[1:len(head) - 2 if
                                                                    out == "conv.csv" else -1])))
        with open(DATA / out, "w", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(head)
            w.writerows(rows)
        print(f"{out}: {len(rows)} records")


# ---- the op features of a record --------------------------------------------------------

def conv_features(r: dict[str, str]) -> dict:
    """``nn.Conv2d(c_in, c_out, kernel, stride, padding, bias=False)`` on an NCHW fp32 input
    of ``batch x c_in x size x size``, as opfeatures.op_features describes it."""
    n, c, o, k, s, st, p = (int(r[x]) for x in ("batch", "c_in", "c_out", "kernel", "size",
                                                 "stride", "padding"))
    ho = (s + 2 * p - k) // st + 1
    nbytes = 4 * (n * c * s * s + o * c * k * k + n * o * ho * ho)
    return dict(op="convolution", dt="fp32", bytes=nbytes, b=1, m=n * ho * ho, n=o,
                k=c * k * k, c=c, kh=k, kw=k, stride=st)


def linear_features(r: dict[str, str]) -> dict:
    """``nn.Linear(N, K)`` (bias) on a contiguous ``B x M x N`` input: PyTorch folds it to
    ``addmm(bias, input.view(B*M, N), weight.t())``."""
    B, M, N, K = (int(r[x]) for x in "BMNK")
    return dict(op="addmm", dt="fp32", bytes=4 * (K + B * M * N + K * N + B * M * K),
                b=1, m=B * M, k=N, n=K)


def bmm_features(r: dict[str, str]) -> dict:
    """``torch.bmm`` of ``B x M x N`` and ``B x N x K``."""
    B, M, N, K = (int(r[x]) for x in "BMNK")
    return dict(op="bmm", dt="fp32", bytes=4 * (B * M * N + B * N * K + B * M * K),
                b=B, m=M, k=N, n=K)


# ---- the models -------------------------------------------------------------------------

def gpu_for(name: str):
    """The vdnnsim GPU a NeuSight card is timed as."""
    from vdnnsim.hardware import gpu_preset
    key, preset, changes = CARDS[name]
    if preset is not None:
        return gpu_preset(preset, changes or None)
    base = gpu_preset("h100")  # the fields the op model does not read
    return dataclasses.replace(base, name=key, display_name=name, op_calibration="",
                               calibration="", **SPECS[key])


def models(name: str) -> dict:
    """label -> OpModel for one card: the spec rule, and its what-if without TF32 where the
    card has TF32."""
    from vdnnsim.costs.ops import predict_for
    rule = predict_for(gpu_for(name))
    assert rule is not None and "h200" in rule.source, rule
    out = {"rule": rule}
    if rule.peaks.get("tf32", rule.peaks["fp32"]) != rule.peaks["fp32"]:
        out["fp32 math"] = dataclasses.replace(rule, peaks=dict(rule.peaks,
                                                                tf32=rule.peaks["fp32"]))
    return out


def beyond_grid(m, f: dict) -> bool:
    """Whether a convolution has a feature its class clips (beyond ``clip`` sd of the
    H200's cases: NOTE [op model])."""
    from vdnnsim.costs.opforms import conv_peak, conv_phi
    c = m.fitted["classes"]["convolution:dense|fp32|fwd"]
    phi, _ = conv_phi(f, "fwd", m.sms, conv_peak("fp32", m.peaks), m.mem_bw)
    return any(sd > 0 and abs((x - mu) / sd) > c["clip"]
               for x, mu, sd in zip(phi, c["mu"], c["sd"]))


# the columns of a record that name its shape (NEUSIGHT_SPLIT.md)
SHAPE = {"conv2d": ("batch", "c_in", "c_out", "kernel", "size", "stride", "padding"),
         "linear": tuple("BMNK"), "bmm": tuple("BMNK")}


def half(cls: str, r: dict[str, str]) -> str:
    """``train`` or ``test``: the fixed split of NEUSIGHT_SPLIT.md, by a hash of the record's
    class and shape (not its card: a shape is in the same half on every card)."""
    key = f"{cls}:" + ",".join(str(int(r[c])) for c in SHAPE[cls])
    return "test" if int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 2 else "train"


def records() -> list[tuple[str, str, dict, float, str, str]]:
    """(card key, op class, features, measured ns, algorithm, half) of every record."""
    key = {k: name for name, (k, _, _) in CARDS.items()}
    out = []
    for cls, fn in (("conv2d", conv_features), ("linear", linear_features),
                    ("bmm", bmm_features)):
        with open(DATA / f"{'conv' if cls == 'conv2d' else cls}.csv", newline="") as fh:
            for r in csv.DictReader(fh):
                out.append((key[r["device"]], cls, fn(r), float(r["latency_ms"]) * 1e6,
                            r.get("algo", ""), half(cls, r)))
    return out


def stats(errs: list[float]) -> dict:
    a = [abs(e) for e in errs]
    return dict(n=len(errs), median_abs=statistics.median(a), max_abs=max(a),
                median_signed=statistics.median(errs))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--extract", type=Path, metavar="NEUSIGHT_CHECKOUT",
                    help="write traces/neusight_kernels/ from a NeuSight checkout")
    ap.add_argument("--min-ms", type=float, default=0.5,
                    help="the second table: records measured at least this long (ms)")
    ap.add_argument("--by-algo", action="store_true",
                    help="the convolutions again by cuDNN algorithm")
    ap.add_argument("--json", type=Path, help="write the tables here")
    args = ap.parse_args(argv)
    if args.extract:
        extract(args.extract)
        return 0
    recs = records()
    cache: dict[str, dict] = {}
    errs: dict[tuple, list[tuple[float, float, str]]] = {}
    for name, cls, f, meas, algo, _half in recs:
        if name not in cache:
            cache[name] = models(name)
        for label, m in cache[name].items():
            if label == "fp32 math" and cls != "conv2d":
                continue
            pred, _own = m.time_ns(f, "fwd")
            if cls == "conv2d" and beyond_grid(m, f):
                algo += " (beyond the grid)"
            errs.setdefault((CARDS[name][0], cls, label), []).append(
                ((pred - meas) / meas, meas, algo))
    h200 = next(iter(cache.values()))["rule"].fitted["classes"]
    print("the H200's own fit error on its calibration cases (median, p90; forward, fp32): " +
          ", ".join(f"{k} {h200[c]['fit_error']['median']:.1%}, {h200[c]['fit_error']['p90']:.1%}"
                    for k, c in (("conv2d (dense)", "convolution:dense|fp32|fwd"),
                                 ("linear (addmm)", "addmm|fp32|fwd"),
                                 ("bmm", "bmm|fp32|fwd"))))
    out = {}
    least = args.min_ms * 1e6
    for title, keep in (("all records", lambda ms: True),
                        (f"records measured >= {args.min_ms:g} ms", lambda ms: ms >= least)):
        print(f"\n{title}: (predicted - measured) / measured (NeuSight has forward fp32 "
              "only)\n")
        print("| card | op class | pass | dtype | vdnnsim model | n | median abs | max abs | "
              "median signed |")
        print("|---|---|---|---|---|---:|---:|---:|---:|")
        rows = []
        for (card, cls, label), v in sorted(errs.items(), key=lambda kv: (
                ORDER.index(kv[0][0]), ["conv2d", "linear", "bmm"].index(kv[0][1]),
                kv[0][2] != "rule", kv[0][2])):
            e = [x for x, ms, _ in v if keep(ms)]
            if not e:
                continue
            s = stats(e)
            rows.append(dict(card=card, op=cls, pass_="fwd", dtype="fp32", model=label, **s))
            print(f"| {card} | {cls} | fwd | fp32 | {label} | {s['n']} | {s['median_abs']:.1%} | "
                  f"{s['max_abs']:.1%} | {s['median_signed']:+.1%} |")
        out[title] = rows
    if args.by_algo:
        print("\nconvolutions by cuDNN algorithm (all records; fp32 math where the card has "
              "TF32, else the rule; beyond the grid: a feature clipped, whatever the "
              "algorithm):\n")
        print("| card | algorithm | n | median abs | max abs | median signed |")
        print("|---|---|---:|---:|---:|---:|")
        for (card, cls, label), v in sorted(errs.items(), key=lambda kv: ORDER.index(kv[0][0])):
            if cls != "conv2d" or label != ("fp32 math" if (card, cls, "fp32 math") in errs
                                            else "rule"):
                continue
            v = [(x, ms, "beyond the grid" if "beyond" in a else a) for x, ms, a in v]
            for algo in sorted({a for _, _, a in v}):
                s = stats([x for x, _, a in v if a == algo])
                print(f"| {card} | {algo} | {s['n']} | {s['median_abs']:.1%} | "
                      f"{s['max_abs']:.1%} | {s['median_signed']:+.1%} |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
