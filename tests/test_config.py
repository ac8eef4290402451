"""JITConfig / GlobalJITConfig validation, snapshots, environment variables, and no dead options."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import cuopjit
from cuopjit.config import JITConfig, environment, parse_size, scoped_env
from cuopjit.ops import FAMILIES


def test_defaults_follow_the_cuop_fields():
    cfg = cuopjit.JITConfig()
    fields = {f.name for f in dataclasses.fields(cfg)}
    assert fields == {"enable_jit", "kernel_type", "tile_size", "block_size", "optimization_level",
                      "enable_tensor_core", "enable_tma", "max_registers", "enable_shared_memory_opt",
                      "enable_loop_unroll", "enable_memory_coalescing", "precision"}
    g = cuopjit.GlobalJITConfig()
    assert {f.name for f in dataclasses.fields(g)} == {
        "enable_jit", "enable_auto_tuning", "enable_caching", "cache_dir", "max_cache_size",
        "compilation_timeout", "max_compilation_threads", "enable_debug"}


@pytest.mark.parametrize("field, value, message", [
    ("tile_size", 3, r"tile_size=3 is not allowed: choose one of 0, 8, 16, 32, 64, 128, 256"),
    ("block_size", 100, r"block_size=100 is not allowed: choose one of 0, 32, 64"),
    ("kernel_type", "fancy", r"kernel_type='fancy' is not allowed: choose one of 'auto', 'simple'"),
    ("optimization_level", "O4", r"optimization_level='O4' is not allowed: choose one of 'O0'"),
    ("max_registers", 8, r"max_registers=8 is not allowed: it must be an integer from 16 to 255"),
    ("enable_tensor_core", 1, r"enable_tensor_core=1 is not allowed: it must be True or False"),
])
def test_bad_jit_values_name_field_value_and_choices(field, value, message):
    cfg = cuopjit.JITConfig()
    with pytest.raises(ValueError, match=message):
        setattr(cfg, field, value)


@pytest.mark.parametrize("field, value, stored", [("block_size", 256.0, 256), ("tile_size", 64.0, 64),
                                                  ("tile_size", np.int64(32), 32), ("max_registers", 64.0, 64)])
def test_integral_floats_become_ints(field, value, stored):
    cfg = cuopjit.JITConfig()
    setattr(cfg, field, value)
    assert getattr(cfg, field) == stored and type(getattr(cfg, field)) is int
    assert f"{field}={stored}" in str(cfg.snapshot())


@pytest.mark.parametrize("field, value", [("tile_size", 64.5), ("block_size", 256.25), ("block_size", "256"),
                                          ("tile_size", float("inf")), ("max_registers", 64.5),
                                          ("tile_size", True)])
def test_non_integral_sizes_are_rejected(field, value):
    with pytest.raises(ValueError, match=rf"{field}={re.escape(repr(value))} is not allowed: it must be a whole "
                                         "number"):
        setattr(cuopjit.JITConfig(), field, value)


def test_unknown_field_is_rejected():
    with pytest.raises(AttributeError, match="JITConfig has no field 'tile'"):
        cuopjit.JITConfig().tile = 64


@pytest.mark.parametrize("field, value, message", [
    ("compilation_timeout", -1, r"compilation_timeout=-1 is not allowed: it must be a finite number of seconds > 0"),
    ("compilation_timeout", float("nan"), r"compilation_timeout=nan is not allowed: it must be a finite number of "),
    ("compilation_timeout", float("inf"), r"compilation_timeout=inf is not allowed: it must be a finite number of "),
    ("max_compilation_threads", 0, r"max_compilation_threads=0 is not allowed: it must be an integer from 1"),
    ("max_cache_size", "lots", r"size 'lots' is not understood"),
    ("enable_caching", "yes", r"enable_caching='yes' is not allowed: it must be True or False"),
])
def test_bad_global_values(field, value, message):
    with pytest.raises(ValueError, match=message):
        setattr(cuopjit.GlobalJITConfig(), field, value)


def test_global_sizes_and_cache_dir(tmp_path):
    g = cuopjit.GlobalJITConfig()
    g.max_cache_size = "2GiB"
    assert g.max_cache_size == 2 << 30
    g.cache_dir = tmp_path
    assert g.resolved_cache_dir() == tmp_path
    assert parse_size("500M") == 500 << 20 and parse_size("1.5KiB") == 1536 and parse_size(7) == 7


def test_cache_dir_comes_from_env_then_platformdirs(tmp_path):
    g = cuopjit.GlobalJITConfig()
    with scoped_env(cache_dir=str(tmp_path / "x")):
        assert g.resolved_cache_dir() == tmp_path / "x"
    with scoped_env(cache_dir=None):
        assert "cuopjit" in str(g.resolved_cache_dir())


def test_env_values_are_validated_where_they_are_used():
    with scoped_env(log="loud"):
        env = environment()
        assert env.log == "warning" and ("CUOPJIT_LOG", "loud") in env.variables
        assert env.problem("CUOPJIT_LOG") == "CUOPJIT_LOG='loud' is not understood: use one of debug, info, " \
                                             "warning, error"
        env.require("CUOPJIT_DEBUG")
        with pytest.raises(ValueError, match="CUOPJIT_LOG='loud' is not understood"):
            env.require("CUOPJIT_LOG")
    with scoped_env(max_cache_size="3G"):
        assert environment().max_cache_size == 3 << 30
    with scoped_env(max_cache_size="lots"), pytest.raises(ValueError, match="CUOPJIT_MAX_CACHE_SIZE: size 'lots'"):
        cuopjit.GlobalJITConfig().resolved_max_cache_size()
    with scoped_env(debug="maybe"), pytest.raises(ValueError, match="CUOPJIT_DEBUG='maybe' is not understood"):
        cuopjit.GlobalJITConfig().debug()


@pytest.mark.parametrize("value, archs", [("sm_80", ("sm_80",)), ("sm_80,sm_90", ("sm_80", "sm_90")),
                                          (" sm_90a , sm_80,sm_90a", ("sm_90a", "sm_80"))])
def test_arch_env_holds_a_comma_list(value, archs):
    with scoped_env(arch=value):
        assert environment().arch == archs and environment().problem("CUOPJIT_ARCH") is None


def test_bad_arch_env_is_a_problem_not_an_exception():
    with scoped_env(arch="ampere"):
        env = environment()
    assert env.arch == () and env.problem("CUOPJIT_ARCH") == (
        "CUOPJIT_ARCH='ampere' is not understood: write one architecture or a comma list, e.g. sm_80 or sm_80,sm_90")


def test_snapshot_is_frozen_and_hashable():
    cfg = cuopjit.JITConfig()
    cfg.tile_size = 64
    snap = cfg.snapshot()
    assert snap.tile_size == 64 and hash(snap) == hash(cfg.snapshot())
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.tile_size = 32
    cfg.tile_size = 128
    assert snap.tile_size == 64


def test_default_jit_config_is_a_fresh_copy():
    a = cuopjit.get_default_jit_config()
    a.tile_size = 64
    assert cuopjit.get_default_jit_config().tile_size == 0
    assert cuopjit.get_default_global_jit_config() is cuopjit.get_default_global_jit_config()


ALTERNATIVES = {"kernel_type": ["simple", "tiled", "warp_optimized", "tensor_core"],
                "tile_size": [8, 16, 32, 64, 128, 256], "block_size": [32, 64, 128, 256, 512, 1024],
                "optimization_level": ["O0", "O2"], "enable_tensor_core": [True], "enable_tma": [True],
                "max_registers": [64], "enable_shared_memory_opt": [False], "enable_loop_unroll": [False],
                "enable_memory_coalescing": [False], "precision": ["3xtf32"]}


def _generated(family: str, cfg: JITConfig) -> list:
    """What a config decides for a family's representative float32 problems: sources and NVRTC options."""
    from cuopjit.build import pipeline
    from cuopjit.prewarm import representative_plans
    planned = representative_plans([family], ["float32"], ["sm_90"], cfg.snapshot())
    return [(pipeline.source(s), pipeline._options(s, "sm_90").flags()) for p in planned for s in p.plan.specs]


