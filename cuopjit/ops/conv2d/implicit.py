"""The implicit GEMM's choices (templates/conv2d/conv2d.cu.jinja, planned by plans.py): the block tile and
thread layout (shapes.py) a JITConfig names or the heuristic picks, the other default shapes as auto-tuning
candidates, k-slices where the grid is small (splitk.py), and the k order of the packed weight.

The heuristic: the largest square tile wasting at most a quarter of its channel rows that gives every SM a block
(`auto_tile`), the wide 64 x 128 tile for 64-channel layers; for float32 SIMT windows (3x3 and larger) with at
most SMALL_OUTPUT outputs, R8 (64 x 128 x 16, 8 x 8 thread tiles) where its blocks spread over the SMs at least
EVEN evenly (`spread`: the blocks over the busiest SM's share), else 64 x 64 x 16 with 4 x 4 thread tiles. An
8 x 8 thread tile does 16 FMAs per shared-memory word it reads, the 4 x 4 tile 8 (its load/store pipe ran 85%
busy). H100, ResNet-50 at batch 32, every candidate timed: R8 22-25% ahead of the 4 x 4 tile on the 3x3 layers at
56^2 and 28^2 (0.99 spread); at 14^2 and 7^2 (spread 0.74-0.79) within -6..+6% of it, so the 4 x 4 tile stays;
64 x 64 x 16 with 8 x 8 thread tiles (64 threads) and 128 x 128 x 8 were never ahead. Where R8's blocks number
one to two per SM (the 14^2 outputs of 256 channels: 196 blocks), R8 in WINDOW_SLICES k-slices leads instead
(3x3 256 -> 256 at 14^2: 0.2256 ms against the 4 x 4 tile's 0.2474, R8 unsplit 0.2743, 2 / 3 / 6 slices
0.2814 / 0.2854 / 0.2557; cuDNN 0.191).
"""
from __future__ import annotations

from ...build import pipeline
from ...config import ConfigSnapshot
from ...target import Target
from ..base import cdiv
from . import splitk
from .problem import ConvChoice, ConvProblem
from .shapes import BLOCKS, TILES, TUNED, WIDE, Shape, derive, valid_threads

SMALL_OUTPUT = 1 << 23    # float32 SIMT windows with at most this many outputs (ResNet's 3x3 at <= 28^2)
R8 = Shape(False, 64, 16, 8, 8, bn=128)
EVEN = 0.9
WINDOW_SLICES = 4         # k-slices of R8 on float32 SIMT windows of one to two blocks per SM


def auto_tile(problem: ConvProblem, cfg: ConfigSnapshot, mma: bool, target: Target) -> int:
    """The largest tile that wastes at most a quarter of its rows and still gives every SM a block."""
    fits = [t for t in TILES if not cfg.block_size or cfg.block_size in valid_threads(problem.dtype, mma, t)]
    if not fits:
        raise ValueError(f"Convolution2D block_size={cfg.block_size} fits no tile: choose one of "
                         f"{', '.join(map(str, BLOCKS))} or 0 (auto)")
    if cfg.kernel_type == "simple":
        return fits[0]
    npix = problem.n * problem.oh * problem.ow
    good = [t for t in (128, 64, 32, 16) if t in fits and cdiv(problem.kg, t) * t <= 1.25 * problem.kg] or \
           [t for t in (32, 64, 128, 16) if t in fits][:1]
    return next((t for t in good if cdiv(problem.kg, t) * cdiv(npix, t) * problem.groups >= target.sm_count),
                good[-1])


