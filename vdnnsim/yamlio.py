"""YAML reading and atomic writing shared by every file format, and pydantic error
formatting that names the file and the key path."""

from __future__ import annotations

import gc
import gzip
import json
import math
import os
import re
import secrets
import stat
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterator

import yaml
from pydantic import BaseModel, ValidationError

from .errors import ConfigError, VdnnError, one_line, shown  # noqa: F401  (re-exported)
from .limits import MAX_BYTES
from .units import GB, KB, MB, TB, GiB, KiB, MiB, TiB

# libyaml's parser and emitter where PyYAML was built with it (5x faster on a 432-layer
# trace); the same documents and the same error marks either way.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


# NOTE [paused gc]
# Work that only builds acyclic data (loading or writing a trace, a network, a plan) runs
# with CPython's cyclic collector paused: its passes over millions of young containers
# cost time growing with the square of the file, and reference counting frees acyclic
# data anyway. On resuming, where the paused stretch built over _FREEZE_AT tracked
# objects, they are moved to the permanent generation (gc.freeze) so that the next passes
# do not walk them; only a cycle among them would then stay until gc.unfreeze(), and
# traces, networks and plans are acyclic. Timings: docs/trace-format.md, "Large files".
_FREEZE_AT = 1_000_000


@contextmanager
def paused_gc() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if gc.get_count()[0] > _FREEZE_AT:
                gc.freeze()
            gc.enable()


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc).splitlines()[0]


def read_yaml(path: str | os.PathLike, error: type[VdnnError] = ConfigError) -> Any:
    if not isinstance(path, (str, os.PathLike)):
        raise error(f"expected a file path, got {type(path).__name__}")
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise error(f"{shown(p)}: no such file") from None
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte, no permission
        raise error(f"{shown(p)}: cannot read: {_reason(exc)}") from None
    if stat.S_ISDIR(mode):
        raise error(f"{shown(p)}: is a directory, not a YAML file")
    if not stat.S_ISREG(mode):  # a FIFO or a device would block or never end
        raise error(f"{shown(p)}: not a regular file")
    try:  # a name ending in .gz is read through gzip
        text = _gunzip(p) if p.suffix == ".gz" else p.read_text()
    except (OSError, UnicodeDecodeError, EOFError, zlib.error) as exc:
        raise error(f"{shown(p)}: cannot read: {_reason(exc)}") from None
    data = _parse(text, p, error)
    if ("\\u" in text or "\\U" in text) and not _all_text(data):
        # an escape (JSON's "\udcff", YAML's "\uDCFF") can spell half a surrogate pair,
        # which no file name, message or output can hold
        raise error(f"{shown(p)}: a string escapes a lone surrogate (like \\udcff), which "
                    "is not Unicode text")
    return data


def _all_text(data: Any) -> bool:
    """Every string (keys too) of a loaded document is encodable Unicode; iterative."""
    todo = [data]
    while todo:
        x = todo.pop()
        if isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(x, dict):
            todo.extend(x.keys())
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
    return True


def _parse(text: str, p: Path, error: type[VdnnError]) -> Any:
    if text.lstrip().startswith("{"):  # JSON is YAML, and 30x faster to read
        try:
            with paused_gc():
                return json.loads(text)
        except (ValueError, RecursionError):
            pass  # YAML flow style that is not JSON: the YAML parser decides
    try:
        with paused_gc():
            return _load_yaml(text)
    except RecursionError:
        raise error(f"{shown(p)}: malformed YAML: nested too deeply") from None
    except (ValueError, OverflowError) as exc:  # an integer of over 4,300 digits
        raise error(f"{shown(p)}: malformed YAML: {str(exc).splitlines()[0][:120]}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{p}: malformed YAML{where}: {problem}") from None


# NOTE [yaml construction]
# PyYAML builds Python objects from the parsed nodes one recursive call per node, a third
# of the time of loading a large spec. _load_yaml builds plain documents (maps, lists and
# the safe loader's str, int, float, bool and null scalars) in one loop over the same
# nodes, with the same values, the same sharing of anchored nodes and the last of
# duplicate keys; anything else (merge keys, timestamps, sets, binary, complex keys,
# nesting deeper than 200) goes to PyYAML's own constructor, so its values and its errors
# stay PyYAML's.
_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL, _MAP, _SEQ = (
    _TAG + t for t in ("str", "int", "float", "bool", "null", "map", "seq"))
_MAX_FAST_DEPTH = 200


