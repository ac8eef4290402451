"""NumPy broadcasting of an elementwise program's operands onto its output, as the layouts its kernel reads.

The output shape is the one all outputs share, and every input must broadcast to it (NumPy's rule for
ufuncs given `out=`: axes compared from the right, equal or 1). Shapes are logical (as torch reports
them); the outputs' memory may have another order of the axes (channels_last: N, H, W, C), and the
kernel walks the outputs in memory order: element i is the i-th in memory. Each input's axes are
permuted into that order with its own strides (row-major unless given: a channels_last or transposed
input), and it then reads its element for output element i one of these ways:

    scalar    a Python number, a kernel parameter
    uniform   a tensor of one element (any shape of 1s): loaded once per thread
    full      as many elements as the output: element i itself
    run       varying along one contiguous run of the output's axes (in memory order), its memory row-major
              over them (a [C,1,1] scale over NCHW or over channels_last [N,C,H,W], a [C] scale over
              [N,H,W,C], a [H,W] map over NCHW): element (i / inner) % extent, where `inner` is the product
              of the output axes after the run and `extent` the operand's size
    strided   any other pattern (a full-size input of another layout included): the output's axes are
              collapsed (size-1 axes dropped, neighbours merged where every strided operand broadcasts
              alike and its strides allow) and element i's coordinate on each collapsed axis is multiplied
              by the operand's stride there (0 where it broadcasts)
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


def layouts(inputs: Sequence[Optional[Shape]], out: Shape, aligned: Sequence[bool] = (),
            strides: Sequence[Optional[Shape]] = (), order: Optional[Sequence[int]] = None
            ) -> tuple[tuple[Layout, ...], Shape]:
    """(one Layout per input, the collapsed output axes the strided ones index) for inputs that broadcast to
    `out` (checked by output_shape). An input is a shape, or None for a Python number; `aligned[k]`: input
    k's pointer is 16-byte aligned (default: all); `strides[k]`: input k's element strides over its axes
    (default: row-major); `order`: the output's axes in memory order, outermost first (default: row-major)."""
    out = tuple(out)
    n = math.prod(out)
    aligned = tuple(aligned) or (True,) * len(inputs)
    strides = tuple(strides) or (None,) * len(inputs)
    order = tuple(order) if order is not None else tuple(range(len(out)))
    mem_out = tuple(out[d] for d in order)
    permuted = []
    for s, st in zip(inputs, strides):
        if s is None:
            permuted.append(None)
            continue
        pad = len(out) - len(s)
        shape = (1,) * pad + tuple(s)
        steps = (0,) * pad + (tuple(st) if st is not None else _row_major(tuple(s)))
        permuted.append((tuple(shape[d] for d in order), tuple(steps[d] for d in order)))
    kinds = []
    for p in permuted:
        if p is None:
            kinds.append((SCALAR,))
        elif math.prod(p[0]) == 1:
            kinds.append((UNIFORM,))
        elif math.prod(p[0]) == n and _dense(*p, [d for d, v in enumerate(p[0]) if v > 1]):
            kinds.append((FULL,))
        else:
            kinds.append(_run(*p, mem_out) or (STRIDED,))
    strided = [p for p, k in zip(permuted, kinds) if k[0] == STRIDED]
    dims, steps = _collapse(strided, mem_out) if strided else ((), [])
    result, it = [], iter(steps)
    for k, ok in zip(kinds, aligned):
        if k[0] == RUN:
            result.append(Layout(RUN, k[1], k[2], aligned=bool(ok)))
        elif k[0] == STRIDED:
            result.append(Layout(STRIDED, strides=next(it), aligned=bool(ok)))
        else:
            result.append(Layout(k[0], aligned=bool(ok)))
    return tuple(result), dims


def _row_major(s: Shape) -> Shape:
    return tuple(math.prod(s[d + 1:]) for d in range(len(s)))


def _dense(s: Shape, st: Shape, axes: Sequence[int]) -> bool:
    """Whether the operand's memory is row-major over `axes` (in that order), with nothing between."""
    return all(st[d] == math.prod(s[e] for e in axes[k + 1:]) for k, d in enumerate(axes))


def _run(s: Shape, st: Shape, out: Shape) -> Optional[tuple[str, int, int]]:
    """(RUN, inner, extent) when the axes `s` varies along are one contiguous run of out's non-1 axes and its
    memory is row-major over them."""
    varying = [d for d, v in enumerate(s) if v > 1]
    between = [d for d in range(varying[0], varying[-1] + 1) if out[d] > 1]
    if between != varying or not _dense(s, st, varying):
        return None
    return RUN, math.prod(out[varying[-1] + 1:]), math.prod(s)


def _collapse(operands: list[tuple[Shape, Shape]], out: Shape) -> tuple[Shape, list[tuple[int, ...]]]:
    """Merge neighbouring output axes on which every strided operand broadcasts alike (and whose strides line up);
    drop size-1 axes. Returns the collapsed dims and, per operand, its element stride on each (0 where it
    broadcasts)."""
    groups: list[list[int]] = []
    for d in (d for d in range(len(out)) if out[d] > 1):
        signature = tuple(s[d] > 1 for s, _ in operands)
        if groups:
            last = groups[-1][-1]
            if (tuple(s[last] > 1 for s, _ in operands) == signature
                    and all(s[d] == 1 or st[last] == st[d] * s[d] for s, st in operands)):
                groups[-1].append(d)
                continue
        groups.append([d])
    if len(groups) > MAX_RANK:
        raise ValueError(f"the inputs broadcast over {len(groups)} alternating groups of output axes; at most "
                         f"{MAX_RANK} are supported: make the operands contiguous (full-size) first")
    dims = tuple(math.prod(out[d] for d in g) for g in groups)
    steps = [tuple(st[g[-1]] if s[g[-1]] > 1 else 0 for g in groups) for s, st in operands]
    return dims, steps
