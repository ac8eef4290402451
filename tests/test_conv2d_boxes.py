"""Convolution2D's pixel boxes and thread tiles for the small images of real networks: the wgmma kernel's exact boxes
(whole output rows, several whole images or an even part of the rows, QN their pixels rounded up to 8,
channels_last y only: cuopjit/ops/conv2d/boxes.py) and the float32 SIMT windows' 8 x 8 thread tile
(conv2d/implicit.py). CPU: which layers pick which box or tile, what reaches the kernel, the errors, every new
variant compiling for sm_90a (and the SIMT tile for sm_80) without spills. GPU: every kind of box (several images
with a partial last group, whole rows with a partial last box, even parts of rows, QN past the box's pixels,
grouped boxes) in TF32 and 3xTF32 (the lo parts in shared memory and from a copy), NHWC and NCHW x, bias, ReLU and
a user epilogue, and the 8 x 8 SIMT tile on every layout pairing and in k-slices, each run as its plan against a float64 reference
into a NaN-poisoned y inside canaries."""
from __future__ import annotations

import dataclasses
import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit.config import DEFAULT
from cuopjit.ops.conv2d import boxes, implicit, plans as ck, wgmma as cw, wgmma_plan as cwp
from cuopjit.ops.conv2d.problem import ConvChoice
from cuopjit.recipes import placeholder
from cuopjit.run import executor
from cuopjit.target import named, of_device

from conftest import check_guards, compiles_without_spills, make_config
from test_conv2d import MODES, _reference
from test_conv2d_layouts import PAIRS, _guarded, _tensor

SM80, SM90 = named("sm_80"), named("sm_90")
P = ck.ConvProblem
NHWC = {"x_nhwc": True, "y_nhwc": True}
TF32, SPLIT = make_config(enable_tensor_core=True).snapshot(), make_config(precision="3xtf32").snapshot()


def _resnet(c, hw, k, r, st, pad, **fields):
    return P("float32", 32, c, hw, hw, k, r, r, st, st, pad, pad, **{**NHWC, **fields})


# --- CPU ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer, tf32, split", [
    ((1024, 14, 2048, 1, 2, 0), "wgmma_t128x200_b7x7x4", "wgmma_t128x104_b7x7x2"),   # 7 x 7: 4 images, not 64 of 49
    ((512, 28, 1024, 1, 2, 0), "wgmma_t128x200_b14x14", "wgmma_t128x104_b14x7"),     # 14 x 14: 196 in 200, not 256
    ((128, 28, 128, 3, 1, 1), "wgmma_t128x200_b28x7", "wgmma_t128x104_b14x7"),       # 28 x 28: whole rows
    ((256, 14, 256, 3, 1, 1), "wgmma_t128x104_b14x7", "wgmma_t128x104_b14x7"),       # QN 200: 64 tiles, half a wave
    ((512, 7, 512, 3, 1, 1), "wgmma_t128x56_b7x7", "wgmma_t128x56_b7x7"),
    ((64, 56, 64, 3, 1, 1), "wgmma_t64x112_b8x14", "wgmma_t64x128_b64x2")])   # one consumer: QN <= 112, narrowest
def test_channels_last_layers_take_exact_boxes(layer, tf32, split):
    p = _resnet(*layer)
    assert ck.FAMILY.choices(p, TF32, SM90)[0].label.startswith(tf32)
    assert ck.FAMILY.choices(p, SPLIT, SM90)[0].label.startswith(split)
    for cfg in (TF32, SPLIT):     # an NCHW y, or a named tile_size: boxes of whole 8-column groups of one image
        for c in (ck.FAMILY.choices(dataclasses.replace(p, y_nhwc=False), cfg, SM90)
                  + cw.choices(p, make_config(enable_tensor_core=True, tile_size=128).snapshot(), SM90, False)):
            if isinstance(c, cw.WgmmaConvChoice):
                assert c.pixel_box.nchw and c.qn in cw.WIDTHS[c.split], c.label


