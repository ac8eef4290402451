"""The wgmma GEMM's register epilogue (templates/common/wgmma_store.cuh.jinja store_regs) on the GPU: float32 C
written along Q (A @ W^T, P = A), applied to the accumulators with no staging: per-column, per-row and scalar
operands from shared memory, output-shaped ones (a residual) and c loaded into registers ahead of the expression.
Against float64 NumPy (cuopjit.expr.evaluate), outputs NaN-poisoned (or holding c's values) and fenced by guard
regions: TF32 and 3xTF32 (aligned and not), every tile width's unrolled fragment (40 .. 256 columns, one and two
consumer warpgroups), odd M, N ending inside an 8-column block (TF32 needs N % 4 == 0) or odd (3xTF32, unaligned C:
a last pair with one column inside, scalar stores and loads), an even but unaligned leading dimension (8-byte
residual loads, scalar stores), a bias or residual one element off alignment (element by element), a batched launch.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cuopjit
from cuopjit.config import DEFAULT
from cuopjit.device import driver
from cuopjit.expr import evaluate, parse_epilogue
from cuopjit.ops.gemm import wgmma, wgmma_plan
from cuopjit.run import executor
from cuopjit.target import of_device
from cuopjit.tensor import Tensor

from conftest import check_guards, guarded, make_config, rel_error

pytestmark = pytest.mark.gpu

EXPRS = ["gelu(acc + bias)", "silu(acc * s + bias) + t * rows", "relu(acc + bias)", "relu(acc * s) - t",
         "gelu(acc * bias + shift)"]
TOL = {"tf32": 5e-3, "3xtf32": 5e-5}
# output-shaped operands and c: a residual alone, c alone, both with every other kind
FULL_EXPRS = ["relu(acc * scale + shift + residual)", "acc * s + 0.5 * c - bias",
              "gelu(acc + bias) + residual + 0.5 * c + t * relu(rows)"]


def _operands(rng, m, n, k, off_bias=False):
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    rows = rng.standard_normal((m, 1)).astype(np.float32)
    if off_bias:        # the bias 4 bytes past a 16-byte boundary: the pair's per-column loads go one by one
        host = np.concatenate([np.zeros(1, np.float32), bias])
        base = cuopjit.tensor(host)
        b = Tensor._view(base.ptr + 4, (n,), np.dtype(np.float32), base.device, base)
    else:
        b = cuopjit.tensor(bias)
    return a, w, bias, rows, b, cuopjit.tensor(rows)


SHIFT = np.linspace(-1, 1, 1024, dtype=np.float32)      # a second per-column operand (its first n values)


def _reference(expr, acc, bias, rows, numbers, residual=None, old=None):
    n = acc.shape[-1]
    env = {"acc": acc, "bias": bias.astype(np.float64), "rows": rows.astype(np.float64),
           "shift": SHIFT[:n].astype(np.float64), "scale": SHIFT[::-1][:n].astype(np.float64) + 1.5, **numbers}
    if residual is not None:
        env["residual"] = residual.astype(np.float64)
    if old is not None:
        env["c"] = old.astype(np.float64)
    return evaluate(parse_epilogue(expr), {k: v for k, v in env.items() if k in parse_epilogue(expr).names}, np.float64)


def _bound(expr, b, r):
    names = parse_epilogue(expr).operands
    n = b.shape[0]
    return {k: t for k, t in (("bias", b), ("rows", r), ("shift", cuopjit.tensor(SHIFT[:n])),
                              ("scale", cuopjit.tensor(SHIFT[::-1][:n] + 1.5))) if k in names}


def _residual(rng, shape, off=False):
    """(host values, device tensor) of an output-shaped operand; `off`: 4 bytes past an 8-byte boundary (its pairs
    then load element by element)."""
    host = rng.standard_normal(shape).astype(np.float32)
    if not off:
        return host, cuopjit.tensor(host)
    base = cuopjit.tensor(np.concatenate([np.zeros(1, np.float32), host.ravel()]))
    return host, Tensor._view(base.ptr + 4, shape, np.dtype(np.float32), base.device, base)


def _fused(rng, expr, shape, off=False):
    """(per-call operands, residual host values or None, the output: guarded, NaN-poisoned or, where the expression
    reads c, holding random old values, and those values or None)."""
    names = parse_epilogue(expr).names
    residual, call = None, {}
    if "residual" in names:
        residual, call["residual"] = _residual(rng, shape, off)
    old = rng.standard_normal(shape).astype(np.float32) if "c" in names else None
    return call, residual, guarded(shape, fill=old), old


def _numbers(expr):
    names = parse_epilogue(expr).operands
    return {n: v for n, v in (("s", 0.75), ("t", -1.25)) if n in names}


@pytest.mark.parametrize("expr", EXPRS)
@pytest.mark.parametrize("mode, size, off_bias", [("tf32", (256, 200, 96), False), ("tf32", (197, 204, 72), True),
                                                  ("3xtf32", (512, 400, 128), False),
                                                  ("3xtf32", (511, 403, 129), True)])
def test_gemm_register_epilogue(rng, expr, mode, size, off_bias):
    m, n, k = size
    a, w, bias, rows, b, r = _operands(rng, m, n, k, off_bias)
    g = cuopjit.GemmFloat(trans_b=True, alpha=1.5)
    g.set_weight(cuopjit.tensor(w))
    g.set_epilogue(expr, **_bound(expr, b, r))
    jit = cuopjit.JITGemmFloat(g)
    jit.set_jit_config(make_config(**({"precision": "3xtf32"} if mode == "3xtf32" else {"enable_tensor_core": True})))
    out = guarded((m, n))
    jit.forward(cuopjit.tensor(a), out, **_numbers(expr))
    check_guards(out)
    name = jit.get_performance_profile().kernel_name
    assert "wgmma" in name and "_nt" in name, name
    acc = 1.5 * a.astype(np.float64) @ w.T.astype(np.float64)
    err = rel_error(out.to_numpy(), _reference(expr, acc, bias, rows, _numbers(expr)))
    assert err <= TOL[mode], f"{name}: relative error {err:.3g}"


def _build_matches(rng, expr, consumers, qn, cluster):
    """One wgmma build planned directly (`cluster` blocks per cluster) runs `expr` within TF32's tolerance."""
    m, n, k = 261, 524, 64
    a, w, bias, rows, b, r = _operands(rng, m, n, k)
    g = cuopjit.GemmFloat(trans_b=True)
    g.set_weight(cuopjit.tensor(w))
    g.set_epilogue(expr, **_bound(expr, b, r))
    call, residual, out, old = _fused(rng, expr, (m, n))
    A = cuopjit.tensor(a)
    problem = g.problem(A, out, **call, **_numbers(expr))
    target = of_device(driver.current_ordinal())
    choice = dataclasses.replace(wgmma.build(consumers, qn, target, split=False, problem=problem), cluster=cluster)
    run = executor.load(wgmma_plan.plan(problem, choice, target), driver.current_ordinal(), DEFAULT)
    run(g.bind(A, out, **call, **_numbers(expr))[1], 0)
    check_guards(out)
    acc = a.astype(np.float64) @ w.T.astype(np.float64)
    assert rel_error(out.to_numpy(), _reference(expr, acc, bias, rows, _numbers(expr), residual, old)) <= TOL["tf32"]


