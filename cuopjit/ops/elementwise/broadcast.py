"""NumPy broadcasting of an elementwise program's operands onto its output, as the layouts its kernel reads.

Every operand is C-contiguous; the output shape is the one all outputs share, and every input must
broadcast to it (NumPy's rule for ufuncs given `out=`: axes compared from the right, equal or 1).
Each input then reads its element for output element i one of these ways:

    scalar    a Python number, a kernel parameter
    uniform   a tensor of one element (any shape of 1s): loaded once per thread
    full      as many elements as the output: element i itself
    run       varying along one contiguous run of the output's axes (a [C,1,1] scale over NCHW, a [C]
              scale over [N,H,W,C], a [H,W] map over NCHW): element (i / inner) % extent, where `inner`
              is the product of the output axes after the run and `extent` the operand's size
    strided   any other pattern: the output's axes are collapsed (size-1 axes dropped, neighbours merged
              where every strided operand broadcasts alike) and element i's coordinate on each collapsed
              axis is multiplied by the operand's stride there (0 where it broadcasts)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

SCALAR, UNIFORM, FULL, RUN, STRIDED = "scalar", "uniform", "full", "run", "strided"
MAX_RANK = 8   # collapsed output axes a strided operand may index

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Layout:
    """How one input is read: its kind, the run's `inner` and `extent`, a strided operand's strides over the
    collapsed output axes, and whether its pointer is 16-byte aligned (vector loads)."""
    kind: str
    inner: int = 1
    extent: int = 1
    strides: tuple[int, ...] = ()
    aligned: bool = True


def _show(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _clash(a: Shape, b: Shape) -> Optional[int]:
    """The first axis (negative, from the right) where `a` and `b` do not broadcast together, else None."""
    for k in range(1, min(len(a), len(b)) + 1):
        if a[-k] != b[-k] and 1 not in (a[-k], b[-k]):
            return -k
    return None


def _into(s: Shape, out: Shape) -> Optional[int]:
    """The first axis (negative, from the right) where `s` does not broadcast to `out` itself, else None."""
    for k in range(1, min(len(s), len(out)) + 1):
        if s[-k] != 1 and s[-k] != out[-k]:
            return -k
    return None


def check_inputs(op: str, inputs: Sequence[tuple[str, Shape]]) -> None:
    """Raise ValueError naming the first two inputs (and their shapes) that do not broadcast together."""
    for i, (name, s) in enumerate(inputs):
        for other, so in inputs[:i]:
            axis = _clash(tuple(so), tuple(s))
            if axis is not None:
                raise ValueError(f"{op}: {other} {_show(so)} and {name} {_show(s)} do not broadcast (axis {axis}: "
                                 f"{so[axis]} vs {s[axis]}); shapes broadcast when each axis, counted from the "
                                 "right, is equal or 1")


def output_shape(op: str, inputs: Sequence[tuple[str, Shape]], outputs: Sequence[tuple[str, Shape]]) -> Shape:
    """The shape every output has, after checking that all outputs share it and every input broadcasts to it.

    Raises ValueError naming both operands and their shapes: two inputs that do not broadcast together,
    an input that does not broadcast to the outputs, or two outputs of different shapes."""
    first, shape = outputs[0][0], tuple(outputs[0][1])
    for name, s in outputs[1:]:
        if tuple(s) != shape:
            raise ValueError(f"{op}: outputs {first} {_show(shape)} and {name} {_show(s)} differ; every output "
                             "has the shape the inputs broadcast to")
    check_inputs(op, inputs)
    for name, s in inputs:
        if len(s) > len(shape):
            raise ValueError(f"{op}: {name} {_show(s)} has more axes than output {first} {_show(shape)}; outputs "
                             "have the shape the inputs broadcast to (NumPy's rule for out=)")
        axis = _into(tuple(s), shape)
        if axis is not None:
            raise ValueError(f"{op}: {name} {_show(s)} does not broadcast to output {first} {_show(shape)} "
                             f"(axis {axis}: {s[axis]} vs {shape[axis]}); outputs have the shape the inputs "
                             "broadcast to, and each input axis, counted from the right, is 1 or the output's")
    return shape


def layouts(inputs: Sequence[Optional[Shape]], out: Shape, aligned: Sequence[bool] = ()
            ) -> tuple[tuple[Layout, ...], Shape]:
    """(one Layout per input, the collapsed output axes the strided ones index) for inputs that broadcast to
    `out` (checked by output_shape). An input is a shape, or None for a Python number; `aligned[k]`: input
    k's pointer is 16-byte aligned (default: all)."""
    out = tuple(out)
    n = math.prod(out)
    aligned = tuple(aligned) or (True,) * len(inputs)
    padded = [None if s is None else (1,) * (len(out) - len(s)) + tuple(s) for s in inputs]
    kinds = []
    for s in padded:
        if s is None:
            kinds.append((SCALAR,))
        elif math.prod(s) == 1:
            kinds.append((UNIFORM,))
        elif math.prod(s) == n:
            kinds.append((FULL,))
        else:
            kinds.append(_run(s, out) or (STRIDED,))
    strided = [s for s, k in zip(padded, kinds) if k[0] == STRIDED]
    dims, strides = _collapse(strided, out) if strided else ((), [])
    result, it = [], iter(strides)
    for k, ok in zip(kinds, aligned):
        if k[0] == RUN:
            result.append(Layout(RUN, k[1], k[2], aligned=bool(ok)))
        elif k[0] == STRIDED:
            result.append(Layout(STRIDED, strides=next(it), aligned=bool(ok)))
        else:
            result.append(Layout(k[0], aligned=bool(ok)))
    return tuple(result), dims


def _run(s: Shape, out: Shape) -> Optional[tuple[str, int, int]]:
    """(RUN, inner, extent) when the axes `s` varies along are one contiguous run of out's non-1 axes."""
    varying = [d for d, v in enumerate(s) if v > 1]
    between = [d for d in range(varying[0], varying[-1] + 1) if out[d] > 1]
    if between != varying:
        return None
    return RUN, math.prod(out[varying[-1] + 1:]), math.prod(s)


def _collapse(shapes: list[Shape], out: Shape) -> tuple[Shape, list[tuple[int, ...]]]:
    """Merge neighbouring output axes on which every strided operand broadcasts alike; drop size-1 axes.
    Returns the collapsed dims and, per operand, its element stride on each (0 where it broadcasts)."""
    groups: list[list[int]] = []
    for d in (d for d in range(len(out)) if out[d] > 1):
        signature = tuple(s[d] > 1 for s in shapes)
        if groups and tuple(s[groups[-1][-1]] > 1 for s in shapes) == signature:
            groups[-1].append(d)
        else:
            groups.append([d])
    if len(groups) > MAX_RANK:
        raise ValueError(f"the inputs broadcast over {len(groups)} alternating groups of output axes; at most "
                         f"{MAX_RANK} are supported: make the operands contiguous (full-size) first")
    dims = tuple(math.prod(out[d] for d in g) for g in groups)
    strides = []
    for s in shapes:
        contiguous = [math.prod(s[d + 1:]) for d in range(len(s))]
        strides.append(tuple(contiguous[g[-1]] if s[g[-1]] > 1 else 0 for g in groups))
    return dims, strides
