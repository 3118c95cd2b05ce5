"""The host's pinned memory pool: what PyTorch's pinned allocator reserves for offloads.

NOTE [pinned pool]
An offload's host copy is pinned memory, which PyTorch takes from its caching host
allocator (ATen/core/CachingHostAllocator.h): a request is rounded up to a power of two,
served from the free list of that exact size, else by a new cudaHostAlloc'd block; a freed
block goes back to its size's list and is never returned to the system. So what a run keeps
pinned is, per power-of-two size, the most blocks of that size held at once, and it never
shrinks: ``reserved_bytes``. This pool models exactly that (an iteration from an empty pool
reserves what the steady state holds), not the moment a block's copy events complete. The
Torch7 runtime of the paper pins each copy with cudaMallocHost and frees it on release:
there the pinned peak is the host copies' peak, ``peak_host_bytes``.
"""

from __future__ import annotations


# NOTE [optimizer pinning] (vdnnsim/gpu/runtime/cpu_optimizer.py): the optimizer's host copies
# page-locked in one registered buffer instead, each at this boundary
PINNINGS = ("caching", "registered")
REGISTERED_ALIGN = 64


def registered_bytes(nbytes: int) -> int:
    """One tensor's share of the registered buffer."""
    return -(-nbytes // REGISTERED_ALIGN) * REGISTERED_ALIGN


def pinned_block(size: int) -> int:
    """The block a pinned request of ``size`` bytes takes: the next power of two."""
    return 1 << (size - 1).bit_length() if size > 0 else 0


class PinnedPool:
    """Blocks by size; ``reserved_bytes`` only grows."""

    __slots__ = ("free", "reserved_bytes", "blocks")

    def __init__(self) -> None:
        self.free: dict[int, int] = {}  # block size -> free blocks of it
        self.reserved_bytes = 0
        self.blocks = 0

    def take(self, size: int) -> None:
        b = 1 << (size - 1).bit_length() if size > 0 else 0  # pinned_block, inline
        n = self.free.get(b, 0)
        if n:
            self.free[b] = n - 1
        else:
            self.reserved_bytes += b
            self.blocks += 1

    def give(self, size: int) -> None:
        b = 1 << (size - 1).bit_length() if size > 0 else 0  # pinned_block, inline
        free = self.free
        free[b] = free.get(b, 0) + 1
