"""MatMul / BatchMatMul and the GEMM family's batch dimension: NumPy broadcasting planned as one batched launch
(checked by running the plans in NumPy on the CPU), the 2-D product is GemmFloat's plan, batched kernels
compile for sm_80 and sm_90a, errors raise before launch; on a GPU, results match float64 NumPy with C
NaN-poisoned, including a broadcast weight, a batch past the grid's z limit and TF32 tensor cores."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit.ops.gemm import matmul, plans as gk
from cuopjit.target import named

import blas_emulate
from blas_emulate import fake, run_operator
from conftest import build_once, check_guards, family_plans, guarded, make_config

DTYPES = [np.float32, np.float64]
SM90 = named("sm_90")
BROADCASTS = [((3, 1, 5, 4), (1, 4, 4, 6)), ((2, 3, 5, 4), (4, 6)), ((7, 5, 4), (1, 4, 6)), ((4,), (2, 4, 6)),
              ((5, 4), (4,)), ((2, 1, 3, 5, 4), (4, 1, 4, 6)), ((6, 5, 4), (6, 4, 3))]


def _op(dtype, batch=False):
    if batch:
        return cuopjit.BatchMatMulFloat() if dtype == np.float32 else cuopjit.BatchMatMulDouble()
    return cuopjit.MatMulFloat() if dtype == np.float32 else cuopjit.MatMulDouble()


# --- CPU ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_batched_kernels_compile(arch):
    t = named(arch)
    plans = family_plans(matmul.BATCH_FAMILY, {}, t) + family_plans(matmul.BATCH_FAMILY, {"enable_tensor_core": True}, t)
    build_once(plans, t)


@pytest.mark.parametrize("sa, sb", BROADCASTS)
def test_broadcasting_plans_compute_numpy_matmul(rng, sa, sb):
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    ref = np.matmul(a, b)
    out = run_operator(cuopjit.MatMulDouble(), [a, b, np.full(ref.shape, np.nan)], SM90)[2]
    assert np.allclose(out.reshape(ref.shape), ref, rtol=1e-12, atol=1e-12)


def test_one_launch_wherever_each_operand_runs_along_the_batch_or_is_broadcast():
    def launches(sa, sb, sc):
        return len(cuopjit.MatMulFloat().plan(fake(sa), fake(sb, ptr=1 << 30), fake(sc, ptr=1 << 31),
                                             target=SM90).launches)
    assert launches((100, 256, 256), (100, 256, 256), (100, 256, 256)) == 1
    assert launches((8, 100, 256, 256), (256, 256), (8, 100, 256, 256)) == 1
    assert launches((1, 256, 256), (100, 256, 256), (100, 256, 256)) == 1
    assert launches((3, 1, 5, 4), (1, 4, 4, 6), (3, 4, 5, 6)) == 3   # mixed broadcast: one launch per outer index


def test_3xtf32_plans_repeat_every_launch_per_outer_index(rng):
    """A 3xTF32 GEMM plan is three launches (split A, split B, the product): a mixed broadcast repeats all three
    for each outer index on that index's matrices, one after another in one workspace."""
    # 400 x 405: wide enough for the split to pay (gemm_wgmma.narrow); B's odd rows: the split copies
    sa, sb = (3, 1, 400, 8), (1, 2, 8, 405)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    ref = np.matmul(a, b)
    tensors = (fake(sa, ptr=1 << 24), fake(sb, ptr=2 << 24), fake(ref.shape, ptr=3 << 24))
    plan = matmul.FAMILY.default_plan(cuopjit.MatMulFloat().problem(*tensors),
                                      make_config(precision="3xtf32").snapshot(), SM90)
    assert [kl.spec.kernel for kl in plan.launches] == ["tf32_split", "tf32_split", "gemm_wgmma"] * 3
    bufs = [a.ravel().copy(), b.ravel().copy(), np.full(ref.size, np.nan), np.full(plan.workspace // 4, np.nan)]
    blas_emulate.run(plan, bufs, 4)
    assert np.allclose(bufs[2].reshape(ref.shape), ref, rtol=1e-5, atol=1e-5)


def test_2d_matmul_is_the_gemm_plan():
    mm = cuopjit.MatMulFloat().plan(fake([4096, 4096]), fake([4096, 4096], ptr=1 << 30), fake([4096, 4096], ptr=1 << 31),
                                    target=SM90)
    g = gk.FAMILY.default_plan(gk.packed("float32", 4096, 4096, 4096), make_config().snapshot(), SM90)
    assert mm == g


def test_batch_past_the_grid_z_limit_folds_into_x():
    g = gk.GemmProblem("float32", 64, 64, 64, False, False, True, 1.0, 0.0, 64, 64, 64, batch=200000,
                       stride_a=4096, stride_b=0, stride_c=4096)
    (kl,) = gk.FAMILY.default_plan(g, make_config(tile_size=64).snapshot(), SM90).launches
    assert kl.grid == (4, 1, 65535)   # 4 = 1 tile of n x ceil(200000 / 65535) batch groups
    assert dict(kl.spec.params)["batched"] is True


def test_unbatched_gemm_specs_do_not_change():
    (kl,) = gk.FAMILY.default_plan(gk.packed("float32", 2048, 2048, 2048), make_config().snapshot(), SM90).launches
    assert "batched" not in dict(kl.spec.params) and len(kl.args) == 11 and kl.grid[2] == 1


def test_errors_raise_before_launch():
    mm, bmm = cuopjit.MatMulFloat(), cuopjit.BatchMatMulFloat()
    with pytest.raises(ValueError, match=r"MatMulFloat: a has shape \[2, 4\] and b has shape \[5, 3\]: op\(a\) has "
                                         r"4 columns but op\(b\) has 5 rows"):
        mm.forward(fake([2, 4]), fake([5, 3]), fake([2, 3]))
    with pytest.raises(ValueError, match=r"MatMulFloat: c has shape \[2, 4\], expected \[2, 3\]"):
        mm.forward(fake([2, 5]), fake([5, 3]), fake([2, 4]))
    with pytest.raises(ValueError, match=r"the batch dimensions of a \[2, 2, 5\] and b \[3, 5, 3\] do not broadcast"):
        mm.forward(fake([2, 2, 5]), fake([3, 5, 3]), fake([3, 2, 3]))
    with pytest.raises(TypeError, match="MatMulFloat: b is float64"):
        mm.forward(fake([2, 5]), fake([5, 3], "float64"), fake([2, 3]))
    with pytest.raises(ValueError, match=r"BatchMatMulFloat: a has shape \[2, 5\] and b has shape \[1, 5, 3\]: both "
                                         r"must be 3-D"):
        bmm.forward(fake([2, 5]), fake([1, 5, 3]), fake([1, 2, 3]))


# --- GPU ---------------------------------------------------------------------------------------------

def _check(rng, dtype, sa, sb, batch=False, config=None, tol=None):
    a = rng.standard_normal(sa).astype(dtype)
    b = rng.standard_normal(sb).astype(dtype)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    c = guarded(ref.shape, dtype)
    op = _op(dtype, batch)
    if config is not None:
        op = (cuopjit.JITMatMulFloat if dtype == np.float32 else cuopjit.JITMatMulDouble)(op) if not batch else (
            cuopjit.JITBatchMatMulFloat if dtype == np.float32 else cuopjit.JITBatchMatMulDouble)(op)
        op.set_jit_config(config)
    assert op.forward(cuopjit.tensor(a), cuopjit.tensor(b), c) is c
    check_guards(c)
    out = c.to_numpy().astype(np.float64)
    k = sa[-1]
    bound = (tol or 2 * (k + 4) * np.finfo(dtype).eps) * np.matmul(np.abs(a.astype(np.float64)),
                                                                     np.abs(b.astype(np.float64)))
    assert np.all(np.isfinite(out)) and np.all(np.abs(out - ref) <= bound)


@pytest.mark.gpu
@pytest.mark.parametrize("sa, sb", BROADCASTS + [((1000, 1000), (1000, 1000)), ((33, 4097), (4097, 7)),
                                                 ((3, 1, 33, 7), (4, 7, 1000))])
@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_matches_numpy(rng, dtype, sa, sb):
    _check(rng, dtype, sa, sb)


@pytest.mark.gpu
@pytest.mark.parametrize("sa, sb", [((100, 256, 256), (100, 256, 256)), ((64, 33, 7), (1, 7, 1000)),
                                    ((1, 1, 1), (5, 1, 1)), ((7, 33, 33), (7, 33, 33)), ((3, 4097, 33), (3, 33, 5))])
@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_matmul_matches_numpy(rng, dtype, sa, sb):
    _check(rng, dtype, sa, sb, batch=True)


@pytest.mark.gpu
def test_a_batch_past_the_grid_z_limit(rng):
    _check(rng, np.float32, (70000, 3, 5), (1, 5, 2), batch=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_cores_through_the_jit_wrapper(rng, dtype):
    cfg = cuopjit.JITConfig()
    cfg.kernel_type = "tensor_core"
    tol = 2e-3 if dtype == np.float32 else None   # TF32 operands: 10 mantissa bits
    _check(rng, dtype, (100, 256, 256), (100, 256, 256), batch=True, config=cfg, tol=tol)
    _check(rng, dtype, (2, 3, 33, 65), (65, 17), config=cfg, tol=tol)
