"""Convolution2D on channels_last tensors and its weight packed once: x and y each NCHW or NHWC, every pairing
planned without a layout copy (the wgmma kernel reads a channels_last x through TMA; NCHW x keeps its internal
copy), 1x1 stride-1 channels_last layers as one GEMM of the GEMM family, the weight packed once per set_weight
(the packing split off the plan, conv2d/packing.py). CPU: routing, plans, the split, every new variant compiling
for sm_80 and sm_90a without spills. GPU: float64 references with NaN-poisoned outputs inside canaries for every
layout pairing on odd sizes, 1x1 of stride 1 and 2, the 7x7/2 stem, depthwise and grouped layers, batch 1, and
every ResNet-50 conv layer at batch 2 in fp32, TF32, 3xTF32 and float64."""
from __future__ import annotations

import dataclasses
import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit.ops.conv2d import gemm_route, packing, plans as ck, wgmma as cw
from cuopjit.recipes import placeholder
from cuopjit.target import named, of_device
from cuopjit.tensor import Tensor

from conftest import check_guards, compiles_without_spills, guarded, make_config
from test_conv2d import MODES, _reference

SM80, SM90 = named("sm_80"), named("sm_90")
P = ck.ConvProblem
NHWC = {"x_nhwc": True, "y_nhwc": True}
# (N, C, H, W, K, kernel, stride, pad, groups, bias, relu)
LAYERS = [(2, 64, 15, 13, 72, 3, 1, 1, 1, True, True),     # odd sizes, channels not a multiple of 64
          (2, 64, 9, 7, 40, 1, 1, 0, 1, True, False),      # 1x1 stride 1: the GEMM route on NHWC
          (2, 64, 15, 15, 48, 1, 2, 0, 1, False, False),   # 1x1 stride 2
          (2, 3, 23, 23, 16, 7, 2, 3, 1, True, True),      # the stem: 3 channels, 7x7 / 2
          (2, 16, 9, 9, 16, 3, 1, 1, 16, True, False),     # depthwise
          (2, 32, 9, 11, 64, 3, 2, 1, 2, False, True),     # grouped, strided
          (1, 32, 7, 7, 64, 3, 1, 1, 1, False, False)]     # batch 1, 7 x 7
RESNET50 = [(3, 224, 64, 7, 2, 3), (64, 56, 64, 1, 1, 0), (64, 56, 64, 3, 1, 1), (64, 56, 256, 1, 1, 0),
            (256, 56, 64, 1, 1, 0), (256, 56, 128, 1, 1, 0), (128, 56, 128, 3, 2, 1), (128, 28, 512, 1, 1, 0),
            (256, 56, 512, 1, 2, 0), (512, 28, 128, 1, 1, 0), (128, 28, 128, 3, 1, 1), (512, 28, 256, 1, 1, 0),
            (256, 28, 256, 3, 2, 1), (256, 14, 1024, 1, 1, 0), (512, 28, 1024, 1, 2, 0), (1024, 14, 256, 1, 1, 0),
            (256, 14, 256, 3, 1, 1), (1024, 14, 512, 1, 1, 0), (512, 14, 512, 3, 2, 1), (512, 7, 2048, 1, 1, 0),
            (1024, 14, 2048, 1, 2, 0), (2048, 7, 512, 1, 1, 0), (512, 7, 512, 3, 1, 1)]   # (C, H=W, K, k, stride, pad)
PAIRS = list(itertools.product((False, True), repeat=2))     # (x channels_last, y channels_last)


def _plan(problem, target=SM90, **fields):
    return ck.FAMILY.default_plan(problem, make_config(**fields).snapshot(), target)


# --- CPU: routing and plans --------------------------------------------------------------------------------
@pytest.mark.parametrize("fields, first", [({}, "gemm_"), ({"enable_tensor_core": True}, "gemm_wgmma"),
                                           ({"precision": "3xtf32"}, "wgmma_"), ({"kernel_type": "simple"}, "gemm_")])