class _NotPlain(Exception):
    pass


def _load_yaml(text: str) -> Any:
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            return _construct_plain(loader, node)
        except _NotPlain:
            return loader.construct_document(node)
    finally:
        loader.dispose()


def _construct_plain(loader: Any, root: Any) -> Any:
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    to_int, to_float, bools = (loader.construct_yaml_int, loader.construct_yaml_float,
                               loader.bool_values)

    def scalar(n: Any) -> Any:
        t = n.tag
        if t == _STR:
            return n.value
        if t == _INT:
            return to_int(n)
        if t == _FLOAT:
            return to_float(n)
        if t == _NULL:
            return None
        if t == _BOOL:
            return bools[n.value.lower()]
        raise _NotPlain

    made: dict[int, Any] = {}  # id(node) -> its object: an anchored node is built once

    def container(n: Any) -> tuple[Any, bool]:
        c = made.get(id(n))
        if c is not None:
            return c, False
        if type(n) is MappingNode and n.tag == _MAP:
            c = {}
        elif type(n) is SequenceNode and n.tag == _SEQ:
            c = []
        else:
            raise _NotPlain
        made[id(n)] = c
        return c, True

    if type(root) is ScalarNode:
        return scalar(root)
    top, _ = container(root)
    todo = [(root, top, 0)]
    while todo:
        node, c, depth = todo.pop()
        if depth > _MAX_FAST_DEPTH:
            raise _NotPlain
        pairs = node.value if type(c) is dict else ((None, v) for v in node.value)
        for k, v in pairs:
            if type(v) is ScalarNode:
                value = scalar(v)
            else:
                value, new = container(v)
                if new:
                    todo.append((v, value, depth + 1))
            if k is None:
                c.append(value)
            elif type(k) is ScalarNode:
                c[scalar(k)] = value
            else:
                raise _NotPlain
    return top


def check_writable(path: str | os.PathLike, folder: bool = False) -> None:
    """Whether ``path`` can be written (``folder``: made, if need be, and written into),
    as a ConfigError naming the cause. write_atomic checks it; a command that works for a
    while before it writes (a plan's search, a sweep, a profile) checks it first, so that
    a mistyped -o fails at once, not after the work."""
    p = Path(path)
    if "\0" in str(p):
        raise ConfigError(f"{shown(p)}: cannot write: a file name cannot hold a NUL byte")
    if folder:
        q = p
        while not os.path.exists(q) and q != q.parent:  # mkdir(parents=True) makes these
            q = q.parent
        if not os.path.isdir(q):
            raise ConfigError(f"{shown(p)}: cannot make this folder: {shown(q)} is a file")
        where = q
    else:
        where = p.parent
        if str(where) and not os.path.isdir(where):
            raise ConfigError(f"{shown(p)}: folder {shown(where)} does not exist")
        if os.path.isdir(p):
            raise ConfigError(f"{shown(p)}: is a directory, not a file name")
    try:
        writable = os.access(where, os.W_OK | os.X_OK)
    except (OSError, ValueError):
        writable = False
    if not writable:
        raise ConfigError(f"{shown(p)}: cannot write: folder {shown(where)} is not writable")


def write_atomic(path: str | os.PathLike, write: Callable[[IO[Any]], None],
                 binary: bool = False) -> None:
    """Write a whole file or nothing: ``write`` fills a temporary file in the same folder,
    which is then renamed over ``path``."""
    p = Path(path)
    check_writable(p)
    # the temporary name stays short, so that any name the file system takes works
    tmp = str(p.parent / f".{p.name[:80]}.{secrets.token_hex(6)}.tmp")
    try:  # not mkstemp: its files are 0600, these get the umask's mode like any other
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise ConfigError(f"{shown(p)}: cannot write: {_reason(exc)}") from None
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
        os.replace(tmp, p)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise ConfigError(f"{shown(p)}: cannot write: {_reason(exc)}") from None
        raise


# NOTE [gzip]
# A file whose name ends in .gz is read and written through gzip (profiled transformer
# traces are megabytes of YAML, a tenth of that gzipped), written with mtime 0 so that the
# same trace gives the same bytes. Reading stops past GUNZIP_BYTES of text: a small file
# can expand to any size, and a trace of millions of layers is far past any real one.
GUNZIP_BYTES = GiB


