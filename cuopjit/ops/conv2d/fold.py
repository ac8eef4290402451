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
"""
from __future__ import annotations

import dataclasses
import math

from ...build import pipeline
from ...run.plan import KernelLaunch, i32, i64, ptr
from ..base import HALF_DTYPES, cdiv

BK = 64                   # halves per k-tile (one 128-byte row)
ALIGN = 8                 # halves per 16 bytes: TMA's stride unit


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


def view(problem) -> dict:
    """The wgmma kernel's parameters for the view: halves between output columns, and a row's halves past
    SW * CP * OW."""
    cp = channels(problem)
    return {"FOLD": True, "FOLD_STEP": problem.sw * cp, "FOLD_TAIL": tail(problem) * cp}


def copy_bytes(problem, elem: int) -> int:
    """Bytes of the padded copy."""
    return problem.n * problem.h * row(problem) * channels(problem) * elem


def weight_launch(problem, window: dict, cp: int, dest, opts, tag: str) -> KernelLaunch:
    """W -> W' [O][KH][cp] (16 bits, zero where no tap or channel is)."""
    p, total = problem, problem.k * problem.kh * cp
    spec = pipeline.make_spec("conv2d/conv2d_wgmma.cu.jinja", "conv2d_wfold",
                              f"conv2d_wfold_{tag}_kw{p.kw}_cp{channels(p)}_d{p.dw}",
                              {**window, "kernel": "wfold", "KW0": p.kw, "DW0": p.dw, "CP0": channels(p)}, opts,
                              arch_specific=True)
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
