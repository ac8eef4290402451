"""The Convolution2D family: NCHW 2-D convolution (templates/conv2d/conv2d.cu.jinja, conv2d_direct.cu.jinja,
conv2d_wgmma.cu.jinja).

Three pipeline. On sm_90, float32 tensor-core work (TF32 or 3xTF32) on layers of one group (strides
up to 8) goes to the wgmma kernel (cuopjit/ops/conv2d/wgmma.py: an NHWC copy read by TMA, wgmma from
swizzled shared memory) where its `why_not` allows and tile_size / block_size are ones it builds;
the rest runs as below. The implicit GEMM (a pack launch puts the weight in a zero-padded [G][K][M] workspace,
then one launch: M = output channels per group, N = output pixels, K = Cg * kh * kw, the input
addressed through an operand iterator, no im2col buffer) and, for layers with fewer than
DIRECT_BELOW output channels per group (depthwise), a direct kernel. How each JITConfig field
changes the code:

    kernel_type     implicit GEMM: "auto": float64 -> DMMA mma.sync (exact FP64 FMAs); float32 -> SIMT,
                    or TF32 mma.sync with enable_tensor_core=True. "tiled" / "warp_optimized": the same,
                    "warp_optimized" taking DMMA for float64 and TF32 only when granted. "tensor_core":
                    mma.sync (float32 as TF32). "simple": SIMT, by default on 16 x 16 tiles.
                    direct kernel: "simple" = one output per thread, others DIRECT_OPT adjacent outputs
    tile_size       implicit GEMM: BM = BN = 16, 32, 64 or 128 (0: the largest of 128, 64, 32 that
                    wastes at most a quarter of its rows on missing channels and gives every SM a block)
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

A user epilogue (ConvProblem.epilogue, cuopjit/ops/epilogue.py; bias and relu are then off) replaces bias and
ReLU where each kernel stores y: its operands follow x, weight, bias, y, then comes the workspace.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import Family, KernelLaunch, Plan, i32, i64, ptr
from ...target import Target
from .. import epilogue
from ..base import cdiv, dtype_tag, scalar_t, vector_width
from ..gemm.plans import uses_tensor_cores
from . import wgmma as conv2d_wgmma
from .shapes import BLOCKS, TILES, TUNED, WIDE, Shape, derive, valid_threads, why_not

TEMPLATE, DIRECT_TEMPLATE = "conv2d/conv2d.cu.jinja", "conv2d/conv2d_direct.cu.jinja"
DIRECT_BELOW = 8          # output channels per group under which the direct kernel runs
DIRECT_OPT = 4            # adjacent outputs per thread of the direct kernel
_PAD = {("float32", False): 4, ("float64", False): 2, ("float32", True): 8, ("float64", True): 4}
UNITS = {("float32", False): "FP32 cores (SIMT)", ("float64", False): "FP64 cores (SIMT)",
         ("float32", True): "TF32 tensor cores (mma.sync)", ("float64", True): "FP64 tensor cores (DMMA mma.sync)"}


@dataclass(frozen=True)
class ConvProblem:
    """One convolution: x N x C x H x W, weight K x C/groups x kh x kw, window and epilogue (bias, relu, or a user
    epilogue's key); 16-byte alignment."""
    dtype: str
    n: int
    c: int
    h: int
    w: int
    k: int
    kh: int
    kw: int
    sh: int = 1
    sw: int = 1
    ph: int = 0
    pw: int = 0
    dh: int = 1
    dw: int = 1
    groups: int = 1
    bias: bool = False
    relu: bool = False
    aligned: bool = True
    epilogue: str = ""

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.ph - self.dh * (self.kh - 1) - 1) // self.sh + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pw - self.dw * (self.kw - 1) - 1) // self.sw + 1

    @property
    def cg(self) -> int:
        return self.c // self.groups

    @property
    def kg(self) -> int:
        return self.k // self.groups


