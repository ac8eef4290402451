"""Operand kinds: how an epilogue operand is laid against the output, and the epilogue's cache key.

The output is seen as a matrix of rows m and columns n: a GEMM's C is (M, N); a convolution's
output is (pixels, channels), its channel axis being the "column" axis whatever the memory layout.

    scalar       a Python number, passed as a kernel parameter (changing it does not recompile)
    per_column   one value per output column n: a GEMM bias of shape (N,) or (1, N); a convolution's
                 per-channel scale, shift or bias of shape (C,) or (1, C, 1, 1) in NCHW
    per_row      one value per output row m: shape (M, 1) for a GEMM; (B, 1, H, W) for an NCHW conv
    full         shaped like the output (after dropping leading 1s): a residual
"""
from __future__ import annotations

from typing import Mapping, Sequence

from .parse import RESERVED, Expression
from .tree import ExpressionError

SCALAR, PER_COLUMN, PER_ROW, FULL = "scalar", "per_column", "per_row", "full"
KINDS = (SCALAR, PER_COLUMN, PER_ROW, FULL)


def infer_kind(name: str, shape: Sequence[int], out_shape: Sequence[int], channel_axis: int = -1) -> str:
    """The kind of operand `name` of `shape` against an output of `out_shape`, by NumPy broadcasting.

    `shape` is () for a Python number. `channel_axis` is the output's column axis (-1 for a GEMM
    and NHWC, 1 for NCHW). Raises ExpressionError for a shape that broadcasts to none of the kinds.
    """
    shape, out = tuple(int(d) for d in shape), tuple(int(d) for d in out_shape)
    if shape == ():
        return SCALAR
    if out and not -len(out) <= channel_axis < len(out):
        raise ValueError(f"channel_axis={channel_axis} is out of range for an output of shape {out}")
    axis = channel_axis % len(out) if out else 0
    allowed = (f"allowed for an output of shape {out}: a Python number, a per-column vector "
               f"{_show(out, axis, True)}, a per-row vector {_show(out, axis, False)}, or the output's shape")
    core = shape[next((i for i, d in enumerate(shape) if d != 1), len(shape)):]  # leading 1s broadcast away
    if len(core) > len(out) or any(d not in (1, o) for d, o in zip(core[::-1], out[::-1])):
        raise ExpressionError(f"operand {name!r} of shape {shape} does not broadcast to the output; {allowed}")
    padded = (1,) * (len(out) - len(core)) + core
    if padded == out:
        return FULL
    varying = {i for i, d in enumerate(padded) if d != 1}
    if varying == {axis} or (not varying and out[axis] == 1):
        return PER_COLUMN
    if all(padded[i] == out[i] for i in range(len(out)) if i != axis) and padded[axis] == 1:
        return PER_ROW
    raise ExpressionError(f"operand {name!r} of shape {shape} is neither a row, a column nor the output; {allowed}")


def _show(out: tuple[int, ...], axis: int, column: bool) -> tuple[int, ...]:
    return tuple((d if i == axis else 1) if column else (1 if i == axis else d) for i, d in enumerate(out))


def check_kinds(expr: Expression, kinds: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """((operand, kind), ...) in the expression's operand order; raises if one is missing, unused or unknown."""
    for name, kind in kinds.items():
        if name in RESERVED:
            raise ExpressionError(f"{name!r} is the epilogue's own name ({', '.join(RESERVED)} are reserved), "
                                  "not an operand; give kinds for operands only")
        if name not in expr.operands:
            used = ", ".join(expr.operands) or "none"
            raise ExpressionError(f"operand {name!r} is not used by the epilogue {expr.canonical!r}; "
                                  f"its operands: {used}")
        if kind not in KINDS:
            raise ExpressionError(f"operand {name!r} has kind {kind!r}; kinds are {', '.join(KINDS)}")
    for name in expr.operands:
        if name not in kinds:
            given = ", ".join(kinds) or "none"
            raise ExpressionError(f"the epilogue {expr.canonical!r} needs operand {name!r}, which is missing "
                                  f"(given: {given}); bind it once or pass it per call")
    return tuple((name, kinds[name]) for name in expr.operands)


def epilogue_key(expr: Expression, kinds: Mapping[str, str]) -> str:
    """'relu((acc+bias))|bias:per_column': the canonical tree and each operand's kind, for plan and cache keys."""
    return "|".join((expr.canonical, *(f"{n}:{k}" for n, k in check_kinds(expr, kinds))))
