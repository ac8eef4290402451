"""Attention without a GPU: the problem's checks (one-line errors naming what does not fit), which kernel each
config names, shared memory within every target, and representative kernels compiling for sm_80 and sm_90a
without spills (a few variants, built in a thread pool)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cuopjit
from cuopjit.ops import CLASSES, FAMILIES, HALF_CLASSES
from cuopjit.ops.attention import plans
from cuopjit.ops.attention.operator import problem_of
from cuopjit.target import NAMED, named

from conftest import compiles_without_spills, make_config

F32 = np.dtype(np.float32)
CONTIG = ((64 * 8, 0, 8),) * 4


def _problem(shapes=((2, 1, 64, 8),) * 4, strides=CONTIG, pointers=(0, 0, 0, 0), scale=None, causal=False):
    return problem_of(F32, shapes, strides, pointers, scale, causal, "AttentionFloat")


def test_registered_as_a_family_with_jit_wrappers():
    assert FAMILIES["attention"] == (cuopjit.AttentionFloat, cuopjit.AttentionDouble)
    assert set(CLASSES["attention"]) == {"float32", "float64", "float16", "bfloat16"}
    assert HALF_CLASSES["attention"] == (cuopjit.AttentionHalf, cuopjit.AttentionBFloat16)
    assert cuopjit.JITAttentionFloat(cuopjit.AttentionFloat()) is not None


def test_problem_defaults_and_alignment():
    p = _problem()
    assert p.scale == 1 / math.sqrt(8) and p.aligned and (p.batch, p.heads, p.lq, p.lk, p.d) == (2, 1, 64, 64, 8)
    assert not _problem(pointers=(0, 4, 0, 0)).aligned                 # a pointer off 16 bytes
    assert not _problem(strides=((64 * 8, 0, 6),) + CONTIG[1:]).aligned  # a row stride off the vector
    assert _problem(shapes=((0, 1, 64, 8),) * 4) is None               # nothing to compute
    assert _problem(scale=-0.5, causal=True).scale == -0.5


@pytest.mark.parametrize("kwargs, message", [
    (dict(shapes=((2, 1, 64, 8), (2, 1, 64, 9), (2, 1, 64, 8), (2, 1, 64, 8))), "do not fit: k and v need q's"),
    (dict(shapes=((2, 1, 64, 8), (2, 1, 64, 8), (2, 1, 63, 8), (2, 1, 64, 8))), "do not fit"),
    (dict(shapes=((2, 1, 64, 8),) * 3 + ((2, 1, 64, 7),)), r"out has shape \[2, 1, 64, 7\], expected q's shape"),
    (dict(shapes=((2, 1, 64, 129),) * 4), "head dim 129 is over 128"),
    (dict(shapes=((2, 1, 5, 8), (2, 1, 0, 8), (2, 1, 0, 8), (2, 1, 5, 8))), "no rows: a softmax over zero keys"),
    (dict(scale=float("nan")), r"scale=nan must be a finite number"),
])
def test_bad_problems_raise_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _problem(**kwargs)


def test_causal_must_be_a_bool():
    with pytest.raises(TypeError, match=r"causal=1 must be True or False"):
        _problem(causal=1)


@pytest.mark.parametrize("fields, dtype, kind", [
    ({}, "float32", "simt"), ({"enable_tensor_core": True}, "float32", "mma"), ({"kernel_type": "tensor_core"},
                                                                                "float32", "mma"),
    ({"enable_tensor_core": True, "precision": "3xtf32"}, "float32", "simt"), ({"kernel_type": "simple"}, "float32",
                                                                               "simt"),
    ({"enable_tensor_core": True}, "float64", "simt"), ({}, "float64", "simt"), ({}, "float16", "mma16"),
    ({"kernel_type": "simple"}, "bfloat16", "mma16"),
])
def test_config_names_the_kernel(fields, dtype, kind):
    p = plans.contiguous(dtype, 8, 512, 512, 64)
    (choice,) = plans.choices(p, make_config(**fields).snapshot(), named("sm_90"))
    assert choice.kind == kind and choice.vec == 16 // np.dtype(dtype).itemsize
    scalar = plans.choices(p, make_config(enable_memory_coalescing=False, **fields).snapshot(), named("sm_90"))
    assert scalar[0].vec == 1


def test_float64_refuses_3xtf32():
    p = plans.contiguous("float64", 1, 8, 8, 8)
    with pytest.raises(ValueError, match="float64 has one kernel: leave precision='tf32'"):
        plans.choices(p, make_config(precision="3xtf32").snapshot(), named("sm_90"))


@pytest.mark.parametrize("arch", sorted(NAMED))
def test_every_plan_fits_every_target(arch):
    t = named(arch)
    for fields in ({}, {"enable_tensor_core": True}):
        for p in plans.problems():
            plan = plans.FAMILY.default_plan(p, make_config(**fields).snapshot(), t)
            plan.check_target(t)
            (launch,) = plan.launches
            choice = plans.FAMILY.choices(p, make_config(**fields).snapshot(), t)[0]
            assert launch.grid[0] == math.ceil(p.lq / choice.bm) * p.batch * p.heads


# float32 SIMT (8 x 4 scores: the most registers) and TF32 at D 64 (BERT), TF32 at 128, float64 at 128, an
# unaligned causal odd D, float16 causal, bfloat16 at 64 and 128, float16 unaligned at D = 7
_COMPILED = [("float32", 64, False, True, {}), ("float32", 64, True, True, {"enable_tensor_core": True}),
             ("float32", 128, False, True, {"enable_tensor_core": True}), ("float64", 128, False, True, {}),
             ("float32", 7, True, False, {"enable_tensor_core": True}), ("float16", 64, True, True, {}),
             ("bfloat16", 64, False, True, {}), ("bfloat16", 128, False, True, {}), ("float16", 7, True, False, {})]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_representative_kernels_compile_without_spills(arch):
    t = named(arch)
    specs = []
    for dtype, d, causal, aligned, fields in _COMPILED:
        p = plans.contiguous(dtype, 4, 100, 100, d, causal, None, aligned)
        specs += plans.FAMILY.default_plan(p, make_config(**fields).snapshot(), t).specs
    compiles_without_spills(specs, arch, workers=4)
