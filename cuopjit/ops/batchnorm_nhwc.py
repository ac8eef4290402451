"""Batch norm over channels_last x: the plans of BatchNormProblem(layout="channels_last") (batchnorm_plans.py
dispatches here), templates/batchnorm/batchnorm_nhwc.cu.jinja.

In memory x is rows = N * H * W rows of C channels. Inference is one `apply` launch; training is `stats`
(per-(channel, split) partials, one wave of blocks), `finalize` (a block per channel: batch statistics, running
update) and `apply` with the batch statistics (row groups reversed, to re-read from L2 what stats read last). A block's threads are cb vector columns by rl row lanes (cb = min(C / VEC, threads)); the
C / VEC columns take `chunks` blocks side by side. How each JITConfig field changes the code:

    kernel_type               "simple": scalar accesses, one row per thread per step; every other
                              kind: 16-byte accesses (where C and the pointers allow) and NV rows in flight
    block_size                threads per block (0: 256; 128 for float16 / bfloat16)
    tile_size                 elements per thread per step, 8 .. 128 (0: 16 float / 8 double / 32 16-bit)
    enable_memory_coalescing  16-byte accesses vs scalar
    enable_loop_unroll        unroll pragmas
    enable_shared_memory_opt, enable_tensor_core, enable_tma   ignored (one kernel form: the per-thread
                              scale/shift already lives in registers; the stats tree always uses shared memory)
optimization_level and max_registers reach NVRTC.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..build import pipeline
from ..config import ConfigSnapshot
from ..run.plan import KernelLaunch, Plan, i32, i64, ptr, scalar
from ..target import Target
from .base import cdiv, compute_dtype, dtype_tag, scalar_t, vector_width
from .choice import kernel_choice
from .elementwise.kernels import half_params

TEMPLATE = "batchnorm/batchnorm_nhwc.cu.jinja"
WAVE_THREADS = 1024      # resident threads per SM the stats grid fills once (its <= 64 registers allow that many)
MIN_ROWS_PER_PARTIAL = 48  # partials (3 per channel and split) stay under 1/16 of x
STATIC_SMEM = 48 * 1024    # a kernel's static shared memory limit
# Elements per thread of the vectorised kernels when tile_size is 0, by layout and storage itemsize: 16 float, 8
# double (64 bytes in flight a thread). 16-bit, measured on H100 (benchmarks/mb_half_maps_sweep.py, float16
# 32x256x56x56 inference, % of copy): NCHW 16 (90.3%; 32: 85.4%, 64: 59.5%), channels_last 32 (81.6%; 16: 80.7%,
# 64: 80.3%) with 128-thread blocks (84.2%; 256: 81.6%, 512: 59.3%).
DEFAULT_EPT = {"contiguous": {4: 16, 8: 8, 2: 16}, "channels_last": {4: 16, 8: 8, 2: 32}}
DEFAULT_THREADS = {4: 256, 8: 256, 2: 128}   # channels_last threads per block when block_size is 0, by itemsize


def default_ept(dtype: np.dtype, vec: int, layout: str) -> int:
    """Elements per thread when tile_size is 0: DEFAULT_EPT; with scalar accesses (vec 1) the compute dtype's
    (16-bit types take float's 16: 32 scalar rows in flight took 161 registers)."""
    return DEFAULT_EPT[layout][np.dtype(dtype).itemsize if vec > 1 else compute_dtype(dtype).itemsize]


NhwcChoice = kernel_choice(
    "NhwcChoice", "threads vec nv unroll", "nhwc_v{vec}n{nv}t{threads}",
    "Threads per block, scalars per access, rows in flight per thread.")


def choices(problem: Any, cfg: ConfigSnapshot, target: Target) -> list[NhwcChoice]:
    """The one kernel shape `cfg` names (knobs checked by the caller)."""
    dtype = np.dtype(problem.dtype)
    vw = vector_width(dtype)
    simple = cfg.kernel_type == "simple"
    vec = vw if (not simple and cfg.enable_memory_coalescing and problem.aligned and problem.c % vw == 0) else 1
    ept = cfg.tile_size or default_ept(dtype, vec, problem.layout)
    nv = 1 if simple else max(1, ept // vec)
    threads = cfg.block_size or DEFAULT_THREADS[dtype.itemsize]
    return [NhwcChoice(threads, vec, nv, cfg.enable_loop_unroll, opts=pipeline.compile_opts(cfg))]


def _spec(dtype: np.dtype, kind: str, choice: NhwcChoice, reverse: bool = False) -> pipeline.KernelSpec:
    """The apply (rows reversed: training), stats or finalize (no vectors) kernel of `choice`."""
    vec, nv = (1, 1) if kind == "finalize" else (choice.vec, choice.nv)
    params = {"kind": kind, "scalar_t": scalar_t(dtype), "unroll": choice.unroll, "VEC": vec, "NV": nv,
              "THREADS": choice.threads, "REVERSE": int(reverse), **half_params(dtype)}
    if half_params(dtype) and kind == "apply" and reverse:   # training: the batch statistics, float
        params["BATCH_STATS"] = True
    name = (f"batchnorm_nhwc_{kind}_{dtype_tag(dtype)}_v{vec}n{nv}t{choice.threads}"
            + ("r" if reverse else "") + ("" if choice.unroll else "_nounroll"))
    return pipeline.make_spec(TEMPLATE, f"batchnorm_nhwc_{kind}", name, params, choice.opts)


def geometry(problem: Any, choice: NhwcChoice) -> tuple[int, int, int, int]:
    """(rows, vector columns, cb column threads, rl row lanes) of a block."""
    cols = problem.c // choice.vec
    cb = min(cols, choice.threads)
    return problem.n * problem.hw, cols, cb, choice.threads // cb


def stats_choice(choice: NhwcChoice, sdt: np.dtype) -> NhwcChoice:
    """The stats kernel's shape: `choice`, its vectors narrowed (rows in flight kept in elements) until the
    combine tree's THREADS x VEC statistics fit the 48 KB of static shared memory (1024 threads of float16 vectors
    of 8 would need 96 KB; every float and double choice fits as it is)."""
    vec = choice.vec
    while vec > 1 and choice.threads * vec * 3 * sdt.itemsize > STATIC_SMEM:
        vec //= 2
    return choice if vec == choice.vec else NhwcChoice(choice.threads, vec, choice.nv * choice.vec // vec,
                                                       choice.unroll, opts=choice.opts)


def stats_splits(problem: Any, choice: NhwcChoice, target: Target) -> int:
    """Blocks along the rows per column chunk: one wave of the target's resident threads in all, each thread at
    least one step of NV rows, the partials at most 1/16 of x."""
    rows, cols, cb, rl = geometry(problem, choice)
    chunks = cdiv(cols, cb)
    wave = target.sm_count * max(1, WAVE_THREADS // choice.threads)
    return max(1, min(wave // chunks, cdiv(rows, rl * choice.nv), rows // MIN_ROWS_PER_PARTIAL))


def plan(problem: Any, choice: NhwcChoice, target: Target, operands: tuple[str, ...]) -> Plan:
    """Operands x, y, gamma, beta, running_mean, running_var; training adds the workspace (index 6): c * splits * 3
    partials, then the batch mean and variance (c each)."""
    dtype, sdt = np.dtype(problem.dtype), compute_dtype(problem.dtype)
    units = "FP32 cores" if sdt == np.float32 else "FP64 cores"
    rows, cols, cb, rl = geometry(problem, choice)
    chunks = cdiv(cols, cb)
    groups = min(cdiv(rows, rl * choice.nv), (2 ** 31 - 1) // chunks)
    geo = (i64(rows), i32(cols), i32(cb), i32(rl), i32(chunks))

    def apply(mean: Any, var: Any) -> KernelLaunch:
        return KernelLaunch(_spec(dtype, "apply", choice, problem.training), (chunks * groups,), (choice.threads,),
                            (ptr(0), ptr(1), ptr(2), ptr(3), mean, var) + geo + (scalar(sdt, problem.eps),),
                            units=units)

    if not problem.training:
        return Plan((apply(ptr(4), ptr(5)),), operands, choice=choice.label)
    sc = stats_choice(choice, sdt)
    splits = stats_splits(problem, sc, target)
    ws, c = len(operands), problem.c
    partials = c * splits * 3 * sdt.itemsize
    mean, var = ptr(ws, partials), ptr(ws, partials + c * sdt.itemsize)
    s_rows, s_cols, s_cb, s_rl = geometry(problem, sc)
    s_geo = (i64(s_rows), i32(s_cols), i32(s_cb), i32(s_rl), i32(cdiv(s_cols, s_cb)))
    stats = KernelLaunch(_spec(dtype, "stats", sc), (cdiv(s_cols, s_cb) * splits,), (sc.threads,),
                         (ptr(0), ptr(ws)) + s_geo + (i32(splits),), units=units)
    finalize = KernelLaunch(_spec(dtype, "finalize", choice), (c,), (choice.threads,),
                            (ptr(ws), mean, var, ptr(4), ptr(5), i32(splits), scalar(sdt, problem.momentum)),
                            units=units)
    return Plan((stats, finalize, apply(mean, var)), operands, workspace=partials + 2 * c * sdt.itemsize,
                choice=choice.label)
