"""NOTE [op probe]: memory traces of any model, op by op on the meta device; checked on
small hand-made modules and against the committed H200 transformer runs. Skipped without
torch (and transformers, where an hf: model is used)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from vdnnsim.gpu.probe.aten import probe_ops  # noqa: E402
from vdnnsim.gpu.profile.layers import assemble  # noqa: E402
from vdnnsim.trace import trace_from_dict  # noqa: E402

from .conftest import HAS_HF  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _probe(model, x, loss, autocast=None):
    p = probe_ops(model, {"x": x}, lambda m, b: loss(m(b["x"])), "t", autocast)
    return p, trace_from_dict(assemble(p), "t")


class _Attn(nn.Module):
    def __init__(self, heads: int, kv: int, d: int = 16, dropout: float = 0.0):
        super().__init__()
        self.h, self.kv, self.d, self.p = heads, kv, d, dropout
        self.q = nn.Linear(heads * d, heads * d)
        self.k = nn.Linear(heads * d, kv * d)
        self.v = nn.Linear(heads * d, kv * d)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.h, self.d).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv, self.d).transpose(1, 2)
        o = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                       dropout_p=self.p,
                                                       enable_gqa=self.kv != self.h)
        return o.transpose(1, 2).reshape(b, s, -1)


def _scores(trace, b, h, s):
    """Saved tensors the size of the score matrices (b x h x s x s fp32)."""
    n = b * h * s * s * 4
    return [t for t in trace.tensors.values() if t.size_bytes == n]


@pytest.mark.parametrize("heads,kv,math", [(4, 4, False), (4, 2, True)])
def test_fp32_attention_keeps_scores_only_on_the_math_path(heads, kv, math):
    """CUDA's SDPA in fp32: memory-efficient attention (no score matrix kept) unless the
    heads are grouped, which it does not take: then the math path keeps them."""
    with torch.device("meta"):
        m = _Attn(heads, kv)
        x = torch.empty(2, 64, heads * 16, requires_grad=False)
    _, trace = _probe(m.train(), x, lambda y: y.float().pow(2).mean())
    assert bool(_scores(trace, 2, heads, 64)) == math


def test_the_math_paths_dropout_keeps_a_bool_mask_as_cuda_does():
    """Grouped heads in fp32 take the math path on CUDA too; with dropout, CUDA's
    ``at::dropout`` there is the fused kernel (a bool mask), not the meta device's float
    mask and multiply: one score-sized mask of one byte an element, no bernoulli."""
    with torch.device("meta"):
        m = _Attn(4, 2, dropout=0.1)
        x = torch.empty(2, 64, 4 * 16)
    p, trace = _probe(m.train(), x, lambda y: y.float().pow(2).mean())
    kinds = [n.kind for n in p.nodes]
    assert "bernoulli_" not in kinds and kinds.count("native_dropout") == 1
    drop = next(n for n in p.nodes if n.kind == "native_dropout")
    assert [s.nbytes for s in drop.saved if s.role == "extra"] == [2 * 4 * 64 * 64]
    assert len(_scores(trace, 2, 4, 64)) >= 1  # the math path keeps its scores


class _NegScale(nn.Module):
    def forward(self, x):
        q = x.view(2, 4, 64, 16)
        return nn.functional.scaled_dot_product_attention(q, q[:, :2], q[:, :2], dropout_p=0.1,
                                                          scale=-0.25, enable_gqa=True)


def test_the_math_paths_own_dropout_is_fp32_with_a_positive_scale_only():
    """A negative scale (which PyTorch takes) and 16-bit tensors keep the meta device's own
    math path (its float mask) rather than the fp32 emulation: no crash, no guess."""
    with torch.device("meta"):
        x = torch.empty(2, 64, 4 * 16, requires_grad=True)
    p, _ = _probe(_NegScale().train(), x, lambda y: y.float().pow(2).mean())
    assert "native_dropout" not in [n.kind for n in p.nodes]


def test_bf16_autocast_takes_flash_attention_and_casts_the_weights_once():
    with torch.device("meta"):
        m = _Attn(4, 2)
        x = torch.empty(2, 64, 64)
    p, trace = _probe(m.train(), x, lambda y: y.float().pow(2).mean(), torch.bfloat16)
    kinds = [n.kind for n in p.nodes]
    assert "_scaled_dot_product_flash_attention" in kinds
    assert not _scores(trace, 2, 4, 64)
    casts = [n for n in p.nodes if n.kind == "_to_copy"]
    assert casts and len([n for n in casts if n.out_shape == (64, 64)]) == 1  # q's weight


class _PixelAttn(nn.Module):
    """DDPM's single-head attention over the pixels: q, k and v are transposed views of
    a 1x1 convolution's output, their last dimension strided by the pixel count (or made
    contiguous)."""

    def __init__(self, c: int, contiguous: bool):
        super().__init__()
        self.qkv, self.contiguous = nn.Conv2d(c, 3 * c, 1), contiguous

    def forward(self, x):
        n, c, h, w = x.shape
        q, k, v = (t[:, None].contiguous() if self.contiguous else t[:, None] for t in
                   self.qkv(x).reshape(n, 3, c, h * w).transpose(-1, -2).unbind(1))
        return nn.functional.scaled_dot_product_attention(q, k, v)[:, 0]


@pytest.mark.parametrize("contiguous", [False, True])
def test_attention_on_strided_views_takes_the_math_path_as_cuda_does(contiguous):
    """CUDA's fused SDPA kernels want q, k and v each with its last dimension's stride 1
    (check_last_dim_stride_equals_1_dense): the held-out DDPM U-Net's attention took the
    math path on an H100, in fp32 under bf16 autocast (its step saved an fp32 key of shape
    [12, 512, 256] where the probe had the memory-efficient kernel's bf16 query). The same
    attention on contiguous copies takes a fused kernel."""
    with torch.device("meta"):
        m = _PixelAttn(32, contiguous)
        x = torch.empty(2, 32, 8, 8)
    p, trace = _probe(m.train(), x, lambda y: y.float().pow(2).mean(), torch.bfloat16)
    fused = [n.kind for n in p.nodes if n.kind.startswith("_scaled_dot_product")]
    if contiguous:
        assert fused == ["_scaled_dot_product_flash_attention"]
        assert not _scores(trace, 2, 1, 64)
    else:
        assert fused == [] and "_safe_softmax" in [n.kind for n in p.nodes]
        assert _scores(trace, 2, 1, 64)  # fp32 score matrices kept: the math path in fp32


class _Heads3d(nn.Module):
    """SAM's ViT (timm's samvit): SDPA on 3-D q, k and v (batch x heads first), with a
    relative-position bias as the mask where asked, its output viewed back into heads."""

    def __init__(self, mask: bool, h: int = 2, d: int = 8, n: int = 16):
        super().__init__()
        self.h, self.d = h, d
        self.qkv = nn.Linear(h * d, 3 * h * d)
        self.bias = nn.Parameter(torch.zeros(n, n)) if mask else None

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.d).permute(2, 0, 3, 1, 4) \
            .reshape(3, b * self.h, n, self.d).unbind(0)
        o = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=self.bias)
        return o.view(b, self.h, n, self.d).transpose(1, 2).reshape(b, n, -1)


@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_3d_attention_takes_the_math_path_as_cuda_does(mask, autocast):
    """Issue 26's timm sweep (samvit_base_patch16): CUDA's fused SDPA kernels take only
    4-D q, k and v, so 3-D ones run the math path. The probe gave them to the fused
    kernels' meta functions, whose outputs the model could not view back (an error
    blaming aten::view in fp32, a traceback under bf16 autocast)."""
    with torch.device("meta"):
        m = _Heads3d(mask)
        x = torch.empty(2, 16, 16)
    p, trace = _probe(m.train(), x, lambda y: y.float().sum(), autocast)
    kinds = [n.kind for n in p.nodes]
    assert not [k for k in kinds if k.startswith("_scaled_dot_product")], kinds
    assert "_safe_softmax" in kinds
    assert _scores(trace, 2 * 2, 1, 16)  # the math path keeps (batch x heads) x N x N


class _Sdpa(nn.Module):
    """One attention call of 4-D q, k, v: 2 heads, head dims ``d`` (q, k) and ``dv``,
    ``sq`` queries against 16 keys."""

    def __init__(self, d: int, dv: int, sq: int, causal: bool):
        super().__init__()
        self.d, self.dv, self.sq, self.causal = d, dv, sq, causal
        self.q, self.k, self.v = nn.Linear(8, 2 * d), nn.Linear(8, 2 * d), nn.Linear(8, 2 * dv)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x[:, :self.sq]).view(b, self.sq, 2, self.d).transpose(1, 2)
        k = self.k(x).view(b, s, 2, self.d).transpose(1, 2)
        v = self.v(x).view(b, s, 2, self.dv).transpose(1, 2)
        o = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return o.transpose(1, 2).reshape(b, self.sq, -1)


@pytest.mark.parametrize("d,dv,sq,causal,dtype,kernel", [
    (16, 16, 16, True, torch.float32, "efficient"),
    (6, 6, 16, False, torch.float32, None),  # head dim not a multiple of 4
    (12, 12, 16, True, torch.bfloat16, "flash"),  # flash has no such rule
    (12, 12, 16, False, torch.float32, "efficient"),
    (12, 12, 16, False, None, "efficient"),  # bf16 autocast: 12 is no multiple of 8...
    (16, 8, 16, False, torch.bfloat16, "efficient"),  # flash wants one head dim
    (16, 16, 8, True, torch.bfloat16, "efficient"),  # flash: causal over equal lengths only
    (16, 16, 8, False, torch.bfloat16, "flash"),
])
def test_attention_takes_the_kernel_cudas_sdpa_picks(d, dv, sq, causal, dtype, kernel):
    """NOTE [op probe]: sdp_utils' gates for the fused kernels on an H100/H200."""
    auto = None
    if dtype is None:  # ...but flash takes it, under autocast as in pure bf16
        dtype, auto, kernel = torch.float32, torch.bfloat16, "flash"
    with torch.device("meta"):
        m = _Sdpa(d, dv, sq, causal).to(dtype)
        x = torch.empty(2, 16, 8, dtype=dtype)
    p, _ = _probe(m.train(), x, lambda y: y.float().sum(), auto)
    fused = [n.kind for n in p.nodes if n.kind.startswith("_scaled_dot_product")]
    assert fused == ([f"_scaled_dot_product_{kernel}_attention"] if kernel else [])
    assert kernel or "_safe_softmax" in [n.kind for n in p.nodes]


