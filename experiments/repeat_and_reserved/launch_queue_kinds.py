"""GPU. Issue 28, NOTE [launch queue] / NOTE [host issue]: does a stream's launch queue
hold a fixed number of kernels whatever the kernel? NOTE [kernel counts] measured its depth
with one kind of launch (``x.add_(1)``, 1,021 on the H200); ConvNeXt-T (128)'s profile
counts 1,060 kernels in each of stage 1's depthwise backward passes, and its measured host
was not held back by them where the replay's is (docs/validation.md).

For each op below, on a stream kept busy by ``torch.cuda._sleep``: how many calls the host
issues before one blocks, and (from torch.profiler, one call after warm-up under
``cudnn.benchmark``) how many kernels and which runtime API calls one call makes. Prints
one JSON object:

    python3 experiments/repeat_and_reserved/launch_queue_kinds.py [NAME-PART...] > OUT/lq.json
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

BLOCK_NS = 50_000_000  # a call that takes 50 ms waited for the sleeping stream
SLEEP_CYCLES = 6_000_000_000  # ~3 s of GPU cycles


def cases():
    dev = "cuda"
    x1 = torch.zeros(1, device=dev)
    yield "add_1elem", lambda: x1.add_(1)
    ev = torch.cuda.Event()  # the vDNN runtime's event records and stream waits
    yield "event_record", lambda: ev.record()
    side = torch.cuda.Stream()
    side_ev = torch.cuda.Event()
    side_ev.record(side)
    yield "wait_event", lambda: torch.cuda.current_stream().wait_event(side_ev)

    def record_and_add():
        ev.record()
        x1.add_(1)
    yield "event_record_and_add", record_and_add

    def dwconv(batch, ch=96, hw=56, k=7, fmt=torch.contiguous_format):
        x = torch.randn(batch, ch, hw, hw, device=dev).to(memory_format=fmt)
        w = torch.randn(ch, 1, k, k, device=dev).to(memory_format=fmt)
        go = torch.randn(batch, ch, hw, hw, device=dev).to(memory_format=fmt)

        def bwd():
            return torch.ops.aten.convolution_backward(
                go, x, w, [ch], [1, 1], [k // 2, k // 2], [1, 1], False, [0, 0], ch,
                [True, True, True])

        def fwd():
            return torch.nn.functional.conv2d(x, w, None, 1, k // 2, 1, ch)
        return fwd, bwd

    for b in (64, 128):
        fwd, bwd = dwconv(b)
        yield f"dwconv7_b{b}_fwd", fwd
        yield f"dwconv7_b{b}_bwd", bwd
    for b in (64, 128):  # ConvNeXt's blocks hand the depthwise conv channels-last tensors
        fwd, bwd = dwconv(b, fmt=torch.channels_last)
        yield f"dwconv7_b{b}_cl_fwd", fwd
        yield f"dwconv7_b{b}_cl_bwd", bwd
    import torchvision  # ConvNeXt-T's first block (stage 1), forward and backward
    block = torchvision.models.convnext_tiny().features[1][0].to(dev)
    for b in (64, 128):
        inp = torch.randn(b, 96, 56, 56, device=dev, requires_grad=True)
        yield f"convnext_block_b{b}_fwdbwd", lambda inp=inp: block(inp).sum().backward()
    a = torch.randn(1024, 1024, device=dev)
    yield "mm_1024", lambda: a @ a
    c = torch.randn(32, 64, 56, 56, device=dev)
    wc = torch.randn(64, 64, 3, 3, device=dev)
    yield "conv3x3_b32_fwd", lambda: torch.nn.functional.conv2d(c, wc, None, 1, 1)
    ln = torch.nn.LayerNorm(96).to(dev)
    h = torch.randn(128, 56, 56, 96, device=dev)
    yield "layernorm_b128", lambda: ln(h)


def counts(fn) -> dict:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        events = json.load(open(path))["traceEvents"]
    finally:
        os.unlink(path)
    kernels, runtime, streams = Counter(), Counter(), Counter()
    for e in events:
        if e.get("ph") != "X":
            continue
        name, cat = str(e.get("name", "")), str(e.get("cat", ""))
        if cat in ("kernel", "gpu_memset", "gpu_memcpy"):
            kernels[name[:80]] += 1
            streams[str((e.get("args") or {}).get("stream"))] += 1
        elif cat in ("cuda_runtime", "cuda_driver"):
            runtime[name] += 1
    return {"kernels": sum(kernels.values()), "kernel_names": kernels.most_common(4),
            "runtime_calls": dict(runtime), "per_stream": dict(streams)}


def queue(fn, max_calls: int = 20000, max_s: float = 1.5) -> dict:
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    ts = []
    t_start = time.perf_counter()
    for _ in range(max_calls):
        t0 = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t0)
        if ts[-1] > BLOCK_NS or time.perf_counter() - t_start > max_s:
            break
    torch.cuda.synchronize()
    blocked = ts[-1] > BLOCK_NS
    fast = ts[:-1] if blocked else ts
    return {"calls_before_block": len(ts) - 1 if blocked else None,
            "calls_issued": len(ts), "blocked": blocked,
            "call_host_us_median": round(statistics.median(fast) / 1e3, 2) if fast else None,
            "blocked_call_ms": round(ts[-1] / 1e6, 1) if blocked else None}


def main() -> int:
    torch.backends.cudnn.benchmark = True
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "cases": {}}
    only = sys.argv[1:]  # optional: run only the cases whose names contain one of these
    for name, fn in cases():
        if only and not any(o in name for o in only):
            continue
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        rec = counts(fn)
        rec["queue"] = [queue(fn) for _ in range(2)]
        q = [r["calls_before_block"] for r in rec["queue"] if r["calls_before_block"] is not None]
        if q:
            rec["kernels_before_block"] = [n * rec["kernels"] for n in q]
        out["cases"][name] = rec
        print(name, json.dumps(rec), file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
