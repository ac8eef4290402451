"""Softmax and the row geometry it shares with LayerNorm: CPU plans and builds under every config, GPU results."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit import target
from cuopjit.ops.rows import common as rows, softmax
from cuopjit.ops.rows.softmax import SoftmaxProblem

from conftest import SEED, SEED_CONFIGS, build_once, check_guards, guarded, make_config, rel_error

DTYPES = [np.float32, np.float64]
TOL = {np.float32: 2e-6, np.float64: 1e-13}
SHAPES = [(1,), (7,), (33,), (1000, 33), (33, 1000), (4097, 7), (7, 4097), (3, 33, 7), (2, 1000, 5), (5, 1, 7),
          (1, 4097), (2, 7, 33, 5)]
LONG = [(3, 8192), (3, 20000), (2, 32768), (2, 65537), (2, 70000), (1, 300000)]
CONFIGS = [{}, {"block_size": 32}, {"block_size": 128}, {"block_size": 1024}, {"tile_size": 8}, {"tile_size": 64},
           {"tile_size": 128}, {"enable_loop_unroll": False}, {"enable_memory_coalescing": False},
           {"enable_shared_memory_opt": False}, {"kernel_type": "simple"}, {"kernel_type": "tiled"},
           {"kernel_type": "warp_optimized"}]
SM80, SM90 = target.named("sm_80"), target.named("sm_90")


def _op(dtype):
    return (cuopjit.SoftmaxFloat if dtype == np.float32 else cuopjit.SoftmaxDouble)()


def _ref(a: np.ndarray, axis: int) -> np.ndarray:
    a = a.astype(np.float64)
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _plans(fields: dict, t: target.Target) -> list:
    """The float32 and float64 plans (the 16-bit types' configs and builds: tests/test_rows_half.py)."""
    cfg = make_config(**fields).snapshot()
    return [softmax.FAMILY.default_plan(p, cfg, t) for p in softmax.problems() if p.dtype in ("float32", "float64")]


# --- CPU: plans under every config, built with NVRTC ------------------------------------------
# sm_80 plans differ from sm_90's only where clusters and stream kernels would be chosen
BUILD_CASES = ([(SM90, f) for f in CONFIGS + SEED_CONFIGS]
               + [(SM80, f) for f in ({}, SEED, {"block_size": 32}, {"tile_size": 128})])


@pytest.mark.parametrize("t, fields", BUILD_CASES, ids=lambda v: v.arch if isinstance(v, target.Target) else str(v))
def test_every_config_plans_and_compiles(t, fields):
    build_once(_plans(fields, t), t)


def test_problems_cover_every_dtype_and_every_kernel_kind():
    assert {p.dtype for p in softmax.problems()} == {"float32", "float64", "float16", "bfloat16"}
    kinds = {kl.spec.kernel for plan in _plans({}, SM90) for kl in plan.launches}
    assert kinds == {"softmax_rows", "softmax_stream", "softmax_partials", "softmax_apply", "softmax_strided"}


def test_config_changes_code():
    """Every config field changes the code, except kernel_type "simple", documented as shared-memory opt off."""
    sources = {}
    for fields in CONFIGS:
        sources[str(fields)] = tuple(pipeline.source(s) for plan in _plans(fields, SM90) for s in plan.specs)
    assert sources.pop(str({"kernel_type": "simple"})) == sources[str({"enable_shared_memory_opt": False})]
    assert len(set(sources.values())) == len(sources)


@pytest.mark.parametrize("fields", [{"kernel_type": "tensor_core"}, {"enable_tensor_core": True},
                                    {"enable_tma": True}], ids=str)
def test_fields_without_a_kernel_are_ignored(fields):
    """No row kernel uses tensor cores or TMA: these fields plan exactly what the default plans."""
    assert _plans(fields, SM90) == _plans({}, SM90)


@pytest.mark.parametrize("problem", [SoftmaxProblem("float32", 4, 1024, 1, True),
                                     SoftmaxProblem("float64", 4, 64, 33, False)], ids=["rows", "strided"])
def test_a_tile_size_no_kernel_takes_is_refused(problem):
    with pytest.raises(ValueError, match=r"tile_size=256 is not available for row kernels: choose one of "
                                         r"0, 8, 16, 32, 64, 128 \(0 = automatic\)"):
        softmax.choices(problem, make_config(tile_size=256).snapshot(), SM90)


def test_kernel_types_name_layouts():
    """simple: never a cluster or stream kernel; warp_optimized: a row per warp where it fits; tiled: the
    explicit layout even with tile_size and block_size 0."""
    f32 = np.dtype(np.float32)
    simple = make_config(kernel_type="simple").snapshot()
    for n in (8, 4096):
        p = rows.plan_rows(f32, simple, SM90, n, 32768, 4, softmax.long_rows(f32))
        assert p.cl == 1 and p.kind != "stream"
    warp = rows.plan_rows(f32, make_config(kernel_type="warp_optimized").snapshot(), SM90, 64, 1024, 4)
    assert warp.kind == "rows" and warp.tpr == 32 and warp.rpb == 8
    assert rows.plan_rows(f32, make_config().snapshot(), SM90, 64, 1024, 4).tpr == 128
    tiled = rows.plan_rows(f32, make_config(kernel_type="tiled").snapshot(), SM90, 64, 128, 4)
    auto = rows.plan_rows(f32, make_config().snapshot(), SM90, 64, 128, 4)
    assert (tiled.nv, tiled.tpr) == (8, 4) and (auto.nv, auto.tpr) == (2, 16)


def test_tile_128_holds_128_floats_and_64_doubles():
    cfg = make_config(tile_size=128).snapshot()
    p32 = rows.plan_rows(np.dtype(np.float32), cfg, SM90, 64, 1024, 4)
    assert p32.nv * p32.vec == 128 and p32.occ == 256   # 255 registers per thread
    p64 = rows.plan_rows(np.dtype(np.float64), cfg, SM90, 64, 1024, 2)
    assert p64 == rows.plan_rows(np.dtype(np.float64), make_config(tile_size=64).snapshot(), SM90, 64, 1024, 2)


def test_row_plans_cover_lengths():
    """Every length gets a plan whose threads * vectors cover the row exactly once."""
    for fields in ({}, {"tile_size": 128}, {"block_size": 32}, {"kernel_type": "warp_optimized"}):
        cfg = make_config(**fields).snapshot()
        for dtype in DTYPES:
            for length in (1, 7, 128, 1000, 1024, 4097, 8192, 32768, 65536, 10 ** 6):
                for vec in (1, 16 // np.dtype(dtype).itemsize):
                    for t in (SM80, SM90):
                        p = rows.plan_rows(np.dtype(dtype), cfg, t, 1, length, vec)
                        lv = -(-length // vec)
                        cover = p.tpr * p.nv * (p.cl if p.kind == "rows" else p.chunks)
                        assert cover >= lv and p.cl <= 8 and p.threads <= 1024
                        assert p.kind == "split" or p.cl == 1 or t.clusters


def test_stream_plans():
    """Stream plans: the stash is a multiple of the block and fits in the target's shared memory; the
    rest, re-read from L2, stays under its budget (else no plan: the cluster takes the row)."""
    budget = rows.l2_per_sm(SM90)
    assert budget == (50 << 20) // 2 // 132
    for dtype in DTYPES:
        for length in (4100, 8192, 20000, 32768, 65536, 10 ** 6):
            vec = 16 // np.dtype(dtype).itemsize
            for threads, k, nv in ((256, 3, 4), (512, 2, 2), (1024, 1, 2)):
                p = rows.plan_stream(np.dtype(dtype), SM90, length // vec, vec, threads, k, nv)
                if p is None:
                    assert k * length * np.dtype(dtype).itemsize > budget
                    continue
                assert p.kind == "stream" and p.stash % threads == 0 and p.stash <= length // vec
                assert k * (p.stash_bytes(dtype) + rows.SMEM_STATIC) <= SM90.smem_per_sm
                assert k * (length // vec - p.stash) * vec * np.dtype(dtype).itemsize <= budget


def test_stream_kernels_need_a_row_per_sm_and_clusters():
    cfg = make_config().snapshot()
    long_rows = rows.LongRows((8, 16), 256, ((32768, 1024, 1, 2, True),))
    f64 = np.dtype(np.float64)
    plan = rows.plan_rows(f64, cfg, SM90, SM90.sm_count, 32768, 2, long_rows)
    assert plan.kind == "stream" and plan.copy_async and plan.params()["ASYNC"] == 1
    assert rows.plan_rows(f64, cfg, SM90, SM90.sm_count - 1, 32768, 2, long_rows).cl > 1
    assert rows.plan_rows(f64, cfg, SM80, 4096, 32768, 2, long_rows).kind != "stream"


def test_launches_record_carveout_clusters_and_workspace():
    cfg = make_config().snapshot()
    plan = softmax.FAMILY.default_plan(SoftmaxProblem("float32", 4096, 32768, 1, True), cfg, SM90)
    (kl,) = plan.launches
    assert kl.spec.kernel == "softmax_stream" and kl.max_carveout and kl.shared == 32768 * 4
    plan = softmax.FAMILY.default_plan(SoftmaxProblem("float32", 8, 32768, 1, True), cfg, SM90)
    assert plan.launches[0].cluster == (4, 1, 1) and plan.launches[0].grid[0] % 4 == 0
    plan = softmax.FAMILY.default_plan(SoftmaxProblem("float64", 16, 1 << 20, 1, True), cfg, SM90)
    part, apply = plan.launches
    assert plan.operands == ("x", "y") and plan.workspace == part.grid[0] * 2 * 8
    assert part.pointer_indices == (0, 2) and apply.pointer_indices == (0, 1, 2)
    assert {kl.units for kl in plan.launches} == {"FP64 cores"}


# --- GPU ------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_every_axis(rng, dtype, shape):
    a = (rng.standard_normal(shape) * 3).astype(dtype)
    op = _op(dtype)
    x = cuopjit.tensor(a)
    for axis in list(range(len(shape))) + [-1]:
        y = guarded(shape, dtype)
        assert op.forward(x, y, axis=axis) is y
        check_guards(y)
        err = rel_error(y.to_numpy(), _ref(a, axis))
        assert err < TOL[dtype], (axis, err)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", LONG)
def test_softmax_long_rows(rng, dtype, shape):
    """Single block, cluster and split-row kernels (aligned and not)."""
    a = rng.standard_normal(shape).astype(dtype)
    x, y = cuopjit.tensor(a), guarded(shape, dtype)
    _op(dtype).forward(x, y)
    check_guards(y)
    assert rel_error(y.to_numpy(), _ref(a, -1)) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis", [((33, 1000), -1), ((7, 4097), 0), ((2, 32768), -1), ((3, 1000, 5), 1)])
def test_softmax_extreme_inputs(rng, dtype, shape, axis):
    a = (np.sign(rng.standard_normal(shape)) * 1e4 + rng.standard_normal(shape)).astype(dtype)
    x, y = cuopjit.tensor(a), guarded(shape, dtype)
    _op(dtype).forward(x, y, axis=axis)
    check_guards(y)
    out = y.to_numpy()
    assert np.all(np.isfinite(out))
    assert rel_error(out, _ref(a, axis)) < 1e-5
    c = np.full(shape, 3.5, dtype)
    _op(dtype).forward(cuopjit.tensor(c), y, axis=axis)
    assert np.allclose(y.to_numpy(), 1.0 / shape[axis], rtol=1e-6)


INNER = [((3, 1000, 256), 1), ((2, 4097, 64), 1), ((7, 33, 4), 1), ((33, 7, 1000), 1), ((1, 1, 4), 1),
         ((4097, 2, 8), 0), ((5, 1024, 12), 1), ((2, 3, 7, 8), 1)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis", INNER)
def test_softmax_inner_axis_tiles(rng, dtype, shape, axis):
    """Inner axes whose inner size takes 16-byte vectors (tiles along the contiguous dimension, registers or
    streamed twice), at odd axis lengths; normal and +-1e4 inputs; NaN-poisoned, guarded outputs."""
    op = _op(dtype)
    vec = 16 // np.dtype(dtype).itemsize
    for a, tol in ((rng.standard_normal(shape) * 3, TOL[dtype]),
                   (np.sign(rng.standard_normal(shape)) * 1e4 + rng.standard_normal(shape), 1e-5)):
        a = a.astype(dtype)
        x, y = cuopjit.tensor(a), guarded(shape, dtype)
        op.forward(x, y, axis=axis)
        check_guards(y)
        assert op.plan(x, y, axis=axis).choice.startswith(f"strided_v{vec}x")
        out = y.to_numpy()
        assert np.all(np.isfinite(out)) and rel_error(out, _ref(a, axis)) < tol


STREAM_SHAPES = [(140, 8192), (133, 20000), (133, 32768), (140, 4100), (133, 5001)]


@pytest.mark.gpu
@pytest.mark.parametrize("stash", ["registers", "async", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", STREAM_SHAPES)
def test_softmax_stream(rng, monkeypatch, dtype, shape, stash):
    """The stream kernel, with the row's head copied to shared memory through registers or by
    cp.async, or all of it re-read from L2; normal and extreme (+-1e4) inputs."""
    monkeypatch.setattr(rows, "plan_rows", lambda dt, cfg, t, n, length, vec, long_rows=None: rows.plan_stream(
        dt, t, -(-length // vec), vec, 512, 2, 2, stash=stash != "none", l2_budget=1 << 40,
        copy_async=stash == "async"))
    op = _op(dtype)
    for a in (rng.standard_normal(shape) * 3, np.sign(rng.standard_normal(shape)) * 1e4 + rng.standard_normal(shape)):
        a = a.astype(dtype)
        x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
        op.forward(x, y)
        assert op.plan(x, y).launches[0].spec.kernel == "softmax_stream"
        out = y.to_numpy()
        assert rel_error(out, _ref(a, -1)) < (TOL[dtype] if abs(a).max() < 100 else 1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_in_place_and_unaligned(rng, dtype):
    a = rng.standard_normal((17, 1024)).astype(dtype)
    x = cuopjit.tensor(a)
    _op(dtype).forward(x, x)
    assert rel_error(x.to_numpy(), _ref(a, -1)) < TOL[dtype]
    big = cuopjit.tensor(rng.standard_normal(1 + 16 * 1024).astype(dtype))
    view = cuopjit.Tensor._view(big.ptr + big.dtype.itemsize, (16, 1024), big.dtype, big.device, big)
    ref = _ref(view.to_numpy(), -1)
    out = cuopjit.empty((16, 1024), dtype).fill(float("nan"))
    _op(dtype).forward(view, out)  # x is 4/8-byte aligned only: scalar path
    assert rel_error(out.to_numpy(), ref) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("fields", CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_jit_softmax_configs(rng, fields, dtype):
    jit = (cuopjit.JITSoftmaxFloat if dtype == np.float32 else cuopjit.JITSoftmaxDouble)(_op(dtype))
    jit.set_jit_config(make_config(**fields))
    for shape, axis in (((33, 1000), -1), ((2, 40000), -1), ((4, 100, 33), 1), ((4097, 128), -1)):
        a = rng.standard_normal(shape).astype(dtype)
        x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
        jit.forward(x, y, axis=axis)
        assert rel_error(y.to_numpy(), _ref(a, axis)) < TOL[dtype], (shape, fields)
    assert jit.get_performance_profile().bandwidth_gbps > 0


def _seed_tol(dtype, length: int) -> float:
    """exp's error (float32 __expf: 2 + 1.16 |x| ulp, |x - max| < ~16 here) plus a tree sum's log2(L) ulp
    (a bound: the norm-wise error measured on H100 is under a tenth of it)."""
    return np.finfo(dtype).eps * (2 + 1.16 * 16 + math.log2(length))


@pytest.mark.gpu
@pytest.mark.parametrize("fields", SEED_CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_seed_configuration_runs(rng, fields, dtype):
    """The cuOP README's configurations (every kernel_type x tile_size, the full JIT example) run and are right."""
    jit = (cuopjit.JITSoftmaxFloat if dtype == np.float32 else cuopjit.JITSoftmaxDouble)(_op(dtype))
    jit.set_jit_config(make_config(**fields))
    for shape, axis in (((33, 1000), -1), ((140, 8192), -1), ((2, 40000), -1), ((4, 100, 33), 1), ((7, 4097), 0)):
        a = (rng.standard_normal(shape) * 2).astype(dtype)
        x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
        jit.forward(x, y, axis=axis)
        assert rel_error(y.to_numpy(), _ref(a, axis)) < _seed_tol(dtype, shape[axis]), (shape, fields)
        assert jit.get_performance_profile().kernel_name.startswith("softmax_")


@pytest.mark.gpu
def test_softmax_errors():
    op = cuopjit.SoftmaxFloat()
    x = cuopjit.zeros([4, 5])
    with pytest.raises(ValueError, match=r"SoftmaxFloat: y has shape \[5, 4\], expected x's shape \[4, 5\]"):
        op.forward(x, cuopjit.zeros([5, 4]))
    with pytest.raises(TypeError, match="SoftmaxFloat: y is float64, SoftmaxFloat works on float32"):
        op.forward(x, cuopjit.zeros([4, 5], "float64"))
    with pytest.raises(ValueError, match=r"axis=2 is out of range for x of shape \[4, 5\] \(allowed -2..1\)"):
        op.forward(x, cuopjit.zeros([4, 5]), axis=2)
    with pytest.raises(TypeError, match="x must be a cuopjit Tensor"):
        op.forward(np.zeros((4, 5), np.float32), x)
    empty = cuopjit.empty([0, 5])
    assert op.forward(empty, cuopjit.empty([0, 5])).shape == (0, 5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_set_jit_config_refuses_a_tile_size_no_kernel_takes(dtype):
    jit = (cuopjit.JITSoftmaxFloat if dtype == np.float32 else cuopjit.JITSoftmaxDouble)(_op(dtype))
    with pytest.raises(ValueError, match=r"tile_size=256 is not available for row kernels: choose one of "
                                         r"0, 8, 16, 32, 64, 128 \(0 = automatic\)"):
        jit.set_jit_config(make_config(tile_size=256))
    for fields in SEED_CONFIGS + CONFIGS:
        jit.set_jit_config(make_config(**fields))


def test_wrapper_type():
    with pytest.raises(TypeError, match="JITSoftmaxDouble wraps a SoftmaxDouble, got SoftmaxFloat"):
        cuopjit.JITSoftmaxDouble(cuopjit.SoftmaxFloat())
