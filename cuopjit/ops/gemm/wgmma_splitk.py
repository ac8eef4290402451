"""Split-K for the wgmma GEMM, as a batch: a product with too few tiles to fill the SMs and a long K (few rows of
`A @ W^T`: M = 7 .. 256 at K = 3072 / 4096) cut into `splits` equal K slices, each slice one entry of the
batched kernel (templates/gemm/gemm_wgmma.cu.jinja `BATCHED`), then one splitk_reduce launch.

Slice z reads A and B from z * K / splits along K (a K-major operand: that many elements on; an MN-major one:
that many rows of its leading dimension) with K' = K / splits, and writes alpha times its partial product,
packed M x N, to the workspace (batch stride M N, beta 0); cuopjit/ops/gemm/splitk.py's reduction adds the
slices in a fixed order and applies beta * C. Nothing new runs on the GPU: the batched TF32 kernel's tensor maps
take the slice offset as their third dimension's stride. Slices are whole: K / splits is a multiple of the
kernel's k-tile (32), so no slice reads into the next one.

The pick (plans.py): where the wgmma heuristic's fastest build fills less than half of the block slots, the
split count and build whose modelled time (wgmma_tiles.estimate over K / splits, plus the reduction: its bytes
and a launch) beats the unsplit one by REDUCE_GAIN.

H100, `x @ W^T` TF32 through GemmFloat (benchmarks/linear.py, torch TF32 in the same run; before -> after):
M 7 / 33 at W 1024 x 4096 22.5 -> 16.9 / 17.6 us (0.54 -> 0.77 / 0.55 -> 0.74 x torch), at W 768 x 3072
18.1 -> 17.3 / 18.2 -> 17.9 us (0.68 / 0.67 -> 0.75), M 256 at 768 x 3072 18.5 -> 17.0 us (0.86 -> 0.94). What
is left is per forward, not per byte (W is 9-17 MB, 3-6 us at the copy rate): two launches, the tensor maps
written on the device and the workspace taken from the pool; one launch that reduces in the kernel is the next step.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ...run.plan import Plan, ptr
from ...target import Target
from ..base import cdiv
from . import splitk, wgmma as gw, wgmma_plan, wgmma_tiles
from .problem import GemmProblem, retarget

SPLITS = (2, 3, 4, 6, 8, 12, 16)
MIN_SLICE = 128          # K per slice at least (4 k-tiles: the pipeline's stages fill)
REDUCE_US, REDUCE_BW = 3.0, 2.5e6     # the reduction's launch (us) and bytes per us
REDUCE_GAIN = 0.8        # taken where modelled at most this fraction of the unsplit time
ALIGN = 256


@dataclass(frozen=True)
class SplitKChoice:
    """A wgmma build run over `splits` K slices as a batch, then the reduction."""
    inner: gw.WgmmaChoice
    splits: int

    @property
    def label(self) -> str:
        return f"{self.inner.label}_splitk{self.splits}"

    @property
    def opts(self):
        """How its kernels compile (a caller planning launches of its own beside them uses the same)."""
        return self.inner.opts


def sliced(problem: GemmProblem, splits: int) -> GemmProblem:
    """The batched problem of `splits` K slices, each written packed (ldc = N) into its own partial, beta 0."""
    p, chunk = problem, problem.k // splits
    return dataclasses.replace(p, k=chunk, batch=splits, beta=0.0, ldc=p.n, stride_c=p.m * p.n,
                               stride_a=chunk * (p.lda if p.trans_a else 1), stride_b=chunk * (1 if p.trans_b else p.ldb))


def why_not(problem: GemmProblem, splits: int) -> str | None:
    """Why `problem` cannot run in `splits` slices (None: it can)."""
    if problem.batch != 1 or problem.epilogue or problem.dtype != "float32":
        return "split-K slices one float32 product without a user epilogue"
    if splits not in SPLITS or problem.k % (gw.BK * splits) or problem.k // splits < MIN_SLICE:
        return (f"K = {problem.k} does not cut into {splits} whole slices of at least {MIN_SLICE} (multiples of "
                f"{gw.BK}): choose splits from {SPLITS} that divide K / {gw.BK}")
    return None


def modelled(problem: GemmProblem, inner: gw.WgmmaChoice, splits: int, target: Target) -> float:
    """Modelled microseconds: the slices' launch, plus the reduction (splits = 1: the plain launch)."""
    p = sliced(problem, splits) if splits > 1 else problem
    units = gw.tiles(p, inner.consumers, inner.qn)
    time = wgmma_tiles.estimate(units, cdiv(p.k, gw.BK), inner.consumers, inner.qn, inner.per_sm, False,
                                target.sm_count)
    if splits > 1:
        time += REDUCE_US + (splits + 1 + (1 if problem.beta else 0)) * problem.m * problem.n * 4 / REDUCE_BW
    return time


def lead(problem: GemmProblem, found: list, target: Target) -> list:
    """`found` (the wgmma choices, heuristic's first) with the best split build first where it pays."""
    head = found[0]
    if head.split or gw.tiles(problem, head.consumers, head.qn) * 2 > target.sm_count * head.per_sm:
        return found
    plain = modelled(problem, head, 1, target)
    options = [(modelled(problem, b, s, target), -b.qn, i, s) for i, b in enumerate(found)
               for s in SPLITS if b.cluster == 1 and why_not(problem, s) is None]
    if not options:
        return found
    time, _, i, s = min(options)
    return [SplitKChoice(found[i], s), *found] if time <= REDUCE_GAIN * plain else found


def plan(problem: GemmProblem, choice: SplitKChoice, target: Target) -> Plan:
    """The slices' wgmma launch into the workspace's partials, then their sum into C (a, b, c, workspace)."""
    reason = why_not(problem, choice.splits)
    if reason:
        raise ValueError(f"GEMM {choice.label}: {reason}")
    inner = wgmma_plan.plan(sliced(problem, choice.splits), choice.inner, target)
    parts = cdiv(inner.workspace, ALIGN) * ALIGN      # the tensor maps first, then the partial products
    (launch,) = inner.launches
    launch = retarget(launch, (ptr(0), ptr(1), ptr(3, parts)), ptr(3))
    total = splitk.reduce_launch(np.dtype(np.float32), ptr(3, parts), ptr(2), problem.m, problem.n, problem.ldc,
                                 choice.splits, problem.beta, target, gw.UNITS[False], choice.inner.unroll,
                                 choice.inner.opts)
    return Plan((launch, total), ("a", "b", "c"), workspace=parts + choice.splits * problem.m * problem.n * 4,
                choice=choice.label)
