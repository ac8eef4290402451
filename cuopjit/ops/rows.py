"""Row geometry shared by Softmax and LayerNorm: how a row of L scalars maps onto threads, blocks, clusters.

How the JITConfig fields change the row kernels (templates/rowops.cuh.jinja):

    block_size                threads per block; a row of up to block_size * tile_size elements
                              lives in one block, several short rows share a block
    tile_size                 elements each thread holds in registers; allowed 8, 16, 32, 64
                              (both 0: chosen by row length, see plan_rows)
    enable_memory_coalescing  16-byte vector loads/stores (where pointers and L allow) vs scalar
    enable_loop_unroll        `#pragma unroll` on the register loops (off: `unroll 1`, which puts
                              the row in local memory: a real, slower variant)
    enable_shared_memory_opt  rows longer than one block: the stream kernel (one block per row,
                              the row's head copied into shared memory by cp.async, the rest
                              re-read from L2; rows >= one per SM) or a thread-block cluster sharing partial results through
                              distributed shared memory (sm_90; both one HBM read of x) vs the
                              split-row path through global memory (two kernels, two reads)
    kernel_type               "auto" only; enable_tensor_core / enable_tma: no such kernel
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ConfigSnapshot

TILE_SIZES = (0, 8, 16, 32, 64)
BLOCK_SIZES = (0, 64, 128, 256, 512, 1024)
MAX_CLUSTER = 8  # the portable cluster size limit
# Stream kernels (sm_90 figures: 228 KB of shared memory per SM, 227 KB per block, 1 KB per block
# reserved by the system; 132 SMs x 50 MB L2 on H100).
SMEM_PER_SM = 233472
SMEM_PER_BLOCK = 232448
SMEM_STATIC = 1024 + 1536  # the system's reserve + block_combine's scratch (at most 2 x 32 x 3 doubles)
STREAM_STEP = 2            # default vectors in flight per thread per step (4 spills at 64 registers)
L2_PER_SM = 192 * 1024     # bytes of re-read rows per SM that L2 holds (132 x 192 KB = 25 MB, half of L2)


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


@dataclass(frozen=True)
class RowPlan:
    """Layout of one row kernel: kind 'rows' (row in registers of one block or one cluster), 'stream'
    (one block per row, nv = vectors in flight per thread, `stash` vectors kept in shared memory,
    occ // tpr blocks per SM) or 'split'."""
    kind: str
    vec: int      # scalars per vector access
    nv: int       # vectors per thread
    tpr: int      # threads per row (per block)
    rpb: int      # rows per block
    cl: int       # blocks per cluster (1: no cluster)
    chunks: int   # split-row: blocks per row
    occ: int = 1024  # threads per SM that __launch_bounds__ promises (1024: <= 64 registers, 512: <= 128)
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


def vector_width(dtype: np.dtype, cfg: ConfigSnapshot, aligned: bool) -> int:
    """16-byte vectors when coalescing is on and pointers/lengths allow it, else 1."""
    return 16 // np.dtype(dtype).itemsize if cfg.enable_memory_coalescing and aligned else 1


def plan_rows(dtype: np.dtype, cfg: ConfigSnapshot, length: int, vec: int, cluster_ok: bool,
              long_epts: tuple[int, ...] = (32,), long_block: int = 256,
              stream: tuple[tuple[int, int, int, int, bool], ...] = ()) -> RowPlan:
    """Choose the row layout for rows of `length` scalars (vec must divide length when > 1).

    With tile_size and block_size both automatic (measured on H100, benchmarks/NOTES.md, 5B):
      1. a row that fits in 256 threads at 8 elements per thread takes that (short rows: few
         registers per thread, many rows in flight);
      2. else the first of `long_epts` (elements per thread) with which one block of 256, then
         one of `long_block` threads, holds the row;
      3. else (sm_90, shared-memory opt on) the first `stream` entry (max_length, threads, blocks
         per SM, vectors in flight per thread, cp.async stash) whose max_length >= length: the stream kernel with
         as much of the row stashed in shared memory as fits, if the rest (re-read from L2) stays
         under L2_PER_SM per SM;
         else a cluster of `long_block`-thread blocks (at most 8), the first of `long_epts` that fits;
      4. else one block of up to 1024 threads, else the split-row path.
    An explicit tile_size / block_size replaces these choices (0 keeps 32 float / 16 double, 256).
    """
    f32 = np.dtype(dtype) == np.float32
    cluster_ok = cluster_ok and cfg.enable_shared_memory_opt
    lv = -(-length // vec)
    if cfg.tile_size or cfg.block_size:
        ept = cfg.tile_size or (32 if f32 else 16)
        bt = cfg.block_size or 256
        return _plan(dtype, lv, vec, ept, bt, bt if (cfg.block_size or cluster_ok) else 1024, cluster_ok)
    short = _plan(dtype, lv, vec, 8, 256, 256, False)
    if short.kind == "rows":
        return short
    for bt in dict.fromkeys((256, long_block)):
        for ept in long_epts:
            p = _plan(dtype, lv, vec, ept, bt, bt, False)
            if p.kind == "rows":
                return p
    if cluster_ok:
        for max_len, threads, k, nv, copy_async in stream:
            if length <= max_len:
                p = plan_stream(dtype, lv, vec, threads, k, nv, copy_async=copy_async)
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
    itemsize = np.dtype(dtype).itemsize
    nv_cap = max(1, ept // vec)
    need = -(-lv // nv_cap)
    occ = 1024 if (vec > 1 and (ept * itemsize <= 64 or (itemsize == 4 and ept <= 32))) else 512
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


def plan_stream(dtype: np.dtype, lv: int, vec: int, threads: int, k: int, nv: int = STREAM_STEP,
                stash: bool = True, l2_per_sm: int = L2_PER_SM, copy_async: bool = False) -> RowPlan | None:
    """Stream kernel for rows of lv vectors: `threads` per block, k blocks per SM, nv vectors in
    flight per thread, the row's head in
    shared memory (as much as k blocks per SM leave room for, a multiple of `threads` vectors; none
    when stash is False). None when the rest, re-read from L2 by k rows per SM, exceeds l2_per_sm."""
    vbytes = vec * np.dtype(dtype).itemsize
    room = min(SMEM_PER_BLOCK - SMEM_STATIC, SMEM_PER_SM // k - SMEM_STATIC) if stash else 0
    sv = min(lv, room // vbytes) // threads * threads
    if k * (lv - sv) * vbytes > l2_per_sm:
        return None
    return RowPlan("stream", vec, nv, threads, 1, 1, 1, threads * k, sv, copy_async and sv > 0)


def prefer_shared_memory(launch) -> None:
    """Ask for the largest shared-memory carveout for a stream kernel's function, so that its k blocks
    per SM (each with its stash) fit; the driver's default (no preference) may pick a smaller one."""
    from .. import driver
    from ..errors import check
    drv = driver._driver()
    check(drv.cuFuncSetAttribute(launch.function.handle,
                                 drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100),
          "cuFuncSetAttribute")


def cluster_available() -> bool:
    """Thread-block clusters need compute capability 9.0 or newer."""
    from .. import driver
    return driver.get_device().major >= 9


def sm_count() -> int:
    from .. import driver
    return driver.get_device().sm_count
