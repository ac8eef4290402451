"""Property-based GPU tests of ReLU and BLAS-1 (scal, axpy, copy, dot) and of the window and global pools in
float16 and bfloat16, against float64 NumPy of the 16-bit inputs: exact where the kernels move or compare values,
within the bounds of tests/half_maps.py where they compute.

Shapes, configs, layouts, alignment (2 bytes past 16: the scalar paths) and seeds are drawn by Hypothesis
(tests/property_support.py), as tests/test_properties_maps.py does for float32 and float64."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402

import cuopjit  # noqa: E402
from cuopjit import layout  # noqa: E402
import property_support as ps  # noqa: E402
from conftest import check_guards  # noqa: E402
from half_maps import HALF, U32, assert_half, bits, gamma32, rounded  # noqa: E402
from layout_models import laid  # noqa: E402
from test_properties_maps import _nan_at, pool_reference, window_cases  # noqa: E402

pytestmark = pytest.mark.gpu
DTYPES = st.sampled_from(HALF)
LAYOUTS = st.sampled_from([layout.CONTIGUOUS, layout.CHANNELS_LAST])


def _cls(name: str, dtype: str) -> type:
    return getattr(cuopjit, name + ("Half" if dtype == "float16" else "BFloat16"))


def _randn(seed: int, shape, dtype: str, scale: float = 1.0) -> np.ndarray:
    return ps.randn(seed, shape, np.float32, scale).astype(dtype)


@given(dtype=DTYPES, shape=ps.shapes(max_size=1 << 20), nans=st.integers(0, 3), in_place=st.booleans(),
       misaligned=st.booleans(), data=st.data(), seed=ps.SEEDS)
def test_relu_is_exact(dtype, shape, nans, in_place, misaligned, data, seed):
    fields = data.draw(ps.jit_fields(_cls("Relu", dtype)), label="fields")
    a = _nan_at(_randn(seed, shape, dtype, 1e4 if dtype == "bfloat16" else 3.0), seed, nans)
    x = ps.output(shape, dtype, misaligned, fill=a)
    y = x if in_place else ps.output(shape, dtype, misaligned)
    assert ps.run(_cls("Relu", dtype)(), fields, x, y)[0] is y
    check_guards(y)
    a32 = a.astype(np.float32)
    assert np.array_equal(y.to_numpy().astype(np.float32), np.where(a32 < 0, 0, a32), equal_nan=True)


@given(dtype=DTYPES, n=st.one_of(ps.dims(1, 4097), st.integers(1, 1 << 21)), alpha=st.sampled_from([2.5, -1.0, 0.0]),
       misaligned_x=st.booleans(), misaligned_y=st.booleans(), data=st.data(), seed=ps.SEEDS)
def test_blas1_matches_float64(dtype, n, alpha, misaligned_x, misaligned_y, data, seed):
    """scal: alpha x once rounded in float32, then stored; axpy: 2 u32 (|alpha x| + |y|), stored; copy: the bits;
    dot: (n + 4) 2 u32 sum|x y|, the sum stored once."""
    fields = {name: data.draw(ps.jit_fields(_cls(name, dtype)), label=f"{name} fields")
              for name in ("Scal", "Axpy", "Copy", "Dot")}
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n).astype(np.float32).astype(dtype)
    b = rng.standard_normal(n).astype(np.float32).astype(dtype)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    x = ps.output([n], dtype, misaligned_x, fill=a)
    ps.run(_cls("Scal", dtype)(alpha), fields["Scal"], x)
    check_guards(x)
    assert_half(x.to_numpy(), *rounded(alpha * a64, U32 * np.abs(alpha * a64), dtype), f"scal({alpha}) of {n}")
    x, y = ps.device(a, misaligned_x), ps.output([n], dtype, misaligned_y, fill=b)
    ps.run(_cls("Axpy", dtype)(alpha), fields["Axpy"], x, y)
    check_guards(y)
    assert_half(y.to_numpy(), *rounded(alpha * a64 + b64, 2 * U32 * (np.abs(alpha * a64) + np.abs(b64)), dtype),
                f"axpy({alpha}) of {n}")
    z = ps.output([n], dtype, misaligned_y)
    ps.run(_cls("Copy", dtype)(), fields["Copy"], x, z)
    check_guards(z)
    assert np.array_equal(bits(z.to_numpy()), bits(a)), f"copy of {n}"
    r = ps.output([1], dtype)
    ps.run(_cls("Dot", dtype)(), fields["Dot"], x, ps.device(b, misaligned_y), r)
    check_guards(r)
    assert_half(r.to_numpy(), *rounded(np.array([a64 @ b64]), (n + 4) * 2 * U32 * np.abs(a64 * b64).sum(), dtype),
                f"dot of {n}")


@given(op=st.sampled_from(["max", "avg"]), dtype=DTYPES, case=window_cases(), lay=LAYOUTS, nans=st.integers(0, 2),
       data=st.data(), seed=ps.SEEDS)
def test_window_pools_match_float64(op, dtype, case, lay, nans, data, seed):
    cls = _cls("MaxPool2D" if op == "max" else "AveragePool2D", dtype)
    fields = data.draw(ps.jit_fields(cls), label="fields")
    shape, window = case["shape"], case["window"]
    a = _nan_at(_randn(seed, shape, dtype, 3.0), seed, nans)
    ref, abs_mean = pool_reference(a, op, **window)
    pool = cls(**window) if case["in_constructor"] else cls()
    x, y = laid(shape, dtype, lay).copy_from(a), laid(ref.shape, dtype, lay)
    assert ps.run(pool, fields, x, y, **({} if case["in_constructor"] else window))[0] is y
    check_guards(y)
    what = f"{op} pool of {list(shape)} {dtype} {lay}, {window}"
    if op == "max":
        got = y.to_numpy().astype(np.float64)
        assert np.array_equal(got, ref.astype(dtype).astype(np.float64), equal_nan=True), what
    else:
        k = window["kernel_h"] * window["kernel_w"]
        assert_half(y.to_numpy(), *rounded(ref, gamma32(k + 1) * abs_mean, dtype), what)


@given(op=st.sampled_from(["max", "avg"]), dtype=DTYPES, shape=ps.shapes(min_ndim=4, max_ndim=4, max_size=1 << 20),
       lay=LAYOUTS, keepdims=st.booleans(), data=st.data(), seed=ps.SEEDS)
def test_global_pools_match_float64(op, dtype, shape, lay, keepdims, data, seed):
    cls = _cls("GlobalMaxPool2D" if op == "max" else "GlobalAveragePool2D", dtype)
    fields = data.draw(ps.jit_fields(cls), label="fields")
    a = _randn(seed, shape, dtype, 3.0)
    a64 = a.astype(np.float64)
    x, y = laid(shape, dtype, lay).copy_from(a), ps.output(shape[:2] + ((1, 1) if keepdims else ()), dtype)
    assert ps.run(cls(), fields, x, y)[0] is y
    check_guards(y)
    got = y.to_numpy().reshape(shape[:2])
    if op == "max":
        assert np.array_equal(got.astype(np.float64), a64.max(axis=(2, 3)).astype(dtype).astype(np.float64))
    else:
        hw = shape[2] * shape[3]
        assert_half(got, *rounded(a64.mean(axis=(2, 3)), gamma32(hw + 1) * np.abs(a64).mean(axis=(2, 3)), dtype),
                    f"global avg of {list(shape)} {dtype} {lay}")
