"""The host: its clock, what it spends issuing work, and where it waits.

NOTE [host]
One process is the host: it walks the iteration in program order (each layer's forward,
then each backward, then the optimizer step), pays each op's host cost (the trace's
per-layer host times, NOTE [host timing]; the vDNN runtime's own), makes every memory
decision (allocate, free, ``record_stream``) at its own time, and puts each GPU op on its
stream. Its clock runs ahead of simpy's and advances simpy's only when it must see the GPU
(a synchronisation, or an allocation that asks whether a deferred free's event has
completed), so a host that never waits costs no events. The optimizer step is issued in
STEP_PIECES parts, host then GPU in turn, so that a host-bound step's GPU work runs while
the host still issues the rest (docs/validation.md, "The host").

NOTE [launch queue]
A stream's launch queue holds a bounded number of commands (about a thousand kernels,
memsets and copies on the H200, whatever the kernel; event records and stream waits take
no slot): a host that runs that far ahead of the GPU blocks in its
next launch until the oldest queued command starts. Under PyTorch
semantics the host counts the commands of each compute op it has issued that has not
started (the trace's per-layer counts, else the preset's mean) and, when the next layer's
would overflow the preset's ``launch_queue``, waits for the oldest to start. This is what
keeps a host far ahead of a copy-bound GPU (vdnn_all) from piling up deferred frees and
reserving memory the real allocator never asks for. Torch7's host waits for every layer,
so its queue never fills.
"""

from __future__ import annotations

from .streams import _Op


class Host:
    """The host's clock of a :class:`~.sim.Simulation` (a part of it: the attributes it
    reads are the simulation's)."""

    __slots__ = ()  # the attributes are the simulation's (Simulation.__slots__)

    def _stamp(self, op: object, edge: int) -> int:
        ops, edges = self._stamp_ops, self._stamp_edges
        n = len(ops) - 1
        if ops[n] is op and edges[n] == edge:
            return n
        ops.append(op)
        edges.append(edge)
        return n + 1

    def _spend(self, ns: int, layer: str, what: str) -> None:
        if ns:
            if self._host_track:  # (no host track under unified memory)
                self.ops.append(("host", "issue", layer, what, self.host_ns,
                                             self.host_ns + ns, 0))
            self.host_ns += ns

    def _see(self, op: _Op):
        """Advance simpy to the host's clock if that is needed to know whether ``op`` has
        ended by then."""
        if op.end is None and self.env.now < self.host_ns:
            yield self.env.timeout(self.host_ns - self.env.now)

    def _wait_ops(self, ops, layer: str, why: str = ""):
        """The host blocks until every op in ``ops`` has ended (cudaEventSynchronize);
        ``why`` names the wait on the host's track (none: Torch7's per-layer wait)."""
        t0 = self.host_ns
        for op in ops:
            if op.end is None:
                yield from self._see(op)
                if op.end is None:
                    if op.done is None:
                        op.done = self.env.event()
                    yield op.done
            if op.end > self.host_ns:  # type: ignore[operator]
                self.host_ns = op.end  # type: ignore[assignment]
        if self.host_ns > t0 and why and self.record_ops:
            self.ops.append(("host", "wait", layer, why, t0, self.host_ns, 0))

    def _sync(self, ops, layer: str, why: str):
        """Torch7's end-of-layer synchronisation: the host waits for the copies; the time
        the compute stream then sits idle is a stall, not the host's (``_credit``)."""
        t0 = self.host_ns
        yield from self._wait_ops(ops, layer, why)
        if self.host_ns > t0:
            self._credit += self.host_ns - t0
            if self.record_ops:
                self.ops.append(("compute", "stall", layer, f"wait {why}", t0, self.host_ns, 0))

    def _synced(self, ops, layer: str, why: str) -> None:
        """:meth:`_sync` where every op's end is known: nothing to wait for in simpy."""
        t0 = t = self.host_ns
        for op in ops:
            if op.end > t:
                t = op.end
        if t > t0:
            self.host_ns = t
            self._credit += t - t0
            if self.record_ops:
                self.ops.append(("host", "wait", layer, why, t0, t, 0))
                self.ops.append(("compute", "stall", layer, f"wait {why}", t0, t,
                                             0))

    def _throttle(self, op: _Op, k: float, layer: str):
        """Before the host launches ``op`` (``k`` commands), it waits
        until the queue has room for them."""
        q = self._queued
        while q:
            head, hk = q[0]
            if head.start is None or head.start > self.host_ns:
                if self._queued_k + k <= self._queue:
                    break
                t0 = self.host_ns
                if head.start is None:  # its start is not known yet: wait for its end
                    yield from self._wait_ops((head,), layer)
                else:
                    self.host_ns = head.start
                if self.host_ns > t0 and self.record_ops:
                    self.ops.append(("host", "wait", layer, "launch queue full",
                                                 t0, self.host_ns, 0))
            q.popleft()
            self._queued_k -= hk
        q.append((op, k))
        self._queued_k += k

    def _settle(self, op: _Op) -> None:
        """A compute op's idle time that a synchronisation caused is a stall."""
        c = min(op.idle, self._credit)
        op.idle -= c
        self.stall_ns += c  # its op is on the timeline already
        self._credit = 0
