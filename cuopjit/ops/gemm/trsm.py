"""TrsmFloat / TrsmDouble: solve op(A) X = alpha B (left) or X op(A) = alpha B (right), A triangular.

Blocked and recursive, as one plan: the unknowns are halved (at multiples of the leaf size NB) until
a block has at most NB; each half is solved and the other half updated by a GEMM family launch
(C -= op(A)_block @ X_half, or X_half @ op(A)_block), so almost all flops run on the GEMM kernels
and the updates are as large as they can be. The diagonal blocks are inverted first, all in one launch
(`trsm_invert`, templates/gemm/trsm.cu.jinja: substitution on the identity, into the workspace), so that a
leaf is a small product in place (`trsm_apply`: X_block = inv(T) X_block, a tile of right-hand sides per
block), wide and short instead of a dependent chain of NB divisions per right-hand side (as cuBLAS and
MAGMA do). A leaf of 128 unknowns spans two inverted blocks and does the update between them itself
(one launch instead of leaf, GEMM, leaf). X = alpha B is written first (`trsm_scale`) unless X is B and alpha is 1; then everything
works in place on X.

Modes (cuBLAS numbering, or words: cuopjit/ops/gemm/blas_flags.py): side 0 left / 1 right, uplo 0 lower /
1 upper, trans 0 / 1, diag 0 non-unit / 1 unit (the diagonal is then not read). Only the `uplo`
triangle of A is read. A zero on a non-unit diagonal gives inf/NaN, as LAPACK's trsm does.
JITConfig fields act on the GEMM updates as in the GEMM family (cuopjit/ops/gemm_plans.py);
optimization_level and max_registers reach the invert and apply kernels too.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import Family, KernelLaunch, Plan, i32, i64, ptr, scalar
from ...target import Target
from ...tensor import Tensor
from . import plans as gemm_plans
from ..base import Operator, cdiv, dtype_tag, scalar_t, vector_width, typed
from .blas_flags import SideUplo, flag, side_operands, square_operand
from .matmul import retarget
from ..params import plan_setting

TEMPLATE = "gemm/trsm.cu.jinja"
BLOCK = 64                     # unknowns per inverted diagonal block (trsm_invert)
# Leaf sizes, the default first (H100, 4096²): 128 = two inverted blocks and their coupling update fused,
# 2-5% faster in float32; in float64 it is 1-2% slower (left) or equal (right) than 64 and its DGEMMs.
LEAVES = {"float32": (128, 64), "float64": (64, 128)}
APPLY_VECTORS = 32             # right-hand sides per trsm_apply block
APPLY_THREADS = BLOCK // 4 * APPLY_VECTORS // 4   # a 4 x 4 patch of each 64-row product per thread
INVERT_THREADS_PER_COLUMN = 4  # trsm_invert's P


@dataclass(frozen=True)
class TrsmProblem:
    """X (m x n) solving op(A) X = alpha B (left, A m x m) or X op(A) = alpha B (right, A n x n); contiguous
    rows. `inplace`: X is B."""
    dtype: str
    m: int
    n: int
    right: bool
    upper: bool
    trans: bool
    unit: bool
    alpha: float
    aligned: bool
    inplace: bool

    @property
    def dim(self) -> int:
        return self.n if self.right else self.m


@dataclass(frozen=True)
class TrsmChoice:
    """The leaf size and the config the GEMM updates are planned under."""
    nb: int
    config: ConfigSnapshot

    @property
    def label(self) -> str:
        return f"nb{self.nb}"


def choices(problem: TrsmProblem, cfg: ConfigSnapshot, target: Target) -> list[TrsmChoice]:
    """The leaf sizes whose kernels' shared memory fits the target, in LEAVES' order; the GEMM family checks `cfg`
    on the largest update (raising for what it cannot build)."""
    half = max(1, problem.dim // 2)
    other = problem.m if problem.right else problem.n
    gemm_plans.choices(gemm_plans.packed(problem.dtype, half, other, half), cfg, target)
    size = np.dtype(problem.dtype).itemsize
    return [TrsmChoice(nb, cfg) for nb in LEAVES[problem.dtype]
            if max(_invert_shared(size), _apply_shared(nb // BLOCK, size)) <= target.smem_per_block]


def _invert_shared(size: int) -> int:
    """trsm_invert's shared memory: the diagonal block and the inverse (padded rows), the diagonal's reciprocals."""
    return (2 * BLOCK * (BLOCK + 1) + BLOCK) * size


def _apply_shared(halves: int, size: int) -> int:
    """trsm_apply's shared memory: the inverses, a tile of right-hand sides (rows padded by 4) and with two
    halves their coupling block (rows padded by 4)."""
    return (halves * BLOCK * BLOCK + halves * BLOCK * (APPLY_VECTORS + 4)
            + (halves - 1) * BLOCK * (BLOCK + 4)) * size


def _forward(p: TrsmProblem) -> bool:
    """Whether blocks are solved first to last: op(A) lower for left, op(A) upper for right."""
    op_lower = (not p.upper) != p.trans
    return op_lower != p.right


def _op_block(p: TrsmProblem, r0: int, c0: int) -> tuple[int, bool]:
    """(element offset in A, transposed?) of the block of op(A) whose top-left is (r0, c0)."""
    return (c0 * p.dim + r0, True) if p.trans else (r0 * p.dim + c0, False)


def plan(problem: TrsmProblem, choice: TrsmChoice, target: Target) -> Plan:
    """[trsm_scale], trsm_invert, then leaves (trsm_apply) and GEMM updates in dependency order; A = operand 0,
    B = 1, X = 2; the workspace holds the inverted diagonal blocks, then the GEMM launches' own workspace."""
    p, dtype = problem, np.dtype(problem.dtype)
    size, nb, d = dtype.itemsize, choice.nb, problem.dim
    forward = _forward(p)
    opts = pipeline.compile_opts(choice.config)
    units = "FP32 cores" if dtype == np.float32 else "FP64 cores"
    common = {"scalar_t": scalar_t(dtype), "unroll": True}
    trans_t = p.trans != p.right
    tag = dtype_tag(dtype)
    invert = pipeline.make_spec(TEMPLATE, "trsm_invert",
                               f"trsm_invert_{tag}_nb{BLOCK}_{'fwd' if forward else 'bwd'}"
                               + ("_unit" if p.unit else "") + ("_t" if trans_t else ""),
                               {**common, "kernel": "invert", "NB": BLOCK, "FORWARD": forward, "UNIT": p.unit,
                                "TRANS_T": trans_t}, opts)
    applies = {1: pipeline.make_spec(TEMPLATE, "trsm_apply", f"trsm_apply_{tag}_nb{BLOCK}" + ("_c" if p.right else ""),
                                    {**common, "kernel": "apply", "HALVES": 1, "VT": APPLY_VECTORS,
                                     "THREADS": APPLY_THREADS, "CONTIG": p.right}, opts)}
    if nb > BLOCK:
        applies[2] = pipeline.make_spec(
            TEMPLATE, "trsm_apply", f"trsm_apply_{tag}_nb{nb}_{'fwd' if forward else 'bwd'}"
            + ("_t" if trans_t else "") + ("_c" if p.right else ""),
            {**common, "kernel": "apply", "HALVES": 2, "VT": APPLY_VECTORS, "THREADS": APPLY_THREADS,
             "CONTIG": p.right, "FORWARD": forward, "TRANS_T": trans_t}, opts)
    blocks = cdiv(d, BLOCK)
    inverses = blocks * BLOCK * BLOCK * size
    launches: list[KernelLaunch] = []
    workspace = [0]
    if not (p.inplace and p.alpha == 1.0):
        spec = pipeline.make_spec(TEMPLATE, "trsm_scale", f"trsm_scale_{tag}", {**common, "kernel": "scale"}, opts)
        count = p.m * p.n
        launches.append(KernelLaunch(spec, (min(cdiv(count, 256), target.sm_count * 8),), (256,),
                                     (ptr(1), ptr(2), i64(count), scalar(dtype, p.alpha)), units=units))
    launches.append(KernelLaunch(invert, (blocks,), (BLOCK * INVERT_THREADS_PER_COLUMN,), (ptr(0), ptr(3), i32(d)),
                                 shared=_invert_shared(size), units=units))
    vectors = p.m if p.right else p.n
    estride, vstride = (1, p.n) if p.right else (p.n, 1)

    def leaf(lo: int, hi: int) -> None:
        """A leaf of more than one inverted block also reads its coupling block of A."""
        halves = cdiv(hi - lo, BLOCK)
        coupling = (ptr(0, (lo * d + lo) * size), i32(d)) if halves == 2 else ()
        launches.append(KernelLaunch(applies[halves], (cdiv(vectors, APPLY_VECTORS),), (APPLY_THREADS,),
                                     (ptr(3, lo // BLOCK * BLOCK * BLOCK * size), *coupling,
                                      ptr(2, lo * estride * size), i32(hi - lo), i32(vectors), i64(estride),
                                      i64(vstride)), shared=_apply_shared(halves, size), units=units))

    def update(done: tuple[int, int], todo: tuple[int, int]) -> None:
        """X[todo] -= coupling of X[done]: the GEMM family's launch on sub-matrices."""
        (d0, d1), (t0, t1) = done, todo
        if p.right:   # X[:, todo] -= X[:, done] @ op(A)[done, todo]
            off, trans_b = _op_block(p, d0, t0)
            g = gemm_plans.GemmProblem(p.dtype, p.m, t1 - t0, d1 - d0, False, trans_b, p.aligned, -1.0, 1.0,
                                         p.n, d, p.n)
            pointers = (ptr(2, d0 * size), ptr(0, off * size), ptr(2, t0 * size))
        else:         # X[todo, :] -= op(A)[todo, done] @ X[done, :]
            off, trans_a = _op_block(p, t0, d0)
            g = gemm_plans.GemmProblem(p.dtype, t1 - t0, p.n, d1 - d0, trans_a, False, p.aligned, -1.0, 1.0,
                                         d, p.n, p.n)
            pointers = (ptr(0, off * size), ptr(2, d0 * p.n * size), ptr(2, t0 * p.n * size))
        gemm = gemm_plans.FAMILY.default_plan(g, choice.config, target)
        workspace.append(gemm.workspace)   # GEMM launches run one after another: they share one workspace
        launches.extend(retarget(launch, pointers, ptr(3, inverses)) for launch in gemm.launches)

    def solve(lo: int, hi: int) -> None:
        if hi - lo <= nb:
            leaf(lo, hi)
            return
        mid = lo + cdiv((hi - lo) // 2, nb) * nb
        first, second = ((lo, mid), (mid, hi)) if forward else ((mid, hi), (lo, mid))
        solve(*first)
        update(first, second)
        solve(*second)

    solve(0, d)
    return Plan(tuple(launches), ("a", "b", "x"), workspace=inverses + max(workspace), choice=choice.label)


def problems() -> list[TrsmProblem]:
    """The goal shape (4096², both sides and triangles, in place) and two odd transposed unit-diagonal solves
    out of place, both dtypes (six of the eight inversion kernels of a dtype)."""
    out = []
    for dt in ("float32", "float64"):
        out += [TrsmProblem(dt, 4096, 4096, right, upper, False, False, 1.0, True, True)
                for right in (False, True) for upper in (False, True)]
        out += [TrsmProblem(dt, 1000, 33, False, False, True, True, 2.0, False, False),
                TrsmProblem(dt, 33, 1000, True, True, True, True, 2.0, False, False)]
    return out


FAMILY = Family("trsm", choices, plan, problems)


class Trsm(SideUplo, Operator):
    """Triangular solve. `set_matrix_a(A)` fixes A; `forward(B, X)` writes X (X may be B) and returns it."""

    family = FAMILY

    def __init__(self, side: int | str = 0, uplo: int | str = 0, trans: int | str = 0, diag: int | str = 0,
                 alpha: float = 1.0):
        super().__init__()
        name = type(self).__name__
        self._right, self._upper = flag(name, "side", side), flag(name, "uplo", uplo)
        self._trans, self._unit = flag(name, "trans", trans), flag(name, "diag", diag)
        self._alpha = float(alpha)
        self._matrix: Tensor | None = None
        self._settings_changed()

    @property
    def trans(self) -> bool:
        return self._trans

    @property
    def diag(self) -> str:
        return "unit" if self._unit else "non_unit"

    alpha = plan_setting("alpha")

    def set_matrix_a(self, a: Tensor) -> None:
        """A, the square triangular matrix (only its `uplo` triangle is read)."""
        self._matrix = square_operand(self, "a", "A", a)
        self._settings_changed()

    def _plan_settings(self) -> tuple:
        a = self._matrix
        return (self._right, self._upper, self._trans, self._unit, self._alpha,
                None if a is None else (a.shape, a.device, a.ptr & 15))

    def bind(self, b: Tensor, x: Tensor) -> tuple:
        return (b.plan_key, x.plan_key, b.ptr == x.ptr, self._state), (self._matrix.ptr, b.ptr, x.ptr), x

    def problem(self, b: Tensor, x: Tensor) -> TrsmProblem | None:
        name, a = type(self).__name__, self._matrix
        m, n, d = side_operands(self, a, "a", "no matrix: call set_matrix_a(A) before forward",
                                b, x, "x", self._right, ("op(A) X", "X op(A)"))
        if x.ptr != b.ptr and x.ptr < b.ptr + b.size * b.dtype.itemsize and b.ptr < x.ptr + x.size * x.dtype.itemsize:
            raise ValueError(f"{name}: x overlaps b without being b: pass the same tensor to solve in place")
        if m == 0 or n == 0:
            return None
        vec = vector_width(self.dtype)
        aligned = ((a.ptr | b.ptr | x.ptr) & 15) == 0 and n % vec == 0 and d % vec == 0
        return TrsmProblem(self.dtype.name, m, n, self._right, self._upper, self._trans, self._unit, self._alpha,
                           aligned, b.ptr == x.ptr)

    def work(self, b: Tensor, x: Tensor) -> tuple[float, float]:
        m, n = b.shape
        d = self._matrix.shape[0]
        return float(m * n * d), float((d * d // 2 + 2 * b.size + x.size) * self.dtype.itemsize)


TrsmFloat, TrsmDouble = typed(Trsm, "Trsm", "TRSM")


