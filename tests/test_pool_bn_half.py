"""Window and global pools and BatchNorm in float16 and bfloat16, over NCHW and channels_last: pooled and
normalised in float32 (sums, statistics), rounded once on store; max pools exact and NaN-propagating; BatchNorm's
parameters and running statistics in x's dtype, as torch's F.batch_norm on half tensors with half parameters.

CPU: plans (16-byte vectors of 8, float32 partials and statistics, 48 KB of shared memory at 1024 threads).
GPU: float64 references of the 16-bit inputs with the bounds of half_maps.py, NaN-poisoned guarded outputs, odd
shapes, torch where it is installed."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit import layout
from cuopjit.ops import batchnorm_plans as bnp
from cuopjit.ops.pool import global_pool, windowed
from cuopjit.target import named

from conftest import check_guards, guarded, make_config
from half_maps import HALF, U32, assert_half, gamma32, half_input, rounded
from layout_models import laid
from test_layouts_maps import WINDOWS, pool_ref

SM90 = named("sm_90")
CL, NCHW = layout.CHANNELS_LAST, layout.CONTIGUOUS
SHAPES = [(2, 16, 56, 56), (1, 3, 7, 13), (2, 5, 13, 7), (2, 33, 7, 7), (3, 64, 5, 3), (2, 8, 1, 1)]


def _cls(name: str, dtype: str):
    return getattr(cuopjit, name + ("Half" if dtype == "float16" else "BFloat16"))


# --- CPU ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", HALF)
def test_pool_and_batchnorm_plans(dtype):
    cfg = make_config().snapshot()
    win = windowed.WindowProblem("max", dtype, 32, 56, 56, 28, 28, windowed.Window(3, 3, 2, 2, 1, 1), True, True,
                                 CL, 256)
    (kl,) = windowed.window_family("max").default_plan(win, cfg, SM90).launches
    assert dict(kl.spec.params)["VEC"] == 8 and kl.units == "FP32 cores"
    g = global_pool.GlobalProblem("avg", dtype, 2, 56 * 56, True, CL, 64)
    plan = global_pool.global_family("avg").default_plan(g, cfg, SM90)
    part, splits = dict(plan.launches[0].spec.params), plan.launches[1].args[4].value
    assert part["PARTIAL"] and splits > 1 and plan.workspace == 2 * splits * 64 * 4     # float32 partial sums
    for lay in (NCHW, CL):
        bn = bnp.BatchNormProblem(dtype, 32, 256, 56 * 56, True, True, 1e-5, 0.1, lay)
        plan = bnp.FAMILY.default_plan(bn, make_config(block_size=1024).snapshot(), SM90)
        stats = dict(plan.launches[0].spec.params)
        assert stats["THREADS"] == 1024 and dict(plan.launches[-1].spec.params)["VEC"] == 8
        assert stats["VEC"] == (4 if lay == CL else 8)       # 1024 x 8 float32 (n, mean, M2) would need 96 KB
        assert all(a.kind == "f32" for kl in plan.launches for a in kl.args if a.kind in ("f32", "f64"))


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("n, c, hw", [(32, 256, 56 * 56), (32, 2048, 7 * 7)])
def test_channels_last_global_pools_of_resnet_are_one_launch(dtype, n, c, hw):
    """Column chunks narrow (to 4 vectors, 64 bytes of a pixel) until the samples fill the SMs: no split, no
    partials, no second launch."""
    g = global_pool.GlobalProblem("avg", dtype, n, hw, True, CL, c)
    (kl,) = global_pool.global_family("avg").default_plan(g, make_config().snapshot(), SM90).launches
    cb, rl, chunks, splits = (a.value for a in kl.args[4:8])
    assert splits == 1 and kl.grid[0] == n * chunks >= SM90.sm_count and cb * rl == kl.block[0] == 512
    assert cb >= 4 and chunks * cb * 8 >= c


# --- GPU: pools --------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", SHAPES[:5])
@pytest.mark.parametrize("window", WINDOWS, ids=str)
@pytest.mark.parametrize("lay", [NCHW, CL])
def test_window_pools(rng, dtype, shape, window, lay):
    """max: exact, NaN propagated; average: k terms summed in float32 and divided, gamma_{k+1} mean|x|, stored."""
    a = half_input(rng, shape, dtype)
    a.reshape(-1)[rng.integers(0, a.size, 3)] = np.nan
    x = laid(shape, dtype, lay).copy_from(a)
    k = window["kernel_h"] * window["kernel_w"]
    for op in ("max", "avg"):
        ref = pool_ref(a, op, **window)
        y = laid(ref.shape, dtype, lay)
        pool = _cls("MaxPool2D" if op == "max" else "AveragePool2D", dtype)(**window)
        assert pool.forward(x, y) is y
        check_guards(y)
        what = f"{op} pool {shape} {window} {lay}"
        if op == "max":
            assert np.array_equal(y.to_numpy().astype(np.float64), ref.astype(dtype).astype(np.float64),
                                  equal_nan=True), what
        else:
            absmean = pool_ref(np.abs(a.astype(np.float64)), "avg", **window)
            assert_half(y.to_numpy(), *rounded(ref, gamma32(k + 1) * absmean, dtype), what)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("lay", [NCHW, CL])
def test_global_pools(rng, dtype, shape, lay):
    """max exact (NaN propagated); average: hw terms in float32 (partials of several splits stay float32)."""
    a = half_input(rng, shape, dtype, offset=1.0)
    a[0, 0, 0, 0] = np.nan
    x = laid(shape, dtype, lay).copy_from(a)
    a64 = a.astype(np.float64)
    hw = shape[2] * shape[3]
    for op, name in (("max", "GlobalMaxPool2D"), ("avg", "GlobalAveragePool2D")):
        y = guarded(shape[:2] + (1, 1), dtype)
        assert _cls(name, dtype)().forward(x, y) is y
        check_guards(y)
        got = y.to_numpy().reshape(shape[:2])
        if op == "max":
            assert np.array_equal(got.astype(np.float64), a64.max(axis=(2, 3)).astype(dtype).astype(np.float64),
                                  equal_nan=True)
        else:
            assert_half(got, *rounded(a64.mean(axis=(2, 3)), gamma32(hw + 1) * np.abs(a64).mean(axis=(2, 3)), dtype),
                        f"global avg {shape} {lay}")


@pytest.mark.gpu
def test_float16_average_of_large_values_does_not_overflow_in_the_sum():
    """60000 + 60000 overflows float16 but not the float32 sum: the average is stored finite."""
    a = np.full((1, 8, 4, 4), 60000, np.float16)
    y = guarded((1, 8, 2, 2), np.float16)
    cuopjit.AveragePool2DHalf(2, 2).forward(cuopjit.tensor(a), y)
    g = guarded((1, 8), np.float16)
    cuopjit.GlobalAveragePool2DHalf().forward(cuopjit.tensor(a), g)
    assert np.all(y.to_numpy() == 60000) and np.all(g.to_numpy() == 60000)


# --- GPU: batch norm ---------------------------------------------------------------------------------------------
def _params(rng, c, dtype):
    g, b = half_input(rng, c, dtype, 1.0), half_input(rng, c, dtype, 1.0)
    m, v = half_input(rng, c, dtype, 1.0), (rng.random(c) + 0.5).astype(np.float32).astype(dtype)
    return g, b, m, v


def _bn(dtype, g, b, m, v, training):
    bn = _cls("BatchNorm", dtype)(momentum=0.1).train(training)
    for name, t in zip(("gamma", "beta", "running_mean", "running_var"), (g, b, m, v)):
        getattr(bn, "set_" + name)(cuopjit.tensor(t))
    return bn


def _apply_bound(a64, mean, var, g64, b64, dmean, dvar, eps=1e-5):
    """(y, bound) of (x - mean) / sqrt(var + eps) g + b with statistics off by dmean, dvar: their effect through the
    derivatives, plus the float32 evaluation (scale from rsqrtf, 2 ulp; shift; one multiply-add), 16 u32 of the
    terms' magnitudes."""
    s = (1, -1) + (1,) * (a64.ndim - 2)
    scale = g64.reshape(s) / np.sqrt(var.reshape(s) + eps)
    y = (a64 - mean.reshape(s)) * scale + b64.reshape(s)
    stat = (np.abs(scale) * (dmean.reshape(s) + np.abs(a64 - mean.reshape(s)) * dvar.reshape(s)
                             / (2 * (var.reshape(s) + eps))))
    b32 = stat + 16 * U32 * (np.abs(a64 * scale) + np.abs(mean.reshape(s) * scale) + np.abs(b64.reshape(s)))
    return y, b32


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", [(8, 16, 28, 28), (1, 3, 7, 13), (2, 33, 7, 7), (3, 64, 5, 3), (64, 24), (5, 3)])
@pytest.mark.parametrize("lay", [NCHW, CL])
@pytest.mark.parametrize("training", [False, True])
def test_batchnorm(rng, dtype, shape, lay, training):
    """Inference: the running statistics as given. Training: the batch statistics from shifted float32 sums of
    count = N H W terms (mean within gamma_{count+2} mean|x - k|, variance within gamma_{count+4} (mean (x - k)^2
    + (mean - k)^2), k the channel's first value), and the running statistics updated in float32, each stored once."""
    if lay == CL and len(shape) != 4:
        pytest.skip("channels_last is 4-D")
    c = shape[1]
    a = half_input(rng, shape, dtype, 2.0, 0.5)
    g, b, m, v = _params(rng, c, dtype)
    bn = _bn(dtype, g, b, m, v, training)
    x, y = laid(shape, dtype, lay).copy_from(a), laid(shape, dtype, lay)
    assert bn.forward(x, y) is y
    check_guards(y)
    a64, g64, b64, m64, v64 = (t.astype(np.float64) for t in (a, g, b, m, v))
    axes = (0,) + tuple(range(2, a.ndim))
    if not training:
        ref, b32 = _apply_bound(a64, m64, v64, g64, b64, np.zeros(c), np.zeros(c))
        assert_half(y.to_numpy(), *rounded(ref, b32, dtype), f"batchnorm inference {shape} {lay}")
        return
    count = a.size // c
    k = a64.reshape(a.shape[0], c, -1)[0, :, 0]
    d = a64 - k.reshape((1, -1) + (1,) * (a.ndim - 2))
    mean, var = a64.mean(axis=axes), a64.var(axis=axes)
    dmean = gamma32(count + 2) * np.abs(d).mean(axis=axes) + U32 * np.abs(mean)
    dvar = gamma32(count + 4) * ((d ** 2).mean(axis=axes) + (mean - k) ** 2)
    ref, b32 = _apply_bound(a64, mean, var, g64, b64, dmean, dvar)
    assert_half(y.to_numpy(), *rounded(ref, b32, dtype), f"batchnorm training {shape} {lay}")
    unbiased = count / (count - 1)
    rm, rv = 0.9 * m64 + 0.1 * mean, 0.9 * v64 + 0.1 * var * unbiased
    assert_half(bn.running_mean.to_numpy(), *rounded(rm, 0.1 * dmean + 4 * U32 * (0.9 * np.abs(m64) + 0.1 * np.abs(mean)),
                                                      dtype), "running_mean")
    assert_half(bn.running_var.to_numpy(), *rounded(rv, 0.1 * unbiased * dvar + 6 * U32 * rv, dtype), "running_var")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("lay", [NCHW, CL])
