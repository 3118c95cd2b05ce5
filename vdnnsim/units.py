"""Unit constants and conversions. Inside the simulator time is integer nanoseconds and
memory is integer bytes; every quantity's name carries its unit."""

from __future__ import annotations

import math

KiB = 1024
MiB = 1024**2
GiB = 1024**3  # a `_gib` quantity is bytes / GiB
TiB = 1024**4
KB = 10**3
MB = 10**6
GB = 10**9  # a `_gb` quantity is bytes / GB
TB = 10**12
NS_PER_S = 1_000_000_000


def ns_to_s(ns: int | float) -> float:
    return ns / NS_PER_S


def transfer_ns(size_bytes: int, bw_bytes_per_s: float, latency_ns: int = 0) -> int:
    """Time of one DMA copy: fixed latency plus size over bandwidth, rounded up to 1 ns."""
    if size_bytes <= 0:
        return 0
    return latency_ns + max(1, math.ceil(size_bytes * NS_PER_S / bw_bytes_per_s))

