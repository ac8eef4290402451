"""Implicit-GEMM shapes of the Convolution2D family: the block tiles and thread layouts
templates/conv2d/conv2d.cu.jinja can build.

A shape is the block tile BM (output channels) x BN (output pixels) x BK and how a block's threads
cover it: the SIMT thread tile TM x TN or the mma.sync warp layout WARPS_M x WARPS_N (x WARPS_K
k-groups when a block has more warps than m16n8 warp tiles). tile_size names square tiles; the
default for 64-channel layers is the wide 64 x 128 tile. `why_not` states the template's own limits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..base import vector_width

TILES = (16, 32, 64, 128)
BLOCKS = (32, 64, 128, 256, 512, 1024)
STATIC_SMEM = 48 * 1024
_MAX_ACC = {"float32": 64, "float64": 64}


@dataclass(frozen=True)
class Shape:
    """Implicit-GEMM block tile BM x BN x BK; SIMT thread tile TM x TN, or mma warps TM x TN x WK."""
    mma: bool
    bm: int
    bk: int
    tm: int
    tn: int
    wk: int = 1
    bn: int = 0    # 0: square (bn = bm)

    def __post_init__(self) -> None:
        if not self.bn:
            object.__setattr__(self, "bn", self.bm)

    @property
    def threads(self) -> int:
        return self.tm * self.tn * self.wk * 32 if self.mma else (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def label(self) -> str:
        lay = f"w{self.tm}x{self.tn}" + (f"k{self.wk}" if self.wk > 1 else "") if self.mma else f"r{self.tm}x{self.tn}"
        return f"t{self.bm}x{self.bn}x{self.bk}_{lay}"


# Default shape per (dtype, mma, tile): the first block size of that tile.
TUNED = {
    ("float32", False): (Shape(False, 128, 8, 8, 8), Shape(False, 64, 16, 4, 4), Shape(False, 32, 16, 4, 4),
                         Shape(False, 16, 16, 1, 1)),
    ("float64", False): (Shape(False, 128, 4, 8, 8), Shape(False, 64, 8, 4, 4), Shape(False, 32, 8, 4, 4),
                         Shape(False, 16, 8, 1, 1)),
    ("float32", True): (Shape(True, 128, 16, 2, 4), Shape(True, 64, 16, 2, 2), Shape(True, 32, 16, 2, 1),
                        Shape(True, 16, 16, 1, 2)),
    ("float64", True): (Shape(True, 128, 8, 2, 4), Shape(True, 64, 16, 2, 2), Shape(True, 32, 16, 2, 1),
                        Shape(True, 16, 16, 1, 2)),
}
# What tile_size=0 and block_size=0 run where the automatic tile is 64 (layers of 64 channels per group):
# 64 channels x 128 pixels, twice the work per k-tile of the square 64 tile.
WIDE = {("float32", False): Shape(False, 64, 8, 4, 8, bn=128), ("float64", False): Shape(False, 64, 8, 4, 8, bn=128),
        ("float32", True): Shape(True, 64, 16, 2, 4, bn=128), ("float64", True): Shape(True, 64, 8, 2, 4, bn=128)}


def why_not(s: Shape, dtype: str) -> str | None:
    """Why templates/conv2d/conv2d.cu.jinja cannot build `s` (its static_asserts), or None."""
    r, size, threads = vector_width(np.dtype(dtype)), np.dtype(dtype).itemsize, s.threads
    if threads > 1024 or threads % 32:
        return f"{threads} threads: a block takes whole warps, at most 1024 threads"
    if s.mma:
        if s.bm % (16 * s.tm) or s.bn % (8 * s.tn) or s.bk % (8 * s.wk):
            return f"warps {s.tm} x {s.tn} x {s.wk} do not cover {s.bm} x {s.bn} x {s.bk} with m16n8k8 tiles"
        acc = (s.bm // s.tm // 16) * (s.bn // s.tn // 8) * 4
    else:
        if s.tm not in (1, 2, 4, 8) or s.tn not in (1, 2, 4, 8) or (s.bn // s.tn) % 8 or (s.bm // s.tm) % 4:
            return f"the thread tile {s.tm} x {s.tn} cannot cover {s.bm} x {s.bn} with warps of 4 x 8 threads"
        acc = s.tm * s.tn
    if acc > _MAX_ACC[dtype]:
        return f"{acc} accumulators per thread (at most {_MAX_ACC[dtype]})"
    if s.bk * (s.bm + s.bn) // threads > 128 // size:
        return (f"{s.bk * (s.bm + s.bn) // threads} scalars per thread in flight to shared memory "
                f"(at most {128 // size})")
    runs = s.bk * s.bm // r          # the packed weight tile in 16-byte runs
    if runs >= threads and (runs % threads or threads % (s.bm // r)):
        return f"{threads} threads cannot share out the {s.bk} x {s.bm} weight tile in runs of {r}"
    smem = size * (2 * s.bk * (s.bm + s.bn + 16) + (s.bm * s.bn if s.mma and s.wk > 1 else 0))
    if smem > STATIC_SMEM:
        return f"{smem} bytes of shared memory (at most {STATIC_SMEM})"
    return None


def derive(dtype: str, mma: bool, tile: int, threads: int) -> Shape | None:
    """The shape of a tile run by `threads` threads: the tuned one, else derived by rule, else None."""
    for s in TUNED[dtype, mma]:
        if s.bm == tile and s.threads == threads:
            return s
    return next((s for bk in ((16, 8) if dtype == "float32" else (8, 4)) for s in _candidates(mma, tile, threads, bk)
                 if why_not(s, dtype) is None), None)


def _candidates(mma: bool, tile: int, threads: int, bk: int) -> list[Shape]:
    """Shapes of a tile at `threads` threads and depth `bk`, the squarest thread or warp tile first."""
    if mma:
        warps, tiles_m, tiles_n = threads // 32, tile // 16, tile // 8
        if warps > tiles_m * tiles_n:
            candidates = [Shape(True, tile, max(16, 8 * (warps // (tiles_m * tiles_n))), tiles_m, tiles_n,
                                warps // (tiles_m * tiles_n))] if warps // (tiles_m * tiles_n) <= 4 else []
        else:
            candidates = [Shape(True, tile, bk, wm, warps // wm) for wm in (1, 2, 4, 8, 16, 32) if warps % wm == 0]
            candidates.sort(key=lambda s: abs(math.log2(s.tn / s.tm)))
    else:
        outputs = tile * tile // threads
        candidates = [Shape(False, tile, bk, tm, outputs // tm) for tm in (1, 2, 4, 8)
                      if outputs and tile * tile % threads == 0 and outputs % tm == 0]
        candidates.sort(key=lambda s: (abs(math.log2(s.tm / s.tn)), -s.tm))
    return candidates


def valid_threads(dtype: str, mma: bool, tile: int) -> list[int]:
    """The block sizes a tile can run with."""
    return [t for t in BLOCKS if derive(dtype, mma, tile, t) is not None]
