"""The batch-norm family (`batchnorm`): problems, choices and plans. NCHW (and N x C) plans are here,
templates/batchnorm/batchnorm.cu.jinja; a channels_last problem dispatches to batchnorm_nhwc.py. The operator
classes are in batchnorm.py (its docstring: the kernels and the JITConfig fields). float16 and bfloat16 compute in
float32: partials, batch statistics, eps and momentum are float32 (compute_dtype), tensors and parameters
16-bit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..build import pipeline
from ..config import ConfigSnapshot
from ..layout import CHANNELS_LAST, CONTIGUOUS
from ..run.plan import Arg, Family, KernelLaunch, Plan, i32, i64, ptr, scalar
from ..target import Target
from .base import cdiv, compute_dtype, dtype_tag, scalar_t, vector_width
from . import batchnorm_nhwc as nhwc, knobs
from .elementwise.kernels import DTYPES, half_params
from .choice import kernel_choice

TEMPLATE = "batchnorm/batchnorm.cu.jinja"
DEFAULT_THREADS = 256
STATS_STEPS = 4   # per-plane stats: loads of NV vectors per thread in one work unit
FOLD_FINALIZE = True  # per-plane training: the finalize folded into the apply (two launches; NOTES.md 16 v2)
OPERANDS = ("x", "y", "gamma", "beta", "running_mean", "running_var")


@dataclass(frozen=True)
class BatchNormProblem:
    """x of N x C x HW (HW = 1 for N x C); `aligned`: x and y 16-byte aligned; momentum only when training;
    `layout`: x's and y's memory layout (contiguous, or channels_last: rows of C channels, batchnorm_nhwc.py)."""
    dtype: str
    n: int
    c: int
    hw: int
    aligned: bool
    training: bool
    eps: float
    momentum: float = 0.0
    layout: str = CONTIGUOUS


BatchNormChoice = kernel_choice(
    "BatchNormChoice", "threads vec nv plane unroll",
    lambda c: f"{'p' if c.plane else 'f'}v{c.vec}n{c.nv}t{c.threads}",
    "Threads per block; the apply kernel's scalars per access, vectors per thread and per-plane form.")


def choices(problem: BatchNormProblem, cfg: ConfigSnapshot, target: Target) -> list[Any]:
    """The one kernel shape `cfg` names for this problem (channels_last: batchnorm_nhwc's)."""
    knobs.check("batch norm", cfg)
    if problem.layout == CHANNELS_LAST:
        return nhwc.choices(problem, cfg, target)
    dtype = np.dtype(problem.dtype)
    vw = vector_width(dtype)
    plane = problem.hw > 1 and cfg.enable_shared_memory_opt and cfg.kernel_type != "simple"
    aligned = problem.aligned and problem.hw % vw == 0
    vec = vw if (plane and cfg.enable_memory_coalescing and aligned) else 1
    ept = cfg.tile_size or nhwc.default_ept(dtype, vec, problem.layout)
    nv = max(1, ept // vec) if plane else 1
    return [BatchNormChoice(cfg.block_size or DEFAULT_THREADS, vec, nv, plane, cfg.enable_loop_unroll, opts=pipeline.compile_opts(cfg))]


def _spec(dtype: np.dtype, kind: str, choice: BatchNormChoice, training: bool = False) -> pipeline.KernelSpec:
    """The apply kernel of `choice` (tiles reversed when training; per-plane training with FOLD_FINALIZE:
    the finalize folded in), its stats kernel (per-plane: the same vectors; else scalar), or the finalize
    kernel. 16-bit dtypes: an apply reading the batch statistics (float, in the workspace) says so (BATCH_STATS)."""
    vec, nv, plane = (choice.vec, choice.nv, choice.plane) if kind != "finalize" else (1, 1, False)
    if kind == "stats" and not plane:
        vec, nv = 1, 1
    reverse = int(kind == "apply" and plane and training)
    fold = reverse and FOLD_FINALIZE
    params = {"kind": kind, "scalar_t": scalar_t(dtype), "unroll": choice.unroll, "VEC": vec, "NV": nv,
              "THREADS": choice.threads, "plane": int(plane), "REVERSE": reverse}
    if fold:
        params["FOLD"] = 1
    if kind == "stats" and plane:
        params["SEG"] = stats_segment(choice)
    params.update(half_params(dtype))
    if half_params(dtype) and kind == "apply" and training and not fold:
        params["BATCH_STATS"] = True
    tag = {"apply": choice.label + ("r" if reverse else "") + ("f" if fold else ""), "stats": choice.label if plane else f"t{choice.threads}",
           "finalize": f"t{choice.threads}"}[kind]
    name = f"batchnorm_{kind}_{dtype_tag(dtype)}_{tag}" + ("" if choice.unroll else "_nounroll")
    return pipeline.make_spec(TEMPLATE, f"batchnorm_{kind}", name, params, choice.opts)


def stats_segment(choice: BatchNormChoice) -> int:
    """Vectors of one plane in a per-plane stats work unit: four steps of the block's loads."""
    return choice.threads * choice.nv * STATS_STEPS


def stats_splits(problem: BatchNormProblem, choice: BatchNormChoice, target: Target) -> int:
    """Blocks per channel of the stats kernel: per-plane, enough for every SM's resident blocks (one
    wave, so every block walks its units in step and the last planes read are the last in x); else
    four blocks per SM."""
    n, c, hw, threads = problem.n, problem.c, problem.hw, choice.threads
    if choice.plane:
        units = n * cdiv(hw // choice.vec, stats_segment(choice))
        return max(1, min(units, target.sm_count * (2048 // threads) // c))
    return max(1, min(cdiv(4 * target.sm_count, c), cdiv(n * hw, threads), 1024))


def plan(problem: BatchNormProblem, choice: Any, target: Target) -> Plan:
    """Operands x, y, gamma, beta, running_mean, running_var; training adds the workspace (index 6):
    c * splits * 3 partials, then (with a finalize kernel) the batch mean and variance (c each)."""
    if isinstance(choice, nhwc.NhwcChoice):
        return nhwc.plan(problem, choice, target, OPERANDS)
    dtype, sdt = np.dtype(problem.dtype), compute_dtype(problem.dtype)
    units = "FP32 cores" if sdt == np.float32 else "FP64 cores"
    n, c, hw, threads = problem.n, problem.c, problem.hw, choice.threads
    total = n * c * hw
    if choice.plane:
        tiles = cdiv(hw // choice.vec, threads * choice.nv)
        grid = min(n * c * tiles, 2 ** 31 - 1)
    else:
        grid = min(cdiv(total, threads), 2 ** 31 - 1)

    def apply(mean: Arg, var: Arg) -> KernelLaunch:
        return KernelLaunch(_spec(dtype, "apply", choice, problem.training), (grid,), (threads,),
                            (ptr(0), ptr(1), ptr(2), ptr(3), mean, var, i64(total), i32(c), i64(hw),
                             scalar(sdt, problem.eps)), units=units)

    if not problem.training:
        return Plan((apply(ptr(4), ptr(5)),), OPERANDS, choice=choice.label)
    splits = stats_splits(problem, choice, target)
    ws = len(OPERANDS)
    partials = c * splits * 3 * sdt.itemsize
    mean, var = ptr(ws, partials), ptr(ws, partials + c * sdt.itemsize)
    stats = KernelLaunch(_spec(dtype, "stats", choice), (c * splits,), (threads,),
                         (ptr(0), ptr(ws), i32(n), i32(c), i64(hw), i32(splits)), units=units)
    if choice.plane and FOLD_FINALIZE:
        fold = KernelLaunch(_spec(dtype, "apply", choice, True), (grid,), (threads,),
                            (ptr(0), ptr(1), ptr(2), ptr(3), ptr(ws), ptr(4), ptr(5), i64(total), i32(c), i64(hw),
                             scalar(sdt, problem.eps), i32(splits), scalar(sdt, problem.momentum)), units=units)
        return Plan((stats, fold), OPERANDS, workspace=partials, choice=choice.label)
    finalize = KernelLaunch(_spec(dtype, "finalize", choice), (cdiv(c, threads // 32),), (threads,),
                            (ptr(ws), mean, var, ptr(4), ptr(5), i32(c), i32(splits),
                             scalar(sdt, problem.momentum)), units=units)
    return Plan((stats, finalize, apply(mean, var)), OPERANDS, workspace=partials + 2 * c * sdt.itemsize,
                choice=choice.label)


def problems() -> list[BatchNormProblem]:
    """Inference and training on NCHW (aligned planes: vectorised; 5 x 7 planes: scalar), N x C (flat) and
    channels_last (C = 256: vectorised; C = 3: scalar), every dtype."""
    out = []
    for dt in DTYPES:
        out += [BatchNormProblem(dt, n, c, hw, aligned, training, 1e-5, 0.1 if training else 0.0, CHANNELS_LAST)
                for n, c, hw, aligned in ((32, 256, 56 * 56, True), (2, 3, 5 * 7, False)) for training in (False, True)]
        out += [BatchNormProblem(dt, 32, 64, 56 * 56, True, False, 1e-5),
                BatchNormProblem(dt, 2, 3, 5 * 7, True, False, 1e-5),
                BatchNormProblem(dt, 32, 64, 1, True, False, 1e-5),
                BatchNormProblem(dt, 32, 64, 56 * 56, True, True, 1e-5, 0.1),
                BatchNormProblem(dt, 2, 3, 5 * 7, True, True, 1e-5, 0.1),
                BatchNormProblem(dt, 32, 64, 1, True, True, 1e-5, 0.1)]
    return out


FAMILY = Family("batchnorm", choices, plan, problems)


