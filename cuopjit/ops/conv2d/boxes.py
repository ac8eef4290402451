"""The pixel boxes of Convolution2D's wgmma kernel (conv2d/wgmma.py): which output pixels one block tile computes,
read as one 4-D TMA box of the NHWC input per k-tile (templates/conv2d/conv2d_wgmma.cu.jinja).

A box is BW columns x BH rows of IMGS consecutive images; the tile computes QN >= BW * BH * IMGS pixels (the wgmma
N, a multiple of 8; rows past the box's pixels are computed and never stored). Two kinds:

    grouped   BW a multiple of 8 and QN = BW * BH = 64, 128 or 256 (`box`): every layout of y
    exact     whole output rows (BW = OW), any BH, and where a box holds a whole image, IMGS images (the box's 4th
              extent), or an even part of the rows (BW an even divisor of OW, at least 8): QN = BW * BH * IMGS
              rounded up to 8; channels_last y only (whole rows: the box's pixels are consecutive rows of y, its
              stores add q to the box's first pixel; an even part: an accumulator pair shares a row, as in grouped
              boxes). The NCHW stores take grouped boxes only. (Odd parts of rows would need each stored pixel's
              own division and 64-bit products: that index arithmetic, tried on grouped boxes, made one-consumer
              tiles 20-57% slower on the H100.)

A tile of one consumer warpgroup (layers of <= 64 output channels) takes exact boxes of at most ONE_CONSUMER_QN
pixels, and of equal scores the narrowest (H100, 3x3 64 -> 64 at 56^2, batch 32, in TF32: 8 x 14 0.0530 ms, 28 x 4
0.0533, 56 x 2 0.0568, the 8 x 8 box 0.0597, QN 200 14% behind it, cuDNN 0.0544; 1x1 64 -> 64 in 3xTF32: QN 112
10% behind QN 128). `score` ranks them: the last wave's fill x the useful share of the computed pixels x
the tile width's own rate a - b / QN (RATE: TF32 1.0, 0.95, 0.85 at QN 256, 128, 64 as measured on the H100 for
the grouped boxes, 3xTF32 1.0, 0.8 at 128, 64; between them the same curve). A 14 x 14 output: QN 200 (196
pixels) in place of 256 (31% of it padding); a 7 x 7 one: 4 images in QN 200 in place of 64-pixel boxes of 49.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..base import cdiv

RATE = {False: (1.05, 12.8), True: (1.2, 25.6)}     # (a, b) of a pixel tile's rate a - b / QN
MIN_QN = 56                                         # exact boxes of fewer pixels are not tried (a 7 x 7 image: 49)
ONE_CONSUMER_QN = {False: 112, True: 64}            # the widest exact box of a one-consumer tile (3xTF32: True)


@dataclass(frozen=True)
class Box:
    """A pixel box: bw columns x bh rows of imgs images, computed as a tile of qn pixels."""
    qn: int
    bw: int
    bh: int
    imgs: int = 1

    @property
    def pixels(self) -> int:
        return self.bw * self.bh * self.imgs

    @property
    def nchw(self) -> bool:
        """Whole 8-column groups, one image, QN its pixels: a box the NCHW stores take."""
        return self.bw % 8 == 0 and self.imgs == 1 and self.qn == self.pixels


def box(problem, qn: int) -> tuple[int, float] | None:
    """(BW, waste) of the grouped box of qn pixels that computes the fewest pixels, the widest on ties
    (None: no box; a TMA box spans at most 256 elements, BW * stride_w and BH * stride_h)."""
    best = None
    for bw in (256, 128, 64, 32, 16, 8):
        if bw > qn or bw * problem.sw > 256 or qn // bw * problem.sh > 256:
            continue
        waste = cdiv(problem.ow, bw) * bw * cdiv(problem.oh, qn // bw) * (qn // bw) / (problem.ow * problem.oh)
        if best is None or waste < best[1] - 1e-9:
            best = (bw, waste)
    return best


def count(problem, b: Box) -> int:
    """Boxes covering the batch's output."""
    return cdiv(problem.ow, b.bw) * cdiv(problem.oh, b.bh) * cdiv(problem.n, b.imgs)


def waste(problem, b: Box) -> float:
    """Computed pixels (QN per box) over output pixels."""
    return count(problem, b) * b.qn / (problem.n * problem.oh * problem.ow)


def candidates(problem, widths: list[int], exact: bool, top: int = 0) -> list[Box]:
    """The grouped box of each QN in `widths`, then (with `exact`) the exact boxes of QN at most `top` (0:
    max(widths))."""
    p, found = problem, []
    for q in widths:
        b = box(p, q)
        if b:
            found.append(Box(q, b[0], q // b[0]))
    if not exact:
        return found
    top = top or max(widths)
    for bw in [p.ow] + [d for d in range(p.ow // 2, 7, -1) if p.ow % d == 0 and d % 2 == 0]:
        if bw * p.sw > 256:
            continue
        for bh in range(min(p.oh, 256 // p.sh, top // bw), 0, -1):
            for imgs in range(min(p.n, 256, top // (bw * bh)) if (bw, bh) == (p.ow, p.oh) else 1, 0, -1):
                b = Box(cdiv(bw * bh * imgs, 8) * 8, bw, bh, imgs)
                if MIN_QN <= b.qn <= top and b not in found:
                    found.append(b)
    return found


def score(problem, b: Box, consumers: int, split: bool, sm_count: int) -> float:
    """How well box `b` serves this layer: the last wave's fill x the useful share of the computed pixels x the
    tile width's rate. Grouped boxes on the H100, ResNet-50 at batch 32: within 5% of the best tile on every layer
    but one (3x3 64 -> 64 at 56^2, 3xTF32: QN 128 5% behind QN 64)."""
    t = cdiv(problem.k, 64 * consumers) * count(problem, b)
    a, slope = RATE[split]
    return t / (cdiv(t, sm_count) * sm_count) / waste(problem, b) * (a - slope / b.qn)
