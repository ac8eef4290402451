"""Device memory from the driver's stream-ordered pool (cuMemAllocAsync), with stats and limits.

The pool keeps freed blocks (release threshold = max), so allocation after warm-up costs no
system call; `empty_cache()` hands unused blocks back to the driver. Figures are counted here, in
`allocate` and `release` (never in a forward): `memory_stats()` adds what the pool holds and
`set_memory_fraction(f)` caps what cuopjit may hold on a device.
"""
from __future__ import annotations

import contextlib
import functools
import weakref
from dataclasses import dataclass
from typing import Iterator

from . import driver, streams
from ..errors import ExecutionError, MemoryError, check, format_bytes


@dataclass
class MemoryStats:
    """Bytes cuopjit holds now and at its peak, and how many allocations it made."""
    allocated_bytes: int = 0
    peak_allocated_bytes: int = 0
    allocations: int = 0
    frees: int = 0


_stats: dict[int, MemoryStats] = {}
_caps: dict[int, tuple[float, int]] = {}   # ordinal -> (fraction, bytes) set by set_memory_fraction
_KEEP_ALL = 0xFFFFFFFFFFFFFFFF



@functools.cache
def _pool(ordinal: int):
    """The device's default memory pool, told to keep freed memory cached."""
    drv = driver.api()
    dev = driver.get_device(ordinal)
    pool = check(drv.cuDeviceGetDefaultMemPool(dev.handle), "cuDeviceGetDefaultMemPool")
    _keep(pool, _caps[ordinal][1] if ordinal in _caps else _KEEP_ALL)
    return pool


def _keep(pool, nbytes: int) -> None:
    """How much freed memory the pool keeps cached past a synchronisation (its release threshold)."""
    drv = driver.api()
    check(drv.cuMemPoolSetAttribute(pool, drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                    drv.cuuint64_t(nbytes)), "cuMemPoolSetAttribute")


def allocate(nbytes: int, ordinal: int, stream: int = 0) -> int:
    """A device pointer to `nbytes` (0 for an empty request), ordered on `stream`; raises cuopjit.MemoryError
    when the GPU is full."""
    if nbytes == 0:
        return 0
    drv = driver.api()
    _pool(ordinal)
    if stream == 0 and streams.local.relaxed_capture:   # inside `with cuopjit.graph()`
        raise RuntimeError("a tensor cannot be created inside `with cuopjit.graph()`: the allocation would break "
                           "the capture. Create every tensor the captured forwards use before the block")
    if _caps and ordinal in _caps:
        _check_cap(nbytes, ordinal)
    err, ptr = drv.cuMemAllocAsync(nbytes, stream)
    if int(err) != 0:
        if err.name != "CUDA_ERROR_OUT_OF_MEMORY":
            check((err,), "cuMemAllocAsync")
        empty_cache(ordinal)
        err, ptr = drv.cuMemAllocAsync(nbytes, stream)
        if int(err) != 0:
            free, total = driver.memory_info()
            st = stats(ordinal)
            raise MemoryError(
                f"out of device memory: requested {format_bytes(nbytes)} ({nbytes} bytes), "
                f"free {format_bytes(free)} of {format_bytes(total)} on device {ordinal}; "
                f"cuopjit holds {format_bytes(st.allocated_bytes)}. Free tensors (del) and call "
                f"cuopjit.empty_cache(), or use smaller inputs", requested=nbytes, free=free, total=total)
    st = _stats.setdefault(ordinal, MemoryStats())
    st.allocated_bytes += nbytes
    st.allocations += 1
    st.peak_allocated_bytes = max(st.peak_allocated_bytes, st.allocated_bytes)
    return int(ptr)


def release(ptr: int, nbytes: int, ordinal: int, stream: int = 0) -> None:
    """Return a pointer from `allocate` to the pool, ordered on `stream` (queued work there finishes first)."""
    if ptr == 0:
        return
    drv = driver.api()
    driver.get_device(ordinal)
    check(drv.cuMemFreeAsync(ptr, stream), "cuMemFreeAsync")
    st = _stats[ordinal]
    st.allocated_bytes -= nbytes
    st.frees += 1


