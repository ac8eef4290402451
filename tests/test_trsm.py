"""TRSM: the blocked plan (leaves on diagonal blocks, GEMM family updates in between, in place on X) checked in
NumPy on the CPU for every side/uplo/trans/diag with NaN in the unread triangle, kernels compile for sm_80
and sm_90a, errors raise before launch; on a GPU, TrsmFloat/TrsmDouble solve well-conditioned (diagonally
dominant) systems for every mode and odd sizes, against np.linalg.solve and by residual, in place and not,
X NaN-poisoned, and a zero pivot gives inf/NaN as LAPACK's does."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import cuopjit
from cuopjit.ops.gemm import trsm
from cuopjit.target import named

import blas_emulate
from blas_emulate import fake, run_operator, set_fake_weight
from conftest import build_once, check_guards, family_plans, guarded, make_config

DTYPES = [np.float32, np.float64]
SM90 = named("sm_90")
MODES = list(itertools.product((0, 1), repeat=4))   # (side, uplo, trans, diag)


def _op(dtype, side, uplo, trans, diag, alpha=1.0):
    return (cuopjit.TrsmFloat if dtype == np.float32 else cuopjit.TrsmDouble)(side, uplo, trans, diag, alpha)


def _triangular(rng, d: int, upper: bool, unit: bool):
    """(the triangular matrix op() is taken of, the stored array: NaN outside the triangle and on a unit diagonal).

    Diagonally dominant: off-diagonal entries in (-1, 1) / d, diagonal in [1, 2), so cond(A) < 4."""
    t = rng.uniform(-1, 1, (d, d)) / d
    t = np.triu(t, 1) if upper else np.tril(t, -1)
    np.fill_diagonal(t, 1.0 if unit else rng.uniform(1, 2, d))
    stored = t.copy()
    stored[np.tril_indices(d, -1) if upper else np.triu_indices(d, 1)] = np.nan
    if unit:
        np.fill_diagonal(stored, np.nan)
    return t, stored


def _solve(t, b, side, trans, alpha):
    op = t.T if trans else t
    return np.linalg.solve(op, alpha * b) if not side else np.linalg.solve(op.T, alpha * b.T).T


# --- CPU ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_kernel_compiles(arch):
    """The representative plans, and the other leaf size auto-tuning may pick (float32 128 then 64, float64
    64 then 128)."""
    t = named(arch)
    build_once(family_plans(trsm.FAMILY, {}, t), t)
    cfg = make_config().snapshot()
    for problem, sizes in zip(trsm.problems()[::6], ([128, 64], [64, 128])):
        assert [c.nb for c in trsm.choices(problem, cfg, t)] == sizes
        build_once([trsm.plan(problem, c, t) for c in trsm.choices(problem, cfg, t)], t)


def test_leaf_sizes_need_shared_memory_that_fits():
    """float64 leaves of 128 stage 134 KB; an sm_86 block has 99 KB."""
    cfg = make_config().snapshot()
    double = trsm.TrsmProblem("float64", 300, 40, False, False, False, False, 1.0, True, False)
    assert [c.nb for c in trsm.choices(double, cfg, named("sm_86"))] == [64]
    assert [c.nb for c in trsm.choices(double, cfg, SM90)] == [64, 128]


@pytest.mark.parametrize("side, uplo, trans, diag", MODES)
@pytest.mark.parametrize("inplace", [False, True])
def test_plans_solve_every_mode(rng, side, uplo, trans, diag, inplace):
    """Both leaf sizes: 64 (leaves of one inverted block, the last partial) and 128 (a leaf of 128 and one of
    102: two halves, the second partial)."""
    m, n = (230, 77) if side == 0 else (77, 230)
    d = n if side else m
    t, stored = _triangular(rng, d, bool(uplo), bool(diag))
    alpha = 1.0 if inplace else 2.0
    op = _op(np.float64, side, uplo, trans, diag, alpha)
    set_fake_weight(op, stored, "set_matrix_a")
    b = rng.standard_normal((m, n))
    bufs = run_operator(op, [b, b.copy() if inplace else np.full((m, n), np.nan)], SM90,
                        same=(0, 1) if inplace else None)   # the default plan: leaves of 64
    assert np.allclose(bufs[2].reshape(m, n), _solve(t, b, side, trans, alpha), rtol=1e-10, atol=1e-12)
    x = fake([m, n], "float64", ptr=1 << 31)
    problem = op.problem(x if inplace else fake([m, n], "float64", ptr=1 << 30), x)
    plan = trsm.plan(problem, trsm.choices(problem, make_config().snapshot(), SM90)[1], SM90)
    assert sorted(kl.args[-4].value for kl in plan.launches if kl.spec.kernel == "trsm_apply") == [102, 128]
    bufs = [stored.ravel().copy(), b.ravel().copy(), b.ravel().copy() if inplace else np.full(m * n, np.nan),
            np.full(plan.workspace // 8, np.nan)]
    blas_emulate.run(plan, bufs, 8)
    assert np.allclose(bufs[2].reshape(m, n), _solve(t, b, side, trans, alpha), rtol=1e-10, atol=1e-12)


def test_3xtf32_updates_run_every_launch_of_their_gemm_plans(rng):
    """Under precision='3xtf32' a GEMM update is three launches (split A, split B, the product on wgmma) or, split in
    the kernel, one: all run on the update's sub-matrices, in order, in the GEMM's part of the workspace (the updates
    wide enough for the split to pay; the others run the exact SIMT kernel)."""
    m, n = 1200, 1024
    t, stored = _triangular(rng, m, False, False)
    op = _op(np.float32, 0, 0, 0, 0, 2.0)
    set_fake_weight(op, stored, "set_matrix_a")
    b = rng.standard_normal((m, n))
    problem = op.problem(fake([m, n], "float32", ptr=1 << 30), fake([m, n], "float32", ptr=1 << 31))
    plan = trsm.plan(problem, trsm.choices(problem, make_config(precision="3xtf32").snapshot(), SM90)[0], SM90)
    kinds = [kl.spec.kernel for kl in plan.launches]
    copies = [kl for kl in plan.launches if kl.spec.kernel == "gemm_wgmma" and not dict(kl.spec.params).get("INREG")]
    assert "gemm_wgmma" in kinds and kinds.count("tf32_split") == 2 * len(copies)
    bufs = [stored.ravel().copy(), b.ravel().copy(), np.full(m * n, np.nan), np.full(plan.workspace // 4, np.nan)]
    blas_emulate.run(plan, bufs, 4)
    assert np.allclose(bufs[2].reshape(m, n), _solve(t, b, 0, 0, 2.0), rtol=1e-5, atol=1e-6)


def test_plan_shape():
    """One launch inverts every 64 x 64 diagonal block, then leaves of 128 unknowns (float32) with GEMM family
    updates between them; alpha or a separate X adds a scale first."""
    op = cuopjit.TrsmFloat(0, 0, 0, 0)
    op.set_matrix_a(fake([256, 256]))
    b = fake([256, 100], ptr=1 << 30)
    launches = op.plan(b, b, target=SM90).launches
    assert [kl.spec.kernel for kl in launches] == ["trsm_invert", "trsm_apply", "gemm", "trsm_apply"]
    assert launches[0].grid[0] == 256 // trsm.BLOCK
    kinds = [kl.spec.kernel for kl in op.plan(b, fake([256, 100], ptr=1 << 31), target=SM90).launches]
    assert kinds[0] == "trsm_scale" and kinds.count("gemm") == 1


def test_modes_as_ints_and_words():
    op = cuopjit.TrsmDouble("right", "upper", "T", "unit")
    assert (op.side, op.uplo, op.trans, op.diag) == ("right", "upper", True, "unit")
    op = cuopjit.TrsmFloat(0, 1, 0, 0)
    assert (op.side, op.uplo, op.trans, op.diag) == ("left", "upper", False, "non_unit")
    with pytest.raises(ValueError, match=r"TrsmFloat: diag='x' is not understood: use 0/'non_unit' or 1/'unit'"):
        cuopjit.TrsmFloat(0, 0, 0, "x")
    with pytest.raises(ValueError, match=r"TrsmFloat: trans=3 is not understood: use 0/'N' or 1/'T'"):
        cuopjit.TrsmFloat(0, 0, 3, 0)


def test_errors_raise_before_launch():
    op = cuopjit.TrsmFloat()
    with pytest.raises(ValueError, match=r"TrsmFloat: no matrix: call set_matrix_a\(A\) before forward"):
        op.forward(fake([4, 4]), fake([4, 4]))
    with pytest.raises(ValueError, match=r"TrsmFloat: A must be square, got shape \[4, 5\]"):
        op.set_matrix_a(fake([4, 5]))
    op.set_matrix_a(fake([4, 4]))
    with pytest.raises(ValueError, match=r"side=left: A is 4 x 4 and b has shape \[5, 4\]: op\(A\) X needs b with 4 "
                                         r"rows"):
        op.forward(fake([5, 4]), fake([5, 4], ptr=1 << 30))
    with pytest.raises(ValueError, match=r"TrsmFloat: x has shape \[4, 3\], expected \[4, 5\]"):
        op.forward(fake([4, 5]), fake([4, 3], ptr=1 << 30))
    with pytest.raises(ValueError, match="TrsmFloat: x overlaps b without being b"):
        op.forward(fake([4, 5], ptr=1 << 30), fake([4, 5], ptr=(1 << 30) + 16))
    with pytest.raises(TypeError, match="TrsmFloat: b is float64"):
        op.forward(fake([4, 5], "float64"), fake([4, 5], ptr=1 << 30))


# --- GPU ---------------------------------------------------------------------------------------------

def _forward_with(op, b, x, nb: int | None):
    """op.forward(b, x), or the plan of leaf size `nb` (another choice of the family) run on the same operands."""
    if nb is None:
        assert op.forward(b, x) is x
        return
    from cuopjit.device import driver
    from cuopjit.run import executor
    from cuopjit.config import DEFAULT
    from cuopjit.target import of_device
    problem, target = op.problem(b, x), of_device(driver.current_ordinal())
    choice = next(c for c in trsm.choices(problem, DEFAULT.config, target) if c.nb == nb)
    executor.load(trsm.plan(problem, choice, target), driver.current_ordinal(), DEFAULT)(op.bind(b, x)[1], 0)


def _run(rng, dtype, m, n, side, uplo, trans, diag, alpha=1.0, inplace=False, nb=None):
    d = n if side else m
    t, stored = _triangular(rng, d, bool(uplo), bool(diag))
    b = rng.standard_normal((m, n)).astype(dtype)
    op = _op(dtype, side, uplo, trans, diag, alpha)
    op.set_matrix_a(cuopjit.tensor(stored.astype(dtype)))
    if inplace:
        x = guarded([m, n], dtype, fill=b)
        _forward_with(op, x, x, nb)
    else:
        x = guarded([m, n], dtype)
        _forward_with(op, cuopjit.tensor(b), x, nb)
    check_guards(x)
    out = x.to_numpy().astype(np.float64)
    t64 = t.astype(dtype).astype(np.float64)
    ref = _solve(t64, b.astype(np.float64), side, trans, alpha)
    u = np.finfo(dtype).eps
    assert np.all(np.isfinite(out))
    # Forward error: cond(A) < 4 and d + 4 roundings per unknown; backward error: the residual.
    assert np.linalg.norm(out - ref) <= 4 * (d + 4) * u * np.linalg.norm(ref)
    op_t = t64.T if trans else t64
    resid = (op_t @ out if not side else out @ op_t) - alpha * b.astype(np.float64)
    assert np.linalg.norm(resid) <= 2 * (d + 4) * u * np.linalg.norm(op_t) * np.linalg.norm(out)


@pytest.mark.gpu
@pytest.mark.parametrize("side, uplo, trans, diag", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_mode_and_size(rng, dtype, side, uplo, trans, diag):
    # 64 and 130: a whole leaf, and leaves of 64, 64 and 2 unknowns (trsm_apply's tail); 33 / 1000 vectors:
    # a partial tile of right-hand sides.
    for m, n in ((1, 1), (7, 7), (33, 33), (64, 130), (130, 64), (1000, 33), (33, 1000), (1000, 1000)):
        _run(rng, dtype, m, n, side, uplo, trans, diag, alpha=1.5)


@pytest.mark.gpu
@pytest.mark.parametrize("side, uplo", list(itertools.product((0, 1), (0, 1))))
@pytest.mark.parametrize("dtype", DTYPES)
def test_4097_in_place(rng, dtype, side, uplo):
    m, n = (4097, 100) if side == 0 else (100, 4097)
    _run(rng, dtype, m, n, side, uplo, 0, 0, inplace=True)
    _run(rng, dtype, 257, 257, side, uplo, 1, 1, alpha=-2.0, inplace=True)


@pytest.mark.gpu
@pytest.mark.parametrize("side, uplo, trans, diag", [(0, 0, 0, 0), (0, 1, 1, 1), (1, 0, 1, 0), (1, 1, 0, 1)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_other_leaf_size(rng, dtype, side, uplo, trans, diag):
    """The leaf size auto-tuning may pick instead of the default (float32 64, float64 128): whole, partial
    and single leaves, in place and not."""
    nb = 64 if dtype == np.float32 else 128
    for m, n in ((7, 7), (300, 33), (33, 300), (1000, 1000)):
        _run(rng, dtype, m, n, side, uplo, trans, diag, alpha=0.5, nb=nb)
    _run(rng, dtype, 257, 257, side, uplo, trans, diag, inplace=True, nb=nb)


@pytest.mark.gpu
def test_the_seed_example_solves_in_place(rng):
    t, stored = _triangular(rng, 1000, False, False)
    b = rng.standard_normal((1000, 1000)).astype(np.float32)
    bt = cuopjit.tensor(b)
    trsm_op = cuopjit.TrsmFloat(0, 0, 0, 0, 1.0)
    trsm_op.set_matrix_a(cuopjit.tensor(stored.astype(np.float32)))
    trsm_op.forward(bt, bt)
    ref = np.linalg.solve(t.astype(np.float32).astype(np.float64), b.astype(np.float64))
    assert np.linalg.norm(bt.to_numpy() - ref) <= 4 * 1004 * np.finfo(np.float32).eps * np.linalg.norm(ref)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_zero_pivot_gives_inf_or_nan(rng, dtype):
    t, stored = _triangular(rng, 100, False, False)
    stored[50, 50] = 0.0
    op = _op(dtype, 0, 0, 0, 0)
    op.set_matrix_a(cuopjit.tensor(stored.astype(dtype)))
    x = guarded([100, 10], dtype)
    op.forward(cuopjit.tensor(rng.standard_normal((100, 10)).astype(dtype)), x)
    out = x.to_numpy()
    assert np.all(np.isfinite(out[:50])) and not np.any(np.isfinite(out[50:]))
