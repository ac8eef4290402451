"""1x1 convolutions of stride 1 on channels_last tensors as one GEMM, planned by the GEMM family.

With x and y channels_last (memory N, H, W, C and N, H, W, K) and a 1x1 window of stride 1, no padding and
one group, the convolution is exactly

    y[N*H*W, K] = x[N*H*W, C] @ W[K, C]^T        (x, W and y as they lie in memory: no im2col, no copy)

so the GEMM family's kernels run it as they are (`GemmProblem` A @ B^T, B = the weight: TF32 / 3xTF32 on the
wgmma kernel, mma.sync, DMMA or the SIMT kernels; cuopjit/ops/gemm/plans.py decides). The convolution's epilogue
carries over unchanged: a channel vector is the GEMM's per-column operand, a pixel's its per-row one, an
output-shaped (channels_last) operand the full one, and bias / relu become the epilogue
where(acc + bias > 0, acc + bias, 0) (the same NaN-to-zero ReLU as the convolution kernels'). Nothing is packed:
the weight as stored is the GEMM's B^T. `plan` renames the GEMM plan's operands to the convolution's.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...expr import PER_COLUMN, parse_epilogue
from ...run.plan import Arg, Plan, ptr
from ...target import Target
from .. import epilogue
from ..base import cdiv
from ..gemm import plans as gemm_plans, wgmma as gemm_wgmma
from ..gemm.problem import GemmChoice, GemmProblem
from .problem import ConvProblem
from .wgmma import DEBIAS

WGMMA_RATE = {(128, 256): 1.0, (128, 128): 0.8, (64, 256): 0.6, (128, 64): 0.7}   # relative rate of a tile
_OWN = {(True, True): "where(acc + bias > 0, acc + bias, 0)", (True, False): "acc + bias",
        (False, True): "where(acc > 0, acc, 0)"}


@dataclass(frozen=True)
class GemmRouteChoice:
    """A GEMM family choice (GemmChoice or WgmmaChoice) run on the convolution's tensors."""
    inner: Any

    @property
    def label(self) -> str:
        return "gemm_" + self.inner.label


def applies(problem: ConvProblem) -> bool:
    """A 1x1 / stride 1 / no padding / one group layer on channels_last x and y."""
    return problem.pointwise and problem.x_nhwc and problem.y_nhwc


def own_epilogue(problem: ConvProblem) -> str:
    """The epilogue key of bias / relu ('' for neither); a user epilogue's key as it is."""
    if problem.epilogue or not (problem.bias or problem.relu):
        return problem.epilogue
    text = _OWN[problem.bias, problem.relu]
    return epilogue.make_key(parse_epilogue(text), {"bias": PER_COLUMN} if problem.bias else {})


def gemm_problem(problem: ConvProblem) -> GemmProblem:
    """The GEMM of a pointwise channels_last layer: M = pixels, N = out_channels, K = in_channels."""
    p = problem
    r = 16 // (4 if p.dtype == "float32" else 8)
    aligned = p.aligned and p.x_aligned and p.c % r == 0 and p.k % r == 0
    return GemmProblem(p.dtype, p.n * p.h * p.w, p.k, p.c, False, True, aligned, 1.0, 0.0, p.c, p.c, p.k,
                       epilogue=own_epilogue(p))


def choices(problem: ConvProblem, cfg: Any, target: Target) -> list[GemmRouteChoice]:
    """The GEMM family's choices for this layer under `cfg`, the pick of `ranked` first."""
    found = [GemmRouteChoice(c) for c in gemm_plans.choices(gemm_problem(problem), cfg, target)]
    free = not cfg.tile_size and not cfg.block_size
    return ranked(problem, found, target) if free else found


def _tiles(g: GemmProblem, rows: int, cols: int) -> int:
    return cdiv(g.m, rows) * cdiv(g.n, cols)


