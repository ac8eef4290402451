"""The wgmma convolution's launch plan (templates/conv2d/conv2d_wgmma.cu.jinja; wgmma.py chooses the build): `check`
turns a build the template cannot compile into one error saying what to choose; `plan` gives the weight pack, the
NHWC conversion of an NCHW input (or the stem's padded copy) and the persistent wgmma launch.
"""
from __future__ import annotations

from ...build import pipeline
from ...run.plan import KernelLaunch, i32, i64, ptr
from ...target import Target
from .. import epilogue
from ..base import HALF_DTYPES, cdiv, storage_t
from ..gemm.wgmma import staging_bytes
from . import fold as folding
from .fold import folded
from .problem import ConvPlan
from .wgmma import (DEBIAS, MAP_BYTES, REGS, TAGS, TEMPLATE, UNITS, WIDTHS, WgmmaConvChoice, cpad, elem_bytes,
                    residual_tiles, smem_bytes, staged, tiles, why_not, y_by_tma)

def check(problem, c: WgmmaConvChoice) -> None:
    """The build's limits (the template's static_asserts), as one error saying what to choose."""
    b, top = c.pixel_box, max(WIDTHS[c.split])
    if (c.qn % 8 or not b.pixels <= c.qn < b.pixels + 8 or c.qn > top or c.bw * problem.sw > 256
            or b.bh * problem.sh > 256 or c.imgs > 256 or c.imgs > 1 and (c.bw, b.bh) != (problem.ow, problem.oh)
            or c.consumers not in (1, 2) or c.lo_copy and not c.split or c.lo_copy and problem.x_nhwc):
        raise ValueError(f"Convolution2D wgmma tile {c.pm}x{c.qn} (box {c.bw}{', lo copy' if c.lo_copy else ''}): "
                         f"choose tile_size {' or '.join(map(str, WIDTHS[c.split]))} and block_size 256 (one consumer) or 0")
    if not b.nchw and (not problem.y_nhwc or c.bw != problem.ow and (c.bw % 2 or c.imgs > 1)):
        raise ValueError(f"Convolution2D wgmma pixel box {c.bw}x{b.bh}x{c.imgs} (QN {c.qn}) takes whole output rows "
                         f"({problem.ow} columns) or an even part of them, of a channels_last y only: choose "
                         "tile_size 64 or 128")


