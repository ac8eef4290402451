"""Target: the facts a kernel is planned for (architecture, SMs, shared memory, clusters, TMA).

A target comes from the live device (`of_device`) or from a table of named architectures
(`named`), so prewarm on a machine with no GPU plans exactly what a GPU of that kind will run.
Operators read device facts only from here, never from the driver.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .device import driver

MIN_ARCH = 80  # float64 atomics, cp.async and the mma shapes the templates use need sm_80


@dataclass(frozen=True)
class Target:
    """One GPU kind. Shared memory in bytes; `smem_per_block` is the opt-in maximum for one block."""
    arch: str                 # the NVRTC target, e.g. 'sm_90'
    name: str
    sm_count: int
    smem_per_block: int
    smem_per_sm: int
    regs_per_sm: int = 65536
    max_threads_per_sm: int = 2048
    l2_bytes: int = 40 << 20

    @property
    def capability(self) -> int:
        """90 for sm_90 and sm_90a."""
        return int(self.arch[3:].rstrip("a"))

    @property
    def clusters(self) -> bool:
        """Thread-block clusters and distributed shared memory (sm_90 and newer)."""
        return self.capability >= 90

    @property
    def tma(self) -> bool:
        """The tensor memory accelerator (cp.async.bulk.tensor, sm_90 and newer)."""
        return self.capability >= 90


# Datasheet figures of the common part of each architecture (the SM count of the flagship:
# an automatic choice that depends on it may differ on a smaller part of the same architecture).
_KB = 1024
NAMED: dict[str, Target] = {t.arch: t for t in (
    Target("sm_80", "A100 SXM", 108, 163 * _KB, 164 * _KB, l2_bytes=40 << 20),
    Target("sm_86", "RTX 3090", 82, 99 * _KB, 100 * _KB, max_threads_per_sm=1536, l2_bytes=6 << 20),
    Target("sm_89", "RTX 4090", 128, 99 * _KB, 100 * _KB, max_threads_per_sm=1536, l2_bytes=72 << 20),
    Target("sm_90", "H100 SXM", 132, 227 * _KB, 228 * _KB, l2_bytes=50 << 20),
    Target("sm_90a", "H100 SXM", 132, 227 * _KB, 228 * _KB, l2_bytes=50 << 20),
    Target("sm_100", "B200", 148, 227 * _KB, 228 * _KB, l2_bytes=126 << 20),
    Target("sm_120", "RTX 5090", 170, 99 * _KB, 100 * _KB, max_threads_per_sm=1536, l2_bytes=96 << 20),
)}


def named(arch: str) -> Target:
    """The table's target for `arch`; ValueError lists the known ones."""
    try:
        return NAMED[arch]
    except KeyError:
        raise ValueError(f"no target named {arch!r}: choose one of {', '.join(NAMED)}") from None


@functools.cache
def of_device(ordinal: int) -> Target:
    """The live device's target (reads the driver once per device)."""
    dev = driver.get_device(ordinal)
    return Target(arch=dev.arch, name=dev.name, sm_count=dev.sm_count, smem_per_block=dev.max_shared_per_block,
                  smem_per_sm=dev.max_shared_per_sm, regs_per_sm=dev.registers_per_sm,
                  max_threads_per_sm=dev.max_threads_per_sm, l2_bytes=dev.l2_bytes)