def test_dropout_keeps_a_bool_mask_as_cuda_does_and_log_softmax_its_output():
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(32, 32), nn.Dropout(0.1), nn.Linear(32, 10))
        x = torch.empty(8, 32)
    p, trace = _probe(m.train(), x, lambda y: nn.functional.log_softmax(y, -1).mean())
    drop = next(n for n in p.nodes if n.kind == "native_dropout")
    masks = [s for s in drop.saved if s.role == "extra"]
    assert [s.nbytes for s in masks] == [8 * 32]  # one byte an element
    lsm = next(n for n in p.nodes if n.kind == "_log_softmax")
    assert any(s.tensor == lsm.name for s in lsm.saved)
    assert sum(n.weight_bytes for n in p.nodes) == (32 * 32 + 32 + 32 * 10 + 10) * 4


def test_in_place_dropout_keeps_a_mask_of_its_inputs_dtype_as_cuda_does():
    """``at::dropout_`` has no fused kernel on CUDA: a noise tensor of the input's dtype,
    multiplied in place and saved by the multiply (an H100's step of torchvision's MViT
    packed its head's fp32 mask where the probe had a bool one)."""
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Dropout(0.1, inplace=True),
                          nn.Linear(32, 10))
        x = torch.empty(8, 32)
    p, _ = _probe(m.train(), x, lambda y: y.float().sum())
    kinds = [n.kind for n in p.nodes]
    assert "native_dropout" not in kinds and "bernoulli_" in kinds
    mul = next(n for n in p.nodes if n.kind == "mul_")
    assert [s.nbytes for s in mul.saved] == [8 * 32 * 4]  # the fp32 noise, not a bool mask
    with torch.device("meta"):  # not in place: the fused kernel's bool mask
        m[2].inplace = False
    p, _ = _probe(m.train(), x, lambda y: y.float().sum())
    drop = next(n for n in p.nodes if n.kind == "native_dropout")
    assert [s.nbytes for s in drop.saved if s.role == "extra"] == [8 * 32]


