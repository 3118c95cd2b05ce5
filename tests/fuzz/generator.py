"""Seeded generation of hostile vdnnsim inputs (NOTE [fuzz contract] in ``__init__``).

Every case starts from valid, small inputs (tiny network specs and traces, zoo networks at
small batch sizes, small studies) and is then, most of the time, mutated: a key set to a
hostile value (extreme or non-finite numbers, byte strings that overflow, wrong types,
unhashable values, names that collide with the engine's internal keys), a key removed or
added, a reference broken, the YAML text itself damaged, a path made too long or pointed
at a folder. A few case indices are reserved for expensive shapes (deep chains, alias
chains, huge grids, alias bombs) so that every campaign holds the same number of them.

``generate(seed, index)`` depends on nothing but its arguments.
"""

from __future__ import annotations

import copy
import datetime
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import yaml

# -- what the documentation says exists -------------------------------------------------------

ZOO_BATCH = {"alexnet": 128, "overfeat": 128, "googlenet": 128, "vgg16": 64, "vgg116": 32,
             "vgg216": 32, "vgg316": 32, "vgg416": 32}
SMALL_ZOO = ("alexnet", "overfeat", "vgg16", "googlenet")
PRESETS = ("k40", "titanx_maxwell", "p100", "v100", "a100", "h100", "h200")
POLICIES = ("eager", "baseline_m", "baseline_p", "vdnn_all_m", "vdnn_all_p", "vdnn_conv_m",
            "vdnn_conv_p", "vdnn_dyn")
DEFAULT_POLICIES = ("baseline_p", "vdnn_all_m", "vdnn_all_p", "vdnn_conv_m", "vdnn_conv_p",
                    "vdnn_dyn")
DTYPES = ("fp32", "fp16", "bf16")
GPU_KEYS = ("link_bw_bytes_per_s", "h2d_bw_bytes_per_s", "d2h_bw_bytes_per_s",
            "link_latency_ns", "duplex", "peak_flops_scale", "mem_bw_bytes_per_s")
POINT_KEYS = ("network", "batch_size", "gpu", "dtype", "policy", "policy_options",
              "memory_bytes")
CONFIG_KEYS = ("name", "description", "network", "batch_size", "gpu", "dtype", "policy",
               "policies", "policy_options", "memory_bytes")
LAYER_TYPES = ("conv", "fc", "relu", "threshold", "maxpool", "avgpool", "lrn", "concat", "add",
               "bn", "dropout", "softmax", "flatten")
ALGO_NAMES = ("implicit_gemm", "implicit_precomp_gemm", "gemm", "fft", "fft_tiling",
              "winograd", "default")
# Keys the engine uses for its own allocations (docs/metrics.md, oom_tensor).
INTERNAL = ("weights", "weight_grads", "resident", "workspace", "grad_buffer_0",
            "grad_buffer_1")

INF, NAN = float("inf"), float("nan")

HOSTILE_NUMBERS: tuple[Any, ...] = (
    0, 1, -1, -4, 3, 2**31, 2**53 + 1, 2**63, 10**19, 10**30, 10**400, -10**400,
    0.0, -0.0, 0.5, 1.5, 2.0, 1e-300, 5e-324, 1e-320, 1e300, 1.7976931348623157e308,
    INF, -INF, NAN)
HOSTILE_STRINGS: tuple[str, ...] = (
    "", " ", "abc", "1e400", "-1e400", "12 GB/s", "12 GiB", "1.5 KiB", "1.5 B", "-5", "0x10",
    "1_000", "NaN", "inf", ".inf", "1e-300", "1e300", "1 PiB", "1e30 TiB", "0 B", " 64 mib ",
    "2", "2.0", "1e3", "\u221e", "\u00e9t\u00e9", "\u202eevil", "a" * 300, "x\x00y", "../x",
    "/", ".", "~", "vgg16 ", "VGG16", "k40\n", "\t", "null", "true", "- a", "{a: 1}",
    "*alias", "&anchor", "!!int 3")
HOSTILE_OTHER: tuple[Any, ...] = (
    None, True, False, [], [1], ["a", "b"], [[]], [1, [2, [3]]], {}, {"a": 1},
    {"preset": "k40"}, {"sync": True}, b"1e400", b"\xff\xfe", datetime.date(2001, 12, 14),
    datetime.datetime(2001, 12, 14, 21, 59, 43), {1, 2})


def hostile(r: "Rng") -> Any:
    pool = r.pick((HOSTILE_NUMBERS, HOSTILE_STRINGS, HOSTILE_OTHER))
    return copy.deepcopy(r.pick(pool))


# -- cases -------------------------------------------------------------------------------------

@dataclass
class File:
    """A file (or folder, or link) the case puts in its folder before it runs.

    kind: ``yaml`` (``data`` is a Python object, written with ``yaml.safe_dump``), ``text``,
    ``bytes``, ``json`` (``data`` is a Python object), ``dir``, ``symlink`` (``data``: the
    target), ``unreadable`` (``data``: text, mode 000).
    """

    kind: str
    data: Any = None


@dataclass
class Case:
    seed: int
    index: int
    label: str
    argv: list[str] | None = None
    api: dict[str, Any] | None = None  # {"fn": name, "args": [...], "kwargs": {...}}
    files: dict[str, File] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)  # what the command is asked to write
    mutations: list[str] = field(default_factory=list)  # what was made hostile, for people
    in_files: bool = False  # a mutation went into a file (an error must name a file)
    in_argv: bool = False  # a mutation went into the arguments

    def hostile(self, what: str, in_file: bool = True) -> None:
        self.mutations.append(what)
        if in_file:
            self.in_files = True
        else:
            self.in_argv = True

    def command(self) -> str:
        """The case as a shell command or a Python call, for people."""
        if self.argv is not None:
            return "vdnnsim " + " ".join(shell_quote(a) for a in self.argv)
        return api_source(self.api or {})


def shell_quote(arg: str) -> str:
    """For bash; an argument with unprintable characters as $'...' (an undecodable byte as
    \\xNN)."""
    import shlex
    if arg.isprintable():
        return shlex.quote(arg)
    raw = arg.encode("utf-8", "surrogateescape")
    return "$'" + "".join(chr(b) if 32 <= b < 127 and chr(b) not in "'\\" else f"\\x{b:02x}"
                          for b in raw) + "'"


