"""The streaming map family (templates/elementwise/elementwise.cu.jinja): Scal, Axpy, Copy, Relu and Flatten.

float16 and bfloat16 are read exactly into float32, computed there (alpha is a float32) and rounded once on store,
in 16-byte vectors of 8; a copy moves them as stored (every bit kept).

One kernel with an `op` parameter: y = op(x, y) over n elements. How each JITConfig field
changes the code:

    kernel_type               "simple": one scalar element per thread, no loop; every other
                              kind ("auto", "tiled", "warp_optimized", "tensor_core"): the vectorised
                              grid-stride kernel, ITEMS accesses in flight per thread
    block_size                threads per block (0: 256)
    tile_size                 elements per thread per grid-stride step: 8 .. 128 (0: two 16-byte
                              vectors, i.e. 8 float / 4 double)
    enable_loop_unroll        all loads of a step issued before the first store, vs one vector at a time
    enable_memory_coalescing  16-byte accesses (where pointers allow) vs scalar accesses
    enable_shared_memory_opt, enable_tensor_core, enable_tma   nothing to use them for: ignored
optimization_level and max_registers reach NVRTC. Each block takes one chunk (threads x tile) of
the data (a persistent grid measured 5% slower); data over 64 MiB per call is moved with
evict-first cache hints.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import Family, KernelLaunch, Plan, i64, ptr, scalar
from ...target import Target
from ..base import HALF_DTYPES, cdiv, compute_dtype, dtype_tag, scalar_t, storage_t, vector_width
from .. import knobs
from ..choice import kernel_choice

TEMPLATE = "elementwise/elementwise.cu.jinja"
DEFAULT_THREADS = 256
STREAM_BYTES = 64 << 20   # above this, a call's data cannot stay in L2: use evict-first hints
OPS = ("scal", "axpy", "copy", "relu")
DTYPES = ("float32", "float64", *HALF_DTYPES)   # what the memory-bound families plan


@dataclass(frozen=True)
class MapProblem:
    """y = op(x, y) over n elements; `aligned`: both pointers 16-byte aligned."""
    op: str
    dtype: str
    n: int
    aligned: bool
    alpha: float = 0.0


MapChoice = kernel_choice(
    "MapChoice", "threads vec items simple unroll",
    lambda c: f"b{c.threads}" + ("_simple" if c.simple else f"_v{c.vec}x{c.items}"),
    "Threads per block, scalars per access, accesses per thread per step, scalar ('simple') or vector kernel.")


def stream_geometry(dtype: np.dtype, cfg: ConfigSnapshot, aligned: bool, vectors: int = 2) -> tuple[int, int, int]:
    """(threads, VEC, ITEMS) of a vectorised streaming kernel under `cfg`; tile_size 0 = `vectors`
    16-byte vectors per thread per step. Raises for a tile_size no streaming kernel takes."""
    knobs.check("streaming kernels", cfg)
    threads = cfg.block_size or DEFAULT_THREADS
    vec = vector_width(dtype) if (aligned and cfg.enable_memory_coalescing) else 1
    per_thread = cfg.tile_size or vectors * vector_width(dtype)
    return threads, vec, max(1, per_thread // vec)


def persistent_grid(work_blocks: int, threads: int, target: Target) -> int:
    """Blocks for a grid-stride kernel: enough to fill every SM of `target` once, never more than the work."""
    return max(1, min(work_blocks, target.sm_count * max(1, target.max_threads_per_sm // threads)))


def map_choice(dtype: str, cfg: ConfigSnapshot, aligned: bool) -> MapChoice:
    """The streaming kernel shape `cfg` names: stream_geometry's, scalar ('simple') or vectorised."""
    threads, vec, items = stream_geometry(np.dtype(dtype), cfg, aligned)
    opts = pipeline.compile_opts(cfg)
    if cfg.kernel_type == "simple":
        return MapChoice(threads, 1, 1, True, cfg.enable_loop_unroll, opts=opts)
    return MapChoice(threads, vec, items, False, cfg.enable_loop_unroll, opts=opts)


def choices(problem: MapProblem, cfg: ConfigSnapshot, target: Target) -> list[MapChoice]:
    """The one kernel shape `cfg` names for this map."""
    return [map_choice(problem.dtype, cfg, problem.aligned)]


def plan(problem: MapProblem, choice: MapChoice, target: Target) -> Plan:
    """One launch: x = operand 0, y = operand 1."""
    dtype = np.dtype(problem.dtype)
    streaming = (not choice.simple
                 and problem.n * dtype.itemsize * (3 if problem.op == "axpy" else 2) > STREAM_BYTES)
    params = {"scalar_t": scalar_t(dtype), "unroll": choice.unroll, "op": problem.op, "simple": choice.simple,
              "THREADS": choice.threads, "VEC": choice.vec, "ITEMS": choice.items, "STREAM": streaming,
              **half_params(dtype)}
    name = (f"{problem.op}_{dtype_tag(dtype)}_{choice.label}" + ("_cs" if streaming else "")
            + ("" if choice.unroll else "_nounroll"))
    per_block = choice.threads * (1 if choice.simple else choice.vec * choice.items)
    grid = max(1, min(cdiv(problem.n, per_block), 2 ** 31 - 1))
    spec = pipeline.make_spec(TEMPLATE, "elementwise", name, params, choice.opts)
    args = (ptr(0), ptr(1), i64(problem.n), scalar(compute_dtype(dtype), problem.alpha))
    return Plan((KernelLaunch(spec, (grid,), (choice.threads,), args),), ("x", "y"), choice=choice.label)


def half_params(dtype: np.dtype) -> dict:
    """The template parameter of a 16-bit dtype's tensors (elem_t: common/stored.cuh), none for float and double."""
    return {"elem_t": storage_t(dtype)} if np.dtype(dtype).name in HALF_DTYPES else {}


def problems(op: str) -> list[MapProblem]:
    """Large aligned (streaming), small aligned and unaligned maps of every dtype."""
    return [MapProblem(op, dt, n, aligned) for dt in DTYPES
            for n, aligned in ((1 << 28, True), (1 << 20, True), (4097, False))]


def family(op: str) -> Family:
    """The map family for one op (its name as the CLI spells it)."""
    return Family(op, choices, plan, lambda: problems(op))
