"""The 16-bit stem on Hopper tensor cores: a layer of too few input channels for a k-tile of its own (ResNet's 7x7/2
stem, C = 3) with its window's columns folded into the channels by the TMA view, so that the wgmma kernel (wgmma.py)
runs it as a KH x 1 layer.

A k-tile is 64 channels of one window tap; C = 3 would fill 3 of them (5%). The window's SPAN = (KW - 1) * DW + 1
columns of one input row are SPAN consecutive pixels, so with the input copied once into a padded NHWC buffer

    Xp[n][ih][j][c] = x[n][ih][j - PW][c]     (zero outside the image and for c >= C),  j < WP, c < CP

(CP the fewest channels >= C with SW * CP halves a multiple of 8: consecutive windows 16 bytes apart, as TMA's
strides must be; 4 for the stride-2 stem), output column ow's folded channels k = p * CP + c are the run of
SPAN * CP halves of Xp's row starting at pixel SW * ow. The wgmma kernel reads them as a tensor map of overlapping
rows: dimension 0 the SPAN * CP halves of one window (TMA's zero fill past them, up to the k-tile's 64), dimension 1
the output columns SW * CP halves apart, then rows and images as usual:

    X'[n][ih][ow][k] = Xp[n][ih][SW * ow + k / CP][k % CP]   (k < SPAN * CP, else 0)
    W'[o][r][k]      = W[o][c][r][p / DW]  for k = p * CP + c, p % DW == 0, p < SPAN, c < C   (else 0)

The copy ("fold", conv2d_wgmma_prep.cuh.jinja: 16-byte stores, from an NCHW or a channels_last x) is CP / C of x's
bytes (4/3 for the stem; the earlier copy of the folded channels themselves was 10.7x); W' is made once per
set_weight ("wfold"). Layers taken: float16 / bfloat16, sm_90, one group, KW > 1, C under half a k-tile and
SPAN * CP within one (3 -> 64 7x7/2, 3 -> 32 3x3/2, 1 -> 16 5x5/1, ...).

Two ways to read it (`mode`): "view", the heuristic's pick, and "smem", an auto-tuning candidate
(wgmma.fold_choices). H100, batch 32, 3 -> 64 7x7/2 at 224^2, channels_last, cuDNN 90 us in float16, 228 us in
bfloat16; times per kernel in either dtype:
    "view"  TMA reads X' as above, one k-tile per window row: KH k-tiles of SPAN * CP real halves in 64, one
            overlapping 56-byte TMA row per pixel and window row. The conv 122 us, the copy 10 us: 135 us in all
            (NCHW x 130), where the copy of X' itself took conv 89 + copy 56 (NCHW x 92 + 78). Every pixel box
            timed the same (135.4-136 us): the kernel is bound per pixel (its TMA rows, the one consumer
            warpgroup's epilogue), not by the tile.
    "smem"  the producer warpgroup's thread 0 loads the tile's patch of Xp once (its input rows x the box's columns
            and the windows' overhang, 128-byte swizzled blocks of 64 halves) and its warps 1-3 build each k-tile's
            pixel operand from it in shared memory, TAPS window rows per k-tile in slots of SLOT halves (the stem:
            2 rows of 28 in 32, 4 k-tiles in place of 7); conv2d_wgmma_fold.cuh.jinja. Correct (both layouts,
            epilogues, compute-sanitizer clean) but slower: conv 143 us (NCHW x 130). Not profiled; likely the
            three builder warps' 16-byte copies (a loop of dependent shared-memory loads and stores, 40 registers)
            gate the k-loop, which the single consumer warpgroup cannot overlap with its epilogue. A tuning candidate
            until the builders keep up (more warps, unrolled copies) and the epilogue overlaps the next tile's k-loop.
"""
from __future__ import annotations

import dataclasses
import math

from ...build import pipeline
from ...run.plan import KernelLaunch, i32, i64, ptr
from ..base import HALF_DTYPES, cdiv

BK = 64                   # halves per k-tile (one 128-byte row)
ALIGN = 8                 # halves per 16 bytes: TMA's stride unit
ROW = 128                 # bytes of one swizzled row (a patch block's row: 64 halves)
MAX_ROWS = 256            # a TMA box's rows: the patch's input rows at most this


def span(problem) -> int:
    """Input columns one window covers."""
    return (problem.kw - 1) * problem.dw + 1


def channels(problem) -> int:
    """CP: the copy's channels, the fewest >= C that put consecutive windows (SW pixels) 16 bytes apart."""
    unit = ALIGN // math.gcd(problem.sw, ALIGN)
    return cdiv(problem.c, unit) * unit


def tail(problem) -> int:
    """Pixels of a copy row past SW * OW: the last window's overhang, rounded so that rows stay 16-byte multiples."""
    cp = channels(problem)
    unit = ALIGN // math.gcd(cp, ALIGN)
    return cdiv(max(span(problem) - problem.sw, 0), unit) * unit


def row(problem) -> int:
    """WP: pixels of one copy row (the padded columns every window reads)."""
    return problem.sw * problem.ow + tail(problem)


def foldable(problem, capability: int) -> bool:
    """Whether folding the window's columns into the channels lets the wgmma kernel take this layer."""
    p = problem
    return (p.dtype in HALF_DTYPES and capability == 90 and p.groups == 1 and p.kw > 1 and 2 * p.c < BK
            and span(p) * channels(p) <= BK)


