"""Pools over channels_last x: the plans of WindowProblem / GlobalProblem with layout="channels_last"
(windowed.py and global_pool.py dispatch here), templates/pool/pool_nhwc.cu.jinja.

In memory x is N, H, W, C: a window pool reads each window's pixels as vectors of VEC channels (a thread per
output vector); a global pool reduces each channel column of a sample over its H * W pixels, with `splits`
blocks per sample where the samples alone would not fill the GPU (then a second launch combines the partials
in split order: deterministic). Before splitting, a global pool narrows its blocks' column chunks (down to
MIN_LANES vectors, 64 bytes of a pixel) until the samples' chunks fill the GPU: ResNet's 32 x 256 x 56 x 56 and
32 x 2048 x 7 x 7 are then one launch. How each JITConfig field changes the code:

    field                     window pools                        global pools
    kernel_type "simple"      scalar accesses                     scalar loads, one in flight
    other kinds               16-byte accesses where C and the    16-byte loads where C and x allow,
                              pointers allow                      ITEMS in flight
    tile_size                 ignored (one output vector per      elements per thread per step, 8 .. 128
                              thread: the window is its work)     (0: four loads)
    block_size                threads per block (0: 256)          threads per block (0: 512)
    enable_memory_coalescing  16-byte accesses vs scalar          16-byte loads vs scalar
    enable_loop_unroll, enable_shared_memory_opt, enable_tensor_core, enable_tma   ignored (the loops have
                              compile-time counts, the global tree always uses shared memory)
optimization_level and max_registers reach NVRTC.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import KernelLaunch, Plan, i32, i64, ptr
from ...target import Target
from ..base import cdiv, compute_dtype, dtype_tag, scalar_t, vector_width
from ..elementwise.kernels import half_params
from .common import TEMPLATE_NHWC, units
from ..choice import kernel_choice

DEFAULT_THREADS = 256
GLOBAL_THREADS = 512  # a global pool's block: 128 row lanes of 4 vectors (two blocks per SM at <= 64 registers)
GLOBAL_ITEMS = 4      # 16-byte loads in flight per thread per step
MIN_LANES = 4         # column threads of a global pool's block: 4 x 16 bytes of each pixel, side by side
WAVE_THREADS = 1024   # resident threads per SM a global pool's grid fills once (<= 64 registers allow that many)


NhwcChoice = kernel_choice(
    "NhwcChoice", "threads vec items", "nhwc_v{vec}i{items}_b{threads}",
    "Threads per block, scalars per access, loads in flight per thread (global pools).")


def choices(problem: Any, cfg: ConfigSnapshot, target: Target, aligned: bool, window: bool) -> list[NhwcChoice]:
    """The one kernel shape `cfg` names; `aligned`: the pointers allow 16-byte accesses; `window`: a window pool
    (no loads-per-step knob). Knobs are checked by the caller."""
    vw = vector_width(np.dtype(problem.dtype))
    simple = cfg.kernel_type == "simple"
    vec = vw if (not simple and cfg.enable_memory_coalescing and aligned and problem.channels % vw == 0) else 1
    items = 1 if simple or window else max(1, cfg.tile_size // vec) if cfg.tile_size else GLOBAL_ITEMS
    threads = cfg.block_size or (DEFAULT_THREADS if window else GLOBAL_THREADS)
    return [NhwcChoice(threads, vec, items, opts=pipeline.compile_opts(cfg))]


def _spec(problem: Any, choice: NhwcChoice, kernel: str, name: str, **extra: Any) -> pipeline.KernelSpec:
    dtype = np.dtype(problem.dtype)
    params = {"scalar_t": scalar_t(dtype), "unroll": True, "op": problem.op, "kernel": kernel,
              "THREADS": choice.threads, "VEC": choice.vec, **extra, **half_params(dtype)}
    return pipeline.make_spec(TEMPLATE_NHWC, kernel, f"{name}_{dtype_tag(dtype)}_{choice.label}", params,
                              choice.opts)


def window_plan(problem: Any, choice: NhwcChoice, target: Target) -> Plan:
    """One launch, a thread per output vector: x = operand 0, y = operand 1."""
    win, cv = problem.window, problem.channels // choice.vec
    total = problem.planes * problem.oh * problem.ow * cv
    grid = min(cdiv(total, choice.threads), 2 ** 31 - 1)
    wide = total + grid * choice.threads >= 2 ** 31 or problem.planes * problem.h * problem.w * cv >= 2 ** 31
    name = (f"{problem.op}pool2d_nhwc_k{win.kh}x{win.kw}_s{win.sh}x{win.sw}_p{win.ph}x{win.pw}"
            + ("_wide" if wide else ""))
    spec = _spec(problem, choice, "pool2d_nhwc", name, KH=win.kh, KW=win.kw, SH=win.sh, SW=win.sw, PH=win.ph,
                 PW=win.pw, WIDE=wide)
    args = (ptr(0), ptr(1), i64(total), i32(problem.h), i32(problem.w), i32(problem.oh), i32(problem.ow), i32(cv))
    return Plan((KernelLaunch(spec, (grid,), (choice.threads,), args, units=units(problem.dtype)),), ("x", "y"),
                choice=choice.label)


def column_threads(samples: int, cols: int, choice: NhwcChoice, target: Target) -> int:
    """cb, a global pool block's column threads: all of a sample's vector columns (at most the block), halved
    (down to MIN_LANES) while the samples' column chunks leave SMs without a block."""
    cb = min(cols, choice.threads)
    while cb > MIN_LANES and samples * cdiv(cols, cb) < target.sm_count:
        cb //= 2
    return cb


