"""What a JIT wrapper runs under, without a GPU: its own interned settings, never the operator's."""
from __future__ import annotations

import cuopjit
from cuopjit.config import DEFAULT, RunSettings

from conftest import make_config


def test_settings_are_interned():
    cfg = make_config(tile_size=64).snapshot()
    assert RunSettings.of(cfg) is RunSettings.of(make_config(tile_size=64).snapshot())
    assert RunSettings.of(cfg) is not RunSettings.of(cfg, persistent=False)
    assert RunSettings.of(cuopjit.JITConfig().snapshot()) is DEFAULT


def test_a_directory_named_memory_is_a_directory():
    jit = cuopjit.JITGemmFloat(cuopjit.GemmFloat())
    jit.set_persistent_cache_directory("memory")
    s = jit._current_settings()
    assert s.cache_dir == "memory" and s.persistent
    jit.enable_persistent_cache(False)
    assert not jit._current_settings().persistent


def test_global_switches_reach_the_wrapper_settings():
    glob = cuopjit.get_default_global_jit_config()
    jit = cuopjit.JITGemmFloat(cuopjit.GemmFloat())
    jit.set_jit_config(make_config(tile_size=64))
    assert jit._current_settings().config.tile_size == 64
    glob.enable_caching, glob.enable_jit = False, False
    try:
        s = jit._current_settings()
        assert not s.persistent and s.config is DEFAULT.config
    finally:
        glob.enable_caching, glob.enable_jit = True, True
    assert jit._current_settings().config.tile_size == 64


def test_wrappers_copy_their_config_and_leave_the_operator_alone():
    gemm = cuopjit.GemmFloat()
    first, second = cuopjit.JITGemmFloat(gemm), cuopjit.JITGemmFloat(gemm)
    cfg = make_config(tile_size=64)
    first.set_jit_config(cfg)
    cfg.tile_size = 128                       # a later edit of the user's object does not leak in
    second.set_jit_config(cfg)
    assert first._current_settings().config.tile_size == 64
    assert second._current_settings().config.tile_size == 128
    assert not hasattr(gemm, "_config") and gemm._plans == {DEFAULT: {}}
