"""The Hopper float32 GEMM on tensor cores (templates/gemm_wgmma.cu.jinja): wgmma TF32 or 3xTF32.

Operands come in by TMA (tensor maps built on the device: the plan is fixed, the pointers are not)
through a multi-stage mbarrier pipeline; a producer warpgroup feeds 1 or 2 consumer warpgroups;
the grid is persistent (one block per SM) and walks its tiles in L2-friendly bands.

The wgmma product is D = P @ Q^T with Q K-major; `layout` casts the GEMM onto it:
  A @ B^T (B stored N x K): P = A, Q = B, both K-major (P straight from shared memory);
  A @ B   (B stored K x N): P = B^T through registers (MN-major), Q = A, D = C^T;
  A^T @ B^T:                P = A^T through registers, Q = B.
A^T @ B (both operands MN-major) has no K-major operand for Q: gemm_kernels keeps it on mma.sync.

How JITConfig reaches this kernel: tile_size is the wgmma N (QN: 16, 32, 64, 128, or 0 = auto up
to 256); block_size 256 runs one consumer warpgroup (64-row tiles), 0 two (128-row tiles);
precision "3xtf32" splits every operand into big + small TF32 parts (float32-grade error);
enable_loop_unroll unrolls the TMA box loop (MN-major P) and the 3xTF32 split loop (the k-step and
epilogue loops index register arrays and are always unrolled); the other switches name SIMT/mma.sync code paths
(coalescing, padding) that TMA and the swizzled layout replace.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import kernels
from ..plan import KernelLaunch, Plan, i32, ptr, scalar
from ..target import Target
from .base import cdiv

TEMPLATE = "gemm_wgmma.cu.jinja"
BK = 32
WIDTHS = (256, 128, 64, 32, 16)      # wgmma N (QN) the kernel is built with
AUTO = ((2, 256), (2, 128), (2, 64), (1, 64))   # (consumers, QN) the heuristic tries, largest tile first
MAX_STAGES = 6
SPLIT_MAX = 64                       # widest wgmma N of the 3xTF32 kernel
MAP_BYTES = 256                      # two 128-byte tensor maps per block, in the workspace
UNITS = {False: "TF32 tensor cores (wgmma)", True: "TF32 tensor cores, 3 products (wgmma 3xTF32)"}


@dataclass(frozen=True)
class WgmmaChoice:
    """One build of the wgmma kernel: consumer warpgroups, wgmma N, stages, tile-order band, precision."""
    consumers: int
    qn: int
    stages: int
    group: int = 8
    split: bool = False
    unroll: bool = True
    opts: kernels.CompileOpts = kernels.DEFAULT_OPTS

    @property
    def pm(self) -> int:
        return 64 * self.consumers

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    @property
    def label(self) -> str:
        return (f"wgmma_t{self.pm}x{self.qn}x{BK}_s{self.stages}_g{self.group}" + ("_3xtf32" if self.split else "")
                + ("" if self.unroll else "_nounroll"))


def layout(trans_a: bool, trans_b: bool) -> tuple[bool, bool] | None:
    """(P is A, P is K-major) for this transpose pair, or None when no operand can be Q (A^T @ B)."""
    if not trans_a and trans_b:
        return True, True
    if not trans_a and not trans_b:
        return False, False
    if trans_a and trans_b:
        return True, False
    return None


def why_not(problem, target: Target) -> str | None:
    """Why this problem cannot run on the wgmma kernel (None: it can)."""
    if problem.dtype != "float32":
        return "wgmma TF32 is float32 only"
    if target.capability != 90:
        return f"wgmma needs an sm_90 GPU, not {target.arch}"
    if problem.batch != 1:
        return "batched problems run on the mma.sync kernel"
    if not problem.aligned:
        return "TMA needs 16-byte aligned operands and leading dimensions"
    if problem.k == 0:
        return "K = 0 (C = beta * C) runs on the mma.sync kernel"
    if layout(problem.trans_a, problem.trans_b) is None:
        return "A^T @ B has no K-major operand for wgmma's B"
    return None


def smem_bytes(consumers: int, qn: int, stages: int, split: bool) -> int:
    """Dynamic shared memory: stages of (P, Q) k-tiles, 3 small-part buffers (3xTF32), barriers, maps, alignment."""
    q = qn * BK * 4
    return stages * (64 * consumers * BK * 4 + q) + (3 * q if split else 0) + 16 * stages + 2 * 128 + 128 + 1024


def stages_for(consumers: int, qn: int, split: bool, target: Target) -> int:
    """As many stages as fit in one block's shared memory (at most MAX_STAGES)."""
    fit = [s for s in range(2, MAX_STAGES + 1) if smem_bytes(consumers, qn, s, split) <= target.smem_per_block]
    if not fit:
        raise ValueError(f"GEMM wgmma tile {64 * consumers}x{qn} does not fit {target.arch}'s shared memory: "
                         "choose a smaller tile_size")
    return fit[-1]


