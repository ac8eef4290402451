"""Configuration: what kernels are specialised on and what a process runs under.

- `jit`: JITConfig (per operator, validated on assignment) and its frozen ConfigSnapshot;
- `global_config`: GlobalJITConfig (cache, auto-tuning, compile threads, debug);
- `run`: RunSettings, what one forward runs under (interned);
- `environment`: the CUOPJIT_* variables, the only reader of os.environ;
- `values`: parsing and checking of the values users write (sizes, lists, whole numbers).
"""
from __future__ import annotations

from .environment import Environment, environment, scoped_env
from .global_config import (GlobalJITConfig, get_default_global_jit_config, get_default_jit_config,
                            global_generation)
from .jit import (BLOCK_SIZES, KERNEL_TYPES, LOG_LEVELS, OPTIMIZATION_LEVELS, PRECISIONS, TILE_SIZES, ConfigSnapshot,
                  JITConfig)
from .run import DEFAULT, RunSettings
from .values import parse_size, split_list, whole_number

__all__ = ["BLOCK_SIZES", "DEFAULT", "KERNEL_TYPES", "LOG_LEVELS", "OPTIMIZATION_LEVELS", "PRECISIONS", "TILE_SIZES",
           "ConfigSnapshot", "Environment", "GlobalJITConfig", "JITConfig", "RunSettings", "environment",
           "get_default_global_jit_config", "get_default_jit_config", "global_generation", "parse_size",
           "scoped_env", "split_list", "whole_number"]
