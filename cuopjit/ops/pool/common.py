"""2-D pooling over NCHW or channels_last: MaxPool2D, AveragePool2D (windowed.py), GlobalMaxPool2D,
GlobalAveragePool2D (global_pool.py), Float/Double/Half/BFloat16; this module holds what both families share.
float16 and bfloat16 pool in float32 (average sums included) and round once on store, with 16-byte vectors of 8.

x and y are both contiguous (NCHW) or both channels_last (a mismatch raises naming both layouts; a global
pool's N x C x 1 x 1 output is either, the memory being the same); channels_last runs its own kernels, with
no layout copy (nhwc.py, which maps the JITConfig fields for them). The table below is the NCHW kernels'.

Window pools take kernel_h/kernel_w, stride_h/stride_w (default: the kernel) and pad_h/pad_w
(default 0, at most half the kernel, as in PyTorch) in the constructor, and any of them again as
forward keyword arguments for one call. The output must be N x C x OH x OW with
OH = (H + 2 pad_h - kernel_h) // stride_h + 1 (PyTorch's floor mode). Average pooling counts the
padding in the divisor (kernel_h * kernel_w: PyTorch's default count_include_pad=True).
Global pools reduce each H x W plane to one value; the output may be N x C or N x C x 1 x 1.
Max pools propagate NaN. Template: templates/pool/pool.cu.jinja, window geometry compiled in.

Two families, each for op "max" and "avg". How each JITConfig field changes their kernels:

    field                     window pools (pool2d)                 global pools (global_pool)
    kernel_type "simple"      one output per thread, scalar access  scalar loads, one in flight
    other kinds               OPT outputs per thread, 16-byte       16-byte loads, ITEMS in flight
    ("auto", "tiled", ...)    loads/stores where rows line up
    tile_size                 outputs per thread OPT: 8 .. 128      elements per thread per step:
                              (0: one 16-byte store's worth)        8 .. 128 (0: global_geometry:
                                                                    one wave, <= 8 loads per step)
    block_size                threads per block (0: 256)            threads per block (0: 128; at
                                                                    least the threads per plane)
    enable_memory_coalescing  16-byte accesses vs scalar            16-byte loads vs scalar
    enable_loop_unroll, enable_shared_memory_opt, enable_tensor_core, enable_tma   ignored: the inner
                              loops have compile-time counts and are always unrolled, nothing is
                              staged in shared memory, and there is nothing for tensor cores or TMA
optimization_level and max_registers reach NVRTC.
"""
from __future__ import annotations

import numpy as np

from ...config import ConfigSnapshot
from .. import knobs
from ..base import compute_dtype

TEMPLATE = "pool/pool.cu.jinja"
TEMPLATE_NHWC = "pool/pool_nhwc.cu.jinja"
DEFAULT_THREADS = 256
GLOBAL_MAX_ITEMS = 8   # 16-byte loads in flight per thread per step (32 registers)
GLOBAL_THREADS = 128
OPT_VECTORS = 1      # 16-byte output vectors per thread in window pools


def check_tile_size(cfg: ConfigSnapshot) -> None:
    """Raise for a tile_size no pool kernel takes."""
    knobs.check("pooling kernels", cfg)


def units(dtype: str) -> str:
    return "FP32 cores" if compute_dtype(dtype) == np.float32 else "FP64 cores"
