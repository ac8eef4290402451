"""The Convolution2D family: 2-D convolution of NCHW or channels_last (NHWC) tensors, each of x and y either
(templates/conv2d/conv2d.cu.jinja, conv2d_direct.cu.jinja, conv2d_wgmma.cu.jinja; problem.py holds the problem).

Four kernels. A 1x1 layer of stride 1 on channels_last x and y is one GEMM, y[NHW, K] = x[NHW, C] @ W^T,
planned by the GEMM family (gemm_route.py: no im2col, no copy, nothing packed): it comes first, except for
3xTF32, where the GEMM would split both operands per call (the convolution kernels split the weight once), and
where the GEMM's wgmma grid is small (batch 1) and the k-sliced implicit GEMM below fills the GPU.
On sm_90, float32 tensor-core work (TF32 or 3xTF32) on layers of one group (strides up to 8) goes to the wgmma
kernel (wgmma.py: TMA reads a channels_last x as it is, an NCHW x through an NHWC copy; boxes.py: its pixel
boxes) where its `why_not` allows and tile_size / block_size are ones it builds; the rest runs as below. The
implicit GEMM (implicit.py: its tiles and thread layouts; the weight
packed into a zero-padded [G][K][M] buffer, then one launch: M = output channels per group, N = output
pixels, K = Cg * kh * kw, the input addressed through an operand iterator, no im2col buffer) and, for layers
with fewer than DIRECT_BELOW output channels per group (depthwise), a direct kernel. A plan that packs the
weight is a problem.ConvPlan: a Convolution2D packs once per set_weight (packing.py), not per forward. How
each JITConfig field changes the code:

    kernel_type     implicit GEMM: "auto": float64 -> DMMA mma.sync (exact FP64 FMAs); float32 -> SIMT,
                    or TF32 mma.sync with enable_tensor_core=True. "tiled" / "warp_optimized": the same,
                    "warp_optimized" taking DMMA for float64 and TF32 only when granted. "tensor_core":
                    mma.sync (float32 as TF32). "simple": SIMT, by default on 16 x 16 tiles.
                    direct kernel: "simple" = one output per thread, others DIRECT_OPT adjacent outputs
    tile_size       implicit GEMM: BM = BN = 16, 32, 64 or 128 (0: the largest of 128, 64, 32 that
                    wastes at most a quarter of its rows on missing channels and gives every SM a block;
                    float32 SIMT windows on small images: an evenly spread 8 x 8 thread tile, implicit.py)
                    direct kernel: does not apply (outputs per thread follow kernel_type)
    block_size      threads per block (0: the tile's default; direct kernel 256). Implicit GEMM: it
                    fixes the SIMT thread tile or the mma warp layout; a value the tile cannot take
                    raises, listing the valid ones
    enable_tensor_core        permission for TF32 mma.sync under "auto", "tiled", "warp_optimized"
    precision       "tf32": one TF32 product. "3xtf32": the float32 mma.sync kernel (even without
                    enable_tensor_core; not under "simple", which stays exact SIMT) with operands kept in
                    float32 and split in registers, a*b ~ big*big + big*small + small*big (float32-grade
                    error, three mma each). float64 raises (exact on every kernel); the direct kernel is
                    exact FMA under either
    enable_tma                on sm_90, float32 runs the wgmma kernel (TF32) where it applies; else ignored
    enable_loop_unroll        `#pragma unroll` vs `unroll 1` on the k-loop in a tile / the channel loop
    enable_memory_coalescing  vector output stores (where output planes line up) vs scalar stores
    enable_shared_memory_opt  implicit GEMM: shared-memory row padding on/off; direct kernel: ignored
optimization_level and max_registers reach NVRTC.

float16 / bfloat16 (read exactly, products and sums in float32, y rounded once on store): on sm_90 the wgmma
kernel in f16 / bf16 where it applies, pointwise channels_last layers on the GEMM family's f16 / bf16 kernels;
the C = 3 stem there with its window's columns folded into the channels (fold.py); elsewhere (sm_80 / sm_89,
layers wgmma does not take) the implicit GEMM with 16-bit loads into
float32 shared memory and TF32 mma.sync, exact on 16-bit operands ("auto"; "simple": SIMT), no k-slices (their
partial sums would round); depthwise layers on the direct kernel (float32 FMAs). precision "3xtf32" raises.

A user epilogue (ConvProblem.epilogue, cuopjit/ops/epilogue.py; bias and relu are then off) replaces bias and
ReLU where each kernel stores y: its operands follow x, weight, bias, y, then comes the workspace; an
output-shaped operand has y's layout.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import Family, KernelLaunch, Plan, i32, i64, ptr
from ...target import Target
from .. import epilogue
from ..base import HALF_DTYPES, cdiv, dtype_tag, scalar_t, storage_t, vector_width
from ..gemm.plans import uses_tensor_cores
from . import fold, gemm_route, implicit, splitk, wgmma as conv2d_wgmma, wgmma_plan as conv2d_wgmma_plan
from .implicit import k_order
from .problem import ConvChoice, ConvPlan, ConvProblem, problems
from .shapes import TILES, why_not

TEMPLATE, DIRECT_TEMPLATE = "conv2d/conv2d.cu.jinja", "conv2d/conv2d_direct.cu.jinja"
DIRECT_BELOW = 8          # output channels per group under which the direct kernel runs
DIRECT_OPT = 4            # adjacent outputs per thread of the direct kernel
FEW_TILES = 0.25          # a wgmma grid of fewer tiles than this many per SM yields to the k-sliced mma.sync kernel
_PAD = {("float32", False): 4, ("float64", False): 2, ("float32", True): 8, ("float64", True): 4}
UNITS = {("float32", False): "FP32 cores (SIMT)", ("float64", False): "FP64 cores (SIMT)",
         ("float32", True): "TF32 tensor cores (mma.sync)", ("float64", True): "FP64 tensor cores (DMMA mma.sync)",
         ("float16", False): "FP32 cores (SIMT, float16 operands)", ("bfloat16", False): "FP32 cores (SIMT, bfloat16 operands)",
         ("float16", True): "TF32 tensor cores (mma.sync, exact on float16)",
         ("bfloat16", True): "TF32 tensor cores (mma.sync, exact on bfloat16)"}


def computed(problem: ConvProblem) -> ConvProblem:
    """The problem the implicit GEMM's shapes are chosen for: float32 for the 16-bit types (float32 shared memory)."""
    return dataclasses.replace(problem, dtype="float32") if problem.dtype in HALF_DTYPES else problem


