"""GemmHalf / GemmBFloat16, MatMul and BatchMatMul in float16 / bfloat16 on the GPU: A, B, C 16-bit, products exact in
float32, sums in float32 on the tensor cores (wgmma f16 / bf16 on sm_90 where TMA takes the strides; else the
one-stage kernel reading halves, TF32 mma.sync, exact on 16-bit operands), alpha / beta float32, C rounded once.

Bound: the float32 value errs from the float64 reference of the 16-bit inputs by at most
    b32 = gamma(2 (K + 16)) (|alpha| |A| |B| + |beta| |C|)
(float32 unit roundoff doubled: the tensor cores truncate their sums, and K + 16 additions covers alpha, beta and the
blocked sums), then one rounding to the 16-bit type (half_maps.rounded). Outputs are NaN-poisoned inside guard
regions; every transpose pair, odd sizes (the fallback kernel for strides TMA cannot take), batches with broadcasts,
transposed views, epilogues, inf / NaN propagation and float16 overflow (65504 -> inf, as torch)."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit.target import named

from conftest import check_guards, guarded, make_config
from half_maps import HALF, assert_half, gamma32, half_input, rounded

GEMM = {"float16": cuopjit.GemmHalf, "bfloat16": cuopjit.GemmBFloat16}
MATMUL = {"float16": cuopjit.MatMulHalf, "bfloat16": cuopjit.MatMulBFloat16}
BMM = {"float16": cuopjit.BatchMatMulHalf, "bfloat16": cuopjit.BatchMatMulBFloat16}
JIT = {"float16": cuopjit.JITGemmHalf, "bfloat16": cuopjit.JITGemmBFloat16}
# (m, n, k): one element; odd (no 16-byte rows: the fallback); wgmma tile edges; K past a multiple of 64; larger
SIZES = [(1, 1, 1), (7, 9, 13), (33, 47, 29), (100, 136, 72), (257, 520, 1000), (512, 768, 2048)]
TRANS = [(False, False), (False, True), (True, False), (True, True)]


def _bound(a64, b64, c64, alpha, beta, dtype):
    k = a64.shape[-1]
    b32 = gamma32(2 * (k + 16)) * (abs(alpha) * (np.abs(a64) @ np.abs(b64)) + abs(beta) * np.abs(c64))
    return rounded(alpha * (a64 @ b64) + beta * c64, b32, dtype)


def _gemm(rng, dtype, m, n, k, ta, tb, alpha=1.0, beta=0.0, config=None, jit=False):
    a = half_input(rng, (k, m) if ta else (m, k), dtype, 1.0)
    b = half_input(rng, (n, k) if tb else (k, n), dtype, 1.0)
    c0 = half_input(rng, (m, n), dtype, 1.0)
    c = guarded((m, n), dtype, fill=c0 if beta else None)
    op = GEMM[dtype](ta, tb, alpha, beta)
    op.set_weight(cuopjit.tensor(b))
    runner = JIT[dtype](op) if jit else op
    if config is not None:
        runner.set_jit_config(config)
    assert runner.forward(cuopjit.tensor(a), c) is c
    check_guards(c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref, bound = _bound(a64.T if ta else a64, b64.T if tb else b64, c0.astype(np.float64), alpha, beta, dtype)
    assert_half(c.to_numpy(), ref, bound, f"gemm {dtype} {m}x{n}x{k} ta={ta} tb={tb}")
    return runner


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", SIZES)
@pytest.mark.parametrize("ta, tb", TRANS)
@pytest.mark.parametrize("dtype", HALF)
def test_gemm_matches_float64(rng, dtype, m, n, k, ta, tb):
    _gemm(rng, dtype, m, n, k, ta, tb)


@pytest.mark.gpu
@pytest.mark.parametrize("ta, tb", TRANS)
@pytest.mark.parametrize("dtype", HALF)
def test_alpha_beta_and_the_jit_wrapper(rng, dtype, ta, tb):
    _gemm(rng, dtype, 200, 264, 328, ta, tb, alpha=-1.5, beta=0.25)
    _gemm(rng, dtype, 31, 45, 77, ta, tb, alpha=2.0, beta=-1.0, jit=True)


@pytest.mark.gpu
@pytest.mark.parametrize("fields", [{"kernel_type": "simple"}, {"tile_size": 32}, {"block_size": 256},
                                    {"tile_size": 64, "block_size": 256}, {"enable_tensor_core": False,
                                                                           "kernel_type": "tiled"}])
@pytest.mark.parametrize("dtype", HALF)
def test_configs_pick_other_kernels(rng, dtype, fields):
    jit = _gemm(rng, dtype, 136, 200, 264, False, False, config=make_config(**fields), jit=True)
    _gemm(rng, dtype, 136, 200, 264, False, True, config=make_config(**fields), jit=True)
    assert jit.get_performance_profile().kernel_name


@pytest.mark.gpu
@pytest.mark.parametrize("m, n", [(1, 4096), (1, 776), (1000, 1)])
@pytest.mark.parametrize("dtype", HALF)
def test_one_row_or_column(rng, dtype, m, n):
    _gemm(rng, dtype, m, n, 1024, False, True)
    _gemm(rng, dtype, m, n, 1000, False, False, alpha=0.5, beta=2.0)


def _matmul(rng, cls, dtype, sa, sb, ta=False, tb=False, view_a=False, view_b=False):
    a = half_input(rng, sa, dtype, 1.0)
    b = half_input(rng, sb, dtype, 1.0)
    at = cuopjit.tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2))).mT if view_a else cuopjit.tensor(a)
    bt = cuopjit.tensor(np.ascontiguousarray(np.swapaxes(b, -1, -2))).mT if view_b else cuopjit.tensor(b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    a64, b64 = (np.swapaxes(a64, -1, -2) if ta else a64), (np.swapaxes(b64, -1, -2) if tb else b64)
    out_shape = np.matmul(a64, b64).shape
    c = guarded(out_shape, dtype)
    cls[dtype](ta, tb).forward(at, bt, c)
    check_guards(c)
    ref, bound = _bound(a64, b64, np.zeros(out_shape), 1.0, 0.0, dtype)
    assert_half(c.to_numpy(), ref, bound, f"matmul {dtype} {sa} @ {sb} ta={ta} tb={tb}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_batched_broadcast_and_transposed_views(rng, dtype):
    _matmul(rng, BMM, dtype, (12, 100, 72), (12, 72, 136))
    _matmul(rng, BMM, dtype, (8, 128, 64), (8, 128, 64), tb=True)            # attention's Q @ K^T
    _matmul(rng, BMM, dtype, (8, 128, 128), (8, 128, 64))                    # scores @ V
    _matmul(rng, BMM, dtype, (6, 64, 80), (1, 80, 96))                       # a broadcast weight
    _matmul(rng, BMM, dtype, (5, 33, 33), (5, 33, 31))                       # odd: the fallback kernel
    _matmul(rng, BMM, dtype, (4, 72, 40), (4, 72, 56), ta=True)
    _matmul(rng, MATMUL, dtype, (3, 1, 64, 48), (1, 4, 48, 40))              # mixed broadcast: a launch each
    _matmul(rng, MATMUL, dtype, (96, 64), (64, 80), view_b=True)             # x @ W.T as a transposed view
    _matmul(rng, MATMUL, dtype, (96, 64), (64, 80), view_a=True)
    _matmul(rng, MATMUL, dtype, (120,), (120, 40))                           # a vector


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(256, 320, 192), (33, 47, 29)])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("dtype", HALF)
def test_epilogues(rng, dtype, m, n, k, tb):
    """gelu(acc + bias) over a 16-bit bias, a residual and the old C: computed in float32, rounded once."""
    a = half_input(rng, (m, k), dtype, 1.0)
    b = half_input(rng, (n, k) if tb else (k, n), dtype, 1.0)
    bias, res, c0 = half_input(rng, n, dtype), half_input(rng, (m, n), dtype), half_input(rng, (m, n), dtype)
    a64, b64 = a.astype(np.float64), (b.T if tb else b).astype(np.float64)
    acc = 0.5 * (a64 @ b64)
    b32 = gamma32(2 * (k + 32)) * (0.5 * (np.abs(a64) @ np.abs(b64)) + np.abs(bias.astype(np.float64))
                                    + 2 * np.abs(res.astype(np.float64)) + np.abs(c0.astype(np.float64)))
    for text, extra, ref in (
            ("relu(acc + bias)", {"bias": bias}, np.maximum(acc + bias.astype(np.float64), 0.0)),
            ("acc + 2 * r + c", {"r": res}, acc + 2 * res.astype(np.float64) + c0.astype(np.float64))):
        op = GEMM[dtype](False, tb, 0.5, 0.0)
        op.set_weight(cuopjit.tensor(b))
        op.set_epilogue(text, **{name: cuopjit.tensor(v) for name, v in extra.items()})
        c = guarded((m, n), dtype, fill=c0)
        op.forward(cuopjit.tensor(a), c)
        check_guards(c)
        assert_half(c.to_numpy(), *rounded(ref, b32, dtype), f"{text} {dtype} {m}x{n}x{k} tb={tb}")


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(128, 256, 320), (33, 47, 29)])
@pytest.mark.parametrize("dtype", HALF)
def test_inf_nan_and_float16_overflow(rng, dtype, m, n, k):
    """inf and NaN in A reach their rows as in float64; sums past 65504 give inf in float16 (bfloat16 holds them)."""
    a = np.ones((m, k), dtype=dtype)
    b = np.full((k, n), 300.0, dtype=dtype)       # every output is 300 K: past float16's range for K >= 219
    a[1, 3], a[2, 5], a[3, 0] = np.inf, -np.inf, np.nan
    c = guarded((m, n), dtype)
    op = GEMM[dtype]()
    op.set_weight(cuopjit.tensor(b))
    op.forward(cuopjit.tensor(a), c)
    check_guards(c)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32).astype(dtype).astype(np.float64)
    got = c.to_numpy().astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(got[~np.isnan(ref)], ref[~np.isnan(ref)])
    if dtype == "float16" and k >= 219:
        assert np.isinf(got[0]).all()


def _run_plan(problem, arrays, out):
    """Plan `problem` for sm_80 (the mma.sync m16n8k16 kernel) and run it on this GPU (built for its arch)."""
    from cuopjit.config import DEFAULT
    from cuopjit.ops.gemm import plans
    from cuopjit.run import executor
    plan = plans.FAMILY.default_plan(problem, make_config().snapshot(), named("sm_80"))
    assert "mma16" in plan.launches[0].spec.name, plan.launches[0].spec.name
    tensors = [cuopjit.tensor(x) for x in arrays]
    executor.load(plan, 0, DEFAULT)(tuple(t.ptr for t in (*tensors[:2], out, *tensors[2:])), 0)
    cuopjit.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(128, 128, 32), (200, 264, 328), (1000, 1032, 520), (8, 8, 8)])
@pytest.mark.parametrize("ta, tb", TRANS)
@pytest.mark.parametrize("dtype", HALF)
def test_the_sm80_mma_sync_kernel(rng, dtype, m, n, k, ta, tb):
    """mma.sync m16n8k16 with ldmatrix (.trans for MN-major operands) and cp.async, planned for sm_80, run here."""
    from cuopjit.ops.gemm import plans
    a = half_input(rng, (k, m) if ta else (m, k), dtype, 1.0)
    b = half_input(rng, (n, k) if tb else (k, n), dtype, 1.0)
    c0 = half_input(rng, (m, n), dtype, 1.0)
    c = guarded((m, n), dtype, fill=c0)
    _run_plan(plans.packed(dtype, m, n, k, ta, tb, alpha=0.5, beta=-1.0), [a, b], c)
    check_guards(c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref, bound = _bound(a64.T if ta else a64, b64.T if tb else b64, c0.astype(np.float64), 0.5, -1.0, dtype)
    assert_half(c.to_numpy(), ref, bound, f"mma16 {dtype} {m}x{n}x{k} ta={ta} tb={tb}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_the_sm80_kernel_batched_and_with_an_epilogue(rng, dtype):
    import dataclasses
    from cuopjit.expr import parse_epilogue
    from cuopjit.ops import epilogue
    from cuopjit.ops.gemm import plans
    a, b = half_input(rng, (6, 136, 72), dtype, 1.0), half_input(rng, (72, 200), dtype, 1.0)
    c = guarded((6, 136, 200), dtype)
    batched = dataclasses.replace(plans.packed(dtype, 136, 200, 72), batch=6, stride_a=136 * 72, stride_b=0,
                                  stride_c=136 * 200)
    _run_plan(batched, [a, b], c)
    check_guards(c)
    ref, bound = _bound(a.astype(np.float64), b.astype(np.float64), np.zeros((6, 136, 200)), 1.0, 0.0, dtype)
    assert_half(c.to_numpy(), ref, bound, "mma16 batched")
    bias = half_input(rng, 200, dtype)
    key = epilogue.make_key(parse_epilogue("relu(acc + bias)"), {"bias": "per_column"})
    c = guarded((136, 200), dtype)
    _run_plan(dataclasses.replace(plans.packed(dtype, 136, 200, 72), epilogue=key), [a[0], b, bias], c)
    check_guards(c)
    ref, bound = _bound(a[0].astype(np.float64), b.astype(np.float64), np.zeros((136, 200)), 1.0, 0.0, dtype)
    ref = np.maximum(ref + bias.astype(np.float64), 0.0)
    assert_half(c.to_numpy(), ref, bound + 2.0 ** -8 * np.abs(bias.astype(np.float64)), "mma16 epilogue")