def test_candidates_are_exact_and_within_the_widths():
    seven = P("float32", 3, 64, 14, 14, 128, 1, 1, 2, 2, **NHWC)
    found = boxes.candidates(seven, [256, 128, 64], True)
    assert boxes.Box(152, 7, 7, 3) in found and boxes.Box(104, 7, 7, 2) in found and boxes.Box(56, 7, 7) in found
    assert boxes.Box(200, 7, 7, 4) not in found                        # 3 images only
    assert all(b.pixels <= b.qn < b.pixels + 8 and boxes.MIN_QN <= b.qn <= 256 for b in found[3:])
    assert boxes.candidates(seven, [128, 64], False) == [boxes.Box(128, 16, 8), boxes.Box(64, 8, 8)]
    assert boxes.waste(seven, boxes.Box(104, 7, 7, 2)) == 2 * 104 / (3 * 49)   # the last box's second image is past N
    wide = P("float32", 2, 32, 30, 30, 64, 3, 3, ph=1, pw=1, **NHWC)     # whole rows or an even part: not 15
    assert {b.bw for b in boxes.candidates(wide, [256], True)} == {30, 10, boxes.box(wide, 256)[0]}


def test_exact_boxes_reach_the_kernel():
    p = _resnet(1024, 14, 2048, 1, 2, 0)
    conv = ck.FAMILY.default_plan(p, TF32, SM90).launches[-1]
    params = dict(conv.spec.params)
    assert (params["QN"], params["BW"], params["BH"], params["IMGS"], params["FULL_ROWS"]) == (200, 7, 7, 4, True)
    assert conv.grid == (128, 1, 1)  # 16 channel tiles x 8 boxes of 4 images: one wave
    source = pipeline.source(conv.spec)
    assert "mbar_expect_tx(&full[s], P_BYTES + X_BYTES)" in source and "tile_pixel(q + 1, n, oh0" in source
    assert "box[4] = {BK, BW * SW, BH * SH, IMGS}" in source


def test_boxes_the_kernel_cannot_take_say_what_to_choose():
    p = _resnet(1024, 14, 2048, 1, 2, 0)
    exact = cw.build(2, 200, 7, SM90, split=False, bh=7, imgs=4)
    odd = cw.build(2, 56, 7, SM90, split=False, bh=7)                                   # 7 of 14 columns
    for bad, choice, text in ((dataclasses.replace(p, y_nhwc=False), exact, "7x7x4 \\(QN 200\\)"),   # an NCHW y
                              (dataclasses.replace(p, w=28, h=28), odd, "7x7x1 \\(QN 56\\)")):
        with pytest.raises(ValueError, match=rf"pixel box {text} takes whole output rows \(\d+ columns\) or an even "
                                             r"part of them, of a channels_last y only: choose tile_size 64 or 128"):
            cwp.plan(bad, choice, SM90)
    for bad in (dataclasses.replace(exact, qn=196), dataclasses.replace(exact, qn=208),
                dataclasses.replace(exact, bw=14, bh=7, imgs=2), cw.build(2, 200, 7, SM90, split=True, bh=7, imgs=4)):
        with pytest.raises(ValueError, match=r"wgmma tile .*: choose tile_size .* and block_size 256 "
                                             r"\(one consumer\) or 0"):
            cwp.plan(p, bad, SM90)


@pytest.mark.parametrize("layer, shape", [
    ((128, 28, 128, 3, 1, 1), "t64x128x16_r8x8"),      # 392 blocks: 3 on every SM
    ((64, 56, 64, 3, 1, 1), "t64x128x16_r8x8"),
    ((256, 14, 256, 3, 1, 1), "t64x128x16_r8x8_k4"),   # 196 blocks of 64 x 128: 1.5 a SM, in 4 k-slices
    ((512, 7, 512, 3, 1, 1), "t64x64x16_r4x4")])
def test_float32_windows_take_an_evenly_spread_8x8_thread_tile(layer, shape):
    found = ck.FAMILY.choices(_resnet(*layer), make_config().snapshot(), SM90)
    assert found[0].label == shape
    assert {c.label for c in found} >= {"t64x128x16_r8x8", "t64x64x16_r4x4"}   # the other is a tuning candidate
    assert ck.FAMILY.choices(_resnet(*layer), make_config(block_size=256).snapshot(), SM90)[0].shape.threads == 256


