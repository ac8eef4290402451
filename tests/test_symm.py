"""SYMM: modes as ints or words, the plan (fill the full matrix from one triangle, then the GEMM family) checked
in NumPy on the CPU with NaN in the unread triangle, kernels compile for sm_80 and sm_90a, errors raise
before launch; on a GPU, SymmFloat/SymmDouble match float64 NumPy for both sides and triangles, odd sizes
and alpha/beta, with C NaN-poisoned and NaN in the triangle A does not use."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import cuopjit
from cuopjit.ops.gemm import symm
from cuopjit.target import named

import blas_emulate
from blas_emulate import fake, run_operator, set_fake_weight
from conftest import build_once, check_guards, family_plans, guarded, make_config

DTYPES = [np.float32, np.float64]
SM90 = named("sm_90")
MODES = list(itertools.product((0, 1), (0, 1)))   # (side, uplo)


def _op(dtype, side, uplo, alpha=1.0, beta=0.0):
    return (cuopjit.SymmFloat if dtype == np.float32 else cuopjit.SymmDouble)(side, uplo, alpha, beta)


def _symmetric(rng, d: int, upper: bool):
    """(the symmetric matrix, the stored array with NaN in the triangle SYMM must not read)."""
    s = rng.standard_normal((d, d))
    s = s + s.T
    stored = s.copy()
    stored[np.tril_indices(d, -1) if upper else np.triu_indices(d, 1)] = np.nan
    return s, stored


# --- CPU ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_kernel_compiles(arch):
    t = named(arch)
    build_once(family_plans(symm.FAMILY, {}, t), t)


@pytest.mark.parametrize("side, uplo", MODES)
@pytest.mark.parametrize("m, n", [(45, 70), (45, 1), (1, 70)], ids=["gemm", "one-column", "one-row"])
def test_plans_read_one_triangle_and_compute_the_product(rng, side, uplo, m, n):
    """One row or column (B a vector) plans the fill and then the GEMM family's GEMV route."""
    d = n if side else m
    s, stored = _symmetric(rng, d, bool(uplo))
    op = _op(np.float64, side, uplo, 1.5, 0.5)
    set_fake_weight(op, stored)
    b, c = rng.standard_normal((m, n)), rng.standard_normal((m, n))
    out = run_operator(op, [b, c], SM90)[2].reshape(m, n)
    ref = 1.5 * (b @ s if side else s @ b) + 0.5 * c
    assert np.allclose(out, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("side", [0, 1])
def test_3xtf32_runs_every_launch_of_the_gemm_plan_on_the_filled_matrix(rng, side):
    """Under precision='3xtf32' the product is three launches (split A, split B, wgmma): after the fill, all
    three run on W, B and C, in the GEMM's part of the workspace (a product wide enough for the split to pay; odd N:
    unaligned rows, which the split copies take)."""
    m, n = 400, 433
    d = n if side else m
    s, stored = _symmetric(rng, d, True)
    op = _op(np.float32, side, 1, 1.5, 0.0)
    set_fake_weight(op, stored)
    problem = op.problem(fake([m, n], "float32", ptr=1 << 30), fake([m, n], "float32", ptr=1 << 31))
    plan = symm.FAMILY.default_plan(problem, make_config(precision="3xtf32").snapshot(), SM90)
    assert [kl.spec.kernel for kl in plan.launches] == ["symm_fill", "tf32_split", "tf32_split", "gemm_wgmma"]
    b = rng.standard_normal((m, n))
    bufs = [stored.ravel().copy(), b.ravel().copy(), np.full(m * n, np.nan), np.full(plan.workspace // 4, np.nan)]
    blas_emulate.run(plan, bufs, 4)
    # hi + lo carries x to 2^-21 relative: each product to 2^-20 of |s| |b| (the emulation sums in float64)
    bound = 2.0 ** -20 * 1.5 * (np.abs(b) @ np.abs(s) if side else np.abs(s) @ np.abs(b))
    assert np.all(np.abs(bufs[2].reshape(m, n) - 1.5 * (b @ s if side else s @ b)) <= bound)


def test_modes_as_ints_and_words():
    for side, uplo in (("left", "upper"), ("L", "U"), (0, 1), ("CUBLAS_SIDE_LEFT", "CUBLAS_FILL_MODE_UPPER")):
        op = cuopjit.SymmFloat(side, uplo)
        assert (op.side, op.uplo) == ("left", "upper")
    assert cuopjit.SymmDouble("right", 0).side == "right" and cuopjit.SymmDouble("R", "lower").uplo == "lower"
    with pytest.raises(ValueError, match=r"SymmFloat: uplo='middle' is not understood: use 0/'lower' or 1/'upper'"):
        cuopjit.SymmFloat(0, "middle")
    with pytest.raises(ValueError, match=r"SymmFloat: side=2 is not understood: use 0/'left' or 1/'right'"):
        cuopjit.SymmFloat(2, 0)


def test_errors_raise_before_launch():
    op = cuopjit.SymmFloat(0, 1)
    with pytest.raises(ValueError, match=r"SymmFloat: no weight: call set_weight\(A\) before forward"):
        op.forward(fake([4, 4]), fake([4, 4]))
    with pytest.raises(ValueError, match=r"SymmFloat: weight must be square, got shape \[4, 5\]"):
        op.set_weight(fake([4, 5]))
    op.set_weight(fake([4, 4]))
    with pytest.raises(ValueError, match=r"side=left: A is 4 x 4 and b has shape \[5, 4\]: A @ B needs b with 4 rows"):
        op.forward(fake([5, 4]), fake([5, 4]))
    with pytest.raises(ValueError, match=r"SymmFloat: c has shape \[4, 3\], expected \[4, 5\]"):
        op.forward(fake([4, 5]), fake([4, 3]))
    right = cuopjit.SymmFloat("right", "lower")
    right.set_weight(fake([4, 4]))
    with pytest.raises(ValueError, match=r"B @ A needs b with 4 columns"):
        right.forward(fake([4, 5]), fake([4, 5]))


# --- GPU ---------------------------------------------------------------------------------------------

def _run(rng, dtype, m, n, side, uplo, alpha=1.0, beta=0.0):
    d = n if side else m
    s, stored = _symmetric(rng, d, bool(uplo))
    b = rng.standard_normal((m, n)).astype(dtype)
    c0 = rng.standard_normal((m, n)).astype(dtype)
    c = guarded([m, n], dtype, fill=c0 if beta else None)
    op = _op(dtype, side, uplo, alpha, beta)
    op.set_weight(cuopjit.tensor(stored.astype(dtype)))
    assert op.forward(cuopjit.tensor(b), c) is c
    check_guards(c)
    s32, b64 = s.astype(dtype).astype(np.float64), b.astype(np.float64)
    ref = alpha * (b64 @ s32 if side else s32 @ b64) + beta * c0.astype(np.float64)
    bound = 2 * (d + 4) * np.finfo(dtype).eps * (abs(alpha) * (np.abs(b64) @ np.abs(s32) if side else
                                                                np.abs(s32) @ np.abs(b64)) + abs(beta) * np.abs(c0))
    out = c.to_numpy().astype(np.float64)
    assert np.all(np.isfinite(out)) and np.all(np.abs(out - ref) <= bound)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n", [(1, 1), (7, 7), (33, 33), (1000, 1000), (33, 1000), (1000, 7)])
@pytest.mark.parametrize("side, uplo", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_numpy(rng, dtype, side, uplo, m, n):
    _run(rng, dtype, m, n, side, uplo)


@pytest.mark.gpu
@pytest.mark.parametrize("side, uplo", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_4097_and_alpha_beta(rng, dtype, side, uplo):
    m, n = (33, 4097) if side else (4097, 33)
    _run(rng, dtype, m, n, side, uplo, alpha=-0.5, beta=2.0)
