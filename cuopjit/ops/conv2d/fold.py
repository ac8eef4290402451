"""The 16-bit stem on Hopper tensor cores: a layer of too few input channels for a k-tile of its own (ResNet's 7x7/2
stem, C = 3) with its window's columns folded into the channels, so that the wgmma kernel (wgmma.py) runs it.

A k-tile is 64 channels of one window tap; C = 3 would fill 3 of them (5%). Folding the KW columns of each window
row into the channels makes the layer a KH x 1 convolution of stride (SH, 1) over an input of OW columns and
KW * C channels (21 of 64: 33%):

    X'[n][ih][ow][s * C + c] = x[n][ih][ow * SW + s * DW - PW][c]      (0 outside the image, past KW * C)
    W'[o][r][s * C + c]      = W[o][c][r][s]

both made by conv2d_wgmma_prep.cuh.jinja ("fold" per call, 16-byte stores of 8 channels, from an NCHW or a
channels_last x; "wfold" once per set_weight). The wgmma plan of the folded layer then runs unchanged, X' as its
NHWC copy. Layers taken: float16 / bfloat16, sm_90, one group, KW > 1, C under half a k-tile and KW * C within one.
"""
from __future__ import annotations

import dataclasses

from ...build import pipeline
from ...run.plan import KernelLaunch, i32, i64, ptr
from ..base import HALF_DTYPES, cdiv

BK = 64                   # halves per k-tile (one 128-byte row)


def foldable(problem, capability: int) -> bool:
    """Whether folding the window's columns into the channels lets the wgmma kernel take this layer."""
    p = problem
    return (p.dtype in HALF_DTYPES and capability == 90 and p.groups == 1 and p.kw > 1 and 2 * p.c < BK
            and p.c * p.kw <= BK)


def folded(problem):
    """The layer the wgmma kernel runs: a KH x 1 window, stride (SH, 1), over OW columns of KW * C channels (its
    input the folded copy, which the plan makes as an NCHW layer's NHWC copy)."""
    p = problem
    return dataclasses.replace(p, c=p.c * p.kw, w=p.ow, kw=1, sw=1, pw=0, dw=1, x_nhwc=False, x_aligned=True)


def weight_launch(problem, window: dict, cp: int, dest, opts, tag: str) -> KernelLaunch:
    """W -> W' [O][KH][cp] (16 bits, zero past KW * C)."""
    p, total = problem, problem.k * problem.kh * cp
    spec = pipeline.make_spec("conv2d/conv2d_wgmma.cu.jinja", "conv2d_wfold", f"conv2d_wfold_{tag}_kw{p.kw}",
                              {**window, "kernel": "wfold", "KW0": p.kw}, opts, arch_specific=True)
    return KernelLaunch(spec, (min(cdiv(total, 256), 1 << 20),), (256,), (ptr(1), dest, i32(p.c), i32(cp), i64(total)),
                        units="DRAM (weight pack, columns folded)")


def input_launch(problem, window: dict, cp: int, dest, opts, tag: str) -> KernelLaunch:
    """x -> X' [N][H][OW][cp], 8 channels (16 bytes) per thread."""
    p = problem
    vectors = p.n * p.h * p.ow * cp // 8
    spec = pipeline.make_spec("conv2d/conv2d_wgmma.cu.jinja", "conv2d_fold",
                              f"conv2d_fold_{tag}_c{p.c}_kw{p.kw}_s{p.sw}_p{p.pw}_d{p.dw}" + ("_xnhwc" if p.x_nhwc else ""),
                              {**window, "kernel": "fold", "KW0": p.kw, "SW0": p.sw, "PW0": p.pw, "DW0": p.dw,
                               "C0": p.c, "CP0": cp, "X_NHWC": p.x_nhwc}, opts, arch_specific=True)
    return KernelLaunch(spec, (min(cdiv(vectors, 256), 1 << 20),), (256,),
                        (ptr(0), dest, i32(p.h), i32(p.w), i32(p.ow), i64(vectors)),
                        units="DRAM (window columns folded into channels)")
