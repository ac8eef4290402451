"""GemvHalf / GemvBFloat16: A, x and y in float16 / bfloat16, products and sums in float32 (alpha, beta float32),
y rounded once. CPU: the plans (16-byte vectors of 8, float32 scalars, float32 partial sums and gemv_reduce for a
split) computed in NumPy; refused dtypes. GPU: float64 references of the 16-bit inputs within the bound of one
float32 dot product and one rounding (half_maps.py), both transposes, odd sizes, unaligned lengths, alpha / beta,
NaN-poisoned guarded y, the JIT wrapper. (Every kernel compiling for sm_80 / sm_90a: test_gemv.py, whose
representative problems include these.)"""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit.ops.gemm import gemv
from cuopjit.target import named

from blas_emulate import fake, run_operator, set_fake_weight
from conftest import check_guards, guarded, make_config
from half_maps import HALF, assert_half, gamma32, half_input, rounded

SM90 = named("sm_90")
CLS = {"float16": cuopjit.GemvHalf, "bfloat16": cuopjit.GemvBFloat16}
JIT = {"float16": cuopjit.JITGemvHalf, "bfloat16": cuopjit.JITGemvBFloat16}
SIZES = [(1, 1), (7, 9), (33, 33), (1000, 1000), (4097, 33), (33, 4097), (33, 100000), (4096, 4096), (2049, 3001)]


def _plan(dtype, m, n, trans, aligned=True):
    return gemv.FAMILY.default_plan(gemv.GemvProblem(dtype, m, n, trans, aligned, 1.0, 0.0, n),
                                    make_config().snapshot(), SM90)


# --- CPU ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("trans", [False, True])
def test_plans_read_vectors_of_8_and_sum_splits_in_float32(dtype, trans):
    plan = _plan(dtype, 16384, 16384, trans)
    params = dict(plan.launches[0].spec.params)
    assert (params["VEC"], params["scalar_t"], params["elem_t"]) == (8, "float", {"float16": "half_t",
                                                                                  "bfloat16": "bf16_t"}[dtype])
    assert [a.kind for a in plan.launches[0].args[-2:]] == ["f32", "f32"]
    if trans:      # 64 column blocks: the rows are split, float32 partials summed by gemv_reduce into 16-bit y
        main, final = plan.launches
        assert final.spec.kernel == "gemv_reduce" and plan.workspace == main.grid[1] * 16384 * 4
        assert dict(final.spec.params)["SPLIT_SUM"] and final.args[-1].kind == "f32"
    else:
        assert [kl.spec.kernel for kl in plan.launches] == ["gemv_n"] and plan.workspace == 0
    assert dict(_plan(dtype, 4097, 33, trans, aligned=False).launches[0].spec.params)["VEC"] == 1


def test_a_4096_square_transposed_product_fills_the_gpu():
    """32 MiB of A is not launch-bound: its 16 column blocks are split until every SM has work."""
    main = _plan("float16", 4096, 4096, True).launches[0]
    assert main.grid[0] * main.grid[1] >= SM90.sm_count


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("m, n", [(33, 100000), (1000, 1000), (4097, 33), (5, 3), (16384, 256)])
@pytest.mark.parametrize("trans", [False, True])
def test_plans_compute_the_product(rng, dtype, m, n, trans):
    op = CLS[dtype](trans, 2.0, 0.5)
    a = rng.standard_normal((m, n))
    set_fake_weight(op, a)
    x, y = rng.standard_normal(m if trans else n), rng.standard_normal(n if trans else m)
    out = run_operator(op, [x, y], SM90)[2]
    ref = 2.0 * ((a.T if trans else a) @ x) + 0.5 * y
    assert np.allclose(out, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_mixed_dtypes_name_the_operand():
    g = cuopjit.GemvHalf()
    g.set_weight(fake([5, 3], "float16"))
    with pytest.raises(TypeError, match="GemvHalf: x is float32, GemvHalf works on float16"):
        g.forward(fake([3]), fake([5], "float16"))
    with pytest.raises(TypeError, match="GemvBFloat16: weight is float16, GemvBFloat16 works on bfloat16"):
        cuopjit.GemvBFloat16().set_weight(fake([5, 3], "float16"))


# --- GPU ---------------------------------------------------------------------------------------------------------
def _run(rng, dtype, m, n, trans, alpha=1.0, beta=0.0, jit=False, offset=0):
    a = half_input(rng, (m, n), dtype, 1.0)
    x = half_input(rng, m if trans else n, dtype, 1.0)
    y0 = half_input(rng, n if trans else m, dtype, 1.0)
    y = guarded(y0.shape, dtype, fill=y0 if beta else None)
    op = CLS[dtype](trans, alpha, beta)
    op.set_weight(cuopjit.tensor(a))
    xt = guarded(x.shape, dtype, fill=x, pad=offset) if offset else cuopjit.tensor(x)
    runner = JIT[dtype](op) if jit else op
    assert runner.forward(xt, y) is y
    check_guards(y)
    a64, x64, y64 = (v.astype(np.float64) for v in (a, x, y0))
    a64 = a64.T if trans else a64
    ref = alpha * (a64 @ x64) + beta * y64
    length = a64.shape[1]    # float32 products summed over the length, split sums, alpha and beta
    b32 = gamma32(length + 8) * (abs(alpha) * (np.abs(a64) @ np.abs(x64)) + abs(beta) * np.abs(y64))
    assert_half(y.to_numpy(), *rounded(ref, b32, dtype), f"gemv {dtype} {m}x{n} trans={trans}")
    return runner


@pytest.mark.gpu
@pytest.mark.parametrize("m, n", SIZES)
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("dtype", HALF)
def test_matches_float64(rng, dtype, m, n, trans):
    _run(rng, dtype, m, n, trans)


@pytest.mark.gpu
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("dtype", HALF)
def test_alpha_beta_unaligned_x_and_the_jit_wrapper(rng, dtype, trans):
    _run(rng, dtype, 33, 100000, trans, alpha=-1.5, beta=0.25)
    _run(rng, dtype, 4096, 4096, trans, alpha=0.5, beta=-2.0)
    _run(rng, dtype, 1000, 1000, trans, offset=3)          # x 6 bytes past 16-byte alignment: scalar loads
    jit = _run(rng, dtype, 1000, 776, trans, alpha=2.0, beta=-1.0, jit=True)
    cfg = cuopjit.JITConfig()
    cfg.kernel_type = "simple"
    jit.set_jit_config(cfg)
    jit.forward(cuopjit.tensor(half_input(rng, 1000 if trans else 776, dtype)),
                cuopjit.zeros([776 if trans else 1000], dtype=dtype))
    assert "v1x1" in jit.get_performance_profile().kernel_name
