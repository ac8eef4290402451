"""cuopjit's exceptions and the one checker every driver call goes through."""
from __future__ import annotations

import builtins
from typing import Any


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


def check(result: tuple, what: str = "") -> Any:
    """Unpack a cuda.bindings driver return tuple; raise ExecutionError for a non-success status.

    Returns None, the single value, or a tuple of values, as the call produced.
    """
    err = result[0]
    if int(err) != 0:
        from cuda.bindings import driver
        name = error_name(err)
        _, desc = driver.cuGetErrorString(err)
        detail = desc.decode() if isinstance(desc, bytes) else ""
        raise ExecutionError(f"{what or 'CUDA driver call'} failed: {name}" + (f" ({detail})" if detail else ""), name)
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
