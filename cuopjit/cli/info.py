"""`cuopjit info` and `cuopjit.print_system_info()`: versions, NVRTC targets, cache location and devices."""
from __future__ import annotations

import platform
import sys
from importlib import metadata

from ..build import compiler
from ..device import driver
from .._version import __version__
from ..config import environment, get_default_global_jit_config


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
