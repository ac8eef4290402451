"""The second launch of a split reduction (templates/gemm/splitk_reduce.cu.jinja): out = the sum of `splits`
partial results, each already scaled by alpha, + beta * out, in a fixed order so equal inputs give equal
bits. The split-K GEMM (gemm_kernels) and the split GEMV (gemv) share it, and so share its cubin. With a user
epilogue (the split-K GEMM's) it applies that instead of + beta * out: once, to the whole sum."""
from __future__ import annotations

import numpy as np

from ...build import pipeline
from ...run.plan import Arg, KernelLaunch, i32, scalar
from ...target import Target
from .. import epilogue as epi
from ..base import cdiv, dtype_tag, scalar_t

TEMPLATE = "gemm/splitk_reduce.cu.jinja"
THREADS = 256            # the kernel's __launch_bounds__
BLOCKS_PER_SM = 8        # a grid-stride loop: at most this many blocks per SM


def reduce_launch(dtype: np.dtype, parts: Arg, out: Arg, rows: int, cols: int, ld: int, splits: int, beta: float,
                  target: Target, units: str, unroll: bool = True,
                  opts: pipeline.CompileOpts = pipeline.DEFAULT_OPTS, epilogue: str = "",
                  extra: tuple = ()) -> KernelLaunch:
    """Add the `splits` packed rows x cols partials at `parts` into `out` (row stride `ld`) with beta, or apply the
    user `epilogue` (a key; `extra`: its arguments) to their sum."""
    params = epi.add({"scalar_t": scalar_t(dtype), "unroll": unroll}, epilogue, scalar_t(dtype))
    spec = pipeline.make_spec(TEMPLATE, "splitk_reduce", f"splitk_reduce_{dtype_tag(dtype)}{epi.tag(epilogue)}",
                             params, opts)
    grid = min(cdiv(rows * cols, THREADS), BLOCKS_PER_SM * target.sm_count)
    return KernelLaunch(spec, (grid,), (THREADS,), (parts, out, i32(rows), i32(cols), i32(ld), i32(splits),
                                                    scalar(dtype, beta), *extra), units=units)
