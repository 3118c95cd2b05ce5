#!/usr/bin/env python3
"""An independent fuzzer of vdnnsim's inputs: run configs, studies, network specs, trace
files, measurement files, command-line vectors and the Python API.

Written from the user documentation (README.md, docs/*.md, `vdnnsim CMD --help`), not from
the project's own fuzzer. Every case is made from (seed, case number) alone, so a case can
be replayed by itself (`--seed S --only-case N`), and is run in a fresh temporary folder:
most CLI cases in-process through `vdnnsim.cli.main(argv)` (stdout and stderr captured, a
10 s SIGALRM), a share as real subprocesses (`python -m vdnnsim ...`, 10 s timeout), and
API cases in-process.

The contract checked (issue 10):
- exit 0: the output is sane (JSON records without NaN or negative bytes/times, peak >=
  weights, avg <= peak <= footprint, fits => footprint <= capacity, offloaded >= prefetched,
  the batch size, policy and GPU asked for, ...; docs/metrics.md), written files exist
  and parse, nothing else was written;
- exit 2: exactly one stderr line starting 'vdnnsim: error:' (or argparse's
  'vdnnsim CMD: error:'), no traceback, nothing written in the case folder;
- exit 3 (internal error), any other exit code, a traceback, a run over 10 s, or a wrong
  answer with exit 0 are failures. Where the documentation says an input is valid (or
  invalid) and vdnnsim disagrees, that is reported too.
- API: a result that passes the same checks, or a vdnnsim.VdnnError.

Usage:
    python bench/fuzz_independent.py --seed 1 --cases 10000 --workers 2
    python bench/fuzz_independent.py --seed 1 --only-case 1234 -v   # replay one case
Failing inputs are saved under --failures (default /tmp/fuzz2-failures/), one folder per
case with its files, the command (cmd.sh) and what came back (result.json), and a
summary.json of all outcomes.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import io
import json
import math
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from fractions import Fraction
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# the checkout under test, not whatever vdnnsim the environment has installed
if sys.path[:1] != [str(REPO)]:
    sys.path.insert(0, str(REPO))
CASE_TIMEOUT = 10.0
HARD_TIMEOUT = 40.0

ZOO = ["alexnet", "overfeat", "googlenet", "vgg16", "vgg116", "vgg216", "vgg316", "vgg416"]
FAST_ZOO = ["alexnet", "vgg16", "googlenet", "overfeat"]
PRESETS = ["k40", "titanx_maxwell", "p100", "v100", "a100", "h100", "h200"]
PRESET_GIB = {"k40": 12, "titanx_maxwell": 12, "p100": 16, "v100": 32, "a100": 80, "h100": 80}
POLICIES = ["eager", "baseline_m", "baseline_p", "vdnn_all_m", "vdnn_all_p", "vdnn_conv_m",
            "vdnn_conv_p", "vdnn_dyn"]
DEFAULT_POLICIES = ["baseline_p", "vdnn_all_m", "vdnn_all_p", "vdnn_conv_m", "vdnn_conv_p",
                    "vdnn_dyn"]
DTYPES = ["fp32", "fp16", "bf16"]
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
PIB = 2 ** 50
SUMMARY_KEYS = ["network", "batch_size", "dtype", "gpu", "policy", "fits", "capacity_bytes",
                "peak_memory_bytes", "peak_footprint_bytes", "avg_memory_bytes",
                "weight_bytes", "peak_managed_bytes", "avg_managed_bytes",
                "iteration_time_s", "oracle_time_s", "slowdown", "offloaded_bytes",
                "prefetched_bytes", "peak_host_bytes", "stall_time_s", "oom_layer",
                "oom_tensor", "oom_time_s", "oom_fragmented", "notes"]
LAYER_TYPES = ["conv", "fc", "relu", "threshold", "maxpool", "avgpool", "lrn", "concat",
               "add", "bn", "dropout", "softmax", "flatten"]


# --------------------------------------------------------------------------------------
# Emitting YAML/JSON with raw tokens
# --------------------------------------------------------------------------------------

class Raw:
    """A scalar written into the file as this exact text (YAML tags, 1e400, .nan ...)."""

    def __init__(self, yaml_text: str, json_text: str | None = None):
        self.yaml_text, self.json_text = yaml_text, json_text if json_text is not None \
            else yaml_text

    def __repr__(self) -> str:
        return f"Raw({self.yaml_text[:30]!r})"


def _swap_raw(data: Any, raws: list[Raw]) -> Any:
    if isinstance(data, Raw):
        raws.append(data)
        return f"RAWTOKEN{len(raws) - 1}X"
    if isinstance(data, dict):
        return {_swap_raw(k, raws) if isinstance(k, Raw) else k: _swap_raw(v, raws)
                for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_swap_raw(x, raws) for x in data]
    return data


def emit(data: Any, style: str = "yaml") -> str:
    """YAML (block or flow) or JSON text of ``data`` with Raw tokens spliced in."""
    import yaml
    raws: list[Raw] = []
    plain = _swap_raw(data, raws)
    if style == "json":
        text = json.dumps(plain, allow_nan=True, ensure_ascii=False)
        for i, r in enumerate(raws):
            text = text.replace(f'"RAWTOKEN{i}X"', r.json_text)
        return text
    text = yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, width=10 ** 9,
                          default_flow_style=(style == "flow"))
    for i, r in enumerate(raws):
        text = re.sub(rf"(['\"]?)RAWTOKEN{i}X\1", lambda m: r.yaml_text, text)
    return text


# --------------------------------------------------------------------------------------
# What the documentation says is valid (an independent reading, not vdnnsim's code)
# --------------------------------------------------------------------------------------

VALID, INVALID, UNKNOWN = "valid", "invalid", "unknown"
_UNIT = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
         "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}
_NUM = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$")


def doc_bytes(v: Any, least: int = 0) -> tuple[str, int | None]:
    """docs/trace-format.md 'Byte sizes' and the bounds table: (verdict, bytes)."""
    if isinstance(v, Raw) or v is None:
        return UNKNOWN, None
    if isinstance(v, bool):
        return INVALID, None
    if isinstance(v, int):
        return (VALID, v) if least <= v <= PIB else (INVALID, None)
    if isinstance(v, float):
        if not math.isfinite(v) or v != int(v) or v < least or v > PIB:
            return INVALID, None
        return VALID, int(v)
    if not isinstance(v, str):
        return INVALID, None
    s = v.strip()
    m = re.match(r"^([^a-zA-Z\s]*)\s*([a-zA-Z]*)$", s)
    if not m:
        return (INVALID if re.search(r"[/ ]", s) and not s.isdigit() else UNKNOWN), None
    num, unit = m.group(1), m.group(2).lower()
    if unit not in _UNIT:
        return INVALID, None
    if not _NUM.match(num):
        if re.match(r"^-[0-9.]+$", num):
            return INVALID, None   # negative
        return UNKNOWN, None       # '+5', '1_000', unicode digits: the docs do not say
    if len(num.replace(".", "").lstrip("0")) > 15:
        return UNKNOWN, None       # float rounding decides
    exact = Fraction(num) * _UNIT[unit]
    if unit in ("", "b"):
        if exact.denominator != 1:
            return (INVALID if unit == "" else UNKNOWN), None
        n = int(exact)
    else:
        if (exact - math.floor(exact)) == Fraction(1, 2):
            return UNKNOWN, None
        n = round(exact)
    if abs(n - PIB) <= 2 or abs(n - least) < 1 and n != least:
        return UNKNOWN, None
    return (VALID, n) if least <= n <= PIB else (INVALID, None)


def doc_number(v: Any, low: float, high: float, whole: bool = False) -> str:
    """Bandwidths, flops scale, latency (docs/configs.md bounds)."""
    if isinstance(v, Raw) or v is None:
        return UNKNOWN
    if isinstance(v, bool):
        return INVALID
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return INVALID
        if whole:
            return UNKNOWN
        if not math.isfinite(f):
            return INVALID
        if "_" in v or v != v.strip():
            return UNKNOWN
        return VALID if low <= f <= high else INVALID
    if isinstance(v, int):
        return VALID if low <= v <= high else INVALID
    if isinstance(v, float):
        if not math.isfinite(v):
            return INVALID
        if whole and v != int(v):
            return INVALID
        if whole:
            return UNKNOWN
        if v in (low, high):
            return UNKNOWN
        return VALID if low <= v <= high else INVALID
    return INVALID


def doc_batch(v: Any, small_ok: int = 64) -> str:
    if isinstance(v, Raw):
        return UNKNOWN
    if v is None:
        return VALID  # null: the default
    if isinstance(v, bool):
        return INVALID
    if isinstance(v, int):
        if v < 1:
            return INVALID
        return VALID if v <= small_ok else UNKNOWN  # large: the 1 PiB check decides
    if isinstance(v, float):
        return INVALID if (not math.isfinite(v) or v != int(v) or v < 1) else UNKNOWN
    if isinstance(v, str):
        return UNKNOWN
    return INVALID


def combine(*verdicts: str) -> bool | None:
    if INVALID in verdicts:
        return False
    if all(v == VALID for v in verdicts):
        return True
    return None


# --------------------------------------------------------------------------------------
# Hostile values
# --------------------------------------------------------------------------------------

def big_digits(rng: random.Random, n: int, neg: bool = False) -> Raw:
    s = ("-" if neg else "") + str(rng.randint(1, 9)) + "".join(
        rng.choice("0123456789") for _ in range(n - 1))
    return Raw(s)


HOSTILE_STATIC: list[Any] = [
    0, -1, 1, 2, 3, -0.0, 0.5, 2.5, 1.0, 4096.0, 1e-300, 1e300, -1e300, float("inf"),
    float("-inf"), float("nan"), True, False, None, 2 ** 31, 2 ** 50, 2 ** 50 + 1, 2 ** 53 + 1,
    2 ** 63, 2 ** 64, 10 ** 30, -(10 ** 30), 10 ** 400, "", " ", "0", "1", "-1", "8",
    "12 GiB", "1e400", "12 GB/s", "1.5 GB", "1.5e9", "160.5", "abc", "NaN", "nan", "inf",
    "-inf", "1_000", "0x10", "１２", "٣", "12 gib", "1 PiB", "1024 TiB", "1025 TiB", "1.5 B",
    "4096.0", "12GiB", " 12 GiB ", "12\tGiB", "1e-300", "1e300", "-4", "+5", ".5 KiB",
    "1.5e0", "12.8e9", "25e9", "1e15", "1e16", "999999", "1e6", "1 MB", "0 B",
    [], [1], [None], {}, {"a": 1}, [[[]]], "x" * 5000, "\x00", "a\nb", "ü∂ğ 名", "💥",
    "\u202etxet", "con", "../../etc/passwd", "grad:conv1", "workspace:conv1", "weights",
    "data", "-", "~", "null", "true", "yes", "no", "on",
    Raw("1e400"), Raw(".nan"), Raw(".inf"), Raw("-.inf"), Raw("12.8e9"), Raw("0x1F"),
    Raw("0o17"), Raw("1:20"), Raw("2001-12-14"), Raw("2001-12-14T21:59:43.10-05:00"),
    Raw("!!binary AAEC"), Raw("!!float '3'"), Raw("!!str 5"), Raw("!!int '7'"),
    Raw("!!python/object/apply:os.getcwd []"), Raw("!!set {a: null, b: null}"), Raw("yes"),
    Raw("on"), Raw("!!null ''"), Raw("!!omap [{a: 1}, {b: 2}]"), Raw("!!pairs [{a: 1}]"),
    Raw("!!bool 'true'"), Raw("!!timestamp 2001-12-14"), Raw("!<tag:yaml.org,2002:str> 1"),
    Raw("!custom 3"), Raw("&anc 5"), Raw("*undefined_anchor"), Raw("[1, [2, [3]]]"),
    Raw("{? [a, b]: c}", "{}"), Raw("|\n  multi\n  line", '"multi\\nline"'),
]


def hostile(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.08:
        return big_digits(rng, rng.choice([20, 310, 4299, 4301, 6000]), rng.random() < 0.2)
    if r < 0.12:
        return rng.choice([2 ** rng.randint(0, 70), -(2 ** rng.randint(0, 70)),
                           rng.uniform(-1e20, 1e20), 10.0 ** rng.randint(-320, 300)])
    return copy.deepcopy(rng.choice(HOSTILE_STATIC))


def odd_name(rng: random.Random) -> str:
    return rng.choice([
        "a:b", "grad:x", "workspace:conv1", "weights", "weight_grads", "grad_buffer_0",
        "grad_buffer_1", "workspace", "resident", "with space", "ünïcødé", "名前", "💥",
        "x" * rng.choice([200, 1000, 1001, 5000]), "'quote'", '"dq"', "#hash", "- dash",
        "a/b", "..", ".", "tab\there", "new\nline", "\u202eRTL", "NUL\x00in", "*star",
        "&amp", "!bang", "%pct", "@at", "`tick`", "{brace}", "[br]", "~", "null", "true",
        "1", "1e5", "data:mask", "c:mask", "c:stats", "-", "?", ": colon", "x" * 120 + ":y",
    ])


# --------------------------------------------------------------------------------------
# Network specs: a generator that tracks shapes (independent of vdnnsim's inference)
# --------------------------------------------------------------------------------------

def gen_spec(rng: random.Random, n_layers: int | None = None, odd: bool = False,
             name: str | None = None) -> tuple[dict, dict]:
    """A valid network spec and facts about it (params by the docs' formulas)."""
    C, H, W = rng.randint(1, 4), rng.randint(6, 24), rng.randint(6, 24)
    shape: tuple = ("chw", C, H, W)
    layers: list[dict] = []
    params = 0
    names: set[str] = set()
    exact_params = True
    n_layers = n_layers or rng.randint(1, 14)

    counter = [0]

    def new_name(base: str) -> str:
        while True:
            counter[0] += 1
            n = (odd_name(rng) + str(counter[0]) if odd and rng.random() < 0.3
                 else f"{base}{counter[0]}")
            n = n.replace("\x00", "")
            if n and n not in names and n != "data" and not any(
                    n == f"{m}:mask" or n == f"{m}:stats" for m in names):
                names.add(n)
                return n

    def conv_layer(shape, inputs=None, out=None, k=None, pad=None):
        nonlocal params
        _, c, h, w = shape
        k = k or rng.randint(1, min(5, h, w))
        pad = pad if pad is not None else rng.randint(0, 1)
        stride = rng.choice([1, 1, 2])
        out = out or rng.randint(1, 8)
        groups = 1
        if rng.random() < 0.15:
            g = [g for g in range(1, 5) if c % g == 0 and out % g == 0]
            groups = rng.choice(g)
        bias = rng.random() < 0.8
        ho = (h + 2 * pad - k) // stride + 1
        wo = (w + 2 * pad - k) // stride + 1
        d = {"name": new_name("conv"), "type": "conv", "out": out, "kernel": k}
        if stride != 1:
            d["stride"] = stride
        if pad:
            d["pad"] = pad
        if groups != 1:
            d["groups"] = groups
        if not bias:
            d["bias"] = False
        if inputs is not None:
            d["inputs"] = inputs
        params += out * (c // groups) * k * k + (out if bias else 0)
        return d, ("chw", out, ho, wo)

    prev = "data"
    while len(layers) < n_layers:
        kind = shape[0]
        r = rng.random()
        if kind == "chw" and r < 0.3:
            d, shape = conv_layer(shape)
        elif kind == "chw" and r < 0.4 and shape[2] >= 2 and shape[3] >= 2:
            _, c, h, w = shape
            k = rng.randint(1, min(3, h, w))
            s = rng.choice([1, 2])
            ceil = rng.random() < 0.3
            d = {"name": new_name("pool"), "type": rng.choice(["maxpool", "avgpool"]),
                 "kernel": k, "stride": s}
            if ceil:
                d["ceil_mode"] = True

            def po(x):
                if ceil:
                    o = -(-(x - k) // s) + 1
                    if (o - 1) * s >= x:
                        o -= 1
                    return o
                return (x - k) // s + 1
            shape = ("chw", c, po(h), po(w))
        elif kind == "chw" and r < 0.5 and len(layers) + 3 <= n_layers:
            # a fork of two convs joined by concat or add
            src = prev
            join = rng.choice(["concat", "add"])
            o1 = rng.randint(1, 6)
            o2 = o1 if join == "add" else rng.randint(1, 6)
            a, sa = conv_layer(shape, inputs=[src] if rng.random() < 0.5 else None, out=o1,
                               k=1, pad=0)
            a.pop("stride", None)
            sa = ("chw", o1, shape[2], shape[3])
            params_fix = 0  # stride removed: the shape is the input's
            b, sb = conv_layer(shape, inputs=[src], out=o2, k=3 if min(shape[2:]) >= 1 else 1,
                               pad=1)
            b.pop("stride", None)
            sb = ("chw", o2, shape[2], shape[3])
            layers += [a, b]
            d = {"name": new_name(join), "type": join, "inputs": [a["name"], b["name"]]}
            shape = ("chw", o1 + o2 if join == "concat" else o1, shape[2], shape[3])
            del params_fix
        elif r < 0.65:
            t = rng.choice(["relu", "relu", "threshold", "dropout", "softmax", "lrn", "bn"])
            d = {"name": new_name(t), "type": t}
            if t in ("relu", "threshold", "dropout") and rng.random() < 0.3:
                d["inplace"] = rng.random() < 0.5
            if t == "dropout" and rng.random() < 0.5:
                d["p"] = rng.choice([0.0, 0.1, 0.5, 0.99])
            if t == "lrn" and rng.random() < 0.5:
                d["size"] = rng.randint(1, 7)
            if t == "bn":
                if kind == "chw":
                    params += 2 * shape[1]
                else:
                    exact_params = False
        elif kind == "chw" and r < 0.75:
            d = {"name": new_name("flat"), "type": "flatten"}
            shape = ("flat", shape[1] * shape[2] * shape[3])
        else:
            n_in = shape[1] * shape[2] * shape[3] if kind == "chw" else shape[1]
            out = rng.randint(1, 16)
            bias = rng.random() < 0.8
            d = {"name": new_name("fc"), "type": "fc", "out": out}
            if not bias:
                d["bias"] = False
            params += n_in * out + (out if bias else 0)
            shape = ("flat", out)
        layers.append(d)
        prev = d["name"]
    spec = {"name": name or rng.choice(["tinynet", "n", "spec net", "ネット", "x" * 50]),
            "input": [C, H, W], "layers": layers[:max(n_layers, 1)]}
    if rng.random() < 0.7:
        spec["batch_size"] = rng.randint(1, 16)
    if rng.random() < 0.2:
        spec["source"] = "written by the fuzzer"
    # params only exact if no layer was cut off the end
    facts = {"params": params if exact_params and len(layers) == n_layers else None}
    return spec, facts


def gen_deep_spec(rng: random.Random, n: int) -> dict:
    """A long chain (thousands of layers) at a tiny spatial size."""
    layers = []
    for i in range(n):
        t = rng.choice(["conv", "relu", "bn", "relu"])
        if t == "conv":
            layers.append({"name": f"c{i}", "type": "conv", "out": 2, "kernel": 1})
        else:
            layers.append({"name": f"{t}{i}", "type": t})
    return {"name": "deep", "input": [2, 2, 2], "batch_size": 2, "layers": layers}


SPEC_BREAKS = ["nokernel", "noout", "fork_relu", "cat_mismatch", "fwdref", "small", "inplace_conv",
               "dup", "data_name", "badtype", "groups", "flatconv", "unknown_key", "unknown_top",
               "noname", "bool_num", "huge", "neg", "zero", "float", "str_num", "nan_p", "p1",
               "empty_inputs", "self_input", "add_mismatch", "no_layers", "input_shape",
               "mask_clash", "stats_clash", "hostile_field", "missing_input", "null_layers"]


def break_spec(rng: random.Random, spec: dict) -> tuple[dict, str, str]:
    """(spec, what, verdict): one documented mistake, or a hostile value."""
    s = copy.deepcopy(spec)
    L = s["layers"]
    what = rng.choice(SPEC_BREAKS)
    i = rng.randrange(len(L))
    v = INVALID
    if what == "nokernel":
        L.insert(0, {"name": "ck", "type": rng.choice(["conv", "maxpool", "avgpool"]), "out": 2})
    elif what == "noout":
        L.insert(0, {"name": "co", "type": rng.choice(["conv", "fc"]), "kernel": 1})
    elif what == "fork_relu":
        L.append({"name": "rr", "type": rng.choice(["relu", "conv", "fc", "bn", "flatten"]),
                  "out": 2, "kernel": 1, "inputs": ["data", L[-1]["name"]]})
    elif what == "cat_mismatch":
        L[:] = [{"name": "a", "type": "conv", "out": 2, "kernel": 1},
                {"name": "b", "type": "maxpool", "kernel": 2, "stride": 2, "inputs": ["data"]},
                {"name": "k", "type": "concat", "inputs": ["a", "b"]}]
        s["input"] = [3, 8, 8]
    elif what == "fwdref":
        L[0]["inputs"] = [L[-1]["name"] if len(L) > 1 else "nosuch"]
    elif what == "small":
        s["input"] = [3, 4, 4]
        L[:] = [{"name": "c", "type": "conv", "out": 2, "kernel": 11}]
    elif what == "inplace_conv":
        L.insert(0, {"name": "ci", "type": rng.choice(["conv", "fc", "maxpool", "concat", "bn"]),
                     "out": 2, "kernel": 1, "inplace": True})
        v = UNKNOWN  # only 'conv' is documented as an error
    elif what == "dup":
        L.append(dict(L[i]))
    elif what == "data_name":
        L[i]["name"] = "data"
    elif what == "badtype":
        L[i]["type"] = rng.choice(["Conv", "linear", "", "relu ", 3, None])
    elif what == "groups":
        s["input"] = [3, 8, 8]
        L[:] = [{"name": "c", "type": "conv", "out": 4, "kernel": 1, "groups": 2}]
    elif what == "flatconv":
        L[:] = [{"name": "f", "type": "flatten"},
                {"name": "c", "type": rng.choice(["conv", "maxpool", "avgpool"]), "out": 2,
                 "kernel": 1}]
    elif what == "unknown_key":
        L[i][rng.choice(["flops", "Kernel", "padding", "in", ""])] = 1
    elif what == "unknown_top":
        s[rng.choice(["format2", "Layers", "batch", "dtype"])] = 1
    elif what == "noname":
        L[i].pop("name")
    elif what == "bool_num":
        key = rng.choice(["out", "kernel", "stride", "pad", "groups", "size", "batch_size",
                          "input"])
        if key == "batch_size":
            s["batch_size"] = True
        elif key == "input":
            s["input"] = [True, 8, 8]
        else:
            L[i][key] = True
        v = UNKNOWN if key not in ("batch_size",) else INVALID
        if key == "input":
            v = UNKNOWN
    elif what == "huge":
        s["input"] = [3, 10 ** rng.choice([6, 9, 15, 30]), 10 ** rng.choice([3, 9, 30])]
        L[:] = [{"name": "c", "type": "conv", "out": 10 ** rng.choice([3, 9, 20]), "kernel": 1}]
        s["batch_size"] = 1
    elif what == "neg":
        L[i][rng.choice(["out", "kernel", "stride", "pad", "groups", "size"])] = -1
    elif what == "zero":
        key = rng.choice(["out", "kernel", "stride", "groups", "size", "input"])
        if key == "input":
            s["input"] = [3, 0, 8]
        else:
            L[i][key] = 0
        if key in ("size",) and L[i]["type"] != "lrn":
            v = INVALID  # ge=1 regardless of type (documented type 'int >= 1')
    elif what == "float":
        L[i][rng.choice(["out", "kernel", "stride", "pad"])] = rng.choice([2.5, 1.5])
    elif what == "str_num":
        L[i][rng.choice(["out", "kernel"])] = rng.choice(["three", "", "3x3"])
    elif what == "nan_p":
        L.insert(0, {"name": "dp", "type": "dropout", "p": rng.choice([float("nan"), 1.0,
                                                                      -0.1, float("inf")])})
    elif what == "p1":
        L.insert(0, {"name": "dp", "type": "dropout", "p": 1})
    elif what == "empty_inputs":
        L[i]["inputs"] = []
        v = UNKNOWN
    elif what == "self_input":
        L[i]["inputs"] = [L[i]["name"]]
    elif what == "add_mismatch":
        s["input"] = [3, 8, 8]
        L[:] = [{"name": "a", "type": "conv", "out": 2, "kernel": 1},
                {"name": "b", "type": "conv", "out": 3, "kernel": 1, "inputs": ["data"]},
                {"name": "k", "type": "add", "inputs": ["a", "b"]}]
    elif what == "no_layers":
        s["layers"] = []
    elif what == "null_layers":
        s["layers"] = rng.choice([None, {}, "conv", [None], [[]]])
    elif what == "input_shape":
        s["input"] = rng.choice([[3, 8], [3, 8, 8, 8], [], "3x8x8", [3.5, 8, 8], [-3, 8, 8],
                                 None, [3, float("nan"), 8]])
    elif what == "mask_clash":
        # a dropout named d writes the extra tensor 'd:mask'; a layer named 'd:mask' too
        L.append({"name": "dd", "type": "dropout"})
        L.append({"name": "dd:mask", "type": "relu", "inplace": False})
        v = UNKNOWN  # the docs say any name works (NOTE [pool keys])
    elif what == "stats_clash":
        L.append({"name": "bb", "type": "bn"})
        L.append({"name": "bb:stats", "type": "relu", "inplace": False})
        v = UNKNOWN
    elif what == "missing_input":
        L[i]["inputs"] = ["nosuch_layer"]
    elif what == "hostile_field":
        key = rng.choice(["out", "kernel", "stride", "pad", "groups", "bias", "inplace",
                          "ceil_mode", "size", "p", "inputs", "name", "type"])
        L[i][key] = hostile(rng)
        v = UNKNOWN
    return s, what, v


# --------------------------------------------------------------------------------------
# Traces: a generator of consistent graphs, with the baseline's numbers worked out from
# docs/policies.md ("Network-wide management") and docs/metrics.md
# --------------------------------------------------------------------------------------

def a512(n: int) -> int:
    return -(-n // 512) * 512


def gen_trace(rng: random.Random, n_layers: int | None = None, odd: bool = False,
              alias_chain: int = 0, pytorch: bool | None = None) -> dict:
    n_layers = n_layers if n_layers is not None else rng.randint(1, 12)
    tensors: list[dict] = []
    layers: list[dict] = []
    ids: set[str] = set()
    root: dict[str, str] = {}
    size: dict[str, int] = {}

    def tid(base: str) -> str:
        while True:
            n = (odd_name(rng).replace("\x00", "") + str(len(ids)) if odd and rng.random() < 0.3
                 else f"{base}{len(ids)}")
            if n not in ids:
                ids.add(n)
                return n

    huge = rng.random() < 0.05

    def rsize() -> int:
        if huge and rng.random() < 0.3:
            return rng.randint(1 << 40, 1 << 48)
        return rng.choice([0, 4, 512, 513, 4096, rng.randint(1, 1 << 20), 1 << 20,
                           rng.randint(1, 1 << 26)])

    def add_tensor(base: str, kind: str = "activation", alias: str | None = None) -> str:
        t = tid(base)
        d: dict[str, Any] = {"id": t}
        if alias is not None:
            d["size_bytes"] = size[root[alias]]
            d["alias_of"] = alias
            root[t] = root[alias]
        else:
            sz = rsize()
            d["size_bytes"] = sz if rng.random() < 0.8 else rng.choice(
                [f"{sz} B", f"{sz}", float(sz)] + ([f"{sz // 1024} KiB"] if sz % 1024 == 0
                                                    else []))
            root[t] = t
            size[t] = sz
        if kind != "activation" or rng.random() < 0.2:
            d["kind"] = kind
        if rng.random() < 0.15:
            d["requires_grad"] = rng.random() < 0.5
        if rng.random() < 0.2:
            d["shape"] = [rng.randint(1, 9) for _ in range(rng.randint(0, 4))]
        tensors.append(d)
        return t

    def times(d: dict, conv: bool) -> None:
        def ns() -> int:
            if huge and rng.random() < 0.3:
                return rng.choice([10 ** 18, rng.randint(10 ** 15, 10 ** 18)])
            return rng.choice([0, 1, rng.randint(0, 10 ** 6), rng.randint(0, 10 ** 9)])
        if conv or rng.random() < 0.15:
            algos = []
            for k in range(rng.randint(1, 5)):
                a: dict[str, Any] = {"name": rng.choice(["implicit_gemm", "gemm", "fft",
                                                         "fft_tiling", "winograd",
                                                         "implicit_precomp_gemm", "x"]),
                                     "fwd_ns": ns(), "bwd_ns": ns()}
                if rng.random() < 0.6:
                    ws = rng.choice([0, rng.randint(0, 1 << 24)])
                    a["fwd_workspace_bytes"] = ws
                    a["bwd_workspace_bytes"] = ws if rng.random() < 0.7 else rng.randint(0, 1 << 24)
                algos.append(a)
            d["algos"] = algos
        else:
            d["fwd_ns"], d["bwd_ns"] = ns(), ns()
            if rng.random() < 0.3:
                d["workspace_bytes"] = rng.randint(0, 1 << 22)

    n_inputs = 1 if rng.random() < 0.85 else rng.randint(2, 3)
    avail = [add_tensor("data", "input") for _ in range(n_inputs)]
    # mostly, every network input is read (an unread one is its own finding)
    read_all_first = n_inputs > 1 and rng.random() < 0.85
    for i in range(n_layers):
        op = rng.choices(["plain", "conv", "inplace", "join", "extra", "multi", "empty",
                          "view_old"], [30, 20, 15, 10, 8, 5, 2, 5])[0]
        if i == 0 and read_all_first:
            op = "join"
        lid = f"L{i}" if not odd or rng.random() < 0.5 else odd_name(rng).replace("\x00", "") + str(i)
        while any(l["id"] == lid for l in layers):
            lid += "_"
        kind = {"conv": "conv", "inplace": "relu", "join": rng.choice(["concat", "add"]),
                "extra": rng.choice(["dropout", "bn"])}.get(op, rng.choice(
                    ["fc", "maxpool", "softmax", "lrn", "flatten", "whatever", "Conv"]))
        d: dict[str, Any] = {"id": lid, "kind": kind}
        src = avail[-1] if rng.random() < 0.7 else rng.choice(avail)
        if op in ("plain", "conv"):
            out = add_tensor("t")
            d["inputs"], d["outputs"] = [src], [out]
            d["saved"] = rng.choice([[src], [out], [src, out], []])
            avail.append(out)
        elif op in ("inplace", "view_old"):
            out = add_tensor("a", alias=src)
            d["inputs"], d["outputs"] = [src], [out]
            d["saved"] = rng.choice([[out], [], [src]])
            avail.append(out)
        elif op == "join":
            ins = (list(avail) if i == 0 and read_all_first
                   else rng.sample(avail, min(len(avail), rng.randint(1, 3))))
            out = add_tensor("j")
            d["inputs"], d["outputs"], d["saved"] = ins, [out], []
            avail.append(out)
        elif op == "extra":
            out = add_tensor("t")
            ex = add_tensor("x", "extra")
            d["inputs"], d["outputs"] = [src], [out, ex]
            d["saved"] = [ex] + ([src] if rng.random() < 0.5 else [])
            avail.append(out)
        elif op == "multi":
            o1, o2 = add_tensor("m"), add_tensor("m")
            d["inputs"], d["outputs"], d["saved"] = [src], [o1, o2], rng.choice([[o1], []])
            avail += [o1, o2]
        else:  # a layer that reads and writes nothing
            pass
        if rng.random() < 0.3 or op == "conv":
            d["weight_bytes"] = rng.choice([0, 4, rng.randint(0, 1 << 24)])
        times(d, op == "conv")
        if rng.random() < 0.1:
            d["attrs"] = {"flops": rng.randint(0, 10 ** 12), "note": "x", "shape": [1, 2]}
        for key in ("inputs", "outputs", "saved"):
            if key in d and not d[key] and rng.random() < 0.5:
                del d[key]
        layers.append(d)
    for j in range(alias_chain):  # views of views: a long alias chain, each written by a layer
        src = avail[-1]
        out = add_tensor("v", alias=src)
        layers.append({"id": f"view{j}", "kind": "flatten", "inputs": [src], "outputs": [out],
                       "fwd_ns": 0, "bwd_ns": 0})
        avail.append(out)
    if not layers:
        layers.append({"id": "only", "kind": "relu", "fwd_ns": 1, "bwd_ns": 1})
    t: dict[str, Any] = {"format": "vdnnsim-trace", "version": 1,
                         "name": rng.choice(["tiny", "t", "trace net", "トレース"]),
                         "batch_size": rng.choice([1, 2, 4, 8, 64, 256])}
    if rng.random() < 0.5:
        t["dtype"] = rng.choice(DTYPES)
    if pytorch is None:
        pytorch = rng.random() < 0.15
    if pytorch or rng.random() < 0.4:
        src_d: dict[str, Any] = {"kind": rng.choice(["synthesized", "profiled", "handwritten"])}
        if pytorch:
            src_d["framework"] = "pytorch"
        if rng.random() < 0.3:
            src_d.update(gpu="k40", cost_model="analytic-v1", software={"torch": "2.x"},
                         note="fuzz")
        t["source"] = src_d
    t["tensors"], t["layers"] = tensors, layers
    if rng.random() < 0.2:
        t["step_ns"] = rng.randint(0, 10 ** 6)
    if rng.random() < 0.2:
        t["resident_bytes"] = rng.choice([0, 512, rng.randint(0, 1 << 26), "64 MiB"])
    return t


def trace_need(t: dict) -> int | None:
    """docs/trace-format.md: the sum of all buffers, twice the weights and each layer's
    largest workspace must not exceed 2**50 bytes."""
    try:
        b = lambda v: doc_bytes(v)[1]  # noqa: E731
        total = sum(b(x["size_bytes"]) for x in t["tensors"] if not x.get("alias_of"))
        for layer in t["layers"]:
            total += 2 * b(layer.get("weight_bytes", 0))
            if layer.get("algos"):
                total += max(max(b(a.get("fwd_workspace_bytes", 0)),
                                 b(a.get("bwd_workspace_bytes", 0))) for a in layer["algos"])
            else:
                total += b(layer.get("workspace_bytes", 0))
        return total + 0
    except Exception:
        return None


def trace_facts(t: dict) -> dict | None:
    """The oracle time (sum of the fastest algorithms plus step_ns), the weights and, for
    Torch7 traces, baseline_p's peak: weights and weight gradients, every buffer, two
    gradient buffers of the largest buffer that needs a gradient, one workspace of the
    largest the fastest algorithms need (docs/policies.md), each rounded up to 512."""
    try:
        def b(v):
            verdict, n = doc_bytes(v)
            if verdict != VALID:
                raise ValueError
            return n
        roots = {x["id"]: x for x in t["tensors"] if not x.get("alias_of")}
        oracle = int(t.get("step_ns", 0))
        W = 0
        ws = 0
        for layer in t["layers"]:
            W += b(layer.get("weight_bytes", 0))
            if layer.get("algos"):
                algos = [(a["fwd_ns"] + a["bwd_ns"], max(b(a.get("fwd_workspace_bytes", 0)),
                                                         b(a.get("bwd_workspace_bytes", 0))))
                         for a in layer["algos"]]
            else:
                w = b(layer.get("workspace_bytes", 0))
                algos = [(layer["fwd_ns"] + layer["bwd_ns"], w)]
            best = min(algos, key=lambda x: (x[0], x[1]))
            oracle += best[0]
            ws = max(ws, best[1])
        grads = [b(x["size_bytes"]) for x in roots.values()
                 if x.get("requires_grad", x.get("kind", "activation") == "activation")]
        bufs = sum(a512(b(x["size_bytes"])) for x in roots.values())
        resident = b(t.get("resident_bytes", 0))
        peak = (2 * a512(W) + bufs + 2 * a512(max(grads, default=0)) + a512(ws)
                + a512(resident))
        return {"oracle_ns": oracle, "weight_bytes": 2 * a512(W),
                "baseline_peak": None if (t.get("source") or {}).get("framework") == "pytorch"
                else peak}
    except Exception:
        return None


TRACE_BREAKS = ["unknown_key", "missing_key", "bad_size", "frac_size", "neg_size", "bool_size",
                "neg_time", "huge_time", "float_time", "bool_time", "bad_dtype", "format",
                "version", "algos_and_times", "no_times", "empty_algos", "dup_tensor",
                "alias_unknown", "alias_cycle", "alias_self", "alias_size", "dup_layer",
                "unknown_tensor", "written_twice", "write_input", "saved_foreign", "unwritten",
                "order", "no_layers", "batch", "attrs_many", "attrs_bomb", "too_big", "step",
                "resident", "hostile", "tensors_type", "layer_type", "kind", "source_kind",
                "framework", "input_grad", "empty_id", "shape_bad", "many_errors"]


def break_trace(rng: random.Random, t: dict) -> tuple[dict, str, str]:
    t = copy.deepcopy(t)
    T, L = t["tensors"], t["layers"]
    what = rng.choice(TRACE_BREAKS)
    v = INVALID
    ti = rng.randrange(len(T)) if T else None
    li = rng.randrange(len(L))
    acts = [x for x in T if x.get("kind", "activation") != "input" and not x.get("alias_of")]
    written = [o for l in L for o in l.get("outputs", [])]
    if what == "unknown_key":
        target = rng.choice(["top", "layer", "tensor", "source", "algo"])
        if target == "top":
            t["flops"] = 1
        elif target == "layer":
            L[li]["flops"] = 1
        elif target == "tensor" and T:
            T[ti]["dims"] = 1
        elif target == "source":
            t["source"] = {"kind": "handwritten", "gpus": "x"}
        else:
            L[li].pop("fwd_ns", None), L[li].pop("bwd_ns", None), L[li].pop("workspace_bytes", None)
            L[li]["algos"] = [{"name": "a", "fwd_ns": 1, "bwd_ns": 1, "workspace_bytes": 4}]
    elif what == "missing_key":
        target = rng.choice(["format", "version", "name", "batch_size", "tensors", "layers",
                             "t.id", "t.size", "l.id", "l.kind", "algo.name"])
        if "." not in target:
            t.pop(target)
        elif target == "t.id" and T:
            T[ti].pop("id")
        elif target == "t.size" and T:
            T[ti].pop("size_bytes")
        elif target == "l.id":
            L[li].pop("id")
        elif target == "l.kind":
            L[li].pop("kind")
        else:
            L[li].pop("fwd_ns", None), L[li].pop("bwd_ns", None), L[li].pop("workspace_bytes", None)
            L[li]["algos"] = [{"fwd_ns": 1, "bwd_ns": 1}]
        if target == "tensors" and not any(l.get("inputs") or l.get("outputs") for l in L):
            v = INVALID
    elif what in ("bad_size", "frac_size", "neg_size", "bool_size") and T:
        val = {"bad_size": rng.choice(["12 MB/s", "12 PB", "twelve", "12 MiBs", "1e400", "0x10"]),
               "frac_size": rng.choice(["160.5", 160.5, "1.5e0"]),
               "neg_size": rng.choice([-4, "-4", -1e3]),
               "bool_size": rng.choice([True, False])}[what]
        field = rng.choice(["t", "w", "ws", "res"])
        if field == "t":
            T[ti]["size_bytes"] = val
        elif field == "w":
            L[li]["weight_bytes"] = val
        elif field == "ws" and "algos" not in L[li]:
            L[li]["workspace_bytes"] = val
        else:
            t["resident_bytes"] = val
    elif what in ("neg_time", "huge_time", "float_time", "bool_time"):
        val = {"neg_time": -1, "huge_time": rng.choice([10 ** 18 + 1, 10 ** 30, 2 ** 63]),
               "float_time": rng.choice([1.5, float("nan"), float("inf")]),
               "bool_time": True}[what]
        if what == "bool_time":
            v = UNKNOWN  # 'ns fields are integers'; a bool is reported as a finding
        if "algos" in L[li]:
            L[li]["algos"][0][rng.choice(["fwd_ns", "bwd_ns"])] = val
        elif rng.random() < 0.8:
            L[li][rng.choice(["fwd_ns", "bwd_ns"])] = val
        else:
            t["step_ns"] = val
    elif what == "bad_dtype":
        t["dtype"] = rng.choice(["FP32", "fp64", "int8", "", None, 32])
    elif what == "format":
        t["format"] = rng.choice(["vdnnsim-trace ", "vdnnsim", "VDNNSIM-TRACE", None, 1])
    elif what == "version":
        t["version"] = rng.choice([2, 0, 1.0, True, "1", None, -1, 10 ** 30, Raw("!!int '1'")])
        if isinstance(t["version"], Raw):
            v = UNKNOWN
    elif what == "algos_and_times":
        L[li]["algos"] = [{"name": "x", "fwd_ns": 1, "bwd_ns": 1}]
        L[li]["fwd_ns"] = 1
        L[li]["bwd_ns"] = 1
    elif what == "no_times":
        for k in ("fwd_ns", "bwd_ns", "algos", "workspace_bytes"):
            L[li].pop(k, None)
        if rng.random() < 0.5:
            L[li]["fwd_ns"] = 1
    elif what == "empty_algos":
        for k in ("fwd_ns", "bwd_ns", "workspace_bytes"):
            L[li].pop(k, None)
        L[li]["algos"] = []
    elif what == "dup_tensor" and T:
        T.append(dict(T[ti]))
    elif what == "alias_unknown" and T:
        T[ti]["alias_of"] = "no_such_tensor"
    elif what == "alias_cycle" and len(T) >= 2:
        T[0]["alias_of"], T[1]["alias_of"] = T[1]["id"], T[0]["id"]
        T[0]["size_bytes"] = T[1]["size_bytes"] = 0
    elif what == "alias_self" and T:
        T[ti]["alias_of"] = T[ti]["id"]
    elif what == "alias_size" and T and acts:
        x = rng.choice(acts)
        T.append({"id": "al_bad", "size_bytes": doc_bytes(x["size_bytes"])[1] + 1 if
                  doc_bytes(x["size_bytes"])[1] is not None else 1, "alias_of": x["id"]})
        L.append({"id": "al_writer", "kind": "relu", "inputs": [x["id"]], "outputs": ["al_bad"],
                  "fwd_ns": 1, "bwd_ns": 1})
    elif what == "dup_layer":
        L.append(copy.deepcopy(L[li]))
        L[-1]["outputs"] = []
        v = INVALID
    elif what == "unknown_tensor":
        L[li].setdefault(rng.choice(["inputs", "outputs", "saved"]), []).append("no_such_t")
    elif what == "written_twice" and written:
        L.append({"id": "twice", "kind": "relu", "outputs": [rng.choice(written)], "fwd_ns": 1,
                  "bwd_ns": 1})
    elif what == "write_input":
        ins = [x["id"] for x in T if x.get("kind") == "input"]
        if ins:
            L[li].setdefault("outputs", []).append(rng.choice(ins))
        else:
            v = UNKNOWN
    elif what == "saved_foreign" and T:
        mine = set(L[li].get("inputs", [])) | set(L[li].get("outputs", []))
        other = [x["id"] for x in T if x["id"] not in mine]
        if other:
            L[li].setdefault("saved", []).append(rng.choice(other))
        else:
            v = UNKNOWN
    elif what == "unwritten":
        T.append({"id": "orphan", "size_bytes": 4, "kind": rng.choice(["activation", "extra"])})
    elif what == "order" and len(L) >= 2 and written:
        # the first layer reads what the last layer writes
        last_out = [o for o in L[-1].get("outputs", [])]
        if last_out:
            L[0].setdefault("inputs", []).append(last_out[0])
        else:
            v = UNKNOWN
    elif what == "no_layers":
        t["layers"] = rng.choice([[], None, {}, "x"])
    elif what == "batch":
        t["batch_size"] = rng.choice([0, -1, 2 ** 50 + 1, 2.5, True, "4", None, 10 ** 30])
        if t["batch_size"] == "4":
            v = UNKNOWN  # the bounds table: 'a whole number, at least 1 (not true, not 2.5)'
    elif what == "attrs_many":
        L[li]["attrs"] = {f"k{j}": j for j in range(rng.choice([1001, 5000]))}
    elif what == "attrs_bomb":
        L[li]["attrs"] = Raw(_bomb_flow(rng.randint(5, 9)),
                             json.dumps({f"k{j}": j for j in range(1001)}))
        v = INVALID
    elif what == "too_big":
        # every size within 1 PiB, the sum over it (docs: 'needs ... more than the 1 PiB')
        T.append({"id": "big1", "size_bytes": "1024 TiB", "kind": "input"})
        T.append({"id": "big2", "size_bytes": "1 TiB", "kind": "input"})
    elif what == "step":
        t["step_ns"] = rng.choice([-1, 10 ** 18 + 1, 1.5, "1 s", None])
    elif what == "resident":
        t["resident_bytes"] = rng.choice([-1, "2 PiB", 2 ** 50 + 1, "1.5", True])
    elif what == "hostile":
        target = rng.choice(["name", "batch_size", "dtype", "source", "tensors", "layers",
                             "step_ns", "resident_bytes", "t.id", "t.kind", "t.alias_of",
                             "t.requires_grad", "t.shape", "l.id", "l.kind", "l.inputs",
                             "l.saved", "l.attrs", "l.weight_bytes"])
        val = hostile(rng)
        if "." not in target:
            t[target] = val
        elif target.startswith("t.") and T:
            T[ti][target[2:]] = val
        else:
            L[li][target[2:]] = val
        v = UNKNOWN
    elif what == "tensors_type":
        t["tensors"] = rng.choice([None, {}, "data", [None], [[]], [1]])
        v = INVALID
    elif what == "layer_type":
        L[li] = rng.choice([None, [], "conv", 1])
    elif what == "kind" and T:
        T[ti]["kind"] = rng.choice(["Input", "weight", "", None, "activations"])
    elif what == "source_kind":
        t["source"] = {"kind": rng.choice(["measured", "", None, 1])}
    elif what == "framework":
        t["source"] = {"kind": "profiled", "framework": rng.choice(["tf", "PyTorch", "", None])}
    elif what == "input_grad":
        for x in T:
            if x.get("kind") == "input":
                x["requires_grad"] = True
        v = VALID
    elif what == "empty_id":
        if T and rng.random() < 0.5:
            old = T[ti]["id"]
            T[ti]["id"] = ""
            v = INVALID
            del old
        else:
            L[li]["id"] = ""
    elif what == "shape_bad" and T:
        T[ti]["shape"] = rng.choice([[1.5], ["a"], [-1], [10 ** 30], "4x4", [True]])
        v = UNKNOWN if T[ti]["shape"] in ([-1], [10 ** 30], [True]) else INVALID
    elif what == "many_errors":
        for x in T:
            x["size_bytes"] = -1
    else:
        v = VALID if what not in ("order",) else UNKNOWN
        if what in ("dup_tensor", "alias_unknown", "alias_self", "unknown_tensor", "kind",
                    "shape_bad", "saved_foreign", "written_twice", "write_input", "alias_size",
                    "alias_cycle"):
            v = UNKNOWN  # nothing to break in this trace
    return t, what, v


def _bomb_flow(levels: int) -> str:
    """A billion-laughs mapping in flow style: one anchor per level, each level ten aliases
    of the one before."""
    parts = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for k in range(1, levels):
        parts.append(f"&l{k} [" + ", ".join([f"*l{k - 1}"] * 10) + "]")
    return "{" + ", ".join(f"k{k}: {p}" for k, p in enumerate(parts)) + "}"


def bomb_doc(levels: int, where: str) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for k in range(1, levels):
        lines.append(f"a{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * 10) + "]")
    lines.append(f"{where}: *a{levels - 1}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------

class Case:
    """Files to lay out in a fresh folder, then one or more CLI invocations or an API call,
    and what the documentation lets us expect."""

    def __init__(self, family: str):
        self.family = family
        self.files: dict[str, bytes] = {}
        self.symlinks: dict[str, str] = {}
        self.dirs: list[str] = []
        self.fifos: dict[str, bytes] = {}
        self.argvs: list[list[str]] = []
        self.api: dict | None = None
        self.expect: dict[str, Any] = {}
        self.mode = "inproc"
        self.note = ""

    def add(self, name: str, content: str | bytes) -> str:
        self.files[name] = content.encode("utf-8", "surrogatepass") if isinstance(content, str) \
            else content
        return name

    def to_json(self) -> dict:
        return {"family": self.family, "mode": self.mode, "note": self.note,
                "files": {k: base64.b64encode(v).decode() for k, v in self.files.items()},
                "symlinks": self.symlinks, "dirs": self.dirs,
                "fifos": {k: base64.b64encode(v).decode() for k, v in self.fifos.items()},
                "argvs": self.argvs, "api": self.api, "expect": _jsonable(self.expect)}


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return repr(x)


def pick_style(rng: random.Random) -> str:
    return rng.choices(["yaml", "flow", "json"], [70, 15, 15])[0]


def net_choice(rng: random.Random, case: Case, folder: str = "", big: bool = False
               ) -> tuple[Any, dict]:
    """A network for a config: a zoo name, a spec file or a trace file (valid)."""
    r = rng.random()
    if r < 0.3:
        name = rng.choice(FAST_ZOO)
        default = {"alexnet": 128, "overfeat": 128, "googlenet": 128, "vgg16": 64}[name]
        return name, {"kind": "zoo", "name": name, "default_batch": default, "max_batch": 16}
    if r < 0.62:
        spec, facts = gen_spec(rng, odd=rng.random() < 0.2)
        fname = rng.choice(["net.yaml", "spec.yml", "my net.yaml", "ñet.yaml", "n.json",
                            "net.txt", "net"])
        where = folder if rng.random() < 0.7 else ""
        case.add(where + fname, emit(spec, "json" if fname.endswith(".json") else pick_style(rng)))
        return fname, {"kind": "spec", "name": spec["name"],
                       "default_batch": spec.get("batch_size"), "max_batch": 64,
                       "params": facts["params"]}
    for _ in range(50):  # valid means within the 1 PiB bound too (docs/configs.md)
        t = gen_trace(rng, odd=rng.random() < 0.2)
        need = trace_need(t)
        if need is not None and need <= PIB:
            break
    fname = rng.choice(["trace.yaml", "t.yml", "tr ace.yaml", "t.json"])
    where = folder if rng.random() < 0.7 else ""
    case.add(where + fname, emit(t, "json" if fname.endswith(".json") else pick_style(rng)))
    return fname, {"kind": "trace", "name": t["name"], "batch": t["batch_size"],
                   "dtype": t.get("dtype", "fp32"), "facts": trace_facts(t),
                   "pytorch": (t.get("source") or {}).get("framework") == "pytorch"}


OVERRIDE_VALID = {
    "memory_bytes": lambda r: r.choice([r.randint(1, 2 ** 40), "12 GiB", "1.5 GB", "64 MiB",
                                        "1e9", 2 ** 50, "512 KiB", 1]),
    "link_bw_bytes_per_s": lambda r: r.choice([1e6, 12.8e9, 25e9, "12.8e9", 1e15, 10 ** 9]),
    "h2d_bw_bytes_per_s": lambda r: r.choice([1e6, 12.8e9, 1e12, 5 * 10 ** 9]),
    "d2h_bw_bytes_per_s": lambda r: r.choice([1e6, 12.8e9, 1e12, 5 * 10 ** 9]),
    "link_latency_ns": lambda r: r.choice([0, 1, 10000, 10 ** 9]),
    "duplex": lambda r: r.choice([True, False]),
    "peak_flops_scale": lambda r: r.choice([1e-6, 0.5, 1, 2.0, 1e6]),
    "mem_bw_bytes_per_s": lambda r: r.choice([1e6, 288e9, 1e15]),
}


def override_verdict(key: str, value: Any) -> str:
    if value is None:
        return UNKNOWN  # null: not set?
    if key == "memory_bytes":
        return doc_bytes(value, least=1)[0]
    if key in ("link_bw_bytes_per_s", "h2d_bw_bytes_per_s", "d2h_bw_bytes_per_s",
               "mem_bw_bytes_per_s"):
        return doc_number(value, 1e6, 1e15)
    if key == "link_latency_ns":
        return doc_number(value, 0, 1e9, whole=True)
    if key == "peak_flops_scale":
        return doc_number(value, 1e-6, 1e6)
    if key == "duplex":
        return VALID if isinstance(value, bool) else (UNKNOWN if isinstance(value, Raw)
                                                       else INVALID)
    return INVALID


def gen_config(rng: random.Random, case: Case, folder: str = "") -> tuple[dict, dict, list[str]]:
    """A valid run config, what its records must say, and the verdicts of its values."""
    net, nf = net_choice(rng, case, folder)
    cfg: dict[str, Any] = {}
    if rng.random() < 0.3:
        cfg["name"] = rng.choice(["t", odd_name(rng).replace("\x00", ""), "VGG (1) on K40"])
    if rng.random() < 0.2:
        cfg["description"] = "fuzz"
    cfg["network"] = net
    verdicts = [VALID]
    batch = None
    if nf["kind"] == "trace":
        if rng.random() < 0.4:
            cfg["batch_size"] = nf["batch"]
        batch = nf["batch"]
    elif rng.random() < 0.75 or nf.get("default_batch") is None:
        batch = rng.randint(1, nf["max_batch"] if nf["kind"] != "zoo" else
                            (4 if nf["name"] == "vgg16" else 16))
        cfg["batch_size"] = batch
    else:
        batch = nf["default_batch"]
    preset = rng.choice(PRESETS)
    capacity = 2 ** 30 * PRESET_GIB[preset] if preset in PRESET_GIB else None
    if rng.random() < 0.6:
        cfg["gpu"] = preset if rng.random() < 0.8 else None
        if cfg["gpu"] is None:
            del cfg["gpu"]
            preset, capacity = "k40", 12 * 2 ** 30
    else:
        g: dict[str, Any] = {"preset": preset}
        for k in rng.sample(list(OVERRIDE_VALID), rng.randint(0, 4)):
            g[k] = OVERRIDE_VALID[k](rng)
            if k == "memory_bytes":
                capacity = doc_bytes(g[k], 1)[1]
        cfg["gpu"] = g
    if "gpu" not in cfg:
        preset, capacity = "k40", 12 * 2 ** 30
    if rng.random() < 0.3:
        cfg["dtype"] = rng.choice(DTYPES)
    dtype = nf["dtype"] if nf["kind"] == "trace" else cfg.get("dtype", "fp32")
    r = rng.random()
    if r < 0.4:
        pols = rng.sample(POLICIES, rng.randint(1, len(POLICIES)))
        cfg["policies"] = pols
    elif r < 0.75:
        cfg["policy"] = rng.choice(POLICIES)
        pols = [cfg["policy"]]
    else:
        pols = list(DEFAULT_POLICIES)
    if rng.random() < 0.25:
        opts = {}
        for k in rng.sample(["sync", "prefetch", "reading"], rng.randint(0, 3)):
            opts[k] = rng.choice([True, False]) if k != "reading" else rng.choice(["measured",
                                                                                  "text"])
        cfg["policy_options"] = opts
    if rng.random() < 0.3:
        mb = OVERRIDE_VALID["memory_bytes"](rng)
        cfg["memory_bytes"] = mb
        capacity = doc_bytes(mb, 1)[1]
    exp = {"policies": pols, "batch_size": batch, "gpu": preset, "dtype": dtype,
           "network": nf["name"], "capacity": capacity, "net": nf}
    if nf["kind"] == "spec" and nf.get("params") is not None:
        exp["weight_bytes"] = 2 * a512(nf["params"] * DTYPE_BYTES[dtype])
    return cfg, exp, verdicts


CONFIG_KEYS = ["network", "batch_size", "gpu", "dtype", "policy", "policies", "policy_options",
               "memory_bytes", "name", "description"]


def mutate_config(rng: random.Random, cfg: dict, exp: dict) -> tuple[str, str]:
    """One mutation: (what, verdict)."""
    m = rng.choice(["value", "value", "delete_network", "unknown_key", "gpu_override",
                    "gpu_unknown_key", "gpu_no_preset", "gpu_bad_preset", "options",
                    "both_policy", "bad_policy", "dup_policies", "batch_mismatch",
                    "memory_both", "empty_policies"])
    nf = exp["net"]
    if m == "value":
        key = rng.choice(CONFIG_KEYS)
        val = hostile(rng)
        cfg[key] = val
        if key == "batch_size":
            if nf["kind"] == "trace":
                v = doc_batch(val, 10 ** 9)
                if v == VALID and val is not None and val != nf["batch"]:
                    v = INVALID
                return f"batch_size={val!r}", v
            v = doc_batch(val, 4 if nf["kind"] == "zoo" else 64)
            if v == VALID:
                exp["batch_size"] = val if val is not None else nf.get("default_batch")
                if exp["batch_size"] is None:
                    v = INVALID  # no batch anywhere
            else:  # a raw YAML value (a tag such as !!int '7'): its number is not known here
                exp.pop("batch_size", None)
            return f"batch_size={val!r}", v
        if key == "memory_bytes":
            v, n = doc_bytes(val, least=1)
            if v != VALID:
                exp["capacity"] = None
            if val is None:
                v = VALID
                g = cfg.get("gpu")
                exp["capacity"] = (doc_bytes(g.get("memory_bytes"), 1)[1]
                                   if isinstance(g, dict) and "memory_bytes" in g
                                   else 2 ** 30 * PRESET_GIB.get(exp["gpu"], 0) or None)
            elif v == VALID:
                exp["capacity"] = n
            return f"memory_bytes={val!r}", v
        if key == "dtype":
            v = VALID if val in DTYPES else (UNKNOWN if isinstance(val, Raw) else INVALID)
            if val is None:
                v = UNKNOWN
            if v == VALID and nf["kind"] != "trace":
                exp["dtype"] = val
            return f"dtype={val!r}", v
        if key in ("name", "description"):
            return f"{key}={val!r}", VALID if isinstance(val, str) or val is None else UNKNOWN
        if key == "network":
            if isinstance(val, str) and val and val not in ZOO and "\x00" not in val:
                return f"network={val!r}", INVALID
            return f"network={val!r}", UNKNOWN
        if key == "gpu":
            if isinstance(val, str) and val not in PRESETS:
                return f"gpu={val!r}", INVALID
            return f"gpu={val!r}", UNKNOWN
        if key == "policy":
            if "policies" in cfg and val:
                exp["policies"] = None
                return "policy+policies", INVALID if isinstance(val, str) else UNKNOWN
            if isinstance(val, str) and val not in POLICIES:
                exp["policies"] = [val]
                return f"policy={val!r}", INVALID
            if val is None and "policies" not in cfg:
                exp["policies"] = list(DEFAULT_POLICIES)
                return "policy=None", VALID
            exp["policies"] = None
            return f"policy={val!r}", UNKNOWN
        if key == "policies":
            if isinstance(val, list) and not val:
                return "policies=[]", INVALID
            if val is not None:
                exp["policies"] = None
            if val is None and "policy" not in cfg:
                exp["policies"] = list(DEFAULT_POLICIES)
                return "policies=None", VALID
            if val is None:
                exp["policies"] = [cfg["policy"]]
                return "policies=None", VALID
            return f"policies={val!r}", UNKNOWN
        if key == "policy_options":
            if val == {}:
                return "policy_options={}", VALID
            if isinstance(val, dict):
                return f"policy_options={val!r}", INVALID  # {'a': 1}: an unknown option
            return f"policy_options={val!r}", UNKNOWN
        return key, UNKNOWN
    if m == "delete_network":
        cfg.pop("network", None)
        return m, INVALID
    if m == "unknown_key":
        cfg[rng.choice(["batch", "Network", "policys", "gpus", "memory", "extra", "sweep2"])] = 1
        return m, INVALID
    if m in ("gpu_override", "gpu_unknown_key", "gpu_no_preset", "gpu_bad_preset"):
        g = cfg.get("gpu")
        if not isinstance(g, dict):
            g = {"preset": g if isinstance(g, str) else "k40"}
            cfg["gpu"] = g
            exp["gpu"] = g["preset"]
            if "memory_bytes" not in cfg:
                exp["capacity"] = 2 ** 30 * PRESET_GIB.get(g["preset"], 0) or None
        if m == "gpu_override":
            k = rng.choice(list(OVERRIDE_VALID))
            val = hostile(rng) if rng.random() < 0.7 else OVERRIDE_VALID[k](rng)
            g[k] = val
            v = override_verdict(k, val)
            if k == "memory_bytes" and "memory_bytes" not in cfg:
                exp["capacity"] = doc_bytes(val, 1)[1] if v == VALID else None
            if val is None:
                v = UNKNOWN
            return f"gpu.{k}={val!r}", v
        if m == "gpu_unknown_key":
            g[rng.choice(["winograd", "memory", "name", "link", "peak_flops"])] = 1
            return m, INVALID
        if m == "gpu_no_preset":
            g.pop("preset", None)
            return m, INVALID
        g["preset"] = rng.choice(["K40", "k80", "", "h200 ", "nvidia"])
        return m, INVALID
    if m == "options":
        opts = cfg.setdefault("policy_options", {})
        if not isinstance(opts, dict):
            opts = cfg["policy_options"] = {}
        k = rng.choice(["sync", "prefetch", "reading", "foo", "algos", "offload"])
        val = rng.choice([True, False, 1, 0, "yes", "true", None, "text", "measured", "TEXT",
                          1.5, [], float("nan")])
        opts[k] = val
        if k in ("sync", "prefetch"):
            return f"options.{k}={val!r}", VALID if isinstance(val, bool) else INVALID
        if k == "reading":
            return f"options.reading={val!r}", VALID if val in ("text", "measured") else INVALID
        return f"options.{k}", INVALID if not isinstance(val, list) else UNKNOWN
    if m == "both_policy":
        cfg["policy"] = rng.choice(POLICIES)
        cfg["policies"] = [rng.choice(POLICIES)]
        return m, INVALID
    if m == "bad_policy":
        bad = rng.choice(["vdnn_fast", "VDNN_DYN", "baseline", "vdnn_all", " eager", ""])
        if isinstance(cfg.get("policies"), list):
            cfg["policies"] = list(cfg["policies"]) + [bad]
        else:
            cfg.pop("policies", None)
            cfg["policy"] = bad
        exp["policies"] = cfg.get("policies") or [bad]
        return f"policy {bad!r}", INVALID
    if m == "dup_policies":
        p = rng.choice(POLICIES)
        cfg.pop("policy", None)
        cfg["policies"] = [p, p]
        exp["policies"] = [p, p]
        return m, UNKNOWN
    if m == "batch_mismatch":
        if nf["kind"] == "trace":
            cfg["batch_size"] = nf["batch"] + rng.choice([1, -1 if nf["batch"] > 1 else 2])
            return m, INVALID
        return m, VALID
    if m == "memory_both":
        g = cfg.get("gpu")
        top = OVERRIDE_VALID["memory_bytes"](rng)
        inner = OVERRIDE_VALID["memory_bytes"](rng)
        if isinstance(g, dict):
            g["memory_bytes"] = inner
        else:
            cfg["gpu"] = {"preset": g if isinstance(g, str) else "k40", "memory_bytes": inner}
            exp["gpu"] = cfg["gpu"]["preset"]
        cfg["memory_bytes"] = top
        exp["capacity"] = doc_bytes(top, 1)[1]  # the top-level one wins
        return m, VALID
    if m == "empty_policies":
        cfg.pop("policy", None)
        cfg["policies"] = []
        return m, INVALID
    return m, UNKNOWN


def _group(what: str) -> set[str]:
    g = set()
    if "polic" in what or what in ("both_policy", "dup_policies", "empty_policies"):
        g.add("policy")
    if "gpu" in what or what == "memory_both":
        g.add("gpu")
    if "memory" in what:
        g.add("memory")
    if "batch" in what:
        g.add("batch")
    if "option" in what:
        g.add("options")
    if what in ("delete_network",) or what.startswith("network"):
        g.add("network")
    return g


def fam_config(rng: random.Random) -> Case:
    case = Case("config")
    folder = rng.choice(["", "", "cfg/", "a b/ü/"])
    cfg, exp, verdicts = gen_config(rng, case, folder)
    whats = []
    if rng.random() < 0.6:
        done: list[tuple[str, str]] = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            what, v = mutate_config(rng, cfg, exp)
            g = _group(what)
            # a later mutation of the same keys may undo an earlier one
            done = [(w, UNKNOWN if _group(w) & g and vv == INVALID else vv) for w, vv in done]
            done.append((what, v))
        whats = [w for w, _ in done]
        verdicts += [vv for _, vv in done]
    case.note = "; ".join(whats)
    if isinstance(cfg.get("policy_options"), dict):
        exp["opts"] = cfg["policy_options"]
    exp["pytorch"] = exp["net"].get("pytorch")
    name = folder + rng.choice(["run.yaml", "c.yml", "config.json", "run", "r.YAML"])
    case.add(name, emit(cfg, "json" if name.endswith(".json") else pick_style(rng)))
    case.expect.update(valid=combine(*verdicts), rec=exp)
    r = rng.random()
    if r < 0.08:
        case.argvs = [["run", name, "--json"], ["sweep", name, "-o", "same.csv"]]
        case.expect.update(check="run_vs_sweep", outputs=["same.csv"], table="same.csv",
                           rowerror_possible=True)
        if case.expect["valid"] is False:
            case.expect["valid"] = None
    elif r < 0.7:
        case.argvs = [["run", name, "--json"]]
        case.expect["check"] = "run_json"
    elif r < 0.82:
        case.argvs = [["run", name]]
        case.expect["check"] = "run_table"
    elif r < 0.94:
        out = rng.choice(["ct.json", "out/ct.json", "c t.json", "ü.json"])
        case.argvs = [["run", name, "--chrome-trace", out, "--json"]]
        case.expect.update(check="run_json", outputs=[out], must=[out], chrome=out)
        if out.startswith("out/"):
            if rng.random() < 0.5:
                case.dirs.append("out")
            else:
                case.expect["valid"] = False if case.expect["valid"] is not False else False
                case.expect["must"] = []
    else:
        out = rng.choice(["r.csv", "r.parquet"])
        case.argvs = [["sweep", name, "-o", out, "--no-progress"]]
        case.expect.update(check="sweep_written", outputs=[out], must=[out], table=out,
                           rows=len(exp["policies"]) if exp.get("policies") else None,
                           rowerror_possible=True)
        if case.expect["valid"] is False:
            case.expect["valid"] = None  # a study reports a run's error in its row
    return case


STUDY_VALUES = {
    "batch_size": lambda r: r.randint(1, 8),
    "gpu": lambda r: r.choice(PRESETS) if r.random() < 0.8 else {"preset": r.choice(PRESETS),
                                                                 "duplex": r.random() < 0.5},
    "dtype": lambda r: r.choice(DTYPES),
    "policy": lambda r: r.choice(POLICIES),
    "policy_options": lambda r: r.choice([{}, {"sync": False}, {"prefetch": False},
                                          {"reading": "text"}]),
    "memory_bytes": lambda r: r.choice(["64 MiB", "12 GiB", 2 ** 30, "1 TiB", 10 ** 6]),
    **{k: OVERRIDE_VALID[k] for k in OVERRIDE_VALID if k != "memory_bytes"},
}


def study_value_verdict(key: str, val: Any, nf: dict) -> str:
    """'invalid' = the study is rejected; 'rowerror' = the run's row names the error."""
    if key == "batch_size":
        v = doc_batch(val, 64 if nf["kind"] != "zoo" else 8)
        if v == VALID and nf["kind"] == "trace" and val != nf["batch"] and val is not None:
            return "rowerror"
        return v
    if key == "gpu":
        if isinstance(val, str):
            return VALID if val in PRESETS else ("rowerror" if val else INVALID)
        return UNKNOWN
    if key == "dtype":
        return VALID if val in DTYPES else (UNKNOWN if isinstance(val, Raw) or val is None
                                            else INVALID)
    if key == "policy":
        if isinstance(val, str):
            return VALID if val in POLICIES else ("rowerror" if val else INVALID)
        return UNKNOWN
    if key == "policy_options":
        if val == {}:
            return VALID
        if isinstance(val, dict):
            ok = all((k in ("sync", "prefetch") and isinstance(x, bool))
                     or (k == "reading" and x in ("text", "measured")) for k, x in val.items())
            return VALID if ok else UNKNOWN
        return UNKNOWN
    if key == "network":
        return UNKNOWN
    if val is None:
        return UNKNOWN
    return override_verdict(key, val)


def fam_study(rng: random.Random) -> Case:
    case = Case("study")
    net, nf = net_choice(rng, case, "")
    if nf["kind"] == "zoo":
        net, nf = "alexnet", {"kind": "zoo", "name": "alexnet", "default_batch": 128,
                              "max_batch": 8}
    study: dict[str, Any] = {}
    if rng.random() < 0.4:
        study["name"] = rng.choice(["s", "study ü", odd_name(rng).replace("\x00", "")])
    base: dict[str, Any] = {"network": net}
    if nf["kind"] == "zoo" or (nf["kind"] == "spec" and nf.get("default_batch") is None):
        base["batch_size"] = rng.randint(1, 4)
    study["base"] = base
    keys = [k for k in STUDY_VALUES if not (k == "batch_size" and nf["kind"] == "trace")]
    sweep_keys = rng.sample(keys, rng.randint(0, 2))
    zip_keys = rng.sample([k for k in keys if k not in sweep_keys], rng.randint(0, 2))
    zn = rng.randint(1, 3)
    if sweep_keys:
        study["sweep"] = {k: [STUDY_VALUES[k](rng) for _ in range(rng.randint(1, 3))]
                          for k in sweep_keys}
    if zip_keys:
        study["zip"] = {k: [STUDY_VALUES[k](rng) for _ in range(zn)] for k in zip_keys}
    if rng.random() < 0.3:
        study["runs"] = [{k: STUDY_VALUES[k](rng) for k in rng.sample(keys, rng.randint(0, 2))}
                         for _ in range(rng.randint(1, 3))]
    verdicts = [VALID]
    whats = []
    if rng.random() < 0.6:
        m = rng.choice(["value", "value", "value", "unknown_key", "zip_len", "empty_list",
                        "both", "huge", "section_type", "runs_type", "no_network", "gpu_nopreset",
                        "base_unknown"])
        whats.append(m)
        if m == "value":
            key = rng.choice(list(STUDY_VALUES) + ["network"])
            val = hostile(rng)
            where = rng.choice(["base", "sweep", "zip", "runs"])
            if where == "base":
                study["base"][key] = val
            elif where == "sweep":
                study.setdefault("sweep", {})[key] = [val]
                if key in study.get("zip", {}):
                    study["zip"].pop(key)
                    if not study["zip"]:
                        del study["zip"]
            elif where == "zip":
                study.setdefault("zip", {})
                n = len(next(iter(study["zip"].values()))) if study["zip"] else 1
                study["zip"][key] = [val] * n
                if key in study.get("sweep", {}):
                    study["sweep"].pop(key)
                    if not study["sweep"]:
                        del study["sweep"]
            else:
                study.setdefault("runs", [{}])[0][key] = val
            v = study_value_verdict(key, val, nf)
            if key == "network":
                v = UNKNOWN
            whats[-1] = f"{where}.{key}={val!r}"
            verdicts.append(v if v != "rowerror" else VALID)
            case.expect["rowerror_possible"] = True
        elif m == "unknown_key":
            sec = rng.choice(["top", "base", "sweep", "zip", "runs"])
            if sec == "top":
                study["grid"] = {"batch_size": [1]}
            elif sec == "runs":
                study.setdefault("runs", [{}]).append({"batch": 1})
            else:
                study.setdefault(sec, {})["batch"] = [1] if sec != "base" else 1
            verdicts.append(INVALID)
        elif m == "zip_len":
            study["zip"] = {"policy": ["eager", "baseline_p"], "dtype": ["fp32"]}
            verdicts.append(INVALID)
        elif m == "empty_list":
            study.setdefault(rng.choice(["sweep", "zip"]), {})["policy"] = []
            verdicts.append(INVALID)
        elif m == "both":
            study["sweep"] = {"policy": ["eager"]}
            study["zip"] = {"policy": ["eager"]}
            verdicts.append(INVALID)
        elif m == "huge":
            k = rng.choice([100_001, 10 ** 6, 10 ** 12])
            if k == 100_001:
                study["sweep"] = {"batch_size": [1] * 100_001} if nf["kind"] != "trace" else \
                    {"link_latency_ns": [0] * 100_001}
                study.pop("zip", None)
            else:
                study["sweep"] = {key: [STUDY_VALUES[key](rng)] * 1000 for key in
                                  rng.sample([k2 for k2 in keys if k2 != "batch_size"], 3)
                                  if key in STUDY_VALUES}
                study.pop("zip", None)
                n = 1000 ** len(study["sweep"])
                if n <= 100_000:
                    verdicts.append(UNKNOWN)
            verdicts.append(INVALID)
        elif m == "section_type":
            study[rng.choice(["sweep", "zip", "base"])] = rng.choice([[1], "x", 5, None])
            verdicts.append(UNKNOWN)
        elif m == "runs_type":
            study["runs"] = rng.choice([{}, "x", [None], [[1]], 5])
            verdicts.append(UNKNOWN)
        elif m == "no_network":
            study["base"].pop("network")
            case.expect["all_rowerror"] = True
            verdicts.append(VALID)
        elif m == "gpu_nopreset":
            study["base"]["gpu"] = {"duplex": True}
            verdicts.append(UNKNOWN)
        elif m == "base_unknown":
            study["base"]["gpu_name"] = "k40"
            verdicts.append(INVALID)
    case.note = "; ".join(whats)
    name = rng.choice(["study.yaml", "s.json", "sweep me.yml"])
    case.add(name, emit(study, "json" if name.endswith(".json") else pick_style(rng)))
    sweep = study.get("sweep") if isinstance(study.get("sweep"), dict) else {}
    zipd = study.get("zip") if isinstance(study.get("zip"), dict) else {}
    runs = study.get("runs") if isinstance(study.get("runs"), list) else []
    try:
        grid = math.prod(len(v) for v in sweep.values())
        zl = len(next(iter(zipd.values()))) if zipd else 1
        nrows = (grid * zl + len(runs)) if (sweep or zipd) else (len(runs) or 1)
    except TypeError:
        nrows = None
    case.expect.update(valid=combine(*verdicts), rows=nrows, net=nf)
    r = rng.random()
    if r < 0.5:
        case.argvs = [["run", name, "--json"]]
        case.expect["check"] = "study_json"
    elif r < 0.65:
        case.argvs = [["run", name]]
        case.expect["check"] = "any"
    elif r < 0.75:
        case.argvs = [["sweep", name, "--no-progress"]]
        case.expect["check"] = "any"
    else:
        out = rng.choice(["r.csv", "r.parquet", "out.csv"])
        argv = ["sweep", name, "-o", out]
        if rng.random() < 0.5:
            argv.append("--no-progress")
        if rng.random() < 0.15:
            argv += ["--workers", str(rng.choice([1, 2]))]
            case.mode = "subproc"
        case.argvs = [argv]
        case.expect.update(check="sweep_written", outputs=[out], must=[out], table=out)
    return case


DIFF_KEYS = ["batch_size", "gpu", "dtype", "policy", "policy_options", "memory_bytes"]


def fam_diff(rng: random.Random) -> Case:
    """The same key and value in a run config and in a study (docs/studies.md: 'Every value
    has the type and bounds of the same key in a run config')."""
    case = Case("diff")
    spec, _ = gen_spec(rng, rng.randint(1, 6))
    spec.pop("batch_size", None)
    case.add("net.yaml", emit(spec))
    key = rng.choice(DIFF_KEYS)
    val = hostile(rng) if rng.random() < 0.7 else STUDY_VALUES[key](rng)
    cfg: dict[str, Any] = {"network": "net.yaml", "batch_size": 2, "policy": "baseline_p"}
    cfg[key] = val
    where = rng.choice(["base", "sweep", "runs"])
    study: dict[str, Any] = {"base": {"network": "net.yaml", "batch_size": 2,
                                      "policy": "baseline_p"}}
    if where == "base":
        study["base"][key] = val
    elif where == "sweep":
        study["base"].pop(key, None)
        study["sweep"] = {key: [val]}
    else:
        study["base"].pop(key, None)
        study["runs"] = [{key: val}]
    case.add("config.yaml", emit(cfg))
    case.add("study.yaml", emit(study))
    case.argvs = [["run", "config.yaml", "--json"], ["run", "study.yaml", "--json"]]
    case.expect.update(check="diff", valid=None)
    case.note = f"{where}.{key}={val!r}"
    return case


def small_valid_doc(rng: random.Random, case: Case) -> tuple[str, dict, str]:
    """(kind, document, command kind) of a small valid input."""
    k = rng.choice(["config", "config", "study", "spec", "trace"])
    if k == "config":
        spec, _ = gen_spec(rng, rng.randint(1, 5))
        case.add("net.yaml", emit(spec))
        return k, {"network": "net.yaml", "batch_size": 2, "policy": rng.choice(POLICIES)}, "run"
    if k == "study":
        case.add("net.yaml", emit(gen_spec(rng, rng.randint(1, 5))[0]))
        return k, {"base": {"network": "net.yaml", "batch_size": 2},
                   "sweep": {"policy": ["eager", "vdnn_dyn"]}}, "run"
    if k == "spec":
        spec, _ = gen_spec(rng, rng.randint(1, 6))
        spec["batch_size"] = 2
        return k, spec, "trace"
    return k, gen_trace(rng, rng.randint(1, 6)), "trace"


def yaml_variant(rng: random.Random, doc: dict) -> tuple[bytes, str, str]:
    """(bytes, what, verdict) of a YAML-level change."""
    text = emit(doc)
    what = rng.choice(["empty", "comments", "dashes", "dots", "ws", "bom", "utf16", "latin1",
                       "nul", "crlf", "tabs", "multidoc", "multidoc_empty", "merge", "anchors",
                       "bomb_desc", "bomb_unknown", "bomb_value", "deep_list", "deep_map",
                       "deep_json", "bigint", "binary", "python_tag", "dupkey", "toplist",
                       "topscalar", "topnull", "json_nan", "json_trailing", "json_surrogate",
                       "json_deep", "json_bigint", "long_line", "key_int", "key_null",
                       "unhashable", "control_chars", "flow_unclosed", "indent", "cr_only",
                       "surrogate_attrs", "bomb_json"])
    v = INVALID
    if what == "empty":
        data = b""
    elif what == "comments":
        data = b"# nothing here\n# at all\n"
    elif what == "dashes":
        data = b"---\n"
    elif what == "dots":
        data = b"...\n"
    elif what == "ws":
        data = b"   \n\n\t\n"
    elif what == "bom":
        data = b"\xef\xbb\xbf" + text.encode()
        v = UNKNOWN
    elif what == "utf16":
        data = text.encode("utf-16")
        v = UNKNOWN
    elif what == "latin1":
        data = text.encode() + "# caf\xe9\n".encode("latin-1")
        v = UNKNOWN
    elif what == "nul":
        b = text.encode()
        i = rng.randrange(len(b) + 1)
        data = b[:i] + b"\x00" + b[i:]
    elif what == "crlf":
        data = text.replace("\n", "\r\n").encode()
        v = VALID
    elif what == "cr_only":
        data = text.replace("\n", "\r").encode()
        v = UNKNOWN
    elif what == "tabs":
        data = emit({"x": {"y": 1}}).replace("  ", "\t").encode() + text.encode()
    elif what == "multidoc":
        data = (text + "---\n" + text).encode()
    elif what == "multidoc_empty":
        data = ("---\n" + text + "...\n").encode()
        v = VALID
    elif what == "merge":
        first, *rest = list(doc.items())
        data = (emit(dict(rest)) if rest else "").encode() + (
            "<<: " + emit(dict([first]), "flow").strip() + "\n").encode()
        v = UNKNOWN
    elif what == "anchors":
        data = text.encode() + b"x_anchor: &a 1\n"
        v = INVALID  # an unknown key
    elif what in ("bomb_desc", "bomb_unknown", "bomb_value"):
        levels = rng.randint(6, 9)
        key = {"bomb_desc": rng.choice(["description", "name"]), "bomb_unknown": "zzz",
               "bomb_value": rng.choice(["policy_options", "network", "batch_size", "gpu",
                                         "policies", "memory_bytes", "layers", "tensors",
                                         "source", "base", "sweep", "runs", "input"])}[what]
        lines = [ln for ln in text.splitlines() if not ln.startswith(key + ":")]
        bomb = bomb_doc(levels, key)
        # the anchors live under a key of their own, which is itself unknown: the error
        # message, not the bomb, must come back
        data = (bomb.replace("a0:", "a0:", 1) + "\n".join(lines) + "\n").encode()
    elif what == "deep_list":
        n = rng.choice([100, 1000, 10 ** 4, 10 ** 5])
        data = (text + "policy_options: " + "[" * n + "]" * n + "\n").encode()
    elif what == "deep_map":
        n = rng.choice([100, 1000, 10 ** 4])
        data = (text + "policy_options: " + "{a: " * n + "1" + "}" * n + "\n").encode()
    elif what == "deep_json":
        n = rng.choice([1000, 10 ** 5])
        data = ("{\"x\": " + "[" * n + "]" * n + "}").encode()
    elif what == "bigint":
        data = (text + rng.choice(["batch_size", "memory_bytes", "version", "step_ns"]) + ": "
                + big_digits(rng, rng.choice([4301, 5000, 20000])).yaml_text + "\n").encode()
    elif what == "binary":
        data = (text + rng.choice(["name", "network", "description"]) + ": !!binary |\n  "
                + base64.b64encode(bytes(rng.randrange(256) for _ in range(30))).decode()
                + "\n").encode()
        v = UNKNOWN
    elif what == "python_tag":
        data = (text + "name: !!python/object/apply:os.system ['echo pwned > pwned.txt']\n"
                ).encode()
    elif what == "dupkey":
        k0 = next(iter(doc))
        data = (text + emit({k0: doc[k0]})).encode()
        v = UNKNOWN
    elif what == "toplist":
        data = emit([doc]).encode()
    elif what == "topscalar":
        data = rng.choice([b"vgg16\n", b"42\n", b"'x'\n", b"!!binary AAAA\n", b"true\n"])
    elif what == "topnull":
        data = rng.choice([b"~\n", b"null\n", b"--- ~\n"])
    elif what == "json_nan":
        d = dict(doc)
        k0 = rng.choice([k for k in d if k not in ("format", "version")] or list(d))
        d[k0] = rng.choice([float("nan"), float("inf"), float("-inf")])
        data = json.dumps(d).encode()
        v = UNKNOWN
    elif what == "json_trailing":
        data = (json.dumps(doc) + rng.choice([" x", "\n{}", ",", "}"])).encode()
        v = UNKNOWN
    elif what == "json_surrogate":
        d = copy.deepcopy(doc)
        k0 = rng.choice(["name", "description", "network"])
        d[k0] = "bad\udcffname"
        data = json.dumps(d).encode()
        v = UNKNOWN
    elif what == "surrogate_attrs":
        d = copy.deepcopy(doc)
        if "layers" in d and isinstance(d["layers"], list) and d.get("format"):
            d["layers"][0]["attrs"] = {"note": "x\ud800y"}
            d.setdefault("source", {})["note"] = "n\udcffte"
            v = UNKNOWN
        else:
            d["description"] = "x\ud800y"
            v = UNKNOWN
        data = json.dumps(d).encode()
    elif what == "json_deep":
        n = rng.choice([1000, 10 ** 5])
        d = dict(doc)
        data = json.dumps(d)[:-1].encode() + (', "policy_options": ' + "[" * n + "]" * n
                                               + "}").encode()
    elif what == "json_bigint":
        d = json.dumps(doc)
        data = (d[:-1] + ', "batch_size": ' + big_digits(rng, rng.choice([4301, 9000])).yaml_text
                + "}").encode()
    elif what == "long_line":
        data = (text + "description: " + "x" * rng.choice([10 ** 5, 3 * 10 ** 6]) + "\n").encode()
        v = UNKNOWN  # valid for configs, an unknown key elsewhere
    elif what == "key_int":
        data = (text + "1: 2\n").encode()
    elif what == "key_null":
        data = (text + "~: 2\n").encode()
    elif what == "unhashable":
        data = (text + "? [a, b]\n: c\n").encode()
    elif what == "control_chars":
        data = (text + "description: \"\\x07\\x1b[31m\\u0000\"\n").encode()
        v = UNKNOWN
    elif what == "flow_unclosed":
        data = (text + "policies: [eager, baseline_p\n").encode()
    elif what == "indent":
        data = ("  " + text.replace("\n", "\n ", 1)).encode()
        v = UNKNOWN
    elif what == "bomb_json":
        data = json.dumps(doc).encode()
        v = VALID
    else:
        data = text.encode()
        v = UNKNOWN
    return data, what, v


def fam_yaml(rng: random.Random) -> Case:
    case = Case("yaml")
    kind, doc, cmd = small_valid_doc(rng, case)
    data, what, v = yaml_variant(rng, doc)
    if kind in ("spec", "trace") and what in ("long_line",):
        v = INVALID
    if kind not in ("config", "study") and what == "control_chars":
        v = INVALID
    name = rng.choice(["in.yaml", "in.json", "in"])
    case.add(name, data)
    case.note = f"{kind}: {what}"
    if cmd == "run":
        if rng.random() < 0.2 and kind == "config":
            case.argvs = [["plot", rng.choice(["memory", "timeline"]), name, "-o", "p.png"]]
            case.expect.update(check="plot", outputs=["p.png"], must=["p.png"])
        elif rng.random() < 0.2:
            case.argvs = [["sweep", name, "-o", "r.csv"]]
            case.expect.update(check="sweep_written", outputs=["r.csv"], must=["r.csv"],
                               table="r.csv")
        else:
            case.argvs = [["run", name, "--json"]]
            case.expect["check"] = "run_json" if kind == "config" else "study_json"
    else:
        if rng.random() < 0.5:
            case.argvs = [["trace", name, "-o", "out.yaml"]]
            case.expect.update(check="trace_written", outputs=["out.yaml"], must=["out.yaml"])
        else:
            case.argvs = [["trace", name, "-o", "-"]]
            case.expect["check"] = "trace_stdout"
        if rng.random() < 0.3:
            case.add("cfg.yaml", emit({"network": name, "policy": "baseline_p"}))
            case.argvs = [["run", "cfg.yaml", "--json"]]
            case.expect.update(check="run_json", outputs=[], must=[])
    case.expect["valid"] = {VALID: True, INVALID: False}.get(v)
    if what.startswith("bomb_") and what != "bomb_json":
        case.expect["valid"] = False  # the anchors' own keys are unknown keys
    if kind == "trace" and what == "bigint":
        case.expect["valid"] = False
    case.expect["forbid"] = ["pwned.txt"]
    return case


def fam_spec(rng: random.Random) -> Case:
    case = Case("spec")
    r = rng.random()
    deep = r < 0.06
    if deep:
        spec = gen_deep_spec(rng, rng.choice([500, 1000, 2000, 3000]))
        facts: dict = {"params": None}
    else:
        spec, facts = gen_spec(rng, odd=rng.random() < 0.3)
    verdict = VALID
    what = "valid"
    if not deep and rng.random() < 0.55:
        spec, what, verdict = break_spec(rng, spec)
        facts = {"params": None}
    case.note = what
    name = rng.choice(["net.yaml", "n.json", "spec.yml"])
    case.add(name, emit(spec, "json" if name.endswith(".json") else pick_style(rng)))
    b = spec.get("batch_size") if isinstance(spec, dict) else None
    asked_b = None
    if rng.random() < 0.5 or not (isinstance(b, int) and not isinstance(b, bool)):
        asked_b = rng.randint(1, 8)
    dtype = rng.choice(DTYPES)
    eff_b = asked_b or b
    if eff_b is None or isinstance(eff_b, bool):
        verdict = INVALID if verdict == VALID else verdict
    pols = [rng.choice(POLICIES)] if deep else rng.sample(POLICIES, rng.randint(1, 4))
    rec = {"policies": pols, "batch_size": eff_b, "gpu": "k40", "dtype": dtype,
           "network": spec.get("name") if isinstance(spec, dict) else None,
           "capacity": 12 * 2 ** 30}
    if facts.get("params") is not None:
        rec["weight_bytes"] = 2 * a512(facts["params"] * DTYPE_BYTES[dtype])
    case.expect.update(valid={VALID: True, INVALID: False}.get(verdict), rec=rec)
    c = rng.random()
    if c < 0.45:
        cfg = {"network": name, "policies": pols, "dtype": dtype}
        if asked_b:
            cfg["batch_size"] = asked_b
        if rng.random() < 0.3:
            cfg["policy_options"] = rec["opts"] = {
                k: (rng.random() < 0.5 if k != "reading" else rng.choice(["measured", "text"]))
                for k in rng.sample(["sync", "prefetch", "reading"], rng.randint(1, 3))}
        if rng.random() < 0.3:
            cfg["memory_bytes"] = rng.choice(["64 KiB", "1 MiB", "16 MiB", "1 GiB"])
            rec["capacity"] = doc_bytes(cfg["memory_bytes"], 1)[1]
        case.add("run.yaml", emit(cfg))
        case.argvs = [["run", "run.yaml", "--json"]]
        case.expect["check"] = "run_json"
    elif c < 0.8:
        argv = ["trace", name, "-o", "out.yaml", "--dtype", dtype]
        if asked_b:
            argv += ["-b", str(asked_b)]
        gpu = rng.choice(PRESETS)
        argv += ["--gpu", gpu]
        case.argvs = [argv]
        case.expect.update(check="trace_written", outputs=["out.yaml"], must=["out.yaml"],
                           roundtrip={"batch": eff_b, "dtype": dtype, "gpu": gpu,
                                      "name": rec["network"]})
    elif c < 0.9:
        argv = ["trace", name, "-o", "-"]
        if asked_b:
            argv += ["-b", str(asked_b)]
        case.argvs = [argv]
        case.expect["check"] = "trace_stdout"
    else:
        argv = ["maxbatch", "-n", name, "-p", rng.choice(POLICIES), "--limit",
                str(rng.choice([1, 2, 64, 4096])), "--json"]
        case.argvs = [argv]
        case.expect.update(check="maxbatch_json", valid=None)
    return case


def fam_trace(rng: random.Random) -> Case:
    case = Case("trace")
    r = rng.random()
    if r < 0.05:
        t = gen_trace(rng, rng.choice([500, 1000, 2000, 4000]))
    elif r < 0.09:
        t = gen_trace(rng, rng.randint(1, 5), alias_chain=rng.choice([100, 1000, 3000]))
    else:
        t = gen_trace(rng, odd=rng.random() < 0.3)
    big = len(t["layers"]) > 400
    verdict, what = VALID, "valid"
    if not big and rng.random() < 0.5:
        t, what, verdict = break_trace(rng, t)
    case.note = what
    need = trace_need(t)
    if verdict == VALID and need is not None and need > PIB:
        verdict, what = INVALID, what + " (needs over 1 PiB)"
        case.note = what
    facts = trace_facts(t) if verdict == VALID else None
    name = rng.choice(["t.yaml", "t.json", "trace.yml"])
    style = "json" if name.endswith(".json") else (pick_style(rng) if not big else "yaml")
    case.add(name, emit(t, style))
    valid = {VALID: True, INVALID: False}.get(verdict)
    pols = (rng.sample(["baseline_p", "eager", "vdnn_all_p", "vdnn_conv_m"], rng.randint(1, 2))
            if big else rng.sample(POLICIES, rng.randint(1, 8)))
    pt = isinstance(t.get("source"), dict) and t["source"].get("framework") == "pytorch"
    tb = t.get("batch_size")
    rec = {"policies": pols, "batch_size": tb if type(tb) is int else None, "gpu": None,
           "dtype": t.get("dtype", "fp32") if t.get("dtype", "fp32") in DTYPES else None,
           "network": t.get("name") if isinstance(t.get("name"), str) else None, "facts": facts,
           "pytorch": pt}
    c = rng.random()
    if c < 0.6:
        cfg: dict[str, Any] = {"network": name, "policies": pols}
        gpu = rng.choice(PRESETS)
        if rng.random() < 0.5:
            cfg["gpu"] = gpu
        else:
            gpu = "k40"
        rec["gpu"] = gpu
        rec["capacity"] = 2 ** 30 * PRESET_GIB[gpu] if gpu in PRESET_GIB else None
        if rng.random() < 0.4:
            mb = OVERRIDE_VALID["memory_bytes"](rng)
            cfg["memory_bytes"] = mb
            rec["capacity"] = doc_bytes(mb, 1)[1]
        if rng.random() < 0.2:
            cfg["dtype"] = rng.choice(DTYPES)  # ignored for a trace
        if rng.random() < 0.2 and isinstance(t.get("batch_size"), int):
            cfg["batch_size"] = t["batch_size"]
        if rng.random() < 0.35:
            cfg["policy_options"] = rec["opts"] = {
                k: (rng.random() < 0.5 if k != "reading" else rng.choice(["measured", "text"]))
                for k in rng.sample(["sync", "prefetch", "reading"], rng.randint(1, 3))}
        case.add("run.yaml", emit(cfg))
        case.argvs = [["run", "run.yaml", "--json"]]
        case.expect.update(check="run_json", rec=rec, valid=valid)
    elif c < 0.8:
        case.argvs = [["trace", name, "-o", "copy.yaml"]]
        case.expect.update(check="trace_written", outputs=["copy.yaml"], must=["copy.yaml"],
                           valid=valid, roundtrip={"batch": rec["batch_size"],
                                                   "name": rec["network"], "dtype": rec["dtype"]})
    elif c < 0.9:
        case.argvs = [["trace", name, "-o", "-"]]
        case.expect.update(check="trace_stdout", valid=valid)
    else:
        kind = rng.choice(["memory", "timeline"])
        case.add("run.yaml", emit({"network": name, "policies": pols[:2]}))
        out = rng.choice(["p.png", "p.svg", "p.pdf"])
        case.argvs = [["plot", kind, "run.yaml", "-o", out]]
        case.expect.update(check="plot", outputs=[out], must=[out], valid=valid)
    if big:
        case.expect["big"] = True
    return case


def _base_inputs(rng: random.Random, case: Case) -> None:
    spec, _ = gen_spec(rng, rng.randint(1, 4))
    spec["batch_size"] = 2
    case.add("net.yaml", emit(spec))
    case.add("c.yaml", emit({"network": "net.yaml", "policies": ["baseline_p", "vdnn_dyn"]}))
    case.add("s.yaml", emit({"base": {"network": "net.yaml"}, "sweep": {"policy": ["eager"]}}))


BAD_IN = ["missing", "dir", "dir_slash", "empty", "long_comp", "long_total", "nonutf8_missing",
          "symlink_loop", "dangling", "through_file", "devnull", "proc", "tilde", "newline_missing",
          "dash", "dot"]
GOOD_IN = ["nonutf8", "unicode", "newline", "spaces", "fifo", "abs", "dotdot", "symlink_ok"]
BAD_OUT = ["missing_folder", "dir", "long_comp", "through_file", "symlink_dir", "dot", "empty",
           "long_total"]
GOOD_OUT = ["nonutf8", "newline", "dangling_symlink", "unicode", "spaces", "overwrite",
            "abs", "sub"]


def fam_paths(rng: random.Random) -> Case:
    case = Case("paths")
    _base_inputs(rng, case)
    case.dirs.append("d")
    cmd = rng.choice(["run", "run", "trace", "sweep", "plot", "maxbatch", "validate"])
    probe_in = rng.random() < 0.55
    good = rng.random() < 0.4
    what = rng.choice((GOOD_IN if good else BAD_IN) if probe_in else
                      (GOOD_OUT if good else BAD_OUT))
    if cmd in ("maxbatch", "validate"):
        probe_in = True
        what = rng.choice(GOOD_IN if good else BAD_IN)
    src = {"run": "c.yaml", "trace": "net.yaml", "sweep": "s.yaml", "plot": "c.yaml",
           "maxbatch": "net.yaml", "validate": "tr"}[cmd]
    if cmd == "validate":
        t = gen_trace(rng, 3)
        t["name"], t["batch_size"] = "m", 2
        case.add("tr/m.yaml", emit(t))
        case.add("meas.json", json.dumps([{"model": "zoo:m", "batch_size": 2,
                                           "policy": "baseline", "fits": False}]))
    inp, out = src, None
    if probe_in:
        content = case.files.get(src) if cmd != "validate" else None
        if what == "missing":
            inp = "nope.yaml"
        elif what == "dir":
            inp = "d"
        elif what == "dir_slash":
            inp = "d/"
        elif what == "empty":
            inp = ""
        elif what == "long_comp":
            inp = "x" * rng.choice([256, 300, 1000]) + ".yaml"
        elif what == "long_total":
            inp = "d/" * 2100 + "c.yaml"
        elif what == "nonutf8_missing":
            inp = "c\udcff\udcfe.yaml"
        elif what == "symlink_loop":
            case.symlinks["loop.yaml"] = "loop.yaml"
            inp = "loop.yaml"
        elif what == "dangling":
            case.symlinks["dang.yaml"] = "nowhere.yaml"
            inp = "dang.yaml"
        elif what == "through_file":
            inp = "net.yaml/c.yaml"
        elif what == "devnull":
            inp = "/dev/null"
        elif what == "proc":
            inp = "/proc/version"
        elif what == "tilde":
            inp = "~/c.yaml"
        elif what == "newline_missing":
            inp = "no\nsuch.yaml"
        elif what == "dash":
            inp = "-"
        elif what == "dot":
            inp = "."
        elif what in ("nonutf8", "unicode", "newline", "spaces", "abs", "dotdot", "symlink_ok",
                      "fifo"):
            newname = {"nonutf8": "c\udcff.yaml", "unicode": "çø名.yaml",
                       "newline": "a\nb.yaml", "spaces": " c .yaml", "abs": src,
                       "dotdot": "d/../" + src, "symlink_ok": "ln.yaml",
                       "fifo": "fifo.yaml"}[what]
            if cmd == "validate":
                if what == "fifo":
                    newname = "tr2"
                    case.dirs.append("tr2")
                    case.files["tr2/m.yaml"] = case.files["tr/m.yaml"]
                elif what in ("nonutf8", "unicode", "newline", "spaces"):
                    newname = newname.replace(".yaml", "")
                    for k in list(case.files):
                        if k.startswith("tr/"):
                            case.files[newname + "/" + k[3:]] = case.files[k]
                elif what == "symlink_ok":
                    case.symlinks["ln"] = "tr"
                    newname = "ln"
                elif what == "dotdot":
                    newname = "d/../tr"
                inp = newname
            elif what == "symlink_ok":
                case.symlinks["ln.yaml"] = src
                inp = "ln.yaml"
            elif what == "abs":
                inp = "@ABS@/" + src
            elif what == "dotdot":
                inp = newname
            elif what == "fifo":
                case.fifos["fifo.yaml"] = content
                case.mode = "subproc"
                inp = "fifo.yaml"
            else:
                case.files[newname] = content
                inp = newname
    else:
        outs = {"run": "ct.json", "trace": "o.yaml", "sweep": "r.csv", "plot": "p.png"}
        base_out = outs[cmd]
        if what == "missing_folder":
            out = "nofolder/" + base_out
        elif what == "dir":
            out = "d"
        elif what == "long_comp":
            out = "y" * rng.choice([256, 400]) + "." + base_out.split(".")[1]
        elif what == "long_total":
            out = "d/" * 2100 + base_out
        elif what == "through_file":
            out = "net.yaml/" + base_out
        elif what == "symlink_dir":
            case.symlinks["ld"] = "d"
            out = "ld"
        elif what == "dot":
            out = "."
        elif what == "empty":
            out = ""
        elif what == "nonutf8":
            out = "o\udcff." + base_out.split(".")[1]
        elif what == "newline":
            out = "o\nx." + base_out.split(".")[1]
        elif what == "dangling_symlink":
            case.symlinks["dl." + base_out.split(".")[1]] = "target_missing"
            out = "dl." + base_out.split(".")[1]
        elif what == "unicode":
            out = "ö名." + base_out.split(".")[1]
        elif what == "spaces":
            out = " o ." + base_out.split(".")[1]
        elif what == "overwrite":
            out = {"run": "c.yaml", "trace": "net.yaml", "sweep": "s.csv", "plot": "c.png"}[cmd]
            if cmd == "run":
                out = "net.json"
                case.add("net.json", "{}")
            if cmd in ("sweep", "plot"):
                case.add(out, "old")
        elif what == "abs":
            out = "@ABS@/" + base_out
        elif what == "sub":
            out = "d/" + base_out
    argv: list[str]
    check = "any"
    if cmd == "run":
        argv = ["run", inp, "--json"] + (["--chrome-trace", out] if out is not None else [])
        check = "run_json"
    elif cmd == "trace":
        argv = ["trace", inp, "-o", out if out is not None else "o.yaml"]
        check = "trace_written"
        out = out if out is not None else "o.yaml"
    elif cmd == "sweep":
        argv = ["sweep", inp, "-o", out if out is not None else "r.csv"]
        check = "sweep_written"
        out = out if out is not None else "r.csv"
    elif cmd == "plot":
        argv = ["plot", rng.choice(["memory", "timeline"]), inp, "-o",
                out if out is not None else "p.png"]
        check = "plot"
        out = out if out is not None else "p.png"
    elif cmd == "maxbatch":
        argv = ["maxbatch", "-n", inp, "--limit", "64", "--json"]
        check = "maxbatch_json"
    else:
        argv = ["validate", inp, "meas.json", "--json"]
        check = "validate_json"
    case.argvs = [argv]
    case.note = f"{cmd} {'in' if probe_in else 'out'}:{what}"
    outs = [out] if out is not None else []
    case.expect.update(check=check, outputs=outs, must=outs if good else [],
                       valid=True if good else False)
    if check == "sweep_written":
        case.expect["table"] = out
    if cmd == "run" and out is not None:
        case.expect["chrome"] = out
    if what in ("overwrite",) and cmd == "trace":
        case.expect["valid"] = True
    if what in ("dash",) and cmd == "trace":
        case.expect["valid"] = False
    if what == "empty" and not probe_in:
        case.expect["valid"] = None  # '-o ""': the docs do not say
    if what == "fifo" and cmd != "validate":  # docs/configs.md: inputs are regular files
        # (validate's 'fifo' variant is a second trace folder, not a FIFO)
        case.expect.update(valid=False, must=[])
    return case


def _int_arg(rng: random.Random, good: tuple[int, int]) -> str:
    return rng.choice([str(rng.randint(*good))] * 4 + [
        "0", "-1", "1e3", "2.0", "x", "", " 3", "3 ", "0x10", "１", str(2 ** 40), str(2 ** 40 + 1),
        str(10 ** 30), "9" * 5000, "-0", "+4", "1_000", "nan", "inf"])


def fam_argv(rng: random.Random) -> Case:
    case = Case("argv")
    _base_inputs(rng, case)
    t = gen_trace(rng, rng.randint(1, 4))
    case.add("t.yaml", emit(t))
    cmd = rng.choices(["run", "trace", "sweep", "plot", "maxbatch", "list", "validate",
                       "reproduce", "none", "bogus", "help"],
                      [14, 16, 10, 8, 14, 8, 8, 1.2, 2, 3, 3])[0]
    a: list[str] = []
    file_pool = ["c.yaml", "s.yaml", "net.yaml", "t.yaml", "nope.yaml", "d", "", "-", "--json"]
    case.dirs.append("d")
    outs: list[str] = []
    if cmd == "run":
        a = ["run"]
        if rng.random() < 0.95:
            a.append(rng.choice(file_pool))
        if rng.random() < 0.5:
            a.append("--json")
        if rng.random() < 0.3:
            o = rng.choice(["ct.json", "d", "nofolder/x.json", "c.yaml"])
            a += ["--chrome-trace", o] if rng.random() < 0.9 else ["--chrome-trace"]
            outs.append(o)
    elif cmd == "trace":
        a = ["trace"]
        if rng.random() < 0.9:
            a.append(rng.choice(ZOO[:4] + ["net.yaml", "t.yaml", "c.yaml", "nope", "VGG16",
                                           "vgg16.yaml", "", "resnet50"]))
        if rng.random() < 0.7:
            a += [rng.choice(["-b", "--batch-size", "--batch"]), _int_arg(rng, (1, 4))]
        if rng.random() < 0.3:
            a += ["--gpu", rng.choice(PRESETS + ["K40", "", "nosuch"])]
        if rng.random() < 0.3:
            a += ["--dtype", rng.choice(DTYPES + ["fp64", ""])]
        if rng.random() < 0.05:
            a += ["--model", rng.choice(["zoo:alexnet", "zoo:nosuch", "torchvision:nosuch",
                                         "nosuch", "", ":", "zoo:", "torchvision:alexnet"])]
        if rng.random() < 0.9:
            o = rng.choice(["-", "o.yaml", "o.json", "d", "nofolder/o.yaml"])
            a += ["-o", o]
            outs.append(o)
        if a[1:2] and a[1] in ("vgg16", "overfeat", "googlenet", "alexnet") and \
                not any(x in a for x in ("-b", "--batch-size", "--batch")):
            a += ["-b", "2"]
    elif cmd == "sweep":
        a = ["sweep", rng.choice(file_pool)]
        if rng.random() < 0.5:
            o = rng.choice(["r.csv", "r.parquet", "r.txt", "r", "d", "R.CSV"])
            a += ["-o", o]
            outs.append(o)
        if rng.random() < 0.2:
            w = rng.choice(["0", "-1", "1025", "x", "1", "2", "1024", "2.5"])
            a += ["--workers", w]
            if w in ("2", "1024"):
                case.mode = "subproc"
        if rng.random() < 0.05:
            a += ["--scheduler", rng.choice(["", "nonsense", "tcp://127.0.0.1:1",
                                             "tcp://256.1.1.1:8786", "inproc://x"])]
            case.mode = "subproc"
        if rng.random() < 0.5:
            a.append("--no-progress")
    elif cmd == "plot":
        a = ["plot", rng.choice(["memory", "timeline", "sweep", "validation", "bogus"]),
             rng.choice(file_pool + ["tr"])]
        if rng.random() < 0.9:
            o = rng.choice(["p.png", "p.pdf", "p.svg", "p.jpg", "p", "p.PNG", "d"])
            a += ["-o", o]
            outs.append(o)
        if rng.random() < 0.2:
            a += ["--measurements", rng.choice(["meas.json", "nope.json", "c.yaml"])]
    elif cmd == "maxbatch":
        a = ["maxbatch"]
        for _ in range(rng.choice([0, 1, 1, 2])):
            a += [rng.choice(["-n", "--network"]), rng.choice(["alexnet", "net.yaml", "t.yaml",
                                                                "nope", "vgg17", "c.yaml", ""])]
        for _ in range(rng.choice([0, 0, 1, 2])):
            a += ["-g", rng.choice(PRESETS + ["k80", ""])]
        for _ in range(rng.choice([0, 0, 1, 2])):
            a += ["-p", rng.choice(POLICIES + ["vdnn_fast", ""])]
        if rng.random() < 0.4:
            a += ["--memory", rng.choice(["12 GiB", "1 MiB", "0", "-1", "1e400", "12 GB/s", "",
                                          "1024 TiB", "1 B", "512", "1.5 GB", "nan", "1 PiB"])]
        if rng.random() < 0.3:
            a += ["--dtype", rng.choice(DTYPES + ["fp8"])]
        if rng.random() < 0.6:
            a += ["--limit", _int_arg(rng, (1, 512))]
        elif "-n" in a or "--network" in a:
            a += ["--limit", "256"]
        if rng.random() < 0.5:
            a.append("--json")
    elif cmd == "list":
        a = ["list"] + rng.choice([[], ["all"], ["networks"], ["gpus"], ["policies"], ["zoo"],
                                   ["networks", "gpus"], [""], ["--json"]])
    elif cmd == "validate":
        t2 = gen_trace(rng, 3)
        t2["name"], t2["batch_size"] = "m", 2
        case.add("tr/m.yaml", emit(t2))
        case.add("meas.json", json.dumps([{"model": "zoo:m", "batch_size": 2,
                                           "policy": rng.choice(["baseline", "vdnn_all"]),
                                           "fits": False}]))
        a = ["validate"] + rng.sample(["tr", "meas.json", "tr/m.yaml", "nope", "d"],
                                      rng.randint(0, 3))
        if rng.random() < 0.3:
            a += ["--gpu", rng.choice(PRESETS + ["nosuch"])]
        if rng.random() < 0.5:
            a.append("--json")
    elif cmd == "reproduce":
        a = ["reproduce"]
        if rng.random() < 0.3:
            a += ["--reading", rng.choice(["measured", "text", "bogus"])]
        if rng.random() < 0.3:
            a += ["--reference", rng.choice(["baseline_p", "class", "bogus"])]
        if rng.random() < 0.3:
            a += ["--studies", rng.choice(["d", "nope", "c.yaml"])]
        if rng.random() < 0.5:
            a.append("--json")
    elif cmd == "none":
        a = rng.choice([[], ["--json"], ["-x"], ["--"]])
    elif cmd == "bogus":
        a = [rng.choice(["RUN", "runn", "", "simulate", "version", "--version", "-V"])]
    else:
        a = rng.choice([["-h"], ["--help"], ["run", "-h"], ["trace", "--help"], ["list", "-h"],
                        ["sweep", "-h"], ["maxbatch", "-h"], ["plot", "-h"]])
    # argument-level noise
    if a and rng.random() < 0.15:
        noise = rng.choice(["--bogus", "-z", "--json=1", "--", "--jso", "---", "-", "\x00x",
                            "--json --json"])
        if noise == "\x00x":
            noise = "ok"  # a NUL cannot be in a real argv
        a.insert(rng.randint(1, len(a)), noise)
    case.argvs = [a]
    case.expect.update(check="auto", outputs=[o for o in outs if o not in ("-",)], valid=None)
    case.note = " ".join(a)[:200]
    return case


def results_csv(rng: random.Random) -> tuple[str, str]:
    """A results table (as `vdnnsim sweep -o r.csv` writes), maybe broken: (text, verdict)."""
    cols = ["network", "batch_size", "gpu", "policy", "fits", "capacity_bytes",
            "peak_memory_bytes", "slowdown", "error"]
    rows = []
    for i in range(rng.randint(1, 8)):
        rows.append({"network": rng.choice(["vgg16", "alexnet"]), "batch_size": rng.choice([1, 2, 4, 8]),
                     "gpu": "k40", "policy": rng.choice(POLICIES), "fits": rng.choice(["True", "False"]),
                     "capacity_bytes": 12 * 2 ** 30, "peak_memory_bytes": rng.randint(1, 2 ** 34),
                     "slowdown": round(rng.uniform(1, 3), 3), "error": ""})
    v = VALID
    what = rng.choice(["ok", "ok", "cell", "missing_col", "empty", "header", "junk", "all_err",
                       "utf16", "quote", "huge"])
    if what == "cell":
        r = rng.choice(rows)
        c = rng.choice(cols[:-1])
        r[c] = rng.choice(["nan", "inf", "-1", "abc", "", "1e400", "True", "yes", "-inf", "1e308",
                           "1" * 500])
        v = UNKNOWN
    elif what == "missing_col":
        cols.remove(rng.choice(cols[:-1]))
        v = INVALID
    elif what == "all_err":
        for r in rows:
            r["error"] = "boom"
        v = INVALID
    lines = [",".join(cols)] + [",".join(str(r.get(c, "")) for c in cols) for r in rows]
    text = "\n".join(lines) + "\n"
    if what == "empty":
        text, v = "", INVALID
    elif what == "header":
        text, v = ",".join(cols) + "\n", INVALID
    elif what == "junk":
        text, v = "\x00\x01\x02garbage\xff", INVALID
    elif what == "quote":
        text, v = text + '"unterminated\n', UNKNOWN
    elif what == "huge":
        text = text + "\n".join(lines[1:2] * 2000) + "\n"
    return text, v


def fam_plot(rng: random.Random) -> Case:
    case = Case("plot")
    kind = rng.choice(["memory", "timeline", "sweep", "sweep", "validation"])
    out = rng.choice(["p.png", "p.pdf", "p.svg", "p.png", "p.jpg", "p.PNG", "p", "d"])
    case.dirs.append("d")
    ok_out = out in ("p.png", "p.pdf", "p.svg")
    v = VALID
    if kind in ("memory", "timeline"):
        cfg, _, _ = gen_config(rng, case)
        if isinstance(cfg.get("policies"), list):
            cfg["policies"] = cfg["policies"][:3]
        inp = "c.yaml"
        case.add(inp, emit(cfg))
        argv = ["plot", kind, inp, "-o", out]
    elif kind == "sweep":
        if rng.random() < 0.5:
            spec, _ = gen_spec(rng, rng.randint(1, 4))
            spec["batch_size"] = 2
            case.add("net.yaml", emit(spec))
            case.add("s.yaml", emit({"base": {"network": "net.yaml"},
                                     "sweep": {"batch_size": [1, 2], "policy": ["eager",
                                                                                "vdnn_all_p"]}}))
            inp = "s.yaml"
        else:
            text, v = results_csv(rng)
            inp = rng.choice(["r.csv", "r.parquet"])
            if inp.endswith(".parquet"):
                v = INVALID if text else INVALID  # not a parquet file
            case.add(inp, text.encode("utf-8", "surrogateescape") if "\xff" not in text
                     else b"\x00\x01garbage\xff")
        argv = ["plot", "sweep", inp, "-o", out]
    else:
        vc = fam_validate(rng)
        case.files.update(vc.files)
        case.dirs += vc.dirs
        argv = ["plot", "validation", "tr", "-o", out]
        if rng.random() < 0.9:
            argv += ["--measurements", "meas.json"]
        v = UNKNOWN
    case.argvs = [argv]
    case.expect.update(check="plot", outputs=[out], must=[out],
                       valid={VALID: True, INVALID: False}.get(v) if ok_out else False)
    case.note = " ".join(argv)
    return case


def fam_maxbatch(rng: random.Random) -> Case:
    case = Case("maxbatch")
    argv = ["maxbatch"]
    nets = []
    for _ in range(rng.choice([1, 1, 2])):
        r = rng.random()
        if r < 0.4:
            nets.append("alexnet")
        elif r < 0.85:
            spec, _ = gen_spec(rng, rng.randint(1, 6))
            nm = f"n{len(nets)}.yaml"
            case.add(nm, emit(spec))
            nets.append(nm)
        else:
            case.add("t.yaml", emit(gen_trace(rng, 3)))
            nets.append("t.yaml")
    for n in nets:
        argv += ["-n", n]
    gpus = rng.sample(PRESETS, rng.choice([0, 1, 1, 2]))
    for g in gpus:
        argv += ["-g", g]
    pols = rng.sample(POLICIES, rng.choice([0, 1, 1, 2]))
    for p in pols:
        argv += ["-p", p]
    limit = rng.choice([1, 2, 8, 64, 1 << 10, 1 << 16, 2 ** 40])
    if "alexnet" in nets and limit > 64:
        mem = rng.choice(["64 MiB", "1 GiB", "200 MiB"])
    else:
        mem = rng.choice([None, None, "12 GiB", "1 MiB", "1024 TiB", "1 TiB", "1 B", "4 KiB"])
    if mem:
        argv += ["--memory", mem]
    argv += ["--limit", str(limit)]
    if rng.random() < 0.3:
        argv += ["--dtype", rng.choice(DTYPES)]
    js = rng.random() < 0.7
    if js:
        argv.append("--json")
    case.argvs = [argv]
    valid = None if "t.yaml" in nets else True  # maxbatch takes a zoo name or a spec
    case.expect.update(check="maxbatch_json" if js else "any", valid=valid,
                       maxbatch={"n": len(nets) * max(1, len(gpus)) * max(1, len(pols)),
                                 "limit": limit, "policies": pols or ["vdnn_dyn"],
                                 "gpus": gpus or ["k40"], "nets": nets,
                                 "memory": doc_bytes(mem, 1)[1] if mem else None,
                                 "memory_arg": mem})  # as given: simulate() parses it too
    case.note = " ".join(argv)
    return case


def fam_validate(rng: random.Random) -> Case:
    case = Case("validate")
    traces = {}
    for i in range(rng.randint(1, 3)):
        t = gen_trace(rng, rng.randint(1, 5), pytorch=rng.random() < 0.7)
        t["name"] = rng.choice(["m1", "m2", "net"])
        t["batch_size"] = rng.choice([2, 4])
        traces[(t["name"], t["batch_size"])] = t
    for (n, b), t in traces.items():
        case.add(f"tr/{n}_b{b}.yaml", emit(t))
    recs = []
    expected_rows = 0
    verdicts = [VALID]
    for i in range(rng.randint(0, 6)):
        name, b = rng.choice(list(traces)) if rng.random() < 0.7 else (
            rng.choice(["m1", "m2", "net", "other"]), rng.choice([2, 4, 8]))
        pol = rng.choice(["baseline", "vdnn_all", "vdnn_conv", "save_on_cpu", "bogus"])
        fits = rng.random() < 0.6
        r: dict[str, Any] = {"model": rng.choice(["torchvision:", "zoo:", ""]) + name,
                             "batch_size": b, "policy": pol, "fits": fits,
                             "memory_cap_bytes": rng.choice([None, None, 2 ** 30, 10 ** 6])}
        if fits:
            r.update(peak_allocated_bytes=rng.uniform(1, 1e10),
                     peak_reserved_bytes=rng.uniform(1, 1e10), iteration_ms=rng.uniform(0.1, 1e3))
        if rng.random() < 0.2:
            r["extra_field"] = {"any": [1, 2]}
        if rng.random() < 0.07:
            k = rng.choice(["model", "batch_size", "policy", "fits", "memory_cap_bytes",
                            "peak_allocated_bytes", "peak_reserved_bytes", "iteration_ms"])
            val = rng.choice([None, 0, -1, True, "x", 1e-320, 1e301, float("nan"), float("inf"),
                              2.5, [], {}, "", 10 ** 30, "12 GiB"])
            r[k] = val
            verdicts.append(UNKNOWN)
        elif rng.random() < 0.03:
            r.pop(rng.choice(["model", "batch_size", "policy", "fits"]))
            verdicts.append(INVALID)
        recs.append(r)
        with contextlib.suppress(TypeError):
            if r.get("policy") in ("baseline", "vdnn_all", "vdnn_conv") and \
                    (str(r.get("model", "")).split(":")[-1], r.get("batch_size")) in traces:
                expected_rows += 1
    doc: Any = recs
    what = rng.choice(["ok"] * 16 + ["not_list", "not_json", "nan", "empty", "dict_items"])
    if what == "not_list":
        doc = {"runs": recs}
        verdicts.append(INVALID)
    elif what == "dict_items":
        doc = recs + [5]
        verdicts.append(INVALID)
    text = json.dumps(doc)
    if what == "not_json":
        text = "[{model: x}]"
        verdicts.append(INVALID)
    elif what == "empty":
        text = ""
        verdicts.append(INVALID)
    case.add("meas.json", text)
    if expected_rows == 0:
        verdicts.append(INVALID)
    argv = ["validate", rng.choice(["tr", "tr", "tr/" + next(iter(
        f"{n}_b{b}.yaml" for (n, b) in traces))]), "meas.json"]
    single = argv[1] != "tr"
    if single:
        verdicts.append(UNKNOWN)
    if rng.random() < 0.3:
        g = rng.choice(PRESETS + ["nosuch"])
        argv += ["--gpu", g]
        if g == "nosuch":
            verdicts.append(INVALID)
    js = rng.random() < 0.7
    if js:
        argv.append("--json")
    case.argvs = [argv]
    case.expect.update(check="validate_json" if js else "any", valid=combine(*verdicts),
                       rows=None if single else expected_rows)
    case.note = what
    return case


def fam_reproduce(rng: random.Random) -> Case:
    case = Case("reproduce")
    argv = ["reproduce"]
    valid: bool | None = True
    r = rng.random()
    if r < 0.4:
        for name in ("baseline_memory", "conventional_policies", "deep_vgg"):
            case.add(f"paper/{name}.yaml", (REPO / "configs" / "paper" / f"{name}.yaml").read_bytes())
        what = rng.choice(["copy", "drop", "break", "shrink"])
        if what == "drop":
            del case.files[f"paper/{rng.choice(['baseline_memory', 'conventional_policies', 'deep_vgg'])}.yaml"]
            valid = False
        elif what == "break":
            case.files["paper/deep_vgg.yaml"] = b"sweep: {policy: []}\n"
            valid = False
        elif what == "shrink":
            case.files["paper/conventional_policies.yaml"] = emit(
                {"base": {"network": "alexnet", "batch_size": 128},
                 "sweep": {"gpu": ["k40"], "policy": ["baseline_p"]}}).encode()
            valid = False
        argv += ["--studies", "paper"]
        case.note = what
    elif r < 0.5:
        argv += ["--studies", rng.choice(["nope", "x.yaml"])]
        case.add("x.yaml", "a: 1\n")
        valid = False
    if rng.random() < 0.4:
        out = rng.choice(["out", "deep/er/out", "x.yaml", "ü out"])
        if out == "x.yaml":
            case.add("x.yaml", "a: 1\n")
            valid = False
        argv += ["-o", out]
        files = [f"{out}/reproduction.md", f"{out}/reproduction.csv"] + [
            f"{out}/{n}_{g}.png" for n in ("memory", "offload", "performance", "deep_vgg")
            for g in ("k40", "titanx_maxwell")]
        case.expect.update(outputs=files + [out], must=files if out != "x.yaml" else [])
    if rng.random() < 0.3:
        argv += ["--reading", "text"]
    if rng.random() < 0.3:
        argv += ["--reference", "class"]
    js = rng.random() < 0.6
    if js:
        argv.append("--json")
    case.argvs = [argv]
    case.expect.update(check="reproduce_json" if js else "any", valid=valid)
    return case


# --------------------------------------------------------------------------------------
# Python API cases: arguments as tagged JSON, decoded in the case's folder
# --------------------------------------------------------------------------------------

def hin(x: Any, seq: tuple) -> bool:
    """``x in seq`` without True == 1 == 1.0."""
    return any(type(x) is type(y) and x == y for y in seq)


def _tag_hostile(rng: random.Random) -> Any:
    return rng.choice([None, 0, -1, 1, True, False, 2.5, {"$float": "nan"}, {"$float": "inf"},
                       {"$big": "9" * 5000}, 10 ** 30, "", " ", "x", b"x".decode(), [], {},
                       {"$obj": 1}, {"$bytes": "eDE="}, {"$tuple": [1, 2]}, "12 GiB", "1e400",
                       "\x00", "k40 ", {"$pathobj": "nope"}])


def fam_api(rng: random.Random) -> Case:
    case = Case("api")
    case.mode = "api"
    spec, facts = gen_spec(rng, rng.randint(1, 8), odd=rng.random() < 0.2)
    spec["batch_size"] = rng.randint(1, 4)
    case.add("net.yaml", emit(spec))
    t = gen_trace(rng, rng.randint(1, 10), odd=rng.random() < 0.2)
    case.add("t.yaml", emit(t))
    tf = trace_facts(t)
    fn = rng.choices(["simulate", "run_trace", "build_trace", "load_trace", "gpu_preset", "sweep",
                      "roundtrip", "metamorphic"], [30, 16, 10, 6, 8, 6, 10, 14])[0]
    verdicts = [VALID]
    exp: dict[str, Any] = {}

    def pick_network():
        r = rng.random()
        if r < 0.2:
            n = rng.choice(["alexnet", "vgg16"])
            return n, VALID, {"kind": "zoo", "name": n, "batch": {"vgg16": 64, "alexnet": 128}[n],
                              "max": 2 if n == "vgg16" else 4}
        if r < 0.45:
            n = rng.choice(["net.yaml", {"$pathobj": "net.yaml"}, {"$spec": "net.yaml"},
                            {"$bytespath": "net.yaml"}])
            return n, VALID if n != {"$bytespath": "net.yaml"} else UNKNOWN, {"kind": "spec",
                                                                     "name": spec["name"],
                                                                     "batch": spec["batch_size"]}
        if r < 0.75:
            return rng.choice(["t.yaml", {"$pathobj": "t.yaml"}, {"$trace": "t.yaml"}]), VALID, {
                "kind": "trace", "name": t["name"], "batch": t["batch_size"],
                "dtype": t.get("dtype", "fp32")}
        h = _tag_hostile(rng)
        return h, (INVALID if isinstance(h, str) and h not in ZOO else UNKNOWN), None

    if fn in ("simulate", "metamorphic"):
        net, v, nf = pick_network()
        verdicts.append(v)
        if fn == "metamorphic":
            net, nf = "t.yaml", {"kind": "trace", "name": t["name"], "batch": t["batch_size"],
                                 "dtype": t.get("dtype", "fp32")}
            verdicts = [VALID]
        b: Any = None
        if rng.random() < 0.5 and nf and nf["kind"] != "trace":
            b = rng.randint(1, nf.get("max", nf["batch"]))
        elif rng.random() < 0.15:
            b = _tag_hostile(rng)
            verdicts.append(INVALID if hin(b, (0, -1, True, False, 2.5, "", " ", "x"))
                            or b in ([], {}) or (isinstance(b, dict) and b.get("$float"))
                            else (VALID if nf is None or nf["kind"] != "trace" or b == nf["batch"]
                                  else INVALID) if type(b) is int and 1 <= b <= 4 else UNKNOWN)
        gpu: Any = rng.choice(PRESETS)
        if rng.random() < 0.15:
            gpu = {"$gpu": [rng.choice(PRESETS), {"memory_bytes": "1 GiB"}]}
        elif rng.random() < 0.08:
            gpu = _tag_hostile(rng)
            verdicts.append(INVALID if gpu is not None and not (isinstance(gpu, str) and
                                                                gpu in PRESETS) else UNKNOWN)
        policy: Any = rng.choice(POLICIES)
        if fn == "metamorphic":
            policy = rng.choice([p for p in POLICIES if p != "vdnn_dyn"])
        elif rng.random() < 0.08:
            policy = _tag_hostile(rng)
            verdicts.append(INVALID if not (isinstance(policy, str) and policy in POLICIES)
                            else VALID)
        kw: dict[str, Any] = {}
        if rng.random() < 0.3:
            kw["dtype"] = rng.choice(DTYPES) if rng.random() < 0.8 else _tag_hostile(rng)
            if kw["dtype"] not in DTYPES and nf and nf["kind"] == "trace":
                verdicts.append(UNKNOWN)  # configs.md: ignored for a trace file
            elif kw["dtype"] not in DTYPES:
                verdicts.append(INVALID if isinstance(kw["dtype"], str) or hin(kw["dtype"], (
                    1, 0, -1, True, False, 2.5)) else UNKNOWN)
        if rng.random() < 0.25 and fn != "metamorphic":
            k = rng.choice(list(OVERRIDE_VALID))
            val = OVERRIDE_VALID[k](rng) if rng.random() < 0.5 else _tag_hostile(rng)
            kw["gpu_overrides"] = {k: val} if rng.random() < 0.9 else val
            verdicts.append(override_verdict(k, val) if isinstance(kw["gpu_overrides"], dict)
                            and not isinstance(val, dict) else UNKNOWN)
        if rng.random() < 0.25:
            kw["policy_options"] = rng.choice([None, {}, {"sync": False}, {"prefetch": False},
                                               {"reading": "text"}, {"sync": 1}, {"x": True},
                                               "sync", [], {"$obj": 1}])
            po = kw["policy_options"]
            verdicts.append(VALID if po in (None, {}, {"sync": False}, {"prefetch": False},
                                            {"reading": "text"}) else
                            INVALID if po in ({"sync": 1}, {"x": True}, "sync", []) else UNKNOWN)
        if rng.random() < 0.3 and fn != "metamorphic":
            mb = rng.choice([rng.randint(1, 2 ** 40), 2 ** 50, 1, 0, -1, 2 ** 50 + 1, True,
                             "12 GiB", 2.5, {"$float": "nan"}, 10 ** 30, 1e9])
            kw["memory_bytes"] = mb
            verdicts.append(doc_bytes(mb, 1)[0] if not isinstance(mb, (dict, str)) else UNKNOWN)
            if doc_bytes(mb, 1)[0] == VALID:
                exp["capacity"] = doc_bytes(mb, 1)[1]
        case.api = {"fn": fn, "args": [net, b, gpu, policy], "kwargs": kw}
        if nf is not None and nf["kind"] == "trace":
            exp["pytorch"] = (t.get("source") or {}).get("framework") == "pytorch"
        if nf is not None and verdicts and combine(*verdicts):
            exp.update(policy=policy, gpu=gpu if isinstance(gpu, str) else gpu.get("$gpu", [None])[0]
                       if isinstance(gpu, dict) else None, network=nf["name"],
                       batch_size=b if b is not None else nf["batch"],
                       dtype=nf.get("dtype") if nf["kind"] == "trace" else kw.get("dtype", "fp32"))
            if isinstance(gpu, dict) and "capacity" not in exp and "gpu_overrides" not in kw:
                exp["capacity"] = 2 ** 30
            elif isinstance(gpu, str) and gpu in PRESET_GIB and "capacity" not in exp and \
                    "gpu_overrides" not in kw:
                exp["capacity"] = PRESET_GIB[gpu] * 2 ** 30
            if nf["kind"] == "trace":
                exp["facts"] = tf
                exp["pytorch"] = (t.get("source") or {}).get("framework") == "pytorch"
    elif fn == "run_trace":
        tr = rng.choice([{"$trace": "t.yaml"}] * 6 + [_tag_hostile(rng), "t.yaml"])
        if tr != {"$trace": "t.yaml"}:
            verdicts.append(INVALID if tr == "t.yaml" else UNKNOWN)
        gpu = {"$gpu": [rng.choice(PRESETS), None]} if rng.random() < 0.9 else rng.choice(
            ["k40", None, 1])
        if not isinstance(gpu, dict):
            verdicts.append(UNKNOWN)
        policy = rng.choice(POLICIES) if rng.random() < 0.92 else _tag_hostile(rng)
        if policy not in POLICIES:
            verdicts.append(INVALID)
        opts = rng.choice([None, {}, {"sync": False}, {"sync": False, "prefetch": False},
                           {"reading": "text"}, {"bad": 1}, 5])
        if opts in ({"bad": 1}, 5):
            verdicts.append(INVALID)
        mb = rng.choice([None, None, rng.randint(1, 2 ** 34), 2 ** 50, 0, -5, 2 ** 50 + 1, True,
                         {"$float": "inf"}])
        if mb is not None:
            verdicts.append(doc_bytes(mb, 1)[0] if not isinstance(mb, dict) else INVALID)
        # run_trace computes its own oracle (vdnnsim dropped the oracle_ns argument: a
        # caller's number was trusted unchecked); `record` is keyword-only
        oracle = None
        case.api = {"fn": fn, "args": [tr, gpu, policy, opts, mb],
                    "kwargs": {"record": rng.random() < 0.5}}
        if combine(*verdicts):
            exp.update(policy=policy, network=t["name"], batch_size=t["batch_size"],
                       dtype=t.get("dtype", "fp32"), gpu=gpu["$gpu"][0] if isinstance(gpu, dict)
                       else None, facts=tf if oracle is None else None,
                       pytorch=(t.get("source") or {}).get("framework") == "pytorch",
                       oracle_given=oracle is not None)
            if mb is not None:
                exp["capacity"] = mb
            elif isinstance(gpu, dict) and gpu["$gpu"][0] in PRESET_GIB:
                exp["capacity"] = PRESET_GIB[gpu["$gpu"][0]] * 2 ** 30
    elif fn == "build_trace":
        net, v, nf = pick_network()
        verdicts.append(v)
        b = rng.choice([None, None, 1, 2, 3, 0, -1, True, 2.5, 10 ** 20])
        verdicts.append(doc_batch(b, 4))
        if nf and nf["kind"] == "trace" and b is not None and b != nf["batch"]:
            verdicts.append(INVALID)
        if nf and nf["kind"] != "trace" and b is None and nf.get("batch") is None:
            verdicts.append(INVALID)
        gpu = {"$gpu": [rng.choice(PRESETS), None]} if rng.random() < 0.9 else rng.choice(
            ["k40", None])
        if not isinstance(gpu, dict):
            verdicts.append(UNKNOWN)
        dtype = rng.choice(DTYPES + ["fp64", 1])
        if dtype not in DTYPES:
            verdicts.append(INVALID if nf is None or nf["kind"] != "trace" else UNKNOWN)
        case.api = {"fn": fn, "args": [net, b, gpu, dtype], "kwargs": {}}
        if nf and combine(*verdicts):
            exp.update(batch_size=b if b is not None else nf["batch"], network=nf["name"])
    elif fn == "load_trace":
        p = rng.choice(["t.yaml", {"$pathobj": "t.yaml"}, {"$bytespath": "t.yaml"}, "net.yaml",
                        "nope.yaml", ".", "", None, 5, {"$obj": 1}, "t.yaml/x"])
        verdicts.append(VALID if p in ("t.yaml", {"$pathobj": "t.yaml"})
                        else UNKNOWN if p == {"$bytespath": "t.yaml"} else INVALID if p in ("net.yaml", "nope.yaml", ".", "", "t.yaml/x")
                        else UNKNOWN)
        case.api = {"fn": fn, "args": [p], "kwargs": {}}
        exp.update(batch_size=t["batch_size"], network=t["name"])
    elif fn == "gpu_preset":
        name = rng.choice(PRESETS + ["K40", "", None, 5, "nosuch"])
        if name not in PRESETS:
            verdicts.append(INVALID if isinstance(name, str) else UNKNOWN)
        ov: Any = None
        if rng.random() < 0.7:
            k = rng.choice(list(OVERRIDE_VALID) + ["bogus"])
            val = OVERRIDE_VALID[k](rng) if k in OVERRIDE_VALID and rng.random() < 0.5 \
                else hostile(rng)
            if isinstance(val, Raw) or (isinstance(val, float) and not math.isfinite(val)):
                val = {"$float": "nan"} if isinstance(val, float) and math.isnan(val) else (
                    {"$float": "inf" if val > 0 else "-inf"} if isinstance(val, float) else None)
            ov = {k: val}
            verdicts.append(override_verdict(k, val) if k in OVERRIDE_VALID and
                            not isinstance(val, dict) else (INVALID if k == "bogus" else UNKNOWN))
            if k == "memory_bytes" and override_verdict(k, val) == VALID:
                exp["capacity"] = doc_bytes(val, 1)[1]
        case.api = {"fn": fn, "args": [name, ov], "kwargs": {}}
    elif fn == "sweep":
        case.add("s.yaml", emit({"base": {"network": "net.yaml"},
                                 "sweep": {"policy": rng.sample(POLICIES, 2)}}))
        st = rng.choice(["s.yaml", {"$pathobj": "s.yaml"}, {"$studydict": "s.yaml"},
                         "nope.yaml", 5, None, [], "net.yaml"])
        verdicts.append(VALID if st in ("s.yaml", {"$pathobj": "s.yaml"}, {"$studydict": "s.yaml"})
                        else INVALID if st in ("nope.yaml", 5, None, []) else UNKNOWN)
        w = rng.choice([None, None, 1, 0, -1, True, 2.5, "2", 1025])
        if w is not None:
            verdicts.append(VALID if w == 1 and w is not True else INVALID)
        sch = rng.choice([None] * 8 + [5, {}, [], {"$obj": 1}])
        if sch is not None:
            verdicts.append(INVALID)
        case.api = {"fn": fn, "args": [st], "kwargs": {"workers": w, "scheduler": sch}}
        exp["rows"] = 2
    else:  # roundtrip: build_trace -> save_trace -> load_trace -> identical runs
        net = rng.choice(["net.yaml", "alexnet", "t.yaml", "heavy.yaml"])
        exp["pytorch"] = net == "t.yaml" and (t.get("source") or {}).get("framework") == "pytorch"
        over = None
        if net == "heavy.yaml" or rng.random() < 0.2:
            over = {"peak_flops_scale": rng.choice([1e-6, 1e-6, 1e-6, 1e-3, 1, 1e6]),
                    "mem_bw_bytes_per_s": rng.choice([1e6, 1e9, 1e15])}
        if net == "heavy.yaml":
            # docs/configs.md: a synthesized layer slower than 1e18 ns is refused; the
            # fuzzer does not model the cost model's time, so either outcome is allowed
            verdicts.append(UNKNOWN)
            C, H, K, B, O = rng.choice([(16, 1024, 512, 64, 16), (64, 512, 256, 64, 64),
                                        (8, 1024, 1000, 16, 8), (512, 64, 33, 256, 512),
                                        (3, 224, 11, 128, 64)])
            case.add("heavy.yaml", emit({"name": "heavy", "input": [C, H, H], "batch_size": B,
                                         "layers": [{"name": "c", "type": "conv", "out": O,
                                                     "kernel": K}]}))
        case.api = {"fn": fn, "args": [net, rng.choice(PRESETS), rng.choice(POLICIES),
                                       rng.choice(DTYPES), over], "kwargs": {}}
    valid = combine(*[v if v != "oracle_ns" else UNKNOWN for v in verdicts])
    case.expect.update(valid=valid, rec=exp, oracle_ns_hostile="oracle_ns" in verdicts)
    case.note = f"{fn}"
    return case


# --------------------------------------------------------------------------------------
# Running a case
# --------------------------------------------------------------------------------------

class RoundTripError(Exception):
    """load_trace rejected what save_trace had just written."""


class Hang(BaseException):
    """Raised by SIGALRM: the case ran past CASE_TIMEOUT."""


def _on_alarm(signum, frame):  # noqa: ARG001
    raise Hang()


def materialize(c: dict, root: str) -> None:
    rootb = os.fsencode(root)
    for d in c["dirs"]:
        os.makedirs(os.path.join(rootb, os.fsencode(d)), exist_ok=True)
    for name, b64 in c["files"].items():
        p = os.path.join(rootb, os.fsencode(name))
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(base64.b64decode(b64))
    for name, target in c["symlinks"].items():
        p = os.path.join(rootb, os.fsencode(name))
        os.makedirs(os.path.dirname(p), exist_ok=True)
        os.symlink(os.fsencode(target), p)
    for name in c["fifos"]:
        os.mkfifo(os.path.join(rootb, os.fsencode(name)))


def snapshot(root: str) -> dict[str, tuple]:
    out = {}
    rootb = os.fsencode(root)
    for dirpath, dirnames, filenames in os.walk(rootb):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            rel = os.fsdecode(os.path.relpath(p, rootb))
            out[rel] = (st.st_size, st.st_mtime_ns, n in dirnames)
    return out


def _fifo_writers(c: dict, root: str) -> list:
    import threading
    threads = []
    for name, b64 in c["fifos"].items():
        p = os.path.join(os.fsencode(root), os.fsencode(name))
        data = base64.b64decode(b64)

        def write(p=p, data=data):
            deadline = time.time() + CASE_TIMEOUT
            while time.time() < deadline:
                try:
                    fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
                except OSError:
                    time.sleep(0.01)
                    continue
                try:
                    os.set_blocking(fd, True)
                    os.write(fd, data)
                finally:
                    os.close(fd)
                return
        th = threading.Thread(target=write, daemon=True)
        th.start()
        threads.append(th)
    return threads


def _fix_argv(argv: list[str], root: str) -> list[str]:
    return [a.replace("@ABS@", root) for a in argv]


def run_cli_inproc(argv: list[str]) -> dict:
    import vdnnsim.cli as cli
    out_b, err_b = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_b, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_b, encoding="utf-8", errors="strict", write_through=True)
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    t0 = time.perf_counter()
    rc: Any = None
    exc_info = None
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT)
    try:
        try:
            rc = cli.main(argv)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Hang:
        rc = "hang"
    except SystemExit as e:
        code = e.code
        if code is None:
            rc = 0
        elif isinstance(code, int):
            rc = code
        else:
            err.write(str(code) + "\n")
            rc = 1
    except BaseException as e:  # what Python would print, and its exit code 1
        traceback.print_exc(file=err)
        rc = 1
        exc_info = _exc_signature(e)
    finally:
        sys.stdout, sys.stderr = old
        with contextlib.suppress(Exception):
            out.flush()
            err.flush()
    secs = time.perf_counter() - t0
    if rc is None:
        rc = 0
    return {"rc": rc, "stdout": out_b.getvalue().decode("utf-8", "replace"),
            "stderr": err_b.getvalue().decode("utf-8", "replace"), "secs": secs,
            "exc": exc_info}


def run_cli_subproc(argv: list[str], root: str, c: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), MPLBACKEND="Agg")
    cmd = [sys.executable, "-m", "vdnnsim"] + [os.fsencode(a) for a in argv]
    _fifo_writers(c, root)
    t0 = time.perf_counter()
    try:
        p = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    except (OSError, ValueError) as e:
        return {"rc": "spawn", "stdout": "", "stderr": str(e), "secs": 0.0, "exc": None}
    try:
        out, err = p.communicate(timeout=CASE_TIMEOUT)
        rc: Any = p.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rc = "hang"
    secs = time.perf_counter() - t0
    return {"rc": rc, "stdout": out.decode("utf-8", "replace"),
            "stderr": err.decode("utf-8", "replace"), "secs": secs, "exc": None}


def _exc_signature(e: BaseException) -> dict:
    tb = traceback.extract_tb(e.__traceback__)
    frames = [f for f in tb if "/vdnnsim/" in f.filename]
    inner = frames[-1] if frames else (tb[-1] if tb else None)
    where = f"{os.path.basename(inner.filename)}:{inner.name}" if inner else "?"
    deepest = tb[-1] if tb else None
    return {"type": f"{type(e).__module__}.{type(e).__name__}", "msg": str(e)[:300],
            "where": where,
            "deepest": f"{deepest.filename.split('site-packages/')[-1]}:{deepest.lineno}"
            if deepest else "?",
            "tb": "".join(traceback.format_exception(type(e), e, e.__traceback__))[-4000:]}


# --------------------------------------------------------------------------------------
# API calls
# --------------------------------------------------------------------------------------

def decode_arg(x: Any) -> Any:
    import vdnnsim
    if isinstance(x, list):
        return [decode_arg(v) for v in x]
    if not isinstance(x, dict):
        return x
    if len(x) == 1:
        (k, v), = x.items()
        if k == "$float":
            return float(v)
        if k == "$big":
            return int(v[:4000])
        if k == "$obj":
            return object()
        if k == "$bytes":
            return base64.b64decode(v)
        if k == "$tuple":
            return tuple(v)
        if k == "$pathobj":
            return Path(v)
        if k == "$bytespath":
            return os.fsencode(v)
        if k == "$spec":
            import yaml
            from vdnnsim.network import network_from_dict
            return network_from_dict(yaml.safe_load(Path(v).read_text()), v)
        if k == "$trace":
            return vdnnsim.load_trace(v)
        if k == "$gpu":
            return vdnnsim.gpu_preset(v[0], v[1])
        if k == "$studydict":
            import yaml
            return yaml.safe_load(Path(v).read_text())
    return {k: decode_arg(v) for k, v in x.items()}


def run_api(c: dict) -> tuple[dict, Any]:
    import vdnnsim
    api = c["api"]
    fn = api["fn"]
    t0 = time.perf_counter()
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT)
    value = None
    res: dict[str, Any] = {"rc": "api", "stdout": "", "stderr": "", "exc": None}
    try:
        try:
            args = [decode_arg(a) for a in api["args"]]
            kwargs = {k: decode_arg(v) for k, v in api["kwargs"].items()}
            if fn == "simulate":
                value = vdnnsim.simulate(*args, **kwargs)
            elif fn == "run_trace":
                value = vdnnsim.run_trace(*args, **kwargs)
            elif fn == "build_trace":
                value = vdnnsim.build_trace(*args, **kwargs)
            elif fn == "load_trace":
                value = vdnnsim.load_trace(*args, **kwargs)
            elif fn == "gpu_preset":
                value = vdnnsim.gpu_preset(*args, **kwargs)
            elif fn == "sweep":
                value = vdnnsim.sweep(*args, **kwargs)
            elif fn == "roundtrip":
                net, gpu, policy, dtype, over = args
                g = vdnnsim.gpu_preset(gpu, over)
                tr = vdnnsim.build_trace(net, None if net != "alexnet" else 2, g, dtype)
                vdnnsim.save_trace(tr, "rt.yaml")
                try:
                    tr2 = vdnnsim.load_trace("rt.yaml")
                except vdnnsim.VdnnError as err:
                    raise RoundTripError(str(err)) from None
                r1 = vdnnsim.run_trace(tr, g, policy)
                r2 = vdnnsim.run_trace(tr2, g, policy)
                value = (r1, r2)
            elif fn == "metamorphic":
                net, b, gpu, policy = args
                r_small = vdnnsim.simulate(net, b, gpu, policy, **kwargs,
                                           memory_bytes=rng_cap(c))
                r_big = vdnnsim.simulate(net, b, gpu, policy, **kwargs, memory_bytes=PIB)
                r_exact = vdnnsim.simulate(net, b, gpu, policy, **kwargs,
                                           memory_bytes=max(1, r_big.peak_footprint_bytes))
                value = (r_small, r_big, r_exact)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Hang:
        res["rc"] = "hang"
    except BaseException as e:
        res["exc"] = _exc_signature(e)
        res["exc"]["vdnn"] = isinstance(e, vdnnsim.VdnnError)
    res["secs"] = time.perf_counter() - t0
    return res, value


def rng_cap(c: dict) -> int:
    import zlib
    return 1 + (zlib.crc32(json.dumps(c["api"], sort_keys=True).encode()) % (1 << 28))


# --------------------------------------------------------------------------------------
# Checks (docs/metrics.md, docs/configs.md)
# --------------------------------------------------------------------------------------

class NaNToken(ValueError):
    pass


def strict_json(text: str) -> Any:
    def bad(tok):
        raise NaNToken(f"JSON holds {tok}")
    return json.loads(text, parse_constant=bad)


BYTE_KEYS = ["capacity_bytes", "peak_memory_bytes", "peak_footprint_bytes", "avg_memory_bytes",
             "weight_bytes", "offloaded_bytes", "prefetched_bytes", "peak_host_bytes"]
TIME_KEYS = ["iteration_time_s", "oracle_time_s", "stall_time_s"]


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_record(rec: dict, exp: dict | None, probs: list[tuple[str, str]], where: str = "",
                 opts: dict | None = None) -> None:
    """One summary record against the documented invariants and what was asked."""
    exp = exp or {}

    def bad(tag: str, msg: str) -> None:
        probs.append((tag, f"{where}{msg}"))

    missing = [k for k in SUMMARY_KEYS if k not in rec]
    if missing:
        bad("record:keys", f"missing keys {missing}")
        return
    for k in BYTE_KEYS:
        v = rec[k]
        if not (_num(v) and math.isfinite(v)) or v < 0:
            bad("record:bytes", f"{k}={v!r} is not a non-negative finite number")
            return
        if isinstance(v, float) and v != int(v):
            bad("record:bytes_int", f"{k}={v!r} is not whole")
    for k in TIME_KEYS:
        v = rec[k]
        if not (_num(v) and math.isfinite(v)) or v < 0:
            bad("record:time", f"{k}={v!r} is not a non-negative finite number")
            return
    peak, foot, avg, w = (rec["peak_memory_bytes"], rec["peak_footprint_bytes"],
                          rec["avg_memory_bytes"], rec["weight_bytes"])
    cap, it, orc = rec["capacity_bytes"], rec["iteration_time_s"], rec["oracle_time_s"]
    if peak < w:
        bad("record:peak<weights", f"peak {peak} < weight_bytes {w}")
    if avg > peak:
        bad("record:avg>peak", f"avg {avg} > peak {peak}")
    if peak > foot:
        bad("record:peak>footprint", f"peak {peak} > footprint {foot}")
    if rec["fits"] is True and foot > cap:
        bad("record:fits_over_capacity", f"fits but footprint {foot} > capacity {cap}")
    if rec["fits"] is False and foot <= cap:
        bad("doc:nofit_footprint", f"does not fit yet footprint {foot} <= capacity {cap} "
            "(metrics.md: 'Above capacity_bytes when the run did not fit')")
    if not isinstance(rec["fits"], bool):
        bad("record:fits", f"fits={rec['fits']!r}")
    if rec["offloaded_bytes"] < rec["prefetched_bytes"]:
        bad("record:prefetched>offloaded", f"prefetched {rec['prefetched_bytes']} > offloaded "
            f"{rec['offloaded_bytes']}")
    if rec["peak_host_bytes"] != rec["offloaded_bytes"]:
        bad("doc:peak_host", f"peak_host_bytes {rec['peak_host_bytes']} != offloaded "
            f"{rec['offloaded_bytes']} (metrics.md)")
    if rec["peak_managed_bytes"] != peak - w:
        bad("record:managed", f"peak_managed {rec['peak_managed_bytes']} != peak - weights")
    if not _num(rec["avg_managed_bytes"]) or abs(rec["avg_managed_bytes"] - (avg - w)) > 1:
        bad("record:avg_managed", f"avg_managed {rec['avg_managed_bytes']} != avg - weights")
    if rec["stall_time_s"] > it + 1e-9:
        bad("record:stall>iter", f"stall {rec['stall_time_s']} > iteration {it}")
    sd = rec["slowdown"]
    if orc > 0:
        if not (_num(sd) and math.isfinite(sd)):
            bad("record:slowdown", f"slowdown {sd!r} with oracle {orc}")
        elif abs(sd - it / orc) > 1e-6 * max(1.0, sd):
            bad("record:slowdown", f"slowdown {sd} != iteration/oracle {it / orc}")
    elif sd is not None and not (isinstance(sd, float) and math.isnan(sd)):
        bad("record:slowdown", f"oracle 0 but slowdown {sd!r} (metrics.md: null)")
    if it + 1e-9 < orc and not exp.get("oracle_given"):
        bad("record:iter<oracle", f"iteration {it} < oracle {orc}")
    if it > 0 and not exp.get("pytorch"):
        if avg + 1 < w:
            bad("record:avg<weights", f"avg {avg} < weights {w} (weights are resident all "
                "iteration)")
    if rec["fits"] is True:
        for k in ("oom_layer", "oom_tensor", "oom_time_s", "oom_fragmented"):
            if rec[k] is not None and not (isinstance(rec[k], float) and math.isnan(rec[k])):
                bad("record:oom_when_fits", f"fits but {k}={rec[k]!r}")
    elif rec["fits"] is False:
        if not isinstance(rec["oom_tensor"], str) or not rec["oom_tensor"]:
            bad("record:oom_missing", f"does not fit but oom_tensor={rec['oom_tensor']!r}")
        t = rec["oom_time_s"]
        if not (_num(t) and math.isfinite(t)) or t < 0 or t > it + 1e-9:
            bad("record:oom_time", f"oom_time_s {t!r} outside [0, {it}]")
        if not isinstance(rec["oom_fragmented"], bool):
            bad("record:oom_fragmented", f"oom_fragmented={rec['oom_fragmented']!r}")
    pol = rec["policy"]
    if pol in ("baseline_p", "baseline_m", "eager") and rec["offloaded_bytes"]:
        bad("record:baseline_offload", f"{pol} offloaded {rec['offloaded_bytes']}")
    if pol in ("baseline_p", "baseline_m") and it > 0 and abs(avg - peak) > 1:
        bad("doc:baseline_avg", f"{pol}: avg {avg} != peak {peak} (policies.md: memory is "
            "constant)")
    if pol in ("baseline_p", "eager") and abs(it - orc) > 1e-9 * max(1, it) + 1e-9 and \
            not exp.get("oracle_given"):
        bad("doc:baseline_p_time", f"{pol}: iteration {it} != oracle {orc} (no copies, no "
            "stalls, fastest algorithms)")
    if pol != "vdnn_dyn" and rec["notes"]:
        bad("doc:notes", f"{pol} wrote notes {rec['notes']!r} (only vdnn_dyn does)")
    if pol == "vdnn_dyn" and not str(rec["notes"]).startswith("step "):
        bad("doc:dyn_notes", f"vdnn_dyn notes {rec['notes']!r}")
    sync = (opts or {}).get("sync", True)
    if sync is True and rec["prefetched_bytes"] != rec["offloaded_bytes"]:
        bad("doc:sync_prefetched", f"sync: prefetched {rec['prefetched_bytes']} != offloaded "
            f"{rec['offloaded_bytes']}")
    for k in ("batch_size", "gpu", "dtype", "network"):
        if exp.get(k) is not None and rec[k] != exp[k]:
            bad(f"asked:{k}", f"{k}={rec[k]!r}, asked {exp[k]!r}")
    if exp.get("capacity") is not None and cap != exp["capacity"]:
        bad("asked:capacity", f"capacity_bytes={cap}, expected {exp['capacity']}")
    if exp.get("weight_bytes") is not None and w != exp["weight_bytes"]:
        bad("oracle:weight_bytes", f"weight_bytes={w}, docs' parameter formulas give "
            f"{exp['weight_bytes']}")
    facts = exp.get("facts")
    if facts:
        if w != facts["weight_bytes"]:
            bad("oracle:weight_bytes", f"weight_bytes={w}, the trace gives {facts['weight_bytes']}")
        if abs(orc - facts["oracle_ns"] / 1e9) > 1e-9 * max(1, orc) + 1e-12:
            bad("oracle:oracle_time", f"oracle_time_s={orc}, the trace's fastest times sum to "
                f"{facts['oracle_ns'] / 1e9}")
        if pol == "baseline_p" and facts.get("baseline_peak") is not None and \
                peak != facts["baseline_peak"]:
            bad("oracle:baseline_peak", f"baseline_p peak {peak}, docs/policies.md's "
                f"network-wide allocation gives {facts['baseline_peak']}")


def check_result_object(r: Any, exp: dict, probs: list, opts: dict | None = None) -> None:
    """A RunResult from the API: its summary, and the frames behind it."""
    import vdnnsim
    if not isinstance(r, vdnnsim.RunResult):
        probs.append(("api:type", f"returned {type(r).__name__}"))
        return
    try:
        rec = r.summary()
        _ = (r.memory, r.timeline, r.tensors, r.peak_breakdown)
    except Exception as e:
        probs.append(("api:result_broken", f"the RunResult's summary() or frames raise "
                      f"{type(e).__name__}: {str(e)[:150]}"))
        return
    clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()}
    check_record(clean, {k: exp.get(k) for k in ("batch_size", "gpu", "dtype", "network",
                                                  "capacity", "facts", "pytorch",
                                                  "oracle_given")}, probs, "", opts)
    if exp.get("policy") is not None and rec["policy"] != exp["policy"]:
        probs.append(("asked:policy", f"policy {rec['policy']!r}, asked {exp['policy']!r}"))
    if exp.get("pytorch"):
        return
    mem = r.memory
    if len(mem):
        if int(mem.allocated_bytes.max()) > r.peak_memory_bytes:
            probs.append(("api:memory_peak", f"max of r.memory {int(mem.allocated_bytes.max())} "
                          f"!= peak_memory_bytes {r.peak_memory_bytes}"))
        if (mem.allocated_bytes < 0).any():
            probs.append(("api:memory_negative", "r.memory holds a negative level"))
        t = list(mem.time_ns) + [r.iteration_time_ns]
        if r.iteration_time_ns > 0:
            lv = list(mem.allocated_bytes)
            area = sum(lv[i] * max(0, min(t[i + 1], r.iteration_time_ns) - t[i])
                       for i in range(len(lv)))
            avg = area / r.iteration_time_ns
            if abs(avg - r.avg_memory_bytes) > max(2.0, 1e-9 * avg):
                probs.append(("api:avg_memory", f"time-weighted mean of r.memory {avg:.1f} != "
                              f"avg_memory_bytes {r.avg_memory_bytes}"))
    bd = r.peak_breakdown
    if sum(bd.values()) != r.peak_memory_bytes:
        probs.append(("api:breakdown", f"sum of peak_breakdown {sum(bd.values())} != peak "
                      f"{r.peak_memory_bytes}"))
    if any(v <= 0 for v in bd.values()):
        probs.append(("api:breakdown_zero", f"peak_breakdown holds {bd}"))
    tl = r.timeline
    if len(tl):
        if (tl.dur_ns < 0).any():
            probs.append(("api:timeline_negative", "an op ends before it starts"))
        comp = tl[tl.stream == "compute"]
        if len(comp) and int(comp.end_ns.max()) > r.iteration_time_ns:
            probs.append(("api:timeline_past_end", "a compute op ends after the iteration"))
        st = int(tl[tl.kind == "stall"].dur_ns.sum())
        if st != r.stall_time_ns:
            probs.append(("api:stall_sum", f"stall ops sum to {st}, stall_time_ns "
                          f"{r.stall_time_ns}"))
        off = int(tl[tl.stream == "d2h"].size_bytes.sum())
        pre = int(tl[tl.stream == "h2d"].size_bytes.sum())
        if off != r.offloaded_bytes or pre != r.prefetched_bytes:
            probs.append(("api:copy_sums", f"d2h ops {off} / h2d ops {pre} vs offloaded "
                          f"{r.offloaded_bytes} / prefetched {r.prefetched_bytes}"))
        ordered = comp.sort_values("start_ns")
        if len(ordered) > 1 and (ordered.start_ns.values[1:] < ordered.end_ns.values[:-1]).any():
            probs.append(("api:compute_overlap", "two compute ops overlap on one stream"))
    if len(r.algos) == 0:
        probs.append(("api:algos", "no algorithms reported"))
    try:
        json.dumps(r.chrome_trace(), allow_nan=False)
    except (ValueError, TypeError) as e:
        probs.append(("api:chrome_trace", f"chrome_trace() is not JSON: {e}"))
    _ = r.tensors


