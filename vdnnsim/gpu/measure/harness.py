"""The measurement harness: real training iterations on a CUDA GPU.

NOTE [measurement]
One training step is a workload's (NOTE [workloads]): zero_grad, forward, the loss,
backward and the optimizer step on a random batch that stays on the GPU. After warm-up
steps (cudnn.benchmark autotunes there) the allocator's peak statistics are reset and
several steps are timed with CUDA events: the median step time, the peak allocated and
reserved bytes over the timed steps, the host's time to issue each step and the
allocator's counts of device allocations, frees and retries. One more step from an
emptied cache gives ``reserved_one_step_bytes``, what one iteration reserves on its own,
which is what the simulator replays. A cap is the allocator's per-process memory
fraction; a run that raises OutOfMemoryError does not fit. The allocator's settings are
the caller's (PYTORCH_CUDA_ALLOC_CONF is read when CUDA first allocates). The details
(the allocator's history, save_on_cpu): docs/gpu.md, "What a measurement records".
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from typing import Any, Callable

import torch

from ...planners.planfile import BlockPlanFile, LayerPlanFile, PlanFile, plan_from_data
from ..runtime.blocks import BlockOffload
from ..runtime.cpu_optimizer import CPUOffloadOptimizer
from ..runtime.params import ParamOffload
from ..runtime.tensors import TensorOffload
from .hostprobe import StepProbe, host_probe_ns
from ..profile.layers import software
from ..runtime.vdnn import VDNN
from ..model.workload import DTYPES, build_workload, training_step

POLICIES = ("baseline", "vdnn_all", "vdnn_conv", "save_on_cpu", "planned")
HISTORY_ENTRIES = 1_000_000  # the history's ring buffer


def _hand_over(history: Callable[[dict], Any], record: dict[str, Any], **what: Any) -> None:
    """The allocator's snapshot now to ``history``, its recording stopped; the record
    says so (``what``: the timed steps' count, or where it was taken)."""
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    history(snapshot)
    del snapshot
    record["memory_history"] = {"max_entries": HISTORY_ENTRIES, **what}


class _Run:
    """What a measurement builds, held so that it is released however the run ends."""

    def __init__(self) -> None:
        self.work: Any = None
        self.runtime: Any = None
        self.step: Any = None
        self.offloaded: Any = None  # the optimizer on the CPU
        self.params: Any = None  # the parameters on the host
        self.probe: Any = None

    def run_step(self) -> None:
        self.step()
        if self.runtime is not None:
            self.runtime.end_iteration()

    def release(self, dev: Any) -> None:
        if isinstance(self.runtime, (BlockOffload, TensorOffload)):
            self.runtime.remove()
        if self.params is not None:
            self.params.remove(restore=False)
        if self.offloaded is not None:  # its hooks hold the model
            self.offloaded.close()
        self.work = self.runtime = self.step = self.offloaded = self.params = None
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(1.0, dev)


def measure(model_spec: str, batch_size: int, policy: str = "baseline",
            memory_cap_bytes: int | None = None, warmup: int = 3, iters: int = 5,
            dtype: str = "fp32", plan: PlanFile | dict[str, Any] | None = None,
            optimizer: str = "sgd", seq_len: int | None = None,
            input_spec: str | None = None,
            model_kwargs: dict[str, Any] | None = None,
            history: Callable[[dict[str, Any]], None] | None = None,
            allocator_conf: dict[str, Any] | None = None,
            step_probe: bool = True, optimizer_offload: bool = False,
            optimizer_pinning: str = "caching") -> dict[str, Any]:
    """NOTE [measurement]: its record. ``plan``: a plan file (its model, or its contents,
    read through the model), for policy 'planned'; ``dtype``: a precision of
    NOTE [workloads] (fp32, bf16, fp16, autocast-bf16, autocast-fp16); ``history``: given the
    allocator's snapshot over the timed steps (or where the run ran out of memory);
    ``allocator_conf``: the settings this process's allocator runs with, recorded;
    ``optimizer_offload``: the optimizer's state and step on the CPU, the gradients copied
    there as they are made; ``optimizer_pinning``: where its host copies live."""
    plan, optimizer_offload, optimizer_pinning = _checked(
        policy, plan, dtype, optimizer_offload, optimizer_pinning)
    dev = torch.device("cuda", torch.cuda.current_device())
    gc.collect()
    torch.cuda.empty_cache()
    torch.backends.cudnn.benchmark = True
    record: dict[str, Any] = {"model": model_spec, "batch_size": batch_size, "policy": policy,
                              "memory_cap_bytes": memory_cap_bytes, "dtype": dtype,
                              "optimizer": optimizer,
                              "optimizer_offload": optimizer_offload,
                              "optimizer_pinning": optimizer_pinning,
                              "allocator_conf": dict(allocator_conf or {}),
                              "gpu": torch.cuda.get_device_name(dev), **software()}
    if plan is not None:
        fields = plan.model_dump(mode="json")
        record["plan"] = {k: fields.get(k) for k in ("network", "batch_size", "budget_bytes",
                                                      "predicted", "split", "recompute",
                                                      "blocks", "block_paths",
                                                      "recompute_blocks", "recompute_paths",
                                                      "recompute_modules",
                                                      "optimizer_offload", "param_blocks")}
    run = _Run()
    try:
        record["host_probe_ns"] = host_probe_ns(dev)  # NOTE [host probe]
        # and its tensor for the probes after the timed steps, made before the model: it
        # shares the first small-pool segment, which every model's small tensors need anyway
        run.probe = StepProbe(dev) if step_probe else None
        _build(run, dev, record, model_spec, batch_size, policy, memory_cap_bytes, dtype, plan,
               optimizer, seq_len, input_spec, model_kwargs, optimizer_offload,
               optimizer_pinning)
        _timed(run, dev, record, warmup, iters, history)
        _phase_step(run, dev, record)
        for rt in (run.runtime, run.params):  # per step: warm-up, timed and the phase step
            if rt is not None:
                record.update({k: v // (warmup + iters + 1) for k, v in rt.stats.items()})
    except torch.OutOfMemoryError as exc:
        # the first line says how much was asked for and, at its end, how much of what the
        # allocator reserved was not allocated (fragmentation, or cache it could not free)
        record.update(fits=False, error=str(exc).splitlines()[0][:1000])
        if history is not None and "memory_history" not in record:  # (not the phase
            # step's, after the timed steps' history): the segments as the allocator left
            # them after its retry
            _hand_over(history, record, at="out of memory")
    except RuntimeError as exc:
        checkpoints = getattr(plan, "recompute_paths", None) or \
            getattr(plan, "recompute_modules", None)
        if not (checkpoints and "modified by an inplace operation" in str(exc)):
            raise
        # autograd refusing what a plan does to this model (a checkpointed module whose
        # input is written in place where the trace did not show it) is the plan's
        # failure, said in one line
        text = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise ValueError(f"the plan does not run on this model: {text}") from None
    finally:
        run.release(dev)
    return record


def _checked(policy: str, plan: Any, dtype: str, optimizer_offload: bool,
             optimizer_pinning: str) -> tuple[PlanFile | None, bool, str]:
    """The policy, plan and optimizer settings checked (ValueError), with the plan's
    optimizer on the CPU and its pinning where it has them."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    if (policy == "planned") != (plan is not None):
        raise ValueError("policy 'planned' takes a plan, and only it")
    if isinstance(plan, dict):
        plan = plan_from_data(plan)
    if isinstance(plan, LayerPlanFile) and not plan.runnable:
        from ...planners.greedy import OP_PLAN_CANNOT_RUN
        raise ValueError(OP_PLAN_CANNOT_RUN)
    if plan is not None and plan.optimizer_offload:
        optimizer_offload = True  # the plan runs it on the CPU
    if getattr(plan, "optimizer_pinning", "caching") != "caching":
        optimizer_pinning = plan.optimizer_pinning  # as planned
    if optimizer_pinning != "caching" and not optimizer_offload:
        raise ValueError("optimizer pinning goes with the optimizer on the CPU (--optimizer-"
                         "offload, or a plan that puts it there)")
    if optimizer_offload and dtype == "autocast-fp16":
        raise ValueError("optimizer offload runs without a GradScaler: use fp32, bf16, fp16 "
                         "or autocast-bf16")
    return plan, optimizer_offload, optimizer_pinning


def _cap(dev: Any, cap_bytes: int) -> None:
    total = torch.cuda.get_device_properties(dev).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_bytes / total), dev)


def _build(run: _Run, dev: Any, record: dict[str, Any], model_spec: str, batch_size: int,
           policy: str, cap_bytes: int | None, dtype: str, plan: Any, optimizer: str,
           seq_len: int | None, input_spec: str | None, model_kwargs: dict[str, Any] | None,
           optimizer_offload: bool, optimizer_pinning: str) -> None:
    """The model, its runtime and its training step, on the GPU under the cap."""
    # NOTE [cap after setup]
    # With parameters on the host (a block plan's param_blocks) the cap starts once those
    # blocks have left the GPU. The model is built whole on the GPU, and a 7B's fp32
    # weights alone (25 GiB) exceed a 24 GB card's cap before any block leaves: a real card
    # of that size needs a runtime that builds the model off the GPU, which this one is
    # not. What the cap then bounds is the training step, which is what the engine
    # predicts; the record says so (memory_cap_after_setup).
    blocks = isinstance(plan, BlockPlanFile)
    tensors = isinstance(plan, LayerPlanFile) and plan.layer_names == "ops"
    if cap_bytes and not (blocks and plan.param_blocks):
        _cap(dev, cap_bytes)
    with dev:  # built on the GPU: a billion parameters' random init is slow on a CPU
        run.work = work = build_workload(model_spec, seq_len, input_spec, model_kwargs)
    record.update(input_kind=work.kind, input_shape=list(work.shape),
                  parameters=sum(p.numel() for p in work.model.parameters()),
                  micro_batches=work.info["micro_batches"],
                  grad_checkpointing=work.info["grad_checkpointing"])
    if policy not in ("baseline", "save_on_cpu") and not blocks and not tensors and (
            work.kind != "image" or work.hf_task):
        raise ValueError(f"policy {policy!r} runs image models only (the vDNN runtime "
                         "probes an image input); baseline, save_on_cpu, a block plan and a "
                         "plan of an op-by-op trace (vdnnsim plan of a profiled or meta "
                         "trace) run any model")
    ctx = (lambda: torch.autograd.graph.save_on_cpu(pin_memory=True)) \
        if policy == "save_on_cpu" else contextlib.nullcontext
    work.model.to(dev, DTYPES.get(dtype, torch.float32)).train()
    if policy.startswith("vdnn"):
        run.runtime = VDNN(work.model, work.shape, policy)
    elif blocks:  # NOTE [block runtime]
        run.runtime = BlockOffload.from_plan(work.model, plan)
    elif tensors:  # NOTE [tensor runtime]: checked before any step
        run.runtime = TensorOffload.from_plan(work.model, plan, model_spec, batch_size, dtype,
                                              seq_len, input_spec, model_kwargs)
        ctx = run.runtime.context
        record["host_pool_bytes"] = run.runtime.pool.numel()
    elif plan is not None:
        run.runtime = VDNN(work.model, work.shape, policy, plan=plan)
    run.step = training_step(work, batch_size, dev, dtype, optimizer,
                             runner=None if blocks or tensors else run.runtime, context=ctx,
                             micro_batches=work.info["micro_batches"])  # stepoptions.py
    if optimizer_offload:
        run.offloaded = run.step.optimizer = CPUOffloadOptimizer(
            work.model.parameters(), optimizer, optimizer_pinning)
    if blocks and plan.param_blocks:  # after the optimizer, whose hooks come first
        run.params = ParamOffload.from_plan(work.model, plan, run.offloaded)
        gc.collect()  # the GPU's copies given back, as never made
        torch.cuda.empty_cache()
        if cap_bytes:
            _cap(dev, cap_bytes)
            record["memory_cap_after_setup"] = True


def _timed(run: _Run, dev: Any, record: dict[str, Any], warmup: int, iters: int,
           history: Callable[[dict[str, Any]], None] | None) -> None:
    """The warm-up steps, then the timed ones: their times, peaks and allocator counts."""
    for _ in range(warmup):
        run.run_step()
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    before = torch.cuda.memory_stats(dev)
    if history is not None:
        torch.cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES, context=None)
    times, host = [], []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        s.record()
        run.run_step()
        e.record()
        host.append((time.perf_counter() - t0) * 1e3)
        e.synchronize()
        times.append(s.elapsed_time(e))
        if run.probe is not None:
            run.probe()  # the host's speed right after the step
    after = torch.cuda.memory_stats(dev)
    if history is not None:
        _hand_over(history, record, steps=iters)
    # the allocator's own counts over the timed steps: how often it asked the driver for
    # a segment, gave segments back, and freed its cache to retry
    counts = {k: after.get(k, 0) - before.get(k, 0)
              for k in ("num_device_alloc", "num_device_free", "num_alloc_retries")}
    if run.probe is not None:
        run.probe.close()
        record.update(host_probe_steps_ns=run.probe.times,
                      host_probe_between_ns=statistics.median(run.probe.times))
    else:
        record["step_probe"] = False
    record.update(fits=True, iteration_ms=statistics.median(times), iteration_ms_all=times,
                  host_issue_ms=statistics.median(host), host_issue_ms_all=host,
                  peak_allocated_bytes=torch.cuda.max_memory_allocated(dev),
                  peak_reserved_bytes=torch.cuda.max_memory_reserved(dev),
                  allocator=counts)
    _host_bytes(run, record)


def _host_bytes(run: _Run, record: dict[str, Any]) -> None:
    """What the pinned host allocator keeps (its blocks are never given back, so after the
    timed steps this is its peak), and what the optimizer on the CPU holds."""
    host_stats = getattr(torch.cuda, "host_memory_stats", None)
    if host_stats is not None:
        record["pinned_host_bytes"] = host_stats().get("allocated_bytes.current", 0)
    if run.offloaded is not None and run.offloaded.pinning == "registered":
        # page-locked outside the pinned allocator
        record["pinned_host_bytes"] = (record.get("pinned_host_bytes", 0)
                                       + run.offloaded.pinned_bytes)
    if run.offloaded is not None:
        record.update(optimizer_pinned_bytes=run.offloaded.pinned_bytes,
                      optimizer_state_bytes=run.offloaded.state_bytes())


def _phase_step(run: _Run, dev: Any, record: dict[str, Any]) -> None:
    """One more, untimed step, phase by phase: where the peak is; from an emptied cache, so
    that its reserved peak is one iteration's own; the step itself is read at its
    marks (NOTE [training step])."""
    phases: dict[str, int] = {}
    reserved: list[int] = []

    def read(point: str, loss: Any) -> None:
        if point == "zero_grad":
            torch.cuda.synchronize(dev)
            torch.cuda.empty_cache()
            phases["start"] = torch.cuda.memory_allocated(dev)
            torch.cuda.reset_peak_memory_stats(dev)
        elif point in ("forward", "backward", "step"):
            phases[f"{point}_peak"] = torch.cuda.max_memory_allocated(dev)
            if point != "step":  # the update's reserved peak is read once it is done
                phases[f"after_{point}"] = torch.cuda.memory_allocated(dev)
                reserved.append(torch.cuda.max_memory_reserved(dev))
                torch.cuda.reset_peak_memory_stats(dev)

    run.step(mark=read)
    if run.runtime is not None:
        run.runtime.end_iteration()
    torch.cuda.synchronize(dev)
    reserved.append(torch.cuda.max_memory_reserved(dev))
    record["phases"] = phases
    record["reserved_one_step_bytes"] = max(reserved)
