"""Issue 58: the spec rule fitted on half of NeuSight's public kernel timings and checked on
the other half (experiments/op_model/NEUSIGHT_SPLIT.md, neusight_fit.py)."""

import collections

from .conftest import experiment


def test_the_split_is_deterministic_disjoint_and_by_shape_alone():
    nk = experiment("op_model/neusight_kernels.py")
    recs = nk.records()
    halves = [r[5] for r in recs]
    assert halves == [r[5] for r in nk.records()] and set(halves) == {"train", "test"}
    # a shape lies in one half, whatever the card
    by_shape = collections.defaultdict(set)
    for card, cls, f, _ns, _algo, h in recs:
        by_shape[(cls, tuple(sorted((k, v) for k, v in f.items() if k != "dt")))].add(h)
    assert all(len(v) == 1 for v in by_shape.values())
    # the counts NEUSIGHT_SPLIT.md gives
    n = collections.Counter((nk.CARDS[c][0], cls, h) for c, cls, _f, _n, _a, h in recs)
    assert (n["t4", "conv2d", "train"], n["t4", "conv2d", "test"]) == (2514, 2455)
    assert (n["l4", "linear", "train"], n["l4", "bmm", "test"]) == (541, 1040)
    assert nk.half("linear", dict(B="1", M="512", N="768", K="768")) == \
        nk.half("linear", dict(B="01", M="512", N="768", K="768"))
