"""AttentionHalf / AttentionBFloat16 on the GPU (mma.sync m16n8k16, float32 sums and softmax) against float64 NumPy
on the same 16-bit inputs: odd lengths, head dims 7 / 16 / 40 / 64 / 128, batch dimensions, causal, Lq != Lk, a
negative and a zero scale, unaligned operands (the scalar kernel); outputs NaN-poisoned inside guard regions.

Tolerance from the math: products of 16-bit operands are exact in float32, so a score is off by at most
(D + 4)·u·S (u = 2^-24, S = max |scale| · Σ_d |q_d| |k_d|); P is rounded once to the storage type (u16: 2^-11
float16, 2^-8 bfloat16) for P·V while the normaliser sums the unrounded weights, and the output is rounded once:
at most (2·δs + 3·u16 + 4·(Lk + 8)·u) · max|v|, times 2 for exp2's few-ulp error.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest

import cuopjit
from cuopjit import target
from cuopjit.build import pipeline
from cuopjit.ops.attention import plans
from cuopjit.tensor import Tensor

from conftest import check_guards, guarded, make_config
from test_attention import _reference

pytestmark = pytest.mark.gpu
DTYPES = {"float16": (np.dtype(np.float16), 2.0 ** -11), "bfloat16": (np.dtype(ml_dtypes.bfloat16), 2.0 ** -8)}
CASES = [((1,), 1, 1, 16), ((2,), 7, 7, 40), ((3,), 33, 257, 64), ((2, 3), 257, 33, 128), ((1,), 64, 64, 7),
         ((2,), 130, 70, 64)]
U = 2.0 ** -24


@pytest.fixture(scope="module", autouse=True)
def prebuilt():
    """Every kernel these tests run, built in parallel first."""
    t = target.of_device(0)
    specs = set()
    for dtype in DTYPES:
        for d in (7, 16, 40, 64, 128):
            for causal in (False, True):
                for aligned in (True, False):
                    p = plans.contiguous(dtype, 1, 64, 64, d, causal, None, aligned)
                    specs.update(plans.FAMILY.default_plan(p, make_config().snapshot(), t).specs)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda s: pipeline.build(s, t.arch), specs))


def _run(rng, name, batch, lq, lk, d, causal=False, scale=None, offset=0):
    dt, u16 = DTYPES[name]
    q, k, v = (rng.standard_normal((*batch, n, d)).astype(dt) for n in (lq, lk, lk))
    ins = [cuopjit.tensor(a) for a in (q, k, v)]
    if offset:   # q one element past a 16-byte boundary: the scalar kernel
        host = np.zeros(q.size + offset, dt)
        host[offset:] = q.ravel()
        base = cuopjit.tensor(host)
        ins[0] = Tensor._view(base.ptr + offset * dt.itemsize, q.shape, dt, base.device, base)
    out = guarded((*batch, lq, d), dt)
    op = (cuopjit.AttentionHalf if name == "float16" else cuopjit.AttentionBFloat16)()
    assert op.forward(*ins, out, scale=scale, causal=causal) is out
    cuopjit.synchronize()
    check_guards(out)
    s = 1 / np.sqrt(d) if scale is None else scale
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    err = np.abs(out.to_numpy().astype(np.float64) - _reference(q64, k64, v64, s, causal)).max()
    big = abs(s) * np.einsum("...id,...jd->...ij", np.abs(q64), np.abs(k64)).max()
    bound = 2 * (2 * (d + 4) * U * big + 3 * u16 + 4 * (lk + 8) * U) * np.abs(v64).max()
    plan = op.plan(*ins, out, scale=scale, causal=causal)
    assert np.isfinite(err) and err <= bound, (plan.choice, err, bound)
    return plan.choice


@pytest.mark.parametrize("name", list(DTYPES))
@pytest.mark.parametrize("batch, lq, lk, d", CASES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_matches_float64(rng, name, batch, lq, lk, d, causal):
    choice = _run(rng, name, batch, lq, lk, d, causal)
    assert choice.startswith("mma16") and choice.endswith("_v1") == (d % 8 != 0)


@pytest.mark.parametrize("name", list(DTYPES))
def test_negative_scale_and_unaligned_operands(rng, name):
    _run(rng, name, (2,), 65, 65, 64, causal=True, scale=-0.3)
    _run(rng, name, (2,), 40, 150, 64, causal=True, scale=0.0)   # uniform weights over the visible keys
    assert _run(rng, name, (3,), 70, 33, 64, offset=1).endswith("_v1")


@pytest.mark.parametrize("name", list(DTYPES))
def test_bert_shape(rng, name):
    _run(rng, name, (8, 12), 512, 512, 64)