def _gunzip(p: Path) -> str:
    """A compressed file's text, at most GUNZIP_BYTES of it."""
    with gzip.open(p, "rb") as f:
        raw = f.read(GUNZIP_BYTES + 1)
    if len(raw) > GUNZIP_BYTES:
        raise OSError(f"more than {GUNZIP_BYTES:,} bytes once decompressed")
    return raw.decode("utf-8")


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` whole or not at all; compressed where the name ends in .gz."""
    try:  # before any file exists: a name with a lone surrogate (from JSON) is not UTF-8
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(f"{shown(path)}: cannot write: the text holds "
                          f"{text[exc.start:exc.end]!r}, which is not Unicode text") from None
    if str(path).endswith(".gz"):
        write_atomic(path, lambda f: f.write(gzip.compress(data, mtime=0)), binary=True)
    else:
        write_atomic(path, lambda f: f.write(text))


# NOTE [large files]
# PyYAML's constructors and representers run in Python, about 3 microseconds a node even
# with libyaml (a 100,000-layer trace: over half a minute each way). Past LARGE_NODES
# values, files are written as JSON, which is a YAML document too (any YAML tool reads
# it), one top-level list item a line, and read_yaml loads a file that starts with '{'
# with the json module first.
LARGE_NODES = 200_000


def _nodes(data: Any, limit: int) -> int:
    """How many values ``data`` holds, counting stops past ``limit``."""
    count, stack = 0, [data]
    while stack and count <= limit:
        x = stack.pop()
        count += 1
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return count


def _json_document(data: dict[str, Any]) -> str:
    """One top-level key a line (json's C encoder works only without indentation)."""
    parts = [f"{json.dumps(k)}: {json.dumps(v, separators=(', ', ': '))}"
             for k, v in data.items()]
    return "{\n" + ",\n".join(parts) + "\n}\n"


def dump_yaml(data: Any) -> str:
    with paused_gc():
        if isinstance(data, dict) and _nodes(data, LARGE_NODES) > LARGE_NODES:
            return _json_document(data)
        return yaml.dump(data, Dumper=_DUMPER, sort_keys=False, default_flow_style=None,
                         width=100)


def loc_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "<top>"


_NO_DATA = object()


def _user_loc(loc: tuple[Any, ...], data: Any, missing: bool) -> tuple[tuple[Any, ...], bool]:
    """The key path as the user wrote it, and whether pydantic's path held union-branch
    tags ('str', 'GPUConfig', 'function-before[...]') that are not keys of the input."""
    out: list[Any] = []
    node, tagged = data, False
    for i, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif missing and i == len(loc) - 1:
            pass  # the key the user left out
        else:
            tagged = True
            continue
        out.append(part)
    return tuple(out), tagged


def validation_message(source: str, exc: ValidationError, data: Any = _NO_DATA) -> str:
    """One pydantic error as 'source: key.path: message'.

    With ``data`` (the validated input), union-branch tags are dropped from the key path
    and a branch's type mismatch ("should be a valid string") yields to the error of the
    branch the input was meant for ("unknown key").
    """
    errors = []
    for e in exc.errors():
        if data is _NO_DATA:
            loc, tagged = tuple(e["loc"]), False
        else:
            loc, tagged = _user_loc(tuple(e["loc"]), data, e["type"] == "missing")
        errors.append((loc, tagged and e["type"].endswith("_type"), e))
    real = [x for x in errors if not x[1]] or errors[:1]
    loc, _, err = real[0]
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif err["type"] == "missing":
        msg = "required item is missing" if loc and isinstance(loc[-1], int) \
            else "required key is missing"
    elif err["type"] == "value_error" and "error" in err.get("ctx", {}):
        msg = str(err["ctx"]["error"])  # without pydantic's "Value error, "
    extra = f" (and {len(real) - 1} more)" if len(real) > 1 else ""
    where = f"{loc_path(loc)}: " if loc else ""  # a whole-document check names its keys
    return f"{source}: {where}{msg}{extra}"


# NOTE [file kinds]
# vdnnsim reads several kinds of file, and a path given in the wrong place (a trace as a
# run config, a run config as `network:`, a plan or a measurements list as either) would
# otherwise fail on the first key the expected kind needs ('format: required key is
# missing'). Where it is cheap to tell, by the keys at the top, the message says what the
# file is, what was expected, and where that kind of file goes. The format names are
# those the writers put in (trace/schema.py FORMAT, planfile.py FORMAT and BLOCK_FORMAT,
# gpu/calibrate/kernels.py; tests/test_cli_errors.py checks they agree).
FORMATS = {"vdnnsim-trace": "trace", "vdnnsim-plan": "plan", "vdnnsim-block-plan": "plan",
           "vdnnsim-calibration": "calibration"}
_KINDS = {"trace": "a vdnnsim trace", "plan": "a vdnnsim plan file",
          "calibration": "a vdnnsim calibration file", "study": "a study",
          "network spec": "a network spec", "run config": "a run config",
          "measurements": "a list of measurements (vdnnsim measure --json)"}


def file_kind(data: Any) -> str | None:
    """What a loaded document is (a key of _KINDS), by its top-level keys; None: unknown."""
    if isinstance(data, list):
        head = data[:8]
        if head and all(isinstance(r, dict) and {"model", "policy", "fits"} <= set(r)
                        for r in head):
            return "measurements"
        return None
    if not isinstance(data, dict):
        return None
    fmt = data.get("format")
    if isinstance(fmt, str) and fmt in FORMATS:
        return FORMATS[fmt]
    if {"sweep", "zip", "runs", "base"} & set(data):
        return "study"
    if "layers" in data and "input" in data:
        return "network spec"
    if "network" in data:
        return "run config"
    return None


def misplaced(data: Any, source: str | os.PathLike, expected: str,
              accepted: tuple[str, ...]) -> str | None:
    """The message for a document of another known kind than the
    ``accepted`` ones where ``expected`` (words: 'a run config') is wanted; else None."""
    kind = file_kind(data)
    if kind is None or kind in accepted:
        return None
    src = shown(source)
    hint = {"trace": f"name it as `network: {src}` in a run config",
            "network spec": f"name it as `network: {src}` in a run config",
            "run config": f"run it with `vdnnsim run {src}`",
            "study": f"run it with `vdnnsim run {src}` or `vdnnsim sweep {src}`",
            "plan": f"replay it with `policy: planned` and `policy_options: {{file: {src}}}` "
                    "in a run config",
            "calibration": "a GPU preset's `calibration:` names it (docs/cost-model.md)",
            "measurements": f"give it to `vdnnsim validate TRACES {src}` (or to `vdnnsim "
                            f"plot validation TRACES --measurements {src}`)"}[kind]
    return f"{src}: this is {_KINDS[kind]}, not {expected}; {hint}"