def choices(problem: ConvProblem, cfg: ConfigSnapshot, target: Target) -> list:
    """The kernel `cfg` names for this layer first; with tile and block free, the other default shapes
    (wide 64 x 128, square 128 and 64) follow as auto-tuning candidates; a pointwise channels_last layer
    adds the GEMM family's choices (first, except for 3xTF32: see the module docstring)."""
    found = _conv_choices(problem, cfg, target)
    if not gemm_route.applies(problem):
        return found
    try:
        routed = gemm_route.choices(problem, cfg, target)
    except ValueError:          # a tile_size / block_size only the convolution kernels build
        return found
    return found + routed if _convolution_leads(problem, cfg, target, found, routed) else routed + found


def _convolution_leads(problem: ConvProblem, cfg: ConfigSnapshot, target: Target, found: list, routed: list) -> bool:
    """Whether a pointwise channels_last layer runs a convolution kernel rather than the GEMM (H100, ResNet-50):
    TF32 where the GEMM's wgmma grid is under one wave and either the k-sliced implicit GEMM fills the GPU or the
    reduction is long (C >= 1024: the channel-major wgmma convolution, 4-20% ahead), and where the wgmma
    convolution brings an output-shaped epilogue operand (a residual) into shared memory by TMA during the k-loop
    (the GEMM reads it after: 1x1 64->256 at 56² and 128->512 at 28², batch 32, + BN + ReLU + residual, 7-10%
    ahead); 3xTF32 unless the layer is wide (K >= 1024: the GEMM's per-call operand split is cheap beside M N K
    there, 10-24% ahead)."""
    tiles = gemm_route.lead_tiles(problem, routed[0])
    if cfg.precision == "3xtf32" and cfg.kernel_type != "simple":
        return not (problem.k >= 1024 and tiles)
    if isinstance(found[0], conv2d_wgmma.WgmmaConvChoice) and found[0].rtiles and not found[0].split:
        return True
    if not tiles or tiles >= target.sm_count:
        return False
    return (getattr(found[0], "split_k", 1) > 1 or tiles < FEW_TILES * target.sm_count
            or problem.c >= 1024 and isinstance(found[0], conv2d_wgmma.WgmmaConvChoice))


