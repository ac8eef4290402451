"""A GEMM whose C is one row or one column is a matrix-vector product: the GEMM family plans it as GEMV
(cuopjit/ops/gemm/gemv.py, templates/gemm/gemv.cu.jinja) on the other operand as it is stored.

C[1, N] = a @ op(B) is y = op(B)^T a: GEMV on B (stored N x K: as is; stored K x N: transposed) with x = a;
C[M, 1] = op(A) @ b is y = op(A) b: GEMV on A with x = b. The vector operand and C are contiguous in
either layout (one row, or one column with leading dimension 1), so nothing is copied; alpha and beta carry
over. The GEMV reads the matrix once with 16-byte loads (split over blocks where it has few rows) and
multiplies in exact float32 (float64), so it serves every precision: TF32 and 3xTF32 configurations get
float32's accuracy at the bandwidth's speed.

H100 (benchmarks/gemm_sweep.py, `x @ W^T` with one row, kernels alone, torch.matmul in the same run): W 768 x
3072 4.6 us against 14.2 us for the best SIMT split-K build and 18.1 for the best wgmma build (torch TF32 12.5,
fp32 12.9); 2304 x 768 4.6 against 14.7 / 9.7 (torch 14.7 / 17.6); 4096 x 4096 26.3 against 40.3 / 43.6 (torch
28.6 / 28.7). Through GemmFloat (benchmarks/linear.py): 4.9-5.7 us at W 768..4096 x 768..4096, 1.50-1.74 x torch
in fp32 and TF32.
The heuristic takes it wherever the config leaves tile and block to it (not for kernel_type "simple", a
batch, K = 0 or a user epilogue); the GEMM kernels stay tuning candidates.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...config import ConfigSnapshot
from ...run.plan import Plan, ptr
from ...target import Target
from . import gemv
from .problem import GemmProblem, retarget


@dataclass(frozen=True)
class VectorChoice:
    """The GEMV build that runs a one-row or one-column GEMM."""
    gemv: gemv.GemvChoice

    @property
    def label(self) -> str:
        return "gemv_" + self.gemv.label

    @property
    def opts(self):
        """How its kernels compile (a caller planning launches of its own beside them uses the same)."""
        return self.gemv.opts


def as_gemv(problem: GemmProblem) -> tuple[gemv.GemvProblem, tuple[int, int, int]] | None:
    """(the GEMV, which GEMM operand is its matrix, vector and output) where `problem` is one, else None."""
    p, vec = problem, 16 // np.dtype(problem.dtype).itemsize
    if p.batch != 1 or p.epilogue or p.k == 0:
        return None
    if p.m == 1 and (not p.trans_a or p.lda == 1):
        # y = op(B)^T a: B stored n x k is GEMV's A as is; stored k x n, transposed
        rows, cols = (p.n, p.k) if p.trans_b else (p.k, p.n)
        return gemv.GemvProblem(p.dtype, rows, cols, not p.trans_b, p.aligned and cols % vec == 0, p.alpha, p.beta,
                                p.ldb), (1, 0, 2)
    if p.n == 1 and p.ldc == 1 and (p.trans_b or p.ldb == 1):
        rows, cols = (p.k, p.m) if p.trans_a else (p.m, p.k)
        return gemv.GemvProblem(p.dtype, rows, cols, p.trans_a, p.aligned and cols % vec == 0, p.alpha, p.beta,
                                p.lda), (0, 1, 2)
    return None


def choice(problem: GemmProblem, cfg: ConfigSnapshot, target: Target) -> VectorChoice | None:
    """The GEMV build for a one-row / one-column problem when the config leaves the kernel to the heuristic."""
    found = as_gemv(problem)
    if found is None or cfg.tile_size or cfg.block_size or cfg.kernel_type == "simple":
        return None
    return VectorChoice(gemv.choices(found[0], cfg, target)[0])


def plan(problem: GemmProblem, chosen: VectorChoice, target: Target) -> Plan:
    """GEMV's plan on the GEMM's operands (a, b, c, then the workspace), no copies."""
    found = as_gemv(problem)
    if found is None:
        raise ValueError(f"GEMM {chosen.label}: a {problem.m} x {problem.n} product is no matrix-vector product "
                         "(one row or column of C, one problem, no epilogue): take another choice")
    inner, (matrix, vector, out) = found
    made = gemv.plan(inner, chosen.gemv, target)
    moved = tuple(retarget(kl, (ptr(matrix), ptr(vector), ptr(out)), ptr(3)) for kl in made.launches)
    return Plan(moved, ("a", "b", "c"), workspace=made.workspace, choice=chosen.label)