def global_splits(samples: int, hw: int, chunks: int, rl: int, choice: NhwcChoice, target: Target) -> int:
    """Blocks per (sample, column chunk): one wave of the target's resident threads in all, each thread at least
    one step of ITEMS pixels."""
    wave = target.sm_count * max(1, WAVE_THREADS // choice.threads)
    return max(1, min(wave // (samples * chunks), cdiv(hw, rl * choice.items)))


def global_plan(problem: Any, choice: NhwcChoice, target: Target) -> Plan:
    """The reduction, and with several splits the combine of the partials (the workspace, operand index 2):
    x = operand 0, y = operand 1."""
    dtype = np.dtype(problem.dtype)
    n, c, hw = problem.rows, problem.channels, problem.hw
    cols = c // choice.vec
    cb = column_threads(n, cols, choice, target)
    rl, chunks = choice.threads // cb, cdiv(cols, cb)
    splits = global_splits(n, hw, chunks, rl, choice, target)
    partial = {"PARTIAL": True} if splits > 1 and half_params(dtype) else {}   # 16-bit x: partials stay float
    reduce = _spec(problem, choice, "global_nhwc", f"global{problem.op}pool_nhwc" + ("_part" if partial else ""),
                   ITEMS=choice.items, **partial)
    out = ptr(1) if splits == 1 else ptr(2)
    launches = [KernelLaunch(reduce, (n * splits * chunks,), (choice.threads,),
                             (ptr(0), out, i64(hw), i32(cols), i32(cb), i32(rl), i32(chunks), i32(splits)),
                             units=units(problem.dtype))]
    workspace = 0
    if splits > 1:
        workspace = n * splits * c * compute_dtype(dtype).itemsize
        final = _spec(problem, NhwcChoice(choice.threads, 1, 1, opts=choice.opts), "global_nhwc_final",
                      f"global{problem.op}pool_nhwc_final")
        total = n * c
        launches.append(KernelLaunch(final, (min(cdiv(total, choice.threads), 2 ** 31 - 1),), (choice.threads,),
                                     (ptr(2), ptr(1), i64(total), i64(c), i32(splits), i64(hw)),
                                     units=units(problem.dtype)))
    return Plan(tuple(launches), ("x", "y"), workspace=workspace, choice=choice.label)
