"""GlobalJITConfig: process-wide settings (cache, auto-tuning, compile threads, debug), defaults from the environment."""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .environment import environment
from .jit import JITConfig
from .values import check_bool, check_int, parse_size

@dataclass
class GlobalJITConfig:
    """Process-wide settings (cuOP `GlobalJITConfig`); `get_default_global_jit_config()` is the live one.

    cache_dir None means: CUOPJIT_CACHE_DIR, else the platform's user cache directory.
    max_cache_size None means: CUOPJIT_MAX_CACHE_SIZE, else 4 GiB.
    """
    enable_jit: bool = True
    enable_auto_tuning: bool = False
    enable_caching: bool = True
    cache_dir: str | None = None
    max_cache_size: int | None = None
    compilation_timeout: float = 300.0
    max_compilation_threads: int = field(default_factory=lambda: max(1, min(8, os.cpu_count() or 1)))
    enable_debug: bool = False

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _GLOBAL_FIELDS:
            raise AttributeError(f"GlobalJITConfig has no field {name!r}: fields are {', '.join(_GLOBAL_FIELDS)}")
        if name == "cache_dir":
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise ValueError(f"cache_dir={value!r} is not allowed: it must be a path or None")
            value = None if value is None else os.fspath(value)
        elif name == "max_cache_size":
            if value is not None:
                value = parse_size(value)
                check_int(name, value, 1 << 20)
        elif name == "compilation_timeout":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"compilation_timeout={value!r} is not allowed: it must be a finite number of "
                                 "seconds > 0")
            value = float(value)
        elif name == "max_compilation_threads":
            check_int(name, value, 1, 256)
        else:
            check_bool(name, value)
        object.__setattr__(self, name, value)
        _GENERATION[0] += 1

    def resolved_cache_dir(self) -> Path:
        """Where the writable cache layer lives: this config, CUOPJIT_CACHE_DIR, then platformdirs."""
        if self.cache_dir:
            return Path(self.cache_dir).expanduser()
        env = environment()
        if env.cache_dir:
            return Path(env.cache_dir).expanduser()
        import platformdirs
        return Path(platformdirs.user_cache_dir("cuopjit", appauthor=False))

    def resolved_max_cache_size(self) -> int:
        """The size cap: this config's, else CUOPJIT_MAX_CACHE_SIZE (ValueError when unreadable), else 4 GiB."""
        if self.max_cache_size is not None:
            return self.max_cache_size
        env = environment()
        env.require("CUOPJIT_MAX_CACHE_SIZE")
        return env.max_cache_size or 4 << 30

    def debug(self) -> bool:
        """enable_debug, or CUOPJIT_DEBUG (ValueError when unreadable)."""
        if self.enable_debug:
            return True
        env = environment()
        env.require("CUOPJIT_DEBUG")
        return env.debug


_GLOBAL_FIELDS = tuple(f.name for f in dataclasses.fields(GlobalJITConfig))
_GENERATION = [0]   # bumped by every GlobalJITConfig assignment


def global_generation() -> int:
    """A counter every GlobalJITConfig assignment bumps: JIT wrappers rebuild their settings only when it moved."""
    return _GENERATION[0]

_default_jit_config = JITConfig()
_global_config = GlobalJITConfig()


def get_default_jit_config() -> JITConfig:
    """A fresh copy of the default JITConfig, for the caller to edit and pass to `set_jit_config`."""
    return _default_jit_config.copy()


def get_default_global_jit_config() -> GlobalJITConfig:
    """The live process-wide GlobalJITConfig: edits take effect for every later kernel lookup."""
    return _global_config
