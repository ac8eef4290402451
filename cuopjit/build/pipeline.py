"""The one pipeline: KernelSpec → render → cache (or NVRTC) → cubin → loaded function.

Operators describe a kernel with a `KernelSpec` (template, entry point, parameters, compile
settings); everything after that happens here and only here. `get_function` is memoised, so
a warm lookup is one dict probe: no rendering, hashing or file access.
"""
from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from . import codegen, compiler
from ..device import driver
from ..cache import EntrySpec, get_cache
from ..config import ConfigSnapshot, get_default_global_jit_config
from ..errors import ExecutionError
from ..log import logger

@dataclass(frozen=True)
class KernelSpec:
    """Everything that decides a kernel's code: the template, its parameters and the compile settings."""
    template: str
    kernel: str
    name: str
    params: tuple[tuple[str, Any], ...]
    optimization_level: str = "O3"
    max_registers: int = 0
    arch_specific: bool = False   # uses sm_90a-only instructions (wgmma, setmaxnreg): built for 'sm_90a' on sm_90


CompileOpts = tuple  # (optimization_level, max_registers), as a family's choice carries them
DEFAULT_OPTS: CompileOpts = ("O3", 0)


def compile_opts(cfg: ConfigSnapshot) -> CompileOpts:
    """The JITConfig fields that reach NVRTC rather than the template."""
    return (cfg.optimization_level, cfg.max_registers)


def make_spec(template: str, kernel: str, name: str, params: Mapping[str, Any],
              opts: CompileOpts = DEFAULT_OPTS, arch_specific: bool = False) -> KernelSpec:
    """A KernelSpec: template, entry point, readable name, parameters and compile settings `opts`.

    arch_specific: the kernel needs the architecture-specific target ('sm_90a' for 'sm_90')."""
    return KernelSpec(template=template, kernel=kernel, name=name, params=tuple(sorted(params.items())),
                      optimization_level=opts[0], max_registers=opts[1], arch_specific=arch_specific)


def compile_arch(spec: KernelSpec, arch: str) -> str:
    """The NVRTC target of `spec` on a device of `arch`: 'sm_90' -> 'sm_90a' for an arch-specific kernel."""
    return arch + "a" if spec.arch_specific and not arch.endswith("a") else arch


def source(spec: KernelSpec) -> str:
    """The rendered CUDA C for a spec; max_registers reaches the template (CUOPJIT_LAUNCH_BOUNDS) too."""
    return codegen.render(spec.template, {**dict(spec.params), "max_registers": spec.max_registers})


def _options(spec: KernelSpec, arch: str, debug: bool | None = None) -> compiler.CompileOptions:
    debug = get_default_global_jit_config().debug() if debug is None else debug
    return compiler.CompileOptions(arch=compile_arch(spec, arch), optimization_level=spec.optimization_level,
                                   max_registers=spec.max_registers, debug=debug)


def compile_fresh(spec: KernelSpec, arch: str, entry: EntrySpec | None = None) -> compiler.Compiled:
    """`spec` compiled now for `arch` with the options the cache uses (its cubin, log and PTX); nothing is stored.

    `entry`: `entry_spec(spec, arch)` when the caller has it already (the source is not rendered again)."""
    entry = entry or entry_spec(spec, arch)
    return compiler.compile_cubin(entry.source, entry.name, _options(spec, arch), params=dict(spec.params),
                                  template_lines=codegen.template_lines)


def entry_spec(spec: KernelSpec, arch: str) -> EntrySpec:
    """The cache's view of a spec for one architecture (renders the source; the last few are memoised, so a
    cache probe followed by the build renders once). An unhashable spec is rendered every time."""
    key = (spec, arch, get_default_global_jit_config().debug(), compiler.nvrtc_version())
    try:
        return _entry_spec(*key)
    except TypeError:
        return _entry_spec.__wrapped__(*key)


