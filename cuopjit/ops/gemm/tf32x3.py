"""3xTF32 operands for the wgmma GEMM: each operand split once into TF32 hi and lo parts (templates/gemm/tf32_split.cu.jinja).
The wgmma GEMM takes these copies for wide products (wgmma.COPY_SIDE), A^T @ B and operands TMA cannot read; the
others split in the kernel instead (wgmma.py `inreg`: no copies, each operand read once).

x = hi + lo with both parts TF32 (rounded to nearest), so the three products hi*hi + hi*lo + lo*hi carry
float32's accuracy. Splitting once in a memory-bound prepass, both operands written K-major, lets the
main loop read all four parts from shared memory (wgmma's SS form, no register traffic) and run any
transpose layout, A^T @ B included: the wgmma kernel then always computes P = A (M x K) times
Q = B^T (N x K). The cost is a workspace of 2 (M + N) K floats (batch entries that are not broadcast
each have their own) and one read and two writes of each operand (4096³: 0.14 ms of a 1.4 ms GEMM).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...build import pipeline
from ...run.plan import KernelLaunch, i32, i64, ptr
from ..base import cdiv

TEMPLATE = "gemm/tf32_split.cu.jinja"
TILE, ROWS = 32, 8
ALIGN = 256


@dataclass(frozen=True)
class SplitLayout:
    """Where the parts live in the plan's workspace (bytes from its start; elements for ld and strides):
    P hi, P lo (entries of M x ld), then Q hi, Q lo (entries of N x ld); ld is K rounded up to 4 (16 bytes)."""
    ld: int
    p_hi: int
    q_hi: int
    lo_p: int           # elements from P hi to P lo
    lo_q: int
    stride_p: int       # elements between batch entries (0: one entry for all, a broadcast operand)
    stride_q: int
    end: int

    @classmethod
    def of(cls, problem, start: int) -> "SplitLayout":
        """The layout after `start` bytes (the tensor maps) for `problem` (a GemmProblem)."""
        ld = cdiv(problem.k, 4) * 4
        batched = problem.batch > 1
        entries_p = problem.batch if batched and problem.stride_a else 1
        entries_q = problem.batch if batched and problem.stride_b else 1
        part_p, part_q = entries_p * problem.m * ld, entries_q * problem.n * ld
        p_hi = cdiv(start, ALIGN) * ALIGN
        q_hi = cdiv(p_hi + 8 * part_p, ALIGN) * ALIGN
        return cls(ld, p_hi, q_hi, part_p, part_q, problem.m * ld if entries_p > 1 else 0,
                   problem.n * ld if entries_q > 1 else 0, q_hi + 8 * part_q)


def launches(problem, lay: SplitLayout, unroll: bool, opts: pipeline.CompileOpts, workspace: int) -> tuple:
    """Two launches: A into P (A stored K x M is transposed) and B into Q (B stored K x N is transposed)."""
    a_entries = problem.batch if problem.batch > 1 and problem.stride_a else 1
    b_entries = problem.batch if problem.batch > 1 and problem.stride_b else 1
    ops = ((0, problem.m, problem.trans_a, problem.lda, problem.stride_a, a_entries, lay.p_hi, lay.lo_p, lay.stride_p),
           (1, problem.n, not problem.trans_b, problem.ldb, problem.stride_b, b_entries, lay.q_hi, lay.lo_q,
            lay.stride_q))
    made = []
    for operand, rows, transpose, ldx, stride_x, entries, hi, lo, stride_o in ops:
        name = f"tf32_split_{'t' if transpose else 'n'}" + ("" if unroll else "_nounroll")
        params = {"scalar_t": "float", "TRANSPOSE": transpose, "unroll": unroll}
        spec = pipeline.make_spec(TEMPLATE, "tf32_split", name, params, opts, arch_specific=True)
        args = (ptr(operand), ptr(workspace, hi), ptr(workspace, hi + 4 * lo), i32(rows), i32(problem.k), i32(ldx),
                i32(lay.ld), i64(stride_x if entries > 1 else 0), i64(stride_o))
        made.append(KernelLaunch(spec, (cdiv(problem.k, TILE), cdiv(rows, TILE), entries), (TILE, ROWS), args,
                                 units="FP32 cores"))
    return tuple(made)