def check_policies_together(recs: list[dict], probs: list) -> None:
    """docs/policies.md, vdnn_dyn: step 1 returns vDNN_all(m)'s plan when that does not fit,
    and every later step (or step 4's fallback to it) yields a plan that fits; step 2 takes
    the first of no offload (eager), vDNN_conv and vDNN_all with the fastest algorithms
    that fits."""
    by = {r.get("policy"): r for r in recs if isinstance(r, dict)}
    dyn, allm = by.get("vdnn_dyn"), by.get("vdnn_all_m")
    if not dyn or not allm:
        return
    if dyn.get("fits") != allm.get("fits"):
        probs.append(("doc:dyn_vs_all_m", f"vdnn_dyn fits={dyn.get('fits')} but vdnn_all_m "
                      f"fits={allm.get('fits')} ({dyn.get('notes')!r})"))
        return
    if not allm.get("fits"):
        return
    for cand, note in (("eager", "offload none"), ("vdnn_conv_p", "offload conv"),
                       ("vdnn_all_p", "offload all")):
        c = by.get(cand)
        if c is None:
            return
        if c.get("fits"):
            want = f"step 2: fastest algorithms, {note}"
            if dyn.get("notes") != want:
                probs.append(("doc:dyn_step2", f"{cand} fits, so vdnn_dyn should take it "
                              f"({want!r}), notes say {dyn.get('notes')!r}"))
            elif (c.get("iteration_time_s"), c.get("peak_memory_bytes")) != (
                    dyn.get("iteration_time_s"), dyn.get("peak_memory_bytes")):
                probs.append(("doc:dyn_step2_numbers", f"vdnn_dyn chose {note} but its "
                              f"numbers differ from {cand}'s"))
            return


