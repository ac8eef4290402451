"""Flatten and View: CPU build of every kernel, shape checks, GPU results against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit.ops.shape import flattened_shape

DTYPES = [np.float32, np.float64]


def test_flattened_shape():
    assert flattened_shape((32, 64, 56, 56)) == (32, 64 * 56 * 56)
    assert flattened_shape((2, 3, 4), 0) == (24,)
    assert flattened_shape((2, 3, 4, 5), 1, 2) == (2, 12, 5)
    assert flattened_shape((2, 3, 4), -2, -1) == (2, 12)
    assert flattened_shape(()) == (1,)
    with pytest.raises(ValueError, match=r"start_dim=3, end_dim=-1 out of range for a 2-D input of shape \[2, 3\]"):
        flattened_shape((2, 3), 3)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, start, end", [((32, 64, 7, 7), 1, -1), ((1,), 0, -1), ((7, 33), 0, -1),
                                               ((2, 3, 1000, 4097), 2, 3), ((3, 5, 7), 0, 1)])
def test_flatten(rng, dtype, shape, start, end):
    a = rng.standard_normal(shape).astype(dtype)
    want = flattened_shape(shape, start, end)
    x, y = cuopjit.tensor(a), cuopjit.empty(want, dtype).fill(float("nan"))
    op = (cuopjit.FlattenFloat if dtype == np.float32 else cuopjit.FlattenDouble)()
    assert op.forward(x, y, start_dim=start, end_dim=end) is y
    assert np.array_equal(y.to_numpy(), a.reshape(want))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xshape, offset, shape", [
    ((32, 64, 56, 56), (0, 0, 0, 0), (32, 64, 56, 56)),
    ((4, 6, 8, 8), (1, 2, 0, 0), (2, 3, 8, 8)),
    ((4, 6, 8, 8), (1, 2, 3, 1), (2, 3, 4, 7)),
    ((7, 33), (3, 5), (4, 28)),
    ((1000,), (7,), (33,)),
    ((4097,), (1,), (4096,)),
    ((2, 1, 33, 7, 5), (1, 0, 4, 2, 1), (1, 1, 20, 5, 4)),
    ((5, 1000), (2, 0), (3, 1000)),
    ((5, 12), (1, 4), (4, 8)),
])
def test_view(rng, dtype, xshape, offset, shape):
    a = rng.standard_normal(xshape).astype(dtype)
    ref = a[tuple(slice(o, o + s) for o, s in zip(offset, shape))]
    x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
    op = (cuopjit.ViewFloat if dtype == np.float32 else cuopjit.ViewDouble)()
    assert op.forward(x, y, list(offset), list(shape)) is y
    assert np.array_equal(y.to_numpy(), ref)
    op2 = (cuopjit.ViewFloat if dtype == np.float32 else cuopjit.ViewDouble)()
    op2.set_offset(list(offset))
    op2.set_shape(list(shape))
    y.fill(float("nan"))
    op2.forward(x, y)
    assert np.array_equal(y.to_numpy(), ref)


@pytest.mark.gpu
def test_shape_errors():
    x = cuopjit.empty([4, 6])
    with pytest.raises(ValueError, match=r"FlattenFloat: y has shape \[4, 5\], expected \[24\] \(x of shape \[4, 6\]"):
        cuopjit.FlattenFloat().forward(x, cuopjit.empty([4, 5]), start_dim=0)
    with pytest.raises(ValueError, match=r"ViewFloat: the view at offset \[2, 0\] with shape \[3, 6\] leaves x of "
                                         r"shape \[4, 6\] along dim 0 \(2 \+ 3 > 4\)"):
        cuopjit.ViewFloat().forward(x, cuopjit.empty([3, 6]), [2, 0], [3, 6])
    with pytest.raises(ValueError, match=r"ViewFloat: y has shape \[3, 5\], expected the view's shape \[3, 6\]"):
        cuopjit.ViewFloat().forward(x, cuopjit.empty([3, 5]), [0, 0], [3, 6])
    with pytest.raises(ValueError, match=r"must each have 2 entries"):
        cuopjit.ViewFloat().forward(x, cuopjit.empty([3, 6]), [0], [3, 6])
    e = cuopjit.empty([0, 6])
    assert cuopjit.ViewFloat().forward(x, e, [0, 0], [0, 6]) is e
