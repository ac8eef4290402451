"""Conv2D on Hopper tensor cores (templates/conv2d/conv2d_wgmma.cu.jinja): wgmma TF32 or 3xTF32 implicit GEMM.

Launches: the weight packed to [O][KH][KW][CPAD] (rounded to TF32; 3xTF32 adds a lo = tf32(w - hi) copy:
a Convolution2D runs it once per set_weight, problem.ConvPlan), an NCHW input converted to an internal NHWC
copy (rounded to TF32; a channels_last input is read as it is, no copy: the tensor cores truncate it to
TF32), then the persistent wgmma kernel, whose pixel operand is one 4-D TMA box per k-tile (channels x BW x
BH of one image, the stride as the tensor map's element strides; TMA's zero fill outside the image is the
padding), writing NCHW or channels_last y. 3xTF32 splits the input two ways (`lo_copy`): NCHW layers with
much work per input value (out_channels * kh * kw / strides >= LO_COPY_WORK) get a second NHWC copy of
lo = tf32(x - hi) read by TMA beside hi; the others (and every channels_last input) keep x as it is and the
kernel's producer warpgroup writes each tile's lo in shared memory (half the copy traffic; the seed layer:
kernel 2.23 ms instead of 1.80 ms, copy 0.31 instead of 0.48 ms; ResNet's 1x1 256 -> 64: 0.15 instead of
0.21 ms in all). Layers it takes: float32, sm_90, one group, at least half of the padded channels real
(CPAD = 32-multiple), a channels_last x with C a multiple of 4, and a pixel tile that wastes at most
MAX_WASTE of the output; the others stay on the mma.sync kernel.

How JITConfig reaches this kernel: tile_size 0 lets the heuristic choose the pixel tile QN (`score`: the
last wave's fill, the padded pixels and the tile's own rate; 256 for TF32 and 128 for 3xTF32 on large images),
64 / 128 name it; block_size 0 or 384 runs two consumer
warpgroups (128 output channels per tile; 0 takes one for layers of <= 64 channels), 256 one (64); TF32
on NCHW input runs here only where out_channels * kh * kw >= MIN_WORK (else mma.sync is faster than the copy);
precision "3xtf32" the split products;
enable_loop_unroll the prepass loops; enable_shared_memory_opt the transpose tile's row padding;
enable_memory_coalescing float2 output stores where rows are even.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...build import pipeline
from ...run.plan import KernelLaunch, i32, i64, ptr
from ...target import Target
from .. import epilogue
from ..base import cdiv
from ..gemm.wgmma import Warpgroups, staging_bytes
from .problem import ConvPlan

TEMPLATE = "conv2d/conv2d_wgmma.cu.jinja"
BK = 32
MAX_STAGES = 6
MIN_WORK = 128             # TF32 runs here when out_channels * kh * kw >= this: each converted input value
                           # then feeds >= 256 flops (ResNet's 1x1 256 -> 64: 64, faster on mma.sync)
LO_COPY_WORK = 512         # 3xTF32 with a lo copy of the input from this out_channels * kh * kw / strides
MAX_WASTE = 2.0             # computed pixels / output pixels at most this (else the mma.sync kernel)
SIZE = {False: {256: 1.0, 128: 0.95, 64: 0.85}, True: {128: 1.0, 64: 0.8}}   # relative rate of each pixel tile
WIDTHS = {False: (256, 128, 64), True: (128, 64)}   # pixel tiles QN (3xTF32: acc + total in registers)
BLOCKS = {0: 2, 384: 2, 256: 1}                     # block_size -> consumer warpgroups
REGS = {2: 232, 1: 240}                             # setmaxnreg of the consumers
MAP_BYTES = 512                                     # up to three 128-byte tensor maps per block
UNITS = {False: "TF32 tensor cores (wgmma)", True: "TF32 tensor cores, 3 products (wgmma 3xTF32)"}


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

    @property
    def label(self) -> str:
        return (f"wgmma_t{self.pm}x{self.qn}_b{self.bw}x{self.qn // self.bw}_s{self.stages}"
                + ("_3xtf32" if self.split else "") + ("_locopy" if self.lo_copy else "")
                + ("" if self.coalesce else "_scalar")
                + ("" if self.pad else "_nopad") + ("" if self.unroll else "_nounroll"))


def cpad(problem) -> int:
    """Channels of the NHWC copy: a multiple of BK (one 128-byte swizzle row per pixel and k-tile)."""
    return cdiv(problem.c, BK) * BK


def box(problem, qn: int) -> tuple[int, float] | None:
    """(BW, waste) of the pixel box of qn pixels that computes the fewest pixels, the widest on ties
    (None: no box; a TMA box spans at most 256 elements, BW * stride_w and BH * stride_h)."""
    best = None
    for bw in (256, 128, 64, 32, 16, 8):
        if bw > qn or bw * problem.sw > 256 or qn // bw * problem.sh > 256:
            continue
        waste = cdiv(problem.ow, bw) * bw * cdiv(problem.oh, qn // bw) * (qn // bw) / (problem.ow * problem.oh)
        if best is None or waste < best[1] - 1e-9:
            best = (bw, waste)
    return best


def why_not(problem, target: Target) -> str | None:
    """Why this layer cannot run on the wgmma kernel (None: it can)."""
    if problem.dtype != "float32":
        return "wgmma TF32 is float32 only"
    if target.capability != 90:
        return f"wgmma needs an sm_90 GPU, not {target.arch}"
    if max(problem.sh, problem.sw) > 8:
        return f"stride {problem.sh} x {problem.sw}: TMA element strides are at most 8"
    if problem.groups != 1:
        return "grouped convolution"
    if cpad(problem) > 2 * problem.c:
        return f"{problem.c} channels would be padded to {cpad(problem)}"
    if problem.x_nhwc and (problem.c % 4 or not problem.x_aligned):
        return f"TMA reads a channels_last x only with C a multiple of 4 ({problem.c}) and x 16-byte aligned"
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


def score(problem, qn: int, box_: tuple[int, float], consumers: int, split: bool, target: Target) -> float:
    """How well a pixel tile of qn pixels (box BW, waste) serves this layer: the last wave's fill x the useful share
    of the computed pixels x the tile width's own rate (SIZE). H100, ResNet-50 at batch 32: within 5% of the best
    tile on every layer but one (3x3 64 -> 64 at 56^2, 3xTF32: QN 128 5% behind QN 64)."""
    bw, waste = box_
    t = cdiv(problem.k, 64 * consumers) * cdiv(problem.ow, bw) * cdiv(problem.oh, qn // bw) * problem.n
    return t / (cdiv(t, target.sm_count) * target.sm_count) / waste * SIZE[split][qn]


def tiles(problem, choice: WgmmaConvChoice) -> int:
    """Block tiles of the persistent grid: channel tiles x pixel boxes x images."""
    return (cdiv(problem.k, choice.pm) * cdiv(problem.ow, choice.bw) * cdiv(problem.oh, choice.qn // choice.bw)
            * problem.n)


def smem_bytes(consumers: int, qn: int, stages: int, split: bool, staged: bool = False) -> int:
    """Dynamic shared memory: stages of (W, X) k-tiles (hi and lo with 3xTF32), barriers, maps, alignment;
    `staged`: a user epilogue's output staging past the maps (as the GEMM's)."""
    return (stages * (2 if split else 1) * (64 * consumers + qn) * BK * 4 + 24 * stages + 4 * 128 + 128 + 1024
            + (staging_bytes(consumers, qn) if staged else 0))


def choices(problem, cfg, target: Target, split: bool) -> list[WgmmaConvChoice]:
    """The named or heuristic build first; with tile and block free, the other pixel tiles follow."""
    consumers = BLOCKS[cfg.block_size] if cfg.block_size else (1 if problem.k <= 64 else 2)
    widths = [q for q in WIDTHS[split] if not cfg.tile_size or q == cfg.tile_size]
    boxes = {q: box(problem, q) or (0, MAX_WASTE + 1) for q in widths}
    fits = [q for q in widths if boxes[q][1] <= MAX_WASTE] or [min(widths, key=lambda q: boxes[q][1])]
    order = sorted(fits, key=lambda q: -score(problem, q, boxes[q], consumers, split, target))
    lo_copy = (split and not problem.x_nhwc
               and problem.k * problem.kh * problem.kw >= LO_COPY_WORK * problem.sh * problem.sw)
    switches = {"split": split, "lo_copy": lo_copy, "unroll": cfg.enable_loop_unroll,
                "pad": cfg.enable_shared_memory_opt,
                "coalesce": cfg.enable_memory_coalescing, "opts": pipeline.compile_opts(cfg)}
    free = not cfg.tile_size and not cfg.block_size
    return [build(consumers, q, boxes[q][0], target, staged=bool(problem.epilogue), **switches)
            for q in (order if free else order[:1])]


def build(consumers: int, qn: int, bw: int, target: Target, split: bool, staged: bool = False,
          **switches) -> WgmmaConvChoice:
    """A build with as many stages as fit one block's shared memory (beside a user epilogue's staging)."""
    fit = [s for s in range(2, MAX_STAGES + 1) if smem_bytes(consumers, qn, s, split, staged) <= target.smem_per_block]
    return WgmmaConvChoice(consumers, qn, bw, fit[-1], split=split, **switches)


def plan(problem, choice: WgmmaConvChoice, target: Target) -> ConvPlan:
    """Weight pack, NHWC conversion (NCHW input only) and the persistent wgmma launch; workspace: the maps, the
    input copies, then the packed weight (problem.ConvPlan: an operator packs it once, into memory it keeps)."""
    reason = why_not(problem, target)
    if reason:
        raise ValueError(f"Convolution2D cannot run on the wgmma kernel: {reason}")
    p, c = problem, choice
    if (c.qn not in WIDTHS[c.split] or c.qn % c.bw or c.consumers not in (1, 2) or c.lo_copy and not c.split
            or c.lo_copy and p.x_nhwc):
        raise ValueError(f"Convolution2D wgmma tile {c.pm}x{c.qn} (box {c.bw}{', lo copy' if c.lo_copy else ''}): "
                         f"choose tile_size {' or '.join(map(str, WIDTHS[c.split]))} and block_size 256 or 384")
    cp = cpad(p)
    grid = min(cdiv(p.k, c.pm) * cdiv(p.ow, c.bw) * cdiv(p.oh, c.qn // c.bw) * p.n, target.sm_count)
    wsize = p.k * p.kh * p.kw * cp * 4
    xsize = 0 if p.x_nhwc else p.n * p.h * p.w * cp * 4
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
    window = {"KH": p.kh, "KW": p.kw, "SPLIT": c.split, "scalar_t": "float", "unroll": c.unroll}
    tag = f"f32_k{p.kh}x{p.kw}" + ("_3xtf32" if c.split else "_tf32")
    wpack = pipeline.make_spec(TEMPLATE, "conv2d_wpack", f"conv2d_wpack_{tag}", {**window, "kernel": "wpack"},
                              c.opts, arch_specific=True)
    total = p.k * p.kh * p.kw * cp
    launches = [KernelLaunch(wpack, (min(cdiv(total, 256), 1 << 20),), (256,),
                             (ptr(1), w_hi, w_lo, i32(p.c), i32(cp), i64(total)), units="FP32 cores (weight pack)")]
    if not p.x_nhwc:
        nhwc = pipeline.make_spec(TEMPLATE, "conv2d_nhwc", f"conv2d_nhwc_{tag}" + ("_locopy" if c.lo_copy else "")
                                 + ("" if c.pad else "_nopad") + ("" if c.unroll else "_nounroll"),
                                 {**window, "kernel": "nhwc", "PAD": 1 if c.pad else 0, "KH": 1, "KW": 1,
                                  "LO_COPY": c.lo_copy}, c.opts, arch_specific=True)
        launches.append(KernelLaunch(nhwc, (p.n * p.h, cdiv(p.w, 32), cp // 32), (256,),
                                     (ptr(0), *x_parts, i32(p.c), i32(cp), i32(p.h), i32(p.w)),
                                     units="DRAM (NCHW -> NHWC copy)"))
    vec = 2 if c.coalesce and p.aligned and p.ow % 2 == 0 and not p.y_nhwc else 1
    params = {**window, "kernel": "conv", "QN": c.qn, "BW": c.bw, "STAGES": c.stages, "CONSUMERS": c.consumers,
              "LO_COPY": c.lo_copy, "SH": p.sh, "SW": p.sw, "PH": p.ph, "PW": p.pw, "DH": p.dh, "DW": p.dw,
              "bias": p.bias, "relu": p.relu, "VEC_OUT": vec, "CONSUMER_REGS": REGS[c.consumers],
              "Y_NHWC": p.y_nhwc}
    epilogue.add(params, p.epilogue, "float")
    name = (f"conv2d_{tag}_s{p.sh}x{p.sw}_p{p.ph}x{p.pw}" + (f"_d{p.dh}x{p.dw}" if (p.dh, p.dw) != (1, 1) else "")
            + ("_bias" if p.bias else "") + ("_relu" if p.relu else "") + f"_{c.label}_v{vec}" + p.layout_tag
            + epilogue.tag(p.epilogue))
    spec = pipeline.make_spec(TEMPLATE, "conv2d_wgmma", name, params, c.opts, arch_specific=True)
    args = (*x_parts, w_hi, w_lo, *((ptr(2),) if p.bias else ()), ptr(3), ptr(ws), i32(p.n), i32(cp),
            i32(p.c if p.x_nhwc else cp), i32(p.h), i32(p.w), i32(p.k), i32(p.oh), i32(p.ow),
            *epilogue.args(p.epilogue, 4))
    launches.append(KernelLaunch(spec, (grid,), (c.threads,), args,
                                 shared=smem_bytes(c.consumers, c.qn, c.stages, c.split, bool(p.epilogue)),
                                 units=UNITS[c.split]))
    return ConvPlan(tuple(launches), operands, workspace=top, choice=c.label, pack_launches=1, packed_at=offs[2])
