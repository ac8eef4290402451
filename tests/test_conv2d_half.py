"""Convolution2DHalf / Convolution2DBFloat16: float16 and bfloat16 convolutions, products and sums in float32, y
rounded once. CPU: the classes, which kernel each layer plans (wgmma f16 / bf16 on sm_90, the stem there with its
window's columns folded into the channels, the GEMM family for pointwise channels_last layers, the implicit GEMM
reading halves elsewhere, the direct kernel for depthwise), the
refusals, representative kernels compiling for sm_80 and sm_90a without spills, prewarm building what the plans
need. GPU: float64 references on small-integer inputs (every product and float32 sum exact, so each output is off
by its one rounding: |y - ref| <= u |ref|, u = 2^-11 float16, 2^-8 bfloat16), NaN-poisoned outputs inside
canaries, every layout pairing, odd sizes, 1x1 stride 1 and 2, 3x3, the 7x7/2 stem, depthwise, grouped, batch 1,
ResNet-50's layers, epilogues, Gaussian inputs (norm-wise: u + taps 2^-23) and float16 overflow to inf."""
from __future__ import annotations

import dataclasses
import itertools
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit.cli.main import main
from cuopjit.ops import HALF_CLASSES
from cuopjit.ops.conv2d import plans as ck
from cuopjit.prewarm import kernels_to_build, representative_plans
from cuopjit.target import named, of_device

from conftest import check_guards, compiles_without_spills, make_config
from test_conv2d import _reference
from test_conv2d_layouts import RESNET50, _guarded, _tensor

SM80, SM90 = named("sm_80"), named("sm_90")
P = ck.ConvProblem
NHWC = {"x_nhwc": True, "y_nhwc": True}
HALF = ("float16", "bfloat16")
NP = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
U = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}            # unit roundoff
PAIRS = list(itertools.product((False, True), repeat=2))       # (x channels_last, y channels_last)
# (N, C, H, W, K, kernel, stride, pad, groups, bias, relu)
LAYERS = [(2, 64, 15, 13, 72, 3, 1, 1, 1, True, True),      # odd sizes, a partial channel tile
          (2, 64, 9, 7, 40, 1, 1, 0, 1, True, False),       # 1x1 stride 1 (the GEMM route on NHWC)
          (2, 64, 15, 15, 48, 1, 2, 0, 1, False, False),    # 1x1 stride 2
          (2, 3, 23, 23, 16, 7, 2, 3, 1, True, True),       # the stem: 3 channels, 7x7 / 2
          (2, 16, 9, 9, 16, 3, 1, 1, 16, True, False),      # depthwise
          (2, 32, 9, 11, 64, 3, 2, 1, 2, False, True),      # grouped, strided
          (1, 64, 7, 7, 64, 3, 1, 1, 1, False, False),      # batch 1, 7 x 7
          (2, 128, 14, 14, 100, 3, 1, 1, 1, True, False)]   # 100 channels: no 16-byte stores at the edge


def _plan(problem, target=SM90, **fields):
    return ck.FAMILY.default_plan(problem, make_config(**fields).snapshot(), target)


# --- CPU ---------------------------------------------------------------------------------------------------
def test_the_16_bit_classes_and_wrappers():
    half, bf16 = HALF_CLASSES["conv2d"]
    assert (half, bf16) == (cuopjit.Convolution2DHalf, cuopjit.Convolution2DBFloat16)
    assert (half.dtype.name, bf16.dtype.name) == HALF
    assert cuopjit.JITConvolution2DHalf.__name__ == "JITConvolution2DHalf" and cuopjit.JITConvolution2DBFloat16