def folded(problem):
    """The layer the wgmma kernel runs: a KH x 1 window, stride (SH, 1), over OW columns of SPAN * CP channels
    (read through the overlapping view of the copy, `view`)."""
    p = problem
    return dataclasses.replace(p, c=span(p) * channels(p), w=p.ow, kw=1, sw=1, pw=0, dw=1, x_nhwc=False,
                               x_aligned=True)


def slot(problem) -> int:
    """Halves one window row takes in a k-tile built in shared memory: SPAN * CP rounded to 16 bytes."""
    return cdiv(span(problem) * channels(problem), ALIGN) * ALIGN


def taps(problem, mode: str) -> int:
    """Window rows per k-tile: one in the view, BK // SLOT built in shared memory."""
    return BK // slot(problem) if mode == "smem" else 1


def ktiles(problem, mode: str) -> int:
    """k-tiles of one output tile (the weight's rows of 64 halves per output channel)."""
    return cdiv(problem.kh, taps(problem, mode))


def patch_rows(problem, bh: int) -> int:
    """Input rows of a patch: the box's BH output rows and the window's height."""
    return (bh - 1) * problem.sh + (problem.kh - 1) * problem.dh + 1


def patch_blocks(problem, bw: int) -> int:
    """Blocks of 64 halves across a patch: the box's BW output columns and the last window's overhang."""
    return cdiv((problem.sw * (bw - 1) + span(problem)) * channels(problem), BK)


def patch_bytes(problem, bw: int, bh: int) -> int:
    """Shared memory of one patch: its blocks of rows rounded to 8 (1024-byte swizzle atoms)."""
    return patch_blocks(problem, bw) * cdiv(patch_rows(problem, bh), 8) * 8 * ROW


def builds(problem, bw: int, bh: int, imgs: int) -> bool:
    """Whether a pixel box can be built in shared memory: one image, its patch one TMA box high."""
    return imgs == 1 and patch_rows(problem, bh) <= MAX_ROWS


def extra_smem(problem, bw: int, bh: int) -> int:
    """Shared memory the "smem" mode adds: the two patches, their four barriers and the 1024-byte alignment."""
    return 2 * patch_bytes(problem, bw, bh) + 32 + 1024


def params(problem, mode: str, bw: int = 0, bh: int = 0, at: int = 0) -> dict:
    """The wgmma kernel's parameters: the view's halves between output columns and a row's halves past
    SW * CP * OW; "smem" adds the real window height, the taps and slots per k-tile, the patch's blocks and rows,
    and `at`, the patch barriers' byte offset past the kernel's map scratch (the epilogue's staging before them)."""
    cp = channels(problem)
    found = {"FOLD": mode, "FOLD_STEP": problem.sw * cp, "FOLD_TAIL": tail(problem) * cp}
    if mode == "smem":
        found.update({"FOLD_KH": problem.kh, "FOLD_T": taps(problem, mode), "FOLD_SLOT": slot(problem),
                      "FOLD_SPANC": span(problem) * cp, "FOLD_NB": patch_blocks(problem, bw),
                      "FOLD_ROWS": patch_rows(problem, bh), "FOLD_AT": at})
    return found


def copy_bytes(problem, elem: int) -> int:
    """Bytes of the padded copy."""
    return problem.n * problem.h * row(problem) * channels(problem) * elem


def weight_launch(problem, mode: str, window: dict, cp: int, dest, opts, tag: str) -> KernelLaunch:
    """W -> W' [O][KT][cp] (16 bits; k-tile kt holds window rows kt * TAPS .. in slots of SLOT halves; zero where
    no tap or channel is)."""
    p, kt, t = problem, ktiles(problem, mode), taps(problem, mode)
    total, width = p.k * kt * cp, slot(p) if mode == "smem" else BK
    spec = pipeline.make_spec("conv2d/conv2d_wgmma.cu.jinja", "conv2d_wfold",
                              f"conv2d_wfold_{tag}_kw{p.kw}_cp{channels(p)}_d{p.dw}_t{t}x{width}",
                              {**window, "kernel": "wfold", "KW0": p.kw, "DW0": p.dw, "CP0": channels(p), "KT": kt,
                               "FT": t, "FSLOT": width}, opts, arch_specific=True)
    return KernelLaunch(spec, (min(cdiv(total, 256), 1 << 20),), (256,), (ptr(1), dest, i32(p.c), i32(cp), i64(total)),
                        units="DRAM (weight pack, columns folded)")


def input_launch(problem, window: dict, dest, opts, tag: str) -> KernelLaunch:
    """x -> Xp [N][H][WP][CP], 8 halves (16 bytes) per thread."""
    p, cp = problem, channels(problem)
    vectors = p.n * p.h * row(p) * cp // ALIGN
    spec = pipeline.make_spec("conv2d/conv2d_wgmma.cu.jinja", "conv2d_fold",
                              f"conv2d_fold_{tag}_c{p.c}_cp{cp}_p{p.pw}" + ("_xnhwc" if p.x_nhwc else ""),
                              {**window, "kernel": "fold", "PW0": p.pw, "C0": p.c, "CP0": cp, "X_NHWC": p.x_nhwc},
                              opts, arch_specific=True)
    return KernelLaunch(spec, (min(cdiv(vectors, 256), 1 << 20),), (256,),
                        (ptr(0), dest, i32(p.h), i32(p.w), i32(row(p)), i64(vectors)),
                        units="DRAM (x into padded channels_last rows)")
