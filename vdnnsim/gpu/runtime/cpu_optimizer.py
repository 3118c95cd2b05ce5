"""The optimizer on the CPU: the runtime that offloads it (``CPUOffloadOptimizer``) and the
microbenchmark of the host that runs its step (``time_cpu_steps``).

NOTE [optimizer offload]
ZeRO-Offload's single-GPU case, as torchao's CPUOffloadOptimizer runs it: the parameters
stay on the GPU; each has a copy on the host (pinned, in the parameter's dtype) with a
pinned gradient buffer, and its own optimizer over that copy, whose state (Adam's two
moments) lives in host memory only. In the backward pass, as each parameter's gradient is
accumulated (``register_post_accumulate_grad_hook``), a side stream that has waited for
the compute stream copies it to the host, an event marks the copy, and the GPU gradient is
released to the side stream (``record_stream``; the caching allocator reuses it once the
copy has run): the GPU never holds the optimizer's state, and holds a gradient only until
its copy.

``step()`` takes the parameters in the order their gradients came: it waits for
each one's copy (the event), runs its optimizer's step on the CPU (AdamW ``fused=True``,
one multi-threaded kernel per tensor) and copies the updated parameter back on the side
stream, so the CPU steps the next while the link carries the last; the compute stream then
waits for the side stream, so the next forward pass reads the updated weights. The
arithmetic is the CPU optimizer's: the same update as the GPU's to rounding.

The simulator's model of it (vdnnsim/engine/optimizer_step.py) has the same parts: a
gradient copy after each layer's backward pass, the host waiting for each, a CPU step per
layer's parameters timed by ``Host.cpu_step_ns + cpu_step_ns_per_element x elements``
(fitted by ``vdnnsim.costs.fits cpu_step`` to ``time_cpu_steps``' records), slowed
by the copy back of the layer before it (NOTE [copy contention]), and a copy back per
layer.
"""

from __future__ import annotations

import statistics
import time
import weakref
from typing import Any, Iterable

import torch

from ...engine import PINNINGS, registered_bytes
from ...errors import ConfigError


def _cpu_optimizer(name: str, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    """The CPU step, PyTorch's defaults but lr 1e-3 as
    workload.make_optimizer; Adam and AdamW fused (one kernel per tensor)."""
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, fused=True)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, fused=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    raise ConfigError(f"optimizer {name!r}: one of sgd, adam, adamw")


# NOTE [optimizer pinning]
# Where the optimizer's host copies live. ``caching`` (the default, as torchao's
# CPUOffloadOptimizer does it): each parameter's copy and gradient buffer from PyTorch's
# pinned (caching host) allocator, which rounds every block up to a power of two: a
# Llama-2-7B's 11008 x 4096 fp32 matrices (172 MiB) take 256 MiB each, and its 50.2 GiB of
# copies take 66.0 GiB. ``registered``: one pageable buffer for all of them, each at a
# 64-byte boundary, page-locked once with cudaHostRegister: the copies take what they
# are, and the copies to and from the GPU run asynchronously as from any pinned memory.
# The engine counts either (vdnnsim/engine/compile.py, ``optimizer_pinned_bytes``); the
# run config's ``optimizer_pinning`` and ``vdnnsim measure --optimizer-pinning`` choose.


def _unregister(buf: torch.Tensor, device: torch.device) -> None:
    """Unlock the registered buffer once no copy uses it."""
    torch.cuda.synchronize(device)
    err = torch.cuda.cudart().cudaHostUnregister(buf.data_ptr())
    if int(err) != 0:
        raise RuntimeError(f"cudaHostUnregister failed ({err})")


