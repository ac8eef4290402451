"""The float32 gelu of the expression language (cuopjit/expr/cuda.py: x * Phi(x), Phi(-|x|) = 2^-p(|x|) with a fitted
degree-8 p, tools/fit_gelu.py) against float64: its arithmetic emulated in float32 on the CPU (absolute error within
|x| * 2^-23 before ex2.approx's 2 ulp), and the kernel on the GPU within the documented |x| * 2^-22, with -0, +-inf,
NaN, denormals and the cut at |x| = 6."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cuopjit
from cuopjit.expr import cuda

from conftest import check_guards, guarded

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1e-30, -1e-30, 1e30, -1e30, 5.999, 6.0, 6.001,
           -5.999, -6.0, -6.001, 3e38, -3e38]


def _reference(x: np.ndarray) -> np.ndarray:
    """x Phi(x) in float64 (Phi by erfc: no cancellation for negative x)."""
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        return x * 0.5 * np.vectorize(math.erfc)(-x / math.sqrt(2.0))


def _emulated(x: np.ndarray) -> np.ndarray:
    """The kernel's arithmetic in float32 (numpy rounds each product and sum: at least the fma's error)."""
    coefs = np.array(cuda._GELU_TAIL, np.uint32).view(np.float32)
    a = np.abs(x)
    p = np.full_like(x, coefs[0])
    for c in coefs[1:]:
        p = (p * a + c).astype(np.float32)
    q = np.where(a < np.float32(6), np.exp2(p.astype(np.float64)).astype(np.float32), np.float32(0))
    return (x * np.where(x < 0, q, np.float32(1) - q)).astype(np.float32)


def _grid() -> np.ndarray:
    return np.linspace(-10, 10, 1 << 20, dtype=np.float32)


def test_the_polynomial_in_float32():
    x = _grid()
    err = np.abs(_emulated(x).astype(np.float64) - _reference(x))
    worst = np.max(err / np.abs(x))
    assert np.all(err <= np.abs(x).astype(np.float64) * 2.0 ** -23), f"largest error / |x| {worst:.3g}"


@pytest.mark.gpu
def test_the_kernel_within_its_bound():
    x = np.concatenate([_grid(), np.array(SPECIAL, np.float32)])
    out = guarded(x.shape)
    cuopjit.ElementwiseFloat("out = gelu(x)").forward(x=cuopjit.tensor(x), out=out)
    check_guards(out)
    got, want = out.to_numpy().astype(np.float64), _reference(x)
    finite = np.isfinite(want)
    assert np.all(np.abs(got - want)[finite] <= np.abs(x[finite]).astype(np.float64) * 2.0 ** -22 + 1e-38)
    s = got[-len(SPECIAL):]            # SPECIAL's order: 0, -0, inf, -inf, nan, ..., 3e38, -3e38
    assert s[0] == 0 and s[1] == 0 and math.copysign(1, s[1]) < 0 and s[2] == np.inf
    assert math.isnan(s[3]) and math.isnan(s[4]) and s[-2] == np.float32(3e38) and s[-1] == 0
