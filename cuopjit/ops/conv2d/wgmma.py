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
from ...run.plan import KernelLaunch, i32, i64, ptr
from ...target import Target
from .. import epilogue
from ..base import HALF_DTYPES, cdiv, storage_t
from ..gemm.wgmma import Warpgroups, staging_bytes
from .boxes import ONE_CONSUMER_QN, Box, box, candidates, count, score, waste
from .fold import foldable, folded
from . import fold as folding
from .problem import ConvPlan

TEMPLATE = "conv2d/conv2d_wgmma.cu.jinja"
BK = 32
MAX_STAGES = 6
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
    operands in shared memory before those that could not fit them."""
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
    builds.sort(key=lambda c: c.rtiles < rtiles)    # boxes that keep the residual in shared memory first
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


def _check(problem, c: WgmmaConvChoice) -> None:
    """The build's limits (the template's static_asserts), as one error saying what to choose."""
    b, top = c.pixel_box, max(WIDTHS[c.split])
    if (c.qn % 8 or not b.pixels <= c.qn < b.pixels + 8 or c.qn > top or c.bw * problem.sw > 256
            or b.bh * problem.sh > 256 or c.imgs > 256 or c.imgs > 1 and (c.bw, b.bh) != (problem.ow, problem.oh)
            or c.consumers not in (1, 2) or c.lo_copy and not c.split or c.lo_copy and problem.x_nhwc):
        raise ValueError(f"Convolution2D wgmma tile {c.pm}x{c.qn} (box {c.bw}{', lo copy' if c.lo_copy else ''}): "
                         f"choose tile_size {' or '.join(map(str, WIDTHS[c.split]))} and block_size 256 (one consumer) or 0")
    if not b.nchw and (not problem.y_nhwc or c.bw != problem.ow and (c.bw % 2 or c.imgs > 1)):
        raise ValueError(f"Convolution2D wgmma pixel box {c.bw}x{b.bh}x{c.imgs} (QN {c.qn}) takes whole output rows "
                         f"({problem.ow} columns) or an even part of them, of a channels_last y only: choose "
                         "tile_size 64 or 128")


def plan(problem, choice: WgmmaConvChoice, target: Target) -> ConvPlan:
    """Weight pack, NHWC conversion (NCHW input only) and the persistent wgmma launch; workspace: the maps, the
    input copies, then the packed weight (problem.ConvPlan: an operator packs it once, into memory it keeps)."""
    reason = why_not(problem, target, bool(choice.fold))
    if reason:
        raise ValueError(f"Convolution2D cannot run on the wgmma kernel: {reason}")
    if choice.fold not in ("", "view", "smem") or choice.fold == "smem" and not folding.builds(
            problem, choice.bw, choice.pixel_box.bh, choice.imgs):
        raise ValueError(f"Convolution2D wgmma build {choice.label} folds the stem as {choice.fold!r}: use 'view', or "
                         "'smem' with a box of one image whose input rows fit one TMA box (wgmma.fold_choices)")
    p, c = folded(problem) if choice.fold else problem, choice
    _check(p, c)
    if c.rtiles and c.rtiles != residual_tiles(p, c.split):
        raise ValueError(f"Convolution2D wgmma build {c.label} stages {c.rtiles} epilogue operands by TMA, which this "
                         f"layer takes {residual_tiles(p, c.split)} of: build it for this layer (wgmma.choices)")
    if c.split and p.dtype != "float32":
        raise ValueError(f"Convolution2D precision='3xtf32' applies to float32; {p.dtype} runs on f16 / bf16 wgmma: "
                         "leave precision='tf32'")
    cp, eb, half = cpad(p), elem_bytes(p), p.dtype in HALF_DTYPES
    grid = min(tiles(p, c), target.sm_count)
    kt = folding.ktiles(problem, c.fold) if c.fold else p.kh       # weight rows per channel: k-tiles when folded
    wsize = p.k * kt * p.kw * cp * eb
    xsize = folding.copy_bytes(problem, eb) if c.fold else 0 if p.x_nhwc else p.n * p.h * p.w * cp * eb
    offs, top = [], cdiv(grid * MAP_BYTES, 1024) * 1024
    for size in (xsize, xsize if c.lo_copy else 0, wsize, wsize if c.split else 0):
        offs.append(top)
        top += cdiv(size, 1024) * 1024
    operands = ("x", "weight", "bias", "y", *epilogue.operand_names(p.epilogue))   # then the workspace
    ws = len(operands)
    x_nhwc, x_lo, w_hi, w_lo = (ptr(ws, o) for o in offs)
    if not c.split:
        w_lo = w_hi
    x_parts = (ptr(0),) if p.x_nhwc else (x_nhwc, x_lo) if c.lo_copy else (x_nhwc,)
    window = {"KH": p.kh, "KW": p.kw, "SPLIT": c.split, "scalar_t": "float", "unroll": c.unroll,
              **({"ELEM": storage_t(p.dtype)} if half else {})}
    tag = f"{TAGS[p.dtype]}_k{p.kh}x{p.kw}" + ("" if half else "_3xtf32" if c.split else "_tf32")
    wpack = pipeline.make_spec(TEMPLATE, "conv2d_wpack", f"conv2d_wpack_{tag}", {**window, "kernel": "wpack"},
                              c.opts, arch_specific=True)
    total = p.k * p.kh * p.kw * cp
    launches = [KernelLaunch(wpack, (min(cdiv(total, 256), 1 << 20),), (256,),
                             (ptr(1), w_hi, w_lo, i32(p.c), i32(cp), i64(total)),
                             units="DRAM (weight pack)" if half else "FP32 cores (weight pack)")]
    if c.fold:
        launches = [folding.weight_launch(problem, c.fold, window, cp, w_hi, c.opts, TAGS[p.dtype]),
                    folding.input_launch(problem, window, x_nhwc, c.opts, TAGS[p.dtype])]
    elif not p.x_nhwc:
        nhwc = pipeline.make_spec(TEMPLATE, "conv2d_nhwc", f"conv2d_nhwc_{tag}" + ("_locopy" if c.lo_copy else "")
                                 + ("" if c.pad else "_nopad") + ("" if c.unroll else "_nounroll"),
                                 {**window, "kernel": "nhwc", "PAD": 1 if c.pad else 0, "KH": 1, "KW": 1,
                                  "LO_COPY": c.lo_copy}, c.opts, arch_specific=True)
        launches.append(KernelLaunch(nhwc, (p.n * p.h, cdiv(p.w, 32), cp // 32), (256,),
                                     (ptr(0), *x_parts, i32(p.c), i32(cp), i32(p.h), i32(p.w)),
                                     units="DRAM (NCHW -> NHWC copy)"))
    vec = 2 if c.coalesce and p.aligned and p.ow % 2 == 0 and not p.y_nhwc else 1
    params = {**window, "kernel": "conv", "QN": c.qn, "BW": c.bw, "BH": c.pixel_box.bh, "IMGS": c.imgs,
              "FULL_ROWS": p.y_nhwc and c.bw == p.ow, "STAGES": c.stages, "CONSUMERS": c.consumers,
              "LO_COPY": c.lo_copy, "SH": p.sh, "SW": p.sw, "PH": p.ph, "PW": p.pw, "DH": p.dh, "DW": p.dw,
              "bias": p.bias, "relu": p.relu, "VEC_OUT": vec, "CONSUMER_REGS": REGS[c.consumers],
              "Y_NHWC": p.y_nhwc, "DEBIAS": DEBIAS if p.x_nhwc and not c.split and not half else 0,
              "RTILES": tuple(i for i, kind in enumerate(epilogue.kinds_of(p.epilogue)) if kind == "full") if c.rtiles else (),
              "YSTORE": y_by_tma(p, c)}
    if c.fold:
        at = 4 * 128 + (staging_bytes(c.consumers, c.qn) if staged(p) else 0)    # past the map scratch, staging
        params.update(folding.params(problem, c.fold, c.bw, c.pixel_box.bh, at), KH=kt)
    epilogue.add(params, p.epilogue, "float", staged=bool(c.rtiles))
    span_c = p.c      # folded: the window's halves
    name = (f"conv2d_{tag}_s{p.sh}x{p.sw}_p{p.ph}x{p.pw}" + (f"_d{p.dh}x{p.dw}" if (p.dh, p.dw) != (1, 1) else "")
            + ("_bias" if p.bias else "") + ("_relu" if p.relu else "") + f"_{c.label}_v{vec}"
            + ("_ytma" if params["YSTORE"] else "")
            + (f"_f{params['FOLD_STEP']}x{params['FOLD_TAIL']}x{span_c}" if c.fold else "") + p.layout_tag
            + epilogue.tag(p.epilogue))
    spec = pipeline.make_spec(TEMPLATE, "conv2d_wgmma", name, params, c.opts, arch_specific=True)
    args = (*x_parts, w_hi, w_lo, *((ptr(2),) if p.bias else ()), ptr(3), ptr(ws), i32(p.n), i32(cp),
            i32(p.c if p.x_nhwc or c.fold else cp), i32(p.h), i32(p.w), i32(p.k), i32(p.oh), i32(p.ow),
            *epilogue.args(p.epilogue, 4))
    launches.append(KernelLaunch(spec, (grid,), (c.threads,), args,
                                 shared=smem_bytes(c.consumers, c.qn, c.stages, c.split, staged(p), c.rtiles)
                                 + (folding.extra_smem(problem, c.bw, c.pixel_box.bh) if c.fold == "smem" else 0),
                                 units=UNITS[p.dtype] if half else UNITS[c.split]))
    return ConvPlan(tuple(launches), operands, workspace=top, choice=c.label, pack_launches=1, packed_at=offs[2])
