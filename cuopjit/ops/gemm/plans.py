"""The GEMM family: C = alpha * op(A) @ op(B) + beta * C, row-major (templates/gemm/gemm.cu.jinja,
gemm_async.cu.jinja).

gemm.cu.jinja gives two kernels: the register-tiled SIMT kernel and an mma.sync tensor-core kernel
(float32 as TF32, relative error ~3e-4; float64 as DMMA, exact FP64 FMAs), both staging the next
k-tile through registers into the second of two shared buffers (GemmChoice.stages = 1).
gemm_async.cu.jinja is the mma.sync kernel fed by a cp.async pipeline of stages = 2..4 k-tiles
(16-byte copies where aligned, conflict-free pair fragment reads, swizzled k-major tiles); it is
float64's default (gemm_shapes.STAGES), where an aligned A @ B runs as C^T = B^T @ A^T (`swapped`).
gemm_simt_async.cu.jinja is the exact float32 SIMT kernel on a cp.async pipeline of stages = 2..4 k-tiles
(16-byte copies of operands stored k-major, 4-byte copies that transpose the others; split-K and batches
as the one-stage kernel).
GemmChoice.raster "grouped" walks the block tiles in
bands of 8 tile rows (both templates). Shapes are in gemm_shapes.py. On sm_90 targets float32
tensor-core work goes to the wgmma kernel instead (gemm_wgmma.py: TMA, warp-specialised,
persistent; TF32 or 3xTF32) wherever it takes the problem (aligned, not A^T @ B, batch strides in
16-byte steps, K > 0) and the config's tile_size / block_size are ones it builds; `uses_wgmma` is the
rule. The JITConfig fields' effects are in the package docstring (cuopjit/ops/gemm/__init__.py).
float16 / bfloat16 (read exactly, sums in float32, C rounded once): on sm_90 the wgmma f16 / bf16 kernel wherever
it takes the problem (TMA: 16-byte aligned operands and leading dimensions); on sm_80+ otherwise (aligned) the
cp.async kernel on mma.sync m16n8k16 (mma16.py); elsewhere (odd strides, older GPUs) the one-stage gemm.cu.jinja
reading halves into float32 shared memory (`elem_t`, scalar global accesses): mma.sync TF32 where tensor cores
are allowed ("auto" allows them: TF32 holds every float16 and bfloat16 exactly), else SIMT; no split-K (its
partial sums would round to 16 bits).
A user epilogue (GemmProblem.epilogue, cuopjit/ops/epilogue.py) replaces alpha * acc + beta * C where each
kernel stores C (split-K: once, in the reduction); its operands follow a, b, c, then comes the workspace.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import Family, KernelLaunch, Plan, i32, i64, ptr, scalar
from ...target import Target
from . import mma16, shapes, splitk, vector, wgmma as gemm_wgmma, wgmma_plan, wgmma_splitk
from .. import epilogue
from ..base import HALF_DTYPES, cdiv, dtype_tag, scalar_t, storage_t, vector_width
from .heuristics import auto_simt, pipeline_fields, split_for
from .problem import GemmChoice, GemmProblem, packed

TEMPLATE = "gemm/gemm.cu.jinja"
KERNEL_TYPES = ("auto", "simple", "tiled", "warp_optimized", "tensor_core")
# Padding (scalars) that makes each kind's shared-memory reads conflict-free.
_PAD = {("float32", False): 4, ("float64", False): 2, ("float32", True): 8, ("float64", True): 4}
UNITS = {("float32", False): "FP32 cores (SIMT)", ("float64", False): "FP64 cores (SIMT)",
         ("float32", True): "TF32 tensor cores (mma.sync)", ("float64", True): "FP64 tensor cores (DMMA mma.sync)",
         **{(h, False): "FP32 cores (SIMT)" for h in HALF_DTYPES}, **{(h, True): "TF32 tensor cores (mma.sync)"
                                                                      for h in HALF_DTYPES}}
ASYNC_TEMPLATE = "gemm/gemm_async.cu.jinja"
SIMT_ASYNC_TEMPLATE = "gemm/gemm_simt_async.cu.jinja"
RASTERS = ("row", "grouped")
# Choice fields for what the templates cannot build yet: (field, the only value they build, what it does).
_BUILT = (("cluster", (1, 1), "no thread-block clusters"),)


def uses_tensor_cores(kernel_type: str, enable_tensor_core: bool, dtype: str, family: str = "GEMM") -> bool:
    """True for the mma.sync kernel (the rule of the module docstring).

    FP64 tensor cores (DMMA) compute exact double FMAs, so "auto" and "warp_optimized" take them for
    float64 (2x the SIMT kernel's rate); for float32 they would mean TF32 rounding, so only
    enable_tensor_core=True or kernel_type="tensor_core" turns them on.
    """
    if kernel_type not in KERNEL_TYPES:
        raise ValueError(f"{family} kernel_type={kernel_type!r} is not allowed: choose one of "
                         f"{', '.join(map(repr, KERNEL_TYPES))}")
    if kernel_type == "simple":
        return False
    if kernel_type == "tensor_core":
        return True
    # float64 (DMMA) and the 16-bit types (exact in TF32) lose nothing on tensor cores
    return enable_tensor_core or (dtype != "float32" and kernel_type in ("auto", "warp_optimized"))


def _kind(dtype: str, mma: bool) -> str:
    return f"{dtype} {'mma.sync' if mma else 'SIMT'}"


def _tile(problem: GemmProblem, cfg: ConfigSnapshot, mma: bool, target: Target) -> int:
    """tile_size, or the automatic tile: the largest that still gives every SM a block, else the smallest."""
    if cfg.tile_size not in (0, *shapes.TILES):
        raise ValueError(f"GEMM tile_size={cfg.tile_size} is not allowed: choose 0 (auto) or one of "
                         f"{', '.join(map(str, sorted(shapes.TILES, reverse=True)))}")
    if cfg.tile_size:
        return cfg.tile_size
    fits = [t for t in shapes.TILES
            if not cfg.block_size or cfg.block_size in shapes.valid_threads(problem.dtype, mma, t)]
    if cfg.kernel_type == "simple" and fits:
        return fits[0]      # the smallest tile that takes block_size: 16 unless more threads than outputs
    tiles = [t for t in shapes.AUTO_TILES if t in fits]
    if not tiles:
        raise ValueError(f"GEMM block_size={cfg.block_size} fits no tile of the {_kind(problem.dtype, mma)} kernel: "
                         f"choose one of {', '.join(map(str, shapes.BLOCKS))} or 0 (auto)")
    return next((t for t in tiles if cdiv(problem.m, t) * cdiv(problem.n, t) * problem.batch >= target.sm_count),
                tiles[-1])


def uses_wgmma(problem: GemmProblem, cfg: ConfigSnapshot, target: Target) -> bool:
    """float32 on an sm_90 target with tensor cores allowed (enable_tensor_core, enable_tma, kernel_type
    "tensor_core") or asked for by precision="3xtf32", where the wgmma kernel takes the problem (3xTF32: and
    the product is not too narrow for its split to pay, gemm_wgmma.narrow)."""
    if problem.dtype == "float64" and cfg.precision != "tf32":
        raise ValueError(f"GEMM precision={cfg.precision!r} applies to float32 tensor-core products; float64 is "
                         "exact on every kernel: leave precision='tf32' (the default)")
    if problem.dtype not in ("float32", *HALF_DTYPES) or cfg.kernel_type == "simple":
        return False
    if problem.dtype in HALF_DTYPES:    # f16 / bf16 wgmma: the tensor cores' own precision, taken wherever it builds
        return (uses_tensor_cores(cfg.kernel_type, cfg.enable_tensor_core, problem.dtype)
                and cfg.block_size in (0, 256) and cfg.tile_size in (0, *gemm_wgmma.WIDTHS[1:])
                and gemm_wgmma.why_not(problem, target) is None
                and (problem.trans_b or cfg.tile_size in (0, 64, 128)))
    wanted = (cfg.precision == "3xtf32" or cfg.enable_tma and target.tma
              or uses_tensor_cores(cfg.kernel_type, cfg.enable_tensor_core, problem.dtype))
    # A block_size or tile_size only the mma.sync kernel has names that kernel.
    buildable = cfg.block_size in (0, 256) and cfg.tile_size in (0, *gemm_wgmma.WIDTHS[1:])
    split = cfg.precision == "3xtf32"
    return (wanted and buildable and gemm_wgmma.why_not(problem, target, split) is None
            and not (split and gemm_wgmma.narrow(problem)))


def choices(problem: GemmProblem, cfg: ConfigSnapshot, target: Target) -> list:
    """The shape `cfg` names (heuristic where it leaves tile and block to us), then the tuning candidates; a
    one-row or one-column product first runs as GEMV (vector.py)."""
    if problem.dtype not in ("float32", "float64", *HALF_DTYPES):
        raise TypeError(f"GEMM supports float32, float64, float16 and bfloat16, not {problem.dtype}")
    if problem.dtype in HALF_DTYPES and cfg.precision != "tf32":
        raise ValueError(f"GEMM precision={cfg.precision!r} applies to float32 products; {problem.dtype} multiplies "
                         "exactly on tensor cores: leave precision='tf32' (the default)")
    found = _kernel_choices(problem, cfg, target)
    row = vector.choice(problem, cfg, target)
    return found if row is None else [row, *found]


def _kernel_choices(problem: GemmProblem, cfg: ConfigSnapshot, target: Target, mma: bool | None = None) -> list:
    """The GEMM kernels' choices (choices() without the GEMV route); `mma`: the tensor-core decision made for a
    16-bit problem, planned here on float32's shapes."""
    if mma is None and uses_wgmma(problem, cfg, target):
        found = gemm_wgmma.choices(problem, cfg, target, split=cfg.precision == "3xtf32")
        if problem.dtype in HALF_DTYPES:
            return found
        return found if cfg.tile_size or cfg.block_size else wgmma_splitk.lead(problem, found, target)
    if problem.dtype in HALF_DTYPES:    # float32's kernels and shapes, reading and writing halves (plan())
        mma = uses_tensor_cores(cfg.kernel_type, cfg.enable_tensor_core, problem.dtype)
        made = _kernel_choices(dataclasses.replace(problem, dtype="float32"), cfg, target, mma)
        made = list(dict.fromkeys(dataclasses.replace(c, split_k=1, stages=1) for c in made
                                  if c.stages == 1 or c.shape.mma))
        switches = {"pad": cfg.enable_shared_memory_opt, "unroll": cfg.enable_loop_unroll,
                    "coalesce": cfg.enable_memory_coalescing, "opts": pipeline.compile_opts(cfg)}
        fast = mma16.choice(problem, target, switches) if mma and not cfg.tile_size and not cfg.block_size else None
        return made if fast is None else [fast, *made]
    # precision="3xtf32" where wgmma cannot run: the exact float32 SIMT kernel (at least as accurate).
    if mma is None:
        mma = uses_tensor_cores(cfg.kernel_type, cfg.enable_tensor_core, problem.dtype) and cfg.precision == "tf32"
    tile = _tile(problem, cfg, mma, target)
    threads = cfg.block_size or shapes.default_threads(problem.dtype, mma, tile)
    first = shapes.shape(problem.dtype, mma, tile, threads)
    if first is None:
        valid = shapes.valid_threads(problem.dtype, mma, tile)
        raise ValueError(f"GEMM tile_size={tile} cannot run with block_size={threads} in the "
                         f"{_kind(problem.dtype, mma)} kernel: with tile_size={tile} choose block_size "
                         f"{', '.join(map(str, valid))} (0 = {shapes.default_threads(problem.dtype, mma, tile)})")
    found = [first]
    if not cfg.tile_size and not cfg.block_size and cfg.kernel_type != "simple":
        wide = shapes.WIDE.get((problem.dtype, mma))
        if wide and first.bm == wide.bm and problem.aligned:
            found = [wide, first]
        exact32 = problem.dtype == "float32" and not mma
        if exact32:
            found = [auto_simt(problem, target)]
        found += [s for s in (*shapes.TUNED[problem.dtype, mma], *shapes.CANDIDATES.get((problem.dtype, mma), ()),
                              *((*shapes.AUTO_SIMT, shapes.SKINNY_SIMT) if exact32 else ())) if s not in found]
    switches = {"pad": cfg.enable_shared_memory_opt, "unroll": cfg.enable_loop_unroll,
                "coalesce": cfg.enable_memory_coalescing, "opts": pipeline.compile_opts(cfg)}
    made = [GemmChoice(s, **pipeline_fields(problem.dtype, s, target), **switches) for s in found]
    if not cfg.tile_size and not cfg.block_size and cfg.kernel_type != "simple":
        splits = split_for(problem, made[0], target)
        if splits > 1:                  # the unsplit build stays a tuning candidate
            made.insert(0, dataclasses.replace(made[0], split_k=splits))
        async_simt = GemmChoice(shapes.ASYNC_SIMT, stages=2, **switches)
        if (problem.dtype == "float32" and not mma and problem.trans_a and not problem.trans_b and problem.aligned
                and shapes.async_smem(async_simt.shape, "float32", 2) <= target.smem_per_block):
            made.append(async_simt)     # both operands k-major: 16-byte copies only (gemm_shapes.ASYNC_SIMT)
    # Tuning candidates this target cannot hold (shared memory) drop out; the first choice always stays.
    return made[:1] + [c for c in made[1:] if shapes.why_not(c.shape, problem.dtype, c.stages) is None]


def plan(problem: GemmProblem, choice, target: Target) -> Plan:
    """One launch (split-K, GEMV, wgmma split-K: two); operands a, b (the weight), c."""
    if isinstance(choice, gemm_wgmma.WgmmaChoice):
        return wgmma_plan.plan(problem, choice, target)
    if isinstance(choice, vector.VectorChoice):
        return vector.plan(problem, choice, target)
    if isinstance(choice, wgmma_splitk.SplitKChoice):
        return wgmma_splitk.plan(problem, choice, target)
    for field, built, what in _BUILT:
        if getattr(choice, field) != built:
            raise ValueError(f"GEMM {field}={getattr(choice, field)!r} cannot be built yet (templates/gemm/gemm.cu.jinja "
                             f"has {what}): use {field}={built!r}")
    if choice.raster not in RASTERS:
        raise ValueError(f"GEMM raster={choice.raster!r} is not built: choose one of {', '.join(map(repr, RASTERS))}")
    half = problem.dtype in HALF_DTYPES
    if half and choice.split_k > 1:
        raise ValueError(f"GEMM {problem.dtype} takes no split-K (its partial sums would round to 16 bits): "
                         "use split_k=1")
    s, name = choice.shape, "float32" if half else problem.dtype
    fast = half and choice.stages > 1       # the mma.sync m16n8k16 kernel (mma16.py)
    reason = mma16.why_not(problem, choice, target) if fast else shapes.why_not(s, name, choice.stages)
    if reason:
        raise ValueError(f"GEMM cannot build {_kind(name, s.mma)} shape {s.label}: {reason}")
    dtype = np.dtype(name)
    r = vector_width(dtype)
    vec = r if (choice.coalesce and problem.aligned and not half) else 1
    if fast:
        r = vec = 8         # 16-byte copies of 8 elements
    swap = swapped(problem, choice, vec)
    params = {
        "scalar_t": scalar_t(dtype), "unroll": choice.unroll,
        "BM": s.bm, "BN": s.bn, "BK": s.bk, "R": r, "VEC": vec,
        "trans_a": problem.trans_a or swap, "trans_b": problem.trans_b or swap, "raster": choice.raster,
    }
    if swap:
        params["swap"] = True
    if half:
        params["elem_t"] = storage_t(problem.dtype)
    if problem.batch > 1:
        params["batched"] = True
    splits, chunk = split_k(problem, choice)
    if splits > 1:
        params["split_k"] = True
    fused = problem.epilogue if splits == 1 else ""     # split-K: the reduction applies it, once
    epilogue.add(params, fused, scalar_t(dtype))
    ops = ("t" if problem.trans_a else "n") + ("t" if problem.trans_b else "n")
    kind = f"{'mma16' if fast else 'tf32' if name == 'float32' else 'dmma'}_{s.layout}" if s.mma else s.layout
    depth = f"_s{choice.stages}" if choice.stages > 1 else ""
    readable = (f"gemm_{dtype_tag(problem.dtype)}_t{s.bm}x{s.bn}x{s.bk}_{kind}{depth}_{ops}_v{vec}"
                + ("" if choice.pad else "_nopad") + ("" if choice.unroll else "_nounroll")
                + ("" if choice.raster == "row" else f"_{choice.raster}") + ("_swap" if swap else "")
                + ("_batched" if problem.batch > 1 else "") + ("_splitk" if splits > 1 else "") + epilogue.tag(fused))
    shared = 0
    if choice.stages > 1:
        shared = mma16.smem_bytes(s, choice.stages) if fast else shapes.async_smem(s, name, choice.stages)
        if shared > target.smem_per_block:
            raise ValueError(f"GEMM stages={choice.stages} of shape {s.label} needs {shared} bytes of shared memory; "
                             f"{target.name} gives a block {target.smem_per_block}: choose stages="
                             f"{shapes.default_stages(name, s, target.smem_per_block)}")
        if s.mma:
            params.update({"WARPS_M": s.tm, "WARPS_N": s.tn, "STAGES": choice.stages, "SWIZZLE": choice.pad})
            spec = pipeline.make_spec(ASYNC_TEMPLATE, "gemm", readable, params, choice.opts)
        else:
            params.update({"TM": s.tm, "TN": s.tn, "STAGES": choice.stages, "PAD": _PAD[name, False] if choice.pad
                           else 0, "min_blocks": 2 if s.threads == 256 else 1})
            spec = pipeline.make_spec(SIMT_ASYNC_TEMPLATE, "gemm", readable, params, choice.opts)
    else:
        params.update({"mma": s.mma, "PAD": _PAD[name, s.mma] if choice.pad else 0})
        # Two blocks per SM (a 128-register cap) for float32 at 256 threads, tuned on the H100 (4097^3 SIMT:
        # 39.2 against 36.5 TFLOP/s; the template applies it on sm_90+ only); never above 256 threads, where it
        # would cap at 64.
        params["min_blocks"] = 2 if name == "float32" and s.threads == 256 else 1
        params.update({"WARPS_M": s.tm, "WARPS_N": s.tn, "WARPS_K": s.wk} if s.mma else {"TM": s.tm, "TN": s.tn})
        spec = pipeline.make_spec(TEMPLATE, "gemm", readable, params, choice.opts)
    operands = ("a", "b", "c", *epilogue.operand_names(problem.epilogue))
    extra, ws = epilogue.args(problem.epilogue, 3), len(operands)
    if splits == 1:
        kl = launch(problem, spec, s, (ptr(0), ptr(1), ptr(2)), shared, swap, extra)
        return Plan((dataclasses.replace(kl, units=mma16.UNITS[problem.dtype]) if fast else kl,), operands,
                    choice=choice.label)
    # Split-K: the partial products (alpha applied, beta 0) into the workspace, M x N each, then their sum.
    size = problem.m * problem.n
    part = launch(dataclasses.replace(problem, ldc=problem.n, beta=0.0), spec, s, (ptr(0), ptr(1), ptr(ws)), shared)
    part = dataclasses.replace(part, grid=(*part.grid[:2], splits), args=(*part.args, i32(chunk), i64(size)))
    sums = splitk.reduce_launch(dtype, ptr(ws), ptr(2), problem.m, problem.n, problem.ldc, splits, problem.beta,
                                target, UNITS[problem.dtype, False], choice.unroll, choice.opts, problem.epilogue, extra)
    return Plan((part, sums), operands, workspace=splits * size * dtype.itemsize, choice=choice.label)


def split_k(problem: GemmProblem, choice: GemmChoice) -> tuple[int, int]:
    """(slices, K columns per slice) of `choice.split_k` on this problem: slices of whole k-tiles, at most
    split_k of them (fewer where K is short); (1, K) without split-K."""
    if choice.split_k == 1 or problem.k == 0:
        return 1, problem.k
    if choice.split_k < 1 or choice.stages > 1 and choice.shape.mma or problem.batch > 1:
        raise ValueError(f"GEMM split_k={choice.split_k} is built for one problem (not a batch) on the SIMT kernels "
                         "and the one-stage mma.sync kernel (stages=1), at least 1: use split_k=1 there")
    chunk = cdiv(cdiv(problem.k, choice.split_k), choice.shape.bk) * choice.shape.bk
    return cdiv(problem.k, chunk), chunk


def swapped(problem: GemmProblem, choice: GemmChoice, vec: int) -> bool:
    """Whether the cp.async DMMA kernel runs an aligned float64 A @ B as C^T = B^T @ A^T (gemm_async.cu.jinja
    `swap`): its both-transposed layout holds fewer live registers (H100 4096³: 47.1 against 41.6 TFLOP/s)."""
    return (choice.stages > 1 and choice.shape.mma and problem.dtype == "float64" and vec > 1
            and not problem.trans_a and not problem.trans_b)


def launch(problem: GemmProblem, spec: pipeline.KernelSpec, s: shapes.Shape, pointers: tuple,
           shared: int = 0, swap: bool = False, extra: tuple = ()) -> KernelLaunch:
    """The launch of `spec` (planned for `problem`) on A, B, C = `pointers`: batches past 65535 (grid z) go to x.
    `shared`: dynamic shared memory (the cp.async kernel's stages); `swap`: the kernel computes C^T, so its
    block tiles run over (n, m); `extra`: the epilogue's arguments, last."""
    dtype = np.dtype("float32" if problem.dtype in HALF_DTYPES else problem.dtype)     # alpha, beta: scalar_t
    args = (*pointers, i32(problem.m), i32(problem.n), i32(problem.k), i32(problem.lda),
            i32(problem.ldb), i32(problem.ldc), scalar(dtype, problem.alpha), scalar(dtype, problem.beta))
    rows, cols = (problem.n, problem.m) if swap else (problem.m, problem.n)
    tiles_n, grid_z = cdiv(cols, s.bn), 1
    if problem.batch > 1:
        grid_z = min(problem.batch, 65535)
        args += (i64(problem.stride_a), i64(problem.stride_b), i64(problem.stride_c), i32(problem.batch),
                 i32(tiles_n))
    grid = (tiles_n * cdiv(problem.batch, grid_z), cdiv(rows, s.bm), grid_z)
    return KernelLaunch(spec, grid, (s.threads,), (*args, *extra), shared=shared, units=UNITS[problem.dtype, s.mma])


# The old specs() shapes: large and small square problems (aligned), odd ones (unaligned).
_PREWARM = ((4096, 4096, 4096, True), (1024, 1024, 1024, True), (1000, 1000, 1000, True),
            (33, 4097, 1000, False), (7, 7, 7, False))


def problems() -> list[GemmProblem]:
    """Every dtype; B as stored (nn, what a default GemmFloat() runs) and transposed (nt, a Linear layer's weight)."""
    return [packed(dt, m, n, k, False, trans_b, aligned) for dt in ("float32", "float64", *HALF_DTYPES)
            for trans_b in (False, True) for m, n, k, aligned in _PREWARM]


FAMILY = Family("gemm", choices, plan, problems)
