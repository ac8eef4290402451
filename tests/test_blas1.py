"""BLAS-1 (Scal, Axpy, Copy, Dot): CPU plans and builds under every config, GPU results against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit import target
from cuopjit.ops import FAMILIES, blas1
from cuopjit.ops.blas1 import DotProblem

from conftest import SEED, SEED_CONFIGS, build_once, check_guards, family_plans, guarded, make_config, rel_error

DTYPES = [np.float32, np.float64]
SIZES = [1, 7, 33, 1000, 4097, (1 << 20) + 3]
TOL = {np.float32: 1e-6, np.float64: 1e-14}
OPS = ["scal", "axpy", "copy", "dot"]
CONFIGS = [{}, {"block_size": 32}, {"block_size": 128}, {"block_size": 1024}, {"tile_size": 8}, {"tile_size": 128},
           {"enable_loop_unroll": False}, {"enable_memory_coalescing": False}, {"kernel_type": "simple"}]
SM80, SM90 = target.named("sm_80"), target.named("sm_90")


def _unaligned(n, dtype):
    """A Tensor of n elements whose pointer is one element past a 16-byte boundary (scalar path), in guards."""
    return guarded([n], dtype, pad=257)


def _plans(op: str, fields: dict, t: target.Target) -> list:
    return family_plans(FAMILIES[op][0].family, fields, t)


# --- CPU: plans under every config, built with NVRTC ------------------------------------------
# sm_80 plans the kernels sm_90 plans (only Dot's grid follows the target): a few configs suffice there
TARGET_CONFIGS = [(SM90, f) for f in CONFIGS + SEED_CONFIGS] + [(SM80, f) for f in ({}, SEED, {"tile_size": 128})]


@pytest.mark.parametrize("t, fields", TARGET_CONFIGS, ids=lambda v: v.arch if isinstance(v, target.Target) else str(v))
@pytest.mark.parametrize("op", OPS)
def test_every_config_plans_and_compiles(op, t, fields):
    build_once(_plans(op, fields, t), t)


def test_problems_cover_every_dtype():
    for op in OPS:
        assert {p.dtype for p in FAMILIES[op][0].family.problems()} == {"float32", "float64", "float16", "bfloat16"}


@pytest.mark.parametrize("fields", [{"kernel_type": "tiled"}, {"kernel_type": "warp_optimized"},
                                    {"kernel_type": "tensor_core"}, {"enable_tensor_core": True},
                                    {"enable_tma": True}, {"enable_shared_memory_opt": False}], ids=str)
def test_fields_without_a_kernel_are_ignored(fields):
    """Dot has one vectorised kernel and nothing for tensor cores, TMA or shared memory to change."""
    assert _plans("dot", fields, SM90) == _plans("dot", {}, SM90)


def test_dot_kernel_shapes():
    """tile_size = elements per thread per step; "simple" = scalar loads, one in flight."""
    p = DotProblem("float32", 1 << 20, True)
    default = blas1.dot_choices(p, make_config().snapshot(), SM90)[0]
    assert (default.vec, default.items, default.threads) == (4, 4, 256)
    assert blas1.dot_choices(p, make_config(tile_size=128).snapshot(), SM90)[0].items == 32
    simple = blas1.dot_choices(p, make_config(kernel_type="simple", tile_size=64).snapshot(), SM90)[0]
    assert (simple.vec, simple.items) == (1, 1)
    with pytest.raises(ValueError, match=r"tile_size=256 is not available for streaming kernels: choose one of "
                                         r"0, 8, 16, 32, 64, 128"):
        blas1.dot_choices(p, make_config(tile_size=256).snapshot(), SM90)


def test_dot_plan_follows_the_target():
    """The partial sums fill every SM of the target once; they live in the workspace, the result is an operand."""
    cfg = make_config().snapshot()
    for t in (SM80, SM90):
        plan = blas1.DOT.default_plan(DotProblem("float64", 1 << 28, True), cfg, t)
        partial, final = plan.launches
        assert plan.operands == ("x", "y", "result")
        assert partial.grid[0] == t.sm_count * (t.max_threads_per_sm // 256)
        assert plan.workspace == partial.grid[0] * 8
        assert final.args[0].value == 3 and final.args[1].value == 2 and final.args[2].value == partial.grid[0]
        assert partial.units == "FP64 cores"
    empty = blas1.DOT.default_plan(DotProblem("float32", 0, True), cfg, SM90)
    assert empty.launches[0].grid == (1, 1, 1)   # n = 0 still writes result = 0


# --- GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_scal(rng, dtype, n):
    a = rng.standard_normal(n).astype(dtype)
    x = guarded([n], dtype, fill=a)
    op = (cuopjit.ScalFloat if dtype == np.float32 else cuopjit.ScalDouble)(2.5)
    assert op.forward(x) is x
    check_guards(x)
    assert rel_error(x.to_numpy(), 2.5 * a.astype(np.float64)) <= TOL[dtype]
    op.set_alpha(-1.0)   # a new alpha: a new plan
    x.copy_from(a)
    op.forward(x)
    assert np.array_equal(x.to_numpy(), -a)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_axpy_copy(rng, dtype, n):
    a, b = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    axpy = (cuopjit.AxpyFloat if dtype == np.float32 else cuopjit.AxpyDouble)(-1.5)
    copy = (cuopjit.CopyFloat if dtype == np.float32 else cuopjit.CopyDouble)()
    x, y = cuopjit.tensor(a), guarded([n], dtype, fill=b)
    axpy.forward(x, y)
    check_guards(y)
    assert rel_error(y.to_numpy(), -1.5 * a.astype(np.float64) + b) <= 4 * TOL[dtype]
    z = guarded([n], dtype)
    copy.forward(x, z)
    check_guards(z)
    assert np.array_equal(z.to_numpy(), a)
    # the same operators again on unaligned views (scalar fallback, another launch key)
    xu, yu = _unaligned(n, dtype).copy_from(a), _unaligned(n, dtype).fill(float("nan"))
    copy.forward(xu, yu)
    check_guards(yu)
    assert np.array_equal(yu.to_numpy(), a)
    yu.copy_from(b)
    axpy.forward(xu, yu)
    check_guards(yu)
    assert rel_error(yu.to_numpy(), -1.5 * a.astype(np.float64) + b) <= 4 * TOL[dtype]


@pytest.mark.gpu
def test_copy_any_shapes_same_size(rng):
    a = rng.standard_normal((33, 7)).astype(np.float32)
    y = cuopjit.empty([231], np.float32).fill(float("nan"))
    cuopjit.CopyFloat().forward(cuopjit.tensor(a), y)
    assert np.array_equal(y.to_numpy(), a.ravel())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES + [(1 << 24) + 5])
def test_dot(rng, dtype, n):
    a, b = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    dot = (cuopjit.DotFloat if dtype == np.float32 else cuopjit.DotDouble)()
    x, y = cuopjit.tensor(a), cuopjit.tensor(b)
    got = dot.forward(x, y)
    assert isinstance(got, float)
    ref = float(np.dot(a.astype(np.float64), b.astype(np.float64)))
    scale = float(np.abs(a.astype(np.float64) * b).sum())
    assert abs(got - ref) <= (1e-5 if dtype == np.float32 else 1e-13) * scale
    # bit-for-bit repeatable, also through a fresh operator
    again = [dot.forward(x, y) for _ in range(3)] + [type(dot)().forward(x, y)]
    assert all(np.array(v, dtype=dtype).tobytes() == np.array(got, dtype=dtype).tobytes() for v in again)
    # device-result mode
    r = guarded([1], dtype)
    assert dot.forward(x, y, result=r) is r
    check_guards(r)
    assert r.to_numpy()[0] == np.array(got, dtype=dtype)
    # unaligned inputs
    xu, yu = _unaligned(n, dtype).copy_from(a), _unaligned(n, dtype).copy_from(b)
    assert abs(dot.forward(xu, yu) - ref) <= (1e-5 if dtype == np.float32 else 1e-13) * scale


@pytest.mark.gpu
def test_dot_on_a_stream(rng):
    """The float result waits for the stream the dot ran on (a non-blocking one here)."""
    a = rng.standard_normal(1 << 22).astype(np.float64)
    x = cuopjit.tensor(a)
    s = cuopjit.Stream()
    dot = cuopjit.DotDouble()
    for _ in range(3):
        assert abs(dot.forward(x, x, stream=s) - float(a @ a)) <= 1e-13 * float(a @ a)


@pytest.mark.gpu
def test_zero_size():
    x, y = cuopjit.empty([0]), cuopjit.empty([0])
    assert cuopjit.DotFloat().forward(x, y) == 0.0
    r = cuopjit.empty([1]).fill(float("nan"))
    assert cuopjit.DotFloat().forward(x, y, result=r) is r
    assert r.to_numpy()[0] == 0.0
    assert cuopjit.AxpyFloat(2.0).forward(x, y) is y
    assert cuopjit.ScalFloat(2.0).forward(x) is x
    assert cuopjit.CopyFloat().forward(x, y) is y


@pytest.mark.gpu
def test_errors():
    x, y = cuopjit.empty([10]), cuopjit.empty([11])
    with pytest.raises(ValueError, match=r"AxpyFloat: x has shape \[10\] \(10 elements\) and y has shape \[11\] "
                                         r"\(11 elements\)"):
        cuopjit.AxpyFloat(1.0).forward(x, y)
    with pytest.raises(ValueError, match=r"DotFloat: x has shape \[10\] .* y has shape \[11\]"):
        cuopjit.DotFloat().forward(x, y)
    with pytest.raises(TypeError, match="CopyFloat: y is float64, CopyFloat works on float32"):
        cuopjit.CopyFloat().forward(x, cuopjit.empty([10], "float64"))
    with pytest.raises(TypeError, match="ScalDouble: x must be a cuopjit Tensor, got ndarray"):
        cuopjit.ScalDouble(1.0).forward(np.zeros(3))
    dot = cuopjit.DotFloat()
    dot.forward(x, x, result=cuopjit.empty([1]))
    with pytest.raises(ValueError, match=r"DotFloat: result has shape \[2\], expected one element"):
        dot.forward(x, x, result=cuopjit.empty([2]))   # checked also after a warm call
    with pytest.raises(TypeError, match=r"DotFloat: pass result="):
        cuopjit.JITWrapper(dot).forward(x, x)


def _seed_run(jit, op: str, dtype, n: int, rng) -> None:
    """One forward of `op` through `jit` on n elements (NaN-poisoned outputs), checked against float64."""
    eps = float(np.finfo(dtype).eps)
    a = rng.standard_normal(n).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    x = cuopjit.tensor(a)
    if op == "scal":
        jit.forward(x)
        assert np.all(np.abs(x.to_numpy() - 0.75 * a64) <= eps / 2 * np.abs(0.75 * a64))   # one rounding
    elif op == "copy":
        y = cuopjit.empty([n], dtype).fill(float("nan"))
        jit.forward(x, y)
        assert np.array_equal(y.to_numpy(), a)
    elif op == "axpy":
        y = cuopjit.tensor(b)
        jit.forward(x, y)
        assert np.all(np.abs(y.to_numpy() - (-1.5 * a64 + b64)) <= eps * (np.abs(1.5 * a64) + np.abs(b64)))
    else:
        r = cuopjit.empty([1], dtype).fill(float("nan"))
        assert jit.forward(x, cuopjit.tensor(b), result=r) is r
        # each thread adds at most n / threads products in series, then a tree of depth < 40
        bound = (n / 32 + 40) * eps * float(np.abs(a64 * b64).sum())
        assert abs(float(r.to_numpy()[0]) - float(a64 @ b64)) <= bound


@pytest.mark.gpu
@pytest.mark.parametrize("fields", SEED_CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_every_seed_configuration_runs(rng, op, dtype, fields):
    """The cuOP README's configurations (every kernel_type x tile_size, the full JIT example) run and are right."""
    cls = FAMILIES[op][0 if dtype == np.float32 else 1]
    jit = cuopjit.JITWrapper(cls(0.75) if op == "scal" else cls(-1.5) if op == "axpy" else cls())
    jit.set_jit_config(make_config(**fields))
    for n in (1, 4097, (1 << 20) + 3):
        _seed_run(jit, op, dtype, n, rng)
    assert jit.get_performance_profile().kernel_name.startswith(op + "_")
