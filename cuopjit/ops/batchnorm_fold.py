"""Fold an inference BatchNorm into a per-channel scale and shift.

    y = gamma * (x - mean) / sqrt(var + eps) + beta  =  x * scale + shift
    scale = gamma / sqrt(var + eps),  shift = beta - mean * scale

computed in float64 whatever the inputs' dtype, so folding adds one rounding (to the result dtype) and
no more. Use the pair in an elementwise program or an epilogue, e.g. over NCHW:

    scale, shift = cuopjit.fold_batchnorm(gamma, beta, running_mean, running_var, 1e-5)
    op = cuopjit.ElementwiseFloat("out = relu(x * scale + shift + r)")
    op.forward(x=x, scale=scale.reshape(C, 1, 1), shift=shift.reshape(C, 1, 1), r=r, out=y)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..creation import tensor
from ..tensor import Tensor

_NAMES = ("gamma", "beta", "mean", "var")


def _host(name: str, value: Any) -> np.ndarray:
    """A parameter as a host array (a Tensor is copied down); TypeError for anything not numeric."""
    arr = value.to_numpy() if isinstance(value, Tensor) else np.asarray(value)
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"fold_batchnorm: {name} must be a float array or a cuopjit Tensor, got {arr.dtype} "
                        f"({type(value).__name__})")
    return arr


def fold_batchnorm(gamma: Any, beta: Any, mean: Any, var: Any, eps: float = 1e-5) -> tuple[Any, Any]:
    """(scale, shift) of BatchNorm(gamma, beta, running mean, running var, eps) in inference, computed in float64.

    The four parameters share one shape (usually [C]). Returns NumPy arrays, or cuopjit Tensors on the
    current device when any parameter is a Tensor, of that shape and of the parameters' float dtype:
    float32 when every float parameter is float32, else float64 (so also for integer parameters alone). Raises ValueError for differing shapes, a negative or NaN eps, or var + eps <= 0."""
    values = (gamma, beta, mean, var)
    arrays = [_host(n, v) for n, v in zip(_NAMES, values)]
    for name, arr in zip(_NAMES[1:], arrays[1:]):
        if arr.shape != arrays[0].shape:
            raise ValueError(f"fold_batchnorm: {name} has shape {list(arr.shape)} but gamma has shape "
                             f"{list(arrays[0].shape)}: they must be equal (one value per channel)")
    try:
        eps = float(eps)
    except (TypeError, ValueError):
        raise TypeError(f"fold_batchnorm: eps must be a number, got {type(eps).__name__}") from None
    if not eps >= 0:
        raise ValueError(f"fold_batchnorm: eps={eps} is not allowed: use a number >= 0 (PyTorch's default: 1e-5)")
    g, b, m, v = (a.astype(np.float64) for a in arrays)
    denom = v + eps
    bad = np.flatnonzero(~(denom > 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"fold_batchnorm: var + eps must be > 0 in every channel; channel {i} has var "
                         f"{float(v.ravel()[i])!r} and eps {eps!r}: check the running variance (or use eps > 0)")
    scale = g / np.sqrt(denom)
    shift = b - m * scale
    floats = [a.dtype for a in arrays if a.dtype.kind == "f"]
    dtype = np.float32 if floats and all(d == np.float32 for d in floats) else np.float64
    scale, shift = scale.astype(dtype), shift.astype(dtype)
    if any(isinstance(x, Tensor) for x in values):
        return tensor(scale), tensor(shift)
    return scale, shift
