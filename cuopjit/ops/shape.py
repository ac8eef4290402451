"""FlattenFloat / ViewFloat (and Double): reshaping copies into a caller-supplied output.

Flatten copies x into y, whose shape must be x's shape with dims start_dim..end_dim merged
(the streaming copy kernel of elementwise.py). View copies the sub-block of x that starts at
`offset` and has `shape` into y (templates/copy_view.cu.jinja); it raises when the block leaves x.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..tensor import Tensor
from .base import Operator, dtype_tag, scalar_t
from .elementwise import Elementwise, persistent_grid, vector_width

VIEW_TEMPLATE = "copy_view.cu.jinja"
VIEW_THREADS = 256


def flattened_shape(shape: Sequence[int], start_dim: int = 1, end_dim: int = -1) -> tuple[int, ...]:
    """shape with dims start_dim..end_dim (inclusive, negative counts from the end) merged into one."""
    nd = len(shape)
    if nd == 0:
        return (1,)
    s = start_dim + nd if start_dim < 0 else start_dim
    e = end_dim + nd if end_dim < 0 else end_dim
    if not (0 <= s < nd and 0 <= e < nd):
        raise ValueError(f"start_dim={start_dim}, end_dim={end_dim} out of range for a {nd}-D input "
                         f"of shape {list(shape)}")
    if s > e:
        raise ValueError(f"start_dim={start_dim} comes after end_dim={end_dim} for shape {list(shape)}")
    return tuple(shape[:s]) + (math.prod(shape[s:e + 1]),) + tuple(shape[e + 1:])


class Flatten(Elementwise):
    """y = x with dims start_dim..end_dim merged (a copy into y)."""

    def forward(self, x: Tensor, y: Tensor, start_dim: int = 1, end_dim: int = -1) -> Tensor:
        """Copy x into y; y must have x's flattened shape; returns y."""
        try:
            key = (x.shape, y.shape, start_dim, end_dim, x.dtype, y.dtype, x.device, y.device, (x.ptr | y.ptr) & 15)
        except AttributeError:
            key = None
        launch = self._launches.get(key)
        if launch is None:
            self._check("x", x)
            self._check("y", y)
            want = flattened_shape(x.shape, start_dim, end_dim)
            if tuple(y.shape) != want:
                raise ValueError(f"{type(self).__name__}: y has shape {list(y.shape)}, expected {list(want)} "
                                 f"(x of shape {list(x.shape)} flattened from dim {start_dim} to {end_dim})")
            if x.size == 0:
                return y
            launch = self._launches[key] = self._map_launch("copy", x, y)
        launch(x.ptr, y.ptr)
        return y

    def work(self, x: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return 0.0, 2.0 * x.size * self.dtype.itemsize

    def specs(self) -> list:
        return self._map_specs("copy")


def view_kernel(dtype: np.dtype, cfg, nout: int, vec: int) -> tuple[str, str, dict]:
    threads = cfg.block_size or VIEW_THREADS
    params = {"scalar_t": scalar_t(dtype), "unroll": bool(cfg.enable_loop_unroll), "THREADS": threads,
              "VEC": vec, "NOUT": nout}
    return VIEW_TEMPLATE, f"view_{dtype_tag(dtype)}_b{threads}_v{vec}_d{nout}", params


class View(Operator):
    """y = x[offset[0]:offset[0]+shape[0], ...]; `set_offset` / `set_shape` give defaults for forward."""

    uses_shared_memory = False

    def __init__(self) -> None:
        super().__init__()
        self._offset: tuple[int, ...] | None = None
        self._shape: tuple[int, ...] | None = None

    def set_offset(self, offset: Sequence[int]) -> None:
        self._offset = tuple(int(o) for o in offset)

    def set_shape(self, shape: Sequence[int]) -> None:
        self._shape = tuple(int(s) for s in shape)

    def forward(self, x: Tensor, y: Tensor, offset: Sequence[int] | None = None,
                shape: Sequence[int] | None = None) -> Tensor:
        """Copy the block of x at `offset` (default: set_offset, else zeros) with `shape` (default:
        set_shape, else y's shape) into y; returns y."""
        offset = self._offset if offset is None else tuple(int(o) for o in offset)
        shape = self._shape if shape is None else tuple(int(s) for s in shape)
        try:
            shape = tuple(y.shape) if shape is None else shape
            offset = (0,) * len(x.shape) if offset is None else offset
            key = (x.shape, y.shape, offset, shape, x.dtype, y.dtype, x.device, y.device, (x.ptr | y.ptr) & 15)
        except AttributeError:
            key = None
        launch = self._launches.get(key)
        if launch is None:
            self._check("x", x)
            self._check("y", y)
            self._check_view(x, y, offset, shape)
            if y.size == 0:
                return y
            launch = self._launches[key] = self._make_launch(x, y, offset, shape)
        launch(x.ptr, y.ptr)
        return y

    def _check_view(self, x: Tensor, y: Tensor, offset: tuple, shape: tuple) -> None:
        name = type(self).__name__
        if len(offset) != x.ndim or len(shape) != x.ndim:
            raise ValueError(f"{name}: offset {list(offset)} and shape {list(shape)} must each have {x.ndim} "
                             f"entries, one per dimension of x (shape {list(x.shape)})")
        if any(o < 0 for o in offset) or any(s < 0 for s in shape):
            raise ValueError(f"{name}: offset {list(offset)} and shape {list(shape)} must not be negative")
        for d, (o, s, n) in enumerate(zip(offset, shape, x.shape)):
            if o + s > n:
                raise ValueError(f"{name}: the view at offset {list(offset)} with shape {list(shape)} leaves x of "
                                 f"shape {list(x.shape)} along dim {d} ({o} + {s} > {n})")
        if tuple(y.shape) != tuple(shape):
            raise ValueError(f"{name}: y has shape {list(y.shape)}, expected the view's shape {list(shape)}")

    def _make_launch(self, x: Tensor, y: Tensor, offset: tuple, shape: tuple):
        nd = x.ndim
        strides = [math.prod(x.shape[d + 1:]) for d in range(nd)]
        base = sum(o * s for o, s in zip(offset, strides))
        k = nd - 1  # dims after k are kept whole, so they fold into the run
        while k > 0 and shape[k] == x.shape[k]:
            k -= 1
        run = math.prod(shape[k:]) if nd else 1
        outer = [(shape[d], strides[d]) for d in range(k) if shape[d] != 1]
        vec = vector_width(self.dtype)
        if not (self._config.enable_memory_coalescing and run % vec == 0 and base % vec == 0
                and all(s % vec == 0 for _, s in outer) and ((x.ptr | y.ptr) & 15) == 0):
            vec = 1
        template, name, params = view_kernel(self.dtype, self._config, len(outer), vec)
        threads = params["THREADS"]
        total = y.size // vec
        grid = persistent_grid(-(-total // threads), threads)
        args = [("ptr", x.ptr), ("ptr", y.ptr), ("i64", total), ("i64", run // vec), ("i64", base)]
        for size, stride in outer:
            args += [("i64", size), ("i64", stride)]
        return self._prepare(self._spec(template, "view_copy", name, params), (grid, 1, 1), (threads, 1, 1), 0, args)

    def work(self, x: Tensor, y: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return 0.0, 2.0 * y.size * self.dtype.itemsize

    def specs(self) -> list:
        out = []
        wide = vector_width(self.dtype) if self._config.enable_memory_coalescing else 1
        for nout, vec in ((0, wide), (1, wide), (3, 1)):
            template, name, params = view_kernel(self.dtype, self._config, nout, vec)
            out.append(self._spec(template, "view_copy", name, params))
        return out


class FlattenFloat(Flatten):
    """float32 Flatten (cuOP `FlattenFloat`)."""
    dtype = np.dtype(np.float32)


class FlattenDouble(Flatten):
    """float64 Flatten (cuOP `FlattenDouble`)."""
    dtype = np.dtype(np.float64)


class ViewFloat(View):
    """float32 View (cuOP `ViewFloat`)."""
    dtype = np.dtype(np.float32)


class ViewDouble(View):
    """float64 View (cuOP `ViewDouble`)."""
    dtype = np.dtype(np.float64)
