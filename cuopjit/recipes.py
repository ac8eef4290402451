"""The arguments of one forward from a shape, for `cuopjit explain OP --shape ...`: one line per family.

`build(op, dtype, shape, make)` returns (operator, args, kwargs). `make(shape)` gives a tensor: with
a GPU, random data on it (explain times the forward); without one, a view of no memory at an
aligned fake address, which is all planning reads (shapes, dtype, device, alignment).
What the shape means per family is in SHAPES' help text; a family with no line here is explained
on its first representative problem instead.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .ops import FAMILIES
from .tensor import Tensor, random

Make = Callable[[tuple[int, ...]], Tensor]
_FAKE = 1 << 40   # an aligned address nothing reads: planning looks at alignment only


def fake_maker(dtype: np.dtype) -> Make:
    """Tensors of no memory (for planning without a GPU), each at its own 256-byte aligned fake address."""
    counter = [0]

    def make(shape: tuple[int, ...]) -> Tensor:
        counter[0] += 1
        return Tensor._view(_FAKE + (counter[0] << 32), tuple(shape), np.dtype(dtype), 0, None)
    return make


def gpu_maker(dtype: np.dtype, seed: int = 0) -> Make:
    """Tensors of normal random values on the current GPU."""
    counter = [seed]

    def make(shape: tuple[int, ...]) -> Tensor:
        counter[0] += 1
        return random(shape, np.dtype(dtype), seed=counter[0])
    return make


def _gemm(cls, s, make):
    m, n, k = s
    op = cls()
    op.set_weight(make((k, n)))
    return op, (make((m, k)), make((m, n))), {}


def _pair(cls, s, make):
    return cls(), (make(s), make(s)), {}


def _layernorm(cls, s, make):
    op = cls()
    op.set_gamma(make(s[-1:]))
    op.set_beta(make(s[-1:]))
    return op, (make(s), make(s)), {}


def _batchnorm(cls, s, make):
    op = cls()
    for name in ("gamma", "beta", "running_mean", "running_var"):
        getattr(op, "set_" + name)(make((s[1],)))
    return op, (make(s), make(s)), {}


def _window(cls, s, make):
    op = cls()
    return op, (make(s), make(op.output_shape(s))), {}


def _global(cls, s, make):
    return cls(), (make(s), make(s[:2])), {}


def _flatten(cls, s, make):
    return cls(), (make(s), make((s[0], math.prod(s[1:])))), {}


def _view(cls, s, make):
    half = tuple(max(1, d // 2) for d in s)
    return cls(), (make(s), make(half)), {"offset": tuple(d - h for d, h in zip(s, half))}


def _dot(cls, s, make):
    return cls(), (make(s), make(s), make((1,))), {}


# family -> (what --shape means, its default, the builder)
SHAPES: dict[str, tuple[str, tuple[int, ...], Callable]] = {
    "gemm": ("M,N,K", (2048, 2048, 2048), _gemm),
    "scal": ("any shape of x", (1 << 24,), lambda cls, s, make: (cls(0.5), (make(s),), {})),
    "axpy": ("any shape of x (y alike)", (1 << 24,), lambda cls, s, make: (cls(0.5), (make(s), make(s)), {})),
    "copy": ("any shape of x (y alike)", (1 << 24,), _pair),
    "dot": ("any shape of x (y alike)", (1 << 24,), _dot),
    "relu": ("any shape of x (y alike)", (1 << 24,), _pair),
    "maxpool2d": ("N,C,H,W (2x2 window)", (32, 64, 56, 56), _window),
    "avgpool2d": ("N,C,H,W (2x2 window)", (32, 64, 56, 56), _window),
    "globalmaxpool2d": ("N,C,H,W", (32, 64, 56, 56), _global),
    "globalavgpool2d": ("N,C,H,W", (32, 64, 56, 56), _global),
    "flatten": ("x's shape (flattened from dim 1)", (32, 64, 56, 56), _flatten),
    "view": ("x's shape (the view: its second half along each dim)", (256, 256, 256), _view),
    "softmax": ("x's shape (last axis)", (4096, 1024), _pair),
    "layernorm": ("x's shape (last axis, gamma and beta)", (4096, 1024), _layernorm),
    "batchnorm": ("N,C[,H,W] (inference)", (32, 64, 56, 56), _batchnorm),
}


def parse_shape(text: str) -> tuple[int, ...]:
    """'4096,1024' or '4096x1024' -> (4096, 1024); ValueError says how to write one."""
    try:
        shape = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise ValueError(f"--shape {text!r} is not understood: write sizes >= 1 separated by commas, e.g. 4096,1024")
    return shape


def build(op: str, dtype: str, shape: tuple[int, ...] | None, make: Make) -> tuple[Any, tuple, dict]:
    """(operator, args, kwargs) of a forward of family `op` on `shape` (default: the family's)."""
    meaning, default, builder = SHAPES[op]
    cls = FAMILIES[op][0 if np.dtype(dtype) == np.float32 else 1]
    shape = default if shape is None else shape
    if meaning == "M,N,K" and len(shape) != 3:
        raise ValueError(f"{op}: --shape takes {meaning}, got {','.join(map(str, shape))}")
    if meaning.startswith("N,C,H,W") and len(shape) != 4:
        raise ValueError(f"{op}: --shape takes {meaning}, got {','.join(map(str, shape))}")
    return builder(cls, tuple(shape), make)
