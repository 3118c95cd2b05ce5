"""NOTE [yaml construction]: vdnnsim's loop that builds plain YAML documents gives what
PyYAML's safe loader gives, value for value and error for error."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from vdnnsim.yamlio import _LOADER, _load_yaml

DOCS = [
    "a: 1\nb: [1, 2.5, true, null, ~, yes, 0x1f, 0o17, 1_000, '3', .inf, -.inf, 1:30, -.5e3]\n",
    "&x {a: *x}", "- &a [1]\n- *a\n", "a: {<<: {b: 1}, c: 2}", "t: 2001-12-14",
    "!!set {a, b}", "? [1]\n: 2", "x", "", "a: !!str 5", "a: !!binary aGVsbG8=",
    "d: 12.8e9", "n: -0", "b: off", "a: 1\na: 2", "[" * 300 + "]" * 300,
    "{a: [{b: [x, {c: d}]}]}", "!!python/object:os.system x", "a: !foo 1",
    "- !!map {a: 1}\n- !!seq [1]", "a: [1, 2", "a: b: c", "1: one\n2.5: two\nnull: x",
    "a: &s str\nb: *s\n", "x: !!int '7'", "{a: .nan}", "- - - []\n  - {}\n",
    "a: " + "9" * 5000,
]


def _outcome(load, text):
    try:
        return "ok", load(text)
    except Exception as exc:  # noqa: BLE001 - the type and message are what is compared
        return "error", type(exc).__name__, str(exc)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return repr(a) == repr(b)


@pytest.mark.parametrize("text", DOCS)
def test_the_fast_loop_gives_what_pyyaml_gives(text):
    expect = _outcome(lambda t: yaml.load(t, Loader=_LOADER), text)  # noqa: S506
    got = _outcome(_load_yaml, text)
    assert _same(expect, got), (expect, got)


def test_anchored_nodes_are_built_once_and_shared():
    doc = _load_yaml("a: &l [1, 2]\nb: *l\nc: &m {k: v}\nd: *m\n")
    assert doc["a"] is doc["b"] and doc["c"] is doc["d"]
    loop = _load_yaml("&x {a: *x}")
    assert loop["a"] is loop


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                    st.floats(allow_nan=False))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), inner, max_size=4)),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(documents, st.booleans())
def test_random_documents_in_both_styles(data, flow):
    text = yaml.safe_dump(data, default_flow_style=flow, allow_unicode=True)
    assert _same(yaml.load(text, Loader=_LOADER), _load_yaml(text))  # noqa: S506
