"""GEMV: plans (split reductions, shapes) checked by running them in NumPy on the CPU, every kernel compiles
for sm_80 and sm_90a, config fields change the code, argument errors raise before launch; on a GPU,
GemvFloat/GemvDouble match float64 NumPy for both transposes, odd sizes and alpha/beta, y NaN-poisoned."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit.ops.gemm import gemv
from cuopjit.target import named

from blas_emulate import fake, run_operator, set_fake_weight
from conftest import SEED_CONFIGS, build_once, check_guards, family_plans, guarded, make_config

DTYPES = [np.float32, np.float64]
SM90 = named("sm_90")
SIZES = [(1, 1), (7, 7), (33, 33), (1000, 1000), (4097, 33), (33, 4097), (33, 100000), (4097, 4097), (7, 2500000)]


def _op(dtype, trans=False, alpha=1.0, beta=0.0):
    return (cuopjit.GemvFloat if dtype == np.float32 else cuopjit.GemvDouble)(trans, alpha, beta)


def _tol(dtype, n: int) -> float:
    """Norm-wise bound: n products summed (+ alpha, beta and the final sum of partials)."""
    return 2 * (n + 4) * np.finfo(dtype).eps


# --- CPU ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_kernel_compiles(arch):
    t = named(arch)
    plans = family_plans(gemv.FAMILY, {}, t) + family_plans(gemv.FAMILY, {"kernel_type": "simple"}, t)
    build_once(plans, t)


@pytest.mark.parametrize("m, n", [(33, 100000), (1000, 1000), (4097, 33), (8192, 64), (5, 3)])
@pytest.mark.parametrize("trans", [False, True])
def test_plans_compute_the_product(rng, m, n, trans):
    """Split reductions, chunks and the final sum, emulated in NumPy, give alpha op(A) x + beta y."""
    op = _op(np.float64, trans, 2.0, 0.5)
    a = rng.standard_normal((m, n))
    set_fake_weight(op, a)
    x, y = rng.standard_normal(m if trans else n), rng.standard_normal(n if trans else m)
    out = run_operator(op, [x, y], SM90)[2]
    ref = 2.0 * ((a.T if trans else a) @ x) + 0.5 * y
    assert np.allclose(out, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_few_long_rows_share_blocks_and_split_only_when_large():
    cfg = make_config().snapshot()

    def plan(m, n, trans=False):
        return gemv.FAMILY.default_plan(gemv.GemvProblem("float32", m, n, trans, True, 1.0, 0.0, n), cfg, SM90)
    small = plan(33, 100000)      # launch-bound: one launch, 32 warps per row, no workspace
    assert [kl.spec.kernel for kl in small.launches] == ["gemv_n"] and small.workspace == 0
    assert small.launches[0].block == (1024, 1, 1) and dict(small.launches[0].spec.params)["GW"] == 32
    large = plan(33, 10 ** 7)     # 1.3 GB in 33 rows: the reduction is split, partial sums added by splitk_reduce
    assert [kl.spec.kernel for kl in large.launches] == ["gemv_n", "splitk_reduce"] and large.workspace > 0
    square = plan(8192, 8192)
    assert [kl.spec.kernel for kl in square.launches] == ["gemv_n"] and square.workspace == 0
    assert [kl.spec.kernel for kl in plan(8192, 8192, True).launches] == ["gemv_t", "splitk_reduce"]
    assert plan(1000, 1000, True).launches[0].block == (1024, 1, 1)


@pytest.mark.parametrize("field, value, param", [
    ("enable_memory_coalescing", False, ("VEC", 1)), ("enable_loop_unroll", False, ("unroll", False)),
    ("block_size", 512, ("THREADS", 512)), ("tile_size", 32, ("ITEMS", 8)), ("kernel_type", "simple", ("ITEMS", 1)),
    ("enable_shared_memory_opt", False, ("TY", 1))])
def test_every_field_changes_the_code(field, value, param):
    p = gemv.GemvProblem("float32", 8192, 8192, True, True, 1.0, 0.0, 8192)
    default = dict(gemv.FAMILY.default_plan(p, make_config().snapshot(), SM90).launches[0].spec.params)
    params = dict(gemv.FAMILY.default_plan(p, make_config(**{field: value}).snapshot(), SM90).launches[0].spec.params)
    assert params[param[0]] == param[1] != default[param[0]]


def test_seed_configurations_plan():
    for fields in SEED_CONFIGS:
        family_plans(gemv.FAMILY, fields, SM90)


def test_a_tile_size_no_kernel_takes_says_what_to_choose():
    with pytest.raises(ValueError, match="tile_size=256 is not available for streaming kernels: choose one of 0, 8"):
        family_plans(gemv.FAMILY, {"tile_size": 256}, SM90)


def test_errors_raise_before_launch():
    g = cuopjit.GemvFloat()
    with pytest.raises(ValueError, match=r"GemvFloat: no weight: call set_weight\(A\) before forward"):
        g.forward(fake([4]), fake([4]))
    g.set_weight(fake([5, 3]))
    with pytest.raises(ValueError, match=r"GemvFloat: x has 4 elements \(shape \[4\]\), but A with A of shape "
                                         r"\[5, 3\] needs 3"):
        g.forward(fake([4]), fake([5]))
    with pytest.raises(ValueError, match=r"GemvFloat: y has 3 elements \(shape \[3\]\), but A with A of shape "
                                         r"\[5, 3\] gives 5"):
        g.forward(fake([3]), fake([3]))
    with pytest.raises(TypeError, match="GemvFloat: x is float64"):
        g.forward(fake([3], "float64"), fake([5]))
    with pytest.raises(ValueError, match=r"GemvFloat: weight must be 2-D, got shape \[5\]"):
        g.set_weight(fake([5]))
    t = cuopjit.GemvFloat(trans=True)
    t.set_weight(fake([5, 3]))
    with pytest.raises(ValueError, match=r"x has 3 elements \(shape \[3\]\), but A\^T with A of shape \[5, 3\] needs 5"):
        t.forward(fake([3]), fake([3]))


# --- GPU ---------------------------------------------------------------------------------------------

def _run(rng, dtype, m, n, trans, alpha=1.0, beta=0.0, jit=False):
    a = rng.standard_normal((m, n)).astype(dtype)
    x = rng.standard_normal(m if trans else n).astype(dtype)
    y0 = rng.standard_normal(n if trans else m).astype(dtype)
    y = guarded(y0.shape, dtype, fill=y0 if beta else None)
    op = _op(dtype, trans, alpha, beta)
    op.set_weight(cuopjit.tensor(a))
    runner = (cuopjit.JITGemvFloat if dtype == np.float32 else cuopjit.JITGemvDouble)(op) if jit else op
    assert runner.forward(cuopjit.tensor(x), y) is y
    check_guards(y)
    a64 = a.astype(np.float64)
    ref = alpha * ((a64.T if trans else a64) @ x.astype(np.float64)) + beta * y0.astype(np.float64)
    out = y.to_numpy().astype(np.float64)
    assert np.all(np.isfinite(out))
    err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert err <= _tol(dtype, m if trans else n), err
    return runner


@pytest.mark.gpu
@pytest.mark.parametrize("m, n", SIZES)
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_numpy(rng, dtype, m, n, trans):
    _run(rng, dtype, m, n, trans)


@pytest.mark.gpu
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_alpha_beta_and_the_jit_wrapper(rng, dtype, trans):
    _run(rng, dtype, 33, 100000, trans, alpha=-1.5, beta=0.25)
    jit = _run(rng, dtype, 1000, 777, trans, alpha=2.0, beta=-1.0, jit=True)
    cfg = cuopjit.JITConfig()
    cfg.kernel_type = "simple"
    jit.set_jit_config(cfg)
    jit.forward(cuopjit.tensor(rng.standard_normal(1000 if trans else 777).astype(dtype)),
                cuopjit.zeros([777 if trans else 1000], dtype=np.dtype(dtype).name))
    assert "v1x1" in jit.get_performance_profile().kernel_name
