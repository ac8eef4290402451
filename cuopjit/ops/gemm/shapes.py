"""GEMM kernel shapes: the block tiles and thread layouts templates/gemm/gemm.cu.jinja can build.

A shape is the block tile BM x BN x BK and how a block's threads cover it: the SIMT kernel's
thread tile TM x TN (each thread keeps TM x TN outputs in registers) or the mma.sync kernel's
warp layout WARPS_M x WARPS_N, times WARPS_K k-groups when a block has more warps than m16n8
warp tiles. The hand-tuned shapes (measured on the H100) come first; any other (tile, threads)
pair is derived by rule and checked by `why_not`, which states the templates' own constraints
(their static_asserts) for a pipeline depth: stages 1 (gemm.cu.jinja, static shared memory) or
2..4 (cp.async, dynamic shared memory: gemm_async.cu.jinja for mma.sync, gemm_simt_async.cu.jinja for float32
SIMT; `default_stages` is the heuristic).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

TILES = (16, 32, 64, 128)              # tile_size: BM = BN
AUTO_TILES = (128, 64, 32)             # what tile_size=0 picks from (the largest that fills every SM)
BLOCKS = (32, 64, 128, 256, 512, 1024)
STATIC_SMEM = 48 * 1024                # static __shared__ limit of one block
MAX_WARPS_K = 4                        # more k-groups would need BK > 32 for a handful of outputs
# Registers: the most accumulators per thread a derived shape may hold (8 x 8 float, 8 x 4 double;
# a double at 1024 threads, 64 registers each, at most 8: 16 spill with NVRTC 13 on sm_80 and sm_90).
_MAX_ACC = {"float32": 64, "float64": 32}
_MAX_ACC_1024 = {"float32": 64, "float64": 8}


def _max_acc(dtype: str, threads: int) -> int:
    return _MAX_ACC_1024[dtype] if threads > 512 else _MAX_ACC[dtype]


def _derived_bk(dtype: str, tile: int) -> int:
    """BK of a derived SIMT shape: 16 float, 8 double (4 on 128-tiles, as the tuned 128/256 needs)."""
    return 16 if dtype == "float32" else 8 if tile < 128 else 4


@dataclass(frozen=True)
class Shape:
    """Block tile BM x BN x BK; SIMT: thread tile TM x TN; mma: warps WARPS_M x WARPS_N x WARPS_K."""
    mma: bool
    bm: int
    bn: int
    bk: int
    tm: int        # SIMT: thread tile rows; mma: WARPS_M
    tn: int        # SIMT: thread tile columns; mma: WARPS_N
    wk: int = 1    # mma: WARPS_K (k-groups); always 1 for SIMT

    @property
    def threads(self) -> int:
        if self.mma:
            return self.tm * self.tn * self.wk * 32
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def layout(self) -> str:
        """'r8x8' (SIMT thread tile) or 'w2x4' / 'w1x2k4' (warps), as kernel names spell it."""
        if self.mma:
            return f"w{self.tm}x{self.tn}" + (f"k{self.wk}" if self.wk > 1 else "")
        return f"r{self.tm}x{self.tn}"

    @property
    def label(self) -> str:
        return f"t{self.bm}x{self.bn}x{self.bk}_{self.layout}"


def _simt(bm: int, threads: int, tm: int, tn: int, bk: int) -> Shape:
    """A square SIMT shape; the table spells its block size out, checked here."""
    assert (bm // tm) * (bm // tn) == threads
    return Shape(False, bm, bm, bk, tm, tn)


# Hand-tuned shapes per (dtype, mma); the first of a tile is that tile's default block size.
TUNED: dict[tuple[str, bool], tuple[Shape, ...]] = {
    ("float32", False): (
        _simt(128, 256, 8, 8, 16),
        _simt(64, 64, 8, 8, 8),
        _simt(64, 128, 8, 4, 8),
        _simt(64, 256, 4, 4, 16),
        _simt(32, 64, 4, 4, 8),
    ),
    ("float64", False): (  # no 64/64 (8x8 doubles in 64 threads spill); BK 4 keeps 128/256 under 255 registers
        _simt(128, 256, 8, 8, 4),
        _simt(64, 256, 4, 4, 8),
        _simt(64, 128, 8, 4, 8),
        _simt(32, 64, 4, 4, 8),
    ),
    # Tensor-core (mma.sync) kernels: float32 as TF32 m16n8k8, float64 as DMMA m16n8k8 (4x m8n8k4 before sm_90).
    ("float32", True): (Shape(True, 128, 128, 16, 2, 4), Shape(True, 64, 64, 16, 2, 2), Shape(True, 32, 32, 16, 2, 1)),
    ("float64", True): (Shape(True, 128, 128, 16, 2, 4), Shape(True, 64, 64, 16, 2, 2), Shape(True, 32, 32, 16, 2, 1)),
}
# float32 SIMT shapes the heuristic takes when tile_size and block_size are left to it (gemm_kernels.auto_simt;
# H100 sweep in benchmarks/NOTES.md "10 — exact fp32: odd shapes"), largest first: 128 x 128 at 256 threads,
# the 8 x 8-per-thread halves at 128 threads (128 x 64 for M >= N, else 64 x 128), then the tuned 64 and 32 tiles.
AUTO_SIMT = (_simt(128, 256, 8, 8, 16), Shape(False, 128, 64, 16, 8, 8), Shape(False, 64, 128, 16, 8, 8),
             _simt(64, 64, 8, 8, 8), _simt(32, 64, 4, 4, 8))
# Few rows (M < 64) where 16-row tiles pad the product less than 32 x 32 ones (M = 33: 48 rows computed, not 64);
# 128 columns keep 32 outputs per thread at 64 threads (33 x 4097 x 1000: 11.1-11.3 TFLOP/s in 7 K slices against
# 8.6 for 32 x 32 tiles in 3).
SKINNY_SIMT = Shape(False, 16, 128, 16, 4, 8)
# float32 SIMT on the cp.async pipeline (gemm_simt_async.cu.jinja, 2 stages): BK 32 costs it no staging registers.
# An auto-tuning candidate where both operands are stored k-major and aligned (A^T @ B: 16-byte copies only): H100
# 4096^3 46.7 TFLOP/s against 45.2 for the one-stage kernel; where a copy transposes (A @ B, B^T) it ran 10-30% slower
# (benchmarks/NOTES.md "10 — SIMT on a cp.async pipeline").
ASYNC_SIMT = Shape(False, 128, 128, 32, 8, 8)
# float64 DMMA with the tile left to the heuristic where it would take 128 x 128, aligned operands (which run
# the both-transposed "swap" layout and its pipelined k-loop): 128 x 64 blocks, two per SM, cuBLAS's own DGEMM
# tile (H100, TFLOP/s against 128 x 128, DGEMM v6: 4096^3 50.2 / 50.0, 2048^3 51.3 / 52.1, 4096^2 x 1000
# 48.3 / 48.1, within the spread; 1000^3 runs 64 x 64). Not a tile_size: tile_size=128 keeps BM = BN = 128.
WIDE = {("float64", True): Shape(True, 128, 64, 16, 2, 2)}
# Auto-tuning candidates beyond TUNED and WIDE (no tile_size / block_size maps to them): float64 BK 32
# (half the barriers, but the one-buffer k-loop: 42.9 TFLOP/s at 4096^3 against 48.1 for BK 16 pipelined, one run).
CANDIDATES = {("float64", True): (Shape(True, 128, 128, 32, 2, 4),)}
# Default pipeline depth per kind: 1 is gemm.cu.jinja (registers -> two shared buffers); 2..4 is
# gemm_async.cu.jinja (mma.sync) or gemm_simt_async.cu.jinja (float32 SIMT) on cp.async stages. A shape the
# deeper pipeline cannot build keeps 1.
STAGES = {("float32", False): 1, ("float64", False): 1, ("float32", True): 1, ("float64", True): 4}
MAX_STAGES = 4
# Default block tile order per kind: "row" (row-major) or "grouped" (bands of 8 tile rows walked by column).
RASTER = {("float32", False): "row", ("float64", False): "row", ("float32", True): "row", ("float64", True): "row"}
ASYNC_SMEM = 99 * 1024                 # dynamic shared memory every supported target gives one block
MAX_ASYNC_SMEM = 227 * 1024            # the most any target gives one block (sm_90, sm_100)
# Default block size of a tile no hand-tuned shape has: the textbook 16 x 16 threads, one output
# each (SIMT), or two warps with one m16n8 tile each (mma).
_NEW_TILE_THREADS = {False: 256, True: 64}


def default_stages(dtype: str, s: Shape, smem_per_block: int = ASYNC_SMEM) -> int:
    """The pipeline depth `s` runs with: the kind's default where the cp.async kernel builds it in
    `smem_per_block` bytes (fewer stages where only those fit), else 1."""
    for stages in range(STAGES[dtype, s.mma], 1, -1):
        if why_not(s, dtype, stages) is None and async_smem(s, dtype, stages) <= smem_per_block:
            return stages
    return 1


def default_threads(dtype: str, mma: bool, tile: int) -> int:
    """The block size tile_size=`tile` runs with when block_size is 0."""
    return next((s.threads for s in TUNED[dtype, mma] if s.bm == tile), _NEW_TILE_THREADS[mma])


def shape(dtype: str, mma: bool, tile: int, threads: int) -> Shape | None:
    """The shape of a tile x tile block tile run by `threads` threads, or None where none can be built."""
    for s in TUNED[dtype, mma]:
        if s.bm == tile and s.threads == threads:
            return s
    derived = _derive_mma(dtype, tile, threads) if mma else _derive_simt(dtype, tile, threads)
    return derived if derived is not None and why_not(derived, dtype, default_stages(dtype, derived)) is None else None


def valid_threads(dtype: str, mma: bool, tile: int) -> list[int]:
    """The block sizes a tile x tile block tile can run with."""
    return [t for t in BLOCKS if shape(dtype, mma, tile, t) is not None]


def _derive_simt(dtype: str, tile: int, threads: int) -> Shape | None:
    """TM x TN = tile^2 / threads outputs per thread, as square as the warp arrangement allows."""
    outputs, rest = divmod(tile * tile, threads)
    if rest or not 1 <= outputs <= _max_acc(dtype, threads):
        return None
    pairs = [(tm, outputs // tm) for tm in (1, 2, 4, 8) if outputs % tm == 0 and outputs // tm in (1, 2, 4, 8)]
    for tm, tn in sorted(pairs, key=lambda p: (abs(math.log2(p[0] / p[1])), -p[0])):  # squarest, then taller
        candidate = Shape(False, tile, tile, _derived_bk(dtype, tile), tm, tn)
        if why_not(candidate, dtype) is None:
            return candidate
    return None


def _derive_mma(dtype: str, tile: int, threads: int) -> Shape | None:
    """Warps over the tile's m16n8 warp tiles (squarest warp tile first); extra warps become k-groups."""
    warps, tiles_m, tiles_n = threads // 32, tile // 16, tile // 8
    if warps <= tiles_m * tiles_n:
        pairs = [(wm, warps // wm) for wm in (1, 2, 4, 8, 16, 32)
                 if warps % wm == 0 and wm <= tiles_m and warps // wm <= tiles_n]
        if not pairs:
            return None
        wm, wn = min(pairs, key=lambda p: (abs(math.log2(p[1] / p[0])), p[0]))  # squarest, then taller
        wk = 1
    else:
        wm, wn, wk = tiles_m, tiles_n, warps // (tiles_m * tiles_n)
        if wk > MAX_WARPS_K:
            return None
    if (tile // wm // 16) * (tile // wn // 8) * 4 > _max_acc(dtype, threads):
        return None
    for bk in dict.fromkeys((max(16, 8 * wk), 8 * wk, 8)):   # BK 16, else one k-step per k-group, else 8
        candidate = Shape(True, tile, tile, bk, wm, wn, wk)
        if why_not(candidate, dtype, default_stages(dtype, candidate)) is None:
            return candidate
    return None


def static_smem(s: Shape, dtype: str, pad: int) -> int:
    """Bytes of static shared memory: double-buffered A and B tiles (+ the k-group reduction buffer)."""
    size = np.dtype(dtype).itemsize
    tiles = 2 * s.bk * (s.bm + pad) + 2 * s.bk * (s.bn + pad)
    return size * (tiles + (s.bm * s.bn if s.mma and s.wk > 1 else 0))


def async_smem(s: Shape, dtype: str, stages: int) -> int:
    """Bytes of dynamic shared memory of the cp.async kernels: `stages` A and B tiles (16-byte row padding)."""
    r = 16 // np.dtype(dtype).itemsize
    return stages * np.dtype(dtype).itemsize * s.bk * (s.bm + s.bn + 2 * r)


def why_not(s: Shape, dtype: str, stages: int = 1) -> str | None:
    """Why the templates cannot build `s` for `dtype` with a `stages`-deep pipeline (None: they can)."""
    r = 16 // np.dtype(dtype).itemsize
    if stages != 1:
        return _why_not_async(s, dtype, stages, r)
    reason = _why_not_layout(s, r)
    if reason is None and static_smem(s, dtype, 8) > STATIC_SMEM:
        return f"{static_smem(s, dtype, 8)} bytes of shared memory (static shared memory is at most {STATIC_SMEM})"
    return reason


def _why_not_layout(s: Shape, r: int) -> str | None:
    """The one-stage kernel's thread layout (runs of r scalars per thread), shared memory aside."""
    if min(s.bm, s.bn, s.bk, s.tm, s.tn, s.wk) < 1:
        return "every tile and layout extent must be at least 1"
    if s.mma:
        if s.bm % (16 * s.tm) or s.bn % (8 * s.tn):
            return f"WARPS_M x WARPS_N = {s.tm} x {s.tn} does not cover {s.bm} x {s.bn} with m16n8 warp tiles"
        if s.bk % (8 * s.wk):
            return f"BK={s.bk} does not give each of {s.wk} k-groups whole k-steps of 8"
    else:
        if s.wk != 1:
            return "k-groups exist only in the mma.sync kernel"
        if s.tm not in (1, 2, 4, 8) or s.tn not in (1, 2, 4, 8) or s.bm % s.tm or s.bn % s.tn:
            return f"the thread tile {s.tm} x {s.tn} must be 1, 2, 4 or 8 each and divide the block tile"
        if (s.bn // s.tn) % 8 or (s.bm // s.tm) % 4:
            return "warps cover 4 x 8 threads: BN / TN must be a multiple of 8 and BM / TM of 4"
    threads = s.threads
    if threads > 1024 or threads % 32:
        return f"{threads} threads: a block takes whole warps, at most 1024 threads"
    for rows, cols in ((s.bm, s.bk), (s.bk, s.bm), (s.bk, s.bn), (s.bn, s.bk)):
        runs = rows * cols // r
        if cols % r or (runs >= threads and (runs % threads or threads % (cols // r))):
            return f"{threads} threads cannot share out a {rows} x {cols} tile in runs of {r}"
    return None


def _why_not_async(s: Shape, dtype: str, stages: int, r: int) -> str | None:
    """The cp.async kernel's own constraints (its static_asserts); the rest is the common thread layout."""
    if not 2 <= stages <= MAX_STAGES:
        return f"stages={stages}: choose 1 (registers, two buffers) or 2..{MAX_STAGES} (cp.async)"
    if not s.mma:
        return _why_not_simt_async(s, dtype, stages)
    if s.wk != 1:
        return f"stages={stages} has no k-groups: choose stages=1 for {s.wk} k-groups"
    if min(s.bm, s.bn, s.tm, s.tn) < 1 or s.bm % (16 * s.tm) or s.bn % (8 * s.tn):
        return f"WARPS_M x WARPS_N = {s.tm} x {s.tn} does not cover {s.bm} x {s.bn} with m16n8 warp tiles"
    if s.threads > 256:
        return (f"stages={stages} holds a k-step of 16 in fragment registers: at most 256 threads (255 registers "
                f"each), not {s.threads}; choose stages=1")
    if s.bk < 8 * r or s.bk & (s.bk - 1):
        return f"stages={stages} needs BK a power of two of at least {8 * r} ({dtype}: 128-byte k-major rows)"
    for rows, cols in ((s.bm, s.bk), (s.bk, s.bm), (s.bk, s.bn), (s.bn, s.bk)):
        for vec in (1, r):
            per_row = cols // vec
            if s.threads % per_row or rows % (s.threads // per_row):
                return f"{s.threads} threads cannot copy a {rows} x {cols} tile in whole rows of {vec}-scalar copies"
    if (s.bn // s.tn // 8) % 2:
        return f"stages={stages} pairs n8 tiles: the warp tile needs an even number of them (BN / WARPS_N = 16·j)"
    if async_smem(s, dtype, stages) > MAX_ASYNC_SMEM:
        return f"{async_smem(s, dtype, stages)} bytes of shared memory over {stages} stages (at most {MAX_ASYNC_SMEM})"
    return None


def _why_not_simt_async(s: Shape, dtype: str, stages: int) -> str | None:
    """gemm_simt_async.cu.jinja's constraints: float32, the SIMT thread layout, whole 8-deep k blocks, copies
    that share out evenly (k-major rows in 16- or 4-byte copies, transposed 4 x 8 warp chunks)."""
    if dtype != "float32":
        return f"stages={stages} (cp.async) is built for the mma.sync kernels and float32 SIMT: choose stages=1"
    reason = _why_not_layout(s, 4)
    if reason:
        return reason
    threads, warps = s.threads, s.threads // 32
    if s.bk % 8:
        return f"stages={stages} (SIMT) copies k in blocks of 8: BK={s.bk} must be a multiple of 8"
    for cols in (s.bm, s.bn):
        for vec in (1, 4):
            per_row, copies = cols // vec, s.bk * cols // vec
            if copies % threads or (threads % per_row if threads >= per_row else per_row % threads):
                return f"{threads} threads cannot copy a {s.bk} x {cols} tile in rows of {vec}-scalar copies"
        chunks, mb = cols // 4 * (s.bk // 8), cols // 4
        if chunks % warps or (mb % warps if warps <= mb else warps % mb):
            return f"{warps} warps cannot transpose a {cols} x {s.bk} tile in 4 x 8 chunks"
    if async_smem(s, dtype, stages) > MAX_ASYNC_SMEM:
        return f"{async_smem(s, dtype, stages)} bytes of shared memory over {stages} stages (at most {MAX_ASYNC_SMEM})"
    return None