def _variants(arch: str) -> dict:
    specs = {}
    t = SM90 if arch == "sm_90a" else SM80
    for (xl, yl), shape in itertools.product(PAIRS, (implicit.R8,)):
        for p in (P("float32", 2, 64, 15, 13, 72, 3, 3, ph=1, pw=1, bias=True, relu=True, x_nhwc=xl, y_nhwc=yl),
                  P("float32", 2, 64, 9, 9, 128, 3, 3, 2, 2, 1, 1, epilogue=_key(), x_nhwc=xl, y_nhwc=yl)):
            specs.update(dict.fromkeys(ck.FAMILY.plan(p, ConvChoice(shape, shape.threads), t).specs))
    if arch == "sm_90a":
        for layer, xl, cfg in itertools.product(BOX_LAYERS, (True, False), (TF32, SPLIT)):
            for p, c in _box_plans(_problem(layer, xl), cfg.precision == "3xtf32", SM90):
                specs.update(dict.fromkeys(ck.FAMILY.plan(p, c, SM90).specs))
        p = dataclasses.replace(_problem(BOX_LAYERS[0], True), bias=False, relu=False, epilogue=_key())
        for split in (False, True):
            specs.update(dict.fromkeys(ck.FAMILY.plan(p, _box_plans(p, split, SM90)[0][1], SM90).specs))
    return specs


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_new_variant_compiles_without_spills(arch):
    specs = _variants(arch)
    assert len(specs) >= (8 if arch == "sm_80" else 60)
    compiles_without_spills(specs, arch)


# --- the boxes and tiles the GPU tests run -----------------------------------------------------------------
# (N, C, H, W, K, kernel, stride, pad, bias, relu)
BOX_LAYERS = [(3, 64, 14, 14, 128, 1, 2, 0, True, False),    # 7 x 7 outputs of 3 images: boxes of 2 and 3 images
              (2, 40, 15, 13, 72, 3, 1, 1, False, True),     # 15 x 13: whole rows of 13, a partial last box
              (2, 64, 28, 28, 96, 3, 2, 1, True, True),      # 14 x 14 outputs
              (2, 32, 30, 30, 64, 3, 1, 1, False, False)]    # 30 x 30: parts of rows (10 columns), one consumer
SIMT_LAYERS = [(2, 64, 15, 13, 72, 3, 1, 1, True, True), (3, 72, 9, 11, 136, 3, 2, 1, False, True),
               (1, 64, 7, 7, 64, 3, 1, 1, True, False)]


def _key():
    """A user epilogue's key: relu(acc * s + r), s per channel, r output-shaped."""
    conv = cuopjit.Convolution2DFloat(8, 8, 1, 1)
    conv.set_epilogue("relu(acc * s + r)")
    return conv.epilogue_key((2, 8, 4, 4), {"s": placeholder((8,)), "r": placeholder((2, 8, 4, 4))})


def _problem(layer, x_nhwc):
    n, c, h, w, k, r, st, pad, bias, relu = layer
    return P("float32", n, c, h, w, k, r, r, st, st, pad, pad, bias=bias, relu=relu, x_nhwc=x_nhwc, y_nhwc=True)


def _box_plans(p, split: bool, target) -> list:
    """(problem, choice) for a sample of p's boxes: the 3 best, and the best of several images, of the most images,
    of one whole image, of part of a row, of QN past its pixels and the best grouped box; with 3xTF32 and an NCHW
    x, the best also with its lo parts copied."""
    consumers = 1 if p.k <= 64 else 2
    found = [b for b in boxes.candidates(p, list(cw.WIDTHS[split]), True) if boxes.waste(p, b) <= cw.MAX_WASTE]
    found.sort(key=lambda b: -boxes.score(p, b, consumers, split, target.sm_count))
    most = max(b.imgs for b in found)
    picked = found[:3] + [next((b for b in found if test(b)), found[0]) for test in
                          (lambda b: b.imgs > 1, lambda b: b.imgs == most, lambda b: (b.bw, b.bh) == (p.ow, p.oh),
                           lambda b: b.bw < p.ow and not b.nchw, lambda b: b.qn > b.pixels, lambda b: b.nchw)]
    made = [(p, cw.build(consumers, b.qn, b.bw, target, split, staged=bool(p.epilogue), bh=b.bh, imgs=b.imgs))
            for b in dict.fromkeys(picked)]
    if split and not p.x_nhwc:
        made.append((p, dataclasses.replace(made[0][1], lo_copy=True)))
    return made


# --- GPU ---------------------------------------------------------------------------------------------------
def _data(rng, layer, x_nhwc, epilogue=False):
    n, c, h, w, k, r, st, pad, bias, relu = layer
    conv = cuopjit.Convolution2DFloat(c, k, r, r, st, st, relu=relu and not epilogue, pad_h=pad, pad_w=pad)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal(conv.weight_shape).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32) if bias and not epilogue else None
    conv.set_weight(cuopjit.tensor(wt))
    if b is not None:
        conv.set_bias(cuopjit.tensor(b))
    ref = _reference(x, wt, b, (st, st), (pad, pad), (1, 1), 1, relu and not epilogue)
    return conv, _tensor(x, x_nhwc), ref