def _check_cap(nbytes: int, ordinal: int) -> None:
    """MemoryError when `nbytes` more would take cuopjit past its set_memory_fraction cap on `ordinal`."""
    fraction, cap = _caps[ordinal]
    held = _stats.get(ordinal, MemoryStats()).allocated_bytes
    if held + nbytes > cap:
        raise MemoryError(
            f"cuopjit's memory cap on device {ordinal} is reached: requested {format_bytes(nbytes)} ({nbytes} bytes) "
            f"while holding {format_bytes(held)} of the {format_bytes(cap)} allowed (set_memory_fraction({fraction:g})). "
            f"Free tensors (del), or raise the fraction", requested=nbytes, free=max(cap - held, 0), total=cap)


def set_memory_fraction(fraction: float, device: int | None = None) -> None:
    """Cap what cuopjit may hold on a device (default: current) at `fraction` of its memory, 0 < fraction <= 1.

    Allocations past the cap raise cuopjit.MemoryError; the pool also keeps no more than the cap cached.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"set_memory_fraction({fraction!r}): the fraction must be a number in (0, 1]")
    dev = driver.get_device(device)
    cap = int(dev.total_memory * fraction)
    _caps[dev.ordinal] = (float(fraction), cap)
    _keep(_pool(dev.ordinal), cap)


def memory_stats(device: int | None = None) -> dict:
    """Allocated, reserved (held by the pool), peak allocated, allocation count and fragmentation of a device.

    `fragmentation` is the share of the pool's reserve that no live allocation uses (0 when it holds nothing);
    `limit` is the set_memory_fraction cap in bytes (None: no cap).
    """
    if driver.device_count() == 0:
        ordinal = driver.current_ordinal() if device is None else device
        reserved = used = 0
    else:
        ordinal = driver.get_device(device).ordinal
        reserved = _pool_attribute(ordinal, "CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT")
        used = _pool_attribute(ordinal, "CU_MEMPOOL_ATTR_USED_MEM_CURRENT")
    st = _stats.get(ordinal, MemoryStats())
    return {"device": ordinal, "allocated": st.allocated_bytes, "reserved": reserved, "pool_used": used,
            "peak_allocated": st.peak_allocated_bytes, "allocations": st.allocations, "frees": st.frees,
            "active_allocations": st.allocations - st.frees,
            "fragmentation": (reserved - used) / reserved if reserved else 0.0,
            "limit": _caps[ordinal][1] if ordinal in _caps else None}


def _pool_attribute(ordinal: int, name: str) -> int:
    drv = driver.api()
    value = check(drv.cuMemPoolGetAttribute(_pool(ordinal), getattr(drv.CUmemPool_attribute, name)),
                  "cuMemPoolGetAttribute")
    return int(value)


def reset_peak_memory_stats(device: int | None = None) -> None:
    """Start the peak-allocated figure of a device (default: current) again from what is allocated now."""
    ordinal = driver.current_ordinal() if device is None else device
    st = _stats.get(ordinal)
    if st is not None:
        st.peak_allocated_bytes = st.allocated_bytes


def stats(ordinal: int | None = None) -> MemoryStats:
    """A copy of the allocation figures for a device (default: current)."""
    ordinal = driver.current_ordinal() if ordinal is None else ordinal
    return MemoryStats(**vars(_stats.get(ordinal, MemoryStats())))


def empty_cache(ordinal: int | None = None) -> None:
    """Give the pool's unused blocks back to the driver (after queued work finishes)."""
    if driver.device_count() == 0:
        return
    ordinal = driver.current_ordinal() if ordinal is None else ordinal
    driver.get_device(ordinal)
    drv = driver.api()
    check(drv.cuCtxSynchronize(), "cuCtxSynchronize")
    check(drv.cuMemPoolTrimTo(_pool(ordinal), 0), "cuMemPoolTrimTo")


_contexts: list[list[weakref.ref]] = []


def track(tensor) -> None:
    """Register a new tensor with the innermost `memory_context`, if any."""
    if _contexts:
        _contexts[-1].append(weakref.ref(tensor))


@contextlib.contextmanager
def memory_context() -> Iterator[None]:
    """Tensors created inside the block release their device memory when it ends; using them later raises."""
    _contexts.append([])
    try:
        yield
    finally:
        for ref in _contexts.pop():
            tensor = ref()
            if tensor is not None:
                tensor.release()
        try:
            empty_cache()
        except ExecutionError:
            pass
