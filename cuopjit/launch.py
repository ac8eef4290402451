"""A prepared launch: grid, block, shared bytes and a packed argument array, built once per shape.

Per call only the pointer slots are rewritten and libcuda's `cuLaunchKernel` (through ctypes,
see `driver.raw_entry`) receives the address of the prepacked `void*[]`, so a cached `forward`
does no rendering, hashing, file access or argument marshalling.
"""
from __future__ import annotations

import ctypes
import functools
import struct
from typing import Sequence

from . import driver
from .errors import check

_CTYPES = {"ptr": ctypes.c_uint64, "i32": ctypes.c_int32, "i64": ctypes.c_int64,
           "f32": ctypes.c_float, "f64": ctypes.c_double}


class Launch:
    """`launch(*pointers)` launches `function` with the first len(pointers) arguments replaced.

    `args` is a sequence of (ctype name, value): 'ptr' for device pointers, 'i32', 'i64', 'f32', 'f64'.
    Pointers must come first in the kernel signature.
    """

    __slots__ = ("function", "grid", "block", "shared", "_slots", "_buffer", "_pointers", "_pack", "_params",
                 "_address", "_call")

    def __init__(self, function: driver.Function, grid: Sequence[int], block: Sequence[int], shared: int,
                 args: Sequence[tuple[str, object]]):
        self.function = function
        self.grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        self.block = tuple(int(b) for b in block) + (1,) * (3 - len(block))
        if min(self.grid) < 1 or min(self.block) < 1:
            raise ValueError(f"launch geometry grid={self.grid} block={self.block} has an empty dimension")
        self.shared = int(shared)
        function.reserve_shared(self.shared)
        n_ptr = sum(1 for kind, _ in args if kind == "ptr")
        if any(kind != "ptr" for kind, _ in args[:n_ptr]):
            raise ValueError("pointer arguments must come first in the kernel signature")
        self._buffer = bytearray(8 * max(n_ptr, 1))
        self._pointers = (ctypes.c_uint64 * max(n_ptr, 1)).from_buffer(self._buffer)
        self._pack = struct.Struct(f"<{n_ptr}Q").pack_into  # all pointers in one C call
        scalars = [_CTYPES[kind](value) for kind, value in args[n_ptr:]]
        for i, (_, value) in enumerate(args[:n_ptr]):
            self._pointers[i] = int(value or 0)
        self._slots = scalars
        addresses = [ctypes.addressof(self._pointers) + 8 * i for i in range(n_ptr)]
        addresses += [ctypes.addressof(s) for s in scalars]
        self._params = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        self._address = ctypes.addressof(self._params)
        g, b = self.grid, self.block
        raw = driver.raw_entry("cuLaunchKernel")
        if raw is not None:  # cuLaunchKernel(f, grid xyz, block xyz, shared bytes, stream, params, extra)
            u = ctypes.c_uint
            self._call = functools.partial(raw, driver.handle_value(function.handle), u(g[0]), u(g[1]), u(g[2]),
                                           u(b[0]), u(b[1]), u(b[2]), u(self.shared),
                                           ctypes.c_void_p(driver.STREAM), ctypes.c_void_p(self._address), None)
        else:  # no loadable libcuda for ctypes: the cuda.bindings wrapper (slower per call)
            launch = driver._driver().cuLaunchKernel
            self._call = functools.partial(_bindings_launch, launch, function.handle, *g, *b, self.shared,
                                           self._address)

    def __call__(self, *pointers: int) -> None:
        try:
            self._pack(self._buffer, 0, *pointers)
        except struct.error:  # fewer pointers than the kernel takes: replace just those
            self._pointers[:len(pointers)] = pointers
        err = self._call()
        if err:
            self._recover(err, pointers)

    def _recover(self, err: int, pointers: tuple) -> None:
        """The slow path of a failed launch: a thread with no current context gets the kernel's, once."""
        device = self.function.device
        if driver.thread_ordinal() is None:
            device.make_current()
            return self(*pointers)
        if driver.thread_ordinal() != device.ordinal:
            raise ValueError(f"this launch belongs to device {device.ordinal} (where its tensors are) but the "
                             f"current device is {driver.thread_ordinal()}: call "
                             f"cuopjit.set_device({device.ordinal}) first")
        check((driver._driver().CUresult(err),), "cuLaunchKernel")


def _bindings_launch(launch, handle, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int,
                     params: int) -> int:
    return int(launch(handle, gx, gy, gz, bx, by, bz, shared, driver.STREAM, params, 0)[0])
