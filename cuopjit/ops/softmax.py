"""SoftmaxFloat / SoftmaxDouble: y = softmax(x) along any axis (numerically stable: x - max first).

Kernels (templates/softmax.cu.jinja; the JITConfig mapping is in rows.py):
  last axis       one block (or a few threads, for short rows) per row with the row in registers:
                  one read of x, one write of y. Rows longer than a block (sm_90): the stream
                  kernel (one block per row; head of the row stashed in shared memory, the rest
                  re-read from L2: still one HBM read) or a cluster of up to 8 blocks per row
                  (distributed shared memory), whichever rows.py's table says; longer still, or
                  without clusters: split-row (partial (max, sum) per chunk, then a
                  combine-and-write kernel).
  other axes      x viewed as outer x A x inner, reduced along A in place (no transpose):
                  threads run over the outer*inner columns, so every load is coalesced.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..tensor import Tensor, empty
from .base import Operator, dtype_tag, scalar_t
from .rows import (BLOCK_SIZES, TILE_SIZES, RowPlan, cluster_available, next_pow2, plan_rows, prefer_shared_memory,
                   sm_count, vector_width)

TEMPLATE = "softmax.cu.jinja"
# Stream-kernel table per itemsize (rows.plan_rows): (max row length, threads, blocks per SM, vectors in
# flight, cp.async stash). Measured on H100 against the cluster kernels (NOTES.md 5C, run 2):
# float32 32768: 2931 vs 2882 GB/s; float64 8192: 2929 vs 2670; float64 32768: 2699 vs 2406.
STREAM = {4: ((32768, 1024, 1, 2, True),), 8: ((8192, 256, 3, 4, True), (32768, 1024, 1, 2, True))}


class Softmax(Operator):
    """`forward(x, y, axis=-1)` writes softmax(x) along `axis` into y (same shape)."""

    family = "softmax"
    exp_poly = False  # float64: the polynomial exp of softmax.cu.jinja everywhere (cluster kernels always use it)
    tile_sizes = TILE_SIZES
    block_sizes = BLOCK_SIZES

    def forward(self, x: Tensor, y: Tensor, axis: int = -1) -> Tensor:
        try:
            key = (x.shape, y.shape, x.dtype, y.dtype, x.device, axis, (x.ptr | y.ptr) & 15)
            hash(key)
        except (AttributeError, TypeError):
            key = None
        run = self._launches.get(key)
        if run is None:
            run = self._plan(x, y, axis)
            self._launches[key] = run
        run(x, y)
        return y

    # --- planning (first call per shape) ---------------------------------------------------
    def _dims(self, x: Tensor, y: Tensor, axis: Any) -> tuple[int, int, int]:
        """(outer, A, inner) of x around `axis`, after checking both operands."""
        name = type(self).__name__
        self._check("x", x)
        self._check("y", y)
        if tuple(y.shape) != tuple(x.shape):
            raise ValueError(f"{name}: y has shape {list(y.shape)}, expected x's shape {list(x.shape)}")
        if x.ndim == 0:
            raise ValueError(f"{name}: x is a 0-D tensor: softmax needs at least one axis")
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) or not -x.ndim <= axis < x.ndim:
            raise ValueError(f"{name}: axis={axis!r} is out of range for x of shape {list(x.shape)} "
                             f"(allowed {-x.ndim}..{x.ndim - 1})")
        axis = int(axis) % x.ndim
        return math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])

    def _plan(self, x: Tensor, y: Tensor, axis: Any) -> Callable[[Tensor, Tensor], None]:
        outer, a, inner = self._dims(x, y, axis)
        if x.size == 0:
            return _noop
        if a >= 2 ** 31:
            raise ValueError(f"{type(self).__name__}: axis length {a} is over 2**31 - 1")
        if inner == 1:
            aligned = ((x.ptr | y.ptr) & 15) == 0 and a % (16 // self.dtype.itemsize) == 0
            plan = plan_rows(self.dtype, self._config, a, vector_width(self.dtype, self._config, aligned),
                             cluster_available(), **self._long_rows(outer))
            return self._rows_launch(x, y, outer, a, plan)
        return self._strided_launch(x, y, outer, a, inner)

    def _rows_launch(self, x: Tensor, y: Tensor, rows: int, length: int, plan: RowPlan):
        if plan.kind == "stream":
            launch = self._prepare(self._rows_spec("stream", plan), (min(rows, 2 ** 31 - 1),), (plan.threads,),
                                   plan.stash_bytes(self.dtype),
                                   [("ptr", x.ptr), ("ptr", y.ptr), ("i64", rows), ("i32", length),
                                    ("i32", plan.stash)])
            prefer_shared_memory(launch)
            return lambda x, y: launch(x.ptr, y.ptr)
        if plan.kind == "rows":
            spec = self._rows_spec("rows", plan)
            grid = min(-(-rows // plan.rpb), (2 ** 31 - 1) // plan.cl) * plan.cl
            launch = self._prepare(spec, (grid,), (plan.threads,), 0,
                                   [("ptr", x.ptr), ("ptr", y.ptr), ("i64", rows), ("i32", length)])
            return lambda x, y: launch(x.ptr, y.ptr)
        ws = empty([rows * plan.chunks * 2], self.dtype)
        blocks = rows * plan.chunks
        if blocks >= 2 ** 31:
            raise ValueError(f"{type(self).__name__}: {rows} rows of {length} need too many blocks")
        part = self._prepare(self._rows_spec("partials", plan), (blocks,), (plan.threads,), 0,
                             [("ptr", x.ptr), ("ptr", ws.ptr), ("i64", rows), ("i32", length),
                              ("i32", plan.chunks)])
        apply = self._prepare(self._rows_spec("apply", plan), (blocks,), (plan.threads,), 0,
                              [("ptr", x.ptr), ("ptr", y.ptr), ("ptr", ws.ptr), ("i64", rows),
                               ("i32", length), ("i32", plan.chunks)])

        def run(x: Tensor, y: Tensor, ws: Tensor = ws) -> None:
            part(x.ptr)
            apply(x.ptr, y.ptr)
        return run

    def _long_rows(self, rows: int | None = None) -> dict:
        """Automatic layout of rows longer than one block (measured on H100, benchmarks/NOTES.md 5B/5C):
        float64 prefers 8 elements per thread and a cluster over 16 per thread (its exp is the costly
        part); the stream kernel's (max length, threads, blocks per SM, vectors in flight) where it
        measured faster, and only with a row per block for every SM (fewer rows: clusters)."""
        out = {"long_epts": (32,)} if self.dtype == np.float32 else {"long_epts": (8, 16)}
        if rows is None or rows >= sm_count():
            out["stream"] = STREAM[self.dtype.itemsize]
        return out

    def _rows_spec(self, kind: str, plan: RowPlan):
        params = {"kind": kind, "scalar_t": scalar_t(self.dtype), "unroll": self._config.enable_loop_unroll,
                  **plan.params()}
        if self.dtype == np.float64 and (self.exp_poly or plan.cl > 1 or plan.kind == "stream"):
            params["exp_poly"] = 1
        return self._spec(TEMPLATE, f"softmax_{kind}", f"softmax_{kind}_{dtype_tag(self.dtype)}_{plan.tag()}", params)

    def _strided_geometry(self, a: int) -> tuple[int, int, int]:
        """(TX, TY, NA): columns per block, threads along the axis, elements per thread (0: streamed)."""
        cap = self._config.tile_size or 16
        bt = self._config.block_size or 256
        ty = next_pow2(-(-a // cap))
        if ty <= 32:
            na = -(-a // ty)
        else:
            ty, na = 8, 0
        tx = max(32, bt // ty)
        while tx * ty > 1024:
            tx //= 2
        return tx, ty, na

    def _strided_spec(self, a: int):
        tx, ty, na = self._strided_geometry(a)
        params = {"kind": "strided", "scalar_t": scalar_t(self.dtype), "unroll": self._config.enable_loop_unroll,
                  "TX": tx, "TY": ty, "NA": na}
        return self._spec(TEMPLATE, "softmax_strided",
                          f"softmax_strided_{dtype_tag(self.dtype)}_x{tx}y{ty}a{na}", params), tx, ty

    def _strided_launch(self, x: Tensor, y: Tensor, outer: int, a: int, inner: int):
        spec, tx, ty = self._strided_spec(a)
        cols = outer * inner
        grid = min(-(-cols // tx), 2 ** 31 - 1)
        launch = self._prepare(spec, (grid,), (tx, ty), 0,
                               [("ptr", x.ptr), ("ptr", y.ptr), ("i64", cols), ("i64", inner), ("i32", a)])
        return lambda x, y: launch(x.ptr, y.ptr)

    # --- figures and prewarm ---------------------------------------------------------------
    def work(self, x: Tensor, y: Tensor, axis: int = -1) -> tuple[float, float]:
        """~5 flops per element (max, subtract, exp, sum, scale); x read once, y written once."""
        return 5.0 * x.size, 2.0 * x.size * self.dtype.itemsize

    def specs(self) -> list:
        """Row-length buckets of the last-axis kernels (aligned and not), the cluster and split-row
        kernels, and the strided kernels (registers and streamed)."""
        out = []
        vec = 16 // self.dtype.itemsize
        for length, v in ((128, vec), (1024, vec), (8192, vec), (32768, vec), (1000, 1), (7, 1), (1 << 20, vec)):
            plan = plan_rows(self.dtype, self._config, length, v if self._config.enable_memory_coalescing else 1,
                             True, **self._long_rows())
            kinds = (plan.kind,) if plan.kind != "split" else ("partials", "apply")
            out += [self._rows_spec(k, plan) for k in kinds]
        out += [self._strided_spec(a)[0] for a in (7, 64, 4097)]
        return list(dict.fromkeys(out))


def _noop(x: Tensor, y: Tensor) -> None:
    return None


class SoftmaxFloat(Softmax):
    """float32 softmax (cuOP `SoftmaxFloat`)."""
    dtype = np.dtype(np.float32)


class SoftmaxDouble(Softmax):
    """float64 softmax (cuOP `SoftmaxDouble`)."""
    dtype = np.dtype(np.float64)
