"""Property-based GPU tests of Softmax (any axis) and LayerNorm (trailing dims, cuOP's per-channel form, no affine)
in float16 and bfloat16, against float64 NumPy of the 16-bit inputs within the bounds of tests/half_bounds.py.

Shapes, axes, configs, alignment (2 bytes past 16: the scalar paths) and seeds are drawn by Hypothesis
(tests/property_support.py), as tests/test_properties_rows.py does for float32 and float64."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

import cuopjit  # noqa: E402
import property_support as ps  # noqa: E402
from conftest import check_guards  # noqa: E402
from half_bounds import HALF, assert_half, layernorm_half, softmax_half  # noqa: E402

pytestmark = pytest.mark.gpu
DTYPES = st.sampled_from(HALF)
SOFTMAX = {"float16": cuopjit.SoftmaxHalf, "bfloat16": cuopjit.SoftmaxBFloat16}
LAYERNORM = {"float16": cuopjit.LayerNormHalf, "bfloat16": cuopjit.LayerNormBFloat16}


def _randn(seed: int, shape, dtype: str, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    return ps.randn(seed, shape, np.float32, scale, offset).astype(dtype)


@st.composite
def softmax_cases(draw, last: bool) -> dict:
    dtype = draw(DTYPES)
    shape, axis = draw(ps.reductions(last, max_size=1 << 20 if last else 1 << 18))
    return {"dtype": dtype, "shape": shape, "axis": axis, "scale": draw(st.sampled_from([1.0, 30.0])),
            "fields": draw(ps.jit_fields(SOFTMAX[dtype])),
            "misaligned_x": draw(ps.MISALIGNED), "misaligned_y": draw(ps.MISALIGNED)}


def _softmax(case: dict, seed: int) -> None:
    dtype, shape, axis = case["dtype"], case["shape"], case["axis"]
    a = _randn(seed, shape, dtype, case["scale"])
    x, y = ps.device(a, case["misaligned_x"]), ps.output(shape, dtype, case["misaligned_y"])
    out, _ = ps.run(SOFTMAX[dtype](), case["fields"], x, y, axis=axis)
    assert out is y
    check_guards(y)
    assert_half(y.to_numpy(), *softmax_half(a, axis), f"softmax of {list(shape)} {dtype} over axis {axis}")


@given(case=softmax_cases(last=True), seed=ps.SEEDS)
def test_half_softmax_over_the_last_axis_matches_float64(case, seed):
    """The row kernels: registers, clusters, the stream kernel, split rows."""
    _softmax(case, seed)


@settings(max_examples=4 * settings.default.max_examples)
@given(case=softmax_cases(last=False), seed=ps.SEEDS)
def test_half_softmax_over_another_axis_matches_float64(case, seed):
    """The strided kernel: tiles of 16-byte vectors of 8 (or scalars) along the inner extent."""
    _softmax(case, seed)


@st.composite
def layernorm_cases(draw) -> dict:
    dtype = draw(DTYPES)
    shape = draw(ps.shapes())
    forms = ["none"] + [f"last{k}" for k in range(1, len(shape) + 1)]
    if len(shape) >= 2 and shape[-1] != shape[1]:
        forms.append("channel")
    form = draw(st.sampled_from(forms))
    return {"dtype": dtype, "shape": shape, "form": form, "beta": form != "none" and draw(st.booleans()),
            "eps": draw(st.sampled_from([1e-5, 1e-2])), "offset": draw(st.sampled_from([0.0, 8.0])),
            "fields": draw(ps.jit_fields(LAYERNORM[dtype])), "misaligned": draw(st.booleans())}


@given(case=layernorm_cases(), seed=ps.SEEDS)
def test_half_layernorm_matches_float64(case, seed):
    dtype, shape, form = case["dtype"], case["shape"], case["form"]
    rng = np.random.default_rng(seed)
    a = _randn(seed, shape, dtype, offset=case["offset"])
    gshape = None if form == "none" else (shape[1],) if form == "channel" else shape[len(shape) - int(form[4:]):]
    gamma = None if gshape is None else rng.standard_normal(gshape).astype(np.float32).astype(dtype)
    beta = rng.standard_normal(gshape).astype(np.float32).astype(dtype) if case["beta"] else None
    op = LAYERNORM[dtype](eps=case["eps"])
    if gamma is not None:
        op.set_gamma(ps.device(gamma, case["misaligned"]))
    if beta is not None:
        op.set_beta(cuopjit.tensor(beta))
    x, y = cuopjit.tensor(a), ps.output(shape, dtype, case["misaligned"])
    assert ps.run(op, case["fields"], x, y)[0] is y
    check_guards(y)
    assert_half(y.to_numpy(), *layernorm_half(a, gamma, beta, case["eps"], form),
                f"layernorm of {list(shape)} {dtype}, gamma {gshape} ({form})")