@functools.lru_cache(maxsize=256)
def _entry_spec(spec: KernelSpec, arch: str, debug: bool, nvrtc_version: str) -> EntrySpec:
    options = _options(spec, arch, debug)
    return EntrySpec(name=f"{spec.name}_{options.arch.replace('_', '')}", source=source(spec),
                     options=options.flags(), arch=options.arch, nvrtc_version=nvrtc_version,
                     template=spec.template, params=tuple((k, str(v)) for k, v in spec.params))


@dataclass
class BuildInfo:
    """How a cubin was obtained, for profiles and logs."""
    cache_hit: bool
    seconds: float
    registers: int | None = None
    spill_bytes: int = 0
    key: str = ""  # the cache key of the cubin
    stored: bool = False  # whether the cubin is on disk in a cache layer after this call


def build(spec: KernelSpec, arch: str, cache_dir: str | os.PathLike | None = None,
          persistent: bool = True) -> tuple[bytes, BuildInfo]:
    """The cubin for `spec` on `arch`: from the cache, or compiled with NVRTC and stored.

    cache_dir None uses the global cache; persistent False (or enable_caching=False) keeps nothing on disk.
    """
    start = time.perf_counter()
    entry = entry_spec(spec, arch)
    compiled: list[compiler.Compiled] = []

    def compile_now() -> bytes:
        c = compile_fresh(spec, arch, entry)
        compiled.append(c)
        logger().debug("compiled %s in %.0f ms (%s registers, %d spill bytes)", entry.name, c.seconds * 1e3,
                       c.registers, c.spill_bytes)
        return c.cubin

    cache = get_cache(cache_dir) if persistent else None
    if cache is None:
        cubin, hit = compile_now(), False
    else:
        cubin, hit = cache.get_or_build(entry, compile_now)
        if get_default_global_jit_config().debug():
            _keep_source(cache, entry)
    info = BuildInfo(cache_hit=hit, seconds=time.perf_counter() - start, key=entry.key,
                     stored=cache is not None and cache.persisted(entry.key))
    if compiled:
        info.registers, info.spill_bytes = compiled[0].registers, compiled[0].spill_bytes
    return cubin, info


def _keep_source(cache, entry) -> None:
    """Debug mode keeps the rendered source beside the cache, named like the entry."""
    directory = cache.directory
    if directory is None or not cache.writable:  # a memory-only or unwritable cache keeps no files
        return
    path = Path(directory) / "sources" / f"{entry.name}-{entry.key[:16]}.cu"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not path.exists():
            path.write_text(entry.source)
    except OSError as exc:
        logger().warning("could not keep the source of %s in %s: %s", entry.name, path, exc)


class LoadedKernel:
    """A function ready to launch, with how it was built."""

    def __init__(self, function: driver.Function, info: BuildInfo, spec: KernelSpec):
        self.function, self.info, self.spec = function, info, spec


def is_cached(spec: KernelSpec, arch: str, cache_dir: str | None = None) -> bool:
    """True when a cache layer holds the cubin for `spec` on `arch` (nothing is compiled)."""
    return get_cache(cache_dir).contains(entry_spec(spec, arch))


@functools.lru_cache(maxsize=4096)
def get_function(spec: KernelSpec, ordinal: int, cache_dir: str | None = None, persistent: bool = True
                 ) -> LoadedKernel:
    """The loaded kernel for a spec on a device, memoised; a cubin the driver rejects is rebuilt once.

    An entry that leaves this memo unloads its module once no plan holds it (driver.Function).
    """
    device = driver.get_device(ordinal)
    cubin, info = build(spec, device.arch, cache_dir, persistent)
    try:
        return LoadedKernel(driver.load_function(cubin, spec.kernel, device), info, spec)
    except ExecutionError as exc:
        if not driver.is_rejected_image(exc) or not persistent:
            raise
        get_cache(cache_dir).invalidate(entry_spec(spec, device.arch), f"the driver rejected it: {exc.error_name}")
        cubin, info = build(spec, device.arch, cache_dir)
        return LoadedKernel(driver.load_function(cubin, spec.kernel, device), info, spec)
