"""The GEMM family's automatic choices: the float32 SIMT tile, split-K, stages and tile order (measured on the H100)."""
from __future__ import annotations

import numpy as np

from ...target import Target
from ..base import cdiv
from . import shapes
from .problem import GemmChoice, GemmProblem

# split-K: warps per SM below which, and up to which; the shortest slice and the shortest K that splits
SPLIT_BELOW, SPLIT_WARPS, SPLIT_MIN_K, SPLIT_FROM_K = 5, 12, 128, 512
# auto_simt: the fewest warps on the busiest SM, and the least share of its block slots the other SMs keep busy
AUTO_WARPS, BALANCE = 4, 0.8
# float32 SIMT throughput of each (BM, BN) tile at 4096³ relative to 128 x 128 (H100: 46.8, 40.1, 40.1, 37.1, 26.3
# TFLOP/s), where none of them balances the SMs
SIMT_RATE = {(128, 128): 1.0, (128, 64): 0.86, (64, 128): 0.86, (64, 64): 0.79, (32, 32): 0.56}


def auto_simt(problem: GemmProblem, target: Target) -> shapes.Shape:
    """float32 SIMT with tile and block left to us: few rows (M < 64) take 16 x 128 tiles where they pad the
    product less than 32 x 32 ones; otherwise the largest of shapes.AUTO_SIMT (of the 128 x 64 / 64 x 128 halves,
    the one along the longer side) whose blocks, split as split_for splits them, keep AUTO_WARPS warps on the
    busiest SM and at least BALANCE of its block slots busy on the others (where none does: a batch takes the best
    balance times SIMT_RATE times useful outputs, the smallest tile included, a single problem the smallest). H100, ratio to torch: 8192 x 256 x 8192 128 x 128 0.88 (64 x 64: 0.77); 1000^3 128 x 64 in 3 slices 0.79 (64 x 64 in 3: 0.74; 128 x 128 in 3 leaves
    72 of 132 SMs one block of two: 0.60); 2048^3 128 x 64 0.57 (512 blocks, 3 per SM: two rounds) vs 128 x 128 0.91;
    3000^3 128 x 64 0.95 (1128 blocks in 3 rounds of 3 per SM) vs 128 x 128 0.88 (576 in 3 rounds of 2, the last
    a third full); TRSM's 256 x 4096 x 256 updates 64 x 128 (one block of 4 warps per SM) 30.4 TFLOP/s, 64 x 64
    25.9, 32 x 32 (16 warps per SM) 21.8."""
    m, n, small = problem.m, problem.n, shapes.AUTO_SIMT[-1]
    scored = []
    if m < 64 and (cdiv(m, 16) * 16 * cdiv(n, 128) * 128
                   < cdiv(m, small.bm) * small.bm * cdiv(n, small.bn) * small.bn):
        return shapes.SKINNY_SIMT
    for s in shapes.AUTO_SIMT:
        if s.bm != s.bn and (s.bm > s.bn) != (m >= n):
            continue
        blocks = cdiv(m, s.bm) * cdiv(n, s.bn) * problem.batch * split_for(problem, GemmChoice(s), target)
        busiest = cdiv(blocks, target.sm_count)
        resident = min(busiest, resident_blocks(s, problem.dtype, target))
        slots = target.sm_count * resident * cdiv(busiest, resident)
        warps = resident * s.threads // 32 >= AUTO_WARPS
        if warps and blocks >= BALANCE * slots and (s is not small or problem.batch == 1):
            return s
        if warps or s is small:
            padded = cdiv(m, s.bm) * s.bm * cdiv(n, s.bn) * s.bn
            scored.append((blocks / slots * SIMT_RATE.get((s.bm, s.bn), 0.5) * m * n / padded, s))
    # a batch that no larger tile balances: the best balance times the tile's rate and its share of useful
    # outputs (100 x 256³: 128 x 128, 400 blocks in 1.5 rounds of two per SM, 97.8 us, against 32 x 32 136 us,
    # 128 x 64 102, 64 x 64 110); a single problem: the smallest tile
    if problem.batch == 1 or not scored:
        return small
    return max(scored, key=lambda p: p[0])[1]


def resident_blocks(s: shapes.Shape, dtype: str, target: Target) -> int:
    """About how many blocks of SIMT shape `s` an SM of `target` holds at once: registers (128 a thread at 256
    float threads on sm_90+, the kernel's two-block cap; else 64 + 1.5 per 4-byte accumulator, rounded to 8, as
    NVRTC 13 allocates them: 8 x 8 ~160, 4 x 4 ~88), static shared memory, threads."""
    acc = s.tm * s.tn * np.dtype(dtype).itemsize // 4
    capped = dtype == "float32" and s.threads == 256 and target.capability >= 90
    regs = 128 if capped else min(255, cdiv(64 + 3 * acc // 2, 8) * 8)
    return max(1, min(target.regs_per_sm // (regs * s.threads), target.smem_per_sm // shapes.static_smem(s, dtype, 4),
                      target.max_threads_per_sm // s.threads, 32))


def split_for(problem: GemmProblem, choice: GemmChoice, target: Target) -> int:
    """The heuristic's split-K for `choice`: a single problem on the one-stage kernel whose tiles give the SMs
    fewer than SPLIT_BELOW warps each and K of at least SPLIT_FROM_K is cut into K slices (at least SPLIT_MIN_K
    long, at most 16) until about SPLIT_WARPS warps per SM run. H100, float32 SIMT: 33 x 4097 x 1000 7.3 -> 8.6-9.1
    TFLOP/s (32 x 32 tiles; 16 x 128 ones in 8 slices of 128: 11.3), 1000³ 23 -> 29, 256 x 256 x 4096 4.1 -> 17-18;
    where tiles already fill the SMs (2048³, 4096² x 1000) splitting lost 10-25%, and TRSM's updates (K 128-512,
    about 8 warps per SM) lost more to the reduction than they gained (-7%)."""
    if choice.stages > 1 and choice.shape.mma or problem.batch > 1:
        return 1
    s = choice.shape
    warps = cdiv(problem.m, s.bm) * cdiv(problem.n, s.bn) * (s.threads // 32) / target.sm_count
    if warps >= SPLIT_BELOW or problem.k < SPLIT_FROM_K:
        return 1
    return max(1, min(16, round(SPLIT_WARPS / warps), problem.k // SPLIT_MIN_K))


def pipeline_fields(dtype: str, s: shapes.Shape, target: Target) -> dict:
    """The heuristic's stages and tile order for shape `s` (gemm_shapes.STAGES, RASTER; measured on the H100)."""
    stages = shapes.default_stages(dtype, s, target.smem_per_block)
    return {"stages": stages, "raster": shapes.RASTER[dtype, s.mma]}