def test_an_output_nothing_reads_is_dropped():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)

        def forward(self, x):
            torch.ones(1000, 1000) * 2  # made and thrown away
            return self.a(x)
    with torch.device("meta"):
        m, x = M(), torch.empty(4, 8)
    p, _ = _probe(m, x, lambda y: y.sum())
    assert all(n.out_nbytes < 4_000_000 for n in p.nodes)


def _param_bytes(m):
    return sum(p.numel() * p.element_size() for p in m.parameters())


def _replays(trace):
    from vdnnsim.api import resolve_gpu, run_trace
    return run_trace(trace, resolve_gpu("h200"), "eager", record=False).peak_memory_bytes


@pytest.mark.parametrize("bidirectional", [False, True])
def test_an_lstm_keeps_all_its_weights(bidirectional):
    """timm sweep: the cell adds its input projection to the gates in place (``add_``), and
    that op's output keeps the gates' name; it and the addmm of W_ih were dropped, half the
    weights with them (1,152 of 2,304 bytes; 2,304 of 4,608 both ways)."""
    with torch.device("meta"):
        m, x = nn.LSTM(8, 8, bidirectional=bidirectional), torch.empty(5, 2, 8)
    p, trace = _probe(m, x, lambda y: y[0].sum())
    assert trace.weight_bytes == _param_bytes(m) == (4608 if bidirectional else 2304)
    assert p.resident_weight_bytes == 0
    gates = [n for n in p.nodes if n.kind == "add_"]
    assert gates and all(n.alias_of and n.alias_of in n.inputs for n in gates)
    assert _replays(trace) > 0


