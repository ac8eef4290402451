"""Split-K for the implicit GEMM (templates/conv2d/conv2d.cu.jinja, SPLIT_K): layers with too few output tiles to
fill the GPU (batch 1; 7 x 7 and 14 x 14 images) cut their k-tiles into slices along grid z.

Slice z writes its raw sums to the workspace, [npix][K] for a channels_last y (or [K][npix] for an NCHW y of one
image: both are y's own element order), and the GEMM family's split reduction (cuopjit/ops/gemm/splitk.py) adds
the slices in a fixed order and applies the epilogue once: bias / relu as gemm_route.own_epilogue spells them
(the bias per channel: a column of [npix][K], a row of [K][npix]), a user epilogue with its per-channel and
per-pixel operands swapped the same way. Layers of one group only.
"""
from __future__ import annotations

import numpy as np

from ...expr import PER_COLUMN, PER_ROW
from ...run.plan import Arg, KernelLaunch
from ...target import Target
from .. import epilogue
from ..base import cdiv
from ..gemm import splitk as gemm_splitk
from .gemm_route import own_epilogue
from .problem import ConvProblem
from .shapes import Shape

MIN_KTILES = 8          # k-tiles a slice keeps at least (each slice re-reads its output tile's worth of partials)
FILL = 0.5              # split only where the unsplit grid leaves more than half of the SMs without a block
_SWAP = {PER_ROW: PER_COLUMN, PER_COLUMN: PER_ROW}


def allowed(problem: ConvProblem) -> bool:
    """One group, and y channels_last or a single NCHW image (the slices' layout is then y's)."""
    return problem.groups == 1 and (problem.y_nhwc or problem.n == 1)


def slices(problem: ConvProblem, shape: Shape, ktiles: int, target: Target) -> int:
    """How many k-slices fill the GPU with blocks of `shape` (1: the unsplit grid fills it, or too few k-tiles)."""
    if not allowed(problem):
        return 1
    blocks = cdiv(problem.kg, shape.bm) * cdiv(problem.n * problem.oh * problem.ow, shape.bn)
    if blocks > FILL * target.sm_count:
        return 1
    return max(1, min(cdiv(target.sm_count, blocks), ktiles // MIN_KTILES))


def chunk(ktiles: int, splits: int) -> tuple[int, int]:
    """(k-tiles per slice, slices) of `splits` requested: no slice empty."""
    per = cdiv(ktiles, splits)
    return per, cdiv(ktiles, per)


def reduce(problem: ConvProblem, splits: int, parts: Arg, out: Arg, target: Target, units: str, unroll: bool,
           opts) -> KernelLaunch:
    """The launch that adds the slices at `parts` into y (`out`) through the layer's epilogue."""
    p = problem
    key = own_epilogue(p)
    if p.y_nhwc:
        rows, cols = p.n * p.oh * p.ow, p.k
    else:
        rows, cols = p.k, p.oh * p.ow
        if key:
            expr, kinds = epilogue.split(key)
            key = epilogue.make_key(expr, {name: _SWAP.get(kind, kind) for name, kind in kinds})
    extra = epilogue.args(p.epilogue, 4) if p.epilogue else epilogue.args(key, 2)     # the bias is operand 2
    return gemm_splitk.reduce_launch(np.dtype(p.dtype), parts, out, rows, cols, cols, splits, 0.0, target, units,
                                     unroll, opts, key, extra)
