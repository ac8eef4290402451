"""The streaming map kernels (templates/elementwise.cu.jinja) and the base class of the ops that use them.

Scal, Axpy, Copy, Relu and Flatten are one kernel family with an `op` parameter. How each
JITConfig field changes the code:

    kernel_type               "auto" / "tiled": vectorised grid-stride kernel, ITEMS accesses in flight
                              per thread; "simple": one scalar element per thread, no loop
    block_size                threads per block (0: 256)
    tile_size                 elements per thread per grid-stride step: 8, 16, 32 (0: two 16-byte
                              vectors, i.e. 8 float / 4 double)
    enable_loop_unroll        all loads of a step issued before the first store, vs one vector at a time
    enable_memory_coalescing  16-byte accesses (where pointers allow) vs scalar accesses
    enable_tensor_core, enable_tma   no such kernel: ValueError
enable_shared_memory_opt=False raises (nothing in shared memory to change); optimization_level and max_registers
reach NVRTC. The grid gives each block one chunk (threads x tile) of the data (a persistent grid
of SM count x resident blocks measured 5% slower); data over 64 MiB per call is moved with
evict-first cache hints.
"""
from __future__ import annotations

from typing import Any, Hashable

import numpy as np

from .. import driver
from ..config import ConfigSnapshot
from ..tensor import Tensor
from .base import Operator, dtype_tag, scalar_t

TEMPLATE = "elementwise.cu.jinja"
KERNEL_TYPES = ("auto", "tiled", "simple")
TILE_SIZES = (0, 8, 16, 32)
BLOCK_SIZES = (0, 64, 128, 256, 512, 1024)
DEFAULT_THREADS = 256
STREAM_BYTES = 64 << 20   # above this, a call's data cannot stay in L2: use evict-first hints
THREADS_PER_SM = 2048


def vector_width(dtype: np.dtype) -> int:
    """Scalars in one 16-byte access: 4 float, 2 double."""
    return 16 // np.dtype(dtype).itemsize


def stream_geometry(dtype: np.dtype, cfg: ConfigSnapshot, aligned: bool, vectors: int = 2) -> tuple[int, int, int]:
    """(threads, VEC, ITEMS) for a vectorised streaming kernel under `cfg`; tile_size 0 = `vectors` 16-byte
    vectors per thread per step."""
    threads = cfg.block_size or DEFAULT_THREADS
    vec = vector_width(dtype) if (aligned and cfg.enable_memory_coalescing) else 1
    per_thread = cfg.tile_size or vectors * vector_width(dtype)
    return threads, vec, max(1, per_thread // vec)


def persistent_grid(work_blocks: int, threads: int, sm_count: int | None = None) -> int:
    """Blocks for a grid-stride kernel: enough to fill every SM once, never more than the work."""
    if sm_count is None:
        sm_count = driver.get_device().sm_count
    return max(1, min(work_blocks, sm_count * max(1, THREADS_PER_SM // threads)))


def elementwise_kernel(dtype: np.dtype, cfg: ConfigSnapshot, op: str, n: int, aligned: bool,
                       sm_count: int | None = None) -> tuple[str, str, dict, tuple[int, int, int]]:
    """-> (template, readable name, params, block) for one map over n elements; grid via `elementwise_grid`."""
    threads, vec, items = stream_geometry(dtype, cfg, aligned)
    simple = cfg.kernel_type == "simple"
    streaming = n * np.dtype(dtype).itemsize * (3 if op == "axpy" else 2) > STREAM_BYTES
    if simple:
        vec, items, streaming = 1, 1, False
    params = {"scalar_t": scalar_t(dtype), "unroll": bool(cfg.enable_loop_unroll), "op": op,
              "simple": simple, "THREADS": threads, "VEC": vec, "ITEMS": items, "STREAM": streaming}
    name = (f"{op}_{dtype_tag(dtype)}_b{threads}" + ("_simple" if simple else f"_v{vec}x{items}")
            + ("_cs" if streaming else "") + ("" if cfg.enable_loop_unroll else "_nounroll"))
    return TEMPLATE, name, params, (threads, 1, 1)


def elementwise_grid(params: dict, n: int, sm_count: int | None = None) -> int:
    """One chunk (THREADS * ITEMS vectors) per block: measured 5% faster than a persistent grid at 1 GiB
    (benchmarks/NOTES.md); the kernel's grid-stride loop only matters past 2**31 - 1 blocks."""
    threads, vec, items = params["THREADS"], params["VEC"], params["ITEMS"]
    if params["simple"]:
        return max(1, min(-(-n // threads), 2**31 - 1))
    return max(1, min(-(-n // (threads * vec * items)), 2**31 - 1))


class Elementwise(Operator):
    """Base of the map operators: builds and caches one launch per (op, size, alignment)."""

    kernel_types = KERNEL_TYPES
    tile_sizes = TILE_SIZES
    block_sizes = BLOCK_SIZES
    uses_shared_memory = False
    op: str = "copy"

    def _map_launch(self, op: str, x: Tensor, y: Tensor, alpha: float = 0.0):
        """Prepare y = op(x, y) over x.size elements (pointers are replaced per call)."""
        n = x.size
        aligned = ((x.ptr | y.ptr) & 15) == 0
        template, name, params, block = elementwise_kernel(self.dtype, self._config, op, n, aligned)
        spec = self._spec(template, "elementwise", name, params)
        grid = elementwise_grid(params, n)
        sc = "f32" if self.dtype == np.float32 else "f64"
        return self._prepare(spec, (grid, 1, 1), block, 0,
                             [("ptr", x.ptr), ("ptr", y.ptr), ("i64", n), (sc, float(alpha))])

    def _same_size(self, xname: str, x: Tensor, yname: str, y: Tensor) -> None:
        self._check(xname, x)
        self._check(yname, y)
        if x.size != y.size:
            raise ValueError(f"{type(self).__name__}: {xname} has shape {list(x.shape)} ({x.size} elements) and "
                             f"{yname} has shape {list(y.shape)} ({y.size} elements): they must hold the same "
                             "number of elements")

    def _map_specs(self, op: str) -> list:
        """Large aligned (streaming), small aligned and unaligned variants under the current config."""
        out = []
        for n, aligned in ((1 << 28, True), (1 << 20, True), (4097, False)):
            template, name, params, _ = elementwise_kernel(self.dtype, self._config, op, n, aligned, 132)
            spec = self._spec(template, "elementwise", name, params)
            if spec not in out:
                out.append(spec)
        return out

    @staticmethod
    def _key(x: Any, y: Any) -> Hashable:
        try:
            return (x.size, y.size, x.dtype, y.dtype, x.device, y.device, (x.ptr | y.ptr) & 15)
        except AttributeError:
            return None