@dataclass(frozen=True)
class ConvChoice:
    """The direct kernel (shape None: threads, outputs per thread) or an implicit-GEMM shape, plus switches."""
    shape: Shape | None
    threads: int
    opt: int = 1
    pad: bool = True
    unroll: bool = True
    coalesce: bool = True
    split: bool = False     # 3xTF32 products (float32 mma only)
    opts: pipeline.CompileOpts = pipeline.DEFAULT_OPTS

    @property
    def label(self) -> str:
        head = self.shape.label if self.shape else f"direct_o{self.opt}_b{self.threads}"
        return (head + ("_3xtf32" if self.split else "") + ("" if self.coalesce else "_scalar")
                + ("" if self.pad or not self.shape else "_nopad")
                + ("" if self.unroll else "_nounroll"))


def _auto_tile(problem: ConvProblem, cfg: ConfigSnapshot, mma: bool, target: Target) -> int:
    """The largest tile that wastes at most a quarter of its rows and still gives every SM a block."""
    fits = [t for t in TILES if not cfg.block_size or cfg.block_size in valid_threads(problem.dtype, mma, t)]
    if not fits:
        raise ValueError(f"Convolution2D block_size={cfg.block_size} fits no tile: choose one of "
                         f"{', '.join(map(str, BLOCKS))} or 0 (auto)")
    if cfg.kernel_type == "simple":
        return fits[0]
    npix = problem.n * problem.oh * problem.ow
    good = [t for t in (128, 64, 32, 16) if t in fits and cdiv(problem.kg, t) * t <= 1.25 * problem.kg] or \
           [t for t in (32, 64, 128, 16) if t in fits][:1]
    return next((t for t in good if cdiv(problem.kg, t) * cdiv(npix, t) * problem.groups >= target.sm_count),
                good[-1])


def choices(problem: ConvProblem, cfg: ConfigSnapshot, target: Target) -> list[ConvChoice]:
    """The kernel `cfg` names for this layer first; with tile and block free, the other default shapes
    (wide 64 x 128, square 128 and 64) follow as auto-tuning candidates."""
    if problem.dtype not in ("float32", "float64"):
        raise TypeError(f"Convolution2D supports float32 and float64, not {problem.dtype}")
    precision = getattr(cfg, "precision", "tf32")
    if problem.dtype == "float64" and precision != "tf32":
        raise ValueError(f"Convolution2D precision={precision!r} applies to float32 tensor-core products; float64 "
                         "is exact on every kernel: leave precision='tf32' (the default)")
    split = precision == "3xtf32" and cfg.kernel_type != "simple"
    mma = uses_tensor_cores(cfg.kernel_type, cfg.enable_tensor_core, problem.dtype, "Convolution2D") or split
    if cfg.tile_size not in (0, *TILES):
        raise ValueError(f"Convolution2D tile_size={cfg.tile_size} is not allowed: choose 0 (auto) or one of "
                         f"{', '.join(map(str, TILES))}")
    wgmma = mma or cfg.enable_tma and target.tma and cfg.kernel_type != "simple"
    if wgmma and problem.kg >= DIRECT_BELOW and conv2d_wgmma.applies(problem, cfg, target, split):
        return conv2d_wgmma.choices(problem, cfg, target, split)
    switches = {"unroll": cfg.enable_loop_unroll, "coalesce": cfg.enable_memory_coalescing,
                "opts": pipeline.compile_opts(cfg)}
    if problem.kg < DIRECT_BELOW:   # exact FMAs: every precision holds
        return [ConvChoice(None, cfg.block_size or 256, 1 if cfg.kernel_type == "simple" else DIRECT_OPT,
                           **switches)]
    tile = cfg.tile_size or _auto_tile(problem, cfg, mma, target)
    wide = WIDE[problem.dtype, mma]
    npix = problem.n * problem.oh * problem.ow
    free = not cfg.tile_size and not cfg.block_size and cfg.kernel_type != "simple"
    if free and tile == wide.bm and cdiv(problem.kg, wide.bm) * cdiv(npix, wide.bn) * problem.groups >= target.sm_count:
        shape = wide
    else:
        threads = cfg.block_size or TUNED[problem.dtype, mma][TILES[::-1].index(tile)].threads
        shape = derive(problem.dtype, mma, tile, threads)
    if shape is None:
        kind = f"{problem.dtype} {'mma.sync' if mma else 'SIMT'}"
        raise ValueError(f"Convolution2D tile_size={tile} cannot run with block_size={threads} in the {kind} "
                         f"kernel: choose block_size {', '.join(map(str, valid_threads(problem.dtype, mma, tile)))}")
    # With tile and block left free, the other default shapes of the same kernel are auto-tuning candidates.
    found = [shape] + ([s for s in (wide, *TUNED[problem.dtype, mma][:2]) if s != shape] if free else [])
    return [ConvChoice(s, s.threads, pad=cfg.enable_shared_memory_opt, split=split, **switches) for s in found]