def check_chrome(path: str, probs: list) -> None:
    try:
        with open(path, "rb") as f:
            data = strict_json(f.read().decode("utf-8"))
    except Exception as e:
        probs.append(("out:chrome_parse", f"{path}: {type(e).__name__}: {str(e)[:100]}"))
        return
    ev = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(ev, list):
        probs.append(("out:chrome_shape", "no traceEvents list"))
        return
    for e in ev:
        if not isinstance(e, dict) or "ph" not in e:
            probs.append(("out:chrome_event", f"event {str(e)[:80]}"))
            return
        for k in ("ts", "dur"):
            if k in e and (not _num(e[k]) or not math.isfinite(e[k]) or e[k] < 0):
                probs.append(("out:chrome_time", f"event {k}={e[k]!r}"))
                return


def _frame_records(df) -> list[dict]:
    out = []
    for rec in df.to_dict(orient="records"):
        out.append({k: (None if isinstance(v, float) and math.isnan(v) else
                        (v.item() if hasattr(v, "item") else v)) for k, v in rec.items()})
    return out


def check_rows(rows: list[dict], ex: dict, probs: list, where: str) -> None:
    nrows = ex.get("rows")
    if nrows is not None and len(rows) != nrows:
        probs.append(("study:rows", f"{where}: {len(rows)} rows, the study has {nrows} runs"))
    for i, r in enumerate(rows):
        err = r.get("error")
        if ex.get("all_rowerror") and not err:
            probs.append(("study:row_no_error", f"{where}: row {i} has no error, yet no network"))
        if err:
            if not isinstance(err, str) or "\n" in err.strip():
                probs.append(("study:error_text", f"{where}: row {i} error {str(err)[:100]!r}"))
            if ex.get("valid") is True and not ex.get("rowerror_possible") and \
                    not ex.get("all_rowerror"):
                probs.append(("expect:row_error", f"{where}: row {i}: {str(err)[:200]}"))
            continue
        if any(k not in r for k in SUMMARY_KEYS):
            probs.append(("study:row_keys", f"{where}: row {i} lacks summary keys"))
            continue
        rec = dict(r)
        for k in BYTE_KEYS + ["batch_size", "peak_managed_bytes", "avg_managed_bytes"]:
            if isinstance(rec.get(k), float) and rec[k] == int(rec[k]):
                rec[k] = int(rec[k])
        if isinstance(rec.get("fits"), str):
            rec["fits"] = {"True": True, "False": False}.get(rec["fits"], rec["fits"])
        if isinstance(rec.get("oom_fragmented"), str):
            rec["oom_fragmented"] = {"True": True, "False": False}.get(rec["oom_fragmented"])
        if rec.get("notes") is None:
            rec["notes"] = ""
        opts = r.get("policy_options")
        if isinstance(opts, str):
            with contextlib.suppress(Exception):
                opts = json.loads(opts)
        net = ex.get("net") or (ex.get("rec") or {}).get("net") or {}
        check_record(rec, {"network": net.get("name") if net.get("kind") != "zoo" else None,
                           "pytorch": net.get("pytorch")},
                     probs, f"{where}: row {i}: ", opts if isinstance(opts, dict) else None)


