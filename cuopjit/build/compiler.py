"""NVRTC: turn rendered CUDA C into a cubin for one architecture. No driver, no GPU needed."""
from __future__ import annotations

import functools
import os
import re
import sys
import time
from dataclasses import dataclass

from ..device import nvrtc
from ..errors import CompileError
from ..log import warn_once

_ERROR_AT = re.compile(r'^"?([^"\s(]+\.jinja)"?\((\d+)\): (error|catastrophic error)', re.M)
_WHEEL = re.compile(r"nvidia_cuda_nvrtc(?:_cu\d+)?-(\d+)\.(\d+)[.\w]*\.dist-info$")
_RESOURCES = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")

MIN_ARCH = "sm_80"  # the oldest architecture every kernel compiles for (sm_75 lacks what float64 kernels use)

_OPT_FLAGS = {
    "O0": ("--ptxas-options=-O0",),
    "O1": ("--ptxas-options=-O1",),
    "O2": ("--ptxas-options=-O2",),
    "O3": ("--ptxas-options=-O3", "--extra-device-vectorization"),
}


@dataclass(frozen=True)
class CompileOptions:
    """What NVRTC is told, besides the source. `flags()` is part of the cache key."""
    arch: str
    optimization_level: str = "O3"
    max_registers: int = 0
    debug: bool = False

    def flags(self) -> tuple[str, ...]:
        flags = [f"--gpu-architecture={self.arch}", "--std=c++17", "--ptxas-options=-v",
                 *_OPT_FLAGS[self.optimization_level]]
        if self.max_registers:
            flags.append(f"--maxrregcount={self.max_registers}")
        if self.debug:
            flags.append("-lineinfo")
        return tuple(flags)


@dataclass(frozen=True)
class Compiled:
    """A cubin with NVRTC's log, the PTX it came from and the resource figures ptxas reported."""
    cubin: bytes
    log: str
    seconds: float
    ptx: str = ""

    @property
    def registers(self) -> int | None:
        m = _RESOURCES.search(self.log)
        return int(m.group(1)) if m else None

    @property
    def spill_bytes(self) -> int:
        return sum(int(a) + int(b) for a, b in _SPILLS.findall(self.log))

    @property
    def shared_bytes(self) -> int | None:
        m = _SMEM.search(self.log)
        return int(m.group(1)) if m else None


@functools.cache
def loaded_nvrtc_version() -> str:
    """The version the NVRTC library itself reports (loading it takes ~50 ms)."""
    major, minor = nvrtc.version()
    return f"{major}.{minor}"


@functools.cache
def nvrtc_version() -> str:
    """'13.5': part of every cache key, since another NVRTC may emit another cubin.

    Read from the nvidia-cuda-nvrtc wheel's metadata when it is installed (cuda.pathfinder loads
    that wheel's library before any other), so a warm lookup never loads NVRTC; `compile_cubin`
    checks it against the loaded library.
    """
    for entry in sys.path:  # the dist-info folder's name: a directory listing, not importlib.metadata's scan
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            m = _WHEEL.match(name)
            if m:
                return f"{int(m.group(1))}.{int(m.group(2))}"
    return loaded_nvrtc_version()


@functools.cache
def nvrtc_archs() -> tuple[str, ...]:
    """Real architectures this NVRTC can target, e.g. ('sm_75', ..., 'sm_90', 'sm_90a', ...)."""
    archs = nvrtc.architectures()
    out = [f"sm_{a}" for a in archs]
    out += [f"sm_{a}a" for a in archs if a >= 90]
    return tuple(sorted(out, key=arch_number))


def arch_number(arch: str) -> tuple[int, str]:
    """'sm_90a' -> (90, 'sm_90a'): sorts and compares architectures."""
    return int(arch[3:].rstrip("a")), arch


def supported_archs() -> tuple[str, ...]:
    """The architectures cuopjit compiles for: this NVRTC's, from MIN_ARCH (float64 GEMM, softmax, layernorm) up."""
    return tuple(a for a in nvrtc_archs() if arch_number(a)[0] >= arch_number(MIN_ARCH)[0])


def _excerpt(log: str, template_lines) -> str:
    m = _ERROR_AT.search(log)
    if not m:
        return ""
    name, line = m.group(1), int(m.group(2))
    lines = template_lines(name)
    lo, hi = max(1, line - 3), min(len(lines), line + 3)
    body = "\n".join(f"{'>' if n == line else ' '} {n:5d} | {lines[n - 1]}" for n in range(lo, hi + 1))
    return f"\n{name}, lines {lo}-{hi}:\n{body}"


def compile_cubin(source: str, name: str, options: CompileOptions, *, params: dict | None = None,
                  template_lines=None) -> Compiled:
    """Compile `source` to a cubin; CompileError carries the log, an excerpt of the template and the params."""
    if loaded_nvrtc_version() != nvrtc_version():
        warn_once("nvrtc-version", f"NVRTC {loaded_nvrtc_version()} is loaded but the nvidia-cuda-nvrtc wheel is "
                  f"{nvrtc_version()}: cache entries are keyed by the wheel's version; reinstall one of them")
    start = time.perf_counter()
    flags = options.flags()
    out = nvrtc.compile_program(source, f"{name}.cu", flags)
    if not out.ok:
        excerpt = _excerpt(out.log, template_lines) if template_lines else ""
        shown = ", ".join(f"{k}={v}" for k, v in sorted((params or {}).items()))
        raise CompileError(
            f"NVRTC could not compile {name} for {options.arch}:\n{out.log.strip()}{excerpt}\n"
            f"config: {shown}\noptions: {' '.join(flags)}",
            log=out.log, source=source, name=name, options=flags, params=params)
    return Compiled(cubin=out.cubin, log=out.log, seconds=time.perf_counter() - start, ptx=out.ptx)
