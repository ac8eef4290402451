"""The driver's launch entry point as a prebuilt call: `launcher(function, grid, block, shared, stream, params)`.

libcuda's `cuLaunchKernelEx` is called through ctypes (`driver.raw_entry`) with four prebuilt
arguments: a CUlaunchConfig (grid, block, shared bytes, stream), the function, the parameter array
(`void*[]`, built once by `cuopjit.run.launch`) and NULL. Where libcuda cannot be opened with ctypes,
the cuda.bindings wrapper does the same launch (slower per call). The call returns the raw CUresult;
`driver.raise_status` turns a failure into ExecutionError.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Callable

from . import driver


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig of the driver API (cuda.h): what cuLaunchKernelEx reads."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


def launcher(function: driver.Function, grid: tuple, block: tuple, shared: int, stream: int,
             params: int) -> Callable[[], int]:
    """A call that launches `function` on `stream` with the parameter array at address `params`; returns the
    CUresult as an int (0: launched). Build it once per stream and keep it: calling it converts nothing."""
    raw = driver.raw_entry("cuLaunchKernelEx")
    if raw is not None:  # cuLaunchKernelEx(&config, f, params, NULL)
        config = LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), shared, stream, None, 0)
        call = functools.partial(raw, ctypes.byref(config), driver.handle_value(function.handle),
                                 ctypes.c_void_p(params), None)
        return call
    return functools.partial(_bindings_launch, driver.api().cuLaunchKernel, function.handle, *grid, *block,
                             shared, stream, params)


def _bindings_launch(launch, handle, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int,
                     stream: int, params: int) -> int:
    return int(launch(handle, gx, gy, gz, bx, by, bz, shared, stream, params, 0)[0])
