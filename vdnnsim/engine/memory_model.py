"""The one interface the executor has to device memory.

NOTE [memory interface]
The executor asks its model of device memory to allocate, free, retire and release a
buffer, to take a workspace for one op (NOTE [transient]) and to let a pass *access* the
buffers it touches; it reads back what is live and the run's accounting (the curve of live
bytes, its peak and breakdown, the first out-of-memory, the lifetimes). Implementations: the
CNMeM pool (allocator.Pool), PyTorch's caching allocator (caching.CachingPool) and unified
memory's pager (uvm.Pager). In device memory every allocated buffer is where a pass needs
it, so the executor asks for an access only where memory is paged (``Semantics.paged``);
the pager answers with the page faults the pass pays for. Every ``now`` is a stamp of
NOTE [memory time]: the executor turns them into GPU times when the run has ended and writes
``times``, ``levels``, ``spans`` and ``oom`` back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Protocol, Sequence, runtime_checkable

# NOTE [pool keys]
# A buffer of the trace is allocated under its tensor id (a str); everything the engine
# allocates on its own account (weights, gradients, workspaces, ...) under a tuple
# (kind, name), e.g. ('grad', 'conv1') or ('weights', ''). A str never equals a tuple, so
# no name in a trace can collide with the engine's: a tensor may be called 'weights' or
# 'workspace:conv1'. Reports show a tuple as 'kind:name' (or 'kind' when name is empty).
Key = str | tuple[str, str]


def key_name(key: Key) -> str:
    if isinstance(key, str):
        return key
    kind, name = key
    return f"{kind}:{name}" if name else kind


@dataclass(frozen=True)
class OutOfMemory:
    tensor: str  # key_name of what could not be placed
    layer: str
    phase: str
    time_ns: int
    requested_bytes: int
    free_bytes: int
    largest_free_bytes: int
    kind: str = "buffer"  # 'buffer' (a tensor of the trace), the engine's key kind, or
    # 'host': an offload of ``tensor`` that the host's memory cannot hold

    @property
    def fragmented(self) -> bool:
        return self.free_bytes >= self.requested_bytes

    @property
    def reason(self) -> str:
        """'host memory', 'fragmentation' (enough free bytes, no block large enough) or
        'capacity' (too few free bytes)."""
        if self.kind == "host":
            return "host memory"
        return "fragmentation" if self.fragmented else "capacity"


def oom_record(key: Key, layer: str, phase: str, now: int, requested: int, free: int,
               largest: int) -> OutOfMemory:
    return OutOfMemory(key_name(key), layer, phase, now, requested, free, largest,
                       "buffer" if isinstance(key, str) else key[0])


class Faults(NamedTuple):
    """What an access cost: the time the pass waits before its kernel runs and the bytes
    that crossed the link to the device for it."""

    stall_ns: int
    migrated_bytes: int


NO_FAULTS = Faults(0, 0)

# a buffer a pass touches: (key, bytes it is made with if it does not exist yet, written)
Touch = tuple[Any, int, bool]


@runtime_checkable
class MemoryModel(Protocol):
    """What the executor calls on its memory."""

    oom: OutOfMemory | None  # the first failure to place a buffer
    spans: list[tuple[str, str, int, int, int]] | None  # a list: lifetimes are recorded
    times: list[int]  # the curve of live bytes: a step to levels[k] at times[k]
    levels: list[int]
    live_bytes: int
    peak_live_bytes: int
    peak_footprint_bytes: int
    peak_breakdown: dict[str, int]
    # the keys allocated now, as a mapping: ``key in memory.live`` is ``key in memory``
    # without a Python call (the executor asks it at every pass)
    live: Mapping[Key, object]

    def __contains__(self, key: "Key") -> bool: ...

    def alloc(self, key: "Key", size_bytes: int, category: str, now: int, layer: str = "",
              phase: str = "", can_sync: bool = False) -> bool:
        """Place ``key``; ``False`` only where the caller must synchronise and ask again."""
        ...

    def free(self, key: "Key", now: int) -> None: ...

    def retire(self, key: "Key", now: int) -> None:
        """No longer allocated, not yet reusable."""
        ...

    def release(self, key: "Key", now: int) -> None: ...

    def transient(self, key: "Key", size_bytes: int, category: str, start: int, end: int
                  ) -> bool:
        """NOTE [transient]: ``key`` taken at ``start`` and given back at ``end`` around
        one op; ``False``: the caller allocates and frees it itself."""
        ...

    def access(self, touched: Sequence[Touch], now: int) -> Faults:
        """A pass touches ``touched`` (in the order it names them) at ``now``."""
        ...

    def live_keys(self) -> list["Key"]: ...

    def open_spans(self) -> list[tuple["Key", int, int, str]]:
        """(key, start stamp, bytes, category) of what is still allocated."""
        ...

    def average_bytes(self, end_ns: int) -> float: ...
