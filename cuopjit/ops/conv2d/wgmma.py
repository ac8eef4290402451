"""Conv2D on Hopper tensor cores (templates/conv2d/conv2d_wgmma.cu.jinja): wgmma TF32 or 3xTF32 implicit GEMM, or
for float16 / bfloat16 wgmma m64nNk16 f16 / bf16 (float32 sums, y rounded once; k-tiles of 64 channels, the same
128 bytes as TF32's 32; the weight packed in 16 bits, no rounding, no DEBIAS: the tensor cores read halves exactly;
bias and ReLU on a channels_last y stored as 16-byte vectors through shared memory; no 3xTF32, no staged residual).

Launches: the weight packed to [O][KH][KW][CPAD] (rounded to TF32; 3xTF32 adds a lo = tf32(w - hi) copy:
a Convolution2D runs it once per set_weight, problem.ConvPlan), an NCHW input converted to an internal NHWC
copy (rounded to TF32; a channels_last input is read as it is, no copy: the tensor cores truncate it to
TF32, see DEBIAS below), then the persistent wgmma kernel, whose pixel operand is one 4-D TMA box per k-tile
(channels x BW x BH of one image, the stride as the tensor map's element strides; TMA's zero fill outside the
image is the padding), writing NCHW or channels_last y. 3xTF32 splits the input two ways (`lo_copy`): NCHW layers with
much work per input value (out_channels * kh * kw / strides >= LO_COPY_WORK) get a second NHWC copy of
lo = tf32(x - hi) read by TMA beside hi; the others (and every channels_last input) keep x as it is and the
kernel's producer warpgroup writes each tile's lo in shared memory (half the copy traffic; the seed layer:
kernel 2.23 ms instead of 1.80 ms, copy 0.31 instead of 0.48 ms; ResNet's 1x1 256 -> 64: 0.15 instead of
0.21 ms in all). Layers it takes: float32 / float16 / bfloat16, sm_90, one group, at least half of the padded
channels real (CPAD = a multiple of 32 floats or 64 halves), a channels_last x with rows of C a multiple of 16
bytes, and a pixel tile that wastes at most
MAX_WASTE of the output; the others stay on the mma.sync kernel.

Truncating x to TF32 lowers each product by 2^-11 E[1/m] of itself on average (m the significand: for values whose
low bits are uniform and significands log-uniform, 3.52e-4), a bias toward zero that adds up over a network's layers
(ResNet-50 b32 through the torch backend: 1.45e-2 output error against eager fp32, eager TF32 5.9e-4). The kernel
scales its sums by DEBIAS = 1 + that mean instead (one multiply per output): the mean error is then zero, the spread
that of rounding to nearest (per layer 4.7e-4 -> 3.0e-4, ResNet-50 with its 1x1 layers on this kernel 9.8e-3 ->
7.5e-4, as with x rounded to nearest: 7.7e-4), and values exact in TF32 come out 3.5e-4 high, under TF32's 2^-11.
Rounding x in shared memory instead (the producer's idle warps, cvt.rna, in place after each stage's TMA) cost
1.36-1.46x the kernel time over ResNet-50's layers (H100, 2026-11-26): it is redone for every channel tile and
tap that reads the pixel, as much shared-memory traffic as the wgmmas' own.

A user epilogue's output-shaped operands (a residual; at most RESIDUAL_TILES, TF32 only) come into shared memory by
TMA (`rtiles`): the producer loads a tile's box of each while the consumers still run its k-loop, and the epilogue
reads them from shared memory instead of waiting on global loads at each store (the 1.5x of the TF32 conv +
residual; `residual_tiles` says where: y's rows of 16-byte multiples and room for two stages beside them); with one
such operand the epilogue writes y over its tile and the producer stores it with TMA beside the next tile's k-loop
(`y_by_tma`). A residual or y that is not 16-byte aligned at run time takes the kernel's global loads and stores.

Pixel boxes: boxes.py (BW x BH pixels of one image with BW a multiple of 8, or for a channels_last y exact
boxes: whole output rows or several whole images, QN their pixels rounded up to 8).

How JITConfig reaches this kernel: tile_size 0 lets the heuristic choose the pixel box (`score`: the
last wave's fill, the padded pixels and the tile's own rate; 256 for TF32 and 128 for 3xTF32 on large images),
64 / 128 name QN (boxes of whole 8-column groups); block_size 0 runs two consumer warpgroups (128 output
channels per tile; one for layers of <= 64 channels), 256 one (64), as the GEMM family's; TF32
on NCHW input runs here only where out_channels * kh * kw >= MIN_WORK (else mma.sync is faster than the copy);
precision "3xtf32" the split products;
enable_loop_unroll the prepass loops; enable_shared_memory_opt the transpose tile's row padding;
enable_memory_coalescing float2 output stores where rows are even.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...build import pipeline
from ...target import Target
from .. import epilogue
from ..base import HALF_DTYPES, cdiv
from ..gemm.wgmma import Warpgroups, staging_bytes
from .boxes import ONE_CONSUMER_QN, Box, box, candidates, count, score, waste
from .fold import foldable, folded
from . import fold as folding

TEMPLATE = "conv2d/conv2d_wgmma.cu.jinja"
BK = 32
MAX_STAGES = 6
RTILE_STAGES = 4           # a build with staged residual tiles: first those keeping this many stages beside them
MIN_WORK = 128             # TF32 runs here when out_channels * kh * kw >= this: each converted input value
                           # then feeds >= 256 flops (ResNet's 1x1 256 -> 64: 64, faster on mma.sync)
LO_COPY_WORK = 512         # 3xTF32 with a lo copy of the input from this out_channels * kh * kw / strides
MAX_WASTE = 2.0             # computed pixels / output pixels at most this (else the mma.sync kernel)
WIDTHS = {False: (256, 128, 64), True: (128, 64)}   # pixel tiles QN (3xTF32: acc + total in registers)
BLOCKS = {0: 2, 256: 1}                             # block_size -> consumer warpgroups
REGS = {2: 232, 1: 240}                             # setmaxnreg of the consumers
MAP_BYTES = 512                                     # up to four 128-byte tensor maps per block
RESIDUAL_TILES = 2                                  # output-shaped operands staged by TMA (map slots 2 and 3)
DEBIAS = 1 + 2.0 ** -11 / (2 * math.log(2))         # 1 + E[x - TF32 truncation of x] / x (module docstring)
UNITS = {False: "TF32 tensor cores (wgmma)", True: "TF32 tensor cores, 3 products (wgmma 3xTF32)",
         "float16": "FP16 tensor cores (wgmma)", "bfloat16": "BF16 tensor cores (wgmma)"}
TAGS = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
ROW = 128                                           # bytes of one k-tile row (the 128-byte swizzle)


def elem_bytes(problem) -> int:
    """Bytes of one stored element: 4 for float32, 2 for float16 / bfloat16."""
    return 2 if problem.dtype in HALF_DTYPES else 4


def bk(problem) -> int:
    """Channels of one k-tile: one 128-byte swizzled row (32 float32, 64 float16 / bfloat16)."""
    return ROW // elem_bytes(problem)


@dataclass(frozen=True)
class WgmmaConvChoice(Warpgroups):
    """One build: consumer warpgroups, pixel tile QN = BW columns x QN / BW rows, stages, precision (3xTF32: the
    input's lo parts from a copy, or made in shared memory), switches."""
    consumers: int
    qn: int
    bw: int
    stages: int
    split: bool = False
    lo_copy: bool = False
    unroll: bool = True
    pad: bool = True
    coalesce: bool = True
    opts: pipeline.CompileOpts = pipeline.DEFAULT_OPTS
    bh: int = 0         # box rows (0: qn // bw)
    imgs: int = 1       # images per box (boxes.py's exact boxes)
    rtiles: int = 0     # output-shaped epilogue operands brought into shared memory by TMA
    fold: str = ""      # the window's columns folded into the channels (fold.py: the 16-bit stem), "view" or "smem"

    @property
    def pixel_box(self) -> Box:
        return Box(self.qn, self.bw, self.bh or self.qn // self.bw, self.imgs)

    @property
    def label(self) -> str:
        return (f"wgmma_t{self.pm}x{self.qn}_b{self.bw}x{self.pixel_box.bh}"
                + (f"x{self.imgs}" if self.imgs > 1 else "") + f"_s{self.stages}"
                + ("_3xtf32" if self.split else "") + ("_locopy" if self.lo_copy else "")
                + ("" if self.coalesce else "_scalar")
                + ("" if self.pad else "_nopad") + ("" if self.unroll else "_nounroll")
                + (f"_rt{self.rtiles}" if self.rtiles else "")
                + ("_foldsmem" if self.fold == "smem" else "_fold" if self.fold else ""))


def cpad(problem) -> int:
    """Channels of the NHWC copy: a multiple of bk (one 128-byte swizzle row per pixel and k-tile)."""
    return cdiv(problem.c, bk(problem)) * bk(problem)


def why_not(problem, target: Target, fold: bool = False) -> str | None:
    """Why this layer cannot run on the wgmma kernel (None: it can); `fold`: after fold.py's folding."""
    if fold:
        if not foldable(problem, target.capability):
            return (f"folding a {problem.kh} x {problem.kw} window into {problem.c} channels takes 16-bit layers of "
                    "one group on sm_90 with C < 32 and the window's columns times the padded channels <= 64")
        problem = folded(problem)
    if problem.dtype not in TAGS:
        return f"wgmma takes float32 only (TF32) or the 16-bit types, not {problem.dtype}"
    if target.capability != 90:
        return f"wgmma needs an sm_90 GPU, not {target.arch}"
    if max(problem.sh, problem.sw) > 8:
        return f"stride {problem.sh} x {problem.sw}: TMA element strides are at most 8"
    if problem.groups != 1:
        return "grouped convolution"
    if cpad(problem) > 2 * problem.c and not fold:
        return f"{problem.c} channels would be padded to {cpad(problem)}"
    if problem.x_nhwc and (problem.c * elem_bytes(problem) % 16 or not problem.x_aligned):
        return (f"TMA reads a channels_last x only with C a multiple of {16 // elem_bytes(problem)} ({problem.c}) and "
                "x 16-byte aligned")
    wastes = [b[1] for b in (box(problem, q) for q in WIDTHS[False]) if b]
    if not wastes or min(wastes) > MAX_WASTE:
        return f"a {problem.oh} x {problem.ow} output wastes more than {MAX_WASTE}x of any pixel tile"
    if cdiv(problem.k, 64) * problem.n * problem.oh * problem.ow >= 2 ** 31:
        return "more than 2^31 tiles"
    return None


def applies(problem, cfg, target: Target, split: bool) -> bool:
    """Whether `cfg` (tensor cores or 3xTF32 allowed, a tile_size / block_size this kernel builds) routes here:
    where it can run, and for TF32 on NCHW input only where the NHWC copy is small beside the products
    (MIN_WORK; a channels_last input needs no copy; 3xTF32 always: the mma.sync split kernel is 2-3x slower)."""
    return (cfg.tile_size in (0, 64, 128) and cfg.block_size in BLOCKS and why_not(problem, target) is None
            and (split or problem.x_nhwc or problem.k * problem.kh * problem.kw >= MIN_WORK))


def tiles(problem, choice: WgmmaConvChoice) -> int:
    """Block tiles of the persistent grid: channel tiles x pixel boxes."""
    return cdiv(problem.k, choice.pm) * count(problem, choice.pixel_box)


def y_by_tma(problem, choice: WgmmaConvChoice) -> bool:
    """Whether the kernel writes its outputs over the one staged operand's tile and stores that with TMA: an epilogue
    that does not read c, and boxes TMA clips at y's edges (not whole-row channels_last boxes, whose last rows may
    run into the next image)."""
    return (choice.rtiles == 1 and not epilogue.code(problem.epilogue, "float").reads_c
            and not (problem.y_nhwc and choice.bw == problem.ow))


def smem_bytes(consumers: int, qn: int, stages: int, split: bool, staged: bool = False, rtiles: int = 0) -> int:
    """Dynamic shared memory: stages of (W, X) k-tiles (hi and lo with 3xTF32), barriers, maps, alignment;
    `staged`: a user epilogue's output staging past the maps (as the GEMM's); `rtiles` output tiles of its
    output-shaped operands after that, and their two barriers."""
    return (stages * (2 if split else 1) * (64 * consumers + qn) * ROW + 24 * stages + 4 * 128 + 128 + 1024
            + (staging_bytes(consumers, qn) if staged else 0) + (rtiles * 64 * consumers * qn * 4 + 16 if rtiles else 0))


def residual_tiles(problem, split: bool) -> int:
    """How many output-shaped epilogue operands the TF32 kernel brings in by TMA (0: it reads them from global
    memory): 1 or 2 of them, y's rows (NCHW: OW floats; channels_last: O) a multiple of 16 bytes (TMA's strides),
    a channels_last y of under 2^31 pixels."""
    full = epilogue.full_count(problem.epilogue) if problem.epilogue else 0
    if split or problem.dtype != "float32" or not 0 < full <= RESIDUAL_TILES:
        return 0
    if problem.y_nhwc:
        return full if problem.k % 4 == 0 and problem.n * problem.oh * problem.ow < 2 ** 31 else 0
    return full if problem.ow % 4 == 0 else 0


def choices(problem, cfg, target: Target, split: bool) -> list[WgmmaConvChoice]:
    """The named or heuristic build first; with tile and block free, the other pixel boxes follow (boxes.py: the
    exact ones where y is channels_last and tile_size is free); boxes whose build keeps the epilogue's output-shaped
    operands in shared memory before those that could not fit them, and of those (1x1 layers, channels_last y) the
    ones that keep RTILE_STAGES stages beside them."""
    consumers = BLOCKS[cfg.block_size] if cfg.block_size else (1 if problem.k <= 64 else 2)
    widths = [q for q in WIDTHS[split] if not cfg.tile_size or q == cfg.tile_size]
    found = candidates(problem, widths, problem.y_nhwc and not cfg.tile_size,
                       ONE_CONSUMER_QN[split] if consumers == 1 else 0)
    fits = [b for b in found if waste(problem, b) <= MAX_WASTE] or [min(found, key=lambda b: waste(problem, b))]
    narrow = consumers == 1 and not split       # of equal scores, the narrowest box (boxes.py)
    order = sorted(fits, key=lambda b: (-score(problem, b, consumers, split, target.sm_count), b.bw if narrow else 0))
    if grouped_first(problem):
        order.sort(key=lambda b: not b.nchw)
    lo_copy = (split and not problem.x_nhwc
               and problem.k * problem.kh * problem.kw >= LO_COPY_WORK * problem.sh * problem.sw)
    switches = {"split": split, "lo_copy": lo_copy, "unroll": cfg.enable_loop_unroll,
                "pad": cfg.enable_shared_memory_opt,
                "coalesce": cfg.enable_memory_coalescing, "opts": pipeline.compile_opts(cfg)}
    free = not cfg.tile_size and not cfg.block_size
    rtiles = residual_tiles(problem, split)
    builds = [build(consumers, b.qn, b.bw, target, staged=staged(problem), bh=b.bh, imgs=b.imgs, rtiles=rtiles,
                    **switches) for b in order]
    # boxes that keep the residual in shared memory first, of those the ones with 4 stages beside it (H100, 1x1
    # 128->512 at 28² + residual, channels_last: 128 x 200 with 2 stages 62.1 us, 128 x 112 with 4 57.5 us)
    deep = bool(rtiles) and problem.y_nhwc and problem.pointwise      # (measured on 1x1 channels_last layers)
    builds.sort(key=lambda c: (c.rtiles < rtiles, deep and c.stages < RTILE_STAGES))
    return builds if free else builds[:1]


def staged(problem) -> bool:
    """Whether the kernel stages its outputs in shared memory: a user epilogue, or 16-bit bias / ReLU stores to a
    channels_last y (16-byte vectors of 8 channels)."""
    return bool(problem.epilogue) or problem.dtype in HALF_DTYPES and problem.y_nhwc


def grouped_first(problem) -> bool:
    """16-bit 1x1 layers of stride > 1 with outputs at least 14 wide take grouped boxes before exact ones (H100,
    ResNet-50 b32 float16, every candidate timed: 1x1/2 256 -> 512 at 28^2 out 0.0309 ms in 32 x 4 against 0.0382 in
    exact 28 x 7, 512 -> 1024 at 14^2 out 0.0229 in 16 x 16 against 0.0254 in 14 x 14; 7^2 outputs keep theirs)."""
    return (problem.dtype in HALF_DTYPES and problem.kh * problem.kw == 1 and problem.sh * problem.sw > 1
            and problem.ow >= 14)


def build(consumers: int, qn: int, bw: int, target: Target, split: bool, staged: bool = False, rtiles: int = 0,
          **switches) -> WgmmaConvChoice:
    """A build with as many stages as fit one block's shared memory (beside a user epilogue's staging and
    `rtiles` staged operand tiles; none where two stages would not fit beside them)."""
    def fit(r):
        return [s for s in range(2, MAX_STAGES + 1)
                if smem_bytes(consumers, qn, s, split, staged, r) <= target.smem_per_block]
    rtiles = rtiles if fit(rtiles) else 0
    return WgmmaConvChoice(consumers, qn, bw, fit(rtiles)[-1], split=split, rtiles=rtiles, **switches)


def fold_choices(problem, found: list[WgmmaConvChoice], target: Target) -> list[WgmmaConvChoice]:
    """The 16-bit stem's builds from the folded layer's (`found`): each through TMA's view ("view", the heuristic's
    pick), then, as auto-tuning candidates, each built in shared memory ("smem") where the box takes it and two
    stages fit beside its two patches (as many stages as fit; fold.py says why it trails the view)."""
    smem = []
    for c in found:
        b = c.pixel_box
        if folding.builds(problem, b.bw, b.bh, b.imgs):
            extra = folding.extra_smem(problem, b.bw, b.bh)
            fits = [s for s in range(2, MAX_STAGES + 1)
                    if smem_bytes(c.consumers, c.qn, s, False, staged(problem)) + extra <= target.smem_per_block]
            smem += [replace(c, fold="smem", stages=fits[-1])] if fits else []
    return [replace(c, fold="view") for c in found] + smem