def check_outputs(c: dict, res: dict, root: str, probs: list, before: dict, after: dict) -> None:
    ex = c["expect"]
    rc = res["rc"]
    new = {k for k in after if k not in before}
    changed = {k for k in after if k in before and after[k] != before[k] and not after[k][2]}
    allowed = set()
    for o in ex.get("outputs", []):
        o = o.replace("@ABS@/", "")
        allowed.add(os.path.normpath(o) if o else o)
        parts = Path(o).parts
        for i in range(1, len(parts)):
            allowed.add(os.path.join(*parts[:i]))
    for f in ex.get("forbid", []):
        if f in after:
            probs.append(("security:forbidden_file", f"{f} was created"))
    if rc == 2:
        if new:
            probs.append(("exit2:wrote", f"exit 2 but new files {sorted(new)[:5]}"))
        if changed:
            probs.append(("exit2:changed", f"exit 2 but changed {sorted(changed)[:5]}"))
    elif rc == 0:
        stray = [k for k in new if k not in allowed and not any(
            k.startswith(a + os.sep) for a in allowed if a and a.endswith("out"))]
        stray = [k for k in stray if os.path.normpath(k) not in allowed]
        if stray:
            probs.append(("exit0:stray_file", f"unexpected files {sorted(stray)[:5]}"))
        for m in ex.get("must", []):
            m = m.replace("@ABS@/", "")
            if not os.path.lexists(os.path.join(os.fsencode(root), os.fsencode(m))):
                probs.append(("exit0:not_written", f"{m!r} was not written"))


