"""cuopjit.fold_batchnorm: scale and shift in float64 against the BatchNorm formula, result dtypes, errors.
(On device Tensors: tests/test_elementwise_expr_gpu.py.)"""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit


def params(rng, c=37, dtype=np.float32):
    gamma, beta, mean = (rng.standard_normal(c).astype(dtype) for _ in range(3))
    var = (rng.random(c) * 3).astype(dtype)
    return gamma, beta, mean, var


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_folded_batchnorm_equals_batchnorm(dtype, rng):
    gamma, beta, mean, var = params(rng, dtype=dtype)
    scale, shift = cuopjit.fold_batchnorm(gamma, beta, mean, var, 1e-5)
    assert scale.dtype == shift.dtype == dtype and scale.shape == shift.shape == (37,)
    x = rng.standard_normal((4, 37)) * 3
    g, b, m, v = (a.astype(np.float64) for a in (gamma, beta, mean, var))
    want = (x - m) / np.sqrt(v + 1e-5) * g + b
    got = x * scale.astype(np.float64) + shift.astype(np.float64)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    assert np.allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_computed_in_float64_then_rounded_once(rng):
    gamma, beta, mean, var = params(rng)
    scale, shift = cuopjit.fold_batchnorm(gamma, beta, mean, var, 1e-3)
    s64 = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-3)
    assert np.array_equal(scale, s64.astype(np.float32))
    assert np.array_equal(shift, (beta - mean.astype(np.float64) * s64).astype(np.float32))


def test_result_dtype_follows_the_float_parameters(rng):
    gamma, beta, mean, var = params(rng, c=4)
    assert cuopjit.fold_batchnorm(gamma, beta, mean.astype(np.float64), var)[0].dtype == np.float64
    assert cuopjit.fold_batchnorm([1, 2], [0, 0], [0, 1], [1, 4], 0)[0].dtype == np.float64
    assert cuopjit.fold_batchnorm([1, 2], [0, 0], [0, 1], np.array([1, 4], np.float32), 0)[0].dtype == np.float32
    scale, shift = cuopjit.fold_batchnorm([2.0], [1.0], [3.0], [4.0], 0.0)
    assert scale.tolist() == [1.0] and shift.tolist() == [-2.0]


@pytest.mark.parametrize("args, error, message", [
    (([1.0, 2.0], [0.0], [0.0, 0.0], [1.0, 1.0], 1e-5), ValueError, r"beta has shape \[1\] but gamma has shape \[2\]"),
    (([1.0], [0.0], [0.0], [-1.0], 1e-5), ValueError, r"channel 0 has var -1.0 and eps 1e-05"),
    (([1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.0], 0.0), ValueError, r"channel 1 has var 0.0"),
    (([1.0], [0.0], [0.0], [float("nan")], 1e-5), ValueError, r"channel 0 has var nan"),
    (([1.0], [0.0], [0.0], [1.0], -1e-5), ValueError, r"eps=-1e-05 is not allowed: use a number >= 0"),
    (([1.0], [0.0], [0.0], [1.0], "a"), TypeError, r"eps must be a number, got str"),
    ((["a"], [0.0], [0.0], [1.0], 1e-5), TypeError, r"gamma must be a float array or a cuopjit Tensor"),
])
def test_bad_parameters_are_refused(args, error, message):
    with pytest.raises(error, match=message):
        cuopjit.fold_batchnorm(*args)
