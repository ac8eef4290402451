"""JITConfig, GlobalJITConfig and the environment: the only module that reads os.environ.

`JITConfig` is mutable (the cuOP API assigns fields one by one) and validates every
assignment; `JITConfig.snapshot()` gives the frozen, hashable form that kernel
specialisations and cache keys are built from.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .values import parse_size, split_list, whole_number

KERNEL_TYPES = ("auto", "simple", "tiled", "warp_optimized", "tensor_core")
OPTIMIZATION_LEVELS = ("O0", "O1", "O2", "O3")
TILE_SIZES = (0, 8, 16, 32, 64, 128, 256)
PRECISIONS = ("tf32", "3xtf32")   # float32 tensor-core products: one TF32 product, or three (float32-grade)
BLOCK_SIZES = (0, 32, 64, 128, 256, 512, 1024)
LOG_LEVELS = ("debug", "info", "warning", "error")

def _allowed(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed: choose one of {', '.join(map(repr, allowed))}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is not allowed: it must be True or False")


def _check_int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        span = f"an integer >= {lo}" if hi is None else f"an integer from {lo} to {hi}"
        raise ValueError(f"{name}={value!r} is not allowed: it must be {span}")


@dataclass(frozen=True)
class ConfigSnapshot:
    """The frozen, hashable view of a JITConfig that reaches kernel specs and cache keys."""
    enable_jit: bool
    kernel_type: str
    tile_size: int
    block_size: int
    optimization_level: str
    enable_tensor_core: bool
    enable_tma: bool
    max_registers: int
    enable_shared_memory_opt: bool
    enable_loop_unroll: bool
    enable_memory_coalescing: bool
    precision: str = "tf32"


@dataclass
class JITConfig:
    """Per-operator JIT settings (cuOP `JITConfig`). Every assignment is validated.

    tile_size / block_size 0 and kernel_type "auto" mean "the operator's tuned default".
    max_registers 0 means no `--maxrregcount` cap. precision "3xtf32" runs float32 tensor-core
    products as three TF32 products (big*big + big*small + small*big): float32-grade error.
    """
    enable_jit: bool = True
    kernel_type: str = "auto"
    tile_size: int = 0
    block_size: int = 0
    optimization_level: str = "O3"
    enable_tensor_core: bool = False
    enable_tma: bool = False
    max_registers: int = 0
    enable_shared_memory_opt: bool = True
    enable_loop_unroll: bool = True
    enable_memory_coalescing: bool = True
    precision: str = "tf32"

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _JIT_FIELDS:
            raise AttributeError(f"JITConfig has no field {name!r}: fields are {', '.join(_JIT_FIELDS)}")
        object.__setattr__(self, name, _validate_jit_field(name, value))

    def snapshot(self) -> ConfigSnapshot:
        """Frozen copy for cache keys and kernel specialisation."""
        return ConfigSnapshot(**dataclasses.asdict(self))

    def copy(self) -> "JITConfig":
        return dataclasses.replace(self)


def _validate_jit_field(name: str, value: Any) -> Any:
    """The value to store (integral floats of integer fields become ints); ValueError for a bad one."""
    if name in ("kernel_type",):
        _allowed(name, value, KERNEL_TYPES)
    elif name == "optimization_level":
        _allowed(name, value, OPTIMIZATION_LEVELS)
    elif name == "precision":
        if value not in PRECISIONS:
            raise ValueError(f"precision={value!r} is not allowed: choose 'tf32' (one TF32 product: fastest, "
                             "relative error ~1e-3) or '3xtf32' (three TF32 products: float32-grade error)")
    elif name in ("tile_size", "block_size"):
        value = whole_number(name, value)
        _allowed(name, value, TILE_SIZES if name == "tile_size" else BLOCK_SIZES)
    elif name == "max_registers":
        value = whole_number(name, value)
        if value != 0:
            _check_int(name, value, 16, 255)
    else:
        _check_bool(name, value)
    return value


_JIT_FIELDS = tuple(f.name for f in dataclasses.fields(JITConfig))


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
                _check_int(name, value, 1 << 20)
        elif name == "compilation_timeout":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"compilation_timeout={value!r} is not allowed: it must be a finite number of "
                                 "seconds > 0")
            value = float(value)
        elif name == "max_compilation_threads":
            _check_int(name, value, 1, 256)
        else:
            _check_bool(name, value)
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


@dataclass(frozen=True)
class Environment:
    """Every CUOPJIT_* variable, typed. Read on each call to `environment()` so tests can scope them.

    A value that is not understood leaves its field at the default and is listed in `problems`;
    whatever needs that value calls `require`, so commands that do not (`info`, `cache ls`) still run.
    """
    cache_dir: str | None
    cache_readonly: tuple[str, ...]
    max_cache_size: int | None
    log: str
    debug: bool
    arch: tuple[str, ...]
    variables: tuple[tuple[str, str], ...] = ()
    problems: tuple[tuple[str, str], ...] = ()

    def problem(self, variable: str) -> str | None:
        """Why `variable`'s value is not understood, or None."""
        return dict(self.problems).get(variable)

    def require(self, *variables: str) -> None:
        """Raise ValueError (saying what to write) for the first of `variables` whose value is not understood."""
        for variable in variables:
            if problem := self.problem(variable):
                raise ValueError(problem)


