"""The profiler for any model (``vdnnsim profile --model hf:NAME | package.module:factory``):
the op probe run on the GPU for memory, whole training steps timed block by block.

NOTE [block timing]
Memory: the op probe (NOTE [op probe]) runs the step's forward pass and loss once on the
GPU itself, on the real batch, so nothing is emulated: CUDA's dropout, the SDPA kernel the
GPU picks and autocast's casts and weight cache are the real ones. Its recorder holds only
what autograd saves; an output that dies leaves its storage's entry (a finalizer), so the
probe needs no more memory than the step.
Time: the unit is the block (``find_blocks``: the items of the model's largest ModuleList,
a transformer's layers), not the op: an event and a host clock reading at each region
boundary (NOTE in aten_probe.py's ``block_regions``: region 0 before the first block, one
region a block, the head with the loss last) in the forward pass, and from a pre-hook on
the autograd node of each block's input (and of the last block's output) in the backward
pass, inside whole training steps after warm-up, instrumented and plain steps alternating,
each region's time the median over the steps and the marks' own cost taken off as in NOTE
[layer timing] and NOTE [host timing] (a few dozen marks a step, not thousands). A region's
host time is split equally over its ops, its GPU time in proportion to a roofline estimate
of each op (max(flops / peak, bytes / bandwidth) of the op's dtype on the trace's GPU
preset; a view gets nothing; in the backward pass an op with flops counts twice, an op
that needs no gradient not at all). The split is an estimate and only moves time within a
block: the blocks' forward and backward times, and so the step, are measured; where a
replay offloads a block's tensors, the overlap inside the block follows the estimate.
(Where the host set the pace, a region's GPU span holds the GPU's waits for the host, and
a replay that also issues each op at its host time could count them twice; a split fitted
so that the replay ends each region on time was tried on the 46 committed profiles and
changed their replays by 0.3% at the median: not kept.)
The optimizer step is the workload's own (``optimizer``): its GPU and host
times, the bytes of the state it keeps on the GPU (AdamW's moments, into
``resident_bytes``) and the allocator's peak while it runs beyond what it started with
(``step_workspace_bytes``; on a CPU, counted as NOTE [optimizer state] counts it), so the
trace is that optimizer's. Workspaces inside a kernel are not measured (the op probe sees
none).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from .aten_probe import block_output, block_regions, find_blocks, probe_ops
from .profile import _Clock, assemble, resident_bytes, software
from .workload import DTYPES, PRECISIONS, build_workload, training_step

MATMUL_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _hidden(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The hidden state a block is called with: its first floating-point tensor argument
    that needs a gradient."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.requires_grad:
            return a
    return None


def time_blocks(step: Any, blocks: list[torch.nn.Module], trials: int, cuda: bool,
                warmup: int = 3) -> dict[str, Any]:
    """NOTE [block timing]: per region (0 .. len(blocks) + 1) the median forward and
    backward GPU and host ms of whole training steps, the marks' cost taken off; and the
    step's own times."""
    clock = _Clock(cuda)
    host = time.perf_counter_ns
    n = len(blocks) + 2  # regions
    on = [False]
    fwd: list[tuple[int, Any, int]] = []
    bwd: list[tuple[int, Any, int]] = []
    hooked: dict[int, Any] = {}

    def mark_bwd(t: torch.Tensor | None, region: int) -> None:
        fn = getattr(t, "grad_fn", None)
        if fn is not None and id(fn) not in hooked:
            hooked[id(fn)] = fn
            fn.register_prehook(lambda g: bwd.append((region, clock.mark(), host())))

    handles = []
    for k, b in enumerate(blocks):
        def pre(m, args, kwargs, k=k):
            if on[0]:
                fwd.append((k + 1, clock.mark(), host()))
                mark_bwd(_hidden(args, kwargs), k)
        handles.append(b.register_forward_pre_hook(pre, with_kwargs=True))
    if blocks:
        def post(m, args, out):
            if on[0]:
                fwd.append((n - 1, clock.mark(), host()))
                mark_bwd(block_output(out), n - 2)
        handles.append(blocks[-1].register_forward_hook(post))

    def run(timed: bool) -> dict[str, Any]:
        on[0] = timed
        fwd.clear()
        bwd.clear()
        hooked.clear()
        h0 = host()
        step.optimizer.zero_grad(set_to_none=True)
        s, hs = clock.mark(), host()
        fwd.append((0, s, hs))
        loss = step.forward()
        f_end, hf = clock.mark(), host()
        bwd.append((n - 1, f_end, hf))
        step.backward(loss)
        del loss
        b_end, hb = clock.mark(), host()
        step.update()
        e, he = clock.mark(), host()
        return {"fwd": list(fwd) + [(None, f_end, hf)],
                "bwd": list(bwd) + [(None, b_end, hb)], "s": s, "f_end": f_end,
                "b_end": b_end, "end": e, "h": (hs - h0, hf - hs, hb - hf, he - hb)}

    try:
        for _ in range(warmup):
            run(True)
        gf: list[list[float]] = [[] for _ in range(n)]
        gb: list[list[float]] = [[] for _ in range(n)]
        hfs: list[list[float]] = [[] for _ in range(n)]
        hbs: list[list[float]] = [[] for _ in range(n)]
        ph: dict[str, list[float]] = {k: [] for k in (
            "if", "ib", "pf", "pb", "hif", "hib", "hpf", "hpb", "step", "hstep", "plain",
            "mf", "mb")}
        for _ in range(trials):  # instrumented and plain steps alternate
            for timed in (True, False):
                r = run(timed)
                if cuda:
                    r["end"].synchronize()
                key = "i" if timed else "p"
                ph[key + "f"].append(clock.ms(r["s"], r["f_end"]))
                ph[key + "b"].append(clock.ms(r["f_end"], r["b_end"]))
                ph["h" + key + "f"].append(r["h"][1] / 1e6)
                ph["h" + key + "b"].append(r["h"][2] / 1e6)
                if not timed:
                    ph["step"].append(clock.ms(r["b_end"], r["end"]))
                    ph["hstep"].append((r["h"][0] + r["h"][3]) / 1e6)
                    ph["plain"].append(clock.ms(r["s"], r["end"]))
                    continue
                ph["mf"].append(len(r["fwd"]) - 1)
                ph["mb"].append(len(r["bwd"]) - 1)
                for seq, g, hh in ((r["fwd"], gf, hfs), (r["bwd"], gb, hbs)):
                    for (k, a, ha), (_, b, hb) in zip(seq, seq[1:]):
                        g[k].append(clock.ms(a, b))
                        hh[k].append((hb - ha) / 1e6)
    finally:
        for h in handles:
            h.remove()
        hooked.clear()
    m = {k: statistics.median(v) for k, v in ph.items()}
    over = {"f": max(0.0, m["if"] - m["pf"]) / max(1, m["mf"]),
            "b": max(0.0, m["ib"] - m["pb"]) / max(1, m["mb"]),
            "hf": max(0.0, m["hif"] - m["hpf"]) / max(1, m["mf"]),
            "hb": max(0.0, m["hib"] - m["hpb"]) / max(1, m["mb"])}

    def med(v: list[float], o: float) -> float:
        return max(0.0, statistics.median(v) - o) if v else 0.0
    return {"fwd_ms": [med(v, over["f"]) for v in gf], "bwd_ms": [med(v, over["b"]) for v in gb],
            "host_fwd_ms": [med(v, over["hf"]) for v in hfs],
            "host_bwd_ms": [med(v, over["hb"]) for v in hbs],
            "step_ms": m["step"], "host_step_ms": m["hstep"], "plain_ms": m["plain"],
            "plain_fwd_ms": m["pf"], "plain_bwd_ms": m["pb"],
            "host_fwd_pass_ms": m["hpf"], "host_bwd_pass_ms": m["hpb"],
            "mark_ms": over}


