"""GPU (the H200 device machine). Issue 28: what the vDNN runtime's stream commands cost in
the launch queue (NOTE [launch queue]).

The preset's ``launch_queue`` (1021) counts kernels on one busy stream (NOTE [kernel
counts]). The vDNN runtime also puts event records and event waits on the compute stream
(vdnnsim/gpu/runtime/vdnn.py: an event before each offload, a wait for the copies with sync,
``wait_stream`` before each prefetch, a wait for each prefetch). Whether they take room in
the queue decides how far the host runs ahead of a copy-bound GPU, which moves the
reserved peak of vDNN runs (session 17: DenseNet-121 (64) vdnn_all's replayed peak goes
from -28.8% to +13.5% as the queue goes from a quarter to twice the preset's depth).

Part A, microbenchmarks: a long ``torch.cuda._sleep`` keeps the stream busy while the
host issues one pattern after another; the first pattern whose issue blocks (over
BLOCK_NS) tells how many fit. Part B: the runtime's API calls in one training step of a
model under baseline and under a vDNN policy, counted by torch.profiler.

    python3 experiments/repeat_and_reserved/queue_commands.py OUT.json [MODEL BATCH POLICY]...
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

import torch

BLOCK_NS = 200_000
SLEEP = 4_000_000_000  # GPU cycles: about two seconds on an H200


def depth(pattern, units: int = 4096) -> int | None:
    """How many ``pattern()`` calls the host makes before one blocks."""
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP)
    ts = []
    for _ in range(units):
        t0 = time.perf_counter_ns()
        pattern()
        ts.append(time.perf_counter_ns() - t0)
    torch.cuda.synchronize()
    return next((i for i, t in enumerate(ts) if t > BLOCK_NS), None)


def part_a(trials: int = 3) -> dict:
    x = torch.zeros(1, device="cuda")
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    host = torch.zeros(256, pin_memory=True)
    dev = torch.zeros(256, device="cuda")
    events = [torch.cuda.Event() for _ in range(4096)]
    k = iter(range(10**9))

    def kernel():
        x.add_(1)

    def kernel_record():
        x.add_(1)
        events[next(k) % len(events)].record(cur)

    blocker = torch.cuda.Event()

    def kernel_wait():  # waits on an event of a busy side stream (not yet complete)
        x.add_(1)
        cur.wait_event(blocker)

    def kernel_wait_stream():  # what a prefetch does before its copy: the side waits
        x.add_(1)
        side.wait_stream(cur)

    def kernel_copy():  # a copy on the compute stream itself (an on-demand fetch)
        x.add_(1)
        dev.copy_(host, non_blocking=True)

    def record_only():
        events[next(k) % len(events)].record(cur)

    def wait_only():
        cur.wait_event(blocker)

    out: dict = {}
    for name, fn in (("kernel", kernel), ("kernel+event_record", kernel_record),
                     ("kernel+wait_event", kernel_wait), ("kernel+wait_stream", kernel_wait_stream),
                     ("kernel+h2d_copy", kernel_copy), ("event_record", record_only),
                     ("wait_event", wait_only)):
        res = []
        for _ in range(trials):
            with torch.cuda.stream(side):
                torch.cuda._sleep(SLEEP)
                blocker.record(side)
            res.append(depth(fn))
        out[name] = res
        print(name, res, flush=True)
    return out


def part_b(model: str, batch: int, policy: str) -> dict:
    from torch.profiler import ProfilerActivity, profile

    from vdnnsim.gpu.runtime.vdnn import VDNN
    from vdnnsim.gpu.model.workload import build_workload, training_step
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    with dev:
        work = build_workload(model)
    work.model.to(dev).train()
    runtime = VDNN(work.model, work.shape, policy) if policy != "baseline" else None
    step = training_step(work, batch, dev, "fp32", "sgd", runner=runtime)

    def run():
        step()
        if runtime is not None:
            runtime.end_iteration()

    for _ in range(3):
        run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    calls = Counter(e.name for e in prof.events()
                    if e.name.startswith("cuda") or e.name.startswith("cu"))
    n = runtime and (sum(1 for o in runtime.offload if o), sum(1 for j in runtime.schedule
                                                               if j >= 0))
    del step, runtime, work
    torch.cuda.empty_cache()
    return {"model": model, "batch": batch, "policy": policy,
            "calls": dict(calls.most_common(30)),
            "offloading_layers": n[0] if n else 0, "prefetching_layers": n[1] if n else 0}


def main() -> int:
    out = sys.argv[1]
    runs = sys.argv[2:]
    rec = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "block_ns": BLOCK_NS, "part_a": part_a(), "part_b": []}
    for m, b, p in zip(runs[0::3], runs[1::3], runs[2::3]):
        rec["part_b"].append(part_b(m, int(b), p))
        print(rec["part_b"][-1], flush=True)
    with open(out, "w") as f:
        json.dump(rec, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