class _PosEmbed(nn.Module):
    """timm's naflexvit: a position embedding added in place to the patch tokens."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.pos = nn.Parameter(torch.empty(4, 8))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        x = self.proj(x).clone()
        x.add_(self.pos * 2)  # the scaled embedding: an op that only the add_ reads
        return self.head(x.relu())


def test_a_parameter_added_in_place_to_an_activation_is_traced():
    with torch.device("meta"):
        m, x = _PosEmbed(), torch.empty(4, 8)
    p, trace = _probe(m, x, lambda y: y.sum())
    assert trace.weight_bytes == _param_bytes(m) and p.resident_weight_bytes == 0
    add = next(n for n in p.nodes if n.kind == "add_")
    scale = next(n for n in p.nodes if n.kind == "mul")
    assert scale.name in add.inputs and scale.weight_bytes == 4 * 8 * 4
    assert add.alias_of == next(n for n in p.nodes if n.kind == "clone").name
    assert _replays(trace) > 0


class _DeadWrite(nn.Module):
    """An in-place write that no later op reads, of a parameter nothing else reads, and a
    parameter read first by a thrown-away op and then by a kept one."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.unread = nn.Parameter(torch.empty(4, 8))  # no op reads it
        self.late = nn.Parameter(torch.empty(4, 8))
        self.dead = nn.Linear(8, 5)

    def forward(self, x):
        self.dead(torch.ones_like(x))  # thrown away (what it saves nothing kept reads)
        self.late * 3  # thrown away; ``late`` is read again below
        y = self.a(x).clone()
        out = y * 2 + self.late
        y.add_(self.dead.weight.sum())  # written after its last read: dead
        return out


def test_weights_that_no_kept_op_reads_stay_resident():
    """A dropped op's weights are resident on the GPU all the same (they are parameters);
    with no gradient and no optimizer state (the loss does not depend on them) they are
    the probe's resident_weight_bytes, which memory_trace adds to resident_bytes. A weight
    that a kept op reads too is that op's."""
    with torch.device("meta"):
        m, x = _DeadWrite(), torch.empty(4, 8)
    p, trace = _probe(m, x, lambda y: y.sum())
    assert "add_" not in [n.kind for n in p.nodes]
    assert not any(n.out_shape == (4, 5) for n in p.nodes)  # self.dead(x) is dropped
    late = next(n for n in p.nodes if n.kind == "add")
    assert late.weight_bytes == 4 * 8 * 4
    dead = (8 * 5 + 5) * 4 + 4 * 8 * 4  # self.dead's weights and ``unread``
    assert p.resident_weight_bytes == dead
    assert trace.weight_bytes == (8 * 8 + 8 + 4 * 8) * 4 == _param_bytes(m) - dead