@pytest.mark.parametrize("dtype", HALF)
def test_which_kernel_each_layer_plans(dtype):
    elem = {"float16": "half_t", "bfloat16": "bf16_t"}[dtype]
    tag = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    conv = _plan(P(dtype, 32, 64, 56, 56, 64, 3, 3, ph=1, pw=1, bias=True, relu=True, **NHWC))
    params = dict(conv.launches[-1].spec.params)
    assert conv.choice.startswith("wgmma_") and params["ELEM"] == elem and params["DEBIAS"] == 0
    assert conv.launches[-1].spec.name.startswith(f"conv2d_{tag}_k3x3") and len(conv.launches) == 2   # pack, conv
    nchw = _plan(P(dtype, 4, 128, 28, 28, 128, 3, 3, 2, 2, 1, 1))
    assert [kl.spec.kernel for kl in nchw.launches] == ["conv2d_wpack", "conv2d_nhwc", "conv2d_wgmma"]
    assert _plan(P(dtype, 32, 256, 56, 56, 64, 1, 1, **NHWC)).choice.startswith("gemm_wgmma")
    stem = P(dtype, 32, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3, **NHWC)      # columns folded into channels (fold.py)
    folded = _plan(stem)
    assert folded.choice.endswith("_fold") and folded.launches[-1].spec.name.startswith(f"conv2d_{tag}_k7x1_s2x1")
    assert [kl.spec.kernel for kl in folded.launches] == ["conv2d_wfold", "conv2d_fold", "conv2d_wgmma"]
    assert dict(_plan(stem, SM80).launches[-1].spec.params)["elem_t"] == elem            # the implicit GEMM
    depthwise = _plan(P(dtype, 32, 256, 56, 56, 256, 3, 3, ph=1, pw=1, groups=256))
    assert depthwise.choice.startswith("direct_") and dict(depthwise.launches[0].spec.params)["elem_t"] == elem
    ampere = _plan(P(dtype, 32, 64, 56, 56, 64, 3, 3, ph=1, pw=1, **NHWC), SM80)
    assert "_tf32_" in ampere.launches[-1].spec.name and dict(ampere.launches[-1].spec.params)["elem_t"] == elem
    simple = _plan(P(dtype, 2, 64, 9, 9, 64, 3, 3, ph=1, pw=1), SM80, kernel_type="simple")
    assert not dict(simple.launches[-1].spec.params)["mma"]


@pytest.mark.parametrize("dtype", HALF)
def test_strided_pointwise_layers_take_grouped_boxes(dtype):
    """The measured picks (conv2d/wgmma.py grouped_first): grouped boxes for outputs >= 14 wide, exact for 7^2."""
    for (c, hw, k), first in (((256, 56, 512), "wgmma_t128x128_b32x4"), ((512, 28, 1024), "wgmma_t128x256_b16x16"),
                              ((1024, 14, 2048), "wgmma_t128x200_b7x7x4")):
        assert _plan(P(dtype, 32, c, hw, hw, k, 1, 1, 2, 2, **NHWC)).choice.startswith(first)
    assert not ck.conv2d_wgmma.grouped_first(P("float32", 32, 256, 56, 56, 512, 1, 1, 2, 2, **NHWC))


def test_no_k_slices_and_no_3xtf32_in_16_bits():
    tiny = P("float16", 1, 512, 7, 7, 512, 3, 3, ph=1, pw=1, **NHWC)     # a handful of tiles: float32 would slice
    for t in (SM80, SM90):
        assert all(getattr(c, "split_k", 1) == 1 for c in ck.FAMILY.choices(tiny, make_config().snapshot(), t))
    with pytest.raises(ValueError, match="precision='3xtf32' applies to float32 tensor-core products; float16 is exact"):
        _plan(tiny, precision="3xtf32")
    sliced = ck.ConvChoice(ck.implicit.R8, 256, split_k=4)
    with pytest.raises(ValueError, match="float16 takes no k-slices"):
        ck.FAMILY.plan(dataclasses.replace(tiny, x_nhwc=False), sliced, SM90)


def _representative(arch):
    t = named(arch.rstrip("a"))
    probs = [P("float16", 8, 64, 20, 20, 72, 3, 3, ph=1, pw=1, bias=True, relu=True, **NHWC),
             P("bfloat16", 8, 64, 20, 20, 64, 3, 3, 2, 2, 1, 1),
             P("float16", 8, 3, 32, 32, 64, 7, 7, 2, 2, 3, 3, bias=True, relu=True, **NHWC),
             P("bfloat16", 8, 3, 33, 31, 32, 3, 3, 2, 2, 1, 1),              # a folded stem from NCHW x
             P("bfloat16", 8, 32, 9, 9, 32, 3, 3, ph=1, pw=1, groups=32, y_nhwc=True)]
    specs = {}
    for p in probs:
        specs.update(dict.fromkeys(_plan(p, t).specs))
    return specs


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_representative_half_kernels_compile_without_spills(arch):
    specs = sorted(_representative(arch), key=lambda s: s.name)
    assert any("_f16_" in s.name for s in specs) and any("_bf16_" in s.name for s in specs)
    assert any(s.kernel == "conv2d_wgmma" for s in specs) == (arch == "sm_90a")
    compiles_without_spills(specs, arch)


def test_float_kernels_never_see_the_16_bit_paths():
    for p in ck.problems():
        if p.dtype == "float32":
            for spec in _plan(p, SM90, enable_tensor_core=True).specs:
                code = pipeline.source(spec)
                assert "half_t" not in code and "bf16_t" not in code and ".f16" not in code, spec.name


