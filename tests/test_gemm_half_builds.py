"""The 16-bit wgmma GEMM's builds, each planned directly: every (consumer warpgroups, tile width) of
wgmma_tiles.HALF_BUILDS (three consumers: 192-row tiles) with the blocks per SM build() gives it, on sizes that leave
partial tiles in M, N (a last row shorter than 8 columns) and K; beta 0 stores C through each consumer warp's
shared-memory window in whole 128-byte lines (gemm_wgmma_epilogue.cuh.jinja), beta != 0 reads and writes C pair by
pair; batched with a broadcast weight. Outputs NaN-poisoned inside guard regions, bound as test_gemm_half.py's.
Without a GPU: which problems the heuristic gives three consumers, and that they compile without spills."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cuopjit
from cuopjit.expr import parse_epilogue
from cuopjit.ops import epilogue
from cuopjit.ops.gemm import plans, wgmma, wgmma_plan, wgmma_tiles
from cuopjit.target import named

from conftest import check_guards, compiles_without_spills, guarded, make_config
from half_maps import HALF, assert_half, gamma32, half_input, rounded

SM90 = named("sm_90")
TRANS = [(False, False), (False, True), (True, False), (True, True)]
THREE = [b for b in wgmma_tiles.HALF_BUILDS if b[0] == 3]


def _builds(problem):
    """The pool's builds this problem's layout takes (B stored K x N: widths of whole 64-column boxes)."""
    return [wgmma.build(c, q, SM90, False, problem=problem, bk=64) for c, q in wgmma_tiles.HALF_BUILDS
            if problem.trans_b or q % wgmma.MN_BOX == 0]


def _run(rng, dtype, problem, choice, a, b, c0):
    """Run `choice` on `problem` (C guarded, holding c0 where beta reads it); return C as float64."""
    from cuopjit.config import DEFAULT
    from cuopjit.run import executor
    shape = (problem.batch, problem.m, problem.n) if problem.batch > 1 else (problem.m, problem.n)
    c = guarded(shape, dtype, fill=c0 if problem.beta else None)
    ta, tb = cuopjit.tensor(a), cuopjit.tensor(b)
    executor.load(wgmma_plan.plan(problem, choice, SM90), 0, DEFAULT)((ta.ptr, tb.ptr, c.ptr), 0)
    cuopjit.synchronize()
    check_guards(c)
    return c.to_numpy()


def _check(rng, dtype, m, n, k, ta, tb, beta, builds=None):
    a = half_input(rng, (k, m) if ta else (m, k), dtype, 1.0)
    b = half_input(rng, (n, k) if tb else (k, n), dtype, 1.0)
    c0 = half_input(rng, (m, n), dtype, 1.0)
    problem = plans.packed(dtype, m, n, k, ta, tb, alpha=0.5, beta=beta)
    a64, b64, c64 = (a.T if ta else a).astype(np.float64), (b.T if tb else b).astype(np.float64), c0.astype(np.float64)
    b32 = gamma32(2 * (k + 16)) * (0.5 * (np.abs(a64) @ np.abs(b64)) + abs(beta) * np.abs(c64))
    ref, bound = rounded(0.5 * (a64 @ b64) + beta * c64, b32, dtype)
    for choice in builds or _builds(problem):
        got = _run(rng, dtype, problem, choice, a, b, c0)
        assert_half(got, ref, bound, f"{choice.label} {dtype} {m}x{n}x{k} ta={ta} tb={tb} beta={beta}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, ta, tb", [("float16", False, True), ("bfloat16", False, False)])
def test_every_build_matches_float64(rng, dtype, ta, tb):
    _check(rng, dtype, 400, 392, 200, ta, tb, 0.0)


@pytest.mark.gpu
@pytest.mark.parametrize("ta, tb", TRANS)
@pytest.mark.parametrize("dtype", HALF)
def test_three_consumers_in_every_layout(rng, dtype, ta, tb):
    """192-row tiles: M past a multiple of 192 (a last tile of 16 rows), N past the tile width, beta 0 and not."""
    for beta in (0.0, -1.0):
        probe = plans.packed(dtype, 400, 392, 200, ta, tb)
        three = [ch for ch in _builds(probe) if ch.consumers == 3]
        assert three
        _check(rng, dtype, 400, 392, 200, ta, tb, beta, three)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_three_consumers_batched_with_a_broadcast_weight(rng, dtype):
    batch, m, n, k = 3, 200, 256, 72
    a, b = half_input(rng, (batch, m, k), dtype, 1.0), half_input(rng, (k, n), dtype, 1.0)
    problem = dataclasses.replace(plans.packed(dtype, m, n, k), batch=batch, stride_a=m * k, stride_b=0,
                                  stride_c=m * n)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref, bound = rounded(a64 @ b64, gamma32(2 * (k + 16)) * (np.abs(a64) @ np.abs(b64)), dtype)
    for choice in (ch for ch in _builds(problem) if ch.consumers == 3):
        assert_half(_run(rng, dtype, problem, choice, a, b, None), ref, bound, f"{choice.label} batched")


def test_three_consumers_where_they_fill_whole_rounds():
    """4096 x 2304 x 768 (BERT's QKV product): 192 x 192 tiles, 264 of them in two rounds of 132 SMs; the square
    and FFN products keep 128-row tiles; a user epilogue keeps the two-consumer pool."""
    cfg = make_config().snapshot()
    for dtype in HALF:
        qkv = plans.FAMILY.default_plan(plans.packed(dtype, 4096, 2304, 768, False, True), cfg, SM90)
        assert qkv.choice.startswith("wgmma_t192x192x64") and qkv.launches[0].block == (512, 1, 1)
        for m, n, k in ((4096, 4096, 4096), (4096, 3072, 768), (4096, 768, 3072)):
            assert plans.FAMILY.default_plan(plans.packed(dtype, m, n, k, False, True), cfg, SM90).choice.startswith(
                "wgmma_t128x")
    bias = epilogue.make_key(parse_epilogue("relu(acc + bias)"), {"bias": "per_column"})
    epi = dataclasses.replace(plans.packed("float16", 4096, 2304, 768, False, True), epilogue=bias)
    assert all(ch.consumers < 3 for ch in wgmma.choices(epi, cfg, SM90, False))


def test_three_consumer_kernels_compile_without_spills():
    specs = []
    for dtype, ta, tb in (("float16", False, True), ("bfloat16", True, False)):
        problem = plans.packed(dtype, 400, 392, 200, ta, tb)
        specs += [wgmma_plan.plan(problem, ch, SM90).launches[0].spec for ch in _builds(problem) if ch.consumers == 3]
    compiles_without_spills(specs, "sm_90a")
