"""GEMM kernel generator: dtype + frozen JITConfig + problem shape -> template params and launch geometry.

One template, templates/gemm.cu.jinja (C = alpha * op(A) @ op(B) + beta * C, row-major), gives two
kernels: the register-tiled SIMT kernel (the default) and an mma.sync tensor-core kernel (float32 as
TF32, relative error ~3e-4; float64 as DMMA, exact FP64). How each JITConfig field changes the code:

    tile_size                 BM = BN (0: chosen by shape so that small problems still fill the SMs)
    block_size                threads per block (0: the tile's default); fixes the thread tile TM x TN
    kernel_type               "tiled": SIMT; "tensor_core": mma.sync; "auto": DMMA for float64, SIMT for
                              float32; others raise ValueError
    enable_loop_unroll        `#pragma unroll` vs `unroll 1` on the k-loop inside a shared-memory tile
    enable_memory_coalescing  16-byte global loads/stores (where `aligned` allows) vs scalar accesses
    enable_shared_memory_opt  shared-memory row padding (bank-conflict-free transposed stores) on/off
    enable_tensor_core        the mma.sync kernel (TF32 for float32: ~3e-4 relative error; exact DMMA for float64)
    enable_tma                no TMA GEMM kernel: ValueError saying which setting to change
optimization_level and max_registers reach NVRTC through the compiler options, not through here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ConfigSnapshot

TEMPLATE = "gemm.cu.jinja"
KERNEL_TYPES = ("auto", "tiled", "tensor_core")
TILE_SIZES = (0, 32, 64, 128)          # 0 = chosen by shape
BLOCK_SIZES = (0, 64, 128, 256)        # 0 = the tile's default
SUPPORTS_TENSOR_CORE = True
SM_COUNT = 132  # H100 SXM; only steers the automatic tile choice


@dataclass(frozen=True)
class TileShape:
    """One allowed (tile_size, block_size) combination and the thread tile it implies."""
    tile: int      # BM = BN
    threads: int
    tm: int        # SIMT: thread tile rows (TM) and columns (TN); tensor core: warps along M and N
    tn: int
    bk: int        # k-depth of a shared-memory tile


# Per dtype: every valid (tile_size, block_size); the first entry for a tile is its default block size.
_SHAPES: dict[str, tuple[TileShape, ...]] = {
    "float32": (
        TileShape(128, 256, 8, 8, 16),
        TileShape(64, 64, 8, 8, 8),
        TileShape(64, 128, 8, 4, 8),
        TileShape(64, 256, 4, 4, 16),
        TileShape(32, 64, 4, 4, 8),
    ),
    "float64": (  # no 64/64 (8x8 doubles in 64 threads spill); BK 4 keeps 128/256 under 255 registers
        TileShape(128, 256, 8, 8, 4),
        TileShape(64, 256, 4, 4, 8),
        TileShape(64, 128, 8, 4, 8),
        TileShape(32, 64, 4, 4, 8),
    ),
}
# Tensor-core (mma.sync) kernels: float32 as TF32 m16n8k8, float64 as DMMA m16n8k8 (4x m8n8k4 before sm_90).
_MMA_SHAPES: dict[str, tuple[TileShape, ...]] = {
    "float32": (TileShape(128, 256, 2, 4, 16), TileShape(64, 128, 2, 2, 16), TileShape(32, 64, 2, 1, 16)),
    "float64": (TileShape(128, 256, 2, 4, 8), TileShape(64, 128, 2, 2, 16), TileShape(32, 64, 2, 1, 16)),
}
# Padding (scalars) that makes each kind's shared-memory reads conflict-free.
_PAD = {("float32", False): 4, ("float64", False): 2, ("float32", True): 8, ("float64", True): 4}
_SCALAR = {"float32": ("float", "f32"), "float64": ("double", "f64")}


def allowed_combinations(dtype: np.dtype, tensor_core: bool = False) -> list[tuple[int, int]]:
    """The (tile_size, block_size) pairs GEMM accepts for `dtype` (0 in either field means auto)."""
    return [(s.tile, s.threads) for s in (_MMA_SHAPES if tensor_core else _SHAPES)[_dtype_name(dtype)]]


def _dtype_name(dtype: np.dtype) -> str:
    name = np.dtype(dtype).name
    if name not in _SHAPES:
        raise TypeError(f"GEMM supports float32 and float64, not {name}")
    return name


def _pick_shape(dtype: str, cfg: ConfigSnapshot, M: int, N: int, tensor_core: bool) -> TileShape:
    """Validate tile_size/block_size against the allowed grid; choose by shape where they are 0."""
    shapes = (_MMA_SHAPES if tensor_core else _SHAPES)[dtype]
    tiles = sorted({s.tile for s in shapes}, reverse=True)
    combos = ", ".join(f"{s.tile}/{s.threads}" for s in shapes)
    if cfg.tile_size and cfg.tile_size not in tiles:
        raise ValueError(f"GEMM tile_size={cfg.tile_size} is not allowed: choose 0 (auto) or one of "
                         f"{', '.join(map(str, tiles))}")
    if cfg.tile_size:
        tile = cfg.tile_size
    else:
        # The largest tile that still gives every SM a block; else the smallest.
        tile = next((t for t in tiles if -(-M // t) * -(-N // t) >= SM_COUNT), tiles[-1])
        if cfg.block_size and not any(s.tile == tile and s.threads == cfg.block_size for s in shapes):
            tile = next((s.tile for s in shapes if s.threads == cfg.block_size), tile)
    for s in shapes:
        if s.tile == tile and (cfg.block_size in (0, s.threads)):
            return s
    raise ValueError(f"GEMM tile_size={cfg.tile_size}, block_size={cfg.block_size} is not a valid combination "
                     f"for {dtype}{' tensor-core' if tensor_core else ''} GEMM: valid tile_size/block_size pairs are {combos} (0 = auto)"
                     + ("; kernel_type='tiled' selects the SIMT kernel and its pairs" if tensor_core else ""))


def uses_tensor_core(cfg: ConfigSnapshot, dtype: str) -> bool:
    """True for the mma.sync kernel: enable_tensor_core, kernel_type 'tensor_core', or 'auto' for float64.

    FP64 tensor cores (DMMA) compute exact double FMAs, so 'auto' takes them for float64 (2x the
    SIMT kernel's rate); for float32 they would mean TF32 rounding, so 'auto' leaves them off.
    """
    if cfg.enable_tma:
        raise ValueError("GEMM has no TMA kernel: set enable_tma=False")
    if cfg.kernel_type not in KERNEL_TYPES:
        raise ValueError(f"GEMM kernel_type={cfg.kernel_type!r} is not allowed: choose one of "
                         f"{', '.join(map(repr, KERNEL_TYPES))}")
    if cfg.kernel_type == "tiled" and cfg.enable_tensor_core:
        raise ValueError("GEMM kernel_type='tiled' is the FMA kernel but enable_tensor_core=True: "
                         "set kernel_type='tensor_core' (or 'auto'), or enable_tensor_core=False")
    return (cfg.enable_tensor_core or cfg.kernel_type == "tensor_core"
            or (cfg.kernel_type == "auto" and dtype == "float64"))


def gemm_kernel(dtype: np.dtype, cfg: ConfigSnapshot, M: int, N: int, K: int, trans_a: bool, trans_b: bool,
                aligned: bool) -> tuple[str, str, dict, tuple[int, int, int], tuple[int, int, int], int]:
    """-> (template, readable_name, params, grid, block, dynamic_shared_bytes) for one GEMM launch.

    `aligned` is the caller's promise that A, B, C are 16-byte aligned and lda, ldb, ldc are
    multiples of 16 bytes' worth of scalars; only then (and with enable_memory_coalescing) does
    the kernel use 16-byte global accesses. The name never includes the architecture.
    """
    name = _dtype_name(dtype)
    if min(M, N, K) < 1:
        raise ValueError(f"GEMM needs M, N, K >= 1, got M={M}, N={N}, K={K}")
    tc = uses_tensor_core(cfg, name)
    shape = _pick_shape(name, cfg, M, N, tc)
    scalar, short = _SCALAR[name]
    r = 16 // np.dtype(dtype).itemsize
    vec = r if (cfg.enable_memory_coalescing and aligned) else 1
    pad = _PAD[name, tc] if cfg.enable_shared_memory_opt else 0
    params = {
        "scalar_t": scalar, "unroll": bool(cfg.enable_loop_unroll), "mma": tc,
        "BM": shape.tile, "BN": shape.tile, "BK": shape.bk, "R": r, "VEC": vec, "PAD": pad,
        "trans_a": bool(trans_a), "trans_b": bool(trans_b),
        "min_blocks": 2 if name == "float32" and shape.threads >= 256 and (vec > 1 or tc) else 1,
    }
    params.update({"WARPS_M": shape.tm, "WARPS_N": shape.tn} if tc else {"TM": shape.tm, "TN": shape.tn})
    ops = ("t" if trans_a else "n") + ("t" if trans_b else "n")
    kind = (f"{'tf32' if name == 'float32' else 'dmma'}_w{shape.tm}x{shape.tn}" if tc
            else f"r{shape.tm}x{shape.tn}")
    readable = (f"gemm_{short}_t{shape.tile}x{shape.tile}x{shape.bk}_{kind}_{ops}_v{vec}"
                + ("" if pad else "_nopad") + ("" if cfg.enable_loop_unroll else "_nounroll"))
    grid = (-(-N // shape.tile), -(-M // shape.tile), 1)
    return TEMPLATE, readable, params, grid, (shape.threads, 1, 1), 0
