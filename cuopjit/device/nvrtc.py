"""The NVRTC binding: the library's version, its architectures, and one compile. No GPU is needed.

`cuopjit.build.compiler` decides what to compile and with which options; this module only calls the
library, every status through `errors.check` (a failed call raises CompileError).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import CompileError, check


def _api():
    from cuda.bindings import nvrtc
    return nvrtc


def _call(result: tuple, what: str):
    return check(result, f"NVRTC {what}", error=CompileError)


def version() -> tuple[int, int]:
    """(major, minor) as the loaded library reports it (loading it takes ~50 ms)."""
    return _call(_api().nvrtcVersion(), "nvrtcVersion")


def architectures() -> list[int]:
    """The real architectures (75, 80, ..., 90, ...) this library can target."""
    nv = _api()
    n = _call(nv.nvrtcGetNumSupportedArchs(), "nvrtcGetNumSupportedArchs")
    return list(_call(nv.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")) if n else []


@dataclass(frozen=True)
class Output:
    """What one compile produced: `ok`, the program log, and (when ok) the cubin and the PTX."""
    ok: bool
    log: str
    cubin: bytes = b""
    ptx: str = ""


def compile_program(source: str, file_name: str, flags: tuple[str, ...]) -> Output:
    """Compile `source` (named `file_name` in diagnostics) with `flags`; a rejected program gives ok=False."""
    nv = _api()
    prog = _call(nv.nvrtcCreateProgram(source.encode(), file_name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        result = nv.nvrtcCompileProgram(prog, len(flags), [f.encode() for f in flags])
        # NVRTC writes into the buffer: it must be a private bytearray. `b" " * 1` (an empty log has
        # size 1) is CPython's shared one-byte object, and writing into it corrupts every b" ".
        buf = bytearray(_call(nv.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize"))
        _call(nv.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = bytes(buf).rstrip(b"\x00 ").decode(errors="replace")
        if int(result[0]) != 0:
            return Output(False, log)
        out = bytearray(_call(nv.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize"))
        _call(nv.nvrtcGetCUBIN(prog, out), "nvrtcGetCUBIN")
        ptx = bytearray(_call(nv.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize"))
        _call(nv.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    finally:
        nv.nvrtcDestroyProgram(prog)
    return Output(True, log, bytes(out), bytes(ptx).rstrip(b"\x00").decode(errors="replace"))
