"""Row geometry shared by Softmax and LayerNorm: how a row of L scalars maps onto threads, blocks, clusters.

How the JITConfig fields change the row kernels (templates/common/rowops.cuh.jinja):

    kernel_type               "auto", "tensor_core": the measured layouts of plan_rows (there is no
                              tensor-core row kernel); "tiled": the explicit layout below even with
                              tile_size and block_size 0; "simple": the register-row kernel only, in
                              one block of up to 1024 threads, split-row past that (as
                              enable_shared_memory_opt=False); "warp_optimized": a row per warp (32
                              threads per row, reductions by shuffles only, as many elements per
                              thread as the row needs, up to 128 float / 64 double), longer rows as
                              "tiled"
    tile_size                 elements each thread holds in registers: 8, 16, 32, 64, 128 (0: 32
                              float / 16 double when an explicit layout is asked for; float64
                              holds at most 64, so 128 runs as 64: see MAX_EPT; float16 and
                              bfloat16 are held as floats, so they take float's layouts with
                              16-byte vectors of 8)
    block_size                threads per block: 32 .. 1024 (0: 256); a row of up to block_size *
                              tile_size elements lives in one block, several short rows share a block
                              (tile_size and block_size both 0 with kernel_type "auto": chosen by row
                              length, see plan_rows)
    enable_memory_coalescing  16-byte vector loads/stores (where pointers and L allow) vs scalar
    enable_loop_unroll        `#pragma unroll` on the register loops (off: `unroll 1`, which puts
                              the row in local memory: a real, slower variant)
    enable_shared_memory_opt  rows longer than one block: the stream kernel (one block per row,
                              the row's head copied into shared memory by cp.async, the rest
                              re-read from L2; rows >= one per SM) or a thread-block cluster
                              sharing partial results through distributed shared memory (targets
                              with clusters; both one HBM read of x), and for LayerNorm rows
                              longer still the resident kernel (see `resident`: L2 re-reads) vs the
                              split-row path through global memory (two kernels, two reads, the
                              partial results in the plan's workspace)
    enable_tensor_core, enable_tma   no such row kernel: ignored
optimization_level and max_registers reach NVRTC.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...target import Target
from ..base import compute_dtype, vector_width
from .. import knobs

MAX_EPT = {4: 128, 8: 64}  # elements per thread a row kernel holds, by regsize: 128 doubles would need 256 registers
MAX_CLUSTER = 8  # the portable cluster size limit
SMEM_STATIC = 1024 + 1536  # the system's reserve per block + block_combine's scratch (at most 2 x 32 x 3 doubles)
STREAM_STEP = 2            # default vectors in flight per thread per step (4 spills at 64 registers)
# Elements per thread of the short-row layout (plan_rows step 1), by storage itemsize. float16 / bfloat16: 32
# (4 vectors of 8: a row of up to 1024 in one warp, no barrier), measured on H100 over 5 shapes x Softmax and
# LayerNorm (benchmarks/mb_half_sweep.py): geomean 2600 GB/s at 8, 2733 at 16, 2752 at 32.
SHORT_EPT = {4: 8, 8: 8, 2: 32}
StreamTable = tuple[tuple[int, int, int, int, bool], ...]


def regsize(dtype: np.dtype) -> int:
    """Bytes of registers an element takes (its compute dtype's size: 4 for float16 / bfloat16, stored in 2)."""
    return compute_dtype(dtype).itemsize


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def l2_per_sm(target: Target) -> int:
    """Bytes of re-read rows per SM that L2 holds: half of L2 over the SMs (H100: 50 MB / 2 / 132 = 194 KB)."""
    return target.l2_bytes // 2 // target.sm_count


@dataclass(frozen=True)
class RowPlan:
    """Layout of one row kernel: kind 'rows' (row in registers of one block or one cluster), 'stream'
    (one block per row, nv = vectors in flight per thread, `stash` vectors kept in shared memory,
    occ // tpr blocks per SM), 'split' or 'resident' (split's chunks, one launch, L2 re-reads)."""
    kind: str
    vec: int      # scalars per vector access
    nv: int       # vectors per thread
    tpr: int      # threads per row (per block)
    rpb: int      # rows per block
    cl: int       # blocks per cluster (1: no cluster)
    chunks: int   # split-row: blocks per row
    occ: int = 1024  # threads per SM that __launch_bounds__ promises (1024: <= 64 registers, 512: <= 128, 256: <= 255)
    stash: int = 0   # stream: vectors of the row's head held in shared memory (a multiple of tpr)
    copy_async: bool = False  # stream: the stash filled by cp.async (in flight during the rest's pass 1)

    @property
    def threads(self) -> int:
        return self.tpr * self.rpb

    def params(self) -> dict:
        out = {"VEC": self.vec, "NV": self.nv, "TPR": self.tpr, "RPB": self.rpb, "CL": self.cl,
               "WPR": max(1, self.tpr // 32), "OCC": self.occ}
        if self.kind == "stream":
            out["ASYNC"] = int(self.copy_async)
        return out

    def stash_bytes(self, dtype: np.dtype) -> int:
        """Dynamic shared memory of a stream kernel."""
        return self.stash * self.vec * np.dtype(dtype).itemsize

    def tag(self) -> str:
        if self.kind == "stream":
            return f"v{self.vec}u{self.nv}t{self.tpr}k{self.occ // self.tpr}" + ("cp" if self.copy_async else "")
        s = f"v{self.vec}n{self.nv}t{self.tpr}r{self.rpb}"
        return s + (f"c{self.cl}" if self.cl > 1 else "")


@dataclass(frozen=True)
class RowChoice:
    """A row kernel's layout, its loop unrolling and compile settings."""
    layout: RowPlan
    unroll: bool = True
    opts: pipeline.CompileOpts = pipeline.DEFAULT_OPTS

    @property
    def label(self) -> str:
        return f"{self.layout.kind}_{self.layout.tag()}" + ("" if self.unroll else "_nounroll")


@dataclass(frozen=True)
class LongRows:
    """A family's measured layout of rows longer than one short block (see plan_rows)."""
    epts: tuple[int, ...] = (32,)   # elements per thread to try, in order
    block: int = 256                 # threads per block before clusters
    stream: StreamTable = ()         # the stream-kernel table of this dtype


def check_config(cfg: ConfigSnapshot) -> None:
    """Raise for a tile_size or block_size no row kernel takes, saying what to choose."""
    knobs.check("row kernels", cfg)


def row_vector(dtype: np.dtype, cfg: ConfigSnapshot, aligned: bool) -> int:
    """16-byte vectors when coalescing is on and pointers/lengths allow it, else 1."""
    return vector_width(dtype) if cfg.enable_memory_coalescing and aligned else 1


def choose(dtype: np.dtype, cfg: ConfigSnapshot, target: Target, rows: int, length: int, aligned: bool,
           long_rows: LongRows) -> RowChoice:
    """The row kernel `cfg` names for `rows` rows of `length` scalars on `target` (raises for bad fields)."""
    check_config(cfg)
    layout = plan_rows(dtype, cfg, target, rows, length, row_vector(dtype, cfg, aligned), long_rows)
    return RowChoice(layout, cfg.enable_loop_unroll, pipeline.compile_opts(cfg))


def plan_rows(dtype: np.dtype, cfg: ConfigSnapshot, target: Target, rows: int, length: int, vec: int,
              long_rows: LongRows = LongRows()) -> RowPlan:
    """Choose the row layout for `rows` rows of `length` scalars (vec must divide length when > 1).

    With tile_size and block_size both automatic (measured on H100, benchmarks/NOTES.md, 5B):
      1. a row that fits in 256 threads at SHORT_EPT elements per thread takes that (short rows: few
         registers per thread, many rows in flight);
      2. else the first of `long_rows.epts` (elements per thread) with which one block of 256, then
         one of `long_rows.block` threads, holds the row;
      3. else (a target with clusters, shared-memory opt on) the first `long_rows.stream` entry
         (max_length, threads, blocks per SM, vectors in flight per thread, cp.async stash) whose
         max_length >= length, when there is a row per block for every SM (rows >= sm_count): the
         stream kernel with as much of the row stashed in shared memory as fits, if the rest
         (re-read from L2) stays under l2_per_sm per SM;
         else a cluster of `long_rows.block`-thread blocks (at most 8), the first epts that fits;
      4. else one block of up to 1024 threads, else the split-row path.
    An explicit tile_size / block_size (or kernel_type "tiled" / "warp_optimized") replaces these
    choices (0 keeps 32 float / 16 double, 256); kernel_type "simple" allows neither clusters nor
    the stream kernel.
    """
    f32 = regsize(dtype) == 4
    cluster_ok = target.clusters and cfg.enable_shared_memory_opt and cfg.kernel_type != "simple"
    lv = -(-length // vec)
    if cfg.tile_size or cfg.block_size or cfg.kernel_type in ("tiled", "warp_optimized"):
        ept = min(cfg.tile_size or (32 if f32 else 16), MAX_EPT[regsize(dtype)])
        bt = cfg.block_size or 256
        if cfg.kernel_type == "warp_optimized" and lv <= 32 * (MAX_EPT[regsize(dtype)] // vec):
            nv = -(-lv // 32)
            return RowPlan("rows", vec, nv, 32, max(1, bt // 32), 1, 1, _occupancy(dtype, vec, nv * vec))
        return _plan(dtype, lv, vec, ept, bt, bt if (cfg.block_size or cluster_ok) else 1024, cluster_ok)
    short = _plan(dtype, lv, vec, SHORT_EPT[np.dtype(dtype).itemsize], 256, 256, False)
    if short.kind == "rows":
        return short
    long_epts, long_block = long_rows.epts, long_rows.block
    for bt in dict.fromkeys((256, long_block)):
        for ept in long_epts:
            p = _plan(dtype, lv, vec, ept, bt, bt, False)
            if p.kind == "rows":
                return p
    if cluster_ok:
        stream = long_rows.stream if rows >= target.sm_count else ()
        for max_len, threads, k, nv, copy_async in stream:
            if length <= max_len:
                p = plan_stream(dtype, target, lv, vec, threads, k, nv, copy_async=copy_async)
                if p is not None:
                    return p
                break
        for ept in long_epts:
            p = _plan(dtype, lv, vec, ept, long_block, long_block, True)
            if p.kind == "rows":
                return p
    return _plan(dtype, lv, vec, long_epts[-1], long_block, 1024 if not cluster_ok else long_block, False)


def _plan(dtype: np.dtype, lv: int, vec: int, ept: int, bt: int, tmax: int, cluster_ok: bool) -> RowPlan:
    """One layout: rows of lv vectors, at most ept elements per thread, bt threads per block, rows of
    up to tmax threads in one block, else a cluster (if allowed), else split."""
    nv_cap = max(1, ept // vec)
    need = -(-lv // nv_cap)
    occ = _occupancy(dtype, vec, ept)
    if need <= tmax:
        tpr = max(4, next_pow2(need))
        nv = -(-lv // tpr)
        rpb = max(1, bt // tpr)
        return RowPlan("rows", vec, nv, tpr, rpb, 1, 1, occ)
    if cluster_ok:
        cl = next_pow2(-(-need // bt))
        if cl <= MAX_CLUSTER:
            nv = -(-(-(-lv // cl)) // bt)
            # clusters: 1024 threads/SM (64 registers) measured 2-20% faster than 512 for every cluster shape
            return RowPlan("rows", vec, nv, bt, 1, cl, 1, 1024)
    chunks = -(-lv // (bt * nv_cap))
    return RowPlan("split", vec, nv_cap, bt, 1, 1, chunks, occ)


def _occupancy(dtype: np.dtype, vec: int, ept: int) -> int:
    """Threads per SM that __launch_bounds__ promises for rows of up to `ept` elements per thread."""
    itemsize = regsize(dtype)
    if ept > 64:
        return 256   # 128 floats per thread need up to 255 registers, else the row spills
    return 1024 if (vec > 1 and (ept * itemsize <= 64 or (itemsize == 4 and ept <= 32))) else 512


def plan_stream(dtype: np.dtype, target: Target, lv: int, vec: int, threads: int, k: int, nv: int = STREAM_STEP,
                stash: bool = True, l2_budget: int | None = None, copy_async: bool = False) -> RowPlan | None:
    """Stream kernel for rows of lv vectors: `threads` per block, k blocks per SM, nv vectors in
    flight per thread, the row's head in shared memory (as much as k blocks per SM leave room for
    on `target`, a multiple of `threads` vectors; none when stash is False). None when the rest,
    re-read from L2 by k rows per SM, exceeds `l2_budget` (None: l2_per_sm(target)). The stash holds the
    row as stored; cp.async (copy_async) moves 4, 8 or 16 bytes, so a stash of 2-byte scalars is copied
    through registers."""
    vbytes = vec * np.dtype(dtype).itemsize
    room = min(target.smem_per_block - SMEM_STATIC, target.smem_per_sm // k - SMEM_STATIC) if stash else 0
    sv = min(lv, max(0, room) // vbytes) // threads * threads
    if k * (lv - sv) * vbytes > (l2_per_sm(target) if l2_budget is None else l2_budget):
        return None
    return RowPlan("stream", vec, nv, threads, 1, 1, 1, threads * k, sv, copy_async and sv > 0 and vbytes >= 4)


def resident(choice: RowChoice, dtype: np.dtype, cfg: ConfigSnapshot, target: Target, rows: int) -> RowChoice:
    """A split-row choice as the resident kernel (LayerNorm) where shared-memory opt is on and two rows
    fit in 3/5 of L2 (the row read by P, the row re-read by A: H100 takes rows up to 15.7 MB)."""
    layout = choice.layout
    row_bytes = layout.vec * layout.tpr * layout.nv * layout.chunks * np.dtype(dtype).itemsize
    fits = 2 * row_bytes <= target.l2_bytes * 3 // 5
    if (layout.kind != "split" or not fits or not cfg.enable_shared_memory_opt or cfg.kernel_type == "simple"
            or 2 * rows * layout.chunks >= 2 ** 31):
        return choice
    return RowChoice(replace(layout, kind="resident"), choice.unroll, choice.opts)


def row_grid(layout: RowPlan, rows: int) -> int:
    """Blocks of a 'rows' kernel: a block (or cluster) per RPB rows, at most 2**31 - 1 blocks in all."""
    return min(-(-rows // layout.rpb), (2 ** 31 - 1) // layout.cl) * layout.cl
