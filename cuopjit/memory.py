"""Device memory from the driver's stream-ordered pool (cuMemAllocAsync), with stats and limits.

The pool keeps freed blocks (release threshold = max), so allocation after warm-up costs no
system call; `empty_cache()` hands unused blocks back to the driver.
"""
from __future__ import annotations

import contextlib
import functools
import weakref
from dataclasses import dataclass
from typing import Iterator

from . import driver, streams
from .errors import ExecutionError, MemoryError, check, format_bytes


@dataclass
class MemoryStats:
    """Bytes cuopjit holds now and at its peak, and how many allocations it made."""
    allocated_bytes: int = 0
    peak_allocated_bytes: int = 0
    allocations: int = 0
    frees: int = 0


_stats: dict[int, MemoryStats] = {}



@functools.cache
def _pool(ordinal: int):
    """The device's default memory pool, told to keep freed memory cached."""
    drv = driver._driver()
    dev = driver.get_device(ordinal)
    pool = check(drv.cuDeviceGetDefaultMemPool(dev.handle), "cuDeviceGetDefaultMemPool")
    keep = drv.cuuint64_t(0xFFFFFFFFFFFFFFFF)
    check(drv.cuMemPoolSetAttribute(pool, drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, keep),
          "cuMemPoolSetAttribute")
    return pool


def allocate(nbytes: int, ordinal: int, stream: int = 0) -> int:
    """A device pointer to `nbytes` (0 for an empty request), ordered on `stream`; raises cuopjit.MemoryError
    when the GPU is full."""
    if nbytes == 0:
        return 0
    drv = driver._driver()
    _pool(ordinal)
    if stream == 0 and streams.local.relaxed_capture:   # inside `with cuopjit.graph()`
        raise RuntimeError("a tensor cannot be created inside `with cuopjit.graph()`: the allocation would break "
                           "the capture. Create every tensor the captured forwards use before the block")
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
    drv = driver._driver()
    driver.get_device(ordinal)
    check(drv.cuMemFreeAsync(ptr, stream), "cuMemFreeAsync")
    st = _stats[ordinal]
    st.allocated_bytes -= nbytes
    st.frees += 1


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
    drv = driver._driver()
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
