"""Global pools: GlobalMaxPool2D and GlobalAveragePool2D over NCHW or channels_last (the family `global_pool`, ops
"max" and "avg"; channels_last plans in nhwc.py).

Each H x W plane reduces to one value; the output may be N x C or N x C x 1 x 1. The JITConfig
fields' effects are in `common`'s docstring.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import Family, KernelLaunch, Plan, i64, ptr
from ...target import Target
from ...layout import CHANNELS_LAST, CONTIGUOUS
from ...tensor import Tensor
from ..base import Operator, cdiv, dtype_tag, scalar_t, vector_width, typed
from ..layouts import memory_layout
from ..elementwise.kernels import DTYPES, half_params
from . import nhwc
from .common import GLOBAL_MAX_ITEMS, GLOBAL_THREADS, TEMPLATE, check_tile_size, units
from ..choice import kernel_choice


# --- global pools --------------------------------------------------------------------------------
@dataclass(frozen=True)
class GlobalProblem:
    """Reduce `rows` planes of hw scalars each; `aligned`: x 16-byte aligned. channels_last `layout`: `rows` is N
    and `channels` C (each sample's hw pixels of C channels reduce to C values)."""
    op: str
    dtype: str
    rows: int
    hw: int
    aligned: bool
    layout: str = CONTIGUOUS
    channels: int = 1


GlobalChoice = kernel_choice(
    "GlobalChoice", "threads tpr items vg", "t{tpr}_v{vg}i{items}_b{threads}",
    "Threads per block, threads per plane, loads in flight per thread, scalars per load.")


def global_choices(problem: GlobalProblem, cfg: ConfigSnapshot, target: Target) -> list[Any]:
    """The one kernel shape `cfg` names (tile_size 0: global_geometry's; else about two steps of tile_size
    elements per thread, threads per plane up to 512)."""
    check_tile_size(cfg)
    if problem.layout == CHANNELS_LAST:
        return nhwc.choices(problem, cfg, target, problem.aligned, window=False)
    vec = vector_width(np.dtype(problem.dtype))
    simple = cfg.kernel_type == "simple"
    vg = vec if (not simple and cfg.enable_memory_coalescing and problem.aligned and problem.hw % vec == 0) else 1
    nv = problem.hw // vg
    if simple:
        tpr, items = _pow2_at_most(min(cdiv(nv, 2), 512)), 1
    elif cfg.tile_size:
        items = max(1, cfg.tile_size // vg)
        tpr = _pow2_at_most(min(cdiv(nv, 2 * items), 512))
    else:
        tpr, items = global_geometry(problem.rows, nv, target)
    threads = max(cfg.block_size or GLOBAL_THREADS, tpr)
    return [GlobalChoice(threads, tpr, items, vg, opts=pipeline.compile_opts(cfg))]


def _pow2_at_most(n: int) -> int:
    return 1 << max(0, int(n).bit_length() - 1)


def global_geometry(rows: int, nv: int, target: Target) -> tuple[int, int]:
    """(threads per plane, loads per thread per step) for `rows` planes of nv vectors: as many threads
    per plane (32 .. 512, at most the plane) as one wave of 1024 threads per SM holds, then the
    loads per step (at most GLOBAL_MAX_ITEMS) spread evenly over the fewest steps."""
    cap = min(512, _pow2_at_most(nv))
    tpr = min(32, cap)
    while tpr * 2 <= cap and rows * tpr * 2 <= target.sm_count * 1024:
        tpr *= 2
    steps = cdiv(nv, tpr * GLOBAL_MAX_ITEMS)
    return tpr, cdiv(nv, tpr * steps)


def global_plan(problem: GlobalProblem, choice: Any, target: Target) -> Plan:
    """One launch, threads // tpr planes per block: x = operand 0, y = operand 1."""
    if isinstance(choice, nhwc.NhwcChoice):
        return nhwc.global_plan(problem, choice, target)
    dtype = np.dtype(problem.dtype)
    params = {"scalar_t": scalar_t(dtype), "unroll": True, "op": problem.op, "kernel": "global_pool",
              "THREADS": choice.threads, "VEC": vector_width(dtype), "TPR": choice.tpr, "ITEMS": choice.items,
              "VEC_G": choice.vg, **half_params(dtype)}
    name = f"global{problem.op}pool_{dtype_tag(dtype)}_{choice.label}"
    spec = pipeline.make_spec(TEMPLATE, "global_pool", name, params, choice.opts)
    grid = min(cdiv(problem.rows, choice.threads // choice.tpr), 2 ** 31 - 1)
    launch = KernelLaunch(spec, (grid,), (choice.threads,), (ptr(0), ptr(1), i64(problem.rows), i64(problem.hw)),
                          units=units(problem.dtype))
    return Plan((launch,), ("x", "y"), choice=choice.label)


def global_problems(op: str) -> list[GlobalProblem]:
    """56 x 56 aligned planes, 7 x 7 unaligned ones and 1 x 1 planes, every dtype; channels_last: 32 x 256 x 56 x 56
    (split over the pixels), ResNet's last 32 x 2048 x 7 x 7 and an odd 2 x 33 x 7 x 13."""
    return ([GlobalProblem(op, dt, 32 * 64, hw, aligned) for dt in DTYPES
             for hw, aligned in ((56 * 56, True), (7 * 7, False), (1, False))]
            + [GlobalProblem(op, dt, n, hw, aligned, CHANNELS_LAST, c) for dt in DTYPES
               for n, c, hw, aligned in ((32, 256, 56 * 56, True), (32, 2048, 7 * 7, True), (2, 33, 7 * 13, False))])


def global_family(op: str) -> Family:
    """The global-pool family for op "max" or "avg"."""
    return Family(f"global{op}pool2d", global_choices, global_plan, lambda: global_problems(op))


# --- operators -----------------------------------------------------------------------------------


class GlobalPool2D(Operator):
    """Reduce each H x W plane of an NCHW or channels_last tensor to one value: `forward(x, y)`, y N x C or
    N x C x 1 x 1 (either layout: the memory is the same)."""

    op = "max"
    family = global_family("max")

    def bind(self, x: Tensor, y: Tensor) -> tuple:
        return (x.plan_key, y.plan_key), (x.ptr, y.ptr), y

    def problem(self, x: Tensor, y: Tensor) -> GlobalProblem | None:
        x = self.check_operand("x", x, ndim=4, layouts=(CONTIGUOUS, CHANNELS_LAST))
        self.check_operand("y", y, layouts=(CONTIGUOUS, CHANNELS_LAST))
        n, c, h, w = x.shape
        if tuple(y.shape) not in ((n, c), (n, c, 1, 1)):
            raise ValueError(f"{type(self).__name__}: y has shape {list(y.shape)}, expected {[n, c]} or "
                             f"{[n, c, 1, 1]} (x of shape {list(x.shape)})")
        if y.size == 0:
            return None
        if h * w == 0:
            raise ValueError(f"{type(self).__name__}: x of shape {list(x.shape)} has empty planes: nothing to pool")
        if memory_layout(x) == CHANNELS_LAST:
            return GlobalProblem(self.op, self.dtype.name, n, h * w, (x.ptr & 15) == 0, CHANNELS_LAST, c)
        return GlobalProblem(self.op, self.dtype.name, n * c, h * w, (x.ptr & 15) == 0)

    def work(self, x: Tensor, y: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return float(x.size), float((x.size + y.size) * self.dtype.itemsize)


class GlobalAveragePool2D(GlobalPool2D):
    """Global average pooling."""
    op = "avg"
    family = global_family("avg")


GlobalMaxPool2DFloat, GlobalMaxPool2DDouble, GlobalMaxPool2DHalf, GlobalMaxPool2DBFloat16 = typed(
    GlobalPool2D, "GlobalMaxPool2D", "global max pooling", DTYPES)
GlobalAveragePool2DFloat, GlobalAveragePool2DDouble, GlobalAveragePool2DHalf, GlobalAveragePool2DBFloat16 = typed(
    GlobalAveragePool2D, "GlobalAveragePool2D", "global average pooling", DTYPES)


