"""JITConfig and ConfigSnapshot: the per-operator settings and the frozen form kernels and cache keys use.

`JITConfig` is mutable (the cuOP API assigns fields one by one) and validates every assignment;
`JITConfig.snapshot()` gives the frozen, hashable form that kernel specialisations and cache keys
are built from.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .values import allowed, check_bool, check_int, whole_number

KERNEL_TYPES = ("auto", "simple", "tiled", "warp_optimized", "tensor_core")
OPTIMIZATION_LEVELS = ("O0", "O1", "O2", "O3")
TILE_SIZES = (0, 8, 16, 32, 64, 128, 256)
PRECISIONS = ("tf32", "3xtf32")   # float32 tensor-core products: one TF32 product, or three (float32-grade)
BLOCK_SIZES = (0, 32, 64, 128, 256, 512, 1024)
LOG_LEVELS = ("debug", "info", "warning", "error")

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
        allowed(name, value, KERNEL_TYPES)
    elif name == "optimization_level":
        allowed(name, value, OPTIMIZATION_LEVELS)
    elif name == "precision":
        if value not in PRECISIONS:
            raise ValueError(f"precision={value!r} is not allowed: choose 'tf32' (one TF32 product: fastest, "
                             "relative error ~1e-3) or '3xtf32' (three TF32 products: float32-grade error)")
    elif name in ("tile_size", "block_size"):
        value = whole_number(name, value)
        allowed(name, value, TILE_SIZES if name == "tile_size" else BLOCK_SIZES)
    elif name == "max_registers":
        value = whole_number(name, value)
        if value != 0:
            check_int(name, value, 16, 255)
    else:
        check_bool(name, value)
    return value


_JIT_FIELDS = tuple(f.name for f in dataclasses.fields(JITConfig))