def plan(problem, choice: WgmmaConvChoice, target: Target) -> ConvPlan:
    """Weight pack, NHWC conversion (NCHW input only) and the persistent wgmma launch; workspace: the maps, the
    input copies, then the packed weight (problem.ConvPlan: an operator packs it once, into memory it keeps)."""
    reason = why_not(problem, target, bool(choice.fold))
    if reason:
        raise ValueError(f"Convolution2D cannot run on the wgmma kernel: {reason}")
    if choice.fold not in ("", "view", "smem") or choice.fold == "smem" and not folding.builds(
            problem, choice.bw, choice.pixel_box.bh, choice.imgs):
        raise ValueError(f"Convolution2D wgmma build {choice.label} folds the stem as {choice.fold!r}: use 'view', or "
                         "'smem' with a box of one image whose input rows fit one TMA box (wgmma.fold_choices)")
    p, c = folded(problem) if choice.fold else problem, choice
    check(p, c)
    if c.rtiles and c.rtiles != residual_tiles(p, c.split):
        raise ValueError(f"Convolution2D wgmma build {c.label} stages {c.rtiles} epilogue operands by TMA, which this "
                         f"layer takes {residual_tiles(p, c.split)} of: build it for this layer (wgmma.choices)")
    if c.split and p.dtype != "float32":
        raise ValueError(f"Convolution2D precision='3xtf32' applies to float32; {p.dtype} runs on f16 / bf16 wgmma: "
                         "leave precision='tf32'")
    cp, eb, half = cpad(p), elem_bytes(p), p.dtype in HALF_DTYPES
    grid = min(tiles(p, c), target.sm_count)
    kt = folding.ktiles(problem, c.fold) if c.fold else p.kh       # weight rows per channel: k-tiles when folded
    wsize = p.k * kt * p.kw * cp * eb
    xsize = folding.copy_bytes(problem, eb) if c.fold else 0 if p.x_nhwc else p.n * p.h * p.w * cp * eb
    offs, top = [], cdiv(grid * MAP_BYTES, 1024) * 1024
    for size in (xsize, xsize if c.lo_copy else 0, wsize, wsize if c.split else 0):
        offs.append(top)
        top += cdiv(size, 1024) * 1024
    operands = ("x", "weight", "bias", "y", *epilogue.operand_names(p.epilogue))   # then the workspace
    ws = len(operands)
    x_nhwc, x_lo, w_hi, w_lo = (ptr(ws, o) for o in offs)
    if not c.split:
        w_lo = w_hi
    x_parts = (ptr(0),) if p.x_nhwc else (x_nhwc, x_lo) if c.lo_copy else (x_nhwc,)
    window = {"KH": p.kh, "KW": p.kw, "SPLIT": c.split, "scalar_t": "float", "unroll": c.unroll,
              **({"ELEM": storage_t(p.dtype)} if half else {})}
    tag = f"{TAGS[p.dtype]}_k{p.kh}x{p.kw}" + ("" if half else "_3xtf32" if c.split else "_tf32")
    wpack = pipeline.make_spec(TEMPLATE, "conv2d_wpack", f"conv2d_wpack_{tag}", {**window, "kernel": "wpack"},
                              c.opts, arch_specific=True)
    total = p.k * p.kh * p.kw * cp
    launches = [KernelLaunch(wpack, (min(cdiv(total, 256), 1 << 20),), (256,),
                             (ptr(1), w_hi, w_lo, i32(p.c), i32(cp), i64(total)),
                             units="DRAM (weight pack)" if half else "FP32 cores (weight pack)")]
    if c.fold:
        launches = [folding.weight_launch(problem, c.fold, window, cp, w_hi, c.opts, TAGS[p.dtype]),
                    folding.input_launch(problem, window, x_nhwc, c.opts, TAGS[p.dtype])]
    elif not p.x_nhwc:
        nhwc = pipeline.make_spec(TEMPLATE, "conv2d_nhwc", f"conv2d_nhwc_{tag}" + ("_locopy" if c.lo_copy else "")
                                 + ("" if c.pad else "_nopad") + ("" if c.unroll else "_nounroll"),
                                 {**window, "kernel": "nhwc", "PAD": 1 if c.pad else 0, "KH": 1, "KW": 1,
                                  "LO_COPY": c.lo_copy}, c.opts, arch_specific=True)
        launches.append(KernelLaunch(nhwc, (p.n * p.h, cdiv(p.w, 32), cp // 32), (256,),
                                     (ptr(0), *x_parts, i32(p.c), i32(cp), i32(p.h), i32(p.w)),
                                     units="DRAM (NCHW -> NHWC copy)"))
    vec = 2 if c.coalesce and p.aligned and p.ow % 2 == 0 and not p.y_nhwc else 1
    params = {**window, "kernel": "conv", "QN": c.qn, "BW": c.bw, "BH": c.pixel_box.bh, "IMGS": c.imgs,
              "FULL_ROWS": p.y_nhwc and c.bw == p.ow, "STAGES": c.stages, "CONSUMERS": c.consumers,
              "LO_COPY": c.lo_copy, "SH": p.sh, "SW": p.sw, "PH": p.ph, "PW": p.pw, "DH": p.dh, "DW": p.dw,
              "bias": p.bias, "relu": p.relu, "VEC_OUT": vec, "CONSUMER_REGS": REGS[c.consumers],
              "Y_NHWC": p.y_nhwc, "DEBIAS": DEBIAS if p.x_nhwc and not c.split and not half else 0,
              "RTILES": tuple(i for i, kind in enumerate(epilogue.kinds_of(p.epilogue)) if kind == "full") if c.rtiles else (),
              "YSTORE": y_by_tma(p, c)}
    if c.fold:
        at = 4 * 128 + (staging_bytes(c.consumers, c.qn) if staged(p) else 0)    # past the map scratch, staging
        params.update(folding.params(problem, c.fold, c.bw, c.pixel_box.bh, at), KH=kt)
    epilogue.add(params, p.epilogue, "float", staged=bool(c.rtiles))
    span_c = p.c      # folded: the window's halves
    name = (f"conv2d_{tag}_s{p.sh}x{p.sw}_p{p.ph}x{p.pw}" + (f"_d{p.dh}x{p.dw}" if (p.dh, p.dw) != (1, 1) else "")
            + ("_bias" if p.bias else "") + ("_relu" if p.relu else "") + f"_{c.label}_v{vec}"
            + ("_ytma" if params["YSTORE"] else "")
            + (f"_f{params['FOLD_STEP']}x{params['FOLD_TAIL']}x{span_c}" if c.fold else "") + p.layout_tag
            + epilogue.tag(p.epilogue))
    spec = pipeline.make_spec(TEMPLATE, "conv2d_wgmma", name, params, c.opts, arch_specific=True)
    args = (*x_parts, w_hi, w_lo, *((ptr(2),) if p.bias else ()), ptr(3), ptr(ws), i32(p.n), i32(cp),
            i32(p.c if p.x_nhwc or c.fold else cp), i32(p.h), i32(p.w), i32(p.k), i32(p.oh), i32(p.ow),
            *epilogue.args(p.epilogue, 4))
    launches.append(KernelLaunch(spec, (grid,), (c.threads,), args,
                                 shared=smem_bytes(c.consumers, c.qn, c.stages, c.split, staged(p), c.rtiles)
                                 + (folding.extra_smem(problem, c.bw, c.pixel_box.bh) if c.fold == "smem" else 0),
                                 units=UNITS[p.dtype] if half else UNITS[c.split]))
    return ConvPlan(tuple(launches), operands, workspace=top, choice=c.label, pack_launches=1, packed_at=offs[2])
