"""Row geometry shared by Softmax and LayerNorm: how a row of L scalars maps onto threads, blocks, clusters.

How the JITConfig fields change the row kernels (templates/rowops.cuh.jinja):

    block_size                threads per block; a row of up to block_size * tile_size elements
                              lives in one block, several short rows share a block
    tile_size                 elements each thread holds in registers; allowed 8, 16, 32, 64
                              (both 0: chosen by row length, see plan_rows)
    enable_memory_coalescing  16-byte vector loads/stores (where pointers and L allow) vs scalar
    enable_loop_unroll        `#pragma unroll` on the register loops (off: `unroll 1`, which puts
                              the row in local memory: a real, slower variant)
    enable_shared_memory_opt  rows longer than one block: a thread-block cluster sharing partial
                              results through distributed shared memory (sm_90; one read of x) vs
                              the split-row path through global memory (two kernels, two reads)
    kernel_type               "auto" only; enable_tensor_core / enable_tma: no such kernel
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ConfigSnapshot

TILE_SIZES = (0, 8, 16, 32, 64)
BLOCK_SIZES = (0, 64, 128, 256, 512, 1024)
MAX_CLUSTER = 8  # the portable cluster size limit


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


@dataclass(frozen=True)
class RowPlan:
    """Register layout of one row kernel: kind 'rows' (one block or one cluster per row) or 'split'."""
    kind: str
    vec: int      # scalars per vector access
    nv: int       # vectors per thread
    tpr: int      # threads per row (per block)
    rpb: int      # rows per block
    cl: int       # blocks per cluster (1: no cluster)
    chunks: int   # split-row: blocks per row
    occ: int = 1024  # threads per SM that __launch_bounds__ promises (1024: <= 64 registers, 512: <= 128)

    @property
    def threads(self) -> int:
        return self.tpr * self.rpb

    def params(self) -> dict:
        return {"VEC": self.vec, "NV": self.nv, "TPR": self.tpr, "RPB": self.rpb, "CL": self.cl,
                "WPR": max(1, self.tpr // 32), "OCC": self.occ}

    def tag(self) -> str:
        s = f"v{self.vec}n{self.nv}t{self.tpr}r{self.rpb}"
        return s + (f"c{self.cl}" if self.cl > 1 else "")


def vector_width(dtype: np.dtype, cfg: ConfigSnapshot, aligned: bool) -> int:
    """16-byte vectors when coalescing is on and pointers/lengths allow it, else 1."""
    return 16 // np.dtype(dtype).itemsize if cfg.enable_memory_coalescing and aligned else 1


def plan_rows(dtype: np.dtype, cfg: ConfigSnapshot, length: int, vec: int, cluster_ok: bool,
              long_epts: tuple[int, ...] = (32,), long_block: int = 256) -> RowPlan:
    """Choose the row layout for rows of `length` scalars (vec must divide length when > 1).

    With tile_size and block_size both automatic (measured on H100, benchmarks/NOTES.md, 5B):
      1. a row that fits in 256 threads at 8 elements per thread takes that (short rows: few
         registers per thread, many rows in flight);
      2. else the first of `long_epts` (elements per thread) with which one block of 256, then
         one of `long_block` threads, holds the row;
      3. else a cluster of `long_block`-thread blocks (at most 8, sm_90, shared-memory opt on),
         the first of `long_epts` that fits;
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


def cluster_available() -> bool:
    """Thread-block clusters need compute capability 9.0 or newer."""
    from .. import driver
    return driver.get_device().major >= 9


def sm_count() -> int:
    from .. import driver
    return driver.get_device().sm_count