def dead_head(**_):
    """A factory (``tests.test_op_probe:dead_head``) with a head that nothing reads."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(12, 7), nn.Linear(12, 5)

        def forward(self, x):
            x = x.flatten(1)
            self.b(torch.ones_like(x))  # (one reading x is kept, as it saves x: NOTE [op probe])
            return self.a(x)
    return M()


def test_memory_trace_holds_unread_weights_as_resident_bytes():
    from vdnnsim.api import resolve_gpu
    from vdnnsim.gpu.probe.aten import memory_trace
    gpu = resolve_gpu("h200")
    d = memory_trace("tests.test_op_probe:dead_head", 3, gpu, input_spec="image:1,1,12:7")
    trace = trace_from_dict(d, "t")
    assert trace.weight_bytes == (12 * 7 + 7) * 4
    assert trace.resident_bytes == (12 * 5 + 5) * 4 + gpu.cublas_workspace_bytes
    assert f"{(12 * 5 + 5) * 4} bytes of weights" in d["source"]["note"]


class _InPlaceActs(nn.Module):
    """timm's rexnet: in-place SiLU (``inplace=True``), an in-place hard swish and an SE
    gate multiplied in place (``x.mul_(gate)``). Each op's backward needs its input as it
    was, so autograd saves a copy of it (``original_self = self.clone()``) before the op
    overwrites it."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 32)
        self.act = nn.SiLU(inplace=True)
        self.gate = nn.Linear(32, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        x = self.act(self.a(x))
        x = nn.functional.hardswish(self.b(x), inplace=True)
        x = x * 1  # a fresh tensor for the gate to write
        x.mul_(torch.sigmoid(self.gate(x)))
        return self.head(x)


def _saved_on_cpu(model, x, loss):
    """What autograd keeps at the end of the forward pass: the storages of its saved
    tensors (weights and the input left out), each once."""
    skip = {q.untyped_storage().data_ptr() for q in model.parameters()}
    skip.add(x.untyped_storage().data_ptr())
    held: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            held[st.data_ptr()] = st.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = loss(model(x))
    return sum(held.values()), out


@pytest.mark.parametrize("device", ["meta", "cpu"])  # cpu: the profiler's path (real tensors)
def test_autograds_copy_of_an_in_place_ops_input_is_saved(device):
    """timm's rexnet_100 (traces/h200_timm_heldout, batch 64): the probe dropped autograd's copies
    of the inputs of its in-place SiLUs (a clone no later op reads), 18% of the measured
    peak (4.60 against 5.63 GiB; 5.62 with the copies). The saved bytes are now a CPU
    run's, the copies held until the in-place op's backward, with no gradient of their own."""
    torch.manual_seed(0)
    cpu = _InPlaceActs().train()
    want, _ = _saved_on_cpu(cpu, torch.randn(8, 16), lambda y: y.sum())
    with torch.device(device):
        m, x = _InPlaceActs().train(), torch.randn(8, 16)
    p, trace = _probe(m, x, lambda y: y.sum())
    got = {s.tensor: s.nbytes for n in p.nodes for s in n.saved if s.tensor != "data"}
    assert sum(got.values()) == want
    copies = [n for n in p.nodes if n.kind == "clone"]
    assert len(copies) == 3 and not any(n.requires_grad for n in copies)
    for c in copies:  # saved by the in-place op that follows it, not by the clone
        user = p.nodes[p.nodes.index(c) + 1]
        assert user.kind.endswith("_") and any(s.tensor == c.name for s in user.saved)
        assert not any(s.tensor == c.name for s in c.saved)
        assert not trace.tensors[c.name].requires_grad
    assert _replays(trace) > 0


@pytest.mark.slow
@pytest.mark.skipif(not HAS_HF, reason="needs transformers")
def test_the_h200_transformer_runs_are_predicted_from_the_meta_device():
    """experiments/transformers/meta_check.py on traces/h200_transformers: issue 14's meta-device target
    is 3% median and 8% max for peak allocated memory, met on both sets since autocast's
    cross-entropy is emulated as CUDA runs it (a 16-bit log_softmax; before, the masked LMs
    in bf16 were over by up to 8.9%). The worst run is Llama-style 1B in fp32 at 2048 tokens (-2.2%)."""
    sys.path.insert(0, str(ROOT / "experiments" / "transformers"))
    try:
        import meta_check
    finally:
        sys.path.pop(0)
    errs: dict[str, list[float]] = {}
    # backwards: docs/validation.md's check runs the script forwards, and where the two run
    # at once they trace half each (NOTE [trace cache]), not each waiting on the other's
    for name, r, got, want in meta_check.rows(reverse=True):
        errs.setdefault(name, []).append(abs(got / want - 1))
    assert len(errs["main"]) == 30 and len(errs["heldout"]) == 12
    assert statistics.median(errs["main"]) <= 0.03 and max(errs["main"]) <= 0.08
    assert statistics.median(errs["heldout"]) <= 0.03 and max(errs["heldout"]) <= 0.08


def test_autocast_cross_entropy_keeps_a_16_bit_log_softmax():
    """NOTE [op probe]: under CUDA's autocast a bf16 logits tensor's cross-entropy saves a
    bf16 log_softmax and nll_loss an fp32 copy of it (as the H200 ran BERT's masked-LM
    loss); an fp32 input takes the plain path."""
    from vdnnsim.gpu.probe.aten import _Autocast

    lin = nn.Linear(16, 100).to("meta")
    y = torch.zeros(8, dtype=torch.long, device="meta")

    def ops(model_out_dtype):
        p, _ = _probe(lin, torch.empty(8, 16, device="meta"),
                      lambda z: nn.functional.cross_entropy(z.to(model_out_dtype), y),
                      torch.bfloat16)
        return [(n.op.split(".")[1], n.out_nbytes) for n in p.nodes]
    low = ops(torch.bfloat16)
    names = [o for o, _ in low]
    i = names.index("_log_softmax")
    assert low[i][1] == 8 * 100 * 2  # bf16
    assert names[i + 1] == "_to_copy" and low[i + 1][1] == 8 * 100 * 4  # then fp32
    assert "_log_softmax" in [o for o, _ in ops(torch.float32)]
    assert _Autocast.active is None


# -- NOTE [op values]: a forward pass that reads values ----------------------------------
class _Branch(nn.Module):
    """Picks its path by a mask it makes (as transformers' masking code does)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        mask = torch.ones(x.shape[0], device=x.device)
        if mask.sum() == mask.numel():  # all ones: CUDA takes this path
            return self.lin(x).relu()
        return self.lin(x).tanh()


class _Positions(nn.Module):
    """Token positions from a padding mask of the batch, sized by the batch's values."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(50, 8)
        self.pos = nn.Embedding(64, 8)

    def forward(self, ids):
        mask = (ids != 0).long()
        pos = torch.cumsum(mask, 1) * mask
        h = self.tok(ids) + self.pos(pos)
        if (ids == 0).any():  # depends on the batch: its CPU values answer it
            h = h * 2
        n = int(ids.max()) + 1  # a tensor sized by a value of the batch
        return h * torch.ones(n, 1, device=ids.device)[:1]


class _FromActivations(nn.Module):
    def __init__(self, how: str):
        super().__init__()
        self.lin, self.how = nn.Linear(8, 8), how

    def forward(self, x):
        y = self.lin(x)
        if self.how == "item":
            return y * 2 if y.sum() > 0 else y
        if self.how == "mask":
            return y[y > 0]
        if self.how == "numpy":  # outside ATen: no op to name, the meta device's own words
            return y * float(y.detach().numpy().sum())
        m = torch.ones(4, device=x.device)  # values, until a write from the activations
        m.mul_(y.sum())
        return y.relu() if m.sum() > 0 else y


def _nodes(p):
    """The probe's graph with each op named by its place (a meta factory op dispatches a
    ``detach`` the CPU's does not, which shifts the ops' numbers)."""
    at = {n.name: f"{n.kind}#{i}" for i, n in enumerate(p.nodes)}

    def rn(t):
        head, sep, tail = t.partition(":")
        return at.get(head, head) + sep + tail
    return [(n.kind, n.out_nbytes, n.out_shape, tuple(map(rn, n.inputs)),
             rn(n.alias_of or ""), tuple((rn(s.tensor), s.nbytes, s.role) for s in n.saved))
            for n in p.nodes]


def test_a_mask_made_in_the_model_takes_the_path_cuda_would():
    p, _ = _probe(_Branch().to("meta"), torch.empty(4, 8, device="meta"), lambda y: y.sum())
    assert [n.kind for n in p.nodes] == ["addmm", "relu", "sum"]


def test_values_of_the_batch_are_those_of_a_cpu_run():
    """NOTE [op values]: on the meta device with the batch's CPU values, the probe records
    what it records running the same module on the CPU for real."""
    ids = torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(1))
    ids[0, -2:] = 0
    torch.manual_seed(0)
    cpu = _Positions()
    meta = _Positions().to("meta")

    def loss(m, b):
        return m(b["x"]).sum()
    real = probe_ops(cpu, {"x": ids}, loss, "t")
    got = probe_ops(meta, {"x": ids.to("meta")}, loss, "t", values={"x": ids})
    assert _nodes(got) == _nodes(real)
    ones = next(n for n in got.nodes if n.kind == "ones")
    assert ones.out_shape == (int(ids.max()) + 1, 1)
    assert "mul" in [n.kind for n in got.nodes[-4:]]  # the branch on a zero token taken


