"""Max / average / global pools: CPU plans and builds under every config, argument checks, GPU results."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit import target
from cuopjit.ops import FAMILIES
from cuopjit.ops.pool import global_pool, windowed as pool
from cuopjit.ops.pool.global_pool import GlobalProblem
from cuopjit.ops.pool.windowed import Window, WindowProblem

from conftest import SEED, SEED_CONFIGS, build_once, check_guards, family_plans, guarded, make_config

DTYPES = [np.float32, np.float64]
CLASSES = {("max", np.float32): cuopjit.MaxPool2DFloat, ("max", np.float64): cuopjit.MaxPool2DDouble,
           ("avg", np.float32): cuopjit.AveragePool2DFloat, ("avg", np.float64): cuopjit.AveragePool2DDouble}
GLOBAL = {("max", np.float32): cuopjit.GlobalMaxPool2DFloat, ("max", np.float64): cuopjit.GlobalMaxPool2DDouble,
          ("avg", np.float32): cuopjit.GlobalAveragePool2DFloat,
          ("avg", np.float64): cuopjit.GlobalAveragePool2DDouble}
OPS = ["maxpool2d", "avgpool2d", "globalmaxpool2d", "globalavgpool2d"]
CONFIGS = [{}, {"block_size": 32}, {"block_size": 1024}, {"tile_size": 8}, {"enable_memory_coalescing": False},
           {"kernel_type": "simple"}]
SM80, SM90 = target.named("sm_80"), target.named("sm_90")
# sm_80 plans exactly the kernels sm_90 plans (no pool kernel depends on the target): a few configs suffice
TARGET_CONFIGS = [(SM90, f) for f in CONFIGS + SEED_CONFIGS] + [(SM80, f) for f in ({}, SEED)]
P2 = WindowProblem("max", "float32", 2048, 56, 56, 28, 28, Window(2, 2, 2, 2, 0, 0), True, True)
G56 = GlobalProblem("avg", "float32", 2048, 56 * 56, True)


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
                                    {"enable_loop_unroll": False}], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_fields_without_a_kernel_are_ignored(op, fields):
    """Pools have one vectorised kernel each, loops of fixed trip counts (always unrolled), nothing in shared
    memory and nothing for tensor cores or TMA."""
    assert _plans(op, fields, SM90) == _plans(op, {}, SM90)


def test_window_kernel_shapes():
    """tile_size = outputs per thread; "simple" = one output per thread, scalar accesses."""
    default = pool.window_choices(P2, make_config().snapshot(), SM90)[0]
    assert (default.opt, default.vec_in, default.vec_out, default.threads) == (4, True, True, 256)
    tiled = pool.window_choices(P2, make_config(tile_size=64, block_size=128).snapshot(), SM90)[0]
    assert (tiled.opt, tiled.threads) == (64, 128)
    simple = pool.window_choices(P2, make_config(kernel_type="simple", tile_size=64).snapshot(), SM90)[0]
    assert (simple.opt, simple.vec_in, simple.vec_out) == (1, False, False)
    plan = pool.window_plan(P2, tiled, SM90)
    assert plan.launches[0].grid[0] == -(-2048 * 28 // 128)   # one output group (of 64) per row


def test_global_kernel_shapes():
    """tile_size = elements per thread per step (ITEMS x 16-byte loads); "simple" = scalar loads, one in flight."""
    default = global_pool.global_choices(G56, make_config().snapshot(), SM90)[0]
    # one wave: 2048 planes x 64 threads <= 132 SMs x 1024; 784 vectors in 2 steps of 7 loads
    assert (default.vg, default.items, default.tpr, default.threads) == (4, 7, 64, 128)
    assert global_pool.global_geometry(2048, 49, SM90) == (32, 2) and global_pool.global_geometry(8, 1 << 20, SM90) == (512, 8)
    assert global_pool.global_geometry(2048, 1, SM90) == (1, 1)
    big = global_pool.global_choices(G56, make_config(tile_size=128).snapshot(), SM90)[0]
    assert (big.vg, big.items, big.tpr) == (4, 32, 8)
    simple = global_pool.global_choices(G56, make_config(kernel_type="simple").snapshot(), SM90)[0]
    assert (simple.vg, simple.items, simple.tpr, simple.threads) == (1, 1, 512, 512)


@pytest.mark.parametrize("choose, problem", [(pool.window_choices, P2), (global_pool.global_choices, G56)])
def test_a_tile_size_no_kernel_takes_is_refused(choose, problem):
    with pytest.raises(ValueError, match=r"tile_size=256 is not available for pooling kernels: choose one of "
                                         r"0, 8, 16, 32, 64, 128 \(0 = automatic\)"):
        choose(problem, make_config(tile_size=256).snapshot(), SM90)


# (input shape, window kwargs)
CASES = [
    ((2, 3, 8, 8), {}),
    ((1, 1, 7, 33), {}),
    ((2, 3, 33, 1000), {"kernel_h": 3, "kernel_w": 3, "stride_h": 1, "stride_w": 1, "pad_h": 1, "pad_w": 1}),
    ((1, 7, 5, 4097), {"kernel_h": 3, "kernel_w": 2, "stride_h": 2, "stride_w": 1, "pad_h": 1}),
    ((4, 8, 56, 56), {"kernel_h": 2, "kernel_w": 2}),
    ((1, 2, 9, 9), {"kernel_h": 3, "kernel_w": 3, "stride_h": 3, "stride_w": 2}),
    ((3, 1, 1, 1000), {"kernel_h": 1, "kernel_w": 4, "pad_w": 2}),
    ((1, 1, 1, 1), {"kernel_h": 1, "kernel_w": 1}),
]


def reference(a, op, kernel_h=2, kernel_w=2, stride_h=None, stride_w=None, pad_h=0, pad_w=0):
    sh, sw = stride_h or kernel_h, stride_w or kernel_w
    a = a.astype(np.float64)
    fill = -np.inf if op == "max" else 0.0
    ap = np.pad(a, ((0, 0), (0, 0), (pad_h, pad_h), (pad_w, pad_w)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(ap, (kernel_h, kernel_w), axis=(2, 3))[:, :, ::sh, ::sw]
    oh = (a.shape[2] + 2 * pad_h - kernel_h) // sh + 1
    ow = (a.shape[3] + 2 * pad_w - kernel_w) // sw + 1
    win = win[:, :, :oh, :ow]
    return win.max(axis=(4, 5)) if op == "max" else win.mean(axis=(4, 5))


def gamma(k: int, dtype) -> float:
    """Higham's gamma_k = k u / (1 - k u), u the unit roundoff of `dtype`."""
    u = float(np.finfo(dtype).eps) / 2
    return k * u / (1 - k * u)