def split_times(nodes: list[Any], t: dict[str, Any], gpu: Any
                ) -> tuple[dict[str, tuple[int, int, int, int]], dict[str, tuple[int, int]]]:
    """NOTE [block timing]: each region's measured times over its ops, in proportion to a
    roofline estimate (GPU) and equally (host)."""
    def cost(n: Any) -> float:
        if n.alias_of is not None and n.kind == "flatten":
            return 0.0
        dt = MATMUL_DTYPES.get(n.attrs.get("_dtype"), "fp32")
        return max(n.flops / gpu.flops(dt), n.attrs.get("_bytes", n.out_nbytes)
                   / gpu.mem_bw_bytes_per_s)
    regions: dict[int, list[Any]] = {}
    for n in nodes:
        regions.setdefault(int(n.attrs.get("block", 0)), []).append(n)
    times: dict[str, tuple[int, int, int, int]] = {}
    hosts: dict[str, tuple[int, int]] = {}
    for r, ops in regions.items():
        fw = [cost(n) for n in ops]
        bw = [c * (2 if n.flops else 1) if n.requires_grad else 0.0 for c, n in zip(fw, ops)]
        for w in (fw, bw):
            if not sum(w):
                w[-1] = 1.0  # nothing to go by: the region's last op takes it
        sf, sb = sum(fw), sum(bw)
        f_ns, b_ns = t["fwd_ms"][r] * 1e6, t["bwd_ms"][r] * 1e6
        hf, hb = t["host_fwd_ms"][r] * 1e6 / len(ops), t["host_bwd_ms"][r] * 1e6 / len(ops)
        for n, a, c in zip(ops, fw, bw):
            times[n.name] = (round(f_ns * a / sf), round(b_ns * c / sb), 0, 0)
            hosts[n.name] = (round(hf), round(hb))
    return times, hosts


