"""The float16 / bfloat16 kernels of the memory-bound families (elementwise maps and programs, BLAS-1, pools, batch
norm, Flatten, View, layout copies), no GPU: every one compiles for sm_80 and sm_90a without spills, `prewarm
--dtype float16,bfloat16` builds exactly what their plans need, and their float32 / float64 kernels keep the code
they had (the 16-bit names reach the source only through common/stored.jinja's `io.half`)."""
from __future__ import annotations

import pytest

from cuopjit.build import pipeline
from cuopjit.cli.main import main
from cuopjit.ops import FAMILIES, HALF_CLASSES, layouts
from cuopjit.prewarm import kernels_to_build, representative_plans
from cuopjit.target import named

from conftest import compiles_without_spills, make_config
from half_maps import HALF

MINE = ("scal", "axpy", "copy", "dot", "relu", "maxpool2d", "avgpool2d", "globalmaxpool2d", "globalavgpool2d",
        "flatten", "view", "batchnorm", "elementwise")
# the configs whose 16-bit kernels must not spill (those of test_rows_half). Explicit block and tile sizes are a
# register budget the config asks for: at 1024 threads float32 kernels spill too (view, batchnorm NHWC apply); the
# 16-bit scalar (unaligned) forms spill 8-64 B where ptxas keeps 32-40 registers (tile_size 32 at 128 threads, the
# NHWC batchnorm apply at 512). test_pool_bn_half runs 1024-thread blocks on the GPU.
CONFIGS = [{}, {"kernel_type": "warp_optimized"}, {"kernel_type": "simple"},
           {"enable_loop_unroll": False, "enable_memory_coalescing": False, "enable_shared_memory_opt": False}]


def _specs(arch: str, dtypes=HALF) -> dict:
    t = named(arch)
    specs = {}
    for fields in CONFIGS:
        cfg = make_config(**fields).snapshot()
        for family in [FAMILIES[op][0].family for op in MINE] + [layouts.FAMILY]:
            for problem in family.problems():
                if problem.dtype in dtypes:
                    specs.update(dict.fromkeys(family.default_plan(problem, cfg, t).specs))
    return specs


def test_every_memory_bound_family_has_16_bit_classes():
    assert set(MINE) <= set(HALF_CLASSES)
    for op in MINE:
        half, bf16 = HALF_CLASSES[op]
        assert (half.dtype.name, bf16.dtype.name) == HALF and half.__name__.endswith("Half")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_half_kernel_compiles_without_spills(arch):
    specs = _specs(arch)
    assert any("_f16_" in s.name for s in specs) and any("_bf16_" in s.name for s in specs)
    compiles_without_spills(sorted(specs, key=lambda s: s.name), arch)


def test_float_kernels_never_see_the_16_bit_helpers():
    for spec in _specs("sm_90", ("float32", "float64")):
        code = pipeline.source(spec)
        assert "elem_t" not in code and "half_t" not in code and "raw_t" not in code, spec.name


def test_prewarm_builds_what_the_half_plans_need(cache_dir, capsys):
    ops = ",".join(MINE)
    assert main(["prewarm", "--arch", "sm_90", "--op", ops, "--dtype", "float16,bfloat16", "--quiet"]) == 0
    planned = representative_plans(list(MINE), list(HALF), ["sm_90"])
    assert {p.op for p in planned} == set(MINE) and {p.problem.dtype for p in planned} == set(HALF)
    want = kernels_to_build(planned)
    assert f"prewarmed {len(want)} kernels for sm_90" in capsys.readouterr().out
    assert [(s.name, a) for s, a in want if not pipeline.is_cached(s, a)] == []