def test_pointwise_channels_last_layers_run_as_one_gemm(fields, first):
    layer = P("float32", 32, 512, 28, 28, 256, 1, 1, **NHWC)
    cfg = make_config(**fields).snapshot()
    labels = [c.label for c in ck.FAMILY.choices(layer, cfg, SM90)]
    assert labels[0].startswith(first) and any(c.startswith("gemm_") for c in labels)
    plan = _plan(layer, **fields)
    if first.startswith("gemm"):     # the GEMM reads x, the weight and y as they are: nothing packed, no copy
        assert plan.operands[:4] == ("x", "weight", "bias", "y") and not isinstance(plan, ck.ConvPlan)
        assert {a.value for kl in plan.launches for a in kl.args if a.kind == "ptr"} <= {0, 1, 3, 4}
    for other in (dict(NHWC, y_nhwc=False), dict(NHWC, x_nhwc=False), dict(NHWC, sh=2, sw=2), {}):
        assert not any(c.label.startswith("gemm_")
                       for c in ck.FAMILY.choices(dataclasses.replace(layer, **{**NHWC, **other} if other else
                                                                       {"x_nhwc": False, "y_nhwc": False}), cfg, SM90))


@pytest.mark.parametrize("layer, fields, first", [
    ((1024, 14, 256), {"enable_tensor_core": True}, "wgmma_t128x104_b14x7"),   # GEMM under one wave, C >= 1024
    ((128, 28, 512), {"enable_tensor_core": True}, "gemm_wgmma_t128x256x32"),  # ranked: least rounds x area / rate
    ((256, 14, 1024), {"precision": "3xtf32"}, "gemm_wgmma_t128x128x32"),      # wide 3xTF32: the GEMM's split pays
    ((64, 56, 64), {}, "gemm_t128x64x16_r8x8"),                                # SIMT, 64 channels: 128 x 64
    ((2048, 7, 512), {}, "gemm_t64x128x16_r8x8")])                             # SIMT, tall: not the 32 x 32 tile
def test_pointwise_picks_follow_the_measured_rules(layer, fields, first):
    c, hw, k = layer
    found = ck.FAMILY.choices(P("float32", 32, c, hw, hw, k, 1, 1, **NHWC), make_config(**fields).snapshot(), SM90)
    assert found[0].label.startswith(first), [f.label for f in found[:4]]


def test_wgmma_pixel_tiles_fill_the_last_wave():
    tf32 = make_config(enable_tensor_core=True).snapshot()   # 14 x 14 outputs: QN 200 (one image) leaves 64 tiles
    assert [c.label[:20] for c in ck.FAMILY.choices(P("float32", 32, 256, 14, 14, 256, 3, 3, ph=1, pw=1, **NHWC),
                                                    tf32, SM90)][:1] == ["wgmma_t128x104_b14x7"]   # for 132 SMs
    assert ck.FAMILY.choices(P("float32", 32, 256, 28, 28, 256, 3, 3, 2, 2, 1, 1, **NHWC), tf32, SM90)[0].qn == 104
    assert ck.FAMILY.choices(P("float32", 32, 512, 28, 28, 1024, 1, 1, 2, 2, **NHWC), tf32, SM90)[0].qn == 200


def test_the_gemm_route_carries_bias_relu_and_user_epilogues_over():
    layer = P("float32", 2, 64, 9, 7, 40, 1, 1, bias=True, relu=True, **NHWC)
    assert gemm_route.own_epilogue(layer) == "where(((acc+bias)>0.0),(acc+bias),0.0)|bias:per_column"
    plan = gemm_route.plan(layer, gemm_route.choices(layer, make_config().snapshot(), SM90)[0], SM90)
    assert [a.value for a in plan.launches[0].args if a.kind == "ptr"] == [0, 1, 3, 2]    # a, b, c, then the bias
    g = gemm_route.gemm_problem(layer)
    assert (g.m, g.n, g.k, g.trans_a, g.trans_b, g.lda, g.ldb, g.ldc) == (126, 40, 64, False, True, 64, 64, 40)