@pytest.mark.parametrize("field", sorted(ALTERNATIVES))
def test_every_field_changes_the_code_where_a_kernel_uses_it(field):
    """No dead options: each field changes some family's kernels (enable_tma: the GEMM's TMA kernel);
    a value no kernel can honour raises a ValueError naming the field."""
    changed = set()
    for family in FAMILIES:
        base = _generated(family, JITConfig())
        for value in ALTERNATIVES[field]:
            cfg = JITConfig()
            setattr(cfg, field, value)
            try:
                generated = _generated(family, cfg)
            except ValueError as exc:
                assert field in str(exc), f"{family}: the error for {field}={value!r} must name it: {exc}"
                continue
            if generated != base:
                changed.add(family)
    assert changed, f"no value of {field} changes any family's kernels"
    if field == "enable_tma":
        assert "gemm" in changed, "enable_tma: the float32 GEMM's TMA kernel (sm_90 wgmma) and the families on it"


@pytest.mark.parametrize("owner, field, ok, refused, span", [
    ("jit", "max_registers", (16, 255), (15, 256), "an integer from 16 to 255"),
    ("global", "max_compilation_threads", (1, 256), (0, 257, True), "an integer from 1 to 256"),
    ("global", "max_cache_size", (1 << 20, 1 << 40), ((1 << 20) - 1,), "an integer >= 1048576"),
])
def test_integer_fields_accept_their_bounds_and_nothing_past_them(owner, field, ok, refused, span):
    cfg = cuopjit.JITConfig() if owner == "jit" else cuopjit.GlobalJITConfig()
    for value in ok:
        setattr(cfg, field, value)
        assert getattr(cfg, field) == value
    for value in refused:
        with pytest.raises(ValueError, match=rf"{field}={value!r} is not allowed: it must be {span}$"):
            setattr(cfg, field, value)