def parse_model(model: type[BaseModel], data: Any, source: str,
                error: type[VdnnError] = ConfigError) -> Any:
    if not isinstance(data, dict):
        got = "nothing (an empty file?)" if data is None else type(data).__name__
        raise error(f"{source}: expected a mapping at the top level, got {got}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(validation_message(source, exc, data)) from None


_UNITS = {"": 1, "b": 1, "kb": KB, "mb": MB, "gb": GB, "tb": TB,
          "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


_TOO_BIG = "more than the 1 PiB (2**50 bytes) the simulator models"


def parse_bytes(value: Any) -> int:
    """An integer byte count, or a string such as '12 GiB' or '1.5e9', from 0 to
    MAX_BYTES. Raises ValueError."""
    if type(value) is int and 0 <= value <= MAX_BYTES:  # the common case, first
        return value
    if isinstance(value, bool):
        raise ValueError("expected a byte count, got a boolean")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"a byte count must be finite, got {value}")
        if value != int(value):
            raise ValueError(f"byte count {value} is not a whole number")
        if value > MAX_BYTES:
            raise ValueError(f"byte count {value:g} is {_TOO_BIG}")
        n = int(value)
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        if not m or m.group(2).lower() not in _UNITS:
            shown = value if len(value) <= 40 else value[:40] + "..."
            raise ValueError(f"{shown!r} is not a byte count (use e.g. 4096, '12 GiB', "
                             "'1.5 GB')")
        x = float(m.group(1)) * _UNITS[m.group(2).lower()]
        if not math.isfinite(x) or x > MAX_BYTES:
            raise ValueError(f"byte count {value!r} is {_TOO_BIG}")
        if m.group(2).lower() in ("", "b") and x != int(x):  # '1.5 GiB' rounds; '1.5 B' not
            raise ValueError(f"byte count {value!r} is not a whole number of bytes")
        n = int(round(x))
    else:
        raise ValueError(f"expected a byte count, got {type(value).__name__}")
    if n < 0:
        raise ValueError(f"byte count must not be negative, got {n}")
    if n > MAX_BYTES:
        raise ValueError(f"byte count {n if n < 10**30 else 'of over 30 digits'} is {_TOO_BIG}")
    return n