def _run_plan(conv, choice, x, y, per_tap, floor, ref, **operands):
    """Run `choice`'s plan once on (x, y) and check y against ref (and its canaries)."""
    target = of_device(cuopjit.get_device())
    plan = ck.FAMILY.plan(conv.problem(x, y, **operands), choice, target)
    executor.load(plan, cuopjit.get_device(), DEFAULT)(conv.bind(x, y, **operands)[1], 0)
    cuopjit.synchronize()
    check_guards(y)
    out = y.to_numpy()
    err = np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300)
    taps = conv.in_channels * conv.kernel_h * conv.kernel_w
    assert np.all(np.isfinite(out)) and err <= per_tap * (taps + 2) + floor, f"{choice.label}: error {err:.3g}"


@pytest.fixture(scope="module")
def built():
    """The kernels of the GPU tests below, compiled 16 at a time first."""
    if cuopjit.get_device_count() == 0:
        return
    target = of_device(cuopjit.get_device())
    specs = {}
    for layer, xl, split in itertools.product(BOX_LAYERS, (True, False), (False, True)):
        for p, c in _box_plans(_problem(layer, xl), split, target):
            specs.update(dict.fromkeys(ck.FAMILY.plan(p, c, target).specs))
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda s: pipeline.build(s, target.arch), specs))


@pytest.mark.gpu
@pytest.mark.parametrize("x_nhwc", [True, False], ids=["x_nhwc", "x_nchw"])
@pytest.mark.parametrize("layer", BOX_LAYERS, ids=lambda l: "n{}c{}h{}w{}k{}_{}x{}s{}".format(*l[:6], l[5], l[6]))
@pytest.mark.parametrize("mode", ["tf32", "3xtf32"])
def test_every_kind_of_box_matches_numpy(rng, built, mode, layer, x_nhwc):
    _, _, per_tap, floor = MODES[mode]
    conv, x, ref = _data(rng, layer, x_nhwc)
    target = of_device(cuopjit.get_device())
    for p, choice in _box_plans(conv.problem(x, _guarded(ref.shape, np.float32, True)), mode == "3xtf32", target):
        _run_plan(conv, choice, x, _guarded(ref.shape, np.float32, True), per_tap, floor, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["tf32", "3xtf32"])
def test_user_epilogues_on_exact_boxes(rng, built, mode):
    _, _, per_tap, floor = MODES[mode]
    layer = BOX_LAYERS[0]
    conv, x, ref = _data(rng, layer, True, epilogue=True)
    s = rng.standard_normal(layer[4]).astype(np.float32)
    r = rng.standard_normal(ref.shape).astype(np.float32)
    conv.set_epilogue("relu(acc * s + r)", s=cuopjit.tensor(s))
    want = np.maximum(ref * s[None, :, None, None] + r, 0)
    rt = _tensor(r, True)
    y = _guarded(ref.shape, np.float32, True)
    for _, choice in _box_plans(conv.problem(x, y, r=rt), mode == "3xtf32", of_device(cuopjit.get_device())):
        _run_plan(conv, choice, x, _guarded(ref.shape, np.float32, True), per_tap, floor, want, r=rt)


@pytest.mark.gpu
@pytest.mark.parametrize("layer", SIMT_LAYERS, ids=lambda l: "n{}c{}h{}w{}k{}_{}x{}s{}".format(*l[:6], l[5], l[6]))
def test_the_8x8_thread_tile_matches_numpy_on_every_layout_pairing(rng, layer):
    _, _, per_tap, floor = MODES["f32"]
    for xl, yl in PAIRS:
        conv, x, ref = _data(rng, layer, xl)
        _run_plan(conv, ConvChoice(implicit.R8, implicit.R8.threads), x, _guarded(ref.shape, np.float32, yl), per_tap,
                  floor, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("layer", SIMT_LAYERS[:2], ids=lambda l: "n{}c{}h{}w{}k{}_{}x{}s{}".format(*l[:6], l[5], l[6]))
def test_the_8x8_thread_tile_in_k_slices_matches_numpy(rng, layer):
    """R8 in implicit.WINDOW_SLICES k-slices (the heuristic's pick for 14^2 outputs of 256 channels), channels_last y,
    either x: bias and ReLU applied once, by the slices' reduction."""
    _, _, per_tap, floor = MODES["f32"]
    for xl in (True, False):
        conv, x, ref = _data(rng, layer, xl)
        _run_plan(conv, ConvChoice(implicit.R8, implicit.R8.threads, split_k=implicit.WINDOW_SLICES), x,
                  _guarded(ref.shape, np.float32, True), per_tap, floor, ref)
