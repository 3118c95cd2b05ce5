"""Checks that every simulation keeps its own books, on every run.

NOTE [invariants]
The engine checks as it runs what any correct replay must hold; a failure is a bug in
vdnnsim, never the user's, raised as :class:`InvariantViolation` naming the layer and the
tensor: memory (live bytes never below zero; nothing placed past the capacity unless an
out-of-memory was recorded), data (a forward pass finds its inputs on the GPU, a backward
pass every buffer it saved, none on the host or in flight), streams (one op at a time on
each, in order, time never running backwards), transfers (no more bytes back than went
out, every host copy released by the end, every offloaded byte back under the paper's
sync) and the end (layer-wise management leaves only what lives all run: weights, their
gradients, resident memory, the inputs a PyTorch training loop holds). The checks cost a
few percent of a run (bench/bench_engine.py).
"""

from __future__ import annotations


class InvariantViolation(RuntimeError):
    """The engine broke one of its own rules: a bug in vdnnsim, not a user error."""

    SUFFIX = "; this is a bug in vdnnsim: please report it with the input"

    def __init__(self, what: str, layer: str = "", tensor: str = ""):
        where = ", ".join(x for x in (f"layer {layer}" if layer else "",
                                      f"tensor {tensor}" if tensor else "") if x)
        message = what + (f" ({where})" if where else "")
        # simpy re-raises a process's exception as type(exc)(*exc.args): keep it whole
        super().__init__(message if message.endswith(self.SUFFIX) else message + self.SUFFIX)


class StreamClock:
    """One stream's ops must not overlap and must start in order."""

    __slots__ = ("name", "last_end")

    def __init__(self, name: str):
        self.name, self.last_end = name, 0

    def op(self, start: int, end: int, layer: str, what: str) -> None:
        if start < self.last_end or end < start:
            raise InvariantViolation(f"{self.name} stream ran {what} from {start} to {end} ns, "
                                     f"before its previous op ended at {self.last_end} ns",
                                     layer)
        self.last_end = end