def _env_bool(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{name}={raw!r} is not understood: use 1/0, true/false, yes/no or on/off")


def environment() -> Environment:
    """Read the CUOPJIT_* variables now; bad values are kept in `problems`, named with what to write instead."""
    problems: dict[str, str] = {}
    log = os.environ.get("CUOPJIT_LOG", "warning").strip().lower() or "warning"
    if log not in LOG_LEVELS:
        problems["CUOPJIT_LOG"] = f"CUOPJIT_LOG={log!r} is not understood: use one of {', '.join(LOG_LEVELS)}"
        log = "warning"
    size, max_size = os.environ.get("CUOPJIT_MAX_CACHE_SIZE"), None
    try:
        max_size = parse_size(size) if size else None
    except ValueError as exc:
        problems["CUOPJIT_MAX_CACHE_SIZE"] = f"CUOPJIT_MAX_CACHE_SIZE: {exc}"
    raw_arch = os.environ.get("CUOPJIT_ARCH", "")
    arch = tuple(split_list(raw_arch))
    if not all(re.fullmatch(r"sm_\d{2,3}a?", a) for a in arch):
        problems["CUOPJIT_ARCH"] = (f"CUOPJIT_ARCH={raw_arch!r} is not understood: write one architecture or a comma "
                                    "list, e.g. sm_80 or sm_80,sm_90")
        arch = ()
    debug = False
    try:
        debug = _env_bool("CUOPJIT_DEBUG")
    except ValueError as exc:
        problems["CUOPJIT_DEBUG"] = str(exc)
    ro = os.environ.get("CUOPJIT_CACHE_READONLY", "")
    return Environment(
        cache_dir=os.environ.get("CUOPJIT_CACHE_DIR") or None,
        cache_readonly=tuple(p for p in ro.split(os.pathsep) if p),
        max_cache_size=max_size,
        log=log,
        debug=debug,
        arch=arch,
        variables=tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("CUOPJIT_"))),
        problems=tuple(problems.items()),
    )


@contextlib.contextmanager
def scoped_env(**values: str | None) -> Iterator[None]:
    """Set (or with None, unset) CUOPJIT_<NAME> variables for the duration of a block; tests use it."""
    saved = {}
    for key, value in values.items():
        var = "CUOPJIT_" + key.upper()
        saved[var] = os.environ.get(var)
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    try:
        yield
    finally:
        for var, old in saved.items():
            if old is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = old


_default_jit_config = JITConfig()
_global_config = GlobalJITConfig()


def get_default_jit_config() -> JITConfig:
    """A fresh copy of the default JITConfig, for the caller to edit and pass to `set_jit_config`."""
    return _default_jit_config.copy()


def get_default_global_jit_config() -> GlobalJITConfig:
    """The live process-wide GlobalJITConfig: edits take effect for every later kernel lookup."""
    return _global_config