def assert_average_close(got, ref, abs_mean, n: int, dtype) -> None:
    """Each output within (gamma_{n+1}(dtype) + gamma_{n+1}(float64)) * mean|x| of the float64 reference.

    Summing n terms in `dtype` in any order errs by at most gamma_{n-1} * sum|x|; the division by n
    and the rounding of the stored result add one unit roundoff each: gamma_{n+1} * mean|x| over the
    window (padding counted as zeros). NumPy's float64 reference errs by at most gamma_{n+1}(float64)
    * mean|x|. A bound on the inputs' magnitudes, not on the (possibly tiny) mean, holds for every seed.
    """
    bound = (gamma(n + 1, dtype) + gamma(n + 1, np.float64)) * abs_mean
    err = np.abs(np.asarray(got, dtype=np.float64) - ref)
    assert np.all(err <= bound), f"error {np.nanmax(err - bound):.3g} above the bound {bound.max():.3g}"


def test_window_validation():
    with pytest.raises(ValueError, match=r"MaxPool2DFloat: padding \(2x0\) must be between 0 and half the "
                                         r"kernel \(3x3\)"):
        cuopjit.MaxPool2DFloat(3, 3, pad_h=2)
    with pytest.raises(ValueError, match=r"kernel \(0x2\) and stride \(0x2\) must be >= 1"):
        cuopjit.AveragePool2DFloat(kernel_h=0)
    assert cuopjit.MaxPool2DFloat().output_shape((32, 64, 56, 56)) == (32, 64, 28, 28)
    assert cuopjit.MaxPool2DFloat().output_shape((1, 1, 9, 9), kernel_h=3, kernel_w=3, stride_h=1) == (1, 1, 7, 3)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["max", "avg"])
