"""cuopjit's exceptions and the one checker every driver call goes through."""
from __future__ import annotations

import builtins
from typing import Any, Callable


class CuopjitError(Exception):
    """Base of every error cuopjit raises on its own account."""


class CompileError(CuopjitError):
    """NVRTC rejected a rendered kernel. Carries the log, the source lines around the error and the config."""

    def __init__(self, message: str, *, log: str = "", source: str = "", name: str = "",
                 options: tuple[str, ...] = (), params: dict | None = None):
        super().__init__(message)
        self.log = log
        self.source = source
        self.name = name
        self.options = options
        self.params = params or {}


class ExecutionError(CuopjitError, RuntimeError):
    """A CUDA driver call failed; `.error_name` is the driver's name for it (e.g. CUDA_ERROR_ILLEGAL_ADDRESS)."""

    def __init__(self, message: str, error_name: str = ""):
        super().__init__(message)
        self.error_name = error_name


class MemoryError(CuopjitError, builtins.MemoryError):  # noqa: A001 - the cuOP API name
    """Device memory is exhausted; the message gives requested, free and total bytes."""

    def __init__(self, message: str, *, requested: int = 0, free: int = 0, total: int = 0):
        super().__init__(message)
        self.requested, self.free, self.total = requested, free, total


class NoDeviceError(ExecutionError):
    """No usable NVIDIA driver or GPU on this machine."""


def error_name(err: Any) -> str:
    """The CUresult's symbolic name, e.g. 'CUDA_ERROR_OUT_OF_MEMORY'."""
    return getattr(err, "name", None) or str(err)


_describe: Callable[[Any], str] = lambda err: ""   # the driver's cuGetErrorString, once cuopjit.device sets it


def set_describer(describe: Callable[[Any], str]) -> None:
    """Give `check` the driver's description of a status (called by cuopjit.device.driver, which owns the binding)."""
    global _describe
    _describe = describe


def check(result: tuple, what: str = "", error: type[CuopjitError] = ExecutionError) -> Any:
    """Unpack a cuda.bindings return tuple (driver or NVRTC); raise `error` for a non-success status.

    Returns None, the single value, or a tuple of values, as the call produced. The one checker every
    driver and NVRTC status goes through: driver calls raise ExecutionError (with the driver's name and
    description of the status); NVRTC calls pass error=CompileError.
    """
    err = result[0]
    if int(err) != 0:
        name = error_name(err)
        if error is ExecutionError:
            detail = _describe(err)
            raise ExecutionError(f"{what or 'CUDA driver call'} failed: {name}" + (f" ({detail})" if detail else ""),
                                 name)
        raise error(f"{what} failed: {name}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
