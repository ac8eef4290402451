"""PTX and SASS of a kernel, for `cuopjit show --ptx / --sass`.

PTX comes from NVRTC (the same source and options as the cached cubin). SASS needs a CUDA toolkit
disassembler, `nvdisasm` or `cuobjdump`, on PATH or in /usr/local/cuda/bin; pip's NVRTC ships
neither, so without one `sass` returns None and the caller prints a one-line note.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import pipeline
from ..errors import CuopjitError

_TOOLKIT_BIN = Path("/usr/local/cuda/bin")
NO_SASS = ("SASS needs nvdisasm or cuobjdump (CUDA toolkit) on PATH; neither was found, "
           "so only the CUDA C and PTX can be shown here")


def ptx(spec: pipeline.KernelSpec, arch: str) -> str:
    """The PTX NVRTC generates for `spec` on `arch` with the options the cache uses."""
    return pipeline.compile_fresh(spec, arch).ptx


def sass_tool() -> list[str] | None:
    """The disassembler command line (the cubin's path goes last), or None without one."""
    for name, args in (("nvdisasm", ["--print-line-info"]), ("cuobjdump", ["--dump-sass"])):
        found = shutil.which(name) or shutil.which(name, path=str(_TOOLKIT_BIN))
        if found:
            return [found, *args]
    return None


def sass(spec: pipeline.KernelSpec, arch: str) -> str | None:
    """The SASS of the cubin `spec` builds for `arch` (from the cache, else compiled), or None without a tool."""
    tool = sass_tool()
    if tool is None:
        return None
    cubin, _ = pipeline.build(spec, arch)
    fd, path = tempfile.mkstemp(suffix=".cubin")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        done = subprocess.run([*tool, path], capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(path)
    if done.returncode != 0:
        raise CuopjitError(f"{Path(tool[0]).name} could not disassemble {spec.name} for {arch}: "
                           f"{done.stderr.strip() or done.returncode}")
    return done.stdout