@pytest.mark.parametrize("shape, kw", CASES)
def test_pool2d(rng, dtype, op, shape, kw):
    a = rng.standard_normal(shape).astype(dtype)
    ref = reference(a, op, **kw)
    pool = CLASSES[op, dtype]()
    x, y = cuopjit.tensor(a), guarded(ref.shape, dtype)
    assert pool.forward(x, y, **kw) is y
    check_guards(y)
    abs_mean = reference(np.abs(a), "avg", **kw)
    window = kw.get("kernel_h", 2) * kw.get("kernel_w", 2)

    def check():
        if op == "max":
            assert np.array_equal(y.to_numpy(), ref.astype(dtype))
        else:
            assert_average_close(y.to_numpy(), ref, abs_mean, window, dtype)
    check()
    # the same window given to the constructor
    y.fill(float("nan"))
    CLASSES[op, dtype](**kw).forward(x, y)
    check_guards(y)
    check()


@pytest.mark.gpu
def test_pool2d_spec_example(rng):
    a = rng.standard_normal((32, 64, 56, 56)).astype(np.float32)
    pool_input, pool_output = cuopjit.tensor(a), cuopjit.zeros([32, 64, 28, 28])
    cuopjit.MaxPool2DFloat().forward(pool_input, pool_output, kernel_h=2, kernel_w=2)
    assert np.array_equal(pool_output.to_numpy(), reference(a, "max").astype(np.float32))
    a[0, 0, 0, 0] = np.nan
    pool_input.copy_from(a)
    cuopjit.MaxPool2DFloat().forward(pool_input, pool_output)
    assert np.isnan(pool_output.to_numpy()[0, 0, 0, 0])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["max", "avg"])