def check_stderr_exit2(res: dict, probs: list) -> None:
    err = res["stderr"]
    lines = err.rstrip("\n").split("\n") if err else []
    if len(lines) != 1:
        probs.append(("exit2:stderr_lines", f"{len(lines)} stderr lines: {err[:300]!r}"))
    if not lines or not re.match(r"^vdnnsim( [a-z]+)?: error: ", lines[0]):
        probs.append(("exit2:stderr_prefix", f"stderr {err[:200]!r}"))
    if len(err) > 20000:
        probs.append(("exit2:stderr_huge", f"{len(err)} characters of error"))


def tb_signature(err: str) -> str:
    """'ExcType at file:function' from a printed traceback: the innermost vdnnsim frame."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', err)
    own = [f for f in frames if "/vdnnsim/" in f[0] and "fuzz_independent" not in f[0]]
    f = own[-1] if own else (frames[-1] if frames else ("?", "?", "?"))
    last = [ln for ln in err.strip().splitlines() if re.match(r"^[A-Za-z_.]+(Error|Exception|"
                                                             r"Warning|Exit|Interrupt)?:", ln)]
    etype = last[-1].split(":")[0] if last else "?"
    return f"{etype} at {os.path.basename(f[0])}:{f[2]}"


def auto_check(argv: list[str]) -> str:
    if not argv:
        return "any"
    if "-h" in argv or "--help" in argv:
        return "help"
    cmd = argv[0]
    if cmd == "run" and "--json" in argv:
        return "run_or_study_json"
    if cmd == "trace":
        try:
            o = argv[argv.index("-o") + 1] if "-o" in argv else argv[argv.index("--output") + 1]
        except (ValueError, IndexError):
            return "any"
        return "trace_stdout" if o == "-" else "trace_written_auto"
    if cmd == "maxbatch" and "--json" in argv:
        return "maxbatch_json"
    if cmd == "validate" and "--json" in argv:
        return "validate_json"
    if cmd == "reproduce" and "--json" in argv:
        return "reproduce_json"
    if cmd == "list":
        return "list"
    return "any"


def check_cli(c: dict, res: dict, root: str, probs: list, step: int) -> None:
    ex = c["expect"]
    argv = c["argvs"][step]
    rc = res["rc"]
    out, err = res["stdout"], res["stderr"]
    if "Traceback (most recent call last)" in err:
        probs.append(("traceback", tb_signature(err)))
        if rc == 1:
            return
    if rc == "hang":
        probs.append(("hang", f"over {CASE_TIMEOUT:.0f} s"))
        return
    if rc == 3:
        probs.append(("exit3", err[:300]))
        return
    if rc not in (0, 2):
        probs.append((f"exit{rc}", err[-300:]))
        return
    if rc == 2:
        check_stderr_exit2(res, probs)
        if ex.get("valid") is True:
            probs.append(("expect:rejected_valid", err.strip()[:300]))
        return
    # rc == 0
    if ex.get("valid") is False:
        probs.append(("expect:accepted_invalid", (c.get("note") or "")[:200]))
    kind = ex.get("check", "any")
    if kind == "auto":
        kind = auto_check(argv)
    rec_exp = ex.get("rec") or {}
    try:
        if kind in ("run_json", "run_or_study_json", "study_json"):
            data = strict_json(out)
            if not isinstance(data, list):
                probs.append(("out:json_shape", "not a list"))
                return
            is_study = kind == "study_json" or (kind == "run_or_study_json" and data and
                                                 isinstance(data[0], dict) and "error" in data[0])
            if is_study:
                check_rows(data, ex, probs, "json")
                return
            pols = rec_exp.get("policies")
            if pols is not None and [r.get("policy") for r in data] != list(pols):
                probs.append(("asked:policies", f"records for {[r.get('policy') for r in data]}, "
                              f"asked {pols}"))
            opts = rec_exp.get("opts")
            for i, r in enumerate(data):
                e = {k: rec_exp.get(k) for k in ("batch_size", "gpu", "dtype", "network",
                                                 "capacity", "weight_bytes", "facts", "pytorch")}
            if not isinstance(opts, dict):
                opts = None
                check_record(r, e, probs, f"record {i}: ", opts)
            check_policies_together(data, probs)
            if ex.get("chrome"):
                check_chrome(os.path.join(root, ex["chrome"].replace("@ABS@/", "")), probs)
        elif kind == "run_table":
            lines = out.splitlines()
            sep = next((i for i, ln in enumerate(lines) if re.match(r"^-+( +-+)+$", ln)), None)
            if sep is None or sep < 2 or ": pool " not in lines[sep - 2] or \
                    "oracle iteration" not in lines[sep - 2]:
                probs.append(("out:table_head", out[:200]))
                return
            pols = rec_exp.get("policies") or []
            body = []
            for ln in lines[sep + 1:]:
                if ln.startswith("notes:"):
                    break
                body.append(ln)
            if pols and len(body) != len(pols):
                probs.append(("out:table_rows", f"{len(body)} rows for {len(pols)} policies"))
            if re.search(r"\bnan\b|\binf\b", out, re.I) and "nanx" not in out:
                probs.append(("out:table_nan", out[:300]))
        elif kind == "sweep_written" and ex.get("table"):
            import pandas as pd
            path = os.path.join(root, ex["table"].replace("@ABS@/", ""))
            df = pd.read_csv(path) if path.endswith(".csv") else pd.read_parquet(path)
            check_rows(_frame_records(df), ex, probs, "table")
            m = re.match(r"wrote .*: (\d+) runs, (\d+) fit, (\d+) failed", out.strip(), re.S)
            if not m:
                probs.append(("out:sweep_message", out[:200]))
            else:
                n, f, b = map(int, m.groups())
                errs = int(df["error"].notna().sum()) if "error" in df else 0
                if n != len(df) or b != errs:
                    probs.append(("out:sweep_counts", f"message says {n} runs/{b} failed, the "
                                  f"table has {len(df)} rows/{errs} errors"))
        elif kind in ("trace_written", "trace_written_auto"):
            if kind == "trace_written":
                o = ex["outputs"][0].replace("@ABS@/", "")
            else:
                o = argv[argv.index("-o") + 1] if "-o" in argv else argv[argv.index("--output") + 1]
            import vdnnsim
            p = os.path.join(os.fsencode(root), os.fsencode(o))
            try:
                tr = vdnnsim.load_trace(os.fsdecode(p))
            except vdnnsim.VdnnError as e:
                probs.append(("roundtrip:unreadable", f"the written trace does not load: "
                              f"{str(e)[:300]}"))
                return
            rt = ex.get("roundtrip") or {}
            if rt.get("batch") is not None and tr.batch_size != rt["batch"]:
                probs.append(("asked:batch_size", f"trace batch {tr.batch_size}, asked "
                              f"{rt['batch']}"))
            if rt.get("dtype") is not None and tr.dtype != rt["dtype"]:
                probs.append(("asked:dtype", f"trace dtype {tr.dtype}, asked {rt['dtype']}"))
            if rt.get("name") is not None and tr.name != rt["name"]:
                probs.append(("asked:name", f"trace name {tr.name!r}, expected {rt['name']!r}"))
            if rt.get("gpu") and getattr(tr.source, "gpu", None) != rt["gpu"]:
                probs.append(("asked:gpu", f"trace timed for {tr.source.gpu}, asked {rt['gpu']}"))
        elif kind == "trace_stdout":
            import vdnnsim
            import yaml
            from vdnnsim.trace import trace_from_dict
            text = out
            data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
            try:
                trace_from_dict(data, "<stdout>")
            except vdnnsim.VdnnError as e:
                probs.append(("roundtrip:stdout_unreadable", str(e)[:300]))
        elif kind == "plot":
            o = ex["outputs"][0].replace("@ABS@/", "")
            p = os.path.join(os.fsencode(root), os.fsencode(o))
            with open(p, "rb") as f:
                head = f.read(200)
            suffix = o.rsplit(".", 1)[-1]
            ok = {"png": head.startswith(b"\x89PNG"), "pdf": head.startswith(b"%PDF"),
                  "svg": b"<svg" in head or head.startswith(b"<?xml")}.get(suffix, True)
            if not ok:
                probs.append(("out:plot_format", f"{o} starts with {head[:20]!r}"))
        elif kind == "maxbatch_json":
            data = strict_json(out)
            mb = ex.get("maxbatch") or {}
            if mb.get("n") is not None and len(data) != mb["n"]:
                probs.append(("out:maxbatch_count", f"{len(data)} records, asked {mb['n']}"))
            lim = mb.get("limit")
            if lim is None:
                with contextlib.suppress(Exception):
                    lim = int(argv[argv.index("--limit") + 1])
            for r in data:
                m = r.get("max_batch_size")
                if not isinstance(m, int) or m < 0 or (lim is not None and m > lim):
                    probs.append(("out:maxbatch_value", f"max_batch_size {m!r}, limit {lim}"))
                    continue
                if m > 0:
                    if r.get("peak_memory_bytes", 0) > r.get("capacity_bytes", 0):
                        probs.append(("out:maxbatch_peak", f"answer's peak {r['peak_memory_bytes']}"
                                      f" > capacity {r['capacity_bytes']}"))
                    if mb.get("memory") and r.get("capacity_bytes") != mb["memory"]:
                        probs.append(("asked:capacity", f"capacity {r.get('capacity_bytes')}, "
                                      f"asked {mb['memory']}"))
                    sd = r.get("slowdown")
                    if sd is not None and (not _num(sd) or not math.isfinite(sd) or sd < 1 - 1e-9):
                        probs.append(("out:maxbatch_slowdown", f"slowdown {sd!r}"))
                    if r.get("at_limit") is False and mb.get("verify", True):
                        verify_maxbatch(r, mb, probs)
        elif kind == "validate_json":
            data = strict_json(out)
            runs = data.get("runs")
            if ex.get("rows") is not None and len(runs) != ex["rows"]:
                probs.append(("out:validate_rows", f"{len(runs)} runs, {ex['rows']} records "
                              "match a trace"))
            summ = data.get("summary", {})
            if summ.get("fit", {}).get("n") != len(runs):
                probs.append(("out:validate_summary", f"summary n {summ.get('fit')} vs {len(runs)}"))
        elif kind == "reproduce_json":
            data = strict_json(out)
            if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
                probs.append(("out:reproduce_shape", "no claims list (docs/configs.md)"))
                return
            claims = data["claims"]
            if len(claims) != 40:
                probs.append(("out:reproduce_count", f"{len(claims)} claims (README: 40)"))
            if not 0 <= data.get("cells_hold", -1) <= data.get("cells_total", -1):
                probs.append(("out:reproduce_cells", f"cells {data.get('cells_hold')!r} of "
                              f"{data.get('cells_total')!r}"))
            for r in claims:
                if not (_num(r.get("vdnnsim")) and math.isfinite(r["vdnnsim"])):
                    probs.append(("out:reproduce_value", f"{r.get('id')}: {r.get('vdnnsim')!r}"))
                    break
        elif kind == "list":
            if not out.strip():
                probs.append(("out:list_empty", "nothing listed"))
        elif kind == "help":
            if not out.startswith("usage:"):
                probs.append(("out:help", out[:100]))
    except NaNToken as e:
        probs.append(("out:json_nan", str(e)))
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as e:
        probs.append(("out:unparsable", f"{kind}: {type(e).__name__}: {str(e)[:200]}"))
    except Exception as e:  # pandas/pyarrow errors
        probs.append(("out:unparsable", f"{kind}: {type(e).__name__}: {str(e)[:200]}"))


def verify_maxbatch(r: dict, mb: dict, probs: list) -> None:
    """docs/studies.md: the answer is a simulated fit, and (not at the limit) the next
    size does not fit."""
    import vdnnsim
    m = r["max_batch_size"]
    try:
        net = r["network"]
        kw = {"dtype": r.get("dtype", "fp32")}
        if mb.get("memory_arg"):
            kw["memory_bytes"] = mb["memory_arg"]
        a = vdnnsim.simulate(net, m, r["gpu"], r["policy"], **kw)
        if not a.fits:
            probs.append(("oracle:maxbatch_not_fit", f"{net} {r['gpu']} {r['policy']}: the "
                          f"answer {m} does not fit when simulated"))
        try:
            b = vdnnsim.simulate(net, m + 1, r["gpu"], r["policy"], **kw)
            if b.fits:
                probs.append(("oracle:maxbatch_next_fits", f"{net} {r['gpu']} {r['policy']}: "
                              f"{m + 1} fits too, the answer was {m}"))
        except vdnnsim.VdnnError:
            pass
    except Exception as e:
        probs.append(("oracle:maxbatch_error", f"{type(e).__name__}: {str(e)[:200]}"))


def check_run_vs_sweep(c: dict, results: list[dict], root: str, probs: list) -> None:
    """docs/studies.md: a plain run config is a study too; its rows carry every metric of
    RunResult.summary(), so `run --json` and `sweep -o` must agree."""
    import pandas as pd
    a, b = results
    if a["rc"] != 0:
        return
    if b["rc"] != 0:
        probs.append(("diff:sweep_fails", f"run works, sweep of the same config: {b['stderr'][:200]}"))
        return
    recs = strict_json(a["stdout"])
    df = pd.read_csv(os.path.join(root, "same.csv"))
    rows = _frame_records(df)
    if len(rows) != len(recs):
        probs.append(("diff:sweep_rows", f"{len(recs)} records, {len(rows)} rows"))
        return
    for ra, rb in zip(recs, rows):
        if rb.get("error"):
            probs.append(("diff:sweep_row_error", f"run works, the sweep row says {rb['error'][:200]}"))
            return
        for k in ("policy", "batch_size", "capacity_bytes", "peak_memory_bytes",
                  "peak_footprint_bytes", "avg_memory_bytes", "iteration_time_s",
                  "offloaded_bytes", "fits", "oom_tensor"):
            x, y = ra.get(k), rb.get(k)
            if isinstance(x, float) or isinstance(y, float):
                same = (x is None and y is None) or (x is not None and y is not None and
                                                     abs(float(x) - float(y)) <= 1e-9 * max(1, abs(float(x))))
            else:
                same = x == y or str(x) == str(y)
            if not same:
                probs.append(("diff:run_vs_sweep", f"{ra.get('policy')}: {k} run {x!r}, sweep {y!r}"))
                return


def check_diff(c: dict, results: list[dict], probs: list) -> None:
    a, b = results
    if a["rc"] not in (0, 2) or b["rc"] not in (0, 2):
        return
    if a["rc"] == 0:
        try:
            ra = strict_json(a["stdout"])[0]
        except Exception:
            return
        if b["rc"] == 2:
            probs.append(("diff:study_rejects", f"config runs, study says {b['stderr'].strip()[:200]}"))
            return
        try:
            rows = strict_json(b["stdout"])
        except Exception:
            return
        if len(rows) != 1:
            probs.append(("diff:rows", f"{len(rows)} rows"))
            return
        rb = rows[0]
        if rb.get("error"):
            probs.append(("diff:study_row_error", f"config runs, study row says {rb['error'][:200]}"))
            return
        for k in ("batch_size", "capacity_bytes", "peak_memory_bytes", "iteration_time_s",
                  "dtype", "gpu", "policy", "fits"):
            if ra.get(k) != rb.get(k):
                probs.append(("diff:value", f"{k}: config {ra.get(k)!r}, study {rb.get(k)!r}"))
                break
    else:
        if b["rc"] == 0:
            try:
                rows = strict_json(b["stdout"])
            except Exception:
                return
            if rows and not rows[0].get("error"):
                probs.append(("diff:config_rejects", f"study runs, config says "
                              f"{a['stderr'].strip()[:200]}"))


def check_api(c: dict, res: dict, value: Any, probs: list) -> None:
    import vdnnsim
    ex = c["expect"]
    fn = c["api"]["fn"]
    rec_exp = ex.get("rec") or {}
    if res["rc"] == "hang":
        probs.append(("hang", f"API {fn} over {CASE_TIMEOUT:.0f} s"))
        return
    e = res.get("exc")
    if e and e["type"].endswith("RoundTripError"):
        probs.append(("roundtrip:unreadable", f"save_trace wrote a trace load_trace rejects: "
                      f"{e['msg'][:250]}"))
        return
    if e:
        if not e.get("vdnn"):
            probs.append(("api:exception", f"{e['type']} at {e['where']}: {e['msg'][:200]}"))
        else:
            if ex.get("valid") is True:
                probs.append(("expect:rejected_valid", f"{fn}: {e['msg'][:300]}"))
            if "\n" in e["msg"].strip():
                probs.append(("api:error_lines", f"{fn}: a multi-line message {e['msg'][:200]!r}"))
        return
    if ex.get("valid") is False:
        probs.append(("expect:accepted_invalid", f"{fn} {c['api']['args']!r:.200} "
                      f"{c['api']['kwargs']!r:.100}"))
    kw = c["api"]["kwargs"]
    opts = None
    if fn == "simulate":
        opts = kw.get("policy_options") if isinstance(kw.get("policy_options"), dict) else None
        check_result_object(value, rec_exp, probs, opts)
    elif fn == "run_trace":
        opts = c["api"]["args"][3] if isinstance(c["api"]["args"][3], dict) else None
        sub: list = []
        check_result_object(value, rec_exp, sub, opts)
        if ex.get("oracle_ns_hostile"):
            sub = [("api:oracle_ns", f"oracle_ns={c['api']['args'][5]!r} accepted: {m}")
                   for _, m in sub]
        probs += sub
    elif fn == "build_trace":
        if not isinstance(value, vdnnsim.Trace):
            probs.append(("api:type", f"build_trace returned {type(value).__name__}"))
            return
        if rec_exp.get("batch_size") is not None and value.batch_size != rec_exp["batch_size"]:
            probs.append(("asked:batch_size", f"trace batch {value.batch_size}, asked "
                          f"{rec_exp['batch_size']}"))
        try:
            vdnnsim.save_trace(value, "bt.yaml")
            t2 = vdnnsim.load_trace("bt.yaml")
            if len(t2.layers) != len(value.layers):
                probs.append(("roundtrip:layers", "a saved trace loads with other layers"))
        except vdnnsim.VdnnError as err:
            probs.append(("roundtrip:unreadable", f"save_trace wrote what load_trace rejects: "
                          f"{str(err)[:300]}"))
    elif fn == "load_trace":
        if not isinstance(value, vdnnsim.Trace):
            probs.append(("api:type", f"load_trace returned {type(value).__name__}"))
        elif value.batch_size != rec_exp.get("batch_size"):
            probs.append(("asked:batch_size", f"{value.batch_size} vs {rec_exp.get('batch_size')}"))
    elif fn == "gpu_preset":
        if not isinstance(value, vdnnsim.GPU):
            probs.append(("api:type", f"gpu_preset returned {type(value).__name__}"))
            return
        if rec_exp.get("capacity") is not None and value.memory_bytes != rec_exp["capacity"]:
            probs.append(("asked:capacity", f"memory_bytes {value.memory_bytes}, asked "
                          f"{rec_exp['capacity']}"))
        nums = [value.memory_bytes, value.mem_bw_bytes_per_s, value.link.h2d_bw_bytes_per_s,
                value.link.d2h_bw_bytes_per_s, value.link.latency_ns, *value.peak_flops.values()]
        if any(not _num(x) or not math.isfinite(x) or x < 0 for x in nums):
            probs.append(("api:gpu_numbers", f"{nums}"))
    elif fn == "sweep":
        import pandas as pd
        if not isinstance(value, pd.DataFrame):
            probs.append(("api:type", f"sweep returned {type(value).__name__}"))
            return
        check_rows(_frame_records(value), {"rows": rec_exp.get("rows"), "valid": ex.get("valid")},
                   probs, "sweep()")
    elif fn == "roundtrip":
        r1, r2 = value
        s1, s2 = r1.summary(), r2.summary()
        diff = [k for k in s1 if s1[k] != s2[k] and not (isinstance(s1[k], float) and
                                                          math.isnan(s1[k]) and math.isnan(s2[k]))]
        if diff:
            probs.append(("roundtrip:differs", f"a saved and reloaded trace runs differently: "
                          f"{diff[:4]} {[(s1[k], s2[k]) for k in diff[:2]]}"))
        check_result_object(r1, {"pytorch": rec_exp.get("pytorch")}, probs)
    elif fn == "metamorphic":
        small, big, exact = value
        for r in value:
            check_result_object(r, {k: rec_exp.get(k) for k in ("network", "batch_size",
                                                                 "policy", "facts", "pytorch")},
                                probs)
        keys = ["peak_memory_bytes", "iteration_time_ns", "offloaded_bytes", "prefetched_bytes",
                "stall_time_ns", "weight_bytes", "avg_memory_bytes", "algos"]
        d = [k for k in keys if getattr(small, k) != getattr(big, k)]
        pt = rec_exp.get("pytorch")
        if d:
            probs.append(("meta:capacity_changes" + ("_pytorch" if pt else ""),
                          f"{small.policy}: {d[0]} {getattr(small, d[0])} in a "
                          f"{small.capacity_bytes}-byte pool, {getattr(big, d[0])} in 1 PiB "
                          "(metrics.md: counted past an out-of-memory failure)"))
        if big.fits and not exact.fits:
            probs.append(("meta:footprint_not_enough" + ("_pytorch" if pt else ""),
                          f"{big.policy}: peak_footprint_bytes {big.peak_footprint_bytes} in "
                          f"1 PiB, yet a pool of exactly that size fails at {exact.oom.tensor} "
                          "(metrics.md: 'With a pool at least this large ... the run fits')"))


# --------------------------------------------------------------------------------------
# Campaign
# --------------------------------------------------------------------------------------

FAMILIES = [("config", 20, fam_config), ("spec", 12, fam_spec), ("trace", 14, fam_trace),
            ("study", 8, fam_study), ("diff", 5, fam_diff), ("yaml", 7, fam_yaml),
            ("paths", 5, fam_paths), ("argv", 8, fam_argv), ("plot", 2, fam_plot),
            ("maxbatch", 3, fam_maxbatch), ("validate", 3, fam_validate),
            ("reproduce", 0.2, fam_reproduce), ("api", 13, fam_api)]
SUBPROC_SHARE = 0.035


def make_case(seed: int, idx: int, family: str | None = None) -> Case:
    rng = random.Random(f"{seed}:{idx}")
    fams = [f for f in FAMILIES if family is None or f[0] == family]
    fam = rng.choices(fams, [f[1] for f in fams])[0]
    case = fam[2](rng)
    if case.mode == "inproc" and rng.random() < SUBPROC_SHARE:
        case.mode = "subproc"
    return case


def signature(tag: str, detail: str, c: dict) -> str:
    if tag == "traceback":
        return f"traceback: {detail}"[:120]
    if tag == "api:exception":
        return f"{tag}: {detail.split(':')[0]}:{detail.split(':')[1] if ':' in detail else ''}"[:120]
    if tag.startswith("expect:"):
        d = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", detail)[:70]
        return f"{tag} [{c['family']}] {d}"
    return tag


def _save_failure(c: dict, root: str, results: list, probs: list, idx: int, fail_dir: str,
                  seed: int) -> None:
    d = Path(fail_dir) / "cases" / f"{idx:06d}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "case.json").write_text(json.dumps(c, indent=1, ensure_ascii=True))
    (d / "result.json").write_text(json.dumps({"problems": probs, "results": [
        {k: (v[-3000:] if isinstance(v, str) else v) for k, v in r.items()} for r in results]},
        indent=1, ensure_ascii=True, default=repr))
    files = d / "files"
    total = 0
    for dirpath, dirnames, filenames in os.walk(os.fsencode(root)):
        for n in filenames:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, os.fsencode(root))
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            size = os.path.getsize(p)
            if size > 4_000_000 or total > 20_000_000:
                continue
            total += size
            dst = os.path.join(os.fsencode(str(files)), rel)
            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copyfile(p, dst)
    lines = ["#!/bin/sh", f"# case {idx} of seed {seed} ({c['family']}, {c['mode']}): {c['note'][:200]!r}",
             f"# replay: {sys.executable} {REPO}/bench/fuzz_independent.py --seed {seed} "
             f"--only-case {idx} -v", 'cd "$(dirname "$0")/files"']
    import shlex
    for argv in c["argvs"]:
        lines.append(f"PYTHONPATH={REPO} {sys.executable} -m vdnnsim " +
                     " ".join(shlex.quote(a.replace("@ABS@", "$PWD")) for a in argv))
    if c["api"]:
        lines.append(f"# API: {c['api']['fn']}(*{c['api']['args']!r}, **{c['api']['kwargs']!r})")
    (d / "cmd.sh").write_text("\n".join(lines) + "\n", errors="backslashreplace")


def run_case(seed: int, idx: int, fail_dir: str | None, family: str | None = None) -> dict:
    t0 = time.perf_counter()
    try:
        case = make_case(seed, idx, family)
    except Exception:
        return {"idx": idx, "family": "?", "mode": "?", "note": "generation failed", "rcs": [],
                "secs": 0.0, "run_secs": 0.0, "api_exc": None,
                "probs": [("harness:generation", traceback.format_exc()[-1500:])],
                "sigs": ["harness:generation"], "size": 0, "argvs": [], "api": None}
    c = case.to_json()
    root = tempfile.mkdtemp(prefix=f"fz2_{idx}_")
    probs: list[tuple[str, str]] = []
    results: list[dict] = []
    cwd = os.getcwd()
    try:
        materialize(c, root)
        os.chdir(root)
        if c["mode"] == "api":
            res, value = run_api(c)
            results.append(res)
            check_api(c, res, value, probs)
        else:
            for step, argv in enumerate(c["argvs"]):
                argv = _fix_argv(argv, root)
                before = snapshot(root)
                res = (run_cli_subproc(argv, root, c) if c["mode"] == "subproc"
                       else run_cli_inproc(argv))
                after = snapshot(root)
                results.append(res)
                check_cli(c, res, root, probs, step)
                check_outputs(c, res, root, probs, before, after)
            if c["expect"].get("check") == "diff":
                check_diff(c, results, probs)
            if c["expect"].get("check") == "run_vs_sweep":
                check_run_vs_sweep(c, results, root, probs)
    except Exception:
        probs.append(("harness", traceback.format_exc()[-1500:]))
    finally:
        os.chdir(cwd)
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")
    if probs and fail_dir:
        with contextlib.suppress(Exception):
            _save_failure(c, root, results, probs, idx, fail_dir, seed)
    shutil.rmtree(root, ignore_errors=True)
    return {"idx": idx, "family": c["family"], "mode": c["mode"], "note": c["note"][:200],
            "rcs": [r["rc"] for r in results], "secs": time.perf_counter() - t0,
            "run_secs": sum(r.get("secs", 0) for r in results),
            "api_exc": (results[0].get("exc") or {}).get("vdnn") if c["mode"] == "api" and results
            else None,
            "probs": probs, "sigs": sorted({signature(t, d, c) for t, d in probs}),
            "size": sum(len(base64.b64decode(v)) for v in c["files"].values()),
            "argvs": c["argvs"], "api": c["api"]}


def worker_main(conn, seed: int, fail_dir: str, family: str | None) -> None:
    os.environ["MPLBACKEND"] = "Agg"
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    import vdnnsim
    import vdnnsim.cli  # noqa: F401
    assert Path(vdnnsim.__file__).resolve().is_relative_to(REPO), vdnnsim.__file__
    while True:
        idx = conn.recv()
        if idx is None:
            return
        conn.send(run_case(seed, idx, fail_dir, family))


def campaign(args) -> int:
    fail_dir = args.failures
    if args.fresh and os.path.isdir(fail_dir):
        shutil.rmtree(fail_dir)
    os.makedirs(fail_dir, exist_ok=True)
    ctx = mp.get_context("spawn")
    t0 = time.time()
    todo = list(range(args.start, args.start + args.cases))
    pending = list(reversed(todo))
    workers: list[dict] = []

    def spawn():
        a, b = ctx.Pipe()
        p = ctx.Process(target=worker_main, args=(b, args.seed, fail_dir, args.family),
                        daemon=True)
        p.start()
        return {"p": p, "conn": a, "idx": None, "since": 0.0, "done": 0}

    for _ in range(args.workers):
        workers.append(spawn())
    results: list[dict] = []
    from multiprocessing.connection import wait
    while pending or any(w["idx"] is not None for w in workers):
        for w in workers:
            if w["idx"] is None and pending:
                w["idx"] = pending.pop()
                w["since"] = time.time()
                w["conn"].send(w["idx"])
        ready = wait([w["conn"] for w in workers if w["idx"] is not None], timeout=1.0)
        for w in list(workers):
            if w["idx"] is None:
                continue
            if w["conn"] in ready:
                try:
                    r = w["conn"].recv()
                except EOFError:
                    r = {"idx": w["idx"], "family": "?", "mode": "?", "note": "worker died",
                         "rcs": ["died"], "secs": time.time() - w["since"], "run_secs": 0,
                         "probs": [("harness:worker_died", "")], "sigs": ["harness:worker_died"],
                         "size": 0, "argvs": [], "api": None, "api_exc": None}
                    w["idx"] = None
                    workers[workers.index(w)] = spawn()
                    results.append(r)
                    continue
                results.append(r)
                w["idx"] = None
                w["done"] += 1
                if w["done"] >= args.recycle:
                    w["conn"].send(None)
                    w["p"].join(5)
                    workers[workers.index(w)] = spawn()
            elif time.time() - w["since"] > HARD_TIMEOUT:
                w["p"].kill()
                idx = w["idx"]
                results.append({"idx": idx, "family": "?", "mode": "?", "note": "killed",
                                "rcs": ["hang"], "secs": HARD_TIMEOUT, "run_secs": HARD_TIMEOUT,
                                "probs": [("hang", "worker killed past the hard limit")],
                                "sigs": ["hang"], "size": 0, "argvs": [], "api": None,
                                "api_exc": None})
                workers[workers.index(w)] = spawn()
        if len(results) and len(results) % 500 == 0 and not args.quiet:
            n = len(results)
            bad = sum(1 for r in results if r["probs"])
            print(f"  {n}/{len(todo)} cases, {bad} with problems, {time.time() - t0:.0f} s",
                  file=sys.stderr, flush=True)
    for w in workers:
        with contextlib.suppress(Exception):
            w["conn"].send(None)
            w["p"].join(5)
    wall = time.time() - t0
    return report(args, results, wall, fail_dir)


def report(args, results: list[dict], wall: float, fail_dir: str) -> int:
    from collections import Counter, defaultdict
    rc_count: Counter = Counter()
    for r in results:
        for rc in r["rcs"]:
            rc_count[str(rc)] += 1
    cases_by_cat: Counter = Counter()
    for r in results:
        cats = set()
        for t, _ in r["probs"]:
            if t == "traceback" or t == "api:exception":
                cats.add("traceback")
            elif t == "hang":
                cats.add("hang")
            elif t.startswith("exit") and t[4:].isdigit():
                cats.add("other exit code" if t != "exit3" else "exit 3 (internal error)")
            else:
                cats.add("wrong answer / contract")
        for cat in cats:
            cases_by_cat[cat] += 1
    sigs: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        for s in r["sigs"]:
            sigs[s].append(r)
    fams = Counter(r["family"] for r in results)
    modes = Counter(r["mode"] for r in results)
    api = Counter("VdnnError" if r["api_exc"] else ("other exception" if r["api_exc"] is False
                                                    else "result") for r in results
                  if r["mode"] == "api")
    slow = sorted(results, key=lambda r: -r["run_secs"])[:5]
    summary = {
        "command": " ".join([sys.executable] + sys.argv), "seed": args.seed,
        "cases": len(results), "wall_s": round(wall, 1), "families": dict(fams),
        "modes": dict(modes), "cli_exit_codes": dict(rc_count), "api_outcomes": dict(api),
        "cases_with_problems": sum(1 for r in results if r["probs"]),
        "cases_by_category": dict(cases_by_cat),
        "distinct_failures": {
            s: {"cases": len(rs), "smallest_case": min(rs, key=lambda r: (r["size"], r["idx"]))["idx"],
                "example": next(d for t, d in min(rs, key=lambda r: (r["size"], r["idx"]))["probs"]
                                if signature(t, d, {"family": min(rs, key=lambda r: (r["size"], r["idx"]))["family"]}) == s)[:400],
                "families": dict(Counter(r["family"] for r in rs))}
            for s, rs in sorted(sigs.items(), key=lambda kv: -len(kv[1]))},
        "slowest": [{"idx": r["idx"], "family": r["family"], "secs": round(r["run_secs"], 2),
                     "note": r["note"][:80]} for r in slow],
    }
    Path(fail_dir, "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False))
    print(json.dumps({k: v for k, v in summary.items() if k != "distinct_failures"}, indent=1))
    print(f"distinct failures: {len(summary['distinct_failures'])}")
    for s, d in summary["distinct_failures"].items():
        print(f"  [{d['cases']:5d}] {s}  (e.g. case {d['smallest_case']}: {d['example'][:160]!r})")
    return 1 if summary["cases_with_problems"] else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--start", type=int, default=0, help="first case number")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--failures", default="/tmp/fuzz2-failures")
    ap.add_argument("--fresh", action="store_true", help="empty --failures first")
    ap.add_argument("--recycle", type=int, default=300, help="cases per worker process")
    ap.add_argument("--family", default=None, choices=[f[0] for f in FAMILIES])
    ap.add_argument("--only-case", type=int, default=None, help="run this one case, in-process")
    ap.add_argument("--subproc-share", type=float, default=SUBPROC_SHARE)
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    globals()["SUBPROC_SHARE"] = args.subproc_share
    if args.only_case is not None:
        os.environ["MPLBACKEND"] = "Agg"
        r = run_case(args.seed, args.only_case, None, args.family)
        case = make_case(args.seed, args.only_case, args.family)
        if args.verbose:
            print(json.dumps({"note": case.note, "mode": case.mode, "argvs": case.argvs,
                              "api": case.api, "expect": _jsonable(case.expect)}, indent=1,
                             ensure_ascii=False, default=repr)[:6000])
            for name, content in case.files.items():
                print(f"--- {name!r} ({len(content)} bytes)")
                print(content[:1500].decode("utf-8", "replace"))
        print(json.dumps({k: r[k] for k in ("rcs", "secs", "probs")}, indent=1, default=repr))
        return 1 if r["probs"] else 0
    return campaign(args)


if __name__ == "__main__":
    sys.exit(main())