def choices(problem: ConvProblem, cfg: ConfigSnapshot, target: Target, mma: bool,
            split: bool) -> list[ConvChoice]:
    """The implicit GEMM's choices: the tile cfg names or the heuristic's, k-sliced where its grid is small."""
    switches = {"unroll": cfg.enable_loop_unroll, "coalesce": cfg.enable_memory_coalescing,
                "opts": pipeline.compile_opts(cfg)}
    tile = cfg.tile_size or auto_tile(problem, cfg, mma, target)
    wide = WIDE[problem.dtype, mma]
    npix = problem.n * problem.oh * problem.ow
    free = not cfg.tile_size and not cfg.block_size and cfg.kernel_type != "simple"
    window = (free and not mma and problem.dtype == "float32" and problem.kh * problem.kw > 1 and problem.cg >= 64
              and npix * problem.kg <= SMALL_OUTPUT)
    window_slices = 1
    if window:      # 64 x 64 x 16 r4x4 (H100 ResNet 3x3: 0.76-0.97x before) unless R8 spreads evenly
        fits = cdiv(problem.kg, R8.bm) * R8.bm <= 1.25 * problem.kg
        even = fits and spread(problem, R8, target) >= EVEN
        shape = R8 if even else TUNED["float32", False][1]
        blocks = cdiv(problem.kg, R8.bm) * cdiv(npix, R8.bn) * problem.groups
        if fits and not even and target.sm_count < blocks <= 2 * target.sm_count and splitk.allowed(problem):
            window_slices = WINDOW_SLICES
    elif free and tile == wide.bm and cdiv(problem.kg, wide.bm) * cdiv(npix, wide.bn) * problem.groups >= target.sm_count:
        shape = wide
    else:
        threads = cfg.block_size or TUNED[problem.dtype, mma][TILES[::-1].index(tile)].threads
        shape = derive(problem.dtype, mma, tile, threads)
    if shape is None:
        kind = f"{problem.dtype} {'mma.sync' if mma else 'SIMT'}"
        raise ValueError(f"Convolution2D tile_size={tile} cannot run with block_size={threads} in the {kind} "
                         f"kernel: choose block_size {', '.join(map(str, valid_threads(problem.dtype, mma, tile)))}")
    # With tile and block left free, the other default shapes of the same kernel are auto-tuning candidates.
    others = (wide, *TUNED[problem.dtype, mma][:2]) + ((R8, TUNED["float32", False][1]) if window else ())
    found = [shape] + ([s for s in dict.fromkeys(others) if s != shape] if free else [])
    made = [ConvChoice(s, s.threads, pad=cfg.enable_shared_memory_opt, split=split, **switches) for s in found]
    if not free:
        return made
    # Too few tiles to fill the GPU: the 64 tile (where the heuristic fell to a smaller one) in k-slices first;
    # the unsplit builds stay candidates.
    sliced = shape if shape.bm >= 64 else TUNED[problem.dtype, mma][1]
    slices = splitk.slices(problem, sliced, k_order(problem, sliced.bk)[2], target)
    if slices > 1:
        made.insert(0, ConvChoice(sliced, sliced.threads, pad=cfg.enable_shared_memory_opt, split=split,
                                  split_k=slices, **switches))
    elif window_slices > 1:
        made.insert(0, ConvChoice(R8, R8.threads, pad=cfg.enable_shared_memory_opt, split=split,
                                  split_k=window_slices, **switches))
    return made


def spread(problem: ConvProblem, shape: Shape, target: Target) -> float:
    """Blocks of `shape` over the SMs' share of them in the busiest SM (1.0: every SM gets as many)."""
    blocks = cdiv(problem.kg, shape.bm) * cdiv(problem.n * problem.oh * problem.ow, shape.bn) * problem.groups
    return blocks / (cdiv(blocks, target.sm_count) * target.sm_count)


def k_order(problem: ConvProblem, bk: int) -> tuple[str, int, int]:
    """(order, channel chunks per tap, k-tiles): "chunk" unless chunks of bk channels waste > 1/8 of the k-tiles."""
    taps, cg = problem.kh * problem.kw, problem.cg
    chunked, flat = taps * cdiv(cg, bk), cdiv(cg * taps, bk)
    if chunked * 8 <= flat * 9:
        return "chunk", cdiv(cg, bk), chunked
    return "flat", 0, flat
