"""Property-based GPU tests of the products: GEMM (both transposes, alpha/beta, every config the wrapper accepts:
SIMT, TF32 and 3xTF32 on tensor cores, DMMA), GEMV, MatMul (NumPy broadcasting, 1-D operands), BatchMatMul and
Conv2D (stride, padding, dilation, groups, bias, ReLU), componentwise against float64 NumPy
(property_support.product_check: (k + 16) eps |A| |B| on the operands as the units read them).

Shapes, configs, alignment and seeds are drawn by Hypothesis (tests/property_support.py); the profiles and the
example database are set up in tests/conftest.py (`--hypothesis-profile=long` for a longer run)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402

import cuopjit  # noqa: E402
import property_support as ps  # noqa: E402
from conftest import check_guards  # noqa: E402

pytestmark = pytest.mark.gpu
SCALES = st.sampled_from([1.0, 0.0, -0.5, 2.0])


def _cls(dtype: str, f32: type, f64: type) -> type:
    return f32 if dtype == "float32" else f64


def _model(x: np.ndarray, model) -> np.ndarray:
    return (x if model is None else model(x)).astype(np.float64)


# --- GEMM ---------------------------------------------------------------------------------------------

@st.composite
def gemm_cases(draw) -> dict:
    dtype = draw(ps.DTYPES)
    m = draw(ps.dims(1, 4097))
    n = draw(ps.dims(1, min(4097, (1 << 21) // m)))
    k = draw(ps.dims(1, min(4097, (1 << 26) // (m * n))))
    beta = draw(st.sampled_from([0.0, 1.0, -1.5]))
    return {"dtype": dtype, "m": m, "n": n, "k": k, "trans_a": draw(st.booleans()), "trans_b": draw(st.booleans()),
            "alpha": draw(SCALES), "beta": beta, "fields": draw(ps.jit_fields(_cls(dtype, cuopjit.GemmFloat,
                                                                                       cuopjit.GemmDouble))),
            "misaligned_a": draw(st.booleans()), "misaligned_c": draw(st.booleans())}


@given(case=gemm_cases(), seed=ps.SEEDS)
def test_gemm_matches_float64(case, seed):
    """C = alpha op(A) op(B) + beta C, C NaN-poisoned where beta = 0 (C must not be read then)."""
    dtype, m, n, k, ta, tb = (case[f] for f in ("dtype", "m", "n", "k", "trans_a", "trans_b"))
    alpha, beta = case["alpha"], case["beta"]
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    c0 = rng.standard_normal((m, n)).astype(dtype)
    op = _cls(dtype, cuopjit.GemmFloat, cuopjit.GemmDouble)(ta, tb, alpha, beta)
    op.set_weight(cuopjit.tensor(b))
    c = ps.output((m, n), dtype, case["misaligned_c"], fill=c0 if beta else None)
    out, units = ps.run(op, case["fields"], ps.device(a, case["misaligned_a"]), c)
    assert out is c
    check_guards(c)

    def terms(model_a, model_b):
        a64, b64 = _model(a, model_a), _model(b, model_b)
        a64, b64 = (a64.T if ta else a64), (b64.T if tb else b64)
        return (alpha * (a64 @ b64) + beta * c0.astype(np.float64),
                abs(alpha) * (np.abs(a64) @ np.abs(b64)) + abs(beta) * np.abs(c0.astype(np.float64)))
    ps.product_check(c.to_numpy(), terms, k, units, dtype, f"gemm {m}x{n}x{k} trans=({ta},{tb}) {dtype}")


# --- GEMV ---------------------------------------------------------------------------------------------

@st.composite
def gemv_cases(draw) -> dict:
    dtype = draw(ps.DTYPES)
    m = draw(ps.dims(1, 4097))
    return {"dtype": dtype, "m": m, "n": draw(ps.dims(1, min(1 << 17, (1 << 22) // m))),
            "trans": draw(st.booleans()), "alpha": draw(SCALES), "beta": draw(st.sampled_from([0.0, 1.0, -1.5])),
            "fields": draw(ps.jit_fields(_cls(dtype, cuopjit.GemvFloat, cuopjit.GemvDouble))),
            "misaligned": draw(st.booleans())}


@given(case=gemv_cases(), seed=ps.SEEDS)
def test_gemv_matches_float64(case, seed):
    dtype, m, n, trans, alpha, beta = (case[f] for f in ("dtype", "m", "n", "trans", "alpha", "beta"))
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, n)).astype(dtype)
    x = rng.standard_normal(m if trans else n).astype(dtype)
    y0 = rng.standard_normal(n if trans else m).astype(dtype)
    op = _cls(dtype, cuopjit.GemvFloat, cuopjit.GemvDouble)(trans, alpha, beta)
    op.set_weight(cuopjit.tensor(a))
    y = ps.output(y0.shape, dtype, case["misaligned"], fill=y0 if beta else None)
    out, units = ps.run(op, case["fields"], ps.device(x, case["misaligned"]), y)
    assert out is y
    check_guards(y)

    def terms(model_a, model_b):     # FP32 / FP64 cores only: nothing to model
        a64 = a.astype(np.float64).T if trans else a.astype(np.float64)
        return (alpha * (a64 @ x.astype(np.float64)) + beta * y0.astype(np.float64),
                abs(alpha) * (np.abs(a64) @ np.abs(x.astype(np.float64))) + abs(beta) * np.abs(y0.astype(np.float64)))
    ps.product_check(y.to_numpy(), terms, m if trans else n, units, dtype, f"gemv {m}x{n} trans={trans} {dtype}")


# --- MatMul / BatchMatMul -----------------------------------------------------------------------------

@st.composite
def matmul_cases(draw, batched: bool) -> dict:
    dtype = draw(ps.DTYPES)
    m, n = draw(ps.dims(1, 1025)), draw(ps.dims(1, 1025))
    k = draw(ps.dims(1, min(4097, (1 << 24) // (m * n))))
    room = max(1, (1 << 24) // (m * n * k))
    if batched:
        count = draw(ps.dims(1, min(room, 4097)))
        a_batch = (1,) if count > 1 and draw(st.booleans()) else (count,)
        b_batch = (count,) if a_batch == (1,) or not draw(st.booleans()) else (1,)
        a_shape, b_shape = a_batch + (m, k), b_batch + (k, n)
    else:
        batch = draw(ps.shapes(min_ndim=0, max_ndim=3, max_size=room, max_dim=17))
        # each operand: leading batch dims dropped, others kept or broadcast (1); or a 1-D operand
        cut_a, cut_b = draw(st.integers(0, len(batch))), draw(st.integers(0, len(batch)))
        a_batch = tuple(d if draw(st.booleans()) else 1 for d in batch[cut_a:])
        b_batch = tuple(d if draw(st.booleans()) else 1 for d in batch[cut_b:])
        vec = draw(st.sampled_from(["", "", "a", "b"]))
        a_shape = (k,) if vec == "a" else a_batch + (m, k)
        b_shape = (k,) if vec == "b" else b_batch + (k, n)
    ops = (cuopjit.BatchMatMulFloat, cuopjit.BatchMatMulDouble) if batched else (cuopjit.MatMulFloat,
                                                                                    cuopjit.MatMulDouble)
    return {"dtype": dtype, "a": a_shape, "b": b_shape, "fields": draw(ps.jit_fields(_cls(dtype, *ops))),
            "misaligned": draw(st.booleans())}


@pytest.mark.parametrize("batched", [False, True], ids=["matmul", "batch_matmul"])
@given(data=st.data(), seed=ps.SEEDS)
def test_matmul_matches_float64(batched, data, seed):
    case = data.draw(matmul_cases(batched), label="case")
    dtype, sa, sb = case["dtype"], case["a"], case["b"]
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])     # NumPy's matmul rules: a 1-D operand has no batch dims
    cshape = batch + sa[-2:-1] + sb[-1:] if len(sb) > 1 else batch + sa[-2:-1]
    op = (_cls(dtype, cuopjit.BatchMatMulFloat, cuopjit.BatchMatMulDouble) if batched else
          _cls(dtype, cuopjit.MatMulFloat, cuopjit.MatMulDouble))()
    c = ps.output(cshape, dtype, case["misaligned"])
    out, units = ps.run(op, case["fields"], ps.device(a, case["misaligned"]), cuopjit.tensor(b), c)
    assert out is c
    check_guards(c)

    def terms(model_a, model_b):
        a64, b64 = _model(a, model_a), _model(b, model_b)
        return np.matmul(a64, b64), np.matmul(np.abs(a64), np.abs(b64))
    ps.product_check(c.to_numpy(), terms, sa[-1], units, dtype, f"matmul {list(sa)} @ {list(sb)} {dtype}")


# --- Conv2D -------------------------------------------------------------------------------------------

@st.composite
def conv_cases(draw) -> dict:
    dtype = draw(ps.DTYPES)
    depthwise = draw(st.booleans())
    groups = draw(ps.dims(1, 65)) if depthwise else draw(st.integers(1, 4))
    cg, kg = (1, draw(st.integers(1, 2))) if depthwise else (draw(ps.dims(1, 65)), draw(ps.dims(1, 65)))
    kh, kw, sh, sw = (draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 3)),
                      draw(st.integers(1, 3)))
    dh, dw, ph, pw = (draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(0, 3)),
                      draw(st.integers(0, 3)))
    n = draw(st.integers(1, 4))
    room = max(1, (1 << 24) // (n * groups * kg * cg * kh * kw))   # output pixels, at most 2^24 taps in all
    side = min(230, max(1, int(room ** 0.5) * max(sh, sw)))
    need_h, need_w = max(1, dh * (kh - 1) + 1 - 2 * ph), max(1, dw * (kw - 1) + 1 - 2 * pw)
    return {"dtype": dtype, "n": n, "c": groups * cg, "k": groups * kg, "groups": groups,
            "h": draw(ps.dims(need_h, max(need_h, side))), "w": draw(ps.dims(need_w, max(need_w, side))),
            "kernel": (kh, kw), "stride": (sh, sw), "dilation": (dh, dw), "pad": (ph, pw),
            "bias": draw(st.booleans()), "relu": draw(st.booleans()),
            "fields": draw(ps.jit_fields(_cls(dtype, cuopjit.Convolution2DFloat, cuopjit.Convolution2DDouble)))}


def conv_reference(x, w, stride, pad, dil, groups) -> np.ndarray:
    """float64 convolution (no bias): one tensordot per window tap and group over a zero-padded input."""
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out, kg = np.zeros((n, k, oh, ow)), k // groups
    for g in range(groups):
        for r in range(kh):
            for s in range(kw):
                win = xp[:, g * cg:(g + 1) * cg, r * dil[0]:r * dil[0] + stride[0] * (oh - 1) + 1:stride[0],
                         s * dil[1]:s * dil[1] + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, g * kg:(g + 1) * kg] += np.tensordot(win, w[g * kg:(g + 1) * kg, :, r, s],
                                                            axes=([1], [1])).transpose(0, 3, 1, 2)
    return out


@given(case=conv_cases(), seed=ps.SEEDS)
def test_conv2d_matches_float64(case, seed):
    dtype, groups, (kh, kw), stride, dil, pad = (case[f] for f in ("dtype", "groups", "kernel", "stride",
                                                                   "dilation", "pad"))
    rng = np.random.default_rng(seed)
    op = _cls(dtype, cuopjit.Convolution2DFloat, cuopjit.Convolution2DDouble)(
        case["c"], case["k"], kh, kw, stride[0], stride[1], dil[0], dil[1], groups, case["relu"])
    x = rng.standard_normal((case["n"], case["c"], case["h"], case["w"])).astype(dtype)
    w = rng.standard_normal(op.weight_shape).astype(dtype)
    bias = rng.standard_normal(case["k"]).astype(dtype) if case["bias"] else None
    op.set_weight(cuopjit.tensor(w))
    if bias is not None:
        op.set_bias(cuopjit.tensor(bias))
    y = ps.output(op.output_shape(x.shape, pad_h=pad[0], pad_w=pad[1]), dtype)
    out, units = ps.run(op, case["fields"], cuopjit.tensor(x), y, pad_h=pad[0], pad_w=pad[1])
    assert out is y
    check_guards(y)
    b64 = np.zeros((1, case["k"], 1, 1)) if bias is None else bias.astype(np.float64).reshape(1, -1, 1, 1)

    def terms(model_x, model_w):
        x64, w64 = _model(x, model_x), _model(w, model_w)
        ref = conv_reference(x64, w64, stride, pad, dil, groups) + b64
        return (np.maximum(ref, 0) if case["relu"] else ref), \
            conv_reference(np.abs(x64), np.abs(w64), stride, pad, dil, groups) + np.abs(b64)
    ps.product_check(y.to_numpy(), terms, case["c"] // groups * kh * kw + 1, units, dtype,
                     f"conv2d x {list(x.shape)} w {list(w.shape)} stride {stride} pad {pad} dilation {dil} "
                     f"groups {groups} {dtype}")
