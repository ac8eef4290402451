"""Flatten and View: CPU plans and builds under every config, shape checks, GPU results against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit import target
from cuopjit.ops import FAMILIES, shape as shape_ops
from cuopjit.ops.shape import flattened_shape, view_problem

from conftest import SEED, SEED_CONFIGS, build_once, check_guards, family_plans, guarded, make_config

DTYPES = [np.float32, np.float64]
OPS = ["flatten", "view"]
CONFIGS = [{}, {"block_size": 32}, {"block_size": 1024}, {"tile_size": 8}, {"tile_size": 128},
           {"enable_loop_unroll": False}, {"enable_memory_coalescing": False}, {"kernel_type": "simple"}]
SM80, SM90 = target.named("sm_80"), target.named("sm_90")
# sm_80 plans the kernels sm_90 plans (only View's grid follows the target): a few configs suffice there
TARGET_CONFIGS = [(SM90, f) for f in CONFIGS + SEED_CONFIGS] + [(SM80, f) for f in ({}, SEED)]


def _plans(op: str, fields: dict, t: target.Target) -> list:
    return family_plans(FAMILIES[op][0].family, fields, t)


# --- CPU: plans under every config, built with NVRTC ------------------------------------------
@pytest.mark.parametrize("t, fields", TARGET_CONFIGS, ids=lambda v: v.arch if isinstance(v, target.Target) else str(v))
@pytest.mark.parametrize("op", OPS)
def test_every_config_plans_and_compiles(op, t, fields):
    build_once(_plans(op, fields, t), t)


def test_problems_cover_every_dtype():
    for op in OPS:
        assert {p.dtype for p in FAMILIES[op][0].family.problems()} == {"float32", "float64", "float16", "bfloat16"}


@pytest.mark.parametrize("fields", [{"kernel_type": "tiled"}, {"kernel_type": "warp_optimized"},
                                    {"kernel_type": "tensor_core"}, {"enable_tensor_core": True},
                                    {"enable_tma": True}, {"enable_shared_memory_opt": False},
                                    {"tile_size": 64}, {"tile_size": 256}, {"enable_loop_unroll": False}], ids=str)
def test_view_ignores_fields_it_has_no_use_for(fields):
    """A view thread moves one access per grid-stride step: tile size, unrolling, shared memory, tensor
    cores and TMA change nothing."""
    assert _plans("view", fields, SM90) == _plans("view", {}, SM90)


def test_view_kernel_shapes():
    """16-byte accesses only where runs, strides and pointers line up, coalescing is on and the kind is not simple."""
    f32 = np.dtype(np.float32)
    p = view_problem(f32, (4, 6, 8, 8), (1, 2, 0, 0), (2, 3, 8, 8), True)
    assert (p.run, p.base, p.outer) == (192, 512, ((2, 384),))
    cfg = make_config().snapshot()
    assert shape_ops.view_choices(p, cfg, SM90)[0].vec == 4
    assert shape_ops.view_choices(p, make_config(kernel_type="simple").snapshot(), SM90)[0].vec == 1
    assert shape_ops.view_choices(p, make_config(enable_memory_coalescing=False).snapshot(), SM90)[0].vec == 1
    odd = view_problem(f32, (4, 6, 8, 8), (1, 2, 3, 1), (2, 3, 4, 7), True)
    assert shape_ops.view_choices(odd, cfg, SM90)[0].vec == 1
    plan = shape_ops.VIEW.default_plan(odd, cfg, SM80)
    assert plan.launches[0].grid[0] == min(-(-odd.total // 256), SM80.sm_count * 8)


def test_flattened_shape():
    assert flattened_shape((32, 64, 56, 56)) == (32, 64 * 56 * 56)
    assert flattened_shape((2, 3, 4), 0) == (24,)
    assert flattened_shape((2, 3, 4, 5), 1, 2) == (2, 12, 5)
    assert flattened_shape((2, 3, 4), -2, -1) == (2, 12)
    assert flattened_shape(()) == (1,)
    with pytest.raises(ValueError, match=r"start_dim=3, end_dim=-1 out of range for a 2-D input of shape \[2, 3\]"):
        flattened_shape((2, 3), 3)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, start, end", [((32, 64, 7, 7), 1, -1), ((1,), 0, -1), ((7, 33), 0, -1),
                                               ((2, 3, 1000, 4097), 2, 3), ((3, 5, 7), 0, 1)])
def test_flatten(rng, dtype, shape, start, end):
    a = rng.standard_normal(shape).astype(dtype)
    want = flattened_shape(shape, start, end)
    x, y = cuopjit.tensor(a), guarded(want, dtype)
    op = (cuopjit.FlattenFloat if dtype == np.float32 else cuopjit.FlattenDouble)()
    assert op.forward(x, y, start_dim=start, end_dim=end) is y
    check_guards(y)
    assert np.array_equal(y.to_numpy(), a.reshape(want))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xshape, offset, shape", [
    ((32, 64, 56, 56), (0, 0, 0, 0), (32, 64, 56, 56)),
    ((4, 6, 8, 8), (1, 2, 0, 0), (2, 3, 8, 8)),
    ((4, 6, 8, 8), (1, 2, 3, 1), (2, 3, 4, 7)),
    ((7, 33), (3, 5), (4, 28)),
    ((1000,), (7,), (33,)),
    ((4097,), (1,), (4096,)),
    ((2, 1, 33, 7, 5), (1, 0, 4, 2, 1), (1, 1, 20, 5, 4)),
    ((5, 1000), (2, 0), (3, 1000)),
    ((5, 12), (1, 4), (4, 8)),
])
def test_view(rng, dtype, xshape, offset, shape):
    a = rng.standard_normal(xshape).astype(dtype)
    ref = a[tuple(slice(o, o + s) for o, s in zip(offset, shape))]
    x, y = cuopjit.tensor(a), guarded(shape, dtype)
    op = (cuopjit.ViewFloat if dtype == np.float32 else cuopjit.ViewDouble)()
    assert op.forward(x, y, list(offset), list(shape)) is y
    check_guards(y)
    assert np.array_equal(y.to_numpy(), ref)
    op2 = (cuopjit.ViewFloat if dtype == np.float32 else cuopjit.ViewDouble)()
    op2.set_offset(list(offset))
    op2.set_shape(list(shape))
    y.fill(float("nan"))
    op2.forward(x, y)
    check_guards(y)
    assert np.array_equal(y.to_numpy(), ref)


@pytest.mark.gpu
def test_shape_errors():
    x = cuopjit.empty([4, 6])
    with pytest.raises(ValueError, match=r"FlattenFloat: y has shape \[4, 5\], expected \[24\] \(x of shape \[4, 6\]"):
        cuopjit.FlattenFloat().forward(x, cuopjit.empty([4, 5]), start_dim=0)
    with pytest.raises(ValueError, match=r"ViewFloat: the view at offset \[2, 0\] with shape \[3, 6\] leaves x of "
                                         r"shape \[4, 6\] along dim 0 \(2 \+ 3 > 4\)"):
        cuopjit.ViewFloat().forward(x, cuopjit.empty([3, 6]), [2, 0], [3, 6])
    with pytest.raises(ValueError, match=r"ViewFloat: y has shape \[3, 5\], expected the view's shape \[3, 6\]"):
        cuopjit.ViewFloat().forward(x, cuopjit.empty([3, 5]), [0, 0], [3, 6])
    with pytest.raises(ValueError, match=r"must each have 2 entries"):
        cuopjit.ViewFloat().forward(x, cuopjit.empty([3, 6]), [0], [3, 6])
    e = cuopjit.empty([0, 6])
    assert cuopjit.ViewFloat().forward(x, e, [0, 0], [0, 6]) is e


def _seed_cases(rng, op: str, dtype) -> list:
    """(x, y shape, keyword arguments, expected y): a partial and a whole-tensor case (16-byte path where allowed)."""
    a = rng.standard_normal((4, 6, 16, 16)).astype(dtype)
    if op == "flatten":
        return [(a, (4, 6 * 16 * 16), {}, a.reshape(4, -1)), (a, (a.size,), {"start_dim": 0}, a.ravel())]
    return [(a, (2, 3, 16, 7), {"offset": [1, 2, 0, 5], "shape": [2, 3, 16, 7]}, a[1:3, 2:5, :, 5:12]),
            (a, a.shape, {"offset": [0, 0, 0, 0], "shape": list(a.shape)}, a)]


@pytest.mark.gpu
@pytest.mark.parametrize("fields", SEED_CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_every_seed_configuration_runs(rng, op, dtype, fields):
    """The cuOP README's configurations (every kernel_type x tile_size, the full JIT example) run and are exact."""
    jit = cuopjit.JITWrapper(FAMILIES[op][0 if dtype == np.float32 else 1]())
    jit.set_jit_config(make_config(**fields))
    for a, yshape, kwargs, ref in _seed_cases(rng, op, dtype):
        y = cuopjit.empty(yshape, dtype).fill(float("nan"))
        assert jit.forward(cuopjit.tensor(a), y, **kwargs) is y
        assert np.array_equal(y.to_numpy(), ref)
    assert jit.get_performance_profile().kernel_name.startswith("copy_" if op == "flatten" else "view_")