def k_order(problem: ConvProblem, bk: int) -> tuple[str, int, int]:
    """(order, channel chunks per tap, k-tiles): "chunk" unless chunks of bk channels waste > 1/8 of the k-tiles."""
    taps, cg = problem.kh * problem.kw, problem.cg
    chunked, flat = taps * cdiv(cg, bk), cdiv(cg * taps, bk)
    if chunked * 8 <= flat * 9:
        return "chunk", cdiv(cg, bk), chunked
    return "flat", 0, flat


def _window(problem: ConvProblem) -> dict:
    p = problem
    return {"KH": p.kh, "KW": p.kw, "SH": p.sh, "SW": p.sw, "PH": p.ph, "PW": p.pw, "DH": p.dh, "DW": p.dw}


def _window_tag(problem: ConvProblem) -> str:
    p = problem
    return (f"k{p.kh}x{p.kw}_s{p.sh}x{p.sw}_p{p.ph}x{p.pw}" + (f"_d{p.dh}x{p.dw}" if (p.dh, p.dw) != (1, 1) else "")
            + ("_bias" if p.bias else "") + ("_relu" if p.relu else "") + epilogue.tag(p.epilogue))


def fused(problem: ConvProblem) -> tuple[tuple[str, ...], tuple, int]:
    """(the plan's operands, the epilogue's kernel arguments, the workspace's pointer index)."""
    operands = ("x", "weight", "bias", "y", *epilogue.operand_names(problem.epilogue))
    return operands, epilogue.args(problem.epilogue, 4), len(operands)


def plan(problem: ConvProblem, choice: ConvChoice, target: Target) -> Plan:
    """Operands x, weight, bias, y (bias unread without one); the implicit GEMM packs the weight into the workspace."""
    if isinstance(choice, conv2d_wgmma.WgmmaConvChoice):
        return conv2d_wgmma.plan(problem, choice, target)
    return (_gemm_plan if choice.shape else _direct_plan)(problem, choice, target)


def _gemm_plan(problem: ConvProblem, choice: ConvChoice, target: Target) -> Plan:
    p, s, name = problem, choice.shape, problem.dtype
    reason = why_not(s, name)
    if reason:
        raise ValueError(f"Convolution2D cannot build shape {s.label} for {name}: {reason}")
    dtype = np.dtype(name)
    r, tag = vector_width(dtype), dtype_tag(dtype)
    order, ct, ktiles = k_order(p, s.bk)
    operands, extra, ws = fused(p)
    mpad, kpad = cdiv(p.kg, s.bm) * s.bm, ktiles * s.bk
    ohw, npix = p.oh * p.ow, p.n * p.oh * p.ow
    total = p.groups * kpad * mpad
    pack = pipeline.make_spec(TEMPLATE, "conv2d_pack", f"conv2d_pack_{tag}_k{p.kh}x{p.kw}_{order}",
                             {"scalar_t": scalar_t(dtype), "unroll": True, "kernel": "pack", "KH": p.kh, "KW": p.kw,
                              "ORDER": order}, choice.opts)
    pack_launch = KernelLaunch(pack, (min(cdiv(total, 256), 1 << 20),), (256,),
                               (ptr(1), ptr(ws), i32(p.cg), i32(p.kg), i32(ct * s.bk), i32(kpad), i32(mpad), i64(total)),
                               units=UNITS[name, False].replace(" (SIMT)", ""))
    vec = (2 if s.mma else r) if choice.coalesce and p.aligned and ohw % (2 if s.mma else r) == 0 else 1
    params = {"scalar_t": scalar_t(dtype), "unroll": choice.unroll, "kernel": "conv", "mma": s.mma, "BM": s.bm,
              "BN": s.bn, "BK": s.bk, "R": r, "PAD": _PAD[name, s.mma] if choice.pad else 0, "ORDER": order,
              "VEC_OUT": vec, "bias": p.bias, "relu": p.relu, "split": choice.split,
              "min_blocks": 2 if name == "float32" and s.threads == 256 and not choice.split else 1, **_window(p)}
    params.update({"WARPS_M": s.tm, "WARPS_N": s.tn, "WARPS_K": s.wk} if s.mma else {"TM": s.tm, "TN": s.tn})
    epilogue.add(params, p.epilogue, scalar_t(dtype))
    kind = f"{('3xtf32' if choice.split else 'tf32') if name == 'float32' else 'dmma'}_" if s.mma else ""
    readable = (f"conv2d_{tag}_{_window_tag(p)}_{kind}{s.label}_{order}_v{vec}" + ("" if choice.pad else "_nopad")
                + ("" if choice.unroll else "_nounroll"))
    spec = pipeline.make_spec(TEMPLATE, "conv2d", readable, params, choice.opts)
    args = (ptr(0), ptr(ws), *((ptr(2),) if p.bias else ()), ptr(3), i32(p.c), i32(p.h), i32(p.w), i32(p.k),
            i32(p.oh), i32(p.ow), i32(p.cg), i32(p.kg), i32(npix), i32(ct), i32(ktiles), i32(mpad), *extra)
    units = UNITS[name, s.mma].replace("TF32", "3xTF32") if choice.split else UNITS[name, s.mma]
    conv = KernelLaunch(spec, (cdiv(npix, s.bn), cdiv(p.kg, s.bm), p.groups), (s.threads,), args, units=units)
    size = total * dtype.itemsize
    return Plan((pack_launch, conv), operands, workspace=cdiv(size, 256) * 256, choice=choice.label)