class _PadCheck(nn.Module):
    """Asks, as transformers does, whether the first or last token of a sequence is padding
    (a list index of the batch), then takes one path or the other."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)

    def forward(self, x):
        h = self.emb(x)
        return h * 2 if 0 in x[:, [-1, 0]] else h


def test_a_list_index_of_the_batch_keeps_its_values():
    """NOTE [op values] (ListIndices): the list becomes a CPU tensor with its values, so the
    probe answers the question from the batch, both ways, as a CPU run does."""
    for pad in (True, False):
        ids = torch.randint(1, 50, (3, 7), generator=torch.Generator().manual_seed(2))
        if pad:
            ids[1, -1] = 0
        torch.manual_seed(0)
        real = probe_ops(_PadCheck(), {"x": ids}, lambda m, b: m(b["x"]).sum(), "t")
        got = probe_ops(_PadCheck().to("meta"), {"x": ids.to("meta")},
                        lambda m, b: m(b["x"]).sum(), "t", values={"x": ids})
        assert _nodes(got) == _nodes(real)
        assert ("mul" in [n.kind for n in got.nodes]) == pad


@pytest.mark.skipif(not HAS_HF, reason="needs transformers")
@pytest.mark.parametrize("dtype", ["fp32", "autocast-bf16"])
def test_deberta_v2_traces_on_the_meta_device(dtype):
    """Its relative positions come from the length and its padding question from the batch:
    nothing it reads comes from the weights or the activations."""
    from vdnnsim.api import resolve_gpu
    from vdnnsim.gpu.probe.aten import memory_trace
    d = memory_trace(f"hf:{ROOT / 'tests' / 'hf' / 'deberta-tiny.yaml'}", 2,
                     resolve_gpu("h200"), dtype, 32)
    trace = trace_from_dict(d, "deberta-tiny")
    modules = [x.attrs.get("module", "") for x in trace.layers]
    assert sum("attention.self" in m for m in modules) > 10  # both layers' attention


@pytest.mark.parametrize("how,op", [("item", "aten::_local_scalar_dense"),
                                    ("mask", "aten::index"),
                                    ("stale", "aten::_local_scalar_dense"),
                                    ("numpy", "can't convert meta device type tensor")])
def test_a_value_of_the_activations_is_one_line_naming_the_op(how, op):
    from vdnnsim.errors import ConfigError
    with pytest.raises(ConfigError) as e:
        _probe(_FromActivations(how).to("meta"), torch.empty(4, 8, device="meta"),
               lambda y: y.sum())
    msg = str(e.value)
    assert op in msg and "vdnnsim profile" in msg and "\n" not in msg


class _ValueNet(nn.Module):
    def __init__(self, vocab: int = 50):
        super().__init__()
        self.emb, self.out = nn.Embedding(vocab, 8), nn.Linear(8, vocab)

    def forward(self, x):
        h = self.emb(x)
        return self.out(h * 2 if h.sum() > 0 else h)


def value_net():
    """A factory (NOTE [workloads]) whose forward pass reads its activations' value."""
    return _ValueNet()