@pytest.mark.parametrize("split", [False, True])
def test_wgmma_reads_a_channels_last_input_through_tma_without_a_copy(split):
    layer = P("float32", 32, 256, 14, 14, 256, 3, 3, ph=1, pw=1, **NHWC)
    fields = {"precision": "3xtf32"} if split else {"enable_tensor_core": True}
    plan = _plan(layer, **fields)
    assert [kl.spec.kernel for kl in plan.launches] == ["conv2d_wpack", "conv2d_wgmma"]
    conv = plan.launches[-1]
    assert conv.args[0].value == 0 and conv.args[0].kind == "ptr"                         # x itself
    assert [a.value for a in conv.args if a.kind == "i32"][2] == 256                     # the map's channels: C
    nchw = _plan(dataclasses.replace(layer, x_nhwc=False), **fields)
    assert [kl.spec.kernel for kl in nchw.launches] == ["conv2d_wpack", "conv2d_nhwc", "conv2d_wgmma"]
    assert "TMA reads a channels_last x only with C a multiple of 4" in cw.why_not(
        dataclasses.replace(layer, c=66), SM90)


def test_packing_is_split_off_the_plan_and_shared_by_every_input_shape():
    for fields in ({}, {"enable_tensor_core": True}, {"precision": "3xtf32"}):
        big = _plan(P("float32", 32, 64, 56, 56, 64, 3, 3, ph=1, pw=1, **NHWC), **fields)
        small = _plan(P("float32", 32, 64, 28, 30, 64, 3, 3, ph=1, pw=1, **NHWC), **fields)
        assert isinstance(big, ck.ConvPlan) and big.pack_launches == 1 and packing.packed_bytes(big) > 0
        packs, forward = packing.split(big, 1 << 40)
        assert [kl.spec.kernel for kl in packs.launches] == ["conv2d_pack" if not fields else "conv2d_wpack"]
        assert forward.workspace == big.packed_at and "pack" not in " ".join(s.kernel for s in forward.specs)
        moved = [a.value for kl in forward.launches for a in kl.args if a.kind == "i64" and a.value >= 1 << 40]
        assert moved and all(a.value != len(big.operands) or a.offset < big.packed_at
                             for kl in forward.launches for a in kl.args if a.kind == "ptr")
        assert packing.key(big) == packing.key(small)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_layout_variant_compiles_without_spills(arch):
    t = SM80 if arch == "sm_80" else SM90
    specs = {}
    for layer, (xl, yl), fields in itertools.product(LAYERS, PAIRS, ({}, {"enable_tensor_core": True},
                                                                       {"precision": "3xtf32"})):
        for dtype in ("float32", "float64") if not fields else ("float32",):
            p = dataclasses.replace(_problem(layer, dtype), x_nhwc=xl, y_nhwc=yl)
            found = ck.FAMILY.choices(p, make_config(**fields).snapshot(), t)
            # the pick and the next convolution kernel (the GEMM family's tuning candidates are its own tests')
            for c in found[:1] + [c for c in found[1:] if not isinstance(c, gemm_route.GemmRouteChoice)][:1]:
                specs.update(dict.fromkeys(ck.FAMILY.plan(p, c, t).specs))
    compiles_without_spills(specs, arch)


def test_layout_errors_name_each_operand():
    conv = cuopjit.Convolution2DFloat(8, 16, 3, 3, pad_h=1, pad_w=1)
    with pytest.raises(ValueError, match="weight is channels_last, Convolution2DFloat takes contiguous tensors"):
        conv.set_weight(Tensor._view(1 << 40, (16, 8, 3, 3), np.dtype(np.float32), 0, None, layout="channels_last"))
    conv.set_weight(placeholder((16, 8, 3, 3)))
    conv.set_epilogue("acc + r")
    x = Tensor._view(1 << 41, (2, 8, 5, 5), np.dtype(np.float32), 0, None, layout="channels_last")
    y = Tensor._view(1 << 42, (2, 16, 5, 5), np.dtype(np.float32), 0, None, layout="channels_last")
    with pytest.raises(ValueError, match="epilogue operand r is contiguous but y is channels_last"):
        conv.problem(x, y, r=placeholder((2, 16, 5, 5)))
    p = conv.problem(x, y, r=y)
    assert p.x_nhwc and p.y_nhwc and "_xnhwc_ynhwc" in p.layout_tag


