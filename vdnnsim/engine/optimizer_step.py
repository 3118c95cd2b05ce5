"""The optimizer step the host issues after the backward pass: on the GPU (the optimizer's
foreach kernels), or on the CPU where the plan offloads the optimizer
(NOTE [optimizer offload] in vdnnsim/gpu/runtime/cpu_optimizer.py: the runtime it models)."""

from __future__ import annotations

from ..units import transfer_ns
from .allocator import OutOfMemory
from .compile import optimizer_host_bytes
from .streams import _Op, new_op

# the optimizer step is issued in this many equal parts, host then GPU in turn
# (its foreach kernels go out one after another; the GPU need not wait for the last launch)
STEP_PIECES = 8

# a parameter's bytes per element, by the trace's precision (autocast keeps fp32 weights)
_ELEMENT = {"bf16": 2, "fp16": 2}


def cpu_step_per_element(host, dtype: str) -> float:
    """The CPU step's ns per element of a parameter in the
    trace's precision; 0: not calibrated."""
    return host.cpu_step_ns_per_element_16 if dtype in _ELEMENT else \
        host.cpu_step_ns_per_element


def cpu_step_calibrated(host) -> bool:
    """Whether the host's CPU step is calibrated in both precisions (what a planner needs
    before it weighs the optimizer on the CPU)."""
    return bool(host.cpu_step_ns_per_element and host.cpu_step_ns_per_element_16)


def cpu_step_ns(host, size: int, dtype: str, copying: int = 0) -> int:
    """The host's time for the CPU optimizer's step over one
    layer's parameters of ``size`` bytes (one tensor's fixed cost and its elements'), while
    ``copying`` bytes of parameters are copied back to the GPU."""
    per = cpu_step_per_element(host, dtype) / _ELEMENT.get(dtype, 4)
    return round(host.cpu_step_ns + per * (size + host.cpu_step_copy_share * copying))


# NOTE [copy contention]
# The CPU step streams the parameters, gradients and moments through the host's memory
# (AdamW: 28 bytes an fp32 element) while the copy engine reads the last stepped tensor's
# parameters out of the same memory to send them back to the GPU. So each step after a copy
# back is charged ``cpu_step_copy_share`` of its per-element time for each element of that
# copy (the copies are faster than the steps: each ends during the next step); a full share
# of the memory's bandwidth would be 4/28 = 0.14. The share is fitted on the host's
# microbenchmark (docs/validation.md, "Copy contention"), where the evidence and the known
# biases are.