def test_a_value_dependent_factory_model_is_one_line_naming_the_op():
    from vdnnsim.errors import ConfigError
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.hardware import gpu_preset
    with pytest.raises(ConfigError) as e:
        memory_trace("tests.test_op_probe:value_net", 2, gpu_preset("h200"),
                     input_spec="tokens:6:50")
    msg = str(e.value)
    assert msg.startswith("tests.test_op_probe.value_net: its forward pass reads a tensor's "
                          "value (aten::_local_scalar_dense") and "\n" not in msg


def widths_net():
    """A factory that computes its widths with tensors, as torchvision's RegNets do."""
    w = int(torch.round(torch.tensor(2.7) * 3).item())
    return nn.Sequential(nn.Linear(8, w), nn.ReLU(), nn.Linear(w, 8))


def test_a_factory_that_reads_tensor_values_while_built_is_built_on_the_cpu():
    """NOTE [workloads]: on the meta device its construction cannot read a value ("Cannot
    copy out of meta tensor"); it is built on the CPU and moved to the meta device, and
    traces as any other model."""
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.hardware import gpu_preset
    d = memory_trace("tests.test_op_probe:widths_net", 2, gpu_preset("h200"),
                     input_spec="image:1,1,8:8")
    linears = [x for x in d["layers"] if x["kind"] in ("addmm", "mm")]
    assert len(linears) == 2 and sum(x["weight_bytes"] for x in linears) == 4 * (8 * 8 + 8 + 8 * 8 + 8)


class _Picky(nn.Module):
    """Built for one size, refusing any other, as timm's ViTs do (an assert, a ValueError)."""

    def __init__(self, how: str = "assert"):
        super().__init__()
        self.lin, self.how = nn.Linear(8, 8), how

    def forward(self, x):
        if self.how == "assert":
            torch._assert(x.shape[-1] == 8, f"Input width ({x.shape[-1]}) doesn't match model (8).")
        elif x.shape[-1] != 8:
            raise ValueError("wrong width")
        return self.lin(x)


def two_heads():
    """A factory (NOTE [workloads]) whose model returns two outputs (torchvision's
    inception_v3 in training: its logits and the auxiliary head's)."""
    return _TwoHeads()


class _TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 3)

    def forward(self, x):
        x = x.flatten(1)
        return self.a(x), self.b(x)


@pytest.mark.parametrize("how,why", [
    ("assert", "AssertionError: Input width (6) doesn't match model (8)."),
    ("raise", "ValueError: wrong width")])
def test_a_model_that_refuses_its_input_is_one_line(how, why):
    """Issue 26's timm sweep: a timm ViT given another image size (--input image:3,100,100
    for a 224 model) ended in the model's own AssertionError and a traceback."""
    from vdnnsim.errors import ConfigError
    with pytest.raises(ConfigError) as e:
        _probe(_Picky(how).to("meta"), torch.empty(4, 6, device="meta"), lambda y: y.sum())
    msg = str(e.value)
    assert msg.startswith(f"t: its forward pass failed on a batch of shape (4, 6) ({why}); "
                          "check that the input (--input, --seq-len) is what the model takes")
    assert "vdnnsim profile" in msg and "\n" not in msg


def test_a_failure_in_vdnnsims_own_emulation_keeps_its_traceback(monkeypatch):
    """NOTE [op values]: what raises in vdnnsim's stand-ins for CUDA is vdnnsim's bug, not
    the user's input: no one-line error hides it."""
    from vdnnsim.gpu.probe import aten as aten_probe

    def broken(self, a, dtype):
        raise KeyError("a bug of vdnnsim's")
    monkeypatch.setattr(aten_probe._Autocast, "_cast", broken)
    with pytest.raises(KeyError):
        _probe(_Picky().to("meta"), torch.empty(4, 8, device="meta"), lambda y: y.sum(),
               torch.bfloat16)


def test_a_model_with_two_outputs_is_one_line_naming_what_it_returned():
    from vdnnsim.errors import ConfigError
    from vdnnsim.gpu.probe.aten import memory_trace
    from vdnnsim.hardware import gpu_preset
    with pytest.raises(ConfigError) as e:
        memory_trace("tests.test_op_probe:two_heads", 2, gpu_preset("h200"),
                     input_spec="image:1,2,2:3")
    assert str(e.value).startswith("tests.test_op_probe.two_heads: the model returned tuple, "
                                   "not a tensor of logits")