def tiles(problem, consumers: int, qn: int) -> int:
    p_is_a, _ = layout(problem.trans_a, problem.trans_b)
    rows_p, rows_q = (problem.m, problem.n) if p_is_a else (problem.n, problem.m)
    return cdiv(rows_p, 64 * consumers) * cdiv(rows_q, qn)


def choices(problem, cfg, target: Target, split: bool) -> list[WgmmaChoice]:
    """tile_size / block_size as the config names them, or the heuristic's pick then the other candidates."""
    if cfg.tile_size not in (0, *WIDTHS[1:]):
        raise ValueError(f"GEMM tile_size={cfg.tile_size} is not allowed for the wgmma kernel: choose 0 (auto) or "
                         f"one of {', '.join(map(str, WIDTHS[1:]))}")
    if cfg.block_size not in (0, 256):
        raise ValueError(f"GEMM block_size={cfg.block_size} cannot run the wgmma kernel (a producer warpgroup and "
                         "1 or 2 consumer warpgroups): choose block_size 256 (one consumer) or 0 (two)")
    consumers = 1 if cfg.block_size == 256 else 2
    pairs = [(c, q) for c, q in AUTO if (not cfg.block_size or c == consumers) and (not cfg.tile_size or q == cfg.tile_size)]
    if not pairs:
        pairs = [(consumers, cfg.tile_size or 64)]
    if split:   # three accumulators fit the 168-register cap up to 64 wide
        pairs = [(c, min(q, SPLIT_MAX)) for c, q in pairs]
    pairs = list(dict.fromkeys(pairs))
    first = next((p for p in pairs if tiles(problem, *p) >= target.sm_count), pairs[-1])
    switches = {"split": split, "unroll": cfg.enable_loop_unroll, "opts": kernels.compile_opts(cfg)}
    found = [first] + ([p for p in pairs if p != first] if not cfg.tile_size and not cfg.block_size else [])
    return [WgmmaChoice(c, q, stages_for(c, q, split, target), **switches) for c, q in found]


def plan(problem, choice: WgmmaChoice, target: Target) -> Plan:
    """One persistent launch over A, B, C and a workspace of one pair of tensor maps per block."""
    reason = why_not(problem, target)
    if reason:
        raise ValueError(f"GEMM cannot run on the wgmma kernel: {reason}")
    if choice.split and choice.qn > SPLIT_MAX:
        raise ValueError(f"GEMM 3xTF32 wgmma tiles are at most {SPLIT_MAX} wide (three accumulators in 168 "
                         f"registers), not {choice.qn}: choose tile_size {SPLIT_MAX} or less")
    p_is_a, p_kmajor = layout(problem.trans_a, problem.trans_b)
    params = {
        "scalar_t": "float", "unroll": choice.unroll, "PM": choice.pm, "QN": choice.qn, "STAGES": choice.stages,
        "CONSUMERS": choice.consumers, "GROUP": choice.group, "SPLIT": choice.split, "P_IS_A": p_is_a,
        "P_KMAJOR": p_kmajor, "P_REGS": choice.split or not p_kmajor, "MIN_BLOCKS": 1, "SETMAXNREG": True,
    }
    ops = ("t" if problem.trans_a else "n") + ("t" if problem.trans_b else "n")
    name = f"gemm_f32_{choice.label}_{ops}"
    spec = kernels.make_spec(TEMPLATE, "gemm_wgmma", name, params, choice.opts, arch_specific=True)
    grid = min(tiles(problem, choice.consumers, choice.qn), target.sm_count)
    args = (ptr(0), ptr(1), ptr(2), ptr(3), i32(problem.m), i32(problem.n), i32(problem.k), i32(problem.lda),
            i32(problem.ldb), i32(problem.ldc), scalar("float32", problem.alpha), scalar("float32", problem.beta))
    launch = KernelLaunch(spec, (grid,), (choice.threads,), args,
                          shared=smem_bytes(choice.consumers, choice.qn, choice.stages, choice.split),
                          units=UNITS[choice.split])
    return Plan((launch,), ("a", "b", "c"), workspace=grid * MAP_BYTES, choice=choice.label)
