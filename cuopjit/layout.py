"""Memory layouts of a Tensor: how its logical shape lies in memory.

A Tensor's `.shape` is always the logical one (as torch reports it); `.layout` says where element
(i0, i1, ...) lives. Three layouts, each one permutation of a row-major buffer:

    contiguous      row-major over the shape (NumPy's C order)
    channels_last   4-D (N, C, H, W) stored N, H, W, C (torch's memory_format=torch.channels_last):
                    element strides (H*W*C, 1, W*C, C)
    transposed      >= 2-D (..., R, S) stored (..., S, R) (torch's x.mT of a contiguous x):
                    element strides (..., 1, R); the batch dimensions stay row-major

`of(shape, strides)` names the layout of another library's strides (None when it is none of these);
`storage_shape`, `to_storage` and `to_logical` move between the logical view and the buffer's order.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

CONTIGUOUS, CHANNELS_LAST, TRANSPOSED = "contiguous", "channels_last", "transposed"
LAYOUTS = (CONTIGUOUS, CHANNELS_LAST, TRANSPOSED)
_MIN_NDIM = {CONTIGUOUS: 0, CHANNELS_LAST: 4, TRANSPOSED: 2}


def check(layout: str, shape: Sequence[int]) -> str:
    """`layout` if it names a layout that a tensor of `shape` can have, else ValueError saying what to choose."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not known: choose from {', '.join(LAYOUTS)}")
    if layout == CHANNELS_LAST and len(shape) != 4:
        raise ValueError(f"layout 'channels_last' needs a 4-D (N, C, H, W) shape, got {list(shape)}")
    if len(shape) < _MIN_NDIM[layout]:
        raise ValueError(f"layout {layout!r} needs at least {_MIN_NDIM[layout]} dimensions, got {list(shape)}")
    return layout


def _order(ndim: int, layout: str) -> tuple[int, ...]:
    """The logical dimensions in the buffer's order, outermost first."""
    if layout == CHANNELS_LAST:
        return (0, 2, 3, 1)
    if layout == TRANSPOSED:
        return tuple(range(ndim - 2)) + (ndim - 1, ndim - 2)
    return tuple(range(ndim))


def storage_shape(shape: Sequence[int], layout: str) -> tuple[int, ...]:
    """The buffer's row-major shape: (N, H, W, C) for channels_last, (..., S, R) for transposed."""
    return tuple(shape[d] for d in _order(len(shape), layout))


def strides(shape: Sequence[int], layout: str) -> tuple[int, ...]:
    """Element strides of the logical dimensions."""
    order = _order(len(shape), layout)
    out = [0] * len(shape)
    step = 1
    for d in reversed(order):
        out[d] = step
        step *= shape[d]
    return tuple(out)


def of(shape: Sequence[int], element_strides: Sequence[int] | None) -> str | None:
    """The layout whose strides these are (dimensions of extent 1 may have any stride), contiguous first;
    None when they are none of the three (a slice, a broadcast, another permutation)."""
    if element_strides is None or 0 in shape:
        return CONTIGUOUS
    for layout in LAYOUTS:
        if len(shape) < _MIN_NDIM[layout] or layout == CHANNELS_LAST and len(shape) != 4:
            continue
        want = strides(shape, layout)
        if all(d == 1 or s == w for d, s, w in zip(shape, element_strides, want)):
            return layout
    return None


def to_storage(logical: np.ndarray, layout: str) -> np.ndarray:
    """A C-contiguous array in the buffer's order holding the logical array `logical`."""
    return np.ascontiguousarray(logical.transpose(_order(logical.ndim, layout)))


def to_logical(stored: np.ndarray, layout: str) -> np.ndarray:
    """The logical view (no copy) of an array read in the buffer's order."""
    order = _order(stored.ndim, layout)
    return stored.transpose(tuple(order.index(d) for d in range(stored.ndim)))

