"""Property-based GPU tests of the memory-bound operators: ReLU (NaN stays NaN, in place), max / average pools
(any window, stride and padding, NaN propagating) and global pools, BLAS-1 (scal, axpy, copy, dot) and
Flatten / View, against float64 NumPy: exact where the operator moves or compares values, within the
rounding of the arithmetic where it computes.

Shapes, configs, alignment and seeds are drawn by Hypothesis (tests/property_support.py); the profiles and the
example database are set up in tests/conftest.py (`--hypothesis-profile=long` for a longer run)."""
from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402

import cuopjit  # noqa: E402
import property_support as ps  # noqa: E402
from conftest import check_guards  # noqa: E402

pytestmark = pytest.mark.gpu
F32_F64 = {"relu": (cuopjit.ReluFloat, cuopjit.ReluDouble), "max": (cuopjit.MaxPool2DFloat, cuopjit.MaxPool2DDouble),
           "avg": (cuopjit.AveragePool2DFloat, cuopjit.AveragePool2DDouble),
           "global_max": (cuopjit.GlobalMaxPool2DFloat, cuopjit.GlobalMaxPool2DDouble),
           "global_avg": (cuopjit.GlobalAveragePool2DFloat, cuopjit.GlobalAveragePool2DDouble),
           "scal": (cuopjit.ScalFloat, cuopjit.ScalDouble), "axpy": (cuopjit.AxpyFloat, cuopjit.AxpyDouble),
           "copy": (cuopjit.CopyFloat, cuopjit.CopyDouble), "dot": (cuopjit.DotFloat, cuopjit.DotDouble),
           "flatten": (cuopjit.FlattenFloat, cuopjit.FlattenDouble), "view": (cuopjit.ViewFloat, cuopjit.ViewDouble)}


def _cls(name: str, dtype: str) -> type:
    return F32_F64[name][dtype == "float64"]


def _nan_at(a: np.ndarray, seed: int, count: int) -> np.ndarray:
    """`a` with NaN at `count` positions drawn from `seed`."""
    a = a.copy()
    a.reshape(-1)[np.random.default_rng(seed + 1).integers(0, a.size, count)] = np.nan
    return a


def gamma(k: int, dtype) -> float:
    """Higham's gamma_k = k u / (1 - k u), u the unit roundoff of `dtype`."""
    return k * ps.unit(dtype) / (1 - k * ps.unit(dtype))


def assert_mean_close(got, ref, abs_mean, count: int, dtype, what: str) -> None:
    """An average of `count` terms in `dtype`: the sum within gamma_{count-1} sum|x|, the division and the store
    one u each: gamma_{count+1} mean|x|, plus the float64 reference's own gamma_{count+1}(float64) mean|x|."""
    ps.assert_within(got, ref, (gamma(count + 1, dtype) + gamma(count + 1, np.float64)) * abs_mean, what)


# --- ReLU ---------------------------------------------------------------------------------------------

@given(dtype=ps.DTYPES, shape=ps.shapes(max_size=1 << 20), nans=st.integers(0, 3), in_place=st.booleans(),
       misaligned=st.booleans(), data=st.data(), seed=ps.SEEDS)
def test_relu_is_exact(dtype, shape, nans, in_place, misaligned, data, seed):
    fields = data.draw(ps.jit_fields(_cls("relu", dtype)), label="fields")
    a = _nan_at(ps.randn(seed, shape, dtype), seed, nans)
    x = ps.output(shape, dtype, misaligned, fill=a)
    y = x if in_place else ps.output(shape, dtype, misaligned)
    assert ps.run(_cls("relu", dtype)(), fields, x, y)[0] is y
    check_guards(y)
    assert np.array_equal(y.to_numpy(), np.where(a < 0, 0, a), equal_nan=True)


# --- pools --------------------------------------------------------------------------------------------

