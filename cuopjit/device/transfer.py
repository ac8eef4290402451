"""Copies and fills of device memory, and zero-copy views for DLPack / the CUDA Array Interface.

Copies and fills go on the legacy default stream, ordered with torch's and CuPy's default streams
(host-to-device and device-to-host copies are synchronous). Views use cuda.core's StridedMemoryView.
"""
from __future__ import annotations

import ctypes
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
    """Queue setting `count` elements of `dtype` (2, 4 or 8 bytes: float16, bfloat16, float32, float64) at `ptr`
    to `value` rounded to `dtype` (NaN and inf included)."""
    drv = driver.api()
    driver.get_device(ordinal)
    with np.errstate(over="ignore"):     # 1e5 as float16 is inf, as NumPy and torch round it
        bits = np.array([value], dtype=dtype).view({2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize])[0]
    if dtype.itemsize == 2:
        check(drv.cuMemsetD16Async(ptr, int(bits), count, _STREAM), "cuMemsetD16Async")
        return
    if dtype.itemsize == 4:
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


def memory_view(ptr: int, nbytes: int, owner: Any, shape: tuple, dtype: np.dtype, strides: tuple | None = None):
    """A cuda.core StridedMemoryView of device memory that `owner` keeps alive (for `__dlpack__`);
    `strides` in elements (None: C order)."""
    from cuda.core import Buffer
    from cuda.core.utils import StridedMemoryView
    buf = Buffer.from_handle(ptr, nbytes, owner=owner)
    return StridedMemoryView.from_buffer(buf, shape, strides, dtype=dtype)


# DLPack's dtype code byte: 20 bytes into a DLTensor (data pointer, DLDevice, ndim), which a legacy
# DLManagedTensor starts with and a DLManagedTensorVersioned holds after 32 bytes (version, manager, deleter, flags)
_CODE_AT = {b"dltensor": 20, b"dltensor_versioned": 52}
_kDLBfloat = 4
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def dlpack(ptr: int, nbytes: int, owner: Any, shape: tuple, dtype: np.dtype, strides: tuple | None,
           **kwargs: Any) -> Any:
    """A DLPack capsule of device memory that `owner` keeps alive (`__dlpack__`'s answer; kwargs: stream,
    max_version). cuda.core 1.2 exports no bfloat16: such memory goes out as a float16 view of the same
    bits whose dtype code the capsule then names bfloat16 (DLPack's kDLBfloat, 16 bits, 1 lane)."""
    if dtype != np.dtype("bfloat16"):
        return memory_view(ptr, nbytes, owner, shape, dtype, strides).__dlpack__(**kwargs)
    capsule = memory_view(ptr, nbytes, owner, shape, np.dtype(np.float16), strides).__dlpack__(**kwargs)
    name = _capsule_name(capsule)
    ctypes.c_uint8.from_address(_capsule_pointer(capsule, name) + _CODE_AT[name]).value = _kDLBfloat
    return capsule


def view_of(obj: Any):
    """A cuda.core StridedMemoryView of another library's GPU array (DLPack or CUDA Array Interface)."""
    from cuda.core.utils import StridedMemoryView
    return StridedMemoryView.from_any_interface(obj, stream_ptr=1)
