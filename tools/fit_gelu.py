"""The float32 GELU's polynomial (cuopjit/expr/cuda.py _GELU_TAIL): gelu(x) = x * Phi(x) with Phi(-|x|) = 2^-p(|x|),
p a degree-8 polynomial fitted to -log2 Phi(-y) on [0, 6] minimising the largest error of Phi itself (weight
Phi(-y): Lawson's iteration over weighted least squares on Chebyshev polynomials), rounded to float32. Prints the
coefficients (highest degree first, as bit patterns) and the float32 evaluation's largest error against float64
over [-8, 8] divided by |x| (Horner in float32 with one rounding per multiply and per add, ex2 exact then rounded:
the kernel's fma rounds once and ex2.approx adds at most 2 ulp of Phi(-|x|) <= 0.5, i.e. 2^-23 |x| more).

    python3 tools/fit_gelu.py
"""
import math

import numpy as np

Y, DEG = 6.0, 8


def tail(y):
    """Phi(-y) in float64."""
    return 0.5 * np.vectorize(math.erfc)(y / math.sqrt(2.0))


def fit():
    y = np.linspace(0.0, Y, 6001)
    target, weight = -np.log2(tail(y)), tail(y)
    basis = np.polynomial.chebyshev.chebvander(2 * y / Y - 1, DEG)
    lawson = np.ones_like(y)
    for _ in range(80):
        w = np.sqrt(lawson) * weight
        c = np.linalg.lstsq(basis * w[:, None], target * w, rcond=None)[0]
        lawson *= np.abs(basis @ c - target) * weight
        lawson /= lawson.sum()
    power = np.polynomial.Polynomial(np.polynomial.chebyshev.cheb2poly(c))(np.polynomial.Polynomial([-1, 2 / Y]))
    return (-power.coef).astype(np.float32)[::-1]         # -p, highest degree first


def gelu32(x, coefs):
    """The kernel's arithmetic in float32 (numpy rounds the product and the sum separately)."""
    a = np.abs(x)
    p = np.full_like(x, coefs[0])
    for c in coefs[1:]:
        p = (p * a + c).astype(np.float32)
    q = np.where(a < np.float32(Y), np.exp2(p.astype(np.float64)).astype(np.float32), np.float32(0))
    return (x * np.where(x < 0, q, (np.float32(1) - q).astype(np.float32))).astype(np.float32)


if __name__ == "__main__":
    coefs = fit()
    print("coefficients:", ", ".join(f"0x{int(c.view(np.uint32)):08x}" for c in coefs))
    x = np.linspace(-8, 8, 1600001).astype(np.float32)
    ref = x.astype(np.float64) * (1.0 - tail(x.astype(np.float64)))
    ref = np.where(x < 0, x.astype(np.float64) * tail(-x.astype(np.float64)), ref)
    err = np.abs(gelu32(x, coefs) - ref) / np.maximum(np.abs(x), 1e-30)
    print(f"largest error / |x|: {err.max():.3e} (2^-23 = {2.0 ** -23:.3e})")
