"""Convolution2D's Hopper wgmma kernel: sm_90 float32 tensor-core layers of one group route to it
(the rest to mma.sync, with the reason), every build compiles for sm_90a without spills, every switch changes
its code; on a GPU it matches float64 references (odd sizes, padding 0-3, dilation, channels not a multiple of
32, NaN-poisoned outputs inside canaries) in TF32 and 3xTF32, and 3xTF32's error is at most the exact kernel's."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit.ops.conv2d import plans as ck, wgmma as cw, wgmma_plan as cwp
from cuopjit.target import named

from conftest import check_guards, compiles_without_spills, guarded, make_config
from test_conv2d import _reference

SM80, SM90 = named("sm_80"), named("sm_90")
P = ck.ConvProblem
SEED_LAYER = P("float32", 32, 64, 224, 224, 128, 3, 3, ph=1, pw=1)
SMALL = P("float32", 1, 32, 7, 7, 16, 3, 3, ph=1, pw=1, bias=True, relu=True)
RESNET_1X1 = P("float32", 32, 256, 56, 56, 64, 1, 1)


def _plan(problem, target=SM90, **fields):
    return ck.FAMILY.default_plan(problem, make_config(**fields).snapshot(), target)


# --- CPU: routing ------------------------------------------------------------------------------------
@pytest.mark.parametrize("fields, units", [
    ({"enable_tensor_core": True}, "TF32 tensor cores (wgmma)"), ({"kernel_type": "tensor_core"},
                                                                  "TF32 tensor cores (wgmma)"),
    ({"enable_tma": True}, "TF32 tensor cores (wgmma)"),
    ({"precision": "3xtf32"}, "TF32 tensor cores, 3 products (wgmma 3xTF32)"),
    ({}, "FP32 cores (SIMT)"), ({"kernel_type": "simple", "enable_tensor_core": True}, "FP32 cores (SIMT)"),
    ({"enable_tensor_core": True, "tile_size": 32}, "TF32 tensor cores (mma.sync)"),
    ({"enable_tensor_core": True, "block_size": 512}, "TF32 tensor cores (mma.sync)")])
def test_sm90_float32_tensor_core_layers_run_the_wgmma_kernel(fields, units):
    plan = _plan(SEED_LAYER, **fields)
    assert plan.launches[-1].units == units
    if "wgmma" in units:   # weight pack, NHWC copy, implicit GEMM; workspace: maps + weights + input copies
        assert [kl.spec.kernel for kl in plan.launches] == ["conv2d_wpack", "conv2d_nhwc", "conv2d_wgmma"]
        copies = 32 * 224 * 224 * 64 * 4 * (2 if "3x" in units else 1)   # 3xTF32 on this layer: a lo copy
        assert copies < plan.workspace < copies * 1.01 and all(kl.spec.arch_specific for kl in plan.launches)


@pytest.mark.parametrize("change, reason", [
    ({"sh": 9, "sw": 1}, "stride 9 x 1: TMA element strides are at most 8"), ({"groups": 2}, "grouped convolution"),
    ({"c": 3}, "3 channels would be padded to 32"), ({"dtype": "float64"}, "float32 only"),
    ({"h": 1, "w": 1, "ph": 0, "pw": 0, "kh": 1, "kw": 1}, "a 1 x 1 output wastes more than 2.0x")])
def test_layers_the_wgmma_kernel_cannot_take_stay_on_mma_sync_and_say_why(change, reason):
    problem = dataclasses.replace(SEED_LAYER, **change)
    assert reason in cw.why_not(problem, SM90)
    assert "wgmma" not in _plan(problem, enable_tensor_core=True).launches[-1].units
    assert cw.why_not(SEED_LAYER, SM80) == "wgmma needs an sm_90 GPU, not sm_80"
    with pytest.raises(ValueError, match=f"Convolution2D cannot run on the wgmma kernel: .*{reason}"):
        cwp.plan(problem, cw.build(2, 128, 32, SM90, split=False), SM90)


def test_strided_layers_read_their_pixels_through_the_maps_element_strides():
    resnet = P("float32", 32, 128, 56, 56, 128, 3, 3, 2, 2, 1, 1)
    conv = _plan(resnet, enable_tensor_core=True).launches[-1]
    params = dict(conv.spec.params)
    assert conv.units == "TF32 tensor cores (wgmma)" and (params["SH"], params["SW"], params["QN"]) == (2, 2, 256)
    assert "ow0 * SW + sx * DW - PW" in pipeline.source(conv.spec)
    wide = dataclasses.replace(resnet, w=1000, sw=8)   # OW 125: a 128 x 2 box would waste least, but spans 1024
    assert cw.box(wide, 256) == (32, 128 * 32 / (125 * 28)) and cw.box(dataclasses.replace(wide, sw=2), 256)[0] == 128


def test_tf32_keeps_layers_with_little_work_per_input_value_on_mma_sync():
    assert cw.why_not(RESNET_1X1, SM90) is None
    assert _plan(RESNET_1X1, enable_tensor_core=True).launches[-1].units == "TF32 tensor cores (mma.sync)"
    assert _plan(RESNET_1X1, precision="3xtf32").launches[-1].units.endswith("(wgmma 3xTF32)")
    assert _plan(dataclasses.replace(RESNET_1X1, k=128), enable_tensor_core=True).launches[-1].units == \
        "TF32 tensor cores (wgmma)"


def test_3xtf32_copies_the_inputs_lo_parts_only_for_layers_with_much_work_per_input_value():
    cfg = make_config(precision="3xtf32").snapshot()
    strided = P("float32", 32, 128, 56, 56, 128, 3, 3, 2, 2, 1, 1)
    assert [ck.choices(p, cfg, SM90)[0].lo_copy for p in (SEED_LAYER, RESNET_1X1, strided)] == [True, False, False]
    copy, smem = (ck.FAMILY.default_plan(p, cfg, SM90) for p in (SEED_LAYER, RESNET_1X1))
    assert "LO_COPY" in dict(copy.launches[1].spec.params) and dict(copy.launches[2].spec.params)["LO_COPY"]
    assert len(copy.launches[1].args) == 7 and len(smem.launches[1].args) == 6   # x -> hi, lo / x -> x
    assert "mbar_wait(&loaded[s], phase)" in pipeline.source(smem.launches[2].spec)
    assert "mbar_wait(&loaded[s], phase)" not in pipeline.source(copy.launches[2].spec)


def test_pixel_tiles_follow_the_image():
    cfg = make_config(enable_tensor_core=True).snapshot()
    assert [(c.qn, c.bw, c.consumers) for c in ck.choices(SEED_LAYER, cfg, SM90)] == \
        [(256, 32, 2), (128, 32, 2), (64, 32, 2)]
    assert [(c.qn, c.bw) for c in ck.choices(SEED_LAYER, make_config(precision="3xtf32").snapshot(), SM90)] == \
        [(128, 32), (64, 32)]
    small = ck.choices(SMALL, cfg, SM90)      # one tile: the k-sliced mma.sync kernel leads (conv2d/splitk.py)
    assert small[0].split_k == 2 and [(c.qn, c.bw, c.consumers) for c in small if hasattr(c, "qn")] == [(64, 8, 1)]
    one = ck.choices(SEED_LAYER, make_config(enable_tensor_core=True, tile_size=128, block_size=256).snapshot(), SM90)
    assert [(c.qn, c.consumers) for c in one] == [(128, 1)]


@pytest.mark.parametrize("field, value, token", [
    ("enable_loop_unroll", False, "_nounroll"), ("enable_memory_coalescing", False, "_v1"),
    ("enable_shared_memory_opt", False, "_nopad"), ("tile_size", 128, "x128_"), ("block_size", 256, "_t64x"),
    ("precision", "3xtf32", "3xtf32")])
def test_every_switch_changes_the_wgmma_code(field, value, token):
    default = _plan(SEED_LAYER, enable_tensor_core=True)
    changed = _plan(SEED_LAYER, enable_tensor_core=True, **{field: value})
    names = " ".join(kl.spec.name for kl in changed.launches)
    assert token in names and token not in " ".join(kl.spec.name for kl in default.launches)
    assert [pipeline.source(kl.spec) for kl in changed.launches] != [pipeline.source(kl.spec) for kl in default.launches]


def test_every_wgmma_build_compiles_for_sm90a_without_spills():
    problems = [dataclasses.replace(SEED_LAYER, bias=True, relu=True), SMALL,
                P("float32", 2, 40, 33, 33, 64, 3, 3, ph=2, pw=2, dh=2, dw=2, bias=True, aligned=False),
                P("float32", 32, 128, 56, 56, 128, 3, 3, 2, 2, 1, 1)]
    configs = [{"enable_tensor_core": True}, {"precision": "3xtf32"}, {"enable_tensor_core": True, "block_size": 256},
               {"precision": "3xtf32", "enable_memory_coalescing": False, "enable_loop_unroll": False,
                "enable_shared_memory_opt": False}]
    specs = {kl.spec: None for p in problems for fields in configs
             for c in ck.choices(p, make_config(**fields).snapshot(), SM90) for kl in ck.plan(p, c, SM90).launches}
    assert len(specs) >= 20
    compiles_without_spills(specs, "sm_90a")


def test_a_build_the_kernel_cannot_take_says_what_to_choose():
    bad = dataclasses.replace(cw.build(2, 128, 32, SM90, split=True), qn=256)
    with pytest.raises(ValueError, match=r"wgmma tile 128x256 \(box 32\): choose tile_size 128 or 64 and "
                                         r"block_size 256 \(one consumer\) or 0"):
        cwp.plan(SEED_LAYER, bad, SM90)


# --- GPU -----------------------------------------------------------------------------------------------
# (N, C, H, W, K, kh, kw, stride, pad, dilation, bias, relu)
LAYERS = [(1, 32, 7, 7, 16, 3, 3, 1, 1, 1, False, False),
          (2, 65, 33, 33, 33, 3, 3, 1, 1, 1, False, False),
          (3, 16, 20, 37, 70, 3, 3, 1, 3, 1, True, True),
          (2, 40, 33, 33, 64, 3, 3, 1, 2, 2, True, False),
          (2, 64, 17, 19, 128, 1, 1, 1, 0, 1, True, False),
          (1, 32, 30, 30, 96, 5, 5, 1, 0, 1, False, True),
          (2, 64, 56, 56, 64, 3, 3, 1, 1, 1, True, False),
          (1, 24, 9, 300, 16, 3, 3, 1, 1, 1, False, False),
          (1, 33, 224, 224, 130, 3, 3, 1, 1, 1, True, False),
          (2, 64, 33, 35, 48, 3, 3, 2, 1, 1, True, False),
          (1, 40, 30, 31, 64, 3, 3, 3, 2, 2, False, True),
          (2, 32, 56, 56, 128, 1, 1, 2, 0, 1, True, False)]
# mode: (config fields, tolerance: norm-wise relative error <= 2 eps * (taps + 2) + FLOOR)
MODES = {"tf32": ({"enable_tensor_core": True}, 2e-3), "3xtf32": ({"precision": "3xtf32"}, 4 * 2.0 ** -22)}


def _run(rng, layer, fields, x=None, wt=None, b=None):
    n, c, h, w, k, kh, kw, st, pad, dil, bias, relu = layer
    conv = cuopjit.Convolution2DFloat(c, k, kh, kw, st, st, dil, dil, 1, relu)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32) if x is None else x
    wt = rng.standard_normal(conv.weight_shape).astype(np.float32) if wt is None else wt
    b = (rng.standard_normal(k).astype(np.float32) if bias else None) if b is None else b
    conv.set_weight(cuopjit.tensor(wt))
    if b is not None:
        conv.set_bias(cuopjit.tensor(b))
    y = guarded(conv.output_shape(x.shape, pad_h=pad, pad_w=pad), np.float32)
    jit = cuopjit.JITConvolution2DFloat(conv)
    jit.set_jit_config(make_config(**fields))
    assert jit.forward(cuopjit.tensor(x), y, pad_h=pad, pad_w=pad) is y
    check_guards(y)
    out = y.to_numpy()
    ref = _reference(x, wt, b, (st, st), (pad, pad), (dil, dil), 1, relu)
    err = np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300)
    assert np.all(np.isfinite(out)), f"{layer}: non-finite outputs"
    return err, jit.get_performance_profile().kernel_name, (x, wt, b)


@pytest.mark.gpu
@pytest.mark.parametrize("layer", LAYERS, ids=lambda l: "n{}c{}h{}w{}k{}_{}x{}s{}p{}d{}".format(*l[:10]))
@pytest.mark.parametrize("mode", list(MODES))
def test_wgmma_matches_numpy(rng, mode, layer):
    fields, floor = MODES[mode]
    # a named block_size / tile_size keeps the wgmma kernel where a handful of tiles would hand the layer to the
    # k-sliced mma.sync kernel (test_conv2d_layouts.py covers that one)
    err, name, _ = _run(rng, layer, {**fields, **({"block_size": 256} if layer[4] <= 64 else {"tile_size": 64})})
    assert "wgmma" in name, name
    taps = layer[1] * layer[5] * layer[6]
    assert err <= 2 * np.finfo(np.float32).eps * (taps + 2) + floor, f"{mode} {layer}: error {err:.3g} ({name})"


@pytest.mark.gpu
@pytest.mark.parametrize("fields", [{"block_size": 256}, {"tile_size": 128}, {"enable_tma": True},
                                    {"enable_memory_coalescing": False, "enable_shared_memory_opt": False,
                                     "enable_loop_unroll": False}], ids=str)
@pytest.mark.parametrize("mode", list(MODES))
def test_wgmma_switches_and_tiles(rng, mode, fields):
    base, floor = MODES[mode]
    if "enable_tma" in fields and mode == "tf32":
        base = {}
    for layer in (LAYERS[2], LAYERS[4], LAYERS[9]):
        err, name, _ = _run(rng, layer, {**base, **fields})
        taps = layer[1] * layer[5] * layer[6]
        assert "wgmma" in name and err <= 2 * np.finfo(np.float32).eps * (taps + 2) + floor, (err, name)


@pytest.mark.gpu
@pytest.mark.parametrize("layer", [(2, 64, 40, 40, 128, 3, 3, 1, 1, 1, True, False),
                                   (1, 128, 28, 28, 96, 3, 3, 1, 1, 1, False, False),
                                   (2, 64, 40, 40, 48, 3, 3, 1, 1, 1, False, True)], ids=str)
def test_3xtf32_error_is_at_most_the_exact_kernels(rng, layer):
    err3, name, data = _run(rng, layer, {"precision": "3xtf32", "tile_size": 64})   # named: the wgmma kernel
    exact, exact_name, _ = _run(rng, layer, {}, *data)
    assert "wgmma" in name and "wgmma" not in exact_name
    # both at float32's rounding level; the exact kernel's own error depends on its summation order (split-K
    # sums shorter runs), so "at most" within a factor of 1.5
    assert err3 <= 1.5 * exact, f"3xTF32 {err3:.3g} ({name}) vs exact {exact:.3g} ({exact_name})"