def api_source(api: dict[str, Any]) -> str:
    def lit(v: Any) -> str:
        if isinstance(v, dict) and len(v) == 1:
            (k, x), = v.items()
            if k == "$path":
                return f"pathlib.Path({x!r})"
            if k == "$trace":
                return f"vdnnsim.load_trace({x!r})"
            if k == "$spec":
                return f"vdnnsim.network.load_network({x!r})"
            if k == "$gpu":
                return f"vdnnsim.gpu_preset(*{x!r})"
        if isinstance(v, float) and not math.isfinite(v):
            return f"float({str(v)!r})"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{lit(k)}: {lit(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(lit(x) for x in v) + "]"
        return repr(v)

    parts = [lit(a) for a in api.get("args", [])]
    parts += [f"{k}={lit(v)}" for k, v in api.get("kwargs", {}).items()]
    return f"vdnnsim.{api.get('fn')}({', '.join(parts)})"


class Rng(random.Random):
    def chance(self, p: float) -> bool:
        return self.random() < p

    def pick(self, seq: Any) -> Any:
        seq = list(seq)
        return seq[self.randrange(len(seq))]

    def weighted(self, table: dict[Any, float]) -> Any:
        keys = list(table)
        return self.choices(keys, weights=[table[k] for k in keys])[0]


# -- valid building blocks ------------------------------------------------------------------

def _pool_out(n: int, k: int, s: int, p: int, ceil: bool) -> int:  # docs/network-spec.md
    num = n + 2 * p - k
    out = (-(-num // s) if ceil else num // s) + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def internal_name(r: Rng, other: str) -> str:
    return r.pick(INTERNAL + (f"workspace:{other}", f"grad:{other}", f"weights:{other}",
                              f"wgrad:{other}", f"{other}:mask", f"{other}:stats", "data"))


def gen_spec(r: Rng, n_layers: int, name: str = "tiny", batch: bool = True,
             internal_p: float = 0.0) -> dict[str, Any]:
    """A valid network spec of about ``n_layers`` layers (forks, joins, in-place ops)."""
    c, h = r.pick((1, 2, 3, 4)), r.randint(1, 12)
    w = h if r.chance(0.8) else r.randint(1, 12)
    shapes: dict[str, tuple[int, ...]] = {"data": (c, h, w)}
    layers: list[dict[str, Any]] = []
    prev = "data"

    def name_for(t: str) -> str:
        if r.chance(internal_p):
            return internal_name(r, prev if prev != "data" else "c0")
        return f"{t}{len(layers)}"

    def conv(x: tuple[int, ...], inputs: list[str] | None, same: bool,
             out: int | None = None) -> tuple[dict[str, Any], tuple[int, ...]]:
        cc, hh, ww = x
        out = out or r.randint(1, 8)
        if same:
            k = r.pick((1, 3))
            pad, stride = k // 2, 1
        else:
            pad = r.pick((0, 0, 1))
            k = r.randint(1, max(1, min(3, hh + 2 * pad, ww + 2 * pad)))
            stride = r.pick((1, 1, 2))
        d: dict[str, Any] = {"name": name_for("conv"), "type": "conv", "out": out, "kernel": k}
        if stride != 1:
            d["stride"] = stride
        if pad:
            d["pad"] = pad
        g = math.gcd(cc, out)
        if g > 1 and r.chance(0.3):
            d["groups"] = r.pick([x for x in range(1, g + 1) if g % x == 0])
        if r.chance(0.1):
            d["bias"] = False
        if inputs:
            d["inputs"] = inputs
        return d, (out, (hh + 2 * pad - k) // stride + 1, (ww + 2 * pad - k) // stride + 1)

    def add(d: dict[str, Any], shape: tuple[int, ...]) -> str:
        layers.append(d)
        shapes[d["name"]] = shape
        return d["name"]

    while len(layers) < n_layers:
        x = shapes[prev]
        kinds = ["relu", "relu", "fc", "softmax", "bn", "lrn", "dropout", "threshold"]
        if len(x) == 3:
            kinds += ["conv"] * 4 + ["maxpool", "avgpool", "concat", "add", "flatten"]
        else:
            kinds += ["flatten"]
        t = r.pick(kinds)
        if t == "conv":
            d, s = conv(x, None, False)
            prev = add(d, s)
        elif t in ("maxpool", "avgpool"):
            _, hh, ww = x
            k = r.randint(1, max(1, min(3, hh, ww)))
            pad = r.randint(0, k // 2)
            stride = r.pick((1, 2, 2))
            ceil = r.chance(0.3)
            d = {"name": name_for(t[:4]), "type": t, "kernel": k}
            if stride != 1:
                d["stride"] = stride
            if pad:
                d["pad"] = pad
            if ceil:
                d["ceil_mode"] = True
            prev = add(d, (x[0], _pool_out(hh, k, stride, pad, ceil),
                           _pool_out(ww, k, stride, pad, ceil)))
        elif t == "concat":
            src = prev
            d1, s1 = conv(x, None, True)
            b1 = add(d1, s1)
            d2, s2 = conv(x, [src], True)
            b2 = add(d2, s2)
            prev = add({"name": name_for("cat"), "type": "concat", "inputs": [b1, b2]},
                       (s1[0] + s2[0],) + s1[1:])
        elif t == "add":
            src = prev
            d1, s1 = conv(x, None, True, out=x[0] if r.chance(0.5) else None)
            b1 = add(d1, s1)
            if s1 == x and r.chance(0.5):  # a residual: the block input joins its output
                ins = [src, b1]
            else:
                d2, s2 = conv(x, [src], True, out=s1[0])
                ins = [b1, add(d2, s2)]
            prev = add({"name": name_for("add"), "type": "add", "inputs": ins}, s1)
        elif t == "fc":
            prev = add({"name": name_for("fc"), "type": "fc", "out": r.randint(1, 16)},
                       (r.randint(1, 16),))
            layers[-1]["out"] = shapes[prev][0]
        elif t == "flatten":
            prev = add({"name": name_for("flat"), "type": "flatten"}, (math.prod(x),))
        else:
            d = {"name": name_for(t), "type": t}
            if t in ("relu", "threshold", "dropout") and r.chance(0.3):
                d["inplace"] = r.chance(0.5)
            if t == "dropout" and r.chance(0.5):
                d["p"] = r.pick((0, 0.1, 0.5, 0.9))
            if t == "lrn" and r.chance(0.5):
                d["size"] = r.randint(1, 7)
            prev = add(d, x)
    spec: dict[str, Any] = {"name": name, "input": [c, h, w]}
    if batch:
        spec["batch_size"] = r.randint(1, 8)
    if r.chance(0.2):
        spec["source"] = "written by the fuzzer"
    spec["layers"] = layers
    return spec


def _size(r: Rng) -> Any:
    n = r.pick((0, 1, 511, 512, 513, 4096, 65536, r.randint(1, 10**6), r.randint(1, 10**6)))
    if r.chance(0.1):
        return r.pick(("4 KiB", "1.5 KiB", "0.25 MB", "1e3", "2048.0"))
    return n


def gen_trace(r: Rng, n_layers: int, name: str = "hand",
              internal_p: float = 0.0) -> dict[str, Any]:
    """A valid trace (docs/trace-format.md) of ``n_layers`` layers."""
    data = r.randint(1, 10**5)
    tensors: list[dict[str, Any]] = [{"id": "data", "size_bytes": data, "kind": "input"}]
    if r.chance(0.1):
        tensors[0]["requires_grad"] = True
    root_size = {"data": data}
    avail = ["data"]
    layers: list[dict[str, Any]] = []
    for i in range(n_layers):
        kind = r.pick(("conv", "conv", "relu", "maxpool", "fc", "concat", "add", "bn",
                       "dropout", "flatten", "softmax", "mystery_op"))
        lid = f"{kind[:4]}{i}"
        if r.chance(internal_p):
            lid = internal_name(r, avail[-1])
        nin = r.randint(2, 3) if kind in ("concat", "add") and len(avail) > 1 else 1
        inputs = [avail[-1]] + r.sample(avail[:-1], min(nin - 1, len(avail) - 1))
        out: dict[str, Any] = {"id": lid}
        if kind in ("relu", "flatten", "dropout") and r.chance(0.6):
            src = inputs[0]
            out["alias_of"] = src
            out["size_bytes"] = root_size[src]
        else:
            out["size_bytes"] = _size(r)
        if r.chance(0.05):
            out["requires_grad"] = r.chance(0.5)
        if r.chance(0.1):
            out["shape"] = [r.randint(1, 8) for _ in range(r.randint(1, 4))]
        tensors.append(out)
        root_size[lid] = root_size[out["alias_of"]] if "alias_of" in out else out["size_bytes"]
        outputs = [lid]
        if kind in ("bn", "dropout") and r.chance(0.7):
            extra = {"id": f"{lid}:x", "size_bytes": _size(r), "kind": "extra"}
            tensors.append(extra)
            root_size[extra["id"]] = extra["size_bytes"]
            outputs.append(extra["id"])
        pool = inputs + outputs
        saved = [t for t in pool if r.chance(0.5)]
        layer: dict[str, Any] = {"id": lid, "kind": kind, "inputs": inputs,
                                 "outputs": outputs, "saved": saved}
        if kind in ("conv", "fc", "bn") and r.chance(0.8):
            layer["weight_bytes"] = _size(r)
        if kind == "conv" and r.chance(0.8):
            algos = []
            for name_ in r.sample(ALGO_NAMES, r.randint(1, 4)):
                a: dict[str, Any] = {"name": name_, "fwd_ns": r.randint(0, 10**6),
                                     "bwd_ns": r.randint(0, 10**6)}
                if r.chance(0.6):
                    a["fwd_workspace_bytes"] = _size(r)
                if r.chance(0.6):
                    a["bwd_workspace_bytes"] = _size(r)
                algos.append(a)
            layer["algos"] = algos
        else:
            layer["fwd_ns"] = r.randint(0, 10**6)
            layer["bwd_ns"] = r.randint(0, 10**6)
            if r.chance(0.2):
                layer["workspace_bytes"] = _size(r)
        if r.chance(0.1):
            layer["attrs"] = {"note": "fuzz", "flops": r.randint(0, 10**9)}
        layers.append(layer)
        avail.append(lid)
    trace: dict[str, Any] = {"format": "vdnnsim-trace", "version": 1, "name": name,
                             "batch_size": r.randint(1, 8)}
    if r.chance(0.3):
        trace["dtype"] = r.pick(DTYPES)
    src: dict[str, Any] = {}
    if r.chance(0.3):
        src["kind"] = r.pick(("synthesized", "profiled", "handwritten"))
    if r.chance(0.2):
        src["framework"] = r.pick(("torch7", "pytorch"))
    if r.chance(0.1):
        src.update(gpu="h200", cost_model="analytic-v1", software={"torch": "2.13.0"},
                   note="fuzz")
    if src:
        trace["source"] = src
    trace["tensors"] = tensors
    trace["layers"] = layers
    if r.chance(0.1):
        trace["step_ns"] = r.randint(0, 10**6)
    if r.chance(0.1):
        trace["resident_bytes"] = _size(r)
    return trace


# -- generic mutation of YAML documents --------------------------------------------------------

def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append(prefix + (k,))
            out.extend(_paths(v, prefix + (k,)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.append(prefix + (i,))
            out.extend(_paths(v, prefix + (i,)))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def mutate_doc(r: Rng, doc: Any, case: Case, where: str, n: int = 1) -> Any:
    """Apply ``n`` random structural mutations to a copy of ``doc``."""
    doc = copy.deepcopy(doc)
    for _ in range(n):
        paths = _paths(doc)
        if not paths:
            return doc
        path = r.pick(paths)
        parent, key = _get(doc, path[:-1]), path[-1]
        op = r.weighted({"hostile": 6, "delete": 1.5, "unknown": 1, "dup": 1, "swap": 0.5})
        if op == "hostile":
            v = hostile(r)
            parent[key] = v
            case.hostile(f"{where}: {'.'.join(map(str, path))} = {v!r:.60}")
        elif op == "delete":
            del parent[key]
            case.hostile(f"{where}: removed {'.'.join(map(str, path))}")
        elif op == "unknown":
            target = parent if isinstance(parent, dict) else _get(doc, path)
            if isinstance(target, dict):
                target[r.pick(("colour", "algo", "which", "Network", "batch", "preset "))] = 1
                case.hostile(f"{where}: unknown key near {'.'.join(map(str, path))}")
        elif op == "dup" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
            case.hostile(f"{where}: duplicated {'.'.join(map(str, path))}")
        elif op == "swap":
            v = parent[key]
            parent[key] = [v] if not isinstance(v, list) else {"x": v}
            case.hostile(f"{where}: wrapped {'.'.join(map(str, path))}")
    return doc


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, allow_unicode=True,
                     default_flow_style=None, width=120)


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A YAML flow list whose last element expands to width**levels leaves."""
    parts = [f"&a0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels):
        parts.append(f"&a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "[" + ", ".join(parts) + "]"


def mutate_text(r: Rng, text: str, case: Case, where: str) -> File:
    """Damage the YAML text itself."""
    op = r.pick(("truncate", "tab", "bom", "bad_utf8", "nul", "dup_key", "second_doc",
                 "undefined_alias", "python_tag", "deep", "crlf", "directive", "merge",
                 "huge_line", "binary", "comment_only"))
    case.hostile(f"{where}: text {op}")
    lines = text.splitlines(keepends=True) or ["\n"]
    if op == "truncate":
        return File("text", text[: r.randint(0, max(0, len(text) - 1))])
    if op == "tab":
        i = r.randrange(len(lines))
        lines[i] = "\t" + lines[i]
        return File("text", "".join(lines))
    if op == "bom":
        return File("bytes", b"\xef\xbb\xbf" + text.encode("utf-8", "surrogateescape"))
    if op == "bad_utf8":
        raw = text.encode("utf-8", "surrogateescape")
        i = r.randint(0, len(raw))
        return File("bytes", raw[:i] + r.pick((b"\xff", b"\xc3\x28", b"\x80\x80", b"\xed\xa0\x80"))
                    + raw[i:])
    if op == "nul":
        i = r.randint(0, len(text))
        return File("text", text[:i] + "\x00" + text[i:])
    if op == "dup_key":
        i = r.randrange(len(lines))
        return File("text", "".join(lines[: i + 1] + [lines[i]] + lines[i + 1:]))
    if op == "second_doc":
        return File("text", text + "---\n" + text)
    if op == "undefined_alias":
        return File("text", text + "extra: *nowhere\n")
    if op == "python_tag":
        return File("text", text + "evil: !!python/object/apply:os.system ['true']\n")
    if op == "deep":
        n = r.pick((100, 1000, 5000))
        return File("text", text + "deep: " + "[" * n + "]" * n + "\n")
    if op == "crlf":
        return File("bytes", text.replace("\n", "\r\n").encode("utf-8", "surrogateescape"))
    if op == "directive":
        return File("text", "%YAML 1.1\n---\n" + text)
    if op == "merge":
        return File("text", "base_: &b {x: 1}\n" + text + "merged: {<<: *b}\n")
    if op == "huge_line":
        return File("text", text + "description: " + "y" * 2_000_000 + "\n")
    if op == "binary":
        return File("bytes", bytes(r.randrange(256) for _ in range(r.randint(1, 64))))
    return File("text", "# nothing but a comment\n")


# -- paths ---------------------------------------------------------------------------------

def long_name(r: Rng, suffix: str = ".yaml") -> str:
    n = r.pick((250, 256, 300, 1000))
    return "n" * n + suffix


def hostile_path(r: Rng, case: Case, suffix: str = ".yaml", make_dir: bool = True,
                 argv: bool = False) -> str:
    """A path that is not a readable file of the expected kind; sets up what it needs.
    ``argv``: it goes on a command line, which cannot hold a NUL byte (an undecodable byte
    instead)."""
    kind = r.pick(("long", "long_dir", "very_long", "dir", "missing", "missing_dir",
                   "undecodable", "empty", "unreadable", "symlink_loop", "dangling",
                   "devnull", "nul", "dot", "trailing_slash", "space"))
    case.hostile(f"path: {'undecodable' if kind == 'nul' and argv else kind}", in_file=False)
    if kind == "long":
        return long_name(r, suffix)
    if kind == "long_dir":
        return long_name(r, "") + "/x" + suffix
    if kind == "very_long":
        return "/".join(["d" * 200] * 25) + suffix
    if kind == "dir":
        name = "folder" + suffix
        if make_dir:
            case.files[name] = File("dir")
        return name
    if kind == "missing":
        return "missing" + suffix
    if kind == "missing_dir":
        return "nosuch/x" + suffix
    if kind == "undecodable":
        case.files["latin1" + suffix] = File("bytes", b"network: caf\xe9\xff\n")
        return "latin1" + suffix
    if kind == "empty":
        case.files["empty" + suffix] = File("text", "")
        return "empty" + suffix
    if kind == "unreadable":
        case.files["secret" + suffix] = File("unreadable", "network: alexnet\nbatch_size: 1\n")
        return "secret" + suffix
    if kind == "symlink_loop":
        case.files["loop" + suffix] = File("symlink", "loop" + suffix)
        return "loop" + suffix
    if kind == "dangling":
        case.files["dangling" + suffix] = File("symlink", "nowhere" + suffix)
        return "dangling" + suffix
    if kind == "devnull":
        return "/dev/null"
    if kind == "nul":
        return ("a\udcffb" if argv else "a\x00b") + suffix
    if kind == "dot":
        return "."
    if kind == "trailing_slash":
        return "x" + suffix + "/"
    return " "


def hostile_out_path(r: Rng, case: Case, suffix: str) -> str:
    """An output path that cannot be written as asked."""
    kind = r.pick(("long", "very_long", "missing_dir", "dir", "dot", "undecodable",
                   "wrong_suffix", "trailing_slash", "existing_dir_in_path", "empty"))
    case.hostile(f"output path: {kind}", in_file=False)
    if kind == "long":
        return long_name(r, suffix)
    if kind == "very_long":
        return "/".join(["d" * 200] * 25) + suffix
    if kind == "missing_dir":
        return "nosuch/out" + suffix
    if kind == "dir":
        case.files["outdir"] = File("dir")
        return "outdir"
    if kind == "dot":
        return "."
    if kind == "undecodable":  # a byte that is not UTF-8 (a command line cannot hold NUL)
        return "o\udcff" + suffix
    if kind == "wrong_suffix":
        return "out.txt"
    if kind == "trailing_slash":
        return "out" + suffix + "/"
    if kind == "existing_dir_in_path":
        case.files["plain.txt"] = File("text", "x\n")
        return "plain.txt/out" + suffix
    return ""


# -- networks a config can name ------------------------------------------------------------

def network_ref(r: Rng, case: Case, folder: str = "", kinds: dict[str, float] | None = None,
                internal_p: float = 0.03) -> tuple[str, dict[str, Any]]:
    """A network for a config: a zoo name or a file written into the case. Returns the
    value for ``network:`` and what it is ({"kind", "batch", "spec"/"trace"})."""
    kind = r.weighted(kinds or {"zoo": 4, "spec": 3, "trace": 3})
    if kind == "zoo":
        name = r.pick(SMALL_ZOO) if r.chance(0.95) else r.pick(("vgg116", "vgg216"))
        return name, {"kind": "zoo", "name": name}
    if kind == "spec":
        spec = gen_spec(r, r.randint(1, 8), internal_p=internal_p)
        fname = r.pick(("net.yaml", "spec.yml", "nets/net.yaml"))
        case.files[folder + fname] = File("yaml", spec)
        return fname, {"kind": "spec", "file": folder + fname, "spec": spec}
    trace = gen_trace(r, r.randint(1, 6), internal_p=internal_p)
    fname = r.pick(("tr.yaml", "trace.yaml", "traces/t.yaml"))
    case.files[folder + fname] = File("yaml", trace)
    return fname, {"kind": "trace", "file": folder + fname, "trace": trace}


def sane_gpu(r: Rng) -> Any:
    preset = r.pick(PRESETS)
    if r.chance(0.6):
        return preset
    g: dict[str, Any] = {"preset": preset}
    for k in r.sample(("memory_bytes",) + GPU_KEYS, r.randint(0, 3)):
        g[k] = sane_value(r, k)
    return g


def sane_value(r: Rng, key: str) -> Any:
    if key == "memory_bytes":
        return r.pick(("64 KiB", "1 MiB", "16 MiB", "256 MiB", "1 GiB", "12 GiB", 2**20,
                       10**8, "0.5 GB", "1.5e9", 3 * 2**30))
    if key in ("link_bw_bytes_per_s", "h2d_bw_bytes_per_s", "d2h_bw_bytes_per_s"):
        return r.pick((1e9, 12.8e9, 25e9, 5e10, 1e6))
    if key == "link_latency_ns":
        return r.pick((0, 1000, 10000, 10**6))
    if key == "duplex":
        return r.chance(0.5)
    if key == "peak_flops_scale":
        return r.pick((0.5, 1.0, 2.0, 0.01))
    if key == "mem_bw_bytes_per_s":
        return r.pick((1e11, 3e11, 2e12))
    if key == "batch_size":
        return r.randint(1, 4)
    if key == "dtype":
        return r.pick(DTYPES)
    if key == "policy":
        return r.pick(POLICIES)
    if key == "policy_options":
        return sane_options(r)
    if key == "gpu":
        return sane_gpu(r)
    raise KeyError(key)


def sane_options(r: Rng) -> dict[str, Any]:
    o: dict[str, Any] = {}
    for k in r.sample(("sync", "prefetch", "reading"), r.randint(0, 3)):
        o[k] = r.pick(("measured", "text")) if k == "reading" else r.chance(0.5)
    return o


def hostile_options(r: Rng) -> Any:
    return r.pick(({"algo": "m"}, {"algo": "p"}, {"which": "conv"}, {"which": "none"},
                   {"foo": 1}, {"sync": "false"}, {"sync": 0}, {"prefetch": "yes"},
                   {"reading": "paper"}, {"reading": ["text"]}, {"reading": None},
                   {"sync": None}, {1: True}, {"sync": True, "algo": "m"}, [], "sync", 5,
                   {"reading": {"a": 1}}))


GPU_HOSTILE = (1e-300, 5e-324, 1e300, 1.7976931348623157e308, INF, NAN, -1.0, 0, 10**30,
               10**400, "1e400", "12 GB/s", "fast", [1e9], {"a": 1}, True, None, 1e-9, 1)


def hostile_gpu_value(r: Rng, key: str) -> Any:
    if key == "memory_bytes":
        return r.pick((INF, NAN, -1, "1e400", ".inf", "1e30 TiB", 10**400, 1e300, "12 GB/s",
                       0, 1, "1.5 B", "-0", b"12", 1.5, "1e-300", 2**63, 2**64, "NaN"))
    if key == "link_latency_ns":
        return r.pick((10**30, 10**18, 2**63, 10**400, -1, 1.5, 1e300, INF, NAN, "10", True))
    if key == "duplex":
        return r.pick(("yes", 0, 1, 2, "false", None, [], NAN))
    return r.pick(GPU_HOSTILE)


def hostile_gpu(r: Rng, case: Case) -> Any:
    g: dict[str, Any] = {"preset": r.pick(PRESETS)}
    for k in r.sample(("memory_bytes",) + GPU_KEYS, r.randint(1, 2)):
        g[k] = hostile_gpu_value(r, k)
        case.hostile(f"gpu.{k} = {g[k]!r:.40}")
    if r.chance(0.1):
        g.pop("preset")
        case.hostile("gpu without preset")
    if r.chance(0.1):
        g["preset"] = hostile(r)
        case.hostile(f"gpu.preset = {g['preset']!r:.40}")
    return g


def hostile_batch(r: Rng) -> Any:
    return r.pick((0, -1, -4, True, False, 2.5, 2.0, 1e-320, 5e-324, 1e300, INF, NAN, "2", "abc",
                   "1e400", [2], {"b": 2}, None, 10**30, 10**400, 2**63, 2**31, -10**400,
                   " 3 ", "0x10", "1_0", "\u0662"))


def hostile_network_value(r: Rng, case: Case, in_file: bool = True) -> Any:
    v = r.pick(("vgg17", "VGG16", "alexnet ", "resnet50", "", " ", 5, None, ["alexnet"],
                {"name": "alexnet"}, "alexnet.yaml", "zoo:alexnet", "torchvision:resnet18",
                True, 1.5, "..", "/", "~/net.yaml", "x" * 300, "net", "a\x00b"))
    case.hostile(f"network = {v!r:.40}", in_file)
    return v


# -- run configs ----------------------------------------------------------------------------

def gen_config(r: Rng, case: Case, folder: str = "",
               net_kinds: dict[str, float] | None = None) -> dict[str, Any]:
    """A valid run config (docs/configs.md); its network files go into the case."""
    net, info = network_ref(r, case, folder, net_kinds)
    cfg: dict[str, Any] = {}
    if r.chance(0.2):
        cfg["name"] = r.pick(("fuzz run", "a run: with colons", "\u00e9t\u00e9", "x" * 200))
    if r.chance(0.1):
        cfg["description"] = "generated"
    cfg["network"] = net
    if info["kind"] == "zoo":
        if r.chance(0.9):
            cfg["batch_size"] = r.randint(1, 4)
    elif info["kind"] == "spec":
        if "batch_size" not in info["spec"] or r.chance(0.5):
            cfg["batch_size"] = r.randint(1, 8)
    elif r.chance(0.3):
        cfg["batch_size"] = info["trace"]["batch_size"]
    if r.chance(0.7):
        cfg["gpu"] = sane_gpu(r)
    if r.chance(0.2):
        cfg["dtype"] = r.pick(DTYPES)
    which = r.weighted({"policy": 4, "policies": 4, "none": 1})
    if which == "policy":
        cfg["policy"] = r.pick(POLICIES)
    elif which == "policies":
        cfg["policies"] = r.sample(POLICIES, r.randint(1, 3))
    if r.chance(0.25):
        cfg["policy_options"] = sane_options(r)
    if r.chance(0.35):
        cfg["memory_bytes"] = sane_value(r, "memory_bytes")
    return cfg


def mutate_config(r: Rng, case: Case, cfg: dict[str, Any]) -> dict[str, Any]:
    op = r.weighted({"generic": 4, "batch": 2, "gpu": 3, "options": 2, "network": 2,
                     "policy": 1, "memory": 1, "internal_names": 1})
    cfg = dict(cfg)
    if op == "generic":
        return mutate_doc(r, cfg, case, "config", r.randint(1, 2))
    if op == "batch":
        cfg["batch_size"] = hostile_batch(r)
        case.hostile(f"batch_size = {cfg['batch_size']!r:.40}")
    elif op == "gpu":
        cfg["gpu"] = hostile_gpu(r, case)
    elif op == "options":
        cfg["policy_options"] = hostile_options(r)
        case.hostile(f"policy_options = {cfg['policy_options']!r}")
        if r.chance(0.5):
            cfg.pop("policies", None)
            cfg["policy"] = r.pick(POLICIES)
    elif op == "network":
        if r.chance(0.5):
            cfg["network"] = hostile_path(r, case)
            case.in_files = True
        else:
            cfg["network"] = hostile_network_value(r, case)
    elif op == "policy":
        v = r.pick(("vdnn_fast", "", "BASELINE_P", 5, None, ["baseline_p"], "baseline_p ",
                    {"name": "x"}))
        if r.chance(0.5):
            cfg.pop("policies", None)
            cfg["policy"] = v
        else:
            cfg.pop("policy", None)
            cfg["policies"] = r.pick(([v], [], ["baseline_p", v], ["baseline_p"] * 3, v))
        case.hostile(f"policy/policies hold {v!r}")
    elif op == "memory":
        cfg["memory_bytes"] = hostile_gpu_value(r, "memory_bytes")
        case.hostile(f"memory_bytes = {cfg['memory_bytes']!r:.40}")
    else:  # a network whose names collide with the engine's own keys
        net, _ = network_ref(r, case, "", {"spec": 1, "trace": 1}, internal_p=0.5)
        cfg["network"] = net
        cfg.pop("batch_size", None)
        case.hostile("network with internal names")
    return cfg


def write_yaml(r: Rng, case: Case, path: str, doc: Any, text_p: float = 0.08) -> None:
    if r.chance(text_p):
        case.files[path] = mutate_text(r, dump(doc), case, path)
    else:
        case.files[path] = File("yaml", doc)


def mutate_network_file(r: Rng, case: Case) -> bool:
    """Mutate a spec or trace file already in the case. False if there is none."""
    names = [k for k, f in case.files.items() if f.kind == "yaml" and isinstance(f.data, dict)
             and ("layers" in f.data) and k.endswith((".yaml", ".yml"))]
    if not names:
        return False
    name = r.pick(names)
    doc = case.files[name].data
    if "format" in doc and r.chance(0.6):
        case.files[name] = File("yaml", mutate_trace(r, case, doc))
    elif "input" in doc and r.chance(0.6):
        case.files[name] = File("yaml", mutate_spec(r, case, doc))
    elif r.chance(0.15):
        case.files[name] = mutate_text(r, dump(doc), case, name)
    else:
        case.files[name] = File("yaml", mutate_doc(r, doc, case, name, r.randint(1, 2)))
    return True


def mutate_spec(r: Rng, case: Case, spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    layers = spec["layers"]
    i = r.randrange(len(layers))
    op = r.pick(("input_shape", "batch", "kernel", "type", "ref", "dup", "internal", "inplace",
                 "key", "empty", "groups", "p", "huge"))
    case.hostile(f"spec: {op}")
    if op == "input_shape":
        spec["input"] = r.pick(([0, 1, 1], [-1, 2, 2], [3, 2], [1, 2, 3, 4], [10**6] * 3,
                                [10**30, 1, 1], [1e300, 1, 1], [INF, 1, 1], "3x224x224", None,
                                [1.5, 2, 2], [True, 2, 2]))
    elif op == "batch":
        spec["batch_size"] = hostile_batch(r)
    elif op == "kernel":
        layers[i]["kernel"] = r.pick((0, -1, 10**6, 10**30, 2.5, "3", None, INF))
        layers[i].setdefault("type", "conv")
    elif op == "type":
        layers[i]["type"] = r.pick(("Conv", "linear", "", None, 5, "concat", "add", "lstm"))
    elif op == "ref":
        layers[i]["inputs"] = r.pick((["ghost"], [layers[-1]["name"]], [], ["data", "data"],
                                      "data", [5], [None], [layers[i]["name"]]))
    elif op == "dup":
        layers.insert(i, copy.deepcopy(layers[i]))
    elif op == "internal":
        old = layers[i]["name"]
        new = internal_name(r, layers[max(0, i - 1)]["name"])
        layers[i]["name"] = new
        for layer in layers:
            if layer.get("inputs"):
                layer["inputs"] = [new if x == old else x for x in layer["inputs"]]
    elif op == "inplace":
        layers[i]["inplace"] = r.pick((True, False, "yes", 1, None))
    elif op == "key":
        layers[i][r.pick(("out", "stride", "pad", "groups", "size", "bias", "ceil_mode"))] = \
            hostile(r)
    elif op == "empty":
        spec["layers"] = r.pick(([], None, {}, [{}], [None]))
    elif op == "groups":
        layers[i]["groups"] = r.pick((0, 3, 7, 10**9, -2))
    elif op == "p":
        layers[i]["p"] = r.pick((1.0, -0.1, NAN, INF, 2))
        layers[i]["type"] = "dropout"
    else:
        layers[i]["out"] = r.pick((10**6, 10**9, 10**12, 2**40))
        layers[i]["type"] = r.pick(("conv", "fc"))
        layers[i].setdefault("kernel", 1)
    return spec


def mutate_trace(r: Rng, case: Case, trace: dict[str, Any]) -> dict[str, Any]:
    trace = copy.deepcopy(trace)
    tensors, layers = trace["tensors"], trace["layers"]
    t = r.randrange(len(tensors))
    li = r.randrange(len(layers))
    op = r.pick(("unknown_alias", "alias_cycle", "self_alias", "alias_size", "dup_tensor",
                 "dup_layer", "internal_tensor", "internal_layer", "unknown_ref", "saved_foreign",
                 "written_twice", "unwritten", "read_before_write", "layer_cycle", "size",
                 "time", "algos", "batch", "version", "format", "write_input", "resident",
                 "step", "alias_of_input", "kind", "requires_grad", "shuffle_tensors",
                 "unknown_alias_root", "alias_to_later"))
    case.hostile(f"trace: {op}")
    if op == "unknown_alias":
        tensors[t]["alias_of"] = r.pick(("ghost", "", "DATA", 5, None))
    elif op == "alias_cycle" and len(tensors) > 2:
        a, b = r.sample(range(1, len(tensors)), 2)
        tensors[a]["alias_of"], tensors[b]["alias_of"] = tensors[b]["id"], tensors[a]["id"]
        tensors[a]["size_bytes"] = tensors[b]["size_bytes"]
    elif op == "self_alias":
        tensors[t]["alias_of"] = tensors[t]["id"]
    elif op == "alias_size":
        aliases = [x for x in tensors if x.get("alias_of")] or tensors
        r.pick(aliases)["size_bytes"] = r.randint(0, 10**6)
    elif op == "dup_tensor" and len(tensors) > 1:
        tensors[t]["id"] = tensors[(t + 1) % len(tensors)]["id"]
    elif op == "dup_layer" and len(layers) > 1:
        layers[li]["id"] = layers[(li + 1) % len(layers)]["id"]
    elif op in ("internal_tensor", "internal_layer"):
        new = internal_name(r, layers[li]["id"])
        if op == "internal_layer":
            layers[li]["id"] = new
        else:
            old = tensors[t]["id"]
            tensors[t]["id"] = new
            for x in tensors:
                if x.get("alias_of") == old:
                    x["alias_of"] = new
            for layer in layers:
                for k in ("inputs", "outputs", "saved"):
                    layer[k] = [new if y == old else y for y in layer.get(k, [])]
    elif op == "unknown_ref":
        key = r.pick(("inputs", "outputs", "saved"))
        layers[li].setdefault(key, []).append(r.pick(("ghost", "", "Data")))
    elif op == "saved_foreign":
        layers[li]["saved"] = layers[li].get("saved", []) + ["data"]
    elif op == "written_twice":
        layers[li]["outputs"] = layers[li].get("outputs", []) + [layers[0]["outputs"][0]]
    elif op == "unwritten":
        tensors.append({"id": "orphan", "size_bytes": 1})
    elif op == "read_before_write":
        layers[0]["inputs"] = [layers[-1]["outputs"][0]]
    elif op == "layer_cycle":
        layers[0]["inputs"] = layers[0].get("inputs", []) + [layers[-1]["outputs"][0]]
    elif op == "size":
        tensors[t]["size_bytes"] = r.pick((-5, "1e400", INF, NAN, 10**19, 2**50, 2**50 + 1,
                                           2**49, "1e30 TiB", 1.5, "160.5", "12 MB/s", True,
                                           None, [], 10**400, 1e300, "1 PiB", " 8 kib"))
    elif op == "time":
        key = r.pick(("fwd_ns", "bwd_ns"))
        if "algos" in layers[li]:
            layers[li]["algos"][0][key] = r.pick((-1, 10**18, 10**18 + 1, 10**400, INF, NAN,
                                                  1.5, "10", True, None))
        else:
            layers[li][key] = r.pick((-1, 10**18, 10**18 + 1, 10**400, INF, NAN, 1.5, "10",
                                      True, None))
    elif op == "algos":
        layers[li].pop("fwd_ns", None)
        layers[li].pop("bwd_ns", None)
        layers[li]["algos"] = r.pick(([], None, [{}], [{"name": "x", "fwd_ns": 1}],
                                      [{"name": "implicit_gemm", "fwd_ns": 1, "bwd_ns": 1,
                                        "fwd_workspace_bytes": "1e400"}],
                                      [{"name": "fft", "fwd_ns": 0, "bwd_ns": 0,
                                        "fwd_workspace_bytes": 2**50}]))
    elif op == "batch":
        trace["batch_size"] = hostile_batch(r)
    elif op == "version":
        trace["version"] = r.pick((2, 1.0, True, "1", None, 0))
    elif op == "format":
        trace["format"] = r.pick(("vdnnsim-trace-2", "", None, "VDNNSIM-TRACE"))
    elif op == "write_input":
        layers[li]["outputs"] = layers[li].get("outputs", []) + ["data"]
    elif op == "resident":
        trace["resident_bytes"] = r.pick((-1, "1e400", INF, 2**50, 2**49, "1 TiB", NAN))
    elif op == "step":
        trace["step_ns"] = r.pick((-1, 10**18, 10**19, INF, NAN, "1"))
    elif op == "alias_of_input":
        tensors[t]["alias_of"] = "data"
        tensors[t]["size_bytes"] = tensors[0]["size_bytes"]
    elif op == "kind":
        tensors[t]["kind"] = r.pick(("weights", "input", "extra", "activation", "", None))
    elif op == "shuffle_tensors":  # valid: the order of tensors is free
        r.shuffle(tensors)
    elif op == "unknown_alias_root":  # the root of an alias chain names no tensor
        targets = [x["alias_of"] for x in tensors if x.get("alias_of")]
        want = r.pick(targets) if targets else None
        if targets and any(x["id"] == want for x in tensors):
            root = next(x for x in tensors if x["id"] == want)
        else:
            root = tensors[t]
            tensors.insert(0, {"id": "view", "size_bytes": root["size_bytes"],
                               "alias_of": root["id"]})
            layers[li].setdefault("outputs", []).append("view")
        root["alias_of"] = r.pick(("ghost", "gh0st"))
    elif op == "alias_to_later":  # an alias listed before its root (allowed)
        if len(tensors) > 2:
            a, b = sorted(r.sample(range(1, len(tensors)), 2))
            tensors[a]["alias_of"] = tensors[b]["id"]
            tensors[a]["size_bytes"] = tensors[b]["size_bytes"]
    else:
        tensors[t]["requires_grad"] = r.pick(("yes", 1, None, True, False))
    return trace


def gen_run(r: Rng, case: Case) -> None:
    folder = "sub/" if r.chance(0.15) else ""
    cfg = gen_config(r, case, folder)
    if r.chance(0.7):
        if r.chance(0.7):
            cfg = mutate_config(r, case, cfg)
        else:
            if not mutate_network_file(r, case):
                cfg = mutate_config(r, case, cfg)
    cfg_name = folder + r.pick(("cfg.yaml", "run.yml", "c.YAML", "config"))
    write_yaml(r, case, cfg_name, cfg)
    case.label = "run"
    argv = ["run", cfg_name]
    if r.chance(0.8):
        argv.append("--json")
    if r.chance(0.12):
        out = "t.json" if r.chance(0.7) else hostile_out_path(r, case, ".json")
        argv += ["--chrome-trace", out]
        if out == "t.json":
            case.outputs.append(out)
    if r.chance(0.05):
        argv = _shuffle_args(r, case, argv)
    case.argv = argv


def _shuffle_args(r: Rng, case: Case, argv: list[str]) -> list[str]:
    op = r.pick(("dup_flag", "unknown_flag", "extra_positional", "double_dash", "equals"))
    case.hostile(f"argv: {op}", in_file=False)
    argv = list(argv)
    if op == "dup_flag":
        argv.append(r.pick(("--json", "--help", "-h")))
    elif op == "unknown_flag":
        argv.insert(r.randint(1, len(argv)), r.pick(("--fast", "-x", "--jsn", "---", "-")))
    elif op == "extra_positional":
        argv.append("extra.yaml")
    elif op == "double_dash":
        argv.insert(1, "--")
    else:
        argv.append("--chrome-trace=")
    return argv


# -- studies -------------------------------------------------------------------------------

def gen_study_doc(r: Rng, case: Case, folder: str = "") -> dict[str, Any]:
    """A valid study of at most a few dozen runs on tiny networks."""
    base: dict[str, Any] = {}
    net, info = network_ref(r, case, folder, {"zoo": 2, "spec": 4, "trace": 4})
    base["network"] = net
    if info["kind"] == "zoo":
        base["batch_size"] = r.randint(1, 2)
    elif info["kind"] == "spec" and "batch_size" not in info["spec"]:
        base["batch_size"] = r.randint(1, 4)
    if r.chance(0.5):
        base["gpu"] = sane_gpu(r)
    if r.chance(0.2):
        base["policy_options"] = sane_options(r)
    if r.chance(0.3):
        base["memory_bytes"] = sane_value(r, "memory_bytes")
    study: dict[str, Any] = {}
    if r.chance(0.3):
        study["name"] = "fuzz study"
    if r.chance(0.9):
        study["base"] = base
    layout = r.weighted({"sweep": 4, "zip": 2, "runs": 2, "all": 1, "base": 1})
    free = [k for k in ("policy", "memory_bytes", "dtype", "policy_options") + GPU_KEYS
            if k not in base]
    if info["kind"] != "trace":
        free.append("batch_size")
    if layout in ("sweep", "all"):
        keys = r.sample(free, r.randint(1, 2))
        study["sweep"] = {k: [sane_value(r, k) for _ in range(r.randint(1, 3))] for k in keys}
        free = [k for k in free if k not in keys]
    if layout in ("zip", "all"):
        n = r.randint(1, 3)
        keys = r.sample(free, min(len(free), r.randint(1, 2)))
        study["zip"] = {k: [sane_value(r, k) for _ in range(n)] for k in keys}
    if layout in ("runs", "all"):
        study["runs"] = [{k: sane_value(r, k) for k in r.sample(free, r.randint(0, 2))}
                         for _ in range(r.randint(1, 3))]
        if r.chance(0.2):
            n2, _ = network_ref(r, case, folder, {"zoo": 1, "spec": 2})
            study["runs"].append({"network": n2, "batch_size": 1})
    if layout == "base" and "base" not in study:
        study["base"] = base
    return study


def mutate_study(r: Rng, case: Case, study: dict[str, Any]) -> dict[str, Any]:
    study = copy.deepcopy(study)
    op = r.weighted({"generic": 3, "unhashable": 2, "value": 3, "options": 1, "structure": 2,
                     "gpu": 1, "network": 1})
    section = r.pick(("sweep", "zip", "runs", "base"))
    if op == "generic":
        return mutate_doc(r, study, case, "study", r.randint(1, 2))
    key = r.pick(("batch_size", "network", "policy", "gpu", "dtype", "memory_bytes",
                  "policy_options") + GPU_KEYS)
    if op == "unhashable":
        v = r.pick(([1, 2], {"a": 1}, [[1]], {"preset": "k40", "x": [1]}, {"k40"}))
    elif op == "value":
        v = (hostile_batch(r) if key == "batch_size" else
             hostile_gpu_value(r, key) if key in GPU_KEYS + ("memory_bytes",) else hostile(r))
    elif op == "options":
        key, v = "policy_options", hostile_options(r)
    elif op == "gpu":
        key, v = "gpu", hostile_gpu(r, case)
    elif op == "network":
        key, v = "network", hostile_network_value(r, case)
    else:
        s = r.pick(("zip_lengths", "empty_list", "both", "unknown", "not_list", "runs_not_list",
                    "empty_study", "no_network", "gpu_no_preset", "sweep_scalar"))
        case.hostile(f"study: {s}")
        if s == "zip_lengths":
            study["zip"] = {"policy": ["baseline_p"], "batch_size": [1, 2]}
        elif s == "empty_list":
            study["sweep"] = {"policy": []}
        elif s == "both":
            study["sweep"] = {"policy": ["baseline_p"]}
            study["zip"] = {"policy": ["vdnn_dyn"]}
        elif s == "unknown":
            study.setdefault("sweep", {})["colour"] = ["red"]
        elif s == "not_list":
            study["sweep"] = {"policy": "baseline_p"}
        elif s == "runs_not_list":
            study["runs"] = {"network": "alexnet"}
        elif s == "empty_study":
            study = r.pick(({}, {"base": {}}, {"sweep": {}}, {"runs": []}, {"runs": [{}]}))
        elif s == "no_network":
            study.get("base", {}).pop("network", None)
        elif s == "gpu_no_preset":
            study.setdefault("base", {})["gpu"] = {"memory_bytes": "1 GiB"}
        else:
            study["sweep"] = {"batch_size": 4}
        return study
    case.hostile(f"study {section}.{key} = {v!r:.40}")
    if section == "sweep":
        lst = [sane_value(r, key) if key != "network" else "alexnet"] if r.chance(0.5) else []
        study.setdefault("sweep", {})[key] = lst + [v]
        study.get("zip", {}).pop(key, None)
    elif section == "zip":
        z = study.setdefault("zip", {})
        n = len(next(iter(z.values()))) if z else 1
        z[key] = [v] * n
        study.get("sweep", {}).pop(key, None)
    elif section == "runs":
        study.setdefault("runs", [{}]).append({key: v})
    else:
        study.setdefault("base", {})[key] = v
    return study


def gen_study(r: Rng, case: Case) -> None:
    folder = "sub/" if r.chance(0.1) else ""
    study = gen_study_doc(r, case, folder)
    if r.chance(0.65):
        if r.chance(0.8) or not mutate_network_file(r, case):
            study = mutate_study(r, case, study)
    name = folder + r.pick(("study.yaml", "s.yml"))
    write_yaml(r, case, name, study)
    case.label = "study"
    if r.chance(0.55):
        case.argv = ["run", name] + (["--json"] if r.chance(0.85) else [])
        if r.chance(0.05):
            case.argv += ["--chrome-trace", "t.json"]
            case.outputs.append("t.json")
        return
    argv = ["sweep", name]
    if r.chance(0.7):
        out = r.pick(("out.csv", "out.parquet", "res/out.csv"))
        if out.startswith("res/"):
            case.files["res"] = File("dir")
        if r.chance(0.15):
            out = hostile_out_path(r, case, r.pick((".csv", ".parquet")))
        else:
            case.outputs.append(out)
        argv += ["-o", out]
    if r.chance(0.5):
        argv.append("--no-progress")
    if r.chance(0.08):
        argv += ["--workers", r.pick(("2", "0", "-1", "1", "3"))]
    case.argv = argv


# -- the trace command ---------------------------------------------------------------------

def gen_trace_cmd(r: Rng, case: Case) -> None:
    case.label = "trace"
    argv = ["trace"]
    kind = r.weighted({"zoo": 3, "spec": 4, "trace": 2, "hostile": 1})
    batch: int | None = None
    if kind == "zoo":
        net = r.pick(SMALL_ZOO)
        batch = r.randint(1, 4)
    elif kind == "spec":
        spec = gen_spec(r, r.randint(1, 8), internal_p=0.03)
        if r.chance(0.5):
            spec = mutate_spec(r, case, spec)
        net = "net.yaml"
        write_yaml(r, case, net, spec, 0.05)
        if "batch_size" not in spec or r.chance(0.5):
            batch = r.randint(1, 8)
    elif kind == "trace":
        tr = gen_trace(r, r.randint(1, 6), internal_p=0.03)
        if r.chance(0.5):
            tr = mutate_trace(r, case, tr)
        net = "tr.yaml"
        write_yaml(r, case, net, tr, 0.05)
        if r.chance(0.3):
            batch = tr["batch_size"] if isinstance(tr.get("batch_size"), int) else 1
    else:
        net = (hostile_path(r, case, argv=True) if r.chance(0.5)
               else str(hostile_network_value(r, case, in_file=False)))
    argv.append(net)
    if batch is not None:
        argv += [r.pick(("-b", "--batch-size")), str(batch)]
    if r.chance(0.1):
        argv += ["-b", r.pick(("0", "-3", "abc", "1e3", "2.5", "99999999999", "10" * 30, ""))]
        case.hostile("trace -b", in_file=False)
    if r.chance(0.4):
        argv += ["--gpu", r.pick(PRESETS) if r.chance(0.9) else r.pick(("k41", "", "K40"))]
        if argv[-1] not in PRESETS:
            case.hostile(f"--gpu {argv[-1]!r}", in_file=False)
    if r.chance(0.2):
        argv += ["--dtype", r.pick(DTYPES) if r.chance(0.9) else "fp64"]
        if argv[-1] not in DTYPES:
            case.hostile("--dtype fp64", in_file=False)
    out = r.pick(("-", "-", "out.yaml", "out/t.yaml"))
    if out.startswith("out/"):
        case.files["out"] = File("dir")
    if r.chance(0.1):
        out = hostile_out_path(r, case, ".yaml")
    elif out != "-":
        case.outputs.append(out)
    if r.chance(0.97):
        argv += ["-o", out]
    else:
        case.hostile("no -o", in_file=False)
    if r.chance(0.03):
        argv += ["--model", r.pick(("zoo:alexnet", "torchvision:nosuchnet", "bogus", "",
                                    "zoo:", "torchvision:"))]
        case.hostile("trace --model", in_file=False)
    case.argv = argv


# -- maxbatch, plot, validate, list, reproduce, argv soup --------------------------------------

def gen_maxbatch(r: Rng, case: Case) -> None:
    case.label = "maxbatch"
    argv = ["maxbatch"]
    for _ in range(r.randint(1, 2)):
        if r.chance(0.6):
            spec = gen_spec(r, r.randint(1, 6), batch=r.chance(0.5))
            name = f"net{len(case.files)}.yaml"
            if r.chance(0.2):
                spec = mutate_spec(r, case, spec)
            case.files[name] = File("yaml", spec)
            argv += ["-n", name]
        elif r.chance(0.8):
            argv += ["-n", r.pick(("alexnet", "vgg16"))]
        else:
            argv += ["-n", str(hostile_network_value(r, case, in_file=False))]
    if r.chance(0.7):
        argv += ["-g", r.pick(PRESETS) if r.chance(0.9) else r.pick(("k41", ""))]
        if argv[-1] not in PRESETS:
            case.hostile(f"-g {argv[-1]!r}", in_file=False)
    if r.chance(0.7):
        argv += ["-p", r.pick(POLICIES) if r.chance(0.9) else r.pick(("nope", ""))]
        if argv[-1] not in POLICIES:
            case.hostile(f"-p {argv[-1]!r}", in_file=False)
    limit = r.pick((8, 32, 64, 256))
    if r.chance(0.1):
        limit = r.pick((0, -1, 1, 10**30))
        case.hostile(f"--limit {limit}", in_file=False)
    argv += ["--limit", str(limit)]
    mem = r.pick(("1 MiB", "16 MiB", "64 MiB", "256 MiB"))
    if r.chance(0.15):
        mem = r.pick(("1e400", "-5", "12 GB/s", "", "inf", "nan", "0", "1e30 TiB", "1 B"))
        case.hostile(f"--memory {mem}", in_file=False)
    argv += ["--memory", mem]
    if r.chance(0.2):
        argv += ["--dtype", r.pick(DTYPES)]
    if r.chance(0.8):
        argv.append("--json")
    case.argv = argv


def gen_plot(r: Rng, case: Case) -> None:
    case.label = "plot"
    kind = r.pick(("memory", "timeline", "sweep", "sweep", "validation"))
    suffix = r.pick((".png", ".svg", ".pdf"))
    out = "fig" + suffix
    if kind in ("memory", "timeline"):
        cfg = gen_config(r, case, "", {"spec": 1, "trace": 1})
        cfg["policy"] = r.pick(POLICIES)
        cfg.pop("policies", None)
        if r.chance(0.3):
            cfg = mutate_config(r, case, cfg)
        write_yaml(r, case, "cfg.yaml", cfg)
        inp = "cfg.yaml"
    elif kind == "sweep":
        if r.chance(0.5):
            study = gen_study_doc(r, case)
            if r.chance(0.3):
                study = mutate_study(r, case, study)
            write_yaml(r, case, "study.yaml", study)
            inp = "study.yaml"
        else:
            inp = "res.csv"
            case.files[inp] = File("text", r.pick((
                "network,gpu,policy,batch_size,peak_memory_bytes,slowdown,fits\n"
                "alexnet,k40,baseline_p,1,100,1.0,True\nalexnet,k40,vdnn_dyn,2,200,1.2,False\n",
                "", "a,b\n1,2\n", "network,gpu,policy,batch_size,peak_memory_bytes,slowdown,fits\n",
                "network,gpu,policy,batch_size,peak_memory_bytes,slowdown,fits\n"
                "x,k40,p,abc,nan,inf,maybe\n", "\xff\xfe", "\"unclosed\n")))
            if r.chance(0.1):
                inp = "missing.csv"
    else:
        inp, meas = _validation_inputs(r, case)
    argv = ["plot", kind, inp, "-o", out]
    if kind == "validation":
        if r.chance(0.9):
            argv += ["--measurements", meas]
        else:
            case.hostile("no --measurements", in_file=False)
    if r.chance(0.1):
        argv[-1 if kind != "validation" else 4] = hostile_out_path(r, case, suffix)
    else:
        case.outputs.append(out)
    case.argv = argv


def _validation_inputs(r: Rng, case: Case) -> tuple[str, str]:
    traces = []
    for i in range(r.randint(1, 2)):
        tr = gen_trace(r, r.randint(1, 4), name=f"m{i}")
        tr.setdefault("source", {})["framework"] = "pytorch" if r.chance(0.7) else "torch7"
        if r.chance(0.15):
            tr = mutate_trace(r, case, tr)
        case.files[f"traces/m{i}.yaml"] = File("yaml", tr)
        traces.append(tr)
    recs = []
    for tr in traces:
        for pol in r.sample(("baseline", "vdnn_all", "vdnn_conv", "save_on_cpu"), 2):
            fits = r.chance(0.8)
            rec: dict[str, Any] = {"model": f"torchvision:{tr.get('name')}",
                                   "batch_size": tr.get("batch_size"), "policy": pol,
                                   "fits": fits}
            if r.chance(0.3):
                rec["memory_cap_bytes"] = r.pick((2**20, 2**30, 10**6))
            if fits:
                rec.update(peak_allocated_bytes=r.randint(1, 10**9),
                           peak_reserved_bytes=r.randint(1, 10**9),
                           iteration_ms=r.uniform(0.1, 100))
            recs.append(rec)
    if r.chance(0.4):
        rec = r.pick(recs)
        k = r.pick(list(rec))
        rec[k] = r.pick((None, "abc", 0, -1, [], {}, True, "1e400", 1e400 * 0, 10**400))
        case.hostile(f"measurements: {k} = {rec[k]!r:.30}")
    if r.chance(0.1):
        r.pick(recs).pop(r.pick(("model", "batch_size", "policy", "fits",
                                 "peak_allocated_bytes")), None)
        case.hostile("measurements: a key missing")
    meas: Any = recs
    if r.chance(0.1):
        meas = r.pick(({"runs": recs}, "text", [1, 2], []))
        case.hostile("measurements: not a list of records")
    if r.chance(0.05):
        case.files["meas.json"] = File("text", r.pick(("{not json", "", "\xff")))
        case.hostile("measurements: not JSON")
    else:
        case.files["meas.json"] = File("json", meas)
    return "traces", "meas.json"


def gen_validate(r: Rng, case: Case) -> None:
    case.label = "validate"
    traces, meas = _validation_inputs(r, case)
    if r.chance(0.3):
        traces = r.pick(("traces/m0.yaml", "nosuch", "meas.json", "."))
        if traces != "traces/m0.yaml":
            case.hostile(f"validate: traces {traces}", in_file=False)
    if r.chance(0.1):
        meas = hostile_path(r, case, ".json", argv=True)
    argv = ["validate", traces, meas]
    if r.chance(0.4):
        argv += ["--gpu", r.pick(PRESETS) if r.chance(0.9) else "k41"]
        if argv[-1] == "k41":
            case.hostile("--gpu k41", in_file=False)
    if r.chance(0.7):
        argv.append("--json")
    case.argv = argv


def gen_list(r: Rng, case: Case) -> None:
    case.label = "list"
    what = r.pick(([], ["all"], ["networks"], ["gpus"], ["policies"], ["foo"], ["gpus", "x"],
                   ["--help"], [""]))
    if what and what[0] in ("foo", "") or len(what) > 1:
        case.hostile("list topic", in_file=False)
    case.argv = ["list"] + what


def gen_reproduce(r: Rng, case: Case) -> None:
    case.label = "reproduce"
    v = r.pick((["--help"], ["-h"], ["--reading", "paper"], ["--reference", "nope"],
                ["--studies", "nosuch"], ["--studies", "empty"], ["--studies", "x.yaml"],
                ["--json", "--studies", "tiny"], ["--bogus"], ["--studies", "a\udcffb"],
                ["--studies", long_name(r, "")]))
    if "empty" in v:
        case.files["empty"] = File("dir")
    if "x.yaml" in v:
        case.files["x.yaml"] = File("text", "network: alexnet\n")
    if "tiny" in v:  # the study names the paper's, with tiny contents
        for name in ("baseline_memory", "conventional_policies", "deep_vgg"):
            spec = gen_spec(r, 3)
            case.files[f"tiny/net_{name}.yaml"] = File("yaml", spec)
            case.files[f"tiny/{name}.yaml"] = File("yaml", {
                "base": {"network": f"net_{name}.yaml", "batch_size": 1},
                "sweep": {"policy": ["baseline_p", "vdnn_all_m"]}})
    if v not in (["--help"], ["-h"]):
        case.hostile("reproduce arguments", in_file=False)
    case.argv = ["reproduce"] + v


def gen_soup(r: Rng, case: Case) -> None:
    """Argument vectors made of random tokens."""
    case.label = "argv"
    tokens = ["run", "trace", "sweep", "plot", "maxbatch", "reproduce", "list", "validate",
              "--json", "--help", "-h", "-o", "-", "--", "-b", "0", "1", "-1", "alexnet",
              "cfg.yaml", "missing.yaml", "--gpu", "k40", "--dtype", "fp64", "memory",
              "--workers", "x", "", " ", "\u00e9", "\udcff", "--output=", "-oout.yaml",
              "--batch-size=2", "--limit", "-n", "-p", "vdnn_dyn", "--memory", "1 GiB",
              "frobnicate", "--version", "a" * 300, "--chrome-trace", "t.json", "-g",
              "--scheduler", "--model", "zoo:alexnet", "--measurements"]
    case.files["cfg.yaml"] = File("yaml", {"network": "alexnet", "batch_size": 1,
                                           "policy": "baseline_p"})
    case.argv = [r.pick(tokens) for _ in range(r.randint(0, 6))]
    case.hostile("random argv", in_file=False)


# -- the Python API ------------------------------------------------------------------------

def gen_api(r: Rng, case: Case) -> None:
    case.label = "api"
    fn = r.weighted({"simulate": 6, "sweep": 2, "run_trace": 1, "build_trace": 1,
                     "gpu_preset": 1, "load_trace": 1})
    bad = r.randint(0, 2)  # how many arguments to make hostile
    hostile_keys: set[str] = set()

    def h(key: str) -> bool:
        nonlocal bad
        if bad and r.chance(0.5):
            bad -= 1
            hostile_keys.add(key)
            case.hostile(f"api argument {key}", in_file=False)
            return True
        return False

    def network_arg() -> tuple[Any, dict[str, Any]]:
        if h("network"):
            if r.chance(0.4):
                return hostile_path(r, case), {"kind": "hostile"}
            return hostile_network_value(r, case), {"kind": "hostile"}
        net, info = network_ref(r, case, "", {"zoo": 3, "spec": 3, "trace": 3})
        if info["kind"] != "zoo":
            form = r.pick(("str", "path", "object"))
            if form == "path":
                net = {"$path": net}
            elif form == "object":
                net = {"$trace": net} if info["kind"] == "trace" else {"$spec": net}
        return net, info

    if fn in ("simulate", "build_trace"):
        net, info = network_arg()
        args: list[Any] = [net]
        kwargs: dict[str, Any] = {}
        if h("batch_size"):
            kwargs["batch_size"] = hostile_batch(r)
        elif info["kind"] == "zoo" or (info["kind"] == "spec" and (
                "batch_size" not in info["spec"] or r.chance(0.5))):
            kwargs["batch_size"] = r.randint(1, 4)
        elif info["kind"] == "trace" and r.chance(0.3):
            kwargs["batch_size"] = info["trace"]["batch_size"]
        if fn == "build_trace":
            args.append(kwargs.pop("batch_size", None))
            args.append({"$gpu": [r.pick(PRESETS), None]})
            if r.chance(0.3):
                args.append(r.pick(DTYPES) if not h("dtype") else hostile(r))
        else:
            if r.chance(0.5):
                kwargs["gpu"] = (hostile(r) if h("gpu") else
                                 r.pick(PRESETS) if r.chance(0.8) else
                                 {"$gpu": [r.pick(PRESETS), None]})
            if r.chance(0.7):
                kwargs["policy"] = hostile(r) if h("policy") else r.pick(POLICIES)
            if r.chance(0.2):
                kwargs["dtype"] = hostile(r) if h("dtype") else r.pick(DTYPES)
            if r.chance(0.3):
                if h("gpu_overrides"):
                    g = hostile_gpu(r, case)
                    g.pop("preset", None)
                    kwargs["gpu_overrides"] = g if r.chance(0.8) else hostile(r)
                else:
                    g = sane_gpu(r)
                    kwargs["gpu_overrides"] = {k: v for k, v in g.items()
                                               if k != "preset"} if isinstance(g, dict) else {}
            if r.chance(0.3):
                kwargs["policy_options"] = (hostile_options(r) if h("policy_options")
                                            else sane_options(r))
            if r.chance(0.3):
                kwargs["memory_bytes"] = (hostile_gpu_value(r, "memory_bytes")
                                          if h("memory_bytes")
                                          else r.pick((2**20, 2**24, 10**9, 12 * 2**30)))
        case.api = {"fn": fn, "args": args, "kwargs": kwargs}
    elif fn == "run_trace":
        tr = gen_trace(r, r.randint(1, 5), internal_p=0.05)
        case.files["tr.yaml"] = File("yaml", tr)
        kwargs = {}
        if r.chance(0.5):
            kwargs["policy_options"] = (hostile_options(r) if h("policy_options")
                                        else sane_options(r))
        if r.chance(0.5):
            kwargs["memory_bytes"] = (hostile_gpu_value(r, "memory_bytes") if h("memory_bytes")
                                      else r.pick((2**10, 2**20, 10**9)))
        policy = hostile(r) if h("policy") else r.pick(POLICIES)
        case.api = {"fn": fn, "args": [{"$trace": "tr.yaml"},
                                       {"$gpu": [r.pick(PRESETS), None]}, policy],
                    "kwargs": kwargs}
    elif fn == "gpu_preset":
        name = hostile(r) if h("name") else r.pick(PRESETS)
        over: Any = None
        if r.chance(0.7):
            if h("overrides") or r.chance(0.3):
                g = hostile_gpu(r, case)
                g.pop("preset", None)
                over = g
                case.in_argv = True
            else:
                g = sane_gpu(r)
                over = {k: v for k, v in g.items() if k != "preset"} if isinstance(g, dict) \
                    else {}
        case.api = {"fn": fn, "args": [name, over], "kwargs": {}}
    elif fn == "load_trace":
        tr = gen_trace(r, r.randint(1, 5), internal_p=0.1)
        if r.chance(0.6):
            tr = mutate_trace(r, case, tr)
        write_yaml(r, case, "tr.yaml", tr, 0.1)
        path: Any = "tr.yaml"
        if h("path"):
            path = r.pick((hostile_path(r, case), 5, None, ["tr.yaml"], b"tr.yaml"))
        case.api = {"fn": fn, "args": [path], "kwargs": {}}
    else:  # sweep
        study = gen_study_doc(r, case)
        if r.chance(0.5):
            study = mutate_study(r, case, study)
            case.in_argv = True
        form = r.pick(("dict", "path", "path"))
        if form == "dict":
            arg: Any = study
        else:
            write_yaml(r, case, "study.yaml", study, 0.05)
            arg = "study.yaml" if r.chance(0.7) else {"$path": "study.yaml"}
        if h("study"):
            arg = hostile(r)
        kwargs = {}
        if r.chance(0.05):
            kwargs["workers"] = r.pick((0, -1, 2, "2", 1.5))
        case.api = {"fn": fn, "args": [arg], "kwargs": kwargs}


# -- expensive shapes, on reserved indices -------------------------------------------------

def _config_for(net: str, policy: str = "vdnn_all_p", batch: int | None = None) -> dict:
    cfg: dict[str, Any] = {"network": net, "policy": policy}
    if batch is not None:
        cfg["batch_size"] = batch
    return cfg


def deep_relu_chain(r: Rng, case: Case) -> None:
    n = r.randint(10_000, 20_000)
    lines = ["name: relus\ninput: [1, 2, 2]\nbatch_size: 1\nlayers:\n",
             "- {name: c, type: conv, out: 1, kernel: 1}\n"]
    lines += [f"- {{name: r{i}, type: relu}}\n" for i in range(n)]
    case.files["net.yaml"] = File("text", "".join(lines))
    case.files["cfg.yaml"] = File("yaml", _config_for("net.yaml"))
    case.argv = ["run", "cfg.yaml", "--json"]
    case.hostile(f"{n} in-place ReLUs")


def deep_alias_chain(r: Rng, case: Case) -> None:
    n = r.randint(8_000, 15_000)
    t = ["format: vdnnsim-trace\nversion: 1\nname: chain\nbatch_size: 1\ntensors:\n",
         "- {id: data, size_bytes: 64, kind: input}\n- {id: t0, size_bytes: 64}\n"]
    t += [f"- {{id: t{i}, size_bytes: 64, alias_of: t{i - 1}}}\n" for i in range(1, n)]
    t.append("layers:\n- {id: l0, kind: conv, inputs: [data], outputs: [t0], saved: [data], "
             "weight_bytes: 64, fwd_ns: 10, bwd_ns: 10}\n")
    t += [f"- {{id: l{i}, kind: relu, inputs: [t{i - 1}], outputs: [t{i}], saved: [t{i}], "
          f"fwd_ns: 1, bwd_ns: 1}}\n" for i in range(1, n)]
    case.files["tr.yaml"] = File("text", "".join(t))
    if r.chance(0.5):
        case.files["cfg.yaml"] = File("yaml", _config_for("tr.yaml"))
        case.argv = ["run", "cfg.yaml", "--json"]
    else:
        case.argv = ["trace", "tr.yaml", "-o", "-"]
    case.hostile(f"{n}-deep alias chain")


def deep_layer_cycle(r: Rng, case: Case) -> None:
    n = r.randint(1_200, 3_000)
    t = ["format: vdnnsim-trace\nversion: 1\nname: cyc\nbatch_size: 1\ntensors:\n",
         "- {id: data, size_bytes: 64, kind: input}\n"]
    t += [f"- {{id: t{i}, size_bytes: 64}}\n" for i in range(n)]
    t.append("layers:\n")
    t += [f"- {{id: l{i}, kind: conv, inputs: [t{(i - 1) % n}], outputs: [t{i}], "
          f"fwd_ns: 1, bwd_ns: 1}}\n" for i in range(n)]
    case.files["tr.yaml"] = File("text", "".join(t))
    case.files["cfg.yaml"] = File("yaml", _config_for("tr.yaml"))
    case.argv = ["run", "cfg.yaml", "--json"]
    case.hostile(f"{n}-layer cycle")


def deep_wide_concat(r: Rng, case: Case) -> None:
    n = r.randint(4_000, 8_000)
    t = ["format: vdnnsim-trace\nversion: 1\nname: wide\nbatch_size: 1\ntensors:\n",
         "- {id: data, size_bytes: 64, kind: input}\n"]
    t += [f"- {{id: t{i}, size_bytes: 64}}\n" for i in range(n)]
    t.append("- {id: cat, size_bytes: 64}\nlayers:\n")
    t += [f"- {{id: l{i}, kind: conv, inputs: [data], outputs: [t{i}], saved: [data], "
          f"fwd_ns: 1, bwd_ns: 1}}\n" for i in range(n)]
    ids = ", ".join(f"t{i}" for i in range(n))
    t.append(f"- {{id: cat, kind: concat, inputs: [{ids}], outputs: [cat], saved: [{ids}], "
             "fwd_ns: 1, bwd_ns: 1}\n")
    case.files["tr.yaml"] = File("text", "".join(t))
    case.files["cfg.yaml"] = File("yaml", _config_for("tr.yaml", "baseline_p"))
    case.argv = ["run", "cfg.yaml", "--json"]
    case.hostile(f"concat of {n} inputs")


def deep_conv_chain(r: Rng, case: Case) -> None:
    n = r.randint(3_000, 6_000)
    lines = ["name: convs\ninput: [1, 1, 1]\nbatch_size: 1\nlayers:\n"]
    lines += [f"- {{name: c{i}, type: conv, out: 1, kernel: 1}}\n" for i in range(n)]
    case.files["net.yaml"] = File("text", "".join(lines))
    if r.chance(0.5):
        case.files["cfg.yaml"] = File("yaml", _config_for("net.yaml", "vdnn_conv_p"))
        case.argv = ["run", "cfg.yaml", "--json"]
    else:
        case.argv = ["trace", "net.yaml", "-o", "-"]
    case.hostile(f"{n}-layer conv chain")


def huge_grid(r: Rng, case: Case) -> None:
    k = r.pick((7, 8))
    keys = ("batch_size", "memory_bytes", "link_bw_bytes_per_s", "link_latency_ns",
            "peak_flops_scale", "mem_bw_bytes_per_s", "h2d_bw_bytes_per_s",
            "d2h_bw_bytes_per_s")[:k]
    vals = {"batch_size": list(range(1, 11)),
            "memory_bytes": [2**20 * (i + 1) for i in range(10)],
            "link_latency_ns": list(range(10))}
    sweep = {key: vals.get(key, [1e9 * (i + 1) for i in range(10)]) for key in keys}
    case.files["study.yaml"] = File("yaml", {"base": {"network": "alexnet"}, "sweep": sweep})
    case.argv = r.pick((["run", "study.yaml", "--json"], ["sweep", "study.yaml"]))
    case.hostile(f"a grid of 10**{k} runs")


def bomb(r: Rng, case: Case) -> None:
    where = r.pick(("study_network", "study_batch", "options_value", "config_name",
                    "config_network", "trace_attrs", "spec_source"))
    b = alias_bomb()
    if where == "study_network":
        text = f"base:\n  network: {b}\nsweep:\n  policy: [baseline_p]\n"
        case.files["study.yaml"] = File("text", text)
        case.argv = ["run", "study.yaml", "--json"]
    elif where == "study_batch":
        text = f"base: {{network: alexnet}}\nsweep:\n  batch_size: [1, {b}]\n"
        case.files["study.yaml"] = File("text", text)
        case.argv = ["sweep", "study.yaml"]
    elif where == "options_value":
        text = (f"network: alexnet\nbatch_size: 1\npolicy: vdnn_all_p\n"
                f"policy_options: {{sync: {b}}}\n")
        case.files["cfg.yaml"] = File("text", text)
        case.argv = ["run", "cfg.yaml", "--json"]
    elif where == "config_name":
        case.files["cfg.yaml"] = File("text", f"network: alexnet\nbatch_size: 1\nname: {b}\n")
        case.argv = ["run", "cfg.yaml", "--json"]
    elif where == "config_network":
        case.files["cfg.yaml"] = File("text", f"network: {b}\n")
        case.argv = ["run", "cfg.yaml", "--json"]
    elif where == "trace_attrs":
        tr = gen_trace(r, 2)
        tr["layers"][0]["attrs"] = {"x": "__BOMB__"}
        case.files["tr.yaml"] = File("text", dump(tr).replace("__BOMB__", b)
                                     .replace("'" + b + "'", b))
        case.argv = ["trace", "tr.yaml", "-o", "-"]
    else:
        spec = gen_spec(r, 2)
        spec["source"] = "__BOMB__"
        case.files["net.yaml"] = File("text", dump(spec).replace("__BOMB__", b))
        case.argv = ["trace", "net.yaml", "-b", "1", "-o", "-"]
    case.hostile(f"YAML alias bomb in {where}")


def scheduler(r: Rng, case: Case) -> None:
    study = {"base": {"network": "alexnet", "batch_size": 1},
             "sweep": {"policy": ["baseline_p", "vdnn_all_p"]}}
    case.files["study.yaml"] = File("yaml", study)
    case.argv = ["sweep", "study.yaml", "--scheduler",
                 r.pick(("notanaddress", "", "tcp://", "tcp://256.0.0.1:x"))]
    case.hostile("a bad --scheduler", in_file=False)


def model_cmd(r: Rng, case: Case) -> None:
    case.argv = ["trace", "--model", r.pick(("zoo:alexnet", "torchvision:nosuchnet", "bogus",
                                             "zoo:", "torchvision:resnet18")),
                 "-b", r.pick(("1", "2")), "-o", "-"]
    if r.chance(0.2):
        case.argv.insert(1, "alexnet")
    case.hostile("trace --model", in_file=False)


RESERVED: tuple[Callable[[Rng, Case], None], ...] = (
    deep_relu_chain, deep_alias_chain, deep_layer_cycle, deep_wide_concat, deep_conv_chain,
    huge_grid, bomb, bomb, scheduler, model_cmd, gen_reproduce)
RESERVED_EVERY = 250  # one case in this many is an expensive shape

GENERATORS: dict[Callable[[Rng, Case], None], float] = {
    gen_run: 32, gen_study: 16, gen_trace_cmd: 12, gen_api: 16, gen_maxbatch: 3,
    gen_plot: 1, gen_validate: 4, gen_list: 1, gen_reproduce: 0.5, gen_soup: 4}


def generate(seed: int, index: int) -> Case:
    r = Rng(f"vdnnsim-fuzz:{seed}:{index}")
    case = Case(seed, index, "")
    if index % RESERVED_EVERY == RESERVED_EVERY // 2:
        gen = RESERVED[(index // RESERVED_EVERY) % len(RESERVED)]
        gen(r, case)
        case.label = f"reserved/{gen.__name__}"
        return case
    gen = r.weighted(GENERATORS)
    gen(r, case)
    if not case.label:
        case.label = gen.__name__
    return case