def _conv_choices(problem: ConvProblem, cfg: ConfigSnapshot, target: Target) -> list:
    """The convolution kernels' choices (the wgmma kernel's, the direct kernel's or the implicit GEMM's)."""
    if problem.dtype not in ("float32", "float64", *HALF_DTYPES):
        raise TypeError(f"Convolution2D supports float32, float64, float16 and bfloat16, not {problem.dtype}")
    precision = getattr(cfg, "precision", "tf32")
    if problem.dtype != "float32" and precision != "tf32":
        raise ValueError(f"Convolution2D precision={precision!r} applies to float32 tensor-core products; "
                         f"{problem.dtype} is exact on every kernel: leave precision='tf32' (the default)")
    half = problem.dtype in HALF_DTYPES
    split = precision == "3xtf32" and cfg.kernel_type != "simple"
    mma = uses_tensor_cores(cfg.kernel_type, cfg.enable_tensor_core, problem.dtype, "Convolution2D") or split
    if cfg.tile_size not in (0, *TILES):
        raise ValueError(f"Convolution2D tile_size={cfg.tile_size} is not allowed: choose 0 (auto) or one of "
                         f"{', '.join(map(str, TILES))}")
    wgmma = mma or cfg.enable_tma and target.tma and cfg.kernel_type != "simple"
    if wgmma and problem.kg >= DIRECT_BELOW and conv2d_wgmma.applies(problem, cfg, target, split):
        found = conv2d_wgmma.choices(problem, cfg, target, split)
        if cfg.tile_size or cfg.block_size or conv2d_wgmma.tiles(problem, found[0]) >= FEW_TILES * target.sm_count:
            return found
        # A handful of persistent tiles (batch 1, small images): the mma.sync kernel's k-slices fill the GPU.
        if half:            # no k-slices in 16 bits
            return found + _implicit(problem, cfg, target, True, split)
        sliced = implicit.choices(problem, cfg, target, True, split)
        return sliced + found if sliced[0].split_k > 1 else found + sliced
    if (wgmma and problem.kg >= DIRECT_BELOW and conv2d_wgmma.why_not(problem, target, fold=True) is None
            and cfg.tile_size in (0, 64, 128) and cfg.block_size in conv2d_wgmma.BLOCKS):   # the 16-bit stem
        found = conv2d_wgmma.fold_choices(problem, conv2d_wgmma.choices(fold.folded(problem), cfg, target, False),
                                          target)
        return found + _implicit(problem, cfg, target, True, split)
    if problem.kg < DIRECT_BELOW:   # exact FMAs: every precision holds
        return [ConvChoice(None, cfg.block_size or 256, 1 if cfg.kernel_type == "simple" else DIRECT_OPT,
                           unroll=cfg.enable_loop_unroll, coalesce=cfg.enable_memory_coalescing,
                           opts=pipeline.compile_opts(cfg))]
    return _implicit(problem, cfg, target, mma, split)


def _implicit(problem: ConvProblem, cfg: ConfigSnapshot, target: Target, mma: bool, split: bool) -> list:
    """The implicit GEMM's choices; for the 16-bit types those of float32 (its shared memory), unsliced."""
    found = implicit.choices(computed(problem), cfg, target, mma, split)
    return [c for c in found if c.split_k == 1] if problem.dtype in HALF_DTYPES else found


def _window(problem: ConvProblem) -> dict:
    p = problem
    return {"KH": p.kh, "KW": p.kw, "SH": p.sh, "SW": p.sw, "PH": p.ph, "PW": p.pw, "DH": p.dh, "DW": p.dw}


def _window_tag(problem: ConvProblem, epilogues: bool = True) -> str:
    p = problem
    return (f"k{p.kh}x{p.kw}_s{p.sh}x{p.sw}_p{p.ph}x{p.pw}" + (f"_d{p.dh}x{p.dw}" if (p.dh, p.dw) != (1, 1) else "")
            + (("_bias" if p.bias else "") + ("_relu" if p.relu else "") + epilogue.tag(p.epilogue) if epilogues
               else ""))


def fused(problem: ConvProblem) -> tuple[tuple[str, ...], tuple, int]:
    """(the plan's operands, the epilogue's kernel arguments, the workspace's pointer index)."""
    operands = ("x", "weight", "bias", "y", *epilogue.operand_names(problem.epilogue))
    return operands, epilogue.args(problem.epilogue, 4), len(operands)


