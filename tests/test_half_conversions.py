"""The 16-bit conversions of templates/common/half.cuh.jinja, exactly, through the row kernels (GPU): every float16
and bfloat16 value survives widening and narrowing (16-byte vectors, pairs and scalars), float32 results round to
nearest even (ties too), inf and NaN propagate, and float16 overflow past 65504 stores inf (as torch rounds)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cuopjit

from conftest import check_guards, guarded
from half_bounds import HALF, assert_half, softmax_half

pytestmark = pytest.mark.gpu
BF16 = np.dtype(ml_dtypes.bfloat16)
LAYERNORM = {"float16": cuopjit.LayerNormHalf, "bfloat16": cuopjit.LayerNormBFloat16}
SOFTMAX = {"float16": cuopjit.SoftmaxHalf, "bfloat16": cuopjit.SoftmaxBFloat16}


def _every_value(dtype: str) -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.dtype(dtype))


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal as numbers (so -0 == +0), NaN where want is NaN."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    return bool(np.all((g == w) | (np.isnan(g) & np.isnan(w))))


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("form", ["vectors", "scalars", "per-channel"])
def test_every_16_bit_value_survives_a_kernel(dtype, form):
    """LayerNorm of constant rows is beta exactly ((0 - 0) * rstd * 1 + beta): each of the 65536 bit patterns of
    beta is widened (to_f32: unpack2 in vectors of 8, or one at a time) and stored again (pack2 / from_f32)."""
    beta = _every_value(dtype)
    op = LAYERNORM[dtype]()
    if form == "per-channel":      # cuOP's NCHW form: gamma and beta per channel, read one at a time
        shape, gshape = (1, 1 << 16, 1, 2), (1 << 16,)
    else:
        shape, gshape = (2, 256, 256), (256, 256)
    misaligned = form == "scalars"   # pointers 2 bytes past 16: the scalar path
    op.set_gamma(guarded(gshape, dtype, fill=np.ones(gshape, dtype), pad=1) if misaligned
                 else cuopjit.tensor(np.ones(gshape, dtype)))
    op.set_beta(guarded(gshape, dtype, fill=beta.reshape(gshape), pad=1) if misaligned
                else cuopjit.tensor(beta.reshape(gshape)))
    x = cuopjit.tensor(np.zeros(shape, dtype))
    y = guarded(shape, dtype, pad=1 if misaligned else None)
    op.forward(x, y)
    check_guards(y)
    want = np.broadcast_to(beta.reshape((1, 1 << 16, 1, 1) if form == "per-channel" else (1, 256, 256)), shape)
    assert _same(y.to_numpy(), want)


@pytest.mark.parametrize("dtype", HALF)
def test_results_round_to_nearest_even(dtype):
    """Softmax of a row of k zeros and L - k -inf is 1/k (float32's correctly rounded quotient) on the zeros
    and 0 on the rest: row k of 2048 rounds 1/k to the 16-bit type, exactly as NumPy's round to nearest even."""
    n = 2048
    a = np.where(np.arange(n)[None, :] <= np.arange(n)[:, None], 0.0, -np.inf).astype(dtype)
    y = guarded((n, n), dtype)
    SOFTMAX[dtype]().forward(cuopjit.tensor(a), y)
    check_guards(y)
    want = np.where(a == 0, (np.float32(1) / np.arange(1, n + 1, dtype=np.float32))[:, None], 0).astype(dtype)
    assert _same(y.to_numpy(), want)


@pytest.mark.parametrize("dtype", HALF)
def test_ties_round_to_even(rng, dtype):
    """LayerNorm of rows [-1, 1] per channel (mean 0, variance 1, eps 0: rstd 1) gives beta -+ gamma in float32,
    exactly; with gamma in [1, 2) and beta a half or a quarter of the 16-bit spacing there, many results fall on
    a tie or next to one, and each must round to nearest even."""
    c, ulp = 4096, {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}[dtype]
    gamma = (1 + rng.integers(0, round(1 / ulp), c) * ulp).astype(dtype)
    beta = (rng.choice([-0.5, 0.5, 0.25, -0.25, 1.5], c) * ulp * rng.choice([1, 2, 4], c)).astype(dtype)
    op = LAYERNORM[dtype](eps=0.0)
    op.set_gamma(cuopjit.tensor(gamma))
    op.set_beta(cuopjit.tensor(beta))
    x = np.tile(np.array([-1.0, 1.0]), (1, c, 1, 1)).reshape(1, c, 1, 2).astype(dtype)
    y = guarded(x.shape, dtype)
    op.forward(cuopjit.tensor(x), y)
    check_guards(y)
    g, b = gamma.astype(np.float64)[:, None], beta.astype(np.float64)[:, None]
    exact = np.concatenate([b - g, b + g], axis=1)             # exact in float64, then float32, then 16 bits
    want = exact.astype(np.float32).astype(dtype).reshape(x.shape)
    ties = np.sum(np.abs(exact / ulp - np.round(exact / ulp)) == 0.5)
    assert ties > c // 4 and _same(y.to_numpy(), want)


def test_float16_overflow_stores_inf_and_inf_gives_nan():
    """65504 (float16's largest) in, normalised to +-sqrt(2) and scaled by 65504 out: inf, as torch rounds.
    A row holding inf gives NaN everywhere (as NumPy and torch: inf - inf), other rows are untouched."""
    x = np.array([[65504, -65504, 0, 0], [1, 2, 3, np.inf], [-65504, 65504, 0, 0]], np.float16)
    op = cuopjit.LayerNormHalf()
    op.set_gamma(cuopjit.tensor(np.array([65504, 65504, 1, 1], np.float16)))
    op.set_beta(cuopjit.tensor(np.array([0, 0, 1, 1], np.float16)))
    y = guarded(x.shape, "float16")
    op.forward(cuopjit.tensor(x), y)
    check_guards(y)
    out = y.to_numpy().astype(np.float64)
    assert np.array_equal(out[[0, 2], :2], [[np.inf, -np.inf], [-np.inf, np.inf]])
    assert np.all(np.abs(out[[0, 2], 2:] - 1) <= 2.0 ** -10) and np.all(np.isnan(out[1]))


@pytest.mark.parametrize("axis", [-1, 0])
def test_float16_softmax_of_extremes(rng, axis):
    """+-65504 and -inf stay finite arithmetic (exp(-131008) = 0, exp(-inf) = 0); +inf or NaN in a row (a column
    for axis 0) makes all of it NaN, as the float64 reference (NumPy) says."""
    a = rng.standard_normal((64, 1000)).astype(np.float16)
    a[3, 5], a[3, 7], a[9, :500], a[11, 2] = 65504, -65504, -np.inf, -65504
    a[20, 20], a[30, 30] = np.inf, np.nan
    if axis == 0:
        a = np.ascontiguousarray(a.T)
    y = guarded(a.shape, "float16")
    cuopjit.SoftmaxHalf().forward(cuopjit.tensor(a), y, axis=axis)
    check_guards(y)
    ref, bound = softmax_half(a, axis)
    along = 0 if axis == -1 else 1          # rows (axis -1) or columns (axis 0) that hold +inf or NaN
    bad = np.isnan(ref).any(axis=axis)
    out = y.to_numpy()
    assert bad.sum() == 2 and np.all(np.isnan(np.compress(bad, out, axis=along)))
    assert_half(np.compress(~bad, out, axis=along), np.compress(~bad, ref, axis=along),
                np.compress(~bad, bound, axis=along), "float16 softmax of extremes")