def step_memory(step: Any, cuda: bool) -> tuple[int, int]:
    """NOTE [block timing]: the bytes of the optimizer's state on the device, and the
    step's temporaries (the allocator's peak during it beyond what it started with)."""
    step.optimizer.zero_grad(set_to_none=True)
    step.backward(step.forward())
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    step.update()
    temp = torch.cuda.max_memory_allocated() - before if cuda else None
    state = sum(t.numel() * t.element_size() for s in step.optimizer.state.values()
                for t in s.values() if isinstance(t, torch.Tensor) and t.device.type != "cpu")
    if temp is None:  # NOTE [optimizer state]'s count
        from ..optimizer import ADAM_TEMP
        temp = ADAM_TEMP * sum(p.numel() * p.element_size()
                               for p in step.workload.model.parameters()) if state else 0
    step.optimizer.zero_grad(set_to_none=True)
    return state, temp


def profile_workload(spec: str, batch_size: int, precision: str = "fp32",
                     seq_len: int | None = None, input_spec: str | None = None,
                     model_kwargs: dict[str, Any] | None = None, trials: int = 5,
                     device: str = "cuda", gpu: Any = None, optimizer: str = "sgd"
                     ) -> dict[str, Any]:
    """NOTE [block timing]: the trace (a dict) of one training step of any workload (NOTE
    [workloads]), profiled on ``device``; ``gpu`` the preset whose roofline splits a
    block's time over its ops (default h200)."""
    from ..api import resolve_gpu
    from ..errors import ConfigError

    if precision not in PRECISIONS:
        raise ConfigError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    gpu = gpu or resolve_gpu("h200")
    cuda = torch.device(device).type == "cuda"
    with torch.device(device):
        work = build_workload(spec, seq_len, input_spec, model_kwargs)
    step = training_step(work, batch_size, device, precision, optimizer)
    blocks = find_blocks(work.model)
    t = time_blocks(step, blocks, trials, cuda)
    if not cuda:  # a CPU runs each op as it is called: its wall clock is the op's time
        for k in ("host_fwd_ms", "host_bwd_ms"):
            t[k] = [0.0] * len(t[k])
        t["host_step_ms"] = 0.0
    state, temp = step_memory(step, cuda)
    p = probe_ops(work.model, step.batch, work.loss, work.name, step.autocast, blocks)
    times, hosts = split_times(p.nodes, t, gpu)
    pure = DTYPES.get(precision, torch.float32)
    resident = resident_bytes(work.model) if cuda else \
        sum(b.numel() * b.element_size() for b in work.model.buffers())
    name = torch.cuda.get_device_name() if cuda else f"cpu ({device})"
    src = {"kind": "profiled", "gpu": name, "software": software(),
           "note": f"vdnnsim profile --model {spec} --batch {batch_size} "
                   f"--dtype {precision}{f' --seq-len {seq_len}' if seq_len else ''} "
                   f"--optimizer {optimizer}: "
                   f"memory op by op on the GPU, time per block (NOTE [block timing]), "
                   f"{len(blocks)} blocks, medians of {trials} steps; a plain step took "
                   f"{t['plain_ms']:.2f} ms (forward {t['plain_fwd_ms']:.2f}, backward "
                   f"{t['plain_bwd_ms']:.2f}); the host issued the forward pass in "
                   f"{t['host_fwd_pass_ms']:.2f} ms and the backward in "
                   f"{t['host_bwd_pass_ms']:.2f} ms"}
    d = assemble(p, times=times, source=src, step_ns=round(t["step_ms"] * 1e6),
                 dtype={torch.float16: "fp16", torch.bfloat16: "bf16"}.get(pure, "fp32"),
                 hosts=hosts, host_step_ns=round(t["host_step_ms"] * 1e6))
    if resident + state:
        d["resident_bytes"] = resident + state
    if temp:
        d["step_workspace_bytes"] = temp
    d["optimizer"] = optimizer
    return d
