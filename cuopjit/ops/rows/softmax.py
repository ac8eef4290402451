"""SoftmaxFloat / SoftmaxDouble / SoftmaxHalf / SoftmaxBFloat16: y = softmax(x) along any axis (numerically
stable: x - max first). float16 and bfloat16 are read exactly into float32 registers, computed in float32
and rounded once on store (round to nearest even; float16 overflow gives inf, as torch), with the kernels
and layouts of float32 and 16-byte vectors of 8.

Kernels (templates/rows/softmax.cu.jinja; the JITConfig mapping of the last-axis kernels is in rows.py):
  last axis       one block (or a few threads, for short rows) per row with the row in registers:
                  one read of x, one write of y. Rows longer than a block (targets with clusters):
                  the stream kernel (one block per row; head of the row stashed in shared memory,
                  the rest re-read from L2: still one HBM read) or a cluster of up to 8 blocks per
                  row (distributed shared memory), whichever STREAM says; longer still, or
                  without clusters: split-row (partial (max, sum) per chunk in the plan's
                  workspace, then a combine-and-write kernel).
  other axes      x viewed as outer x A x inner, reduced along A in place (no transpose), tiled
                  along the contiguous inner dimension: a block owns tx vectors of adjacent
                  columns (16-byte vectors where x, y and inner allow) by the whole axis, held
                  in registers: one read of x, one write of y, every row of the tile a
                  contiguous run of at least 32 bytes where inner allows (strided_geometry).
                  JITConfig: tile_size = elements of a column each thread holds in registers
                  (0: 32 float / 8 double; an axis needing more threads than a block holds,
                  past 4096 float / 2048 double with 16-byte vectors, is streamed twice
                  instead), block_size = threads per block (0: 512),
                  enable_memory_coalescing = 16-byte vectors vs scalars, enable_loop_unroll as
                  for rows; kernel_type, enable_shared_memory_opt, enable_tensor_core and
                  enable_tma change nothing here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import Family, KernelLaunch, Plan, i32, i64, ptr
from ...target import Target
from ...tensor import Tensor
from . import common as rows
from ..base import HALF_DTYPES, Operator, cdiv, compute_dtype, dtype_tag, scalar_t, storage_t, vector_width, typed

TEMPLATE = "rows/softmax.cu.jinja"
# Stream-kernel table per itemsize (rows.plan_rows): (max row length, threads, blocks per SM, vectors in
# flight, cp.async stash). Measured on H100 against the cluster kernels (NOTES.md 5C, run 2):
# float32 32768: 2931 vs 2882 GB/s; float64 8192: 2929 vs 2670; float64 32768: 2699 vs 2406. 16-bit types:
# 512 threads, 2 blocks per SM (benchmarks/mb_half_sweep.py, H100, float16 4096x32768, 2048x20000, 1024x24576:
# geomean 2688 GB/s vs 2135 for float32's entry, 2673 for 256 x 4, 1971 for clusters).
STREAM = {4: ((32768, 1024, 1, 2, True),), 8: ((8192, 256, 3, 4, True), (32768, 1024, 1, 2, True)),
          2: ((32768, 512, 2, 2, True),)}
DTYPES = ("float32", "float64", *HALF_DTYPES)
# strided_geometry's defaults by storage itemsize: elements of a column per thread (tile_size 0), threads per
# block (block_size 0). 16-bit types: float32's, the best of 5 (benchmarks/mb_half_sweep.py, H100: geomean 1839
# GB/s vs 1663 for blocks of 1024, 1553 for 64 elements, 1431 for 16)
STRIDED_TILE = {4: 32, 8: 8, 2: 32}
STRIDED_BLOCK = {4: 512, 8: 512, 2: 512}


@dataclass(frozen=True)
class SoftmaxProblem:
    """softmax over axis length `length` of x viewed as outer x length x inner; `aligned`: 16-byte
    aligned x and y and a length (last axis) or inner dimension (other axes) that is a multiple of
    the vector width."""
    dtype: str
    outer: int
    length: int
    inner: int
    aligned: bool


@dataclass(frozen=True)
class StridedChoice:
    """A non-last axis: tiles of tx vectors of `vec` adjacent columns, ty threads along the axis, na
    vectors each in registers (0: streamed twice), `occ` threads per SM promised to the compiler."""
    tx: int
    ty: int
    na: int
    vec: int = 1
    occ: int = 1024
    unroll: bool = True
    opts: pipeline.CompileOpts = pipeline.DEFAULT_OPTS

    @property
    def label(self) -> str:
        return f"strided_v{self.vec}x{self.tx}y{self.ty}a{self.na}" + ("" if self.unroll else "_nounroll")


def long_rows(dtype: np.dtype) -> rows.LongRows:
    """Automatic layout of rows longer than one block (measured on H100, benchmarks/NOTES.md 5B/5C):
    float64 prefers 8 elements per thread and a cluster over 16 per thread (its exp is the costly
    part); the stream kernel's (max length, threads, blocks per SM, vectors in flight) where it
    measured faster, and only with a row per block for every SM (fewer rows: clusters)."""
    epts = (32,) if compute_dtype(dtype) == np.float32 else (8, 16)
    return rows.LongRows(epts, 256, STREAM[np.dtype(dtype).itemsize])


def strided_geometry(dtype: np.dtype, a: int, inner: int, vec: int, cfg: ConfigSnapshot) -> StridedChoice:
    """Tile a non-last axis along the contiguous inner dimension (measured on H100, benchmarks/NOTES.md 16):
    each thread holds up to tile_size elements (0: 32 float / 8 double) of its vec columns, ty
    threads cover the axis, tx vectors side by side fill the block of block_size threads (0: 512;
    at most what the registers of those elements allow per SM), but at least 32 bytes (a sector)
    and at most the inner dimension; an axis that needs more threads than that is streamed twice
    instead (NA = 0, tx * vec columns by 8 threads). float16 / bfloat16: float32's registers, bytes of 2."""
    itemsize, stored = rows.regsize(dtype), np.dtype(dtype).itemsize
    nv_cap = max(1, min(cfg.tile_size or STRIDED_TILE[stored], rows.MAX_EPT[itemsize]) // vec)
    regs = nv_cap * vec * itemsize // 4     # registers a thread's vectors take
    occ = 1024 if regs <= (32 if itemsize == 4 and vec > 1 else 16) else (512 if regs <= 64 else 256)
    bt = min(cfg.block_size or STRIDED_BLOCK[stored], occ)
    iv = cdiv(inner, vec)
    tx_min = min(rows.next_pow2(iv), max(1, 32 // (vec * stored)))
    ty = max(1, rows.next_pow2(cdiv(a, nv_cap)))
    if ty * tx_min > occ:
        tx = max(min(rows.next_pow2(iv), max(32, bt // 8)), 4)
        return StridedChoice(tx, max(8, 32 // tx), 0, vec, 1024, cfg.enable_loop_unroll, pipeline.compile_opts(cfg))
    tx = max(tx_min, min(rows.next_pow2(iv), max(1, bt // ty)))
    ty = max(ty, cdiv(32, tx))            # at least one full warp
    return StridedChoice(tx, ty, cdiv(a, ty), vec, occ, cfg.enable_loop_unroll, pipeline.compile_opts(cfg))


def choices(problem: SoftmaxProblem, cfg: ConfigSnapshot, target: Target) -> list:
    """The one kernel `cfg` names: a row kernel for the last axis, else the strided kernel."""
    dtype = np.dtype(problem.dtype)
    if problem.inner == 1:
        return [rows.choose(dtype, cfg, target, problem.outer, problem.length, problem.aligned, long_rows(dtype))]
    rows.check_config(cfg)
    vec = rows.row_vector(dtype, cfg, problem.aligned)
    return [strided_geometry(dtype, problem.length, problem.inner, vec, cfg)]


def _spec(dtype: np.dtype, kind: str, choice: Any, params: dict, tag: str) -> pipeline.KernelSpec:
    params = {"kind": kind, "scalar_t": scalar_t(dtype), "unroll": choice.unroll, **params}
    if dtype.name in HALF_DTYPES:
        params["elem_t"] = storage_t(dtype)
    name = f"softmax_{kind}_{dtype_tag(dtype)}_{tag}" + ("" if choice.unroll else "_nounroll")
    return pipeline.make_spec(TEMPLATE, f"softmax_{kind}", name, params, choice.opts)


def _row_spec(dtype: np.dtype, kind: str, choice: rows.RowChoice) -> pipeline.KernelSpec:
    layout = choice.layout
    params = layout.params()
    if dtype == np.float64 and (layout.cl > 1 or layout.kind == "stream"):
        params["exp_poly"] = 1   # where exp is the limit (clusters, stream): +5% on H100 (NOTES.md 5B v2)
    return _spec(dtype, kind, choice, params, layout.tag())


def plan(problem: SoftmaxProblem, choice: Any, target: Target) -> Plan:
    """x = operand 0, y = operand 1; the split-row path's partial results are the workspace."""
    dtype = np.dtype(problem.dtype)
    units = "FP32 cores" if compute_dtype(dtype) == np.float32 else "FP64 cores"
    n_rows, length = problem.outer, problem.length
    if isinstance(choice, StridedChoice):
        tiles = problem.outer * cdiv(cdiv(problem.inner, choice.vec), choice.tx)
        params = {"TX": choice.tx, "TY": choice.ty, "NA": choice.na, "VEC": choice.vec, "OCC": choice.occ}
        if dtype == np.float64:
            params["exp_poly"] = 1   # one exp per element read: the library's double exp would be the limit
        spec = _spec(dtype, "strided", choice, params, choice.label.removeprefix("strided_"))
        launch = KernelLaunch(spec, (min(tiles, 2 ** 31 - 1),), (choice.tx, choice.ty),
                              (ptr(0), ptr(1), i64(tiles), i64(problem.inner), i32(length)), units=units)
        return Plan((launch,), ("x", "y"), choice=choice.label)
    layout = choice.layout
    if layout.kind == "stream":
        launch = KernelLaunch(_row_spec(dtype, "stream", choice), (min(n_rows, 2 ** 31 - 1),), (layout.threads,),
                              (ptr(0), ptr(1), i64(n_rows), i32(length), i32(layout.stash)),
                              shared=layout.stash_bytes(dtype), units=units, max_carveout=True)
        return Plan((launch,), ("x", "y"), choice=choice.label)
    if layout.kind == "rows":
        launch = KernelLaunch(_row_spec(dtype, "rows", choice), (rows.row_grid(layout, n_rows),), (layout.threads,),
                              (ptr(0), ptr(1), i64(n_rows), i32(length)), cluster=(layout.cl, 1, 1), units=units)
        return Plan((launch,), ("x", "y"), choice=choice.label)
    blocks = n_rows * layout.chunks
    if blocks >= 2 ** 31:
        raise ValueError(f"Softmax: {n_rows} rows of {length} need too many blocks")
    part = KernelLaunch(_row_spec(dtype, "partials", choice), (blocks,), (layout.threads,),
                        (ptr(0), ptr(2), i64(n_rows), i32(length), i32(layout.chunks)), units=units)
    apply = KernelLaunch(_row_spec(dtype, "apply", choice), (blocks,), (layout.threads,),
                         (ptr(0), ptr(1), ptr(2), i64(n_rows), i32(length), i32(layout.chunks)), units=units)
    return Plan((part, apply), ("x", "y"), workspace=blocks * 2 * compute_dtype(dtype).itemsize, choice=choice.label)


def problems() -> list[SoftmaxProblem]:
    """Row-length buckets of the last axis (aligned and not; many rows: stream kernels, few: clusters,
    a million: split-row) and non-last axes (scalar and 16-byte tiles, registers and streamed), every dtype."""
    out = []
    for dt in DTYPES:
        out += [SoftmaxProblem(dt, n, length, 1, aligned) for n, length, aligned in (
            (4096, 128, True), (4096, 1024, True), (1024, 8192, True), (1024, 32768, True), (8, 32768, True),
            (4096, 1000, False), (4096, 7, False), (16, 1 << 20, True))]
        out += [SoftmaxProblem(dt, 32, a, 33, False) for a in (7, 64, 4097)]
        out += [SoftmaxProblem(dt, n, a, inner, True) for n, a, inner in ((256, 1024, 256), (4096, 64, 512),
                                                                          (64, 4097, 64))]
    return out


FAMILY = Family("softmax", choices, plan, problems)


class Softmax(Operator):
    """`forward(x, y, axis=-1)` writes softmax(x) along `axis` into y (same shape); returns y."""

    family = FAMILY

    def bind(self, x: Tensor, y: Tensor, axis: int = -1) -> tuple:
        return (x.plan_key, y.plan_key, axis), (x.ptr, y.ptr), y

    def problem(self, x: Tensor, y: Tensor, axis: Any = -1) -> SoftmaxProblem | None:
        name = type(self).__name__
        self.check_operand("x", x)
        self.check_operand("y", y)
        if tuple(y.shape) != tuple(x.shape):
            raise ValueError(f"{name}: y has shape {list(y.shape)}, expected x's shape {list(x.shape)}")
        if x.ndim == 0:
            raise ValueError(f"{name}: x is a 0-D tensor: softmax needs at least one axis")
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) or not -x.ndim <= axis < x.ndim:
            raise ValueError(f"{name}: axis={axis!r} is out of range for x of shape {list(x.shape)} "
                             f"(allowed {-x.ndim}..{x.ndim - 1})")
        axis = int(axis) % x.ndim
        outer, a, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
        if x.size == 0:
            return None
        if a >= 2 ** 31:
            raise ValueError(f"{name}: axis length {a} is over 2**31 - 1")
        aligned = ((x.ptr | y.ptr) & 15) == 0 and (a if inner == 1 else inner) % vector_width(self.dtype) == 0
        return SoftmaxProblem(self.dtype.name, outer, a, inner, aligned)

    def work(self, x: Tensor, y: Tensor, axis: int = -1) -> tuple[float, float]:
        """~5 flops per element (max, subtract, exp, sum, scale); x read once, y written once."""
        return 5.0 * x.size, 2.0 * x.size * self.dtype.itemsize


SoftmaxFloat, SoftmaxDouble, SoftmaxHalf, SoftmaxBFloat16 = typed(
    Softmax, "Softmax", "softmax", ("float32", "float64", "float16", "bfloat16"))


