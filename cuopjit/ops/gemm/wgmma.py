"""The Hopper GEMM on tensor cores (templates/gemm/gemm_wgmma.cu.jinja): float32 as wgmma TF32 or 3xTF32, float16 /
bfloat16 as wgmma f16 / bf16 (float32 sums, twice TF32's rate, k-tiles of 64 elements: 128 bytes as TF32's 32).

Operands come in by TMA (tensor maps built on the device: the plan is fixed, the pointers are not)
through a multi-stage mbarrier pipeline; a producer warpgroup feeds 1 or 2 consumer warpgroups (16-bit: up to 3);
the grid is persistent (one block per SM; two with one consumer warpgroup) and walks its tiles in
L2-friendly bands; `cluster` 2 pairs blocks in a thread-block cluster that share the Q tile (each loads
half of it and multicasts it to both: L2 reads Q once per pair), a tuning candidate only: on the H100 it
ran 0-2.4% slower than cluster 1 at 4096³, 8192³ and 4096²x1000, the same at 1000³ (NOTES.md "10 — wgmma
clusters"). A batched problem (GemmProblem.batch > 1) is one launch: the tensor maps take the
batch as a third dimension (a broadcast operand, stride 0, has extent 1 there) and the blocks walk
the entries one after another.

The wgmma product is D = P @ Q^T with Q K-major; `layout` casts the GEMM onto it:
  A @ B^T (B stored N x K): P = A, Q = B, both K-major (P straight from shared memory);
  A @ B   (B stored K x N): P = B^T through registers (MN-major), Q = A, D = C^T;
  A^T @ B^T:                P = A^T through registers, Q = B.
A^T @ B (both operands MN-major) has no K-major operand for Q: gemm_kernels keeps it on mma.sync.
16-bit operands: wgmma reads either MN-major from shared memory (its transpose bits), so P = A and Q = B in every
layout (D = C); an MN-major Q (B stored K x N) takes tile widths and instruction N in whole 64-element boxes.

How JITConfig reaches this kernel: tile_size is the N of each wgmma instruction (16, 32, 64, 128;
0 = the tile's width); the tile's width QN (up to 256) is the heuristic's, at least that, made of
QN / N instructions side by side (a 64 x 32 tile would read 196 MB from L2 at 1000³, more than L2
delivers in cuBLAS's time); block_size 256 runs one consumer warpgroup (64-row tiles, two blocks
per SM), 0 two (128-row tiles);
precision "3xtf32" runs three products per k-step on TF32 hi + lo parts of each operand (float32-grade error):
where TF32's TMA reads the operands (aligned, not A^T @ B), split in the kernel (`inreg`: P's fragments in
registers, Q's tile in shared memory by the producer's idle warps; no copies, the operands read once), else first
split into K-major copies (tf32x3.py; every layout, A^T @ B and unaligned operands included);
enable_loop_unroll unrolls the TMA box loop (MN-major P) and the split kernel's loop (the k-step and
epilogue loops index register arrays and are always unrolled); the other switches name SIMT/mma.sync code paths
(coalescing, padding) that TMA and the swizzled layout replace. The launch plan: wgmma_plan.py.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...build import pipeline
from ...target import Target
from . import wgmma_tiles
from .. import epilogue
from ..base import cdiv

TEMPLATE = "gemm/gemm_wgmma.cu.jinja"
BK = 32                              # float32's k-tile; 16-bit types: 64 (bk())
HALVES = {"float16": ("half_t", "f16"), "bfloat16": ("bf16_t", "bf16")}   # storage type, kernel-name tag
MN_BOX = 64                          # 16-bit MN-major Q: tile widths and instruction N in multiples of this
WIDTHS = (256, 128, 64, 32, 16)      # the instruction N a config's tile_size names
MAX_WIDTH = 256                      # tile widths QN and instruction N: multiples of 8 up to this (m64nNk8)
MAX_STAGES = 6
SPLIT_MAX = 128                      # widest 3xTF32 tile: a k-tile's sum and the running total in 128 registers
SPLIT_SIDE = 200                     # 3xTF32 is routed here from M N >= SPLIT_SIDE (M + N): the split moves
                                     # 12 (M + N) K bytes against 2 M N K flops (33 x 4097 x 1000: 0.56x SGEMM, SIMT 0.67x)
INREG_SIDE = 48                      # the same for the split in the kernel (no copies): only 64-row tiles' padding
                                     # is lost (P @ V of attention, 512 x 64 per entry: 57, on wgmma)
COPY_SIDE = 1024                     # 3xTF32 takes the copies from M N >= COPY_SIDE (M + N) where both run: their
                                     # traffic is then small beside the math, and their SS k-loop has no fragment
                                     # loads and splits (H100: 4096^3 1.14 vs 1.50 ms in the kernel, QKV 148 vs 176 us;
                                     # out-proj 4096 x 768 x 768 67 vs 64, attention Q @ K^T 104 vs 63 us)
CLUSTERS = (1, 2)                    # blocks per thread-block cluster (2: the Q tile multicast to a pair)
MAP_BYTES = 256                      # two 128-byte tensor maps (P, Q) per block in the workspace; 3xTF32: two pairs
UNITS = {False: "TF32 tensor cores (wgmma)", True: "TF32 tensor cores, 3 products (wgmma 3xTF32)",
         "float16": "FP16 tensor cores (wgmma)", "bfloat16": "BF16 tensor cores (wgmma)"}


def bk(dtype: str) -> int:
    """Elements of a k-tile: one 128-byte swizzled row (32 float32, 64 float16 / bfloat16)."""
    return 64 if dtype in HALVES else BK


class Warpgroups:
    """The block of a wgmma kernel: one producer warpgroup and `consumers` consumer warpgroups of 64 rows each."""
    consumers: int

    @property
    def pm(self) -> int:
        return 64 * self.consumers

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)


@dataclass(frozen=True)
class WgmmaChoice(Warpgroups):
    """One build of the wgmma kernel: consumer warpgroups, tile width qn, stages, tile-order band, precision;
    `ni`: the N of each wgmma instruction (0: qn, one instruction per k-step); `per_sm`: blocks per SM
    (2 only with one consumer: two tiles in flight per SM); `cluster`: blocks per thread-block cluster (2: neighbouring
    P-tiles share their Q tile through TMA multicast); `inreg`: 3xTF32 split in the kernel (no copies; TF32's layouts)."""
    consumers: int
    qn: int
    stages: int
    group: int = 8
    split: bool = False
    unroll: bool = True
    opts: pipeline.CompileOpts = pipeline.DEFAULT_OPTS
    per_sm: int = 1
    ni: int = 0
    cluster: int = 1
    bk: int = BK
    inreg: bool = False

    @property
    def copies(self) -> bool:
        """3xTF32 on split copies of both operands (P = A, K-major, SS), not split in the kernel."""
        return self.split and not self.inreg

    @property
    def instr_n(self) -> int:
        return self.ni or self.qn

    @property
    def label(self) -> str:
        return (f"wgmma_t{self.pm}x{self.qn}x{self.bk}"
                + (f"_i64x{self.ni}x{self.bk}" if self.instr_n != self.qn else "")
                + f"_s{self.stages}_g{self.group}" + ("_3xtf32" if self.split else "") + ("r" if self.inreg else "")
                + (f"_b{self.per_sm}" if self.per_sm > 1 else "") + (f"_c{self.cluster}" if self.cluster > 1 else "")
                + ("" if self.unroll else "_nounroll"))


def layout(trans_a: bool, trans_b: bool, dtype: str = "float32") -> tuple[bool, bool] | None:
    """(P is A, P is K-major) for this transpose pair, or None when no operand can be Q (A^T @ B); 16-bit: P = A."""
    if dtype in HALVES:
        return True, not trans_a
    if not trans_a and trans_b:
        return True, True
    if not trans_a and not trans_b:
        return False, False
    if trans_a and trans_b:
        return True, False
    return None


def why_not(problem, target: Target, split: bool = False) -> str | None:
    """Why this problem cannot run on the wgmma kernel (None: it can); `split`: as 3xTF32, whose operands are
    prepared K-major, so every transpose layout runs."""
    if problem.dtype != "float32" and (problem.dtype not in HALVES or split):
        return "wgmma runs float32 (TF32, 3xTF32), float16 and bfloat16"
    if target.capability != 90:
        return f"wgmma needs an sm_90 GPU, not {target.arch}"
    # 3xTF32 reads A and B through the split (any alignment) and writes C pair by pair only where aligned
    if not problem.aligned and not split:
        return "TMA needs 16-byte aligned operands and leading dimensions"
    per16 = 8 if problem.dtype in HALVES else 4
    if problem.batch > 1 and not split and any(s % per16 for s in (problem.stride_a, problem.stride_b, problem.stride_c)):
        return "TMA needs batch strides that are multiples of 16 bytes"
    if problem.batch * cdiv(problem.m, 16) * cdiv(problem.n, 16) >= 2 ** 31:
        return "more than 2^31 tiles"
    if problem.k == 0:
        return "K = 0 (C = beta * C) runs on the mma.sync kernel"
    if split and problem.batch > 65535:
        return "3xTF32 splits at most 65535 batch entries (one grid z each)"
    if layout(problem.trans_a, problem.trans_b, problem.dtype) is None and not split:
        return "A^T @ B has no K-major operand for wgmma's B"
    return None


def inreg_ok(problem) -> bool:
    """Whether 3xTF32 can split this problem in the kernel: float32 operands TF32's TMA reads where they lie
    (16-byte aligned rows and batch strides, a K-major operand for Q)."""
    return (problem.dtype == "float32" and problem.aligned and layout(problem.trans_a, problem.trans_b) is not None
            and (problem.batch == 1 or not any(s % 4 for s in (problem.stride_a, problem.stride_b, problem.stride_c))))


def narrow(problem) -> bool:
    """A product too narrow for 3xTF32 to pay: splitting its operands (copies: SPLIT_SIDE; in the kernel:
    INREG_SIDE) costs more than the tensor cores save over the exact SIMT kernel (gemm_kernels routes it there;
    a plan can still be built)."""
    side = INREG_SIDE if inreg_ok(problem) else SPLIT_SIDE
    return problem.m * problem.n < side * (problem.m + problem.n)


def staging_bytes(consumers: int, qn: int) -> int:
    """A user epilogue's output staging past the maps: 16 x (min(32, qn) + 8) floats per consumer warp
    (templates/common/wgmma_store.cuh.jinja)."""
    return 4 * consumers * 16 * (min(32, qn) + 8) * 4


def staging(problem, split: bool = False) -> bool:
    """Whether the problem's user epilogue stores through shared memory (wgmma_store.cuh.jinja's staged runs): all
    but a float32 C written row by row (P = A), which goes straight from the accumulators (store_regs; its
    output-shaped operands and c loaded into registers at the output's own index)."""
    if not problem.epilogue:
        return False
    p_is_a = split or layout(problem.trans_a, problem.trans_b, problem.dtype)[0]
    return not p_is_a or problem.dtype in HALVES


def epilogue_bytes(problem, consumers: int, qn: int, split: bool = False) -> int:
    """Shared memory past the maps a user epilogue takes: the staging of its runs, or (store_regs) two copies per
    consumer warpgroup of its tile's per-column (qn) and per-row (64) operand values, loaded during the k-loop; the
    16-bit default store's window of 16 rows of 128 bytes per consumer warp (gemm_wgmma_epilogue.cuh.jinja)."""
    if problem is None:
        return 0
    if not problem.epilogue:
        return consumers * 4 * 2048 if problem.dtype in HALVES and not split else 0
    if staging(problem, split):
        return staging_bytes(consumers, qn)
    kinds = epilogue.kinds_of(problem.epilogue)
    return 2 * consumers * (kinds.count("per_column") * qn + kinds.count("per_row") * 64) * 4


def smem_bytes(consumers: int, qn: int, stages: int, split: bool, extra: int = 0, inreg: bool = False) -> int:
    """Dynamic shared memory: stages of (P, Q) k-tiles (3xTF32: hi and lo of each; `inreg`: P as it is, Q's hi and
    lo), barriers, maps, alignment; `extra`: a user epilogue's bytes (epilogue_bytes)."""
    parts = 2 if split and not inreg else 1
    tile = (parts * 64 * consumers + (2 if split else 1) * qn) * BK * 4
    return stages * tile + (24 if inreg else 16) * stages + 2 * parts * 128 + 128 + 1024 + extra


def smem_limit(target: Target, per_sm: int) -> int:
    """Shared memory one block may take when `per_sm` blocks share an SM (1 KB per block is the system's)."""
    return target.smem_per_block if per_sm == 1 else target.smem_per_sm // per_sm - 1024


def stages_for(consumers: int, qn: int, split: bool, target: Target, per_sm: int = 1, extra: int = 0,
               inreg: bool = False) -> int:
    """As many stages as fit in one block's shared memory (at most MAX_STAGES), beside a user epilogue's `extra`
    bytes."""
    fit = [s for s in range(2, MAX_STAGES + 1)
           if smem_bytes(consumers, qn, s, split, extra, inreg) <= smem_limit(target, per_sm)]
    if not fit:
        raise ValueError(f"GEMM wgmma tile {64 * consumers}x{qn} does not fit {target.arch}'s shared memory: "
                         "choose a smaller tile_size")
    return fit[-1]


def tiles(problem, consumers: int, qn: int, split: bool = False, cluster: int = 1) -> int:
    """Block tiles of the whole launch (every batch entry) with 64 * consumers x qn tiles; with `cluster` > 1,
    cluster-sized runs of P-tiles (one Q-tile each)."""
    p_is_a = split or layout(problem.trans_a, problem.trans_b, problem.dtype)[0]
    rows_p, rows_q = (problem.m, problem.n) if p_is_a else (problem.n, problem.m)
    return cdiv(cdiv(rows_p, 64 * consumers), cluster) * cdiv(rows_q, qn) * problem.batch


def units(problem, choice: WgmmaChoice) -> int:
    """Work units of the persistent grid: cluster-sized runs of P-tiles (one Q-tile), over every batch entry."""
    return tiles(problem, choice.consumers, choice.qn, choice.copies, choice.cluster)


def choices(problem, cfg, target: Target, split: bool) -> list[WgmmaChoice]:
    """tile_size / block_size as the config names them, or the heuristic's pick then the other candidates.

    The pick: the build the cost model of wgmma_tiles.py times fastest among those the config allows (block_size
    256: one consumer; tile_size is each instruction's N, so tile widths that are multiples of it)."""
    if cfg.tile_size not in (0, *WIDTHS[1:]):
        raise ValueError(f"GEMM tile_size={cfg.tile_size} is not allowed for the wgmma kernel: choose 0 (auto) or "
                         f"one of {', '.join(map(str, WIDTHS[1:]))}")
    if cfg.block_size not in (0, 256):
        raise ValueError(f"GEMM block_size={cfg.block_size} cannot run the wgmma kernel (a producer warpgroup and "
                         "1 or 2 consumer warpgroups): choose block_size 256 (one consumer) or 0 (two)")
    consumers = 1 if cfg.block_size == 256 else 2
    half = problem.dtype in HALVES
    pool = (wgmma_tiles.SPLIT_BUILDS if split else wgmma_tiles.HALF_BUILDS if half and not problem.epilogue
            else wgmma_tiles.TF32_BUILDS)
    box = MN_BOX if half and not problem.trans_b else 8          # an MN-major Q: whole 64-element boxes
    pairs = [(c, q) for c, q in pool if (not cfg.block_size or c == consumers) and q % max(box, cfg.tile_size) == 0
             and (not cfg.tile_size or cfg.tile_size % box == 0)]
    if not pairs:
        raise ValueError(f"GEMM tile_size={cfg.tile_size} cannot run the {problem.dtype} wgmma kernel with B stored "
                         f"K x N (instructions of whole {box}-element boxes): choose tile_size 0, 64 or 128")
    switches = {"split": split, "unroll": cfg.enable_loop_unroll, "opts": pipeline.compile_opts(cfg),
                "bk": bk(problem.dtype)}
    kinds = (False,)
    if split and inreg_ok(problem):     # the split copies pay on wide products only (COPY_SIDE)
        kinds = (False, True) if problem.m * problem.n >= COPY_SIDE * (problem.m + problem.n) else (True, False)
    found = []
    for i, kind in enumerate(kinds):    # 3xTF32: split in the kernel where it can, the copies as candidates
        made = [build(c, q, target, problem=problem, ni=cfg.tile_size if cfg.tile_size < q else 0, inreg=kind,
                      **switches) for c, q in pairs]
        order = wgmma_tiles.ranked([(b.consumers, b.qn, b.per_sm) for b in made],
                                   lambda c, q: tiles(problem, c, q, split and not kind),
                                   cdiv(problem.k, bk(problem.dtype)), split, target.sm_count, 2 if half else 4)
        made = sorted(made, key=lambda b: order.index((b.consumers, b.qn, b.per_sm)))
        # a named shape: its pick, and the variants below as candidates; the other 3xTF32 kind: its pick
        found += made[:1] if cfg.tile_size or cfg.block_size or i else made
    head = found[0]
    if head.per_sm == 2:    # one block per SM is a tuning candidate too
        extra = epilogue_bytes(problem, head.consumers, head.qn, head.copies)
        found.append(dataclasses.replace(head, per_sm=1, stages=stages_for(head.consumers, head.qn, split, target,
                                                                           extra=extra, inreg=head.inreg)))
    if target.clusters and not half and not head.inreg:   # the Q tile multicast over a pair of blocks (no gain)
        found.append(dataclasses.replace(head, cluster=2))
    if head.inreg and head.consumers == 1 and head.qn <= 64:     # three blocks per SM: more k-loops in flight
        found.append(dataclasses.replace(head, per_sm=3, stages=stages_for(1, head.qn, True, target, 3, inreg=True)))
    return found


def build(consumers: int, qn: int, target: Target, split: bool, problem=None, inreg: bool = False,
          **switches) -> WgmmaChoice:
    """The heuristic's build of a (consumers, qn) tile: two blocks per SM with one consumer up to 128 wide, TF32 or
    3xTF32 split in the kernel (the whole kernel then fits the 128-register cap of two 256-thread blocks), as many
    stages as fit."""
    inreg = split and inreg
    per_sm = 2 if consumers == 1 and qn <= 128 and (inreg or not split) else 1
    stages = stages_for(consumers, qn, split, target, per_sm,
                        epilogue_bytes(problem, consumers, qn, split and not inreg), inreg)
    return WgmmaChoice(consumers, qn, stages, split=split, per_sm=per_sm, inreg=inreg, **switches)