def plan(problem: ConvProblem, choice, target: Target) -> Plan:
    """Operands x, weight, bias, y (bias unread without one); the implicit GEMM packs the weight into the workspace."""
    if isinstance(choice, conv2d_wgmma.WgmmaConvChoice):
        return conv2d_wgmma_plan.plan(problem, choice, target)
    if isinstance(choice, gemm_route.GemmRouteChoice):
        if not gemm_route.applies(problem):
            raise ValueError("Convolution2D runs as a GEMM only 1x1 layers of stride 1, no padding, one group, with "
                             "x and y channels_last: choose another kernel for this layer")
        return gemm_route.plan(problem, choice, target)
    return (_gemm_plan if choice.shape else _direct_plan)(problem, choice, target)


def _gemm_plan(problem: ConvProblem, choice: ConvChoice, target: Target) -> ConvPlan:
    p, s, half = problem, choice.shape, problem.dtype in HALF_DTYPES
    name = computed(p).dtype
    reason = why_not(s, name)
    if reason:
        raise ValueError(f"Convolution2D cannot build shape {s.label} for {p.dtype}: {reason}")
    if half and choice.split_k > 1:
        raise ValueError(f"Convolution2D {p.dtype} takes no k-slices (their partial sums would round to 16 bits): "
                         "use split_k=1")
    dtype = np.dtype(name)
    r, tag = vector_width(dtype), dtype_tag(p.dtype)
    io = {"elem_t": storage_t(p.dtype)} if half else {}
    order, ct, ktiles = k_order(p, s.bk)
    operands, extra, ws = fused(p)
    mpad, kpad = cdiv(p.kg, s.bm) * s.bm, ktiles * s.bk
    ohw, npix = p.oh * p.ow, p.n * p.oh * p.ow
    total = p.groups * kpad * mpad
    per, splits = splitk.chunk(ktiles, choice.split_k)
    if splits > 1 and not splitk.allowed(p):
        raise ValueError(f"Convolution2D split_k={choice.split_k}: k-slices take layers of one group with y "
                         "channels_last or one NCHW image; use split_k=1 here")
    at = cdiv(splits * npix * p.k * dtype.itemsize, 256) * 256 if splits > 1 else 0   # the slices, then the weight
    pack = pipeline.make_spec(TEMPLATE, "conv2d_pack", f"conv2d_pack_{tag}_k{p.kh}x{p.kw}_{order}",
                             {"scalar_t": scalar_t(dtype), "unroll": True, "kernel": "pack", "KH": p.kh, "KW": p.kw,
                              "ORDER": order, **io}, choice.opts)
    pack_launch = KernelLaunch(pack, (min(cdiv(total, 256), 1 << 20),), (256,),
                               (ptr(1), ptr(ws, at), i32(p.cg), i32(p.kg), i32(ct * s.bk), i32(kpad), i32(mpad),
                                i64(total)),
                               units=UNITS["float32" if half else name, False].replace(" (SIMT)", ""))
    vec = (2 if s.mma else r) if choice.coalesce and p.aligned and ohw % (2 if s.mma else r) == 0 else 1
    vm = min(s.tm, r)      # the SIMT thread's runs of consecutive channels (a channels_last y's vector stores)
    params = {"scalar_t": scalar_t(dtype), "unroll": choice.unroll, "kernel": "conv", "mma": s.mma, "BM": s.bm,
              "BN": s.bn, "BK": s.bk, "R": r, "PAD": _PAD[name, s.mma] if choice.pad else 0, "ORDER": order,
              "VEC_OUT": 1 if p.y_nhwc else vec, "bias": p.bias and splits == 1, "relu": p.relu and splits == 1,
              "split": choice.split, "SPLIT_K": splits > 1,
              "min_blocks": 2 if name == "float32" and s.threads == 256 and not choice.split else 1,
              "X_NHWC": p.x_nhwc, "Y_NHWC": p.y_nhwc, **_window(p), **io}
    if p.x_nhwc:     # loads of XV channels: 16 bytes where C, Cg and x line up
        params["XV"] = r if p.x_aligned and p.c % r == 0 and p.cg % r == 0 and s.bk % r == 0 else 1
    if p.y_nhwc:
        params["VEC_M"] = choice.coalesce and not s.mma and p.aligned and p.kg % vm == 0
    params.update({"WARPS_M": s.tm, "WARPS_N": s.tn, "WARPS_K": s.wk} if s.mma else {"TM": s.tm, "TN": s.tn})
    epilogue.add(params, p.epilogue if splits == 1 else "", scalar_t(dtype))   # split: the reduction applies it
    kind = f"{('3xtf32' if choice.split else 'tf32') if name == 'float32' else 'dmma'}_" if s.mma else ""
    readable = (f"conv2d_{tag}_{_window_tag(p) if splits == 1 else _window_tag(p, False)}_{kind}{s.label}_{order}"
                + f"_v{1 if p.y_nhwc else vec}" + ("_splitk" if splits > 1 else "")
                + p.layout_tag + ("" if choice.pad else "_nopad") + ("" if choice.unroll else "_nounroll"))
    spec = pipeline.make_spec(TEMPLATE, "conv2d", readable, params, choice.opts)
    if splits > 1:          # raw sums into the slices; the reduction reads the bias and the epilogue's operands
        args = (ptr(0), ptr(ws, at), ptr(ws), i32(p.c), i32(p.h), i32(p.w), i32(p.k), i32(p.oh), i32(p.ow),
                i32(p.cg), i32(p.kg), i32(npix), i32(ct), i32(ktiles), i32(mpad), i32(per))
    else:
        args = (ptr(0), ptr(ws, at), *((ptr(2),) if p.bias else ()), ptr(3), i32(p.c), i32(p.h), i32(p.w), i32(p.k),
                i32(p.oh), i32(p.ow), i32(p.cg), i32(p.kg), i32(npix), i32(ct), i32(ktiles), i32(mpad), *extra)
    units = UNITS[name, s.mma].replace("TF32", "3xTF32") if choice.split else UNITS[p.dtype, s.mma]
    conv = KernelLaunch(spec, (cdiv(npix, s.bn), cdiv(p.kg, s.bm), splits if splits > 1 else p.groups), (s.threads,),
                        args, units=units)
    launches = (pack_launch, conv)
    if splits > 1:
        launches += (splitk.reduce(p, splits, ptr(ws), ptr(3), target, UNITS[name, False], choice.unroll,
                                   choice.opts),)
    size = total * dtype.itemsize
    return ConvPlan(launches, operands, workspace=at + cdiv(size, 256) * 256, choice=choice.label,
                    pack_launches=1, packed_at=at)


