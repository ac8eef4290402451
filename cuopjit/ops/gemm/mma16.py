"""The float16 / bfloat16 GEMM on mma.sync tensor cores (sm_80 and later; on sm_90 where the wgmma kernel cannot
run it): gemm_async.cu.jinja with `elem_t`, m16n8k16 f16 / bf16 products summed in float32, operands brought in by
a STAGES-deep pipeline of 16-byte cp.async copies and read as fragments by ldmatrix (.trans for an operand stored
MN-major: A as K x M, B as K x N), C rounded once. It needs 16-byte aligned operands and leading dimensions (the
copies are 16 bytes); other problems run the one-stage kernel reading halves (plans.py).

Shapes: 128 x 128 x 32 tiles of 8 warps (2 x 4, 64 x 32 warp tiles) where they give every SM a block, else
64 x 64 x 32 of 4 warps; 4 stages of 16 KB (8 KB) each.
"""
from __future__ import annotations

from ...target import Target
from ..base import cdiv
from .problem import GemmChoice, GemmProblem
from .shapes import Shape

BIG, SMALL = Shape(True, 128, 128, 32, 2, 4), Shape(True, 64, 64, 32, 2, 2)
STAGES = 4
MIN_CAPABILITY = 80
UNITS = {"float16": "FP16 tensor cores (mma.sync m16n8k16)", "bfloat16": "BF16 tensor cores (mma.sync m16n8k16)"}


def smem_bytes(s: Shape, stages: int) -> int:
    """Dynamic shared memory: `stages` A and B k-tiles of 16-bit elements (swizzled, no padding)."""
    return stages * 2 * s.bk * (s.bm + s.bn)


def choice(problem: GemmProblem, target: Target, switches: dict) -> GemmChoice | None:
    """The heuristic's build for an aligned 16-bit problem on sm_80+ (None where the kernel cannot take it)."""
    if not problem.aligned or target.capability < MIN_CAPABILITY:
        return None
    s = BIG if cdiv(problem.m, 128) * cdiv(problem.n, 128) * problem.batch >= target.sm_count else SMALL
    return GemmChoice(s, stages=STAGES, **switches)


def why_not(problem: GemmProblem, choice: GemmChoice, target: Target) -> str | None:
    """Why `choice` cannot build the 16-bit mma.sync kernel for `problem` (None: it can)."""
    s = choice.shape
    if not problem.aligned:
        return "its 16-byte copies need 16-byte aligned operands and leading dimensions"
    if target.capability < MIN_CAPABILITY:
        return f"mma.sync m16n8k16 on 16-bit operands needs sm_80 or later, not {target.arch}"
    if not s.mma or s.bk != 32 or s.wk != 1 or s.bn // s.tn % 16 or s.bm // s.tm % 16 or s.bm < 64 or s.bn < 64:
        return "a warp-tiled shape with BK 32, tiles of at least 64 x 64, warp tiles of whole m16 x n16 blocks"
    if not 2 <= choice.stages <= STAGES or smem_bytes(s, choice.stages) > target.smem_per_block:
        return f"stages 2..{STAGES} that fit {target.arch}'s shared memory"
    if s.threads % (s.bm // 8) or s.threads % (s.bn // 8) or s.threads % 4:
        return "whole rows of the tiles per pass of the block's copies"
    return None
