"""Error bounds of the 16-bit row kernels (float16, bfloat16), shared by their example and property tests.

A 16-bit kernel reads x (and gamma, beta) exactly into float32, computes in float32 and rounds once on
store. So its result y16 = round16(y32), where y32 errs from the float64 reference of the 16-bit inputs by
float32's own bound B32 (test_properties_rows: softmax_reference, layernorm_reference, with u = 2^-24), and the
rounding adds at most u16 |y32| (u16 = 2^-11 float16, 2^-8 bfloat16; round to nearest even) or, in float16's
subnormal range, half its spacing (2^-25):

    |y16 - ref| <= B32 + u16 (|ref| + B32) + s16 / 2

Overflow (float16 beyond 65504) is tested on its own (test_half_conversions.py).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from test_properties_rows import layernorm_reference, softmax_reference

HALF = ("float16", "bfloat16")
UNIT = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
SUBNORMAL = {"float16": 2.0 ** -24, "bfloat16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_subnormal)}


def _half(ref: np.ndarray, b32: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(ref, bound) of a 16-bit result whose float32 value is within b32 of ref."""
    return ref, b32 + UNIT[dtype] * (np.abs(ref) + b32) + SUBNORMAL[dtype] / 2


def softmax_half(a: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(float64 softmax of the 16-bit array a, bound). -inf in a row of finite maximum is taken as float32's
    lowest (exp gives 0 either way; the bound's |d| terms stay finite); a row of inf or NaN is NaN."""
    x = a.astype(np.float32)
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(x.max(axis=axis, keepdims=True))
        x = np.where(np.isneginf(x) & finite, np.finfo(np.float32).min, x)
        return _half(*softmax_reference(x, axis), a.dtype.name)


def layernorm_half(a, gamma, beta, eps: float, form: str) -> tuple[np.ndarray, np.ndarray]:
    """(float64 LayerNorm of the 16-bit a, gamma, beta, bound); form as test_properties_rows' ('none', 'last<k>',
    'channel')."""
    as32 = (lambda v: None if v is None else v.astype(np.float32))
    return _half(*layernorm_reference(as32(a), as32(gamma), as32(beta), eps, form), a.dtype.name)


def assert_half(out: np.ndarray, ref: np.ndarray, bound: np.ndarray, what: str) -> None:
    """Every element of the 16-bit `out` within `bound` of `ref` (NaN nowhere unless ref is NaN there)."""
    got = np.asarray(out).astype(np.float64)
    bad = ~(np.abs(got - ref) <= bound) & ~(np.isnan(got) & np.isnan(ref))
    if bad.any():
        i = np.flatnonzero(bad.ravel())[0]
        within = np.broadcast_to(bound, ref.shape).ravel()[i]
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} elements off, first at flat index {i}: got "
                             f"{got.ravel()[i]!r}, want {ref.ravel()[i]!r} +- {within!r}")