@pytest.mark.parametrize("consumers, qn, cluster", [(2, 40, 1), (2, 160, 1), (1, 96, 1), (2, 256, 1), (2, 128, 2)])
def test_every_tile_width(rng, consumers, qn, cluster):
    """Builds planned directly: the fragment's QN / 8 column blocks, the tile's vectors in shared memory; a cluster
    of two (its rank past the last P-tile copies zeros and stores nothing)."""
    _build_matches(rng, EXPRS[1], consumers, qn, cluster)


def _batched_matches(rng, expr):
    """A batched A @ W^T with `expr` on the wgmma kernel (per-entry rows, a shared bias) within TF32's tolerance."""
    bsz, m, n, k = 3, 130, 72, 64
    op = cuopjit.BatchMatMulFloat(trans_b=True)
    jit = cuopjit.JITBatchMatMulFloat(op)
    jit.set_jit_config(make_config(enable_tensor_core=True))
    a = rng.standard_normal((bsz, m, k)).astype(np.float32)
    w = rng.standard_normal((bsz, n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    rows = rng.standard_normal((bsz, m, 1)).astype(np.float32)
    op.set_epilogue(expr, bias=cuopjit.tensor(bias), rows=cuopjit.tensor(rows))
    call, residual, out, old = _fused(rng, expr, (bsz, m, n))
    jit.forward(cuopjit.tensor(a), cuopjit.tensor(w), out, **call, **_numbers(expr))
    check_guards(out)
    name = jit.get_performance_profile().kernel_name
    assert "wgmma" in name and "_batched_e" in name, name
    acc = a.astype(np.float64) @ np.swapaxes(w, 1, 2).astype(np.float64)
    ref = _reference(expr, acc, bias, rows, _numbers(expr), residual, old)
    assert rel_error(out.to_numpy(), ref) <= TOL["tf32"]


def test_batched(rng):
    _batched_matches(rng, "gelu(acc * s + bias) + t * rows")


@pytest.mark.parametrize("expr", FULL_EXPRS)
@pytest.mark.parametrize("mode, size, off", [("tf32", (256, 200, 96), False), ("tf32", (197, 204, 72), True),
                                             ("3xtf32", (511, 403, 129), False), ("3xtf32", (411, 402, 64), False),
                                             ("3xtf32", (409, 402, 40), True)])
def test_residual_and_c_in_registers(rng, expr, mode, size, off):
    """Output-shaped operands and c at the output's index: 8-byte pair loads (aligned, even leading dimension, also
    under unaligned C's scalar stores: N = 402), element by element (odd N = 403: odd leading dimension and a last
    pair with one column inside; a residual 4 bytes off alignment), rows and columns past the output skipped."""
    m, n, k = size
    a, w, bias, rows, b, r = _operands(rng, m, n, k, off_bias=off)
    g = cuopjit.GemmFloat(trans_b=True, alpha=1.5)
    g.set_weight(cuopjit.tensor(w))
    g.set_epilogue(expr, **_bound(expr, b, r))
    jit = cuopjit.JITGemmFloat(g)
    jit.set_jit_config(make_config(**({"precision": "3xtf32"} if mode == "3xtf32" else {"enable_tensor_core": True})))
    call, residual, out, old = _fused(rng, expr, (m, n), off)
    jit.forward(cuopjit.tensor(a), out, **call, **_numbers(expr))
    check_guards(out)
    name = jit.get_performance_profile().kernel_name
    assert "wgmma" in name and "_nt" in name, name
    acc = 1.5 * a.astype(np.float64) @ w.T.astype(np.float64)
    err = rel_error(out.to_numpy(), _reference(expr, acc, bias, rows, _numbers(expr), residual, old))
    assert err <= TOL[mode], f"{name}: relative error {err:.3g}"


@pytest.mark.parametrize("consumers, qn, cluster", [(2, 40, 1), (1, 96, 1), (1, 128, 1), (2, 256, 1), (2, 128, 2)])
def test_residual_every_tile_width(rng, consumers, qn, cluster):
    """The loads 4 column blocks ahead over each fragment: 5 blocks (a last set of one), 12, 16 (two blocks per SM),
    32, 16 in a cluster of two."""
    _build_matches(rng, FULL_EXPRS[2], consumers, qn, cluster)


def test_batched_residual(rng):
    """Entry z's residual and c at z * stride_c, as its output."""
    _batched_matches(rng, FULL_EXPRS[2])