class OptimizerStep:
    """The optimizer step of a :class:`~.sim.Simulation` (a part of it)."""

    __slots__ = ()  # the attributes are the simulation's (Simulation.__slots__)

    def _step(self):
        """The optimizer step: on the CPU where the plan offloads it, else on the GPU."""
        if self.plan.optimizer_offload:
            yield from self._cpu_step()
            return
        yield from self._gpu_step()

    def _gpu_step(self):
        """The optimizer step, issued in STEP_PIECES equal parts, host then GPU in turn: its
        foreach kernels are launched one after another, so the GPU runs
        the first while the host still issues the rest."""
        if self.sem.paged:  # one pass over every weight
            self._paged_step()
            return
        trace = self.trace
        n = STEP_PIECES if trace.host_step_ns and trace.step_ns else 1
        host = [trace.host_step_ns * (k + 1) // n - trace.host_step_ns * k // n
                for k in range(n)]
        gpu = [trace.step_ns * (k + 1) // n - trace.step_ns * k // n for k in range(n)]
        self._spend(host[0], "", "optimizer step")
        waits = self._next_waits
        if self.sem.one_side_stream and self._copy["d2h"].last is not None:
            waits += (self._copy["d2h"].last,)  # end_iteration: wait for the side stream
        self._next_waits = ()
        if trace.step_ns or waits or trace.step_workspace_bytes:
            op = new_op(self.compute, "step", "", "optimizer step", gpu[0], waits=waits)
            held = False
            temps = self.program.step_temps if trace.step_workspace_bytes else ()
            if len(temps) == 1 and not self.sem.caching_allocator:
                w = self._workspace(temps[0], self._stamp(op, 0), op, "", "step")
                if w is not None:
                    held = yield from w
                temps = ()
            state = self.program.state if self.first else ()
            s0 = self._stamp(op, 0) if temps or state else 0
            for k, size in enumerate(state):  # made by the first step
                a = (("state", str(k)), size, "optimizer_state", s0, "", "step")
                if not self._take(*a):
                    yield from self._alloc(*a)
            for k, size in enumerate(temps):
                a = (("step_temp", str(k)), size, "workspace", s0, "", "step")
                if not self._take(*a):
                    yield from self._alloc(*a)
            self._push(self.compute, op)
            for k in range(1, n):
                self._spend(host[k], "", "optimizer step")
                op = new_op(self.compute, "step", "", "optimizer step", gpu[k])
                self._push(self.compute, op)
            if held:
                self.pool.free(("workspace", ""), self._stamp(op, 1))
            if temps:
                s1 = self._stamp(op, 1)
                for k in range(len(temps)):
                    self.pool.free(("step_temp", str(k)), s1)
        else:
            self._spend(sum(host[1:]), "", "optimizer step")

    def _grad_copy(self, layer: str, size: int, op: _Op, stamp: int) -> None:
        """The layer's weight gradient, made by ``op``, copied to
        the host on the optimizer's own stream (which waits for the compute stream first)
        and released to that stream (record_stream): freed once the copy has run."""
        side = self._opt
        copy = new_op(side, "grad_offload", layer, f"{layer}:weight gradient",
                   transfer_ns(size, self._d2h_bw, self._link_ns), size, (op,), "d2h")
        self._push(side, copy)
        self._grad_copies.append((layer, size, copy))
        self._retire(("wgrad", layer), stamp, copy)

    def _cpu_step(self):
        """In the order the gradients came, the host waits for
        each layer's copy, steps its parameters on the CPU and copies them back on the side
        stream; then the compute stream waits for the side stream (the next forward pass
        reads the updated weights)."""
        need = optimizer_host_bytes(self.trace, self.plan.optimizer_pinning)
        cap = self._host_cap
        if cap is not None and self.peak_host_bytes + need > cap and self.pool.oom is None:
            # the host cannot hold the optimizer beside the offloads
            free = max(0, cap - self.peak_host_bytes)
            self.pool.oom = OutOfMemory("optimizer state", "", "step",
                                        self._stamp(self.compute.last, 1), need, free, free,
                                        "host")
        host, dtype = self.gpu.host, self.trace.dtype
        up = self._opt  # the optimizer's one stream: behind every gradient copy
        last = None
        # the host's copy is the only one of these; nothing back
        away = self.program.params.layers if self.program.params is not None else ()
        copying = 0  # the bytes copied back while the next step runs
        for layer, size, copy in self._grad_copies:
            if copy.end is None or copy.end > self.host_ns:
                yield from self._wait_ops((copy,), layer, "gradient copy")
            self._spend(cpu_step_ns(host, size, dtype, copying), layer, "CPU optimizer step")
            copying = 0
            if layer in away:
                continue
            copying = size
            last = self._push(up, new_op(up, "param_upload", layer, f"{layer}:parameters",
                                      transfer_ns(size, self._h2d_bw, self._link_ns), size,
                                      (), "h2d"))
        self._grad_copies = []
        # compute.wait_stream(the optimizer's stream), and as the GPU step: what the next op
        # had to wait for, and the vDNN runtime's end_iteration (its side stream)
        waits = self._next_waits + ((last,) if last is not None else ())
        self._next_waits = ()
        if self.sem.one_side_stream and self._copy["d2h"].last is not None:
            waits += (self._copy["d2h"].last,)
        if waits:
            self._push(self.compute, new_op(self.compute, "step", "", "wait for the parameters",
                                         0, waits=waits))