@pytest.mark.parametrize("shape", [(2, 3, 1, 1), (1, 7, 1, 7), (2, 33, 33, 33), (1, 2, 1, 4097), (3, 5, 40, 25),
                                   (32, 64, 56, 56), (1, 1, 1000, 1000)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_global_pool(rng, dtype, op, shape, keepdims):
    a = rng.standard_normal(shape).astype(dtype)
    ref = a.astype(np.float64).max(axis=(2, 3)) if op == "max" else a.astype(np.float64).mean(axis=(2, 3))
    out_shape = list(shape[:2]) + ([1, 1] if keepdims else [])
    x, y = cuopjit.tensor(a), guarded(out_shape, dtype)
    assert GLOBAL[op, dtype]().forward(x, y) is y
    check_guards(y)
    got = y.to_numpy().reshape(ref.shape)
    if op == "max":
        assert np.array_equal(got, ref.astype(dtype))
    else:
        abs_mean = np.abs(a.astype(np.float64)).mean(axis=(2, 3))
        assert_average_close(got, ref, abs_mean, shape[2] * shape[3], dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["max", "avg"])
@pytest.mark.parametrize("shape", [(2, 3, 8, 8), (1, 2, 33, 1000)])
def test_nan_propagates_through_window_and_global_pools(rng, dtype, op, shape):
    """A NaN in a window (or plane) gives NaN there, as in PyTorch: fmax would drop it."""
    a = rng.standard_normal(shape).astype(dtype)
    a[0, 0, 0, 0] = a[-1, -1, 1, 1] = a[0, -1, shape[2] // 2, 3] = np.nan   # three windows, two or three planes
    x = cuopjit.tensor(a)
    ref = reference(a, op)
    y = guarded(ref.shape, dtype)
    CLASSES[op, dtype]().forward(x, y)
    check_guards(y)
    got = y.to_numpy()
    assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.isnan(got).sum() == 3
    if op == "max":
        assert np.array_equal(got, ref.astype(dtype), equal_nan=True)
    g = guarded(shape[:2], dtype)
    GLOBAL[op, dtype]().forward(x, g)
    check_guards(g)
    planes = np.isnan(a).any(axis=(2, 3))
    assert np.array_equal(np.isnan(g.to_numpy()), planes) and planes.sum() >= 2


@pytest.mark.gpu
def test_pool_errors():
    x = cuopjit.empty([2, 3, 8, 8])
    with pytest.raises(ValueError, match=r"MaxPool2DFloat: y has shape \[2, 3, 8, 8\], expected \[2, 3, 4, 4\] "
                                         r"\(x of shape \[2, 3, 8, 8\]"):
        cuopjit.MaxPool2DFloat().forward(x, cuopjit.empty([2, 3, 8, 8]))
    with pytest.raises(ValueError, match=r"AveragePool2DFloat: x must be 4-D, got shape \[3, 8, 8\]"):
        cuopjit.AveragePool2DFloat().forward(cuopjit.empty([3, 8, 8]), cuopjit.empty([3, 4, 4]))
    with pytest.raises(ValueError, match=r"GlobalMaxPool2DFloat: y has shape \[2, 3, 1\], expected \[2, 3\] or "
                                         r"\[2, 3, 1, 1\]"):
        cuopjit.GlobalMaxPool2DFloat().forward(x, cuopjit.empty([2, 3, 1]))
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['kernel'\\]"):
        cuopjit.MaxPool2DFloat().forward(x, cuopjit.empty([2, 3, 4, 4]), kernel=2)
    with pytest.raises(ValueError, match=r"smaller than the 3x3 window"):
        cuopjit.MaxPool2DFloat().forward(cuopjit.empty([1, 1, 2, 2]), cuopjit.empty([1, 1, 1, 1]),
                                         kernel_h=3, kernel_w=3)
    e = cuopjit.empty([0, 3, 8, 8])
    assert cuopjit.MaxPool2DFloat().forward(e, cuopjit.empty([0, 3, 4, 4])).size == 0


@pytest.mark.gpu
@pytest.mark.parametrize("fields", SEED_CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["max", "avg"])
def test_every_seed_configuration_runs_window(rng, op, dtype, fields):
    """The cuOP README's configurations (every kernel_type x tile_size, the full JIT example) run and are right:
    max exactly, average within (kh * kw + 1) roundings of the window's largest |x|."""
    jit = cuopjit.JITWrapper(CLASSES[op, dtype]())
    jit.set_jit_config(make_config(**fields))
    eps = float(np.finfo(dtype).eps)
    for shape, kw in (CASES[0], CASES[2], CASES[3], CASES[4]):
        a = rng.standard_normal(shape).astype(dtype)
        ref = reference(a, op, **kw)
        x, y = cuopjit.tensor(a), cuopjit.empty(ref.shape, dtype).fill(float("nan"))
        assert jit.forward(x, y, **kw) is y
        if op == "max":
            assert np.array_equal(y.to_numpy(), ref.astype(dtype)), (shape, kw)
        else:
            k = kw.get("kernel_h", 2) * kw.get("kernel_w", 2)
            assert np.all(np.abs(y.to_numpy() - ref) <= (k + 1) * eps * np.abs(a).max()), (shape, kw)
    assert jit.get_performance_profile().kernel_name.startswith(op + "pool2d_")


@pytest.mark.gpu
@pytest.mark.parametrize("fields", SEED_CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["max", "avg"])
def test_every_seed_configuration_runs_global(rng, op, dtype, fields):
    """As above for global pools: max exact, the mean within hw roundings of the plane's mean |x|."""
    jit = cuopjit.JITWrapper(GLOBAL[op, dtype]())
    jit.set_jit_config(make_config(**fields))
    eps = float(np.finfo(dtype).eps)
    for shape in ((2, 3, 1, 1), (2, 33, 33, 33), (1, 2, 1, 4097), (32, 64, 56, 56)):
        a = rng.standard_normal(shape).astype(dtype)
        a64 = a.astype(np.float64)
        ref = a64.max(axis=(2, 3)) if op == "max" else a64.mean(axis=(2, 3))
        x, y = cuopjit.tensor(a), cuopjit.empty(shape[:2], dtype).fill(float("nan"))
        assert jit.forward(x, y) is y
        if op == "max":
            assert np.array_equal(y.to_numpy(), ref.astype(dtype)), shape
        else:
            hw = shape[2] * shape[3]
            assert np.all(np.abs(y.to_numpy() - ref) <= (hw + 1) * eps * np.abs(a64).mean(axis=(2, 3))), shape
    assert jit.get_performance_profile().kernel_name.startswith(f"global{op}pool_")