def test_prewarm_builds_what_the_half_conv_plans_need(cache_dir, capsys):
    assert main(["prewarm", "--arch", "sm_90", "--op", "conv2d", "--dtype", "float16,bfloat16", "--quiet"]) == 0
    planned = representative_plans(["conv2d"], list(HALF), ["sm_90"])
    assert {p.problem.dtype for p in planned} == set(HALF)
    want = kernels_to_build(planned)
    assert any(s.kernel == "conv2d_wgmma" for s, _ in want)
    assert f"prewarmed {len(want)} kernels for sm_90" in capsys.readouterr().out
    assert [(s.name, a) for s, a in want if not pipeline.is_cached(s, a)] == []


# --- GPU ---------------------------------------------------------------------------------------------------
def _ints(rng, shape, dtype, top=2):
    """Integers in [-top, top]: exact in 16 bits, their products and float32 sums exact too."""
    return rng.integers(-top, top + 1, shape).astype(np.float32).astype(NP[dtype])


def _conv(dtype, layer, **kw):
    n, c, h, w, k, r, st, pad, groups, bias, relu = layer
    cls = cuopjit.Convolution2DHalf if dtype == "float16" else cuopjit.Convolution2DBFloat16
    return cls(c, k, r, r, st, st, groups=groups, relu=relu, pad_h=pad, pad_w=pad, **kw)


def _run(rng, dtype, layer, x_nhwc, y_nhwc, fields=None):
    """One forward on integer inputs; every output within its one rounding of the float64 reference."""
    n, c, h, w, k, r, st, pad, groups, bias, relu = layer
    conv = _conv(dtype, layer)
    x, wt = _ints(rng, (n, c, h, w), dtype), _ints(rng, conv.weight_shape, dtype)
    b = _ints(rng, (k,), dtype, 8) if bias else None
    conv.set_weight(cuopjit.tensor(wt))
    if bias:
        conv.set_bias(cuopjit.tensor(b))
    y = _guarded(conv.output_shape(x.shape), NP[dtype], y_nhwc)
    jit = (cuopjit.JITConvolution2DHalf if dtype == "float16" else cuopjit.JITConvolution2DBFloat16)(conv)
    jit.set_jit_config(make_config(**(fields or {})))
    assert jit.forward(_tensor(x, x_nhwc), y) is y
    check_guards(y)
    out, ref = y.to_numpy().astype(np.float64), _reference(x, wt, b, (st, st), (pad, pad), (1, 1), groups, relu)
    bad = ~(np.abs(out - ref) <= U[dtype] * np.abs(ref))
    assert not bad.any(), (f"{dtype} {layer} x_nhwc={x_nhwc} y_nhwc={y_nhwc}: {bad.sum()} outputs off, first at "
                           f"{np.argwhere(bad)[0]}: {out[bad][0]} vs {ref[bad][0]} "
                           f"({jit.get_performance_profile().kernel_name})")
    return conv, jit


@pytest.fixture(scope="module")
def built():
    """The kernels of the GPU tests below, compiled 16 at a time first."""
    if cuopjit.get_device_count() == 0:
        return
    target = of_device(cuopjit.get_device())
    probs = [P(dt, n, c, h, w, k, r, r, st, st, pad, pad, groups=g, bias=b, relu=rl, x_nhwc=xl, y_nhwc=yl)
             for dt in HALF for n, c, h, w, k, r, st, pad, g, b, rl in LAYERS for xl, yl in PAIRS]
    probs += [P(dt, 2, c, h, h, k, r, r, st, st, pad, pad, **NHWC) for dt in HALF for c, h, k, r, st, pad in RESNET50]
    specs = {}
    for p in probs:
        specs.update(dict.fromkeys(_plan(p, target).specs))
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda s: pipeline.build(s, target.arch), specs))