@st.composite
def window_cases(draw) -> dict:
    kh, kw = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    ph, pw = draw(st.integers(0, kh // 2)), draw(st.integers(0, kw // 2))
    nc = draw(ps.shapes(min_ndim=2, max_ndim=2, max_size=4096))
    room = max(1, (1 << 20) // math.prod(nc))
    h = draw(ps.dims(max(1, kh - 2 * ph), max(kh, min(2049, room))))
    w = draw(ps.dims(max(1, kw - 2 * pw), max(kw, min(4097, room // h))))
    stride = {} if draw(st.booleans()) else {"stride_h": draw(st.integers(1, 4)), "stride_w": draw(st.integers(1, 4))}
    return {"shape": nc + (h, w), "window": {"kernel_h": kh, "kernel_w": kw, "pad_h": ph, "pad_w": pw, **stride},
            "in_constructor": draw(st.booleans())}


def pool_reference(a: np.ndarray, op: str, kernel_h, kernel_w, pad_h=0, pad_w=0, stride_h=None, stride_w=None):
    """float64 windows over the input padded with -inf (max) or 0 (average over the whole window): (pooled,
    mean |x| per window)."""
    sh, sw = stride_h or kernel_h, stride_w or kernel_w
    a = a.astype(np.float64)
    pad = ((0, 0), (0, 0), (pad_h, pad_h), (pad_w, pad_w))
    ap = np.pad(a, pad, constant_values=-np.inf if op == "max" else 0.0)
    win = np.lib.stride_tricks.sliding_window_view(ap, (kernel_h, kernel_w), axis=(2, 3))[:, :, ::sh, ::sw]
    oh, ow = (a.shape[2] + 2 * pad_h - kernel_h) // sh + 1, (a.shape[3] + 2 * pad_w - kernel_w) // sw + 1
    win = win[:, :, :oh, :ow]
    absw = np.lib.stride_tricks.sliding_window_view(np.pad(np.abs(a), pad), (kernel_h, kernel_w),
                                                    axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow]
    return (win.max(axis=(4, 5)) if op == "max" else win.mean(axis=(4, 5))), absw.mean(axis=(4, 5))


@given(op=st.sampled_from(["max", "avg"]), dtype=ps.DTYPES, case=window_cases(), nans=st.integers(0, 2),
       misaligned=st.booleans(), data=st.data(), seed=ps.SEEDS)
def test_window_pools_match_float64(op, dtype, case, nans, misaligned, data, seed):
    fields = data.draw(ps.jit_fields(_cls(op, dtype)), label="fields")
    shape, window = case["shape"], case["window"]
    a = _nan_at(ps.randn(seed, shape, dtype), seed, nans)
    ref, abs_mean = pool_reference(a, op, **window)
    pool = _cls(op, dtype)(**window) if case["in_constructor"] else _cls(op, dtype)()
    x, y = ps.device(a, misaligned), ps.output(ref.shape, dtype, misaligned)
    assert ps.run(pool, fields, x, y, **({} if case["in_constructor"] else window))[0] is y
    check_guards(y)
    what = f"{op} pool of {list(shape)} {dtype}, {window}"
    if op == "max":
        assert np.array_equal(y.to_numpy(), ref.astype(dtype), equal_nan=True), what
    else:
        assert_mean_close(y.to_numpy(), ref, abs_mean, window["kernel_h"] * window["kernel_w"], dtype, what)


@given(op=st.sampled_from(["global_max", "global_avg"]), dtype=ps.DTYPES,
       shape=ps.shapes(min_ndim=4, max_ndim=4, max_size=1 << 20), keepdims=st.booleans(), nans=st.integers(0, 2),
       misaligned=st.booleans(), data=st.data(), seed=ps.SEEDS)
def test_global_pools_match_float64(op, dtype, shape, keepdims, nans, misaligned, data, seed):
    fields = data.draw(ps.jit_fields(_cls(op, dtype)), label="fields")
    a = _nan_at(ps.randn(seed, shape, dtype), seed, nans)
    a64 = a.astype(np.float64)
    ref = a64.max(axis=(2, 3)) if op == "global_max" else a64.mean(axis=(2, 3))
    x, y = ps.device(a, misaligned), ps.output(shape[:2] + ((1, 1) if keepdims else ()), dtype, misaligned)
    assert ps.run(_cls(op, dtype)(), fields, x, y)[0] is y
    check_guards(y)
    got, what = y.to_numpy().reshape(ref.shape), f"{op} of {list(shape)} {dtype}"
    if op == "global_max":
        assert np.array_equal(got, ref.astype(dtype), equal_nan=True), what
    else:
        assert_mean_close(got, ref, np.abs(a64).mean(axis=(2, 3)), shape[2] * shape[3], dtype, what)


# --- BLAS-1 -------------------------------------------------------------------------------------------

@given(dtype=ps.DTYPES, n=st.one_of(ps.dims(1, 4097), st.integers(1, 1 << 21)), alpha=st.sampled_from([2.5, -1.0, 0.0]),
       misaligned_x=st.booleans(), misaligned_y=st.booleans(), device_result=st.booleans(), data=st.data(),
       seed=ps.SEEDS)
def test_blas1_matches_float64(dtype, n, alpha, misaligned_x, misaligned_y, device_result, data, seed):
    """scal: one rounding of alpha x; axpy: alpha x + y within 2u (|alpha x| + |y|) (fused or not); copy exact;
    dot: n products summed, (n + 4) eps sum|x y| (any order, any split)."""
    fields = {name: data.draw(ps.jit_fields(_cls(name, dtype)), label=f"{name} fields")
              for name in ("scal", "axpy", "copy", "dot")}
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    a64, b64, u = a.astype(np.float64), b.astype(np.float64), ps.unit(dtype)
    x = ps.output([n], dtype, misaligned_x, fill=a)
    assert ps.run(_cls("scal", dtype)(alpha), fields["scal"], x)[0] is x
    check_guards(x)
    ps.assert_within(x.to_numpy(), alpha * a64, 2 * u * np.abs(alpha * a64), f"scal({alpha}) of {n} {dtype}")
    x, y = ps.device(a, misaligned_x), ps.output([n], dtype, misaligned_y, fill=b)
    ps.run(_cls("axpy", dtype)(alpha), fields["axpy"], x, y)
    check_guards(y)
    ps.assert_within(y.to_numpy(), alpha * a64 + b64, 2 * u * (np.abs(alpha * a64) + np.abs(b64)),
                     f"axpy({alpha}) of {n} {dtype}")
    z = ps.output([n], dtype, misaligned_y)
    ps.run(_cls("copy", dtype)(), fields["copy"], x, z)
    check_guards(z)
    assert np.array_equal(z.to_numpy(), a), f"copy of {n} {dtype}"
    y = ps.device(b, misaligned_y)
    if device_result or fields["dot"] is not None:    # through a JIT wrapper the sum goes to `result`
        r = ps.output([1], dtype)
        assert ps.run(_cls("dot", dtype)(), fields["dot"], x, y, r)[0] is r
        check_guards(r)
        got = float(r.to_numpy()[0])
    else:
        got = ps.run(_cls("dot", dtype)(), fields["dot"], x, y)[0]
        assert isinstance(got, float)
    ps.assert_within(np.array([got]), np.array([a64 @ b64]), (n + 4) * 2 * u * np.abs(a64 * b64).sum(),
                     f"dot of {n} {dtype}")


# --- Flatten / View -----------------------------------------------------------------------------------

@given(dtype=ps.DTYPES, shape=ps.shapes(max_size=1 << 20), misaligned=st.booleans(), data=st.data(), seed=ps.SEEDS)
def test_flatten_and_view_are_exact(dtype, shape, misaligned, data, seed):
    nd = len(shape)
    start = data.draw(st.integers(-nd, nd - 1), label="start_dim")
    end = data.draw(st.integers(start % nd, nd - 1), label="end_dim") - (nd if data.draw(st.booleans()) else 0)
    offset = [data.draw(st.integers(0, d - 1), label=f"offset {i}") for i, d in enumerate(shape)]
    view = [data.draw(st.integers(1, d - o), label=f"extent {i}") for i, (d, o) in enumerate(zip(shape, offset))]
    a = ps.randn(seed, shape, dtype)
    x = ps.device(a, misaligned)
    s, e = start % nd, end % nd
    want = shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:]
    y = ps.output(want, dtype, misaligned)
    fields = data.draw(ps.jit_fields(_cls("flatten", dtype)), label="flatten fields")
    assert ps.run(_cls("flatten", dtype)(), fields, x, y, start_dim=start, end_dim=end)[0] is y
    check_guards(y)
    assert np.array_equal(y.to_numpy(), a.reshape(want)), f"flatten {list(shape)} from {start} to {end}"
    v = ps.output(view, dtype, misaligned)
    fields = data.draw(ps.jit_fields(_cls("view", dtype)), label="view fields")
    assert ps.run(_cls("view", dtype)(), fields, x, v, offset, view)[0] is v
    check_guards(v)
    ref = a[tuple(slice(o, o + n) for o, n in zip(offset, view))]
    assert np.array_equal(v.to_numpy(), ref), f"view of {list(shape)} at {offset} of {view}"
