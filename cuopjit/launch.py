"""A prepared launch: one KernelLaunch of a plan, packed once for one loaded function.

The parameter array (`void*[]`) is built once: scalars and by-value blobs live in ctypes
buffers, pointers in one contiguous uint64 buffer that a call rewrites with a single
`struct.pack_into`. libcuda's `cuLaunchKernelEx` (through ctypes, see `driver.raw_entry`) takes
four prebuilt arguments: a CUlaunchConfig (grid, block, shared bytes, stream) built once per
stream, the function, the parameter array and NULL; so a warm launch does no rendering, hashing,
file access or marshalling, and ctypes converts four arguments instead of eleven.
"""
from __future__ import annotations

import ctypes
import functools
import operator
import struct
from typing import Callable

from . import driver
from .errors import check
from .plan import KernelLaunch

_CTYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float, "f64": ctypes.c_double}
_STREAMS_KEPT = 64


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig of the driver API (cuda.h): what cuLaunchKernelEx reads."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


def _gather(kl: KernelLaunch, n_pointers: int) -> Callable[[tuple], tuple] | None:
    """How a call's pointer tuple maps onto this launch's pointer slots (None: one to one, in order)."""
    pairs = [(a.value, a.offset) for a in kl.args if a.kind == "ptr"]
    if [i for i, _ in pairs] == list(range(n_pointers)) and not any(o for _, o in pairs):
        return None
    if not any(o for _, o in pairs):
        getter = operator.itemgetter(*[i for i, _ in pairs]) if pairs else (lambda p: ())
        return (lambda p: (getter(p),)) if len(pairs) == 1 else getter
    return lambda p: tuple(p[i] + o for i, o in pairs)


class Launch:
    """`launch(pointers, stream)`: launch the kernel with the call's pointers on `stream` (a handle)."""

    __slots__ = ("function", "kernel", "kl", "_buffer", "_pack", "_gather", "_keep", "_params", "_calls",
                 "_base", "runner")

    def __init__(self, function: driver.Function, kl: KernelLaunch, n_pointers: int, kernel=None):
        self.function, self.kl, self.kernel, self.runner = function, kl, kernel, None
        function.reserve_shared(kl.shared)
        if kl.max_carveout:
            function.prefer_shared_carveout()
        n_ptr = sum(1 for a in kl.args if a.kind == "ptr")
        self._buffer = (ctypes.c_uint64 * max(n_ptr, 1))()
        self._pack = struct.Struct(f"<{n_ptr}Q").pack_into
        self._gather = _gather(kl, n_pointers)
        addresses, keep, slot = [], [], 0
        for a in kl.args:
            if a.kind == "ptr":
                addresses.append(ctypes.addressof(self._buffer) + 8 * slot)
                slot += 1
                continue
            value = (ctypes.create_string_buffer(a.value, len(a.value)) if a.kind == "blob"
                     else _CTYPES[a.kind](a.value))
            keep.append(value)
            addresses.append(ctypes.addressof(value))
        self._keep = keep
        self._params = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        self._calls: dict[int, Callable[[], int]] = {}
        raw = driver.raw_entry("cuLaunchKernelEx")
        self._base = None if raw is None else (raw, driver.handle_value(function.handle))

    def _bind(self, stream: int) -> Callable[[], int]:
        """The launch call for one stream, built once and kept (a few streams per launch in practice)."""
        if len(self._calls) >= _STREAMS_KEPT:
            self._calls.clear()
        params = ctypes.addressof(self._params)
        if self._base is not None:  # cuLaunchKernelEx(&config, f, params, NULL)
            raw, fn = self._base
            config = LaunchConfig((ctypes.c_uint * 3)(*self.kl.grid), (ctypes.c_uint * 3)(*self.kl.block),
                                  self.kl.shared, stream, None, 0)
            call = functools.partial(raw, ctypes.byref(config), fn, ctypes.c_void_p(params), None)
        else:  # no loadable libcuda for ctypes: the cuda.bindings wrapper (slower per call)
            drv, (g, b) = driver._driver(), (self.kl.grid, self.kl.block)
            call = functools.partial(_bindings_launch, drv.cuLaunchKernel, self.function.handle, *g, *b,
                                     self.kl.shared, stream, params)
        self._calls[stream] = call
        return call

    def __call__(self, pointers: tuple, stream: int) -> None:
        if self._gather is not None:
            pointers = self._gather(pointers)
        self._pack(self._buffer, 0, *pointers)
        call = self._calls.get(stream) or self._bind(stream)
        err = call()
        if err:
            self._recover(err, pointers, stream)

    def fast(self) -> Callable[[tuple, int], None]:
        """The same call as a closure over the prepared buffers: no attribute loads, no `__call__` dispatch.

        Only for a launch whose pointer slots are the call's pointers in order (no gather)."""
        if self._gather is not None:
            return self
        pack, buffer, calls, bind, recover = self._pack, self._buffer, self._calls, self._bind, self._recover

        def launch(pointers: tuple, stream: int) -> None:
            pack(buffer, 0, *pointers)
            call = calls.get(stream)
            if call is None:
                call = bind(stream)
            err = call()
            if err:
                recover(err, pointers, stream)
        launch.launch = self
        return launch

    def _recover(self, err: int, pointers: tuple, stream: int) -> None:
        """The slow path of a failed launch: a thread with no current context gets the kernel's, once."""
        device = self.function.device
        if driver.thread_ordinal() is None:
            device.make_current()
            err = (self._calls.get(stream) or self._bind(stream))()
            if not err:
                return
        if driver.thread_ordinal() != device.ordinal:
            raise ValueError(f"this launch belongs to device {device.ordinal} (where its tensors are) but the "
                             f"current device is {driver.thread_ordinal()}: call "
                             f"cuopjit.set_device({device.ordinal}) first")
        check((driver._driver().CUresult(err),), f"cuLaunchKernel({self.kl.spec.name})")


def _bindings_launch(launch, handle, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int,
                     stream: int, params: int) -> int:
    return int(launch(handle, gx, gy, gz, bx, by, bz, shared, stream, params, 0)[0])