def _direct_plan(problem: ConvProblem, choice: ConvChoice, target: Target) -> Plan:
    p, dtype = problem, np.dtype(problem.dtype)
    opt, r = choice.opt, vector_width(dtype)
    vec = opt if choice.coalesce and p.aligned and opt == r and p.ow % opt == 0 else 1
    params = epilogue.add({"scalar_t": scalar_t(dtype), "unroll": choice.unroll, "THREADS": choice.threads,
                           "OPT": opt, "VEC_OUT": vec, "bias": p.bias, "relu": p.relu, **_window(p)},
                          p.epilogue, scalar_t(dtype))
    operands, extra, _ = fused(p)
    readable = f"conv2d_direct_{dtype_tag(dtype)}_{_window_tag(p)}_{choice.label}_v{vec}"
    spec = pipeline.make_spec(DIRECT_TEMPLATE, "conv2d_direct", readable, params, choice.opts)
    owg = cdiv(p.ow, opt)
    total = p.n * p.k * p.oh * owg
    args = (ptr(0), ptr(1), *((ptr(2),) if p.bias else ()), ptr(3), i32(p.c), i32(p.h), i32(p.w), i32(p.k),
            i32(p.oh), i32(p.ow), i32(p.cg), i32(p.kg), i32(owg), i64(total), *extra)
    launch = KernelLaunch(spec, (min(cdiv(total, choice.threads), 1 << 20),), (choice.threads,), args,
                          units=UNITS[p.dtype, False])
    return Plan((launch,), operands, choice=choice.label)


def problems() -> list[ConvProblem]:
    """The seed's 3x3 layer, ResNet-50's 1x1 / 3x3 stride 2 / 7x7 stride 2 (C = 3) layers, a depthwise 3x3,
    and for float64 the seed's layer and an odd unaligned one."""
    f32 = [ConvProblem("float32", 32, 64, 224, 224, 128, 3, 3, ph=1, pw=1),
           ConvProblem("float32", 32, 256, 56, 56, 64, 1, 1),
           ConvProblem("float32", 32, 128, 56, 56, 128, 3, 3, 2, 2, 1, 1),
           ConvProblem("float32", 32, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3, bias=True, relu=True),
           ConvProblem("float32", 32, 256, 56, 56, 256, 3, 3, ph=1, pw=1, groups=256)]
    f64 = [ConvProblem("float64", 32, 64, 224, 224, 128, 3, 3, ph=1, pw=1),
           ConvProblem("float64", 3, 65, 33, 33, 66, 3, 3, 2, 2, 2, 2, 2, 2, groups=1, bias=True, aligned=False)]
    return f32 + f64


FAMILY = Family("conv2d", choices, plan, problems)
