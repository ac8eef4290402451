"""Inputs and error bounds of the 16-bit memory-bound kernels (elementwise maps and programs, BLAS-1, pools, batch
norm, views), shared by their example and property tests (test_maps_half.py, test_pool_bn_half.py,
test_properties_maps_half.py).

Each kernel reads its 16-bit inputs exactly into float32, computes in float32 and rounds once on store. If the
float32 value errs from the float64 reference of the 16-bit inputs by at most b32 (derived per operator from
u32 = 2^-24, as in test_properties_maps), the stored value errs by at most

    b32 + u16 (|ref| + b32) + s16 / 2        (u16 = 2^-11 float16, 2^-8 bfloat16; s16 the smallest subnormal)

(half_bounds.py: one rounding to nearest even, or half a subnormal's spacing). Values beyond float16's 65504 round
to inf: such cases are tested on their own.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from half_bounds import HALF, SUBNORMAL, UNIT, assert_half

U32 = 2.0 ** -24
BITS = {"float16": np.uint16, "bfloat16": np.uint16}
__all__ = ["HALF", "U32", "assert_half", "bits", "gamma32", "half_input", "rounded", "specials"]


def rounded(ref: np.ndarray, b32, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(ref, bound) of a 16-bit result whose float32 value is within b32 of ref (the module docstring)."""
    ref = np.asarray(ref, dtype=np.float64)
    return ref, b32 + UNIT[dtype] * (np.abs(ref) + b32) + SUBNORMAL[dtype] / 2


def gamma32(k: int) -> float:
    """Higham's gamma_k in float32: the bound of k roundings, k u / (1 - k u)."""
    return k * U32 / (1 - k * U32)


def half_input(rng, shape, dtype: str, scale: float = 3.0, offset: float = 0.0) -> np.ndarray:
    """Normal values (times scale, plus offset) rounded to `dtype`."""
    return (rng.standard_normal(shape) * scale + offset).astype(np.float32).astype(dtype)


def specials(dtype: str) -> np.ndarray:
    """Values a 16-bit kernel must carry through: signed zeros, subnormals, the largest finite, infinities, NaN."""
    info = ml_dtypes.finfo(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.finfo(np.float16)
    vals = [0.0, -0.0, float(info.smallest_subnormal), -float(info.smallest_subnormal), float(info.max),
            -float(info.max), np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5]
    return np.array(vals, dtype=np.float32).astype(dtype)


def bits(a: np.ndarray) -> np.ndarray:
    """The 16-bit patterns of a float16 / bfloat16 array (for exact comparisons, NaN payloads included)."""
    return np.ascontiguousarray(a).view(np.uint16)