@pytest.mark.gpu
@pytest.mark.parametrize("layer", LAYERS, ids=lambda l: "n{}c{}h{}w{}k{}_{}x{}s{}g{}".format(*l[:6], *l[5:7], l[8]))
@pytest.mark.parametrize("dtype", HALF)
def test_every_layout_pairing_within_one_rounding(rng, built, dtype, layer):
    for x_nhwc, y_nhwc in PAIRS:
        _run(rng, dtype, layer, x_nhwc, y_nhwc)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_every_resnet50_layer_at_batch_2_channels_last(rng, built, dtype):
    for c, h, k, r, st, pad in RESNET50:
        _run(rng, dtype, (2, c, h, h, k, r, st, pad, 1, False, False), True, True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_the_implicit_gemm_and_simt_kernels_on_hopper(rng, built, dtype):
    layer = (2, 64, 15, 13, 72, 3, 1, 1, 1, True, True)
    for fields in ({"kernel_type": "simple"}, {"kernel_type": "tensor_core", "tile_size": 32}):
        _, jit = _run(rng, dtype, layer, True, True, fields)
        assert "wgmma" not in jit.get_performance_profile().kernel_name


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("layer", [LAYERS[0], LAYERS[1], LAYERS[3]], ids=["3x3", "1x1", "stem"])
def test_epilogue_scale_shift_residual(rng, built, dtype, layer):
    n, c, h, w, k, r, st, pad, groups, _, _ = layer
    conv = _conv(dtype, (n, c, h, w, k, r, st, pad, groups, False, False))
    x, wt = _ints(rng, (n, c, h, w), dtype), _ints(rng, conv.weight_shape, dtype)
    conv.set_weight(cuopjit.tensor(wt))
    s = (2.0 ** rng.integers(-2, 2, k)).astype(NP[dtype])             # powers of two: exact products
    t = _ints(rng, (k,), dtype, 8)
    conv.set_epilogue("relu(acc * s + t + res)", s=cuopjit.tensor(s), t=cuopjit.tensor(t))
    shape = conv.output_shape(x.shape)
    res = _ints(rng, shape, dtype, 8)
    for nhwc in (True, False):
        y = _guarded(shape, NP[dtype], nhwc)
        conv.forward(_tensor(x, nhwc), y, res=_tensor(res, nhwc))
        check_guards(y)
        ref = np.maximum(_reference(x, wt, None, (st, st), (pad, pad), (1, 1), groups, False)
                         * s.astype(np.float64)[None, :, None, None] + t.astype(np.float64)[None, :, None, None]
                         + res.astype(np.float64), 0)
        out = y.to_numpy().astype(np.float64)
        assert np.all(np.abs(out - ref) <= U[dtype] * np.abs(ref)), f"{dtype} {layer} nhwc={nhwc}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_gaussian_inputs_norm_wise(rng, built, dtype):
    layer = (2, 128, 14, 14, 100, 3, 1, 1, 1, True, False)
    conv = _conv(dtype, layer)
    x = rng.standard_normal((2, 128, 14, 14)).astype(NP[dtype])
    wt = rng.standard_normal(conv.weight_shape).astype(NP[dtype])
    conv.set_weight(cuopjit.tensor(wt))
    conv.set_bias(cuopjit.tensor(np.zeros(100, NP[dtype])))
    y = _guarded(conv.output_shape(x.shape), NP[dtype], True)
    conv.forward(_tensor(x, True), y)
    check_guards(y)
    ref = _reference(x, wt, None, (1, 1), (1, 1), (1, 1), 1, False)
    err = np.linalg.norm(y.to_numpy().astype(np.float64) - ref) / np.linalg.norm(ref)
    assert err <= U[dtype] + 128 * 9 * 2.0 ** -23, err       # one rounding + float32 sums of 16-bit products


@pytest.mark.gpu
@pytest.mark.parametrize("nhwc", [True, False])
def test_float16_overflows_to_inf(built, nhwc):
    conv = cuopjit.Convolution2DHalf(64, 16, 1, 1)
    w = np.full((16, 64, 1, 1), 32, np.float16)
    w[8:] = -32                                              # sums of +-131072: past float16's 65504
    conv.set_weight(cuopjit.tensor(w))
    x = np.full((2, 64, 5, 7), 64, np.float16)
    y = _guarded((2, 16, 5, 7), np.float16, nhwc)
    conv.forward(_tensor(x, nhwc), y)
    out = y.to_numpy()
    assert np.all(out[:, :8] == np.inf) and np.all(out[:, 8:] == -np.inf)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_the_weight_is_packed_once(rng, built, dtype):
    layer = (2, 64, 15, 13, 72, 3, 1, 1, 1, False, False)
    conv, jit = _run(rng, dtype, layer, True, True)
    assert "pack" not in jit.get_performance_profile().kernel_name and len(conv._packed) == 1
    w2 = _ints(rng, conv.weight_shape, dtype)
    conv.set_weight(cuopjit.tensor(w2))
    x = _ints(rng, (3, 64, 15, 13), dtype)
    y = _guarded(conv.output_shape(x.shape), NP[dtype], True)
    jit.forward(_tensor(x, True), y)
    ref = _reference(x, w2, None, (1, 1), (1, 1), (1, 1), 1, False)
    assert np.all(np.abs(y.to_numpy().astype(np.float64) - ref) <= U[dtype] * np.abs(ref)) and len(conv._packed) == 1
