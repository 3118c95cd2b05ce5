"""Values the meta device can know beyond VALUE_LIMIT (NOTE [op values]): a large output of
known inputs keeps the op that makes it, and its values are made when an op needs them;
a write drops them; ``torch.tensor(..., device="meta")`` keeps its data."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from vdnnsim.errors import ConfigError  # noqa: E402
from vdnnsim.gpu.probe import values  # noqa: E402
from vdnnsim.gpu.probe.aten import probe_ops  # noqa: E402

from .conftest import HAS_HF  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class _SquareMask(nn.Module):
    """Builds a batch x length x length mask from the batch, as transformers does, takes a
    row of it back, and asks a question of that row; ``stale``: first writes into the mask
    from the activations, so the row's values come from them."""

    def __init__(self, stale: bool = False):
        super().__init__()
        self.emb, self.stale = nn.Embedding(50, 8), stale

    def forward(self, x):
        h = self.emb(x)
        keep = (x > 0)[:, :, None] & (x > 0)[:, None, :]
        mask = torch.where(keep, torch.tensor(0.0, device=x.device), -1e9)
        if self.stale:
            mask.add_(h.sum())
        row = mask[:, 0, :]
        return h * 2 if (row < 0).any() else h


def _run(model, ids):
    return probe_ops(model.to("meta"), {"x": ids.to("meta")}, lambda m, b: m(b["x"]).sum(),
                     "t", values={"x": ids})


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setattr(values, "VALUE_LIMIT", 16)  # the 2 x 8 x 8 mask is "large"


def test_a_large_mask_of_the_batch_is_made_when_a_slice_of_it_is_asked(small_limit):
    ids = torch.randint(1, 50, (2, 8), generator=torch.Generator().manual_seed(0))
    for pad, doubled in ((False, False), (True, True)):
        x = ids.clone()
        if pad:
            x[1, 3] = 0
        p = _run(_SquareMask(), x)
        assert ("mul" in [n.kind for n in p.nodes]) == doubled


def test_a_write_from_the_activations_drops_the_deferred_values(small_limit):
    ids = torch.randint(1, 50, (2, 8), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError) as e:
        _run(_SquareMask(stale=True), ids)
    assert "aten::_local_scalar_dense" in str(e.value) and "\n" not in str(e.value)


def test_torch_tensor_on_the_meta_device_keeps_its_data():
    """No ATen op makes it on the meta device; the probe keeps its values all the same
    (transformers' masks are where(mask, torch.tensor(0.0), min))."""
    ids = torch.randint(1, 50, (2, 8), generator=torch.Generator().manual_seed(0))
    p = _run(_SquareMask(), ids)
    assert "mul" not in [n.kind for n in p.nodes]


@pytest.mark.skipif(not HAS_HF, reason="needs transformers")
@pytest.mark.parametrize("dtype", ["fp32", "autocast-bf16"])
def test_longformer_traces_on_the_meta_device(dtype, monkeypatch):
    """Its local-or-global question comes from the batch's mask, which at the held-out size
    (4 x 2048 tokens: a 4 x 2048 x 2048 mask) is over VALUE_LIMIT: here made so."""
    from vdnnsim.api import resolve_gpu
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.trace import trace_from_dict
    monkeypatch.setattr(values, "VALUE_LIMIT", 256)
    d = memory_trace(f"hf:{ROOT / 'tests' / 'hf' / 'longformer-tiny.yaml'}", 2,
                     resolve_gpu("h100"), dtype, 32)
    trace = trace_from_dict(d, "longformer-tiny")
    modules = [x.attrs.get("module", "") for x in trace.layers]
    assert sum("attention.self" in m for m in modules) > 10


class _FromTensor(nn.Module):
    """``torch.tensor`` of a tensor (a copy of the activations): no data of its own."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        c = torch.tensor(y.detach(), device=x.device)
        return y * 2 if c.sum() > 0 else y


def test_torch_tensor_of_the_activations_has_no_values():
    with pytest.raises(ConfigError) as e:
        probe_ops(_FromTensor().to("meta"), {"x": torch.empty(4, 8, device="meta")},
                  lambda m, b: m(b["x"]).sum(), "t")
    assert "aten::" in str(e.value) and "\n" not in str(e.value)
