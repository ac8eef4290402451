"""SymmFloat / SymmDouble: C = alpha * A @ B + beta * C (left) or alpha * B @ A + beta * C (right).

A is symmetric and only its `uplo` triangle is read (the other may hold anything, NaN included).
The plan: `symm_fill` (templates/gemm/symm.cu.jinja) writes the full matrix into the plan's workspace,
then one GEMM family launch multiplies by it, so every JITConfig field acts as in the GEMM family
(cuopjit/ops/gemm_plans.py) and auto-tuning times the GEMM family's choices. side and uplo
take cuBLAS's numbers or words (cuopjit/ops/gemm/blas_flags.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import Family, KernelLaunch, Plan, i32, ptr
from ...target import Target
from ...tensor import Tensor
from . import plans as gemm_plans
from ..base import Operator, cdiv, dtype_tag, scalar_t, vector_width, typed
from .blas_flags import SideUplo, flag, side_operands, square_operand
from .matmul import retarget
from ..params import ScaledProduct

TEMPLATE = "gemm/symm.cu.jinja"


@dataclass(frozen=True)
class SymmProblem:
    """C (m x n) = alpha * A B + beta * C with A m x m (left) or B A with A n x n (right); contiguous rows."""
    dtype: str
    m: int
    n: int
    right: bool
    upper: bool
    aligned: bool
    alpha: float
    beta: float

    @property
    def dim(self) -> int:
        return self.n if self.right else self.m

    def gemm(self) -> gemm_plans.GemmProblem:
        """The product with the filled matrix W (A of the GEMM when left, B when right), both as stored."""
        return gemm_plans.packed(self.dtype, self.m, self.n, self.dim, aligned=self.aligned,
                                   alpha=self.alpha, beta=self.beta)


def choices(problem: SymmProblem, cfg: ConfigSnapshot, target: Target) -> list:
    """The GEMM family's choices for the product."""
    return gemm_plans.choices(problem.gemm(), cfg, target)


def plan(problem: SymmProblem, choice: gemm_plans.GemmChoice, target: Target) -> Plan:
    """symm_fill (A = operand 0 -> workspace), then the GEMM plan's launches on W, B (1) and C (2)."""
    dtype = np.dtype(problem.dtype)
    d = problem.dim
    name = f"symm_fill_{dtype_tag(dtype)}_{'upper' if problem.upper else 'lower'}"
    spec = pipeline.make_spec(TEMPLATE, "symm_fill", name, {"scalar_t": scalar_t(dtype), "unroll": True,
                                                            "upper": problem.upper}, choice.opts)
    units = "FP32 cores" if dtype == np.float32 else "FP64 cores"
    fill = KernelLaunch(spec, (cdiv(d, 32), cdiv(d, 32)), (256,), (ptr(0), ptr(3), i32(d)), units=units)
    gemm = gemm_plans.plan(problem.gemm(), choice, target)   # one launch, or more (3xTF32: split, then wgmma)
    operands = (ptr(1), ptr(3), ptr(2)) if problem.right else (ptr(3), ptr(1), ptr(2))
    filled = cdiv(d * d * dtype.itemsize, 256) * 256     # the GEMM plan's own workspace follows W
    product = tuple(retarget(launch, operands, ptr(3, filled)) for launch in gemm.launches)
    return Plan((fill, *product), ("a", "b", "c"), workspace=filled + gemm.workspace, choice=choice.label)


def problems() -> list[SymmProblem]:
    """The goal shape (4096², both sides and triangles) and an odd unaligned one, both dtypes."""
    return [SymmProblem(dt, m, n, right, upper, aligned, 1.0, 0.0) for dt in ("float32", "float64")
            for right in (False, True) for upper in (False, True)
            for m, n, aligned in ((4096, 4096, True), (33, 1000, False))]


FAMILY = Family("symm", choices, plan, problems)


class Symm(SideUplo, ScaledProduct, Operator):
    """Symmetric matrix multiply. `set_weight(A)` fixes A; `forward(B, C)` writes C and returns it."""

    family = FAMILY

    def __init__(self, side: int | str = 0, uplo: int | str = 1, alpha: float = 1.0, beta: float = 0.0):
        super().__init__()
        name = type(self).__name__
        self._right, self._upper = flag(name, "side", side), flag(name, "uplo", uplo)
        self._init_scales(alpha, beta)
        self._settings_changed()

    def set_weight(self, weight: Tensor) -> None:
        """A, the square symmetric matrix (only its `uplo` triangle is read)."""
        self._weight = square_operand(self, "weight", "weight", weight)
        self._settings_changed()

    def _plan_settings(self) -> tuple:
        return self._right, self._upper, self._alpha, self._beta, self._weight_key()

    def bind(self, b: Tensor, c: Tensor) -> tuple:
        return (b.plan_key, c.plan_key, self._state), (self._weight.ptr, b.ptr, c.ptr), c

    def problem(self, b: Tensor, c: Tensor) -> SymmProblem | None:
        m, n, d = side_operands(self, self._weight, "weight", "no weight: call set_weight(A) before forward",
                                b, c, "c", self._right, ("A @ B", "B @ A"))
        if m == 0 or n == 0:
            return None
        vec = vector_width(self.dtype)
        aligned = ((b.ptr | c.ptr) & 15) == 0 and n % vec == 0 and d % vec == 0
        return SymmProblem(self.dtype.name, m, n, self._right, self._upper, aligned, self._alpha, self._beta)

    def work(self, b: Tensor, c: Tensor) -> tuple[float, float]:
        m, n = b.shape
        d = self._weight.shape[0]
        return 2.0 * m * n * d, float((d * d * 3 + b.size + c.size * (2 if self._beta else 1)) * self.dtype.itemsize)


SymmFloat, SymmDouble = typed(Symm, "Symm", "SYMM")


