"""Property-based GPU tests of the attention kernels: float32 exact (SIMT), TF32 (mma.sync m16n8k8), float64,
float16 and bfloat16 (mma.sync m16n8k16 with cp.async stages and ldmatrix), against float64 NumPy.

Hypothesis draws the batch dimensions, Lq and Lk (1 to 600: single keys, partial key tiles, several stages of
64-key tiles, Lq != Lk both ways), the head dim (1 to 128, the vector widths' multiples and odd ones), causal
masking, the scale (None, positive, negative, zero) and q starting one element past a 16-byte boundary (the
scalar kernels). Each draw runs test_attention._run / test_attention_half._run: outputs NaN-poisoned inside guard
regions, errors within the bounds those files derive from the arithmetic. The profiles and the example database
are set up in tests/conftest.py (`--hypothesis-profile=long` for a longer run)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402

import property_support as ps  # noqa: E402
import test_attention as exact  # noqa: E402
import test_attention_half as half  # noqa: E402

pytestmark = pytest.mark.gpu
MODES = st.sampled_from([("float32", False), ("float32", True), ("float64", False), ("float16", False),
                         ("bfloat16", False)])
HEAD_DIMS = st.one_of(st.sampled_from([8, 16, 32, 40, 64, 72, 96, 128]), st.integers(1, 128))


@st.composite
def attention_cases(draw) -> dict:
    lq, lk = draw(ps.dims(1, 600)), draw(ps.dims(1, 600))
    batch = draw(st.sampled_from([(1,), (2,), (3,), (2, 3)]))
    return {"mode": draw(MODES), "batch": batch, "lq": lq, "lk": lk, "d": draw(HEAD_DIMS),
            "causal": draw(st.booleans()), "scale": draw(st.sampled_from([None, 0.3, -0.7, 0.0])),
            "offset": draw(st.sampled_from([0, 0, 0, 1]))}


@given(case=attention_cases(), seed=ps.SEEDS)
def test_attention_matches_float64(case, seed):
    (dtype, tf32), rng = case["mode"], np.random.default_rng(seed)
    shape = (case["batch"], case["lq"], case["lk"], case["d"])
    kw = {"causal": case["causal"], "scale": case["scale"], "offset": case["offset"]}
    if dtype in half.DTYPES:
        choice = half._run(rng, dtype, *shape, **kw)
        assert choice.startswith("mma16")
    else:
        choice = exact._run(rng, dtype, tf32, *shape, **kw)
        assert choice.startswith("mma" if tf32 else "simt")
