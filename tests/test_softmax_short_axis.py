"""Softmax over a short non-last axis with a wide inner extent (issue 28).

The strided kernel tiles the contiguous inner extent: a block of TX x TY threads owns TX vectors of VEC
columns (TX * VEC columns) by the whole axis, TY threads along the axis. Its cross-warp reduction combined
one column per thread, so where the tile had more columns than the block threads (TX * VEC > TX * TY:
float32 16-byte vectors, VEC = 4, with TY = 2) the columns past TX * TY were never reduced and came out
non-finite or wrong. The plan takes TY = 2 for an axis of T/4 < A <= T/2 elements (T = tile_size, 0: 32,
so 9..16 by default) and TX >= 32 for an inner extent of at least 17 vectors (68 floats); any outer extent.
So the class: float32, x and y 16-byte aligned, the inner extent a multiple of 4 and >= 68, the axis in
(T/4, T/2], block_size >= 64 (32 leaves TX = 16, one warp along the axis). float64 (VEC = 2 <= TY) never
had it; it runs here too. These tests walk the class's edges for every tile size and the issue's shapes."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from conftest import check_guards, guarded, make_config, rel_error

DTYPES = [np.float32, np.float64]
TOL = {np.float32: 2e-6, np.float64: 1e-13}
ISSUE = [((16, 256, 3, 256), 0), ((16, 256, 3, 256), -4), ((16, 196608), 0),
         ((2, 100000), 0), ((64, 4096), 0), ((300, 3, 256), 0)]     # the first three failed, the rest did not
# (tile_size, axis lengths at both ends of (T/4, T/2]), inner extents from the smallest wide one up
TILES = [(0, (9, 16)), (8, (3, 4)), (16, (5, 8)), (32, (9, 16)), (64, (17, 32)), (128, (33, 64))]
INNER = [(68,), (72,), (3, 256), (1, 4100)]


def _reference(a: np.ndarray, axis: int) -> np.ndarray:
    x = a.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _check(op, a: np.ndarray, axis: int, scale: float) -> None:
    x, y = cuopjit.tensor(a), guarded(a.shape, a.dtype)
    assert op.forward(x, y, axis=axis) is y
    check_guards(y)
    out = y.to_numpy()
    bad = int(np.sum(~np.isfinite(out)))
    assert bad == 0, f"{bad} of {out.size} outputs not finite: {list(a.shape)} {a.dtype} axis {axis} x {scale}"
    err = rel_error(out, _reference(a, axis))
    assert err < TOL[a.dtype.type], f"{list(a.shape)} {a.dtype} axis {axis} x {scale}: relative error {err:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("scale", [1.0, 30.0])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis", ISSUE, ids=lambda v: str(v))
def test_the_issues_shapes(rng, shape, axis, dtype, scale):
    op = (cuopjit.SoftmaxFloat if dtype == np.float32 else cuopjit.SoftmaxDouble)()
    _check(op, (rng.standard_normal(shape) * scale).astype(dtype), axis, scale)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inner", INNER, ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("tile, lengths", TILES, ids=lambda v: f"tile{v}" if isinstance(v, int) else None)
def test_every_tile_size_at_the_edges_of_the_class(rng, tile, lengths, inner, dtype):
    """Both ends of the axis window of each tile_size (0: the bare operator), an outer extent of 3, the axis
    counted from the front and the back; block sizes 64 (the smallest in the class) and the default."""
    cls = cuopjit.SoftmaxFloat if dtype == np.float32 else cuopjit.SoftmaxDouble
    ops = [cls()]
    if tile:
        wrapper = cuopjit.JITSoftmaxFloat if dtype == np.float32 else cuopjit.JITSoftmaxDouble
        ops = [wrapper(cls()) for _ in (0, 64)]
        for jit, block in zip(ops, (0, 64)):
            jit.set_jit_config(make_config(tile_size=tile, block_size=block))
    for length in lengths:
        a = rng.standard_normal((3, length) + inner).astype(dtype)
        for op in ops:
            for axis in (1, -1 - len(inner)):
                _check(op, a, axis, 1.0)
