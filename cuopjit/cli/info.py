"""`cuopjit info` and `cuopjit.print_system_info()`: versions, NVRTC targets, cache location and devices.

An unusable cache directory (a file, unreadable, unwritable, untrusted) is marked on its line, and
`cuopjit info` then exits 1 with the reason and what to do.
"""
from __future__ import annotations

import argparse
import platform
import sys
from importlib import metadata

from ..build import compiler
from ..cache import get_cache
from ..cache.access import advice
from ..device import driver
from .._version import __version__
from ..config import environment, get_default_global_jit_config
from ..errors import CuopjitError


def cache_problem() -> str | None:
    """Why the configured cache directory cannot be used (read, or written), or None."""
    layer = get_cache(get_default_global_jit_config().resolved_cache_dir()).layer
    return layer.problem() if layer is not None else None


def system_info() -> dict:
    """Versions, NVRTC targets, cache location and devices (if any), as a dict."""
    info = {"cuopjit": __version__, "python": sys.version.split()[0], "platform": platform.platform()}
    for pkg in ("numpy", "cuda-bindings", "cuda-core", "nvidia-cuda-nvrtc", "jinja2"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[pkg] = "not installed"
    info["nvrtc"] = compiler.nvrtc_version()
    info["nvrtc_targets"] = " ".join(compiler.supported_archs())
    info["cache_dir"] = str(get_default_global_jit_config().resolved_cache_dir())
    if problem := cache_problem():
        info["cache_dir"] += f"  [UNUSABLE: {problem}]"
    env = environment()
    for name, value in env.variables:
        problem = env.problem(name)
        info[name] = f"{value!r} (ignored: {problem})" if problem else value
    count = driver.device_count()
    info["devices"] = []
    if count:
        info["driver"] = driver.driver_version()
        for i in range(count):
            d = driver.get_device(i)
            info["devices"].append(f"{i}: {d.name}, {d.arch}, {d.sm_count} SMs, {d.total_memory / 2**30:.1f} GiB")
        driver.get_device(driver.current_ordinal())
    return info


def print_system_info() -> None:
    """Print versions, NVRTC, cache directory and devices."""
    info = system_info()
    devices = info.pop("devices")
    for key, value in info.items():
        print(f"{key:>18}: {value}")
    print(f"{'devices':>18}: {len(devices) or 'none (compile, cache and prewarm still work)'}")
    for d in devices:
        print(f"{'':>18}  {d}")


def cmd_info(ns: argparse.Namespace) -> int:
    """`cuopjit info`: print the table; exit 1 (after it) when the cache directory is unusable."""
    print_system_info()
    if problem := cache_problem():
        raise CuopjitError(f"cannot use the cache: {problem}; {advice(problem)}")
    return 0
