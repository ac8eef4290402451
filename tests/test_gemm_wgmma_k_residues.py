"""The Hopper wgmma GEMM over every K residue its k-tiles can leave (issue 28: a k-tile count of
(K + BK - 2) / BK, which drops the last k-tile when K = 32j + 1, passed every GPU test).

K = 32j + r for residues r of the 32-wide k-tile (1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31 and 0) and j = 0, 1, 2
and 7 (an odd and an even count of k-tiles: the consumers take them in pairs), odd M and N, on 3xTF32 (any
layout and alignment: the split reads A and B) and on TF32 (16-byte rows: K a multiple of 4), alpha and beta,
C NaN-poisoned where beta = 0, canaries around C. Componentwise bound as tests/test_gemm_wgmma.py: u (|alpha|
|op(A)| |op(B)| + |beta| |C0|), u = (K + 16) float32 roundings, on the operands as the kernel reads them
(TF32: truncated to 10 mantissa bits; 3xTF32: exact)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import cuopjit
from conftest import check_guards, guarded, make_config

BK = 32
RESIDUES = (1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 0)
KS = sorted({BK * j + r for j in (0, 1, 2, 7) for r in RESIDUES} - {0})
LAYOUTS = list(itertools.product((False, True), repeat=2))
# 3xTF32 runs on wgmma where M N >= 200 (M + N) (narrower products take the exact SIMT kernel)
M_ODD, N_ODD = 417, 403


def _truncated(x: np.ndarray) -> np.ndarray:
    """float32 as wgmma reads a raw float32 from shared memory for TF32: the low 13 mantissa bits dropped."""
    return (np.ascontiguousarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def _ref(a, b, c0, trans_a, trans_b, alpha, beta):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return alpha * ((a.T if trans_a else a) @ (b.T if trans_b else b)) + beta * c0.astype(np.float64)


def _run(rng, m, n, k, trans_a, trans_b, alpha, beta, precision):
    """One JITGemmFloat forward on wgmma (asserted from the kernel's name) checked against float64."""
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    c = guarded([m, n], np.float32, fill=c0 if beta else None)
    gemm = cuopjit.GemmFloat(trans_a, trans_b, alpha, beta)
    gemm.set_weight(cuopjit.tensor(b))
    op = cuopjit.JITGemmFloat(gemm)
    op.set_jit_config(make_config(kernel_type="tensor_core", precision=precision))
    op.forward(cuopjit.tensor(a), c)
    check_guards(c)
    name = op.get_performance_profile().kernel_name
    assert "_wgmma_" in name and ("_3xtf32" in name) == (precision == "3xtf32"), name
    if precision == "tf32":
        a, b = _truncated(a), _truncated(b)
    u = (k + 16) * np.finfo(np.float32).eps
    bound = u * _ref(np.abs(a), np.abs(b), np.abs(c0), trans_a, trans_b, abs(alpha), abs(beta))
    out = c.to_numpy()
    err = np.abs(out.astype(np.float64) - _ref(a, b, c0, trans_a, trans_b, alpha, beta))
    assert np.all(np.isfinite(out)) and np.all(err <= bound), (
        f"{name} {m}x{n}x{k} (K = {BK} * {k // BK} + {k % BK}) trans=({trans_a},{trans_b}): "
        f"{int(np.sum(~(err <= bound)))} elements over the bound, worst by {np.nanmax(err - bound):.3g}")


def _scales(k: int) -> tuple[float, float]:
    """alpha, beta: plain for an even count of whole k-tiles, scaled with C read for an odd one."""
    return (1.0, 0.0) if (k // BK) % 2 == 0 else (-1.5, 0.5)


@pytest.mark.gpu
@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS, ids=["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("k", KS)
def test_3xtf32_every_k_residue(rng, k, trans_a, trans_b):
    """Odd M, N and K: unaligned operands, split into hi and lo parts for every layout, A^T @ B included."""
    _run(rng, M_ODD, N_ODD, k, trans_a, trans_b, *_scales(k), "3xtf32")


@pytest.mark.gpu
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, True)], ids=["nn", "nt", "tt"])
@pytest.mark.parametrize("k", sorted({k for k in KS if k % 4 == 0} | {4, 12, 20, 28, 44, 60}))
def test_tf32_every_k_residue_of_aligned_rows(rng, k, trans_a, trans_b):
    """TF32 reads A and B by TMA: rows of 16 bytes (K, and N or M where they are the leading dimension, multiples
    of 4); M odd where it is not a leading dimension."""
    _run(rng, M_ODD + 3 if trans_a else M_ODD, N_ODD + 1, k, trans_a, trans_b, *_scales(k), "tf32")