class CPUOffloadOptimizer:
    """``optimizer`` over ``params``, its state and its step on
    the CPU; the gradients leave the GPU as they are made. On a CPU device the copies are
    plain copies (the tests' case)."""

    def __init__(self, params: Iterable[torch.nn.Parameter], optimizer: str = "adamw",
                 pinning: str = "caching"):
        if pinning not in PINNINGS:
            raise ConfigError(f"optimizer pinning {pinning!r}: one of {', '.join(PINNINGS)}")
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ConfigError("optimizer offload: the model has no trainable parameters")
        dev = self.params[0].device
        self.cuda = dev.type == "cuda"
        self.pinning = pinning
        self.stream = torch.cuda.Stream(dev) if self.cuda else None
        self.host: dict[torch.Tensor, torch.Tensor] = {}
        self.optims: dict[torch.Tensor, torch.optim.Optimizer] = {}
        self.queue: dict[torch.Tensor, Any] = {}  # parameter -> its gradient copy's event
        self.hooks = []
        self._registered: torch.Tensor | None = None
        # the parameters whose GPU copy the step updates (the
        # others live on the host between the passes, the master their only copy)
        self.resident: set[torch.Tensor] = set(self.params)
        stats = getattr(torch.cuda, "host_memory_stats", None) if self.cuda else None
        before = stats().get("allocated_bytes.current", 0) if stats else 0
        self._unregister = None
        if pinning == "registered":
            copies = self._registered_copies()
        try:
            for p in self.params:
                if pinning == "registered":
                    h, h.grad = copies[p]
                else:
                    h = torch.empty(p.shape, dtype=p.dtype, device="cpu",
                                    pin_memory=self.cuda)
                    h.grad = torch.empty(p.shape, dtype=p.dtype, device="cpu",
                                         pin_memory=self.cuda)
                h.copy_(p.detach())
                self.host[p] = h
                self.optims[p] = _cpu_optimizer(optimizer, [h])
                self.hooks.append(p.register_post_accumulate_grad_hook(self._gradient_ready))
        except BaseException:
            self.close()  # the hooks made so far, and the buffer's lock
            raise
        if pinning == "registered":
            self.pinned_bytes = self._registered.numel()
        else:  # what the pinned allocator gave (each block a power of two), where it says so
            self.pinned_bytes = (stats().get("allocated_bytes.current", 0) - before if stats
                                 else sum(2 * p.numel() * p.element_size()
                                          for p in self.params))

    def _registered_copies(self) -> dict[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One pageable buffer holding every parameter's host copy
        and gradient buffer, each at a 64-byte boundary, page-locked as a whole
        (cudaHostRegister; on a CPU device it stays pageable)."""
        sizes = [registered_bytes(p.numel() * p.element_size()) for p in self.params]
        buf = torch.empty(2 * sum(sizes), dtype=torch.uint8)
        if self.cuda:
            err = torch.cuda.cudart().cudaHostRegister(buf.data_ptr(), buf.numel(), 0)
            if int(err) != 0:
                raise RuntimeError(f"cudaHostRegister of {buf.numel()} bytes failed ({err})")
            # unlocked before its memory is freed, whether or not close() is called
            self._unregister = weakref.finalize(self, _unregister, buf, self.params[0].device)
        self._registered = buf
        out, at = {}, 0
        for p, size in zip(self.params, sizes):
            n = p.numel() * p.element_size()
            pair = []
            for _ in range(2):
                pair.append(buf[at:at + n].view(p.dtype).view(p.shape))
                at += size
            out[p] = (pair[0], pair[1])
        return out

    def close(self) -> None:
        """Remove the hooks: they hold the optimizer, its pinned copies and the model (a
        reference loop through autograd that the collector cannot break); unlock a
        registered buffer once nothing copies into it."""
        for h in self.hooks:
            h.remove()
        self.hooks.clear()
        if self._unregister is not None:
            self._unregister()  # once: a finalizer runs at most once
        self._registered = None

    def _gradient_ready(self, p: torch.nn.Parameter) -> None:
        if p in self.queue:  # its host gradient would be overwritten, not accumulated
            raise RuntimeError("optimizer offload: a second backward pass before step() "
                               "(gradient accumulation) is not supported")
        h = self.host[p]
        if self.cuda:
            self.stream.wait_stream(torch.cuda.current_stream(p.device))
            with torch.cuda.stream(self.stream):
                h.grad.copy_(p.grad, non_blocking=True)
                self.queue[p] = torch.cuda.Event()
                self.queue[p].record(self.stream)
            p.grad.record_stream(self.stream)
        else:
            h.grad.copy_(p.grad)
            self.queue[p] = None
        p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        if self.cuda:  # whatever was queued after the backward pass (clipping) first
            self.stream.wait_stream(torch.cuda.current_stream(self.params[0].device))
        for p, copied in self.queue.items():
            if copied is not None:
                copied.synchronize()
            self.optims[p].step()
            if p not in self.resident:
                continue
            if self.cuda:
                with torch.cuda.stream(self.stream):
                    p.copy_(self.host[p], non_blocking=True)
            else:
                p.copy_(self.host[p])
        self.queue.clear()
        if self.cuda:
            torch.cuda.current_stream(self.params[0].device).wait_stream(self.stream)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:  # the GPU's are released by the hook; the host's are overwritten
            p.grad = None

    def state_bytes(self) -> int:
        """Host bytes of the optimizers' state (after the first step)."""
        return sum(t.numel() * t.element_size() for o in self.optims.values()
                   for s in o.state.values() for t in s.values()
                   if isinstance(t, torch.Tensor) and t.dim() > 0)


# the microbenchmark's grid: a tensor's elements, and how many tensors of that size one
# step takes (small tensors many times, so that the per-tensor cost shows)
CPU_STEP_SIZES = ((4_096, 64), (65_536, 32), (1_048_576, 8), (4_194_304, 4),
                  (16_777_216, 2), (67_108_864, 1), (134_217_728, 1))


def time_cpu_steps(optimizer: str = "adamw", dtypes: Iterable[str] = ("fp32",),
                   sizes=CPU_STEP_SIZES, reps: int = 5,
                   threads: int | None = None) -> list[dict[str, Any]]:
    """The host's time for the CPU optimizer's step, as
    CPUOffloadOptimizer runs it (one optimizer per tensor, stepped one after another), for
    ``count`` tensors of ``numel`` elements each: the median of ``reps`` steps after one
    that makes the state. One record per (dtype, size). Nothing here is fitted."""
    if threads:
        torch.set_num_threads(threads)
    from ..model.workload import DTYPES
    out = []
    for dt in dtypes:
        dtype = DTYPES[dt]
        for numel, count in sizes:
            params = []
            for _ in range(count):
                p = torch.zeros(numel, dtype=dtype, requires_grad=True)
                p.grad = torch.randn(numel).to(dtype)
                params.append(p)
            optims = [_cpu_optimizer(optimizer, [p]) for p in params]
            times = []
            for r in range(reps + 1):
                t0 = time.perf_counter_ns()
                for o in optims:
                    o.step()
                if r:
                    times.append(time.perf_counter_ns() - t0)
            out.append({"optimizer": optimizer, "dtype": dt, "numel": numel, "tensors": count,
                        "ns": statistics.median(times), "ns_all": times,
                        "threads": torch.get_num_threads()})
            del params, optims
    return out


# the sweep's grid: small tensors many times for the fixed cost, and
# for the slope large ones whose working set (the parameters, gradients and moments a step
# streams, 3.8 GB fp32 at each size) is many times any host's last-level cache, as a
# model's step over all its tensors is (docs/gpu.md, "Evidence behind the GPU side").
CPU_SWEEP_SIZES = ((4_096, 64), (65_536, 32), (16_777_216, 8), (67_108_864, 2))
BANDWIDTH_ELEMENTS = 1 << 26  # two fp32 tensors of 256 MiB: past any host's last cache


def time_memory_bandwidth(elements: int | None = None, reps: int = 5) -> float:
    """The host memory's bandwidth on torch's current threads, in
    bytes per second: an in-place streaming add (``a += b``: two reads and a write of an
    fp32 element, all to lines it reads, as the optimizer's in-place step), the median of
    ``reps`` after one."""
    elements = elements or BANDWIDTH_ELEMENTS
    a = torch.ones(elements)
    b = torch.ones(elements)
    times = []
    for r in range(reps + 1):
        t0 = time.perf_counter_ns()
        a.add_(b)
        if r:
            times.append(time.perf_counter_ns() - t0)
    return 12 * elements * 1e9 / statistics.median(times)


def sweep_threads(counts: Iterable[int] | None = None) -> list[int]:
    """The thread counts a sweep runs: powers of two up to torch's default, and it."""
    top = torch.get_num_threads()
    if counts is None:
        counts = [1 << k for k in range(top.bit_length()) if 1 << k < top] + [top]
    return sorted({int(c) for c in counts})


def calibrate_cpu_step(optimizer: str = "adamw", threads: Iterable[int] | None = None,
                       progress=None) -> dict[str, Any]:
    """``vdnnsim calibrate --cpu-step``: on each thread count, the
    memory's bandwidth and the CPU optimizer's step (``time_cpu_steps`` over
    ``CPU_SWEEP_SIZES``, fp32 and bf16). Raw records; ``vdnnsim.costs.cpustep.fit`` fits them."""
    import os
    import platform
    default = torch.get_num_threads()
    counts = sweep_threads(threads)
    records, bandwidth = [], []
    try:
        for n in counts:
            torch.set_num_threads(n)
            bandwidth.append({"threads": n, "bytes_per_s": time_memory_bandwidth()})
            if progress:
                progress(f"{n} threads: memory {bandwidth[-1]['bytes_per_s'] / 1e9:.1f} GB/s")
            records += time_cpu_steps(optimizer, ("fp32", "bf16"), CPU_SWEEP_SIZES, reps=3)
    finally:
        torch.set_num_threads(default)
    return {"kind": "cpu_step", "optimizer": optimizer, "default_threads": default,
            "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                     "processor": platform.processor()},
            "software": {"torch": torch.__version__},
            "bandwidth": bandwidth, "records": records}