@pytest.mark.skipif(not HAS_HF, reason="needs transformers")
def test_opt_traces_on_the_meta_device(tmp_path, capsys):
    """Issue 25: OPT's masking code asks whether its all-ones mask is all ones (an
    ``item`` on the meta device, a RuntimeError before NOTE [op values]); answered from the
    mask's CPU values, the causal mask is left to SDPA's is_causal, as on CUDA: attention
    reads q, k and v only, and no S x S mask is made."""
    from vdnnsim.api import run_trace
    from vdnnsim.cli import main
    from vdnnsim.hardware import gpu_preset
    from vdnnsim.trace import load_trace
    out = tmp_path / "opt.yaml"
    code = main(["trace", "--model", f"hf:{ROOT / 'tests' / 'hf' / 'opt-tiny.yaml'}", "-b",
                 "2", "--seq-len", "32", "--gpu", "h200", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    t = load_trace(out)
    attn = [x for x in t.layers if x.kind == "_scaled_dot_product_efficient_attention"]
    assert len(attn) == 2 and all(len(x.inputs) == 3 for x in attn)
    assert not [x for x in t.tensors.values() if x.shape and x.shape[-2:] == (32, 32)]
    assert {x.attrs["block"] for x in t.layers} == {0, 1, 2, 3}  # two blocks, head, loss
    r = run_trace(t, gpu_preset("h200"), "eager")
    assert r.fits and r.timed and r.peak_memory_bytes > r.weight_bytes  # NOTE [op model]
    assert r.iteration_time_ns > 0


@pytest.mark.skipif(not HAS_HF, reason="needs transformers")
def test_an_hf_cnn_without_an_sdpa_path_is_built_eager_and_traced(tmp_path, capsys):
    """A transformers CNN has no attention, and transformers refuses SDPA for it:
    NOTE [hf models] builds such a class with its eager path unless the config names one (asking
    for SDPA by name still fails in one line)."""
    from vdnnsim.cli import main
    from vdnnsim.gpu.model.hf import build
    from vdnnsim.trace import load_trace
    path = ROOT / "tests" / "hf" / "mobilenet-tiny.yaml"
    model, _ = build(str(path))
    assert model.config._attn_implementation == "eager"
    out = tmp_path / "m.yaml"
    assert main(["trace", "--model", f"hf:{path}", "-b", "2", "--gpu", "h200", "-o",
                 str(out)]) == 0, capsys.readouterr().err
    # the stem and 13 depthwise-separable pairs
    assert sum(x.kind == "convolution" for x in load_trace(out).layers) == 27
    code = main(["trace", "--model", f"hf:{path}", "--model-arg",
                 "attn_implementation=sdpa", "-b", "2", "-o", str(tmp_path / "n.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "scaled_dot_product_attention" in err and len(err.splitlines()) == 1


@pytest.mark.skipif(not HAS_HF, reason="needs transformers")
def test_an_hf_cnn_whose_config_names_no_image_size_takes_224(tmp_path, capsys):
    """HGNetV2's config has no image_size (a CNN takes any): the workload feeds ImageNet's
    224 x 224 (NOTE [hf models]) instead of an AttributeError's traceback."""
    from vdnnsim.cli import main
    from vdnnsim.trace import load_trace
    out = tmp_path / "h.yaml"
    assert main(["trace", "--model", f"hf:{ROOT / 'tests' / 'hf' / 'hgnetv2-tiny.yaml'}",
                 "-b", "2", "-o", str(out)]) == 0, capsys.readouterr().err
    t = load_trace(out)
    image = next(x for x in t.tensors.values() if x.kind == "input")
    assert image.size_bytes == 2 * 3 * 224 * 224 * 4


class _Reused(nn.Module):
    """A module called twice, a nested one, and ops in the model's own forward."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Sequential(nn.Linear(8, 8), nn.ReLU())

    def forward(self, x):
        return self.a(self.b(self.a(x)) * 2)


def test_every_op_carries_the_path_of_the_module_it_ran_in():
    """NOTE [module paths]: the innermost module, both calls of a reused one, the model's
    own forward as "", the loss outside it; the paths reach the trace's layer attrs."""
    from vdnnsim.gpu.probe.aten import OUTSIDE
    with torch.device("meta"):
        model = _Reused()
    x = torch.randn(4, 8, device="meta", requires_grad=False)
    p = probe_ops(model, {"x": x}, lambda m, b: m(b["x"]).sum(), "t")
    got = [(n.kind, n.attrs["module"]) for n in p.nodes if n.kind != "flatten"]
    assert got == [("addmm", "a"), ("addmm", "b.0"), ("relu", "b.1"), ("mul", ""),
                   ("addmm", "a"), ("sum", OUTSIDE)], got
    d = assemble(p, source={"kind": "synthesized", "gpu": "h200", "cost_model": "none"})
    assert [layer["attrs"]["module"] for layer in d["layers"]][:2] == ["a", "b.0"]


def test_a_forward_that_raises_leaves_no_module_path_behind():
    from vdnnsim.gpu.probe.aten import OUTSIDE, module_paths
    seen = []
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(3, 3))
    handles = module_paths(model, seen.append)
    try:
        with pytest.raises(RuntimeError):
            model(torch.randn(1, 2))
    finally:
        for h in handles:
            h.remove()
    assert seen[-1] == OUTSIDE and seen[:3] == ["", "0", ""]