# --- GPU ---------------------------------------------------------------------------------------------------
def _problem(layer, dtype):
    n, c, h, w, k, r, st, pad, groups, bias, relu = layer
    return P(dtype, n, c, h, w, k, r, r, st, st, pad, pad, groups=groups, bias=bias, relu=relu)


def _tensor(a: np.ndarray, nhwc: bool) -> Tensor:
    t = cuopjit.empty(a.shape, a.dtype, "channels_last" if nhwc else "contiguous")
    return t.copy_from(a)


def _guarded(shape, dtype, nhwc: bool) -> Tensor:
    g = guarded(shape, dtype)
    return Tensor._view(g.ptr, tuple(shape), np.dtype(dtype), g.device, g._owner,
                        layout="channels_last" if nhwc else "contiguous") if nhwc else g


def _run(rng, mode, layer, x_nhwc, y_nhwc, epilogue=None):
    dtype, fields, per_tap, floor = MODES[mode]
    n, c, h, w, k, r, st, pad, groups, bias, relu = layer
    cls = cuopjit.Convolution2DFloat if dtype == np.float32 else cuopjit.Convolution2DDouble
    conv = cls(c, k, r, r, st, st, groups=groups, relu=relu, pad_h=pad, pad_w=pad)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal(conv.weight_shape).astype(dtype)
    b = rng.standard_normal(k).astype(dtype) if bias else None
    conv.set_weight(cuopjit.tensor(wt))
    if bias:
        conv.set_bias(cuopjit.tensor(b))
    y = _guarded(conv.output_shape(x.shape), dtype, y_nhwc)
    jit = (cuopjit.JITConvolution2DFloat if dtype == np.float32 else cuopjit.JITConvolution2DDouble)(conv)
    jit.set_jit_config(make_config(**fields))
    assert jit.forward(_tensor(x, x_nhwc), y) is y
    check_guards(y)
    out, ref = y.to_numpy(), _reference(x, wt, b, (st, st), (pad, pad), (1, 1), groups, relu)
    err = np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300)
    taps = c // groups * r * r
    assert np.all(np.isfinite(out)) and err <= per_tap * (taps + 2) + floor, \
        f"{mode} {layer} x_nhwc={x_nhwc} y_nhwc={y_nhwc}: error {err:.3g} ({jit.get_performance_profile().kernel_name})"
    return conv, jit


@pytest.fixture(scope="module")
def built(request):
    """Every kernel the selected GPU tests below plan, compiled 16 at a time into the session's cache first."""
    if cuopjit.get_device_count() == 0:
        return
    target = of_device(cuopjit.get_device())
    cases = []
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module:    # other files' `layer` params mean other things
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        mode, layer = params.get("mode", "f32"), params.get("layer")
        fields = MODES[mode][1]
        if "resnet50" in item.name:
            cases += [(_problem((2, c, h, h, k, r, st, pad, 1, False, False), MODES[mode][0].__name__), fields)
                      for c, h, k, r, st, pad in RESNET50]
        elif layer is not None:
            cases.append((_problem(layer, MODES[mode][0].__name__), fields))
    specs = {}
    for p0, fields in cases:
        for xl, yl in PAIRS:
            p = dataclasses.replace(p0, x_nhwc=xl, y_nhwc=yl)
            specs.update(dict.fromkeys(ck.FAMILY.default_plan(p, make_config(**fields).snapshot(), target).specs))
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda s: pipeline.build(s, target.arch), specs))


@pytest.mark.gpu
@pytest.mark.parametrize("layer", LAYERS, ids=lambda l: "n{}c{}h{}w{}k{}_{}x{}s{}g{}".format(*l[:6], *l[5:7], l[8]))
@pytest.mark.parametrize("mode", list(MODES))
def test_every_layout_pairing_matches_numpy(rng, built, mode, layer):
    for x_nhwc, y_nhwc in PAIRS:
        _run(rng, mode, layer, x_nhwc, y_nhwc)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["f32", "tf32", "3xtf32", "f64dmma"])