def _direct_plan(problem: ConvProblem, choice: ConvChoice, target: Target) -> Plan:
    p, dtype = problem, np.dtype(computed(problem).dtype)
    opt, r = choice.opt, vector_width(dtype)
    vec = opt if choice.coalesce and p.aligned and opt == r and p.ow % opt == 0 and not p.y_nhwc else 1
    params = epilogue.add({"scalar_t": scalar_t(dtype), "unroll": choice.unroll, "THREADS": choice.threads,
                           "OPT": opt, "VEC_OUT": vec, "bias": p.bias, "relu": p.relu, "X_NHWC": p.x_nhwc,
                           "Y_NHWC": p.y_nhwc, **_window(p),
                           **({"elem_t": storage_t(p.dtype)} if p.dtype in HALF_DTYPES else {})}, p.epilogue,
                          scalar_t(dtype))
    operands, extra, _ = fused(p)
    readable = f"conv2d_direct_{dtype_tag(p.dtype)}_{_window_tag(p)}_{choice.label}_v{vec}{p.layout_tag}"
    spec = pipeline.make_spec(DIRECT_TEMPLATE, "conv2d_direct", readable, params, choice.opts)
    owg = cdiv(p.ow, opt)
    total = p.n * p.k * p.oh * owg
    args = (ptr(0), ptr(1), *((ptr(2),) if p.bias else ()), ptr(3), i32(p.c), i32(p.h), i32(p.w), i32(p.k),
            i32(p.oh), i32(p.ow), i32(p.cg), i32(p.kg), i32(owg), i64(total), *extra)
    launch = KernelLaunch(spec, (min(cdiv(total, choice.threads), 1 << 20),), (choice.threads,), args,
                          units=UNITS[p.dtype, False])
    return Plan((launch,), operands, choice=choice.label)


FAMILY = Family("conv2d", choices, plan, problems)
