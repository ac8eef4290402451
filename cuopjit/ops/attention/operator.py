"""AttentionFloat / Double / Half / BFloat16: out = softmax(q kᵀ · scale) v over the last two axes, flash-attention
style (the scores are never written; plans.py has the kernels and the JITConfig mapping; the 16-bit classes run on
the tensor cores with float32 sums and softmax).

q [batch..., Lq, D], k and v [batch..., Lk, D], out [batch..., Lq, D], contiguous, the same batch dimensions
(no broadcasting); D up to 128. scale None is 1 / sqrt(D); causal=True hides key j from query i for j > i
(top-left aligned, as torch's is_causal). `problem_of` builds the problem for strided [batch, heads, L, D]
operands (the torch backend reads q, k, v where a fused QKV projection left them).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...tensor import Tensor
from ..base import Operator, typed
from . import plans
from .plans import AttentionProblem, Strides


def problem_of(dtype: np.dtype, shapes: tuple, strides: tuple[Strides, Strides, Strides, Strides],
               pointers: tuple[int, int, int, int], scale: Any, causal: Any, who: str) -> AttentionProblem | None:
    """The problem for q, k, v, out of `shapes` ([batch, heads, L, D] each) with element `strides`; None when
    there is nothing to compute. Raises ValueError naming what does not fit (`who`: the operator's name)."""
    (b, h, lq, d), (bk, hk, lk, dk), vshape, oshape = shapes
    if (bk, hk, dk) != (b, h, d) or tuple(vshape) != (b, h, lk, d):
        raise ValueError(f"{who}: q {_shown(shapes[0])}, k {_shown(shapes[1])} and v {_shown(vshape)} do not "
                         "fit: k and v need q's batch dimensions and head dim, v k's length")
    if tuple(oshape) != (b, h, lq, d):
        raise ValueError(f"{who}: out has shape {_shown(oshape)}, expected q's shape {_shown(shapes[0])}")
    if d > plans.MAX_D:
        raise ValueError(f"{who}: head dim {d} is over {plans.MAX_D}: split the heads or use a matmul-softmax-matmul")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"{who}: causal={causal!r} must be True or False")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating))
                              or not math.isfinite(scale)):
        raise ValueError(f"{who}: scale={scale!r} must be a finite number (None: 1 / sqrt(head dim))")
    if b * h * lq * d == 0:
        return None
    if lk == 0:
        raise ValueError(f"{who}: k and v have no rows: a softmax over zero keys is undefined")
    if max(lq, lk) >= 2 ** 31:
        raise ValueError(f"{who}: sequence length {max(lq, lk)} is over 2**31 - 1")
    width = 16 // dtype.itemsize
    aligned = (all(p % 16 == 0 for p in pointers) and d % width == 0
               and all(s % width == 0 for operand in strides for s in operand))
    return AttentionProblem(dtype.name, b, h, lq, lk, d, 1.0 / math.sqrt(d) if scale is None else float(scale),
                            bool(causal), tuple(tuple(int(s) for s in o) for o in strides), aligned)


def _shown(shape: tuple) -> list:
    return [int(s) for s in shape]


class Attention(Operator):
    """`forward(q, k, v, out, scale=None, causal=False)` writes softmax(q kᵀ · scale) v into out; returns out."""

    family = plans.FAMILY

    def bind(self, q: Tensor, k: Tensor, v: Tensor, out: Tensor, scale: Any = None, causal: Any = False) -> tuple:
        return ((q.plan_key, k.plan_key, v.plan_key, out.plan_key, scale, causal),
                (q.ptr, k.ptr, v.ptr, out.ptr), out)

    def problem(self, q: Tensor, k: Tensor, v: Tensor, out: Tensor, scale: Any = None,
                causal: Any = False) -> AttentionProblem | None:
        name = type(self).__name__
        q, k, v, out = (self.check_operand(n, t) for n, t in (("q", q), ("k", k), ("v", v), ("out", out)))
        for n, t in (("q", q), ("k", k), ("v", v), ("out", out)):
            if t.ndim < 2:
                raise ValueError(f"{name}: {n} must have at least 2 dimensions ([..., L, D]), got shape "
                                 f"{list(t.shape)}")
        if not q.ndim == k.ndim == v.ndim == out.ndim or tuple(k.shape[:-2]) != tuple(q.shape[:-2]):
            raise ValueError(f"{name}: q {list(q.shape)}, k {list(k.shape)} and v {list(v.shape)} do not fit: k and "
                             "v need q's batch dimensions (no broadcasting) and head dim, v k's length")
        batch = math.prod(q.shape[:-2])
        shapes = tuple((batch, 1, *t.shape[-2:]) for t in (q, k, v, out))
        strides = tuple((t.shape[-2] * t.shape[-1], 0, t.shape[-1]) for t in (q, k, v, out))
        return problem_of(self.dtype, shapes, strides, (q.ptr, k.ptr, v.ptr, out.ptr), scale, causal, name)

    def work(self, q: Tensor, k: Tensor, v: Tensor, out: Tensor, scale: Any = None,
             causal: Any = False) -> tuple[float, float]:
        """Two products of 2 · Lq · Lk · D flops per (batch, head) (half of them when causal); q, k, v read once,
        out written once."""
        batch, (lq, d), lk = math.prod(q.shape[:-2]), q.shape[-2:], k.shape[-2]
        flops = 4.0 * batch * lq * lk * d * (0.5 if causal else 1.0)
        return flops, float((q.size + k.size + v.size + out.size) * self.dtype.itemsize)


AttentionFloat, AttentionDouble, AttentionHalf, AttentionBFloat16 = typed(
    Attention, "Attention", "attention", ("float32", "float64", "float16", "bfloat16"))