def test_every_resnet50_layer_at_batch_2_channels_last(rng, built, mode):
    for c, h, k, r, st, pad in RESNET50:
        if mode == "f64dmma" and h * h * c * k * r * r > 56 * 56 * 64 * 64 * 9:
            continue      # the largest float64 references take seconds each in NumPy
        _run(rng, mode, (2, c, h, h, k, r, st, pad, 1, False, False), True, True)


@pytest.mark.gpu
@pytest.mark.parametrize("fields", [{}, {"enable_tensor_core": True}, {"precision": "3xtf32"}], ids=str)
def test_the_weight_is_packed_once_per_set_weight(rng, built, fields):
    layer = (2, 64, 15, 13, 72, 3, 1, 1, 1, False, False)
    conv, jit = _run(rng, "f32" if not fields else "tf32" if "enable" in str(fields) else "3xtf32", layer, True, True)
    assert "pack" not in jit.get_performance_profile().kernel_name     # forwards run no packing
    assert len(conv._packed) == 1
    x = _tensor(rng.standard_normal((2, 64, 15, 13)).astype(np.float32), True)
    w2 = rng.standard_normal(conv.weight_shape).astype(np.float32)
    conv.set_weight(cuopjit.tensor(w2))                  # packed again now, into the same memory
    y = _guarded(conv.output_shape(x.shape), np.float32, True)
    jit.forward(x, y)
    ref = _reference(x.to_numpy(), w2, None, (1, 1), (1, 1), (1, 1), 1, False)
    assert np.linalg.norm(y.to_numpy() - ref) / np.linalg.norm(ref) < 3e-3 and len(conv._packed) == 1
    jit.forward(_tensor(rng.standard_normal((3, 64, 15, 13)).astype(np.float32), True),
                _guarded(conv.output_shape((3, 64, 15, 13)), np.float32, True))
    assert len(conv._packed) == 1                         # another input shape reuses the packed weight


@pytest.mark.gpu
@pytest.mark.parametrize("layer", [LAYERS[0], LAYERS[1]], ids=["3x3", "1x1"])
@pytest.mark.parametrize("mode", ["f32", "tf32"])
def test_epilogue_operands_follow_y_layout(rng, built, mode, layer):
    n, c, h, w, k, r, st, pad, groups, _, _ = layer
    conv = cuopjit.Convolution2DFloat(c, k, r, r, st, st, groups=groups, pad_h=pad, pad_w=pad)
    x, wt = rng.standard_normal((n, c, h, w)).astype(np.float32), rng.standard_normal(conv.weight_shape)
    conv.set_weight(cuopjit.tensor(wt.astype(np.float32)))
    s, res = rng.standard_normal(k).astype(np.float32), rng.standard_normal(conv.output_shape(x.shape))
    conv.set_epilogue("relu(acc * s + r)", s=cuopjit.tensor(s))
    y = _guarded(conv.output_shape(x.shape), np.float32, True)
    jit = cuopjit.JITConvolution2DFloat(conv)
    jit.set_jit_config(make_config(**MODES[mode][1]))
    jit.forward(_tensor(x, True), y, r=_tensor(res.astype(np.float32), True))
    check_guards(y)
    ref = np.maximum(_reference(x, wt, None, (st, st), (pad, pad), (1, 1), groups, False) * s[None, :, None, None]
                     + res, 0)
    assert np.linalg.norm(y.to_numpy() - ref) / np.linalg.norm(ref) < (3e-3 if mode == "tf32" else 1e-5)


@pytest.mark.gpu
def test_torch_channels_last_tensors_pass_as_they_are():
    torch = pytest.importorskip("torch")
    conv = cuopjit.Convolution2DFloat(64, 128, 3, 3, 2, 2, pad_h=1, pad_w=1)
    x = torch.randn(2, 64, 29, 31, device="cuda").to(memory_format=torch.channels_last)
    w = torch.randn(128, 64, 3, 3, device="cuda")
    conv.set_weight(w)
    y = torch.full((2, 128, 15, 16), float("nan"), device="cuda").to(memory_format=torch.channels_last)
    assert conv.forward(x, y) is y
    torch.cuda.synchronize()
    ref = torch.nn.functional.conv2d(x.double(), w.double(), stride=2, padding=1)
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-5
