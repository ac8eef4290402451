"""The attention family: out = softmax(q kᵀ · scale) v over [batch, heads, L, D] operands with element strides
(templates/attention/attention.cu.jinja). A block owns BM query rows of one (batch, head) and walks the keys
in tiles of BN with an online softmax: the [Lq, Lk] scores are never written.

Kernels (the JITConfig mapping):
  simt   exact float32 / float64 FMAs on the FP32 / FP64 cores: float64 always; float32 unless tensor cores
         are asked for, and for precision="3xtf32" (as GEMM, where no split kernel runs: the exact kernel is at
         least as accurate). 256 threads, 128 x 64 tiles (causal: 64 x 64); D > 64, and float64: 64 x 32 tiles
         (128 threads; float64 past D = 64: 256); halved where a target's shared memory per block is too small.
  mma    float32 as TF32 on the tensor cores (mma.sync m16n8k8, sm_80+) when enable_tensor_core=True or
         kernel_type="tensor_core" (GEMM's rule, ops/gemm/plans.uses_tensor_cores): operands rounded to TF32
         (relative error 2^-11 each), float32 accumulation. 4 warps of 16 query rows, K/V tiles of 64 keys
         (32 for D > 64) in two cp.async stages.
  mma16  float16 / bfloat16 (always): mma.sync m16n8k16 products of the stored operands summed in float32,
         softmax in float32, P rounded to the storage type for P·V (as FlashAttention), out rounded once.
         K/V tiles of BN keys in cp.async stages read by ldmatrix (.trans for v); MMA16_TILES has the
         block shapes (query rows, keys per tile, warps, stages) by head dim.
kernel_type "simple" is the SIMT kernel (float32); enable_memory_coalescing=False reads and writes scalars instead of
16-byte vectors; enable_loop_unroll=False compiles the loops over D and over keys with `unroll 1`;
optimization_level and max_registers reach NVRTC. The kernels have fixed tile shapes: tile_size, block_size,
enable_shared_memory_opt and enable_tma change nothing here.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import Family, KernelLaunch, Plan, i32, i64, ptr, scalar
from ...target import Target
from ..base import HALF_DTYPES, cdiv, compute_dtype, dtype_tag, scalar_t, storage_t
from ..choice import kernel_choice
from ..gemm.plans import uses_tensor_cores

TEMPLATE = "attention/attention.cu.jinja"
MAX_D = 128
DTYPES = ("float32", "float64", *HALF_DTYPES)
_UNITS16 = {"float16": "FP16", "bfloat16": "BF16"}
LOG2E = 1.4426950408889634
Strides = tuple[int, int, int]   # elements between batches, heads, rows (D is contiguous)
# float32 SIMT tiles for D <= 64 (BM, BN, TX, TY) by causal. Measured at [8, 12, 512, 64] on H100 (ms, full /
# causal; torch's SDPA 0.211 / 0.164): 128 x 64, 16 x 16 threads (8 x 4 scores each) 0.208 / 0.176; 64 x 64,
# 16 x 16 (4 x 4) 0.211 / 0.154; 64 x 32, 8 x 16 (4 x 4) 0.205 / 0.164; 4 x 8 scores 0.209-0.238 / 0.178-0.206;
# 8 x 8 (128 x 128) 0.41 / 0.33. TF32 (mma: 4 or 8 warps, 32 or 64 keys) 0.078-0.081 / 0.064-0.079: 64 x 64 kept.
SIMT_WIDE = {False: (128, 64, 16, 16), True: (64, 64, 16, 16)}
# 16-bit (BM, BN, warps, stages) by (D > 64, causal): the fastest of benchmarks/attention.py --sweep (float16 +
# bfloat16 time at [8, 12, 512, 64 / 128] on H100, us for bf16 full / causal). D 64: 128 x 64 by 4 warps (32 rows
# each: every k / v fragment used twice) 32.4 / 28.2, with 3 stages 31.5 / 28.4; 64 x 64 by 4 warps 33.0 / 27.9;
# 128 x 128 by 8 warps 34.8 / 30.1. D 128 (16 rows per warp: the accumulators allow no more): 128 x 128 by 8 warps
# 59.5 / 49.8, 128 x 64 by 8 67.5 / 54.9 (3 stages 63.2 / 58.1), 64 x 64 by 4 72.8 / 55.1. Torch's SDPA: 20-25 / 29.
MMA16_TILES = {(False, False): (128, 64, 4, 3), (False, True): (64, 64, 4, 2), (True, False): (128, 128, 8, 2),
               (True, True): (128, 128, 8, 2)}


@dataclass(frozen=True)
class AttentionProblem:
    """One attention call: `batch` x `heads` independent softmax(q kᵀ · scale) v, q [lq, d], k and v [lk, d],
    out [lq, d]. `strides`: q's, k's, v's and out's (batch, head, row) element strides; `aligned`: the four
    pointers 16-byte aligned and every stride and d a multiple of the 16-byte vector."""
    dtype: str
    batch: int
    heads: int
    lq: int
    lk: int
    d: int
    scale: float
    causal: bool
    strides: tuple[Strides, Strides, Strides, Strides]
    aligned: bool


def _label(c) -> str:
    extra = {"simt": f"t{c.ty}x{c.tx}", "mma16": f"w{c.warps}s{c.stages}"}.get(c.kind, "")
    shape = f"m{c.bm}n{c.bn}{extra}"
    return f"{c.kind}_{shape}_v{c.vec}" + ("" if c.unroll else "_nounroll")


AttentionChoice = kernel_choice(
    "AttentionChoice", "kind bm bn tx ty vec unroll warps stages", _label,
    "An attention kernel: kind 'simt', 'mma' or 'mma16', BM query rows by BN keys per tile, TY x TX threads (simt), "
    "scalars per global access, loop unrolling, warps and shared-memory stages (the mma kernels).")


def tensor_cores(problem: AttentionProblem, cfg: ConfigSnapshot) -> bool:
    """float32 as TF32 on the tensor cores (the module docstring's rule); raises for a kernel_type no family takes."""
    asked = uses_tensor_cores(cfg.kernel_type, cfg.enable_tensor_core, problem.dtype, "attention")
    return problem.dtype == "float32" and asked and cfg.precision == "tf32"


def choices(problem: AttentionProblem, cfg: ConfigSnapshot, target: Target) -> list:
    """The one kernel `cfg` names for `problem` (module docstring)."""
    if problem.dtype not in DTYPES:
        raise TypeError(f"attention supports {', '.join(DTYPES)}, not {problem.dtype}")
    if cfg.precision != "tf32" and problem.dtype != "float32":
        raise ValueError(f"attention precision={cfg.precision!r} applies to float32 tensor-core products; "
                         f"{problem.dtype} has one kernel: leave precision='tf32' (the default)")
    width = 16 // np.dtype(problem.dtype).itemsize
    vec = width if cfg.enable_memory_coalescing and problem.aligned else 1
    opts = pipeline.compile_opts(cfg)
    if problem.dtype in HALF_DTYPES:
        bm, bn, warps, stages = MMA16_TILES[problem.d > 64, problem.causal]
        choice = AttentionChoice("mma16", bm, bn, 0, 0, vec, cfg.enable_loop_unroll, warps, stages, opts=opts)
        while shared_bytes(choice, problem.d, problem.dtype) > target.smem_per_block:   # ~100 KB targets:
            if choice.stages > 2:                                                         # fewer stages,
                choice = dataclasses.replace(choice, stages=choice.stages - 1)
            else:                                                                         # then fewer keys
                choice = dataclasses.replace(choice, bn=choice.bn // 2)
        return [choice]
    if tensor_cores(problem, cfg):
        return [AttentionChoice("mma", 64, 64 if problem.d <= 64 else 32, 0, 0, vec, cfg.enable_loop_unroll, 4,
                                2, opts=opts)]
    if problem.dtype == "float32" and problem.d <= 64:
        bm, bn, tx, ty = SIMT_WIDE[problem.causal]
    else:   # float64 past D = 64: 16 threads across (2 keys each) keep the accumulator within 255 registers
        bm, bn, tx, ty = (64, 32, 16, 16) if problem.dtype == "float64" and problem.d > 64 else (64, 32, 8, 16)
    choice = AttentionChoice("simt", bm, bn, tx, ty, vec, cfg.enable_loop_unroll, tx * ty // 32, 1, opts=opts)
    while shared_bytes(choice, problem.d, problem.dtype) > target.smem_per_block and choice.ty > 4:
        # targets of ~100 KB per block: half the rows and keys per tile (float64 at D = 128: 32 x 16)
        choice = AttentionChoice("simt", choice.bm // 2, choice.bn // 2, choice.tx // 2, choice.ty // 2, vec,
                                 cfg.enable_loop_unroll, choice.tx * choice.ty // 128, 1, opts=opts)
    return [choice]


def shared_bytes(choice, d: int, dtype: str) -> int:
    """Dynamic shared memory of a launch (the templates' Smem / two Stage structs)."""
    if choice.kind == "mma":
        dp = cdiv(d, 8) * 8
        return 2 * choice.bn * ((dp + 4) + (dp + 8)) * 4
    if choice.kind == "mma16":   # stages of k and v rows of DP + 8 elements
        return choice.stages * 2 * choice.bn * (cdiv(d, 16) * 16 + 8) * 2
    dk, dv = cdiv(d, 4) * 4 + 4, cdiv(d, 4 * choice.tx) * 4 * choice.tx
    items = choice.bm * dk + choice.bn * dk + choice.bn * dv + choice.bn * (choice.bm + 4)
    return items * np.dtype(dtype).itemsize


def plan(problem: AttentionProblem, choice, target: Target) -> Plan:
    """q, k, v, out = operands 0..3; one launch, a block per (query tile, head, batch)."""
    dtype = np.dtype(problem.dtype)
    q_tiles = cdiv(problem.lq, choice.bm)
    blocks = q_tiles * problem.heads * problem.batch
    if blocks >= 2 ** 31:
        raise ValueError(f"attention: {problem.batch} x {problem.heads} x {problem.lq} query rows need too many "
                         "blocks: split the batch")
    params = {"kind": choice.kind, "scalar_t": scalar_t(dtype), "unroll": choice.unroll, "D": problem.d,
              "BM": choice.bm, "BN": choice.bn, "VEC": choice.vec, "causal": int(problem.causal)}
    c = problem.scale * LOG2E
    if choice.kind == "mma16" and c == 0.0:   # the kernel scales raw scores by |c| (-inf · 0 is NaN): 2^-100 keeps
        c = 2.0 ** -100                       # every exponent 0 (|s| < 2^40) and masked keys at -inf
    c = scalar(compute_dtype(dtype), c)
    if choice.kind == "mma16":
        params.update(elem_t=storage_t(dtype), WARPS=choice.warps, STAGES=choice.stages)
        threads, units = choice.warps * 32, f"{_UNITS16[dtype.name]} tensor cores (mma.sync m16n8k16)"
    elif choice.kind == "simt":
        threads, units = choice.tx * choice.ty, f"{'FP32' if dtype == np.float32 else 'FP64'} cores (SIMT)"
        # float32 4 x 4 scores at 256 threads: two blocks per SM (<= 128 registers, no spills; unbounded, ptxas
        # takes 128 or more anyway); 8 x 4 scores need ~200 registers: one block
        small = dtype == np.float32 and threads == 256 and choice.bm * choice.bn <= 16 * threads
        params.update(TX=choice.tx, TY=choice.ty, MINB=2 if small else 1)
    else:
        threads, units = choice.bm * 2, "TF32 tensor cores (mma.sync)"
    name = (f"attention_{dtype_tag(dtype)}_d{problem.d}{'_causal' if problem.causal else ''}_"
            f"{choice.label}")
    spec = pipeline.make_spec(TEMPLATE, f"attention_{choice.kind}", name, params, choice.opts)
    strides = tuple(i64(s) for operand in problem.strides for s in operand)
    args = (ptr(0), ptr(1), ptr(2), ptr(3), i32(problem.heads), i32(problem.lq), i32(problem.lk), i32(q_tiles),
            *strides, c)
    launch = KernelLaunch(spec, (blocks,), (threads,), args, shared=shared_bytes(choice, problem.d, problem.dtype),
                          units=units, max_carveout=True)
    return Plan((launch,), ("q", "k", "v", "out"), choice=choice.label)


def contiguous(dtype: str, batch: int, lq: int, lk: int, d: int, causal: bool = False,
               scale: float | None = None, aligned: bool = True) -> AttentionProblem:
    """The problem on contiguous [batch, L, d] operands (heads = 1); scale None: 1 / sqrt(d)."""
    sq, sk = (lq * d, 0, d), (lk * d, 0, d)
    return AttentionProblem(dtype, batch, 1, lq, lk, d, 1.0 / math.sqrt(d) if scale is None else scale, causal,
                            (sq, sk, sk, sq), aligned)


def problems() -> list[AttentionProblem]:
    """BERT-base's attention (96 heads of 512 x 64), causal, head dims 128 / 40 / 7 (unaligned), Lq != Lk, every
    dtype."""
    out = []
    for dt in DTYPES:
        out += [contiguous(dt, 96, 512, 512, 64), contiguous(dt, 96, 512, 512, 64, causal=True),
                contiguous(dt, 16, 256, 256, 128), contiguous(dt, 8, 33, 257, 40), contiguous(dt, 4, 7, 7, 7, False,
                                                                                           None, False)]
    return out


FAMILY = Family("attention", choices, plan, problems)
