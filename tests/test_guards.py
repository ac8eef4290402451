"""The guard regions the kernel tests put around outputs: they catch a one-element overrun at either end."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit.tensor import Tensor

from conftest import check_guards, guarded

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shift, grow", [(0, 1), (-1, 1), (0, 0)], ids=["one-past-the-end", "one-before", "exact"])
def test_guards_catch_a_one_element_overrun(dtype, shift, grow):
    y = guarded([7, 33], dtype)
    assert np.all(np.isnan(y.to_numpy()))          # the output starts poisoned
    check_guards(y)
    n = y.size + grow
    wider = Tensor._view(y.ptr + shift * y.dtype.itemsize, (n,), y.dtype, y.device, y)
    (cuopjit.CopyFloat if dtype == np.float32 else cuopjit.CopyDouble)().forward(cuopjit.ones([n], dtype), wider)
    if grow:
        with pytest.raises(AssertionError, match=r"out-of-bounds write around an output of shape \[7, 33\]"):
            check_guards(y)
    else:
        check_guards(y)
        assert np.array_equal(y.to_numpy(), np.ones((7, 33)))


def test_guards_keep_the_alignment_and_the_fill():
    fill = np.arange(12, dtype=np.float64).reshape(3, 4)
    y = guarded([3, 4], np.float64, fill=fill)
    assert y.ptr % 16 == 0 and np.array_equal(y.to_numpy(), fill)
    assert guarded([5], np.float32, pad=257).ptr % 16 == 4
