"""GemvFloat / GemvDouble / GemvHalf / GemvBFloat16: y = alpha * op(A) @ x + beta * y, A row-major M x N
(templates/gemm/gemv.cu.jinja). The 16-bit classes read A, x and y as float16 / bfloat16 (8 to a 16-byte load),
multiply and add in float32 with float32 alpha and beta, and round y once.

A bandwidth-bound kernel of its own: every byte of A is read once with 16-byte loads and enough of
them in flight per SM to saturate HBM. Where the output alone gives too few warps (few rows, or the
transposed case, whose output is only 32 * VEC columns per block) the reduction is split over
blocks: each split writes alpha times its partial sums to the plan's workspace and `splitk.reduce_launch`
(the split-K GEMM's second launch; for 16-bit y the template's gemv_reduce, float partials) adds them in a fixed
order, so equal inputs give equal bits. How each JITConfig field changes the code:

    kernel_type               "simple": scalar loads, one row per warp, one load per row in flight;
                              every other kind: 16-byte loads where A, x and lda allow, ITEMS in flight
    block_size                threads per block (0: 256)
    tile_size                 scalars per thread per row per step: 8 .. 128 (0: four 16-byte vectors; two
                              for 16-bit gemv_t)
    enable_loop_unroll        every load of a step issued before the first multiply-add, vs one at a time
    enable_memory_coalescing  16-byte loads vs scalar loads
    enable_shared_memory_opt  the block's warps share a reduction through shared memory: trans, its row
                              groups (8 at 256 threads); few rows, the warps of a row (1024-thread blocks
                              when block_size is 0). Off: one row group per block (trans), a warp per row
    enable_tensor_core, enable_tma   nothing to use them for in a matrix-vector product: ignored
optimization_level and max_registers reach NVRTC.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import Family, KernelLaunch, Plan, i32, i64, ptr, scalar
from ...target import Target
from ...tensor import Tensor
from ..elementwise import kernels as elementwise
from . import splitk
from ..base import HALF_DTYPES, Operator, cdiv, compute_dtype, dtype_tag, scalar_t, vector_width, typed
from ..params import ScaledProduct
from ..choice import kernel_choice

TEMPLATE = "gemm/gemv.cu.jinja"
VECTORS = 4              # 16-byte vectors per thread per row per step when tile_size is 0
# 16-bit gemv_t's vectors per step (8 float columns a vector: 4 a step took 61 registers and fewer resident blocks;
# H100 float16, % of copy with 2 / 4: 16384² 99.2 / 96.4, 8192² 89.4 / 86.2)
VECTORS_T16 = 2
WARPS_PER_SM = 32        # a split reduction aims at this many warps per SM; it is used below half that
FEW_WARPS = 4            # fewer row groups than this per SM: warps of a block share rows (gemv_n)
SMALL_BYTES = 16 << 20   # up to this size of A (5.6 us at 3 TB/s) a GEMV is launch-bound
MAX_SPLITS = 256


@dataclass(frozen=True)
class GemvProblem:
    """One GEMV: A is M x N with row stride lda; `aligned`: A, x 16-byte aligned and lda a multiple of 16 bytes."""
    dtype: str
    m: int
    n: int
    trans: bool
    aligned: bool
    alpha: float
    beta: float
    lda: int


GemvChoice = kernel_choice(
    "GemvChoice", "threads vec items rows groups unroll", "b{threads}_v{vec}x{items}_r{rows}_g{groups}",
    "Threads, scalars per load, loads per row in flight, rows per warp (n) or row groups per block (t).")


def _small(problem: GemvProblem) -> bool:
    return problem.m * problem.n * np.dtype(problem.dtype).itemsize <= SMALL_BYTES


def choices(problem: GemvProblem, cfg: ConfigSnapshot, target: Target) -> list[GemvChoice]:
    """The one kernel shape `cfg` names; where it leaves block_size to us, few rows (or a small transposed
    product) take 1024-thread blocks whose warps share the reduction through shared memory, in one launch."""
    half_t = problem.trans and problem.dtype in HALF_DTYPES
    threads, vec, items = elementwise.stream_geometry(np.dtype(problem.dtype), cfg, problem.aligned,
                                                      vectors=VECTORS_T16 if half_t else VECTORS)
    rows = 2 if problem.m >= target.sm_count * threads // 8 else 1
    if cfg.kernel_type == "simple":
        vec, items, rows = 1, 1, 1
    smem = cfg.enable_shared_memory_opt
    if problem.trans:
        wide = cdiv(problem.n, 32 * vec) * threads // 32 < target.sm_count * WARPS_PER_SM // 2
        if smem and not cfg.block_size and _small(problem) and wide:
            threads = 1024
        groups = threads // 32 if smem else 1
    else:
        few = cdiv(problem.m, rows) < target.sm_count * FEW_WARPS
        if smem and not cfg.block_size and few:
            threads = 1024
        groups = min(threads // 32, _pow2(cdiv(target.sm_count * WARPS_PER_SM, cdiv(problem.m, rows)))) \
            if smem and few else 1
    return [GemvChoice(threads, vec, items, rows, groups, cfg.enable_loop_unroll, opts=pipeline.compile_opts(cfg))]


def _pow2(n: int) -> int:
    """The smallest power of two >= n."""
    return 1 << max(0, n - 1).bit_length()


def _splits(blocks: int, warps_per_block: int, length: int, unit: int, nbytes: int,
            target: Target) -> tuple[int, int]:
    """(splits, chunk): the reduction of `length` cut into chunks (multiples of `unit`) until the grid fills the GPU.

    A small A is launch-bound (a second launch and the workspace cost more than they save): it splits only
    when its grid has fewer warps than the GPU has SMs."""
    warps = blocks * warps_per_block
    if warps >= target.sm_count * (WARPS_PER_SM // 2 if nbytes > SMALL_BYTES else 1):
        return 1, max(unit, cdiv(length, unit) * unit)
    # at most the warps aimed at (rounding up would leave a second, nearly empty wave of blocks)
    want = max(1, min(MAX_SPLITS, target.sm_count * WARPS_PER_SM // (blocks * warps_per_block), cdiv(length, unit)))
    chunk = max(unit, cdiv(cdiv(length, want), unit) * unit)
    return max(1, cdiv(length, chunk)), chunk


def plan(problem: GemvProblem, choice: GemvChoice, target: Target) -> Plan:
    """gemv_n / gemv_t on A (0), x (1), y (2); with a split, partial sums in the workspace and their sum."""
    dtype = np.dtype(problem.dtype)
    vec = choice.vec if problem.aligned else 1
    nbytes = problem.m * problem.n * dtype.itemsize
    streaming = nbytes > elementwise.STREAM_BYTES
    params = {"scalar_t": scalar_t(dtype), "unroll": choice.unroll, "THREADS": choice.threads, "VEC": vec,
              "ITEMS": choice.items, "STREAM": streaming, "trans": problem.trans, **elementwise.half_params(dtype)}
    warps = choice.threads // 32
    if problem.trans:
        params["TY"] = choice.groups
        out, length = problem.n, problem.m
        blocks = cdiv(out, choice.threads // choice.groups * vec)
        splits, chunk = _splits(blocks, warps, length, choice.groups * choice.items, nbytes, target)
    else:
        params.update(ROWS=choice.rows, GW=choice.groups)
        out, length = problem.m, problem.n
        blocks = cdiv(out, warps // choice.groups * choice.rows)
        splits, chunk = _splits(blocks, warps, length, 32 * vec * choice.items * choice.groups, nbytes, target)
    name = (f"gemv_{dtype_tag(dtype)}_{'t' if problem.trans else 'n'}_b{choice.threads}_v{vec}x{choice.items}_"
            + ("" if problem.trans else f"r{choice.rows}") + f"g{choice.groups}" + ("_cs" if streaming else "")
            + ("" if choice.unroll else "_nounroll"))
    spec = pipeline.make_spec(TEMPLATE, "gemv_t" if problem.trans else "gemv_n", name, params, choice.opts)
    acc = compute_dtype(dtype)
    units = "FP32 cores" if acc == np.float32 else "FP64 cores"
    alpha, beta = scalar(acc, problem.alpha), scalar(acc, problem.beta)
    workspace = splits * out * acc.itemsize if splits > 1 else 0
    partial = ptr(3) if workspace else ptr(2)    # unused with one split: any valid pointer
    main = KernelLaunch(spec, (blocks, splits), (choice.threads,),
                        (ptr(0), ptr(1), ptr(2), partial, i32(problem.m), i32(problem.n), i64(problem.lda),
                         i32(chunk), alpha, beta), units=units)
    launches = [main]
    if workspace and dtype.name in HALF_DTYPES:
        reduce = pipeline.make_spec(TEMPLATE, "gemv_reduce", f"gemv_reduce_{dtype_tag(dtype)}",
                                    {"scalar_t": "float", "unroll": choice.unroll, "SPLIT_SUM": True,
                                     **elementwise.half_params(dtype)}, choice.opts)
        grid = min(cdiv(out, 256), 4 * target.sm_count)
        launches.append(KernelLaunch(reduce, (grid,), (256,), (ptr(3), ptr(2), i32(out), i32(splits), beta),
                                     units=units))
    elif workspace:
        launches.append(splitk.reduce_launch(dtype, ptr(3), ptr(2), 1, out, out, splits, problem.beta, target, units,
                                             choice.unroll, choice.opts))
    return Plan(tuple(launches), ("a", "x", "y"), workspace=workspace, choice=choice.label)


_PREWARM = ((8192, 8192, True), (1000, 1000, True), (33, 100000, True), (4097, 33, False))
_PREWARM_HALF = ((16384, 16384, True), (4096, 4096, True), (1000, 1000, True), (4097, 33, False))


def problems() -> list[GemvProblem]:
    """The goal shapes (8192², 1000², 33 x 100000; in 16 bits 16384², 4096², 1000²) and an unaligned one, every
    dtype, both transposes."""
    return ([GemvProblem(dt, m, n, trans, aligned, 1.0, 0.0, n) for dt in ("float32", "float64")
             for trans in (False, True) for m, n, aligned in _PREWARM]
            + [GemvProblem(dt, m, n, trans, aligned, 1.0, 0.0, n) for dt in HALF_DTYPES
               for trans in (False, True) for m, n, aligned in _PREWARM_HALF])


FAMILY = Family("gemv", choices, plan, problems)


class Gemv(ScaledProduct, Operator):
    """Matrix-vector product. `set_weight(A)` fixes A (M x N); `forward(x, y)` writes y and returns it.

    x holds N elements (M with trans=True) and y M (N with trans), any shapes of those sizes.
    """

    family = FAMILY

    def __init__(self, trans: bool = False, alpha: float = 1.0, beta: float = 0.0):
        super().__init__()
        self._trans = bool(trans)
        self._init_scales(alpha, beta)
        self._settings_changed()

    @property
    def trans(self) -> bool:
        return self._trans

    def set_weight(self, weight: Tensor) -> None:
        """A, the M x N matrix."""
        self._weight = self.check_operand("weight", weight, ndim=2)
        self._settings_changed()

    def _plan_settings(self) -> tuple:
        return self._trans, self._alpha, self._beta, self._weight_key()

    def bind(self, x: Tensor, y: Tensor) -> tuple:
        return (x.plan_key, y.plan_key, self._state), (self._weight.ptr, x.ptr, y.ptr), y

    def problem(self, x: Tensor, y: Tensor) -> GemvProblem | None:
        name = type(self).__name__
        a = self._weight
        if a is None:
            raise ValueError(f"{name}: no weight: call set_weight(A) before forward")
        self.check_operand("weight", a, ndim=2)
        self.check_operand("x", x)
        self.check_operand("y", y)
        m, n = a.shape
        want_x, want_y = (m, n) if self._trans else (n, m)
        op = "A^T" if self._trans else "A"
        if x.size != want_x:
            raise ValueError(f"{name}: x has {x.size} elements (shape {list(x.shape)}), but {op} with A of shape "
                             f"{[m, n]} needs {want_x}")
        if y.size != want_y:
            raise ValueError(f"{name}: y has {y.size} elements (shape {list(y.shape)}), but {op} with A of shape "
                             f"{[m, n]} gives {want_y}")
        if want_y == 0:
            return None
        aligned = ((a.ptr | x.ptr) & 15) == 0 and n % vector_width(self.dtype) == 0
        return GemvProblem(self.dtype.name, m, n, self._trans, aligned, self._alpha, self._beta, n)

    def work(self, x: Tensor, y: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        m, n = self._weight.shape
        return 2.0 * m * n, float((m * n + x.size + y.size * (2 if self._beta else 1)) * self.dtype.itemsize)


GemvFloat, GemvDouble = typed(Gemv, "Gemv", "GEMV")
GemvHalf, GemvBFloat16 = typed(Gemv, "Gemv", "GEMV", HALF_DTYPES)