def test_batchnorm_matches_torch_half_batch_norm(rng, dtype, lay):
    """torch's F.batch_norm on half x with half parameters (what BatchNorm2d(...).half() runs): y and the running
    statistics within one 16-bit rounding of torch's (both compute in float32 and round once)."""
    torch = pytest.importorskip("torch")
    shape = (8, 64, 14, 14)
    a = half_input(rng, shape, dtype, 2.0, 0.5)
    g, b, m, v = _params(rng, 64, dtype)
    td = getattr(torch, dtype)
    as_t = (lambda arr: torch.from_numpy(arr.astype(np.float32)).cuda().to(td))
    for training in (False, True):
        tm, tv = as_t(m), as_t(v)
        tx = as_t(a).contiguous(memory_format=torch.channels_last if lay == CL else torch.contiguous_format)
        want = torch.nn.functional.batch_norm(tx, tm, tv, as_t(g), as_t(b), training, 0.1, 1e-5)
        bn = _bn(dtype, g, b, m, v, training)
        y = torch.empty_like(tx)
        bn.forward(tx, y)
        torch.cuda.synchronize()
        u = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}[dtype]
        for got, ref in ((y, want), (bn.running_mean, tm), (bn.running_var, tv)):
            got = torch.as_tensor(got.to_numpy().astype(np.float32)) if isinstance(got, cuopjit.Tensor) else got
            got, ref = got.float().cpu(), ref.float().cpu()
            # one 16-bit step apart at most, or the float32 evaluation's own error where y nearly cancels
            assert torch.all((got - ref).abs() <= 2 * u * ref.abs() + 1e-4), (training, lay, (got - ref).abs().max())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_batchnorm_jit_configs_and_large_blocks(rng, dtype):
    """The scalar kernels ('simple', no 16-byte accesses) and 1024-thread blocks (the NHWC stats tree narrowed to fit
    48 KB of shared memory) give the same results within the bounds."""
    shape = (4, 64, 14, 14)
    a = half_input(rng, shape, dtype, 2.0, 0.5)
    g, b, m, v = _params(rng, 64, dtype)
    a64 = a.astype(np.float64)
    mean, var = a64.mean(axis=(0, 2, 3)), a64.var(axis=(0, 2, 3))
    count = a.size // 64
    d = a64 - a64[0, :, 0, 0].reshape(1, -1, 1, 1)
    dmean = gamma32(count + 2) * np.abs(d).mean(axis=(0, 2, 3)) + U32 * np.abs(mean)
    dvar = gamma32(count + 4) * ((d ** 2).mean(axis=(0, 2, 3)) + (mean - a64[0, :, 0, 0]) ** 2)
    ref, b32 = _apply_bound(a64, mean, var, *(t.astype(np.float64) for t in (g, b)), dmean, dvar)
    jit = {"float16": cuopjit.JITBatchNormHalf, "bfloat16": cuopjit.JITBatchNormBFloat16}[dtype]
    for fields in ({"kernel_type": "simple"}, {"enable_memory_coalescing": False}, {"block_size": 1024},
                   {"tile_size": 8}):
        for lay in (NCHW, CL):
            op = jit(_bn(dtype, g, b, m, v, True))
            op.set_jit_config(make_config(**fields))
            x, y = laid(shape, dtype, lay).copy_from(a), laid(shape, dtype, lay)
            op.forward(x, y)
            check_guards(y)
            assert_half(y.to_numpy(), *rounded(ref, b32, dtype), f"{fields} {lay}")
