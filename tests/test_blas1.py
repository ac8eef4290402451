"""BLAS-1 (Scal, Axpy, Copy, Dot): CPU build of every kernel, argument checks, GPU results against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from conftest import rel_error

DTYPES = [np.float32, np.float64]
SIZES = [1, 7, 33, 1000, 4097, (1 << 20) + 3]
TOL = {np.float32: 1e-6, np.float64: 1e-14}


def _unaligned(n, dtype):
    """A Tensor of n elements whose pointer is one element past a 16-byte boundary (scalar path)."""
    base = cuopjit.empty([n + 1], dtype)
    view = cuopjit.Tensor._view(base.ptr + np.dtype(dtype).itemsize, (n,), np.dtype(dtype), base.device, base)
    return view


# --- CPU: configuration ----------------------------------------------------------------------
def test_config_validation():
    op = cuopjit.DotFloat()
    cfg = cuopjit.JITConfig()
    cfg.tile_size = 64
    with pytest.raises(ValueError, match=r"DotFloat does not take tile_size=64: choose one of 0, 8, 16, 32"):
        op.check_config(cfg.snapshot())
    cfg = cuopjit.JITConfig()
    cfg.enable_tensor_core = True
    with pytest.raises(ValueError, match="AxpyFloat has no tensor-core kernel"):
        cuopjit.AxpyFloat().check_config(cfg.snapshot())


# --- GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_scal(rng, dtype, n):
    a = rng.standard_normal(n).astype(dtype)
    x = cuopjit.tensor(a)
    op = (cuopjit.ScalFloat if dtype == np.float32 else cuopjit.ScalDouble)(2.5)
    assert op.forward(x) is x
    assert rel_error(x.to_numpy(), 2.5 * a.astype(np.float64)) <= TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_axpy_copy(rng, dtype, n):
    a, b = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    axpy = (cuopjit.AxpyFloat if dtype == np.float32 else cuopjit.AxpyDouble)(-1.5)
    copy = (cuopjit.CopyFloat if dtype == np.float32 else cuopjit.CopyDouble)()
    x, y = cuopjit.tensor(a), cuopjit.tensor(b)
    axpy.forward(x, y)
    assert rel_error(y.to_numpy(), -1.5 * a.astype(np.float64) + b) <= 4 * TOL[dtype]
    z = cuopjit.empty([n], dtype).fill(float("nan"))
    copy.forward(x, z)
    assert np.array_equal(z.to_numpy(), a)
    # the same operators again on unaligned views (scalar fallback, another launch key)
    xu, yu = _unaligned(n, dtype).copy_from(a), _unaligned(n, dtype).fill(float("nan"))
    copy.forward(xu, yu)
    assert np.array_equal(yu.to_numpy(), a)
    yu.copy_from(b)
    axpy.forward(xu, yu)
    assert rel_error(yu.to_numpy(), -1.5 * a.astype(np.float64) + b) <= 4 * TOL[dtype]


@pytest.mark.gpu
def test_copy_any_shapes_same_size(rng):
    a = rng.standard_normal((33, 7)).astype(np.float32)
    y = cuopjit.empty([231], np.float32).fill(float("nan"))
    cuopjit.CopyFloat().forward(cuopjit.tensor(a), y)
    assert np.array_equal(y.to_numpy(), a.ravel())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES + [(1 << 24) + 5])
def test_dot(rng, dtype, n):
    a, b = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    dot = (cuopjit.DotFloat if dtype == np.float32 else cuopjit.DotDouble)()
    x, y = cuopjit.tensor(a), cuopjit.tensor(b)
    got = dot.forward(x, y)
    assert isinstance(got, float)
    ref = float(np.dot(a.astype(np.float64), b.astype(np.float64)))
    scale = float(np.abs(a.astype(np.float64) * b).sum())
    assert abs(got - ref) <= (1e-5 if dtype == np.float32 else 1e-13) * scale
    # bit-for-bit repeatable, also through a fresh operator
    again = [dot.forward(x, y) for _ in range(3)] + [type(dot)().forward(x, y)]
    assert all(np.array(v, dtype=dtype).tobytes() == np.array(got, dtype=dtype).tobytes() for v in again)
    # device-result mode
    r = cuopjit.empty([1], dtype).fill(float("nan"))
    assert dot.forward(x, y, result=r) is r
    assert r.to_numpy()[0] == np.array(got, dtype=dtype)
    # unaligned inputs
    xu, yu = _unaligned(n, dtype).copy_from(a), _unaligned(n, dtype).copy_from(b)
    assert abs(dot.forward(xu, yu) - ref) <= (1e-5 if dtype == np.float32 else 1e-13) * scale


@pytest.mark.gpu
def test_zero_size():
    x, y = cuopjit.empty([0]), cuopjit.empty([0])
    assert cuopjit.DotFloat().forward(x, y) == 0.0
    assert cuopjit.AxpyFloat(2.0).forward(x, y) is y
    assert cuopjit.ScalFloat(2.0).forward(x) is x
    assert cuopjit.CopyFloat().forward(x, y) is y


@pytest.mark.gpu
def test_errors():
    x, y = cuopjit.empty([10]), cuopjit.empty([11])
    with pytest.raises(ValueError, match=r"AxpyFloat: x has shape \[10\] \(10 elements\) and y has shape \[11\] "
                                         r"\(11 elements\)"):
        cuopjit.AxpyFloat(1.0).forward(x, y)
    with pytest.raises(ValueError, match=r"DotFloat: x has shape \[10\] .* y has shape \[11\]"):
        cuopjit.DotFloat().forward(x, y)
    with pytest.raises(TypeError, match="CopyFloat: y is float64, CopyFloat works on float32"):
        cuopjit.CopyFloat().forward(x, cuopjit.empty([10], "float64"))
    with pytest.raises(TypeError, match="ScalDouble: x must be a cuopjit Tensor, got ndarray"):
        cuopjit.ScalDouble(1.0).forward(np.zeros(3))
    with pytest.raises(ValueError, match=r"DotFloat: result has shape \[2\], expected one element"):
        cuopjit.DotFloat().forward(x, x, result=cuopjit.empty([2]))
