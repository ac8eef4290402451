"""Copies and fills of device memory, and zero-copy views for DLPack / the CUDA Array Interface.

Copies and fills go on the legacy default stream, ordered with torch's and CuPy's default streams
(host-to-device and device-to-host copies are synchronous). Views use cuda.core's StridedMemoryView.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import driver
from ..errors import check

_STREAM = 0


def device_to_device(ordinal: int, dst: int, src: int, nbytes: int) -> None:
    """Queue a copy of `nbytes` from device address `src` to `dst`."""
    driver.get_device(ordinal)
    check(driver.api().cuMemcpyDtoDAsync(dst, src, nbytes, _STREAM), "cuMemcpyDtoDAsync")


def host_to_device(ordinal: int, dst: int, host: np.ndarray, nbytes: int) -> None:
    """Copy `nbytes` of a C-contiguous host array to device address `dst`."""
    driver.get_device(ordinal)
    check(driver.api().cuMemcpyHtoD(dst, host.ctypes.data, nbytes), "cuMemcpyHtoD")


def device_to_host(ordinal: int, host: np.ndarray, src: int, nbytes: int) -> None:
    """Copy `nbytes` from device address `src` into a C-contiguous host array (waits for queued work)."""
    driver.get_device(ordinal)
    check(driver.api().cuMemcpyDtoH(host.ctypes.data, src, nbytes), "cuMemcpyDtoH")


def fill(ordinal: int, ptr: int, value: float, dtype: np.dtype, count: int) -> None:
    """Queue setting `count` elements of `dtype` (float32 or float64) at `ptr` to `value` (NaN and inf included)."""
    drv = driver.api()
    driver.get_device(ordinal)
    bits = np.array([value], dtype=dtype).view(np.uint32 if dtype == np.float32 else np.uint64)[0]
    if dtype == np.float32:
        check(drv.cuMemsetD32Async(ptr, int(bits), count, _STREAM), "cuMemsetD32Async")
        return
    lo, hi = int(bits) & 0xFFFFFFFF, int(bits) >> 32
    # a 2-D memset writes the low words (column 0) and high words (column 1) of each double
    check(drv.cuMemsetD2D32Async(ptr, 8, lo, 1, count, _STREAM), "cuMemsetD2D32Async")
    check(drv.cuMemsetD2D32Async(ptr + 4, 8, hi, 1, count, _STREAM), "cuMemsetD2D32Async")


def zero(ordinal: int, ptr: int, nbytes: int) -> None:
    """Queue setting `nbytes` at `ptr` to zero."""
    driver.get_device(ordinal)
    check(driver.api().cuMemsetD8Async(ptr, 0, nbytes, _STREAM), "cuMemsetD8Async")


def memory_view(ptr: int, nbytes: int, owner: Any, shape: tuple, dtype: np.dtype):
    """A cuda.core StridedMemoryView of device memory that `owner` keeps alive (for `__dlpack__`)."""
    from cuda.core import Buffer
    from cuda.core.utils import StridedMemoryView
    buf = Buffer.from_handle(ptr, nbytes, owner=owner)
    return StridedMemoryView.from_buffer(buf, shape, dtype=dtype)


def view_of(obj: Any):
    """A cuda.core StridedMemoryView of another library's GPU array (DLPack or CUDA Array Interface)."""
    from cuda.core.utils import StridedMemoryView
    return StridedMemoryView.from_any_interface(obj, stream_ptr=1)
