"""A prepared launch: one KernelLaunch of a plan, packed once for one loaded function.

The parameter array (`void*[]`) is built once: scalars and by-value blobs live in ctypes
buffers, pointers in one contiguous uint64 buffer that a call rewrites with a single
`struct.pack_into`. The driver call itself is built once per stream by `cuopjit.device.launch`
(libcuda's `cuLaunchKernelEx` with four prebuilt arguments); so a warm launch does no rendering,
hashing, file access or marshalling.
"""
from __future__ import annotations

import ctypes
import operator
import struct
from typing import Callable

from ..device import driver, launch as device_launch
from .plan import KernelLaunch

_CTYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float, "f64": ctypes.c_double}
_STREAMS_KEPT = 64


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
                 "runner")

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

    def _bind(self, stream: int) -> Callable[[], int]:
        """The launch call for one stream, built once and kept (a few streams per launch in practice)."""
        if len(self._calls) >= _STREAMS_KEPT:
            self._calls.clear()
        call = device_launch.launcher(self.function, self.kl.grid, self.kl.block, self.kl.shared, stream,
                                      ctypes.addressof(self._params))
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
        driver.raise_status(err, f"cuLaunchKernel({self.kl.spec.name})")