def ranked(problem: ConvProblem, found: list[GemmRouteChoice], target: Target) -> list[GemmRouteChoice]:
    """`found` with this family's pick first, where the GEMM heuristic's (tuned on square products) loses on the
    pointwise layers' tall, narrow GEMMs (H100, ResNet-50 at batch 32; benchmarks/conv2d_resnet50.py --choices):
      TF32 wgmma: the tile of least cost = rounds of the grid (tiles / SMs) x tile area / its rate (WGMMA_RATE,
        two consumer warpgroups, no cluster), from 0.56-0.94x of the best to within 3%;
      float32 SIMT: 128 x 64 for 64 output channels (128 x 128 wastes half: 0.53-0.63x), and for tall GEMMs
        (M >= 1024) where it took a tile under 64: 128 x 128 where those fill every SM once, else 64 x 128
        (0.69 / 0.79x before)."""
    g, first = gemm_problem(problem), found[0].inner
    pick = None
    if isinstance(first, gemm_wgmma.WgmmaChoice) and not first.split:
        costs = {c: cdiv(_tiles(g, c.inner.pm, c.inner.qn), target.sm_count) * c.inner.pm * c.inner.qn
                 / WGMMA_RATE[c.inner.pm, c.inner.qn]
                 for c in found if isinstance(c.inner, gemm_wgmma.WgmmaChoice) and c.inner.per_sm == 1
                 and c.inner.cluster == 1 and c.inner.instr_n == c.inner.qn
                 and (c.inner.pm, c.inner.qn) in WGMMA_RATE}
        pick = min(costs, key=costs.get) if costs else None
    elif isinstance(first, GemmChoice) and not first.shape.mma and g.dtype == "float32" and first.split_k == 1:
        want = None
        if g.n <= 64:
            want = (128, 64)
        elif g.m >= 1024 and min(first.shape.bm, first.shape.bn) < 64:
            want = (128, 128) if _tiles(g, 128, 128) >= target.sm_count else (64, 128)
        pick = next((c for c in found if isinstance(c.inner, GemmChoice) and c.inner.split_k == 1
                     and c.inner.stages == 1 and not c.inner.shape.mma
                     and (c.inner.shape.bm, c.inner.shape.bn) == want), None)
    return found if pick is None else [pick] + [c for c in found if c != pick]


def lead_tiles(problem: ConvProblem, choice: GemmRouteChoice) -> int:
    """Output tiles of a wgmma GEMM choice (its persistent grid's work units); 0 for other kernels."""
    if not isinstance(choice.inner, gemm_wgmma.WgmmaChoice):
        return 0
    return _tiles(gemm_problem(problem), choice.inner.pm, choice.inner.qn)


def plan(problem: ConvProblem, choice: GemmRouteChoice, target: Target) -> Plan:
    """The GEMM plan with its operands a, b, c (+ epilogue operands, workspace) named as the convolution's.

    On the TF32 wgmma kernel both x and the weight (as stored) are truncated to TF32 by the tensor cores, each
    product low by twice the mean of one truncation: alpha = DEBIAS² takes it back, as the convolution kernel's
    DEBIAS does for x (conv2d/wgmma.py)."""
    g = gemm_problem(problem)
    if isinstance(choice.inner, gemm_wgmma.WgmmaChoice) and not choice.inner.split and g.dtype == "float32":
        g = dataclasses.replace(g, alpha=DEBIAS * DEBIAS)
    inner = gemm_plans.plan(g, choice.inner, target)
    operands = ("x", "weight", "bias", "y", *epilogue.operand_names(problem.epilogue))
    index = {0: 0, 1: 1, 2: 3, len(inner.operands): len(operands)}       # a, b, c, the workspace
    for i in range(3, len(inner.operands)):                            # the epilogue's operands
        index[i] = 4 + (i - 3) if problem.epilogue else 2                # bias / relu: the bias itself

    def move(a: Arg) -> Arg:
        return ptr(index[a.value], a.offset) if a.kind == "ptr" else a
    launches = tuple(dataclasses.replace(kl, args=tuple(move(a) for a in kl.args)) for kl in inner.launches)
    return Plan(launches, operands, workspace=inner.workspace, choice=choice.label)
