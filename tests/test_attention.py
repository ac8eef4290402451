"""AttentionFloat / AttentionDouble on the GPU against float64 NumPy: exact float32 (SIMT), TF32 (mma.sync) and
float64, odd lengths (1, 7, 33, 257), head dims 7 / 16 / 40 / 64 / 128, batch dimensions, causal, Lq != Lk,
explicit and negative scales, unaligned operands; outputs NaN-poisoned inside guard regions.

Tolerances from the math: a score s = scale · Σ_d q_d k_d is off by at most (2·u_op + (D + 4)·u) · S, S = max of
|scale| · Σ_d |q_d| |k_d| (each operand rounded once to the product's precision, u_op: 2^-11 TF32, else u; the
float32 sum of D terms); the output, a convex combination of v's rows normalised by the same weights, is off by
at most (2·δs + 2·u_op + 4·(Lk + 8)·u) · max|v| (exp's relative error is δs; TF32 rounds P and V once each).
Exact kernels get a factor 2 for exp2's few-ulp error.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import cuopjit
from cuopjit import target
from cuopjit.build import pipeline
from cuopjit.config import RunSettings
from cuopjit.ops.attention import plans
from cuopjit.tensor import Tensor

from conftest import check_guards, guarded, make_config

pytestmark = pytest.mark.gpu
U = {"float32": 2.0 ** -24, "float64": 2.0 ** -53}
MODES = [("float32", False), ("float32", True), ("float64", False)]      # (dtype, TF32 tensor cores)
CASES = [((1,), 1, 1, 16), ((2,), 7, 7, 40), ((3,), 33, 257, 64), ((2, 3), 257, 33, 128), ((1,), 64, 64, 7),
         ((2,), 130, 70, 64)]


def _config(tf32: bool):
    return make_config(enable_tensor_core=True) if tf32 else make_config()


@pytest.fixture(scope="module", autouse=True)
def prebuilt():
    """Every kernel these tests run, built in parallel first (one NVRTC per core)."""
    t = target.of_device(0)
    specs = set()
    for dtype, tf32 in MODES:
        for d in (7, 16, 40, 64, 128):
            for causal in (False, True):
                for aligned in (True, False):
                    p = plans.contiguous(dtype, 1, 64, 64, d, causal, None, aligned)
                    specs.update(plans.FAMILY.default_plan(p, _config(tf32).snapshot(), t).specs)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda s: pipeline.build(s, t.arch), specs))


def _reference(q, k, v, scale, causal):
    s = np.einsum("...id,...jd->...ij", q, k) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("...ij,...jd->...id", p / p.sum(-1, keepdims=True), v)


def _bound(q, k, v, scale, dtype, tf32):
    u = U[dtype]
    u_op = 2.0 ** -11 if tf32 else u
    d, lk = q.shape[-1], k.shape[-2]
    big = abs(scale) * np.einsum("...id,...jd->...ij", np.abs(q), np.abs(k)).max()
    ds = (2 * u_op + (d + 4) * u) * big
    bound = (2 * ds + 2 * u_op + 4 * (lk + 8) * u) * np.abs(v).max()
    return bound if tf32 else 2 * bound


def _run(rng, dtype, tf32, batch, lq, lk, d, causal=False, scale=None, offset=0):
    q, k, v = (rng.standard_normal((*batch, n, d)) for n in (lq, lk, lk))
    ins = [cuopjit.tensor(a.astype(dtype)) for a in (q, k, v)]
    if offset:   # q one element past a 16-byte boundary: the scalar kernels
        host = np.zeros(q.size + offset, dtype)
        host[offset:] = q.astype(dtype).ravel()
        base = cuopjit.tensor(host)
        ins[0] = Tensor._view(base.ptr + offset * np.dtype(dtype).itemsize, q.shape, np.dtype(dtype), base.device,
                              base)
    out = guarded((*batch, lq, d), dtype)
    op = (cuopjit.AttentionFloat if dtype == "float32" else cuopjit.AttentionDouble)()
    jit = (cuopjit.JITAttentionFloat if dtype == "float32" else cuopjit.JITAttentionDouble)(op)
    jit.set_jit_config(_config(tf32))
    assert jit.forward(*ins, out, scale=scale, causal=causal) is out
    cuopjit.synchronize()
    check_guards(out)
    s = 1 / np.sqrt(d) if scale is None else scale
    q64, k64, v64 = (t.to_numpy().astype(np.float64) for t in ins)
    err = np.abs(out.to_numpy() - _reference(q64, k64, v64, s, causal)).max()
    bound = _bound(q64, k64, v64, s, dtype, tf32)
    plan = op.plan(*ins, out, scale=scale, causal=causal, settings=RunSettings.of(_config(tf32).snapshot()))
    assert np.isfinite(err) and err <= bound, (plan.choice, err, bound)
    return plan.choice


@pytest.mark.parametrize("dtype, tf32", MODES, ids=["f32", "tf32", "f64"])
@pytest.mark.parametrize("batch, lq, lk, d", CASES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_matches_float64(rng, dtype, tf32, batch, lq, lk, d, causal):
    choice = _run(rng, dtype, tf32, batch, lq, lk, d, causal)
    assert choice.startswith("mma" if tf32 else "simt")
    assert choice.endswith("_v1") == (d % 4 != 0)


@pytest.mark.parametrize("dtype, tf32", MODES, ids=["f32", "tf32", "f64"])
def test_explicit_and_negative_scales(rng, dtype, tf32):
    _run(rng, dtype, tf32, (2,), 65, 65, 64, causal=True, scale=-0.3)
    _run(rng, dtype, tf32, (2,), 33, 90, 64, scale=0.05)


@pytest.mark.parametrize("dtype, tf32", MODES, ids=["f32", "tf32", "f64"])
def test_unaligned_operands_take_the_scalar_kernels(rng, dtype, tf32):
    assert _run(rng, dtype, tf32, (3,), 70, 33, 64, offset=1).endswith("_v1")


def test_bert_shape_tf32_and_exact(rng):
    _run(rng, "float32", True, (8, 12), 512, 512, 64)
    _run(rng, "float32", False, (2, 12), 512, 512, 64, causal=True)


def test_operand_errors_name_the_operand():
    q = cuopjit.zeros((2, 5, 8))
    with pytest.raises(ValueError, match=r"AttentionFloat: q \[2, 5, 8\], k \[3, 5, 8\] and v"):
        bad = cuopjit.zeros((3, 5, 8))
        cuopjit.AttentionFloat().forward(q, bad, bad, cuopjit.zeros((2, 5, 8)))
    with pytest.raises(TypeError, match="AttentionFloat: k is float64, AttentionFloat works on float32"):
        cuopjit.AttentionFloat().forward(q, cuopjit.zeros((2, 5, 8), "float64"), q, q)
    with pytest.raises(ValueError, match="AttentionFloat: q must have at least 2 dimensions"):
        cuopjit.AttentionFloat().forward(cuopjit.zeros(8), q, q, q)


def test_empty_batch_launches_nothing():
    z = cuopjit.zeros((0, 5, 8))
    assert cuopjit.AttentionFloat().forward(z, z, z, z) is z
