"""Convolution2D: every variant compiles without spills for sm_80 and sm_90a (CPU, real NVRTC); configs
map to kernels as documented and bad ones raise saying what to choose; the output-size formula's numbers
appear in every shape error; on a GPU, Convolution2DFloat/Double match float64 references (NumPy on small
shapes, torch on the device for the seed's layer) in every precision mode, with outputs poisoned with NaN
inside canaries."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit.ops.conv2d import plans as ck
from cuopjit.target import named

from conftest import SEED_CONFIGS, check_guards, guarded, make_config

SM80, SM90 = named("sm_80"), named("sm_90")
P = ck.ConvProblem
SEED_LAYER = P("float32", 32, 64, 224, 224, 128, 3, 3, ph=1, pw=1)
DEPTHWISE = P("float32", 32, 256, 56, 56, 256, 3, 3, ph=1, pw=1, groups=256)
# Switches and shapes beyond the seed configurations: each gives other code.
EXTRA = [{}, {"enable_tensor_core": True}, {"enable_loop_unroll": False}, {"enable_memory_coalescing": False},
         {"enable_shared_memory_opt": False}, {"tile_size": 64, "block_size": 64}, {"kernel_type": "tensor_core",
         "tile_size": 128, "block_size": 512}, {"tile_size": 32, "block_size": 1024}, {"precision": "3xtf32"},
         {"precision": "3xtf32", "tile_size": 64, "block_size": 128}]
_COMPILED: set = set()
WIDE = [p for p in ck.problems() if p.dtype in ("float32", "float64")]     # the 16-bit ones: test_conv2d_half.py


def _specs(fields: dict, t, problems=None) -> list:
    cfg = make_config(**fields).snapshot()
    return [spec for p in problems or WIDE if p.dtype == "float32" or "precision" not in fields
            for spec in ck.FAMILY.default_plan(p, cfg, t).specs]


# --- CPU: every variant renders and compiles, no spills ----------------------------------------------
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_variant_compiles_without_spills(arch):
    t = SM80 if arch == "sm_80" else SM90
    configs = EXTRA if arch == "sm_90a" else [{}, {"enable_tensor_core": True}, SEED_CONFIGS[-1]]
    specs = [s for fields in configs for s in _specs(fields, t)]
    if arch == "sm_90a":   # the seed configurations on the layers whose code differs most (chunk / flat, f64)
        specs += [s for fields in SEED_CONFIGS for s in _specs(fields, t, WIDE[::3])]
    specs = dict.fromkeys(specs)
    for spec in specs:
        if (spec, arch) in _COMPILED:
            continue
        cubin, info = pipeline.build(spec, arch, persistent=False)
        assert cubin[:4] == b"\x7fELF" and info.spill_bytes == 0, f"{spec.name} spills {info.spill_bytes} B on {arch}"
        _COMPILED.add((spec, arch))


def test_problems_cover_both_dtypes_both_k_orders_and_the_direct_kernel():
    cfg = make_config().snapshot()
    names = [s.name for p in WIDE for s in ck.FAMILY.default_plan(p, cfg, SM90).specs]
    assert {p.dtype for p in ck.problems()} == {"float32", "float64", "float16", "bfloat16"}
    assert any("_chunk_" in n for n in names) and any("_flat_" in n for n in names)
    assert any(n.startswith("conv2d_direct") for n in names)


@pytest.mark.parametrize("fields, units", [
    ({}, "FP32 cores (SIMT)"), ({"enable_tensor_core": True}, "TF32 tensor cores (mma.sync)"),
    ({"kernel_type": "tensor_core"}, "TF32 tensor cores (mma.sync)"),
    ({"kernel_type": "simple", "enable_tensor_core": True}, "FP32 cores (SIMT)"),
    ({"precision": "3xtf32"}, "3xTF32 tensor cores (mma.sync)"),
    ({"precision": "3xtf32", "kernel_type": "simple"}, "FP32 cores (SIMT)")])
def test_kernel_type_and_tensor_core_permission_pick_the_units(fields, units):
    """On sm_80 (no wgmma); tests/test_conv2d_wgmma.py covers what sm_90 routes to the wgmma kernel."""
    plan = ck.FAMILY.default_plan(SEED_LAYER, make_config(**fields).snapshot(), SM80)
    assert [kl.units for kl in plan.launches][-1] == units
    assert len(plan.launches) == 2 and plan.workspace >= 128 * 64 * 9 * 4   # pack + implicit GEMM


def test_float64_takes_exact_dmma_by_default_and_simt_when_tiled():
    p = dataclasses.replace(SEED_LAYER, dtype="float64")
    assert ck.FAMILY.default_plan(p, make_config().snapshot(), SM90).launches[-1].units.startswith("FP64 tensor")
    assert ck.FAMILY.default_plan(p, make_config(kernel_type="tiled").snapshot(), SM90).launches[-1].units == \
        "FP64 cores (SIMT)"


def test_depthwise_runs_the_direct_kernel_and_ignores_tensor_core_and_tile_fields():
    base = ck.FAMILY.default_plan(DEPTHWISE, make_config().snapshot(), SM90)
    assert [kl.spec.kernel for kl in base.launches] == ["conv2d_direct"] and base.workspace == 0
    for fields in ({"enable_tensor_core": True}, {"tile_size": 64}, {"enable_tma": True},
                   {"enable_shared_memory_opt": False}):
        assert ck.FAMILY.default_plan(DEPTHWISE, make_config(**fields).snapshot(), SM90) == base
    simple = ck.FAMILY.default_plan(DEPTHWISE, make_config(kernel_type="simple").snapshot(), SM90)
    assert dict(simple.launches[0].spec.params)["OPT"] == 1


@pytest.mark.parametrize("field, value, token", [
    ("enable_loop_unroll", False, "_nounroll"), ("enable_memory_coalescing", False, "_v1"),
    ("enable_shared_memory_opt", False, "_nopad"), ("tile_size", 64, "t64x64"), ("enable_tensor_core", True, "tf32"),
    ("precision", "3xtf32", "3xtf32")])
def test_every_switch_changes_the_code(field, value, token):
    default = ck.FAMILY.default_plan(SEED_LAYER, make_config().snapshot(), SM90).launches[-1].spec
    changed = ck.FAMILY.default_plan(SEED_LAYER, make_config(**{field: value}).snapshot(), SM90).launches[-1].spec
    assert token in changed.name and token not in default.name and pipeline.source(changed) != pipeline.source(default)


def test_tuning_candidates_are_the_other_default_shapes_of_the_same_kernel():
    found = ck.choices(SEED_LAYER, make_config().snapshot(), SM90)
    assert [c.shape.label for c in found] == ["t128x128x8_r8x8", "t64x128x8_r4x8", "t64x64x16_r4x4"]
    assert len(ck.choices(SEED_LAYER, make_config(tile_size=128).snapshot(), SM90)) == 1
    assert len(ck.choices(SEED_LAYER, make_config(kernel_type="simple").snapshot(), SM90)) == 1
    assert all(c.shape.mma for c in ck.choices(SEED_LAYER, make_config(enable_tensor_core=True).snapshot(), SM80))


def test_k_order_chunks_wide_layers_and_flattens_few_channels():
    assert ck.k_order(SEED_LAYER, 16) == ("chunk", 4, 36)
    assert ck.k_order(dataclasses.replace(SEED_LAYER, c=3), 16) == ("flat", 0, 2)
    assert ck.k_order(dataclasses.replace(SEED_LAYER, c=65), 16) == ("flat", 0, 37)


@pytest.mark.parametrize("fields, message", [
    ({"tile_size": 256}, r"Convolution2D tile_size=256 is not allowed: choose 0 \(auto\) or one of 16, 32, 64, 128"),
    ({"tile_size": 128, "block_size": 32}, r"tile_size=128 cannot run with block_size=32 in the float32 SIMT "
                                           r"kernel: choose block_size 256, 512, 1024"),
    ({"precision": "3xtf32", "_dtype": "float64"}, r"Convolution2D precision='3xtf32' applies to float32 "
                                                   r"tensor-core products; float64 is exact on every kernel"),
])
def test_bad_configs_say_what_to_choose(fields, message):
    fields = dict(fields)
    problem = dataclasses.replace(SEED_LAYER, dtype=fields.pop("_dtype", "float32"))
    with pytest.raises(ValueError, match=message):
        ck.choices(problem, make_config(**fields).snapshot(), SM90)


def test_constructor_and_output_shape_errors_show_the_formula():
    conv = cuopjit.Convolution2DFloat(64, 128, 3, 3, 1, 1)
    assert conv.output_shape((32, 64, 224, 224), pad_h=1, pad_w=1) == (32, 128, 224, 224)
    assert cuopjit.Convolution2DFloat(3, 64, 7, 7, 2, 2, pad_h=3, pad_w=3).output_shape((1, 3, 224, 224)) == \
        (1, 64, 112, 112)
    assert cuopjit.Convolution2DDouble(4, 4, 3, 3, 1, 1, 2, 2).output_shape((1, 4, 7, 7)) == (1, 4, 3, 3)
    with pytest.raises(ValueError, match=r"would be empty: OH = \(H \+ 2\*pad_h - dilation_h\*\(kernel_h-1\) - 1\) "
                                         r"// stride_h \+ 1 = \(1 \+ 2\*0 - 1\*\(3-1\) - 1\) // 1 \+ 1 = -1"):
        conv.output_shape((1, 64, 1, 1))
    with pytest.raises(ValueError, match=r"groups=3 must divide in_channels=64 and out_channels=128"):
        cuopjit.Convolution2DFloat(64, 128, 3, 3, groups=3)
    with pytest.raises(ValueError, match=r"stride_h=0 is not allowed: it must be an integer >= 1"):
        cuopjit.Convolution2DFloat(64, 128, 3, 3, 0, 1)
    with pytest.raises(ValueError, match=r"pad_w=-1 is not allowed: it must be an integer >= 0"):
        conv.output_shape((1, 64, 8, 8), pad_w=-1)
    assert conv.weight_shape == (128, 64, 3, 3)
    assert cuopjit.Convolution2DFloat(64, 64, 3, 3, groups=64).weight_shape == (64, 1, 3, 3)


# --- GPU ---------------------------------------------------------------------------------------------
def _reference(x, w, b, stride, pad, dil, groups, relu):
    """float64 NumPy convolution: one tensordot per window tap and group over a zero-padded input."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, k, oh, ow))
    kg = k // groups
    for g in range(groups):
        for r in range(kh):
            for s in range(kw):
                win = xp[:, g * cg:(g + 1) * cg, r * dil[0]:r * dil[0] + stride[0] * (oh - 1) + 1:stride[0],
                         s * dil[1]:s * dil[1] + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, g * kg:(g + 1) * kg] += np.tensordot(win, w[g * kg:(g + 1) * kg, :, r, s],
                                                            axes=([1], [1])).transpose(0, 3, 1, 2)
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
    return np.maximum(out, 0) if relu else out


# name: (dtype, fields, tolerance per summed tap: norm-wise relative error <= TOL * taps + FLOOR)
MODES = {"f32": (np.float32, {}, 2 * np.finfo(np.float32).eps, 0.0),
         "tf32": (np.float32, {"enable_tensor_core": True}, 2 * np.finfo(np.float32).eps, 2e-3),
         # 3xTF32 drops small*small and rounds small to TF32: ~3 * 2^-22 per product beyond float32's sums
         "3xtf32": (np.float32, {"precision": "3xtf32"}, 2 * np.finfo(np.float32).eps, 4 * 2.0 ** -22),
         "f64dmma": (np.float64, {}, 2 * np.finfo(np.float64).eps, 0.0),
         "f64simt": (np.float64, {"kernel_type": "tiled"}, 2 * np.finfo(np.float64).eps, 0.0)}
# (N, C, H, W, K, kh, kw, stride, pad, dilation, groups, bias, relu)
LAYERS = [(1, 1, 1, 1, 8, 1, 1, 1, 0, 1, 1, False, False),
          (2, 1, 1, 1, 9, 3, 3, 1, 1, 1, 1, True, False),
          (2, 3, 7, 7, 16, 3, 3, 2, 3, 2, 1, True, True),
          (3, 65, 33, 33, 33, 3, 3, 1, 1, 1, 1, False, False),
          (2, 65, 33, 33, 40, 1, 1, 3, 0, 1, 1, True, False),
          (2, 64, 33, 33, 32, 3, 3, 2, 2, 1, 2, True, True),
          (2, 65, 33, 33, 65, 3, 3, 1, 2, 2, 65, True, False),
          (2, 7, 7, 7, 7, 3, 3, 3, 0, 1, 7, False, True),
          (1, 3, 224, 224, 64, 7, 7, 2, 3, 1, 1, True, True),
          (2, 32, 112, 112, 64, 3, 3, 1, 1, 1, 1, True, False)]


def _conv(dtype, layer):
    n, c, h, w, k, kh, kw, st, pad, dil, groups, bias, relu = layer
    cls = cuopjit.Convolution2DFloat if dtype == np.float32 else cuopjit.Convolution2DDouble
    return cls(c, k, kh, kw, st, st, dil, dil, groups, relu)


def _check(rng, mode, layer, config=None):
    dtype, fields, per_tap, floor = MODES[mode]
    n, c, h, w, k, kh, kw, st, pad, dil, groups, bias, relu = layer
    conv = _conv(dtype, layer)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal(conv.weight_shape).astype(dtype)
    b = rng.standard_normal(k).astype(dtype) if bias else None
    conv.set_weight(cuopjit.tensor(wt))
    if bias:
        conv.set_bias(cuopjit.tensor(b))
    y = guarded(conv.output_shape(x.shape, pad_h=pad, pad_w=pad), dtype)
    jit = (cuopjit.JITConvolution2DFloat if dtype == np.float32 else cuopjit.JITConvolution2DDouble)(conv)
    jit.set_jit_config(config or make_config(**fields))
    assert jit.forward(cuopjit.tensor(x), y, pad_h=pad, pad_w=pad) is y
    check_guards(y)
    out, ref = y.to_numpy(), _reference(x, wt, b, (st, st), (pad, pad), (dil, dil), groups, relu)
    taps = c // groups * kh * kw
    err = np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300)
    assert np.all(np.isfinite(out)) and err <= per_tap * (taps + 2) + floor, \
        f"{mode} {layer}: relative error {err:.3g} ({jit.get_performance_profile().kernel_name})"


@pytest.mark.gpu
@pytest.mark.parametrize("layer", LAYERS, ids=lambda l: "n{}c{}h{}k{}_{}x{}s{}p{}d{}g{}".format(*l[:6], *l[7:11]))
@pytest.mark.parametrize("mode", list(MODES))
def test_matches_numpy(rng, mode, layer):
    _check(rng, mode, layer)


@pytest.mark.gpu
@pytest.mark.parametrize("fields", [{"kernel_type": "simple"}, {"tile_size": 32, "block_size": 1024},
                                    {"kernel_type": "tensor_core", "tile_size": 16, "block_size": 256},
                                    {"tile_size": 64, "block_size": 64, "enable_memory_coalescing": False,
                                     "enable_shared_memory_opt": False, "enable_loop_unroll": False}], ids=str)
def test_other_shapes_and_switches(rng, fields):
    for layer in (LAYERS[3], LAYERS[5]):
        _check(rng, "tf32" if "tensor_core" in str(fields) else "f32", layer, make_config(**fields))


@pytest.mark.gpu
def test_seed_layer_matches_torch_float64():
    torch = pytest.importorskip("torch")
    conv = cuopjit.Convolution2DFloat(64, 128, 3, 3, 1, 1)
    x = torch.randn(2, 64, 224, 224, device="cuda")
    w = torch.randn(128, 64, 3, 3, device="cuda")
    b = torch.randn(128, device="cuda")
    conv.set_weight(cuopjit.from_dlpack(w))
    conv.set_bias(cuopjit.from_dlpack(b))
    ref = torch.nn.functional.conv2d(x.double(), w.double(), b.double(), padding=1)
    for fields, tol in (({}, 600 * 2 * 2.0 ** -24), ({"enable_tensor_core": True}, 2e-3),
                        ({"precision": "3xtf32"}, 600 * 2 * 2.0 ** -24 + 4 * 2.0 ** -22)):
        y = torch.full((2, 128, 224, 224), float("nan"), device="cuda")
        jit = cuopjit.JITConvolution2DFloat(conv)
        jit.set_jit_config(make_config(**fields))
        jit.forward(cuopjit.from_dlpack(x), cuopjit.from_dlpack(y), pad_h=1, pad_w=1)
        torch.cuda.synchronize()
        assert ((y.double() - ref).norm() / ref.norm()).item() <= tol, fields


@pytest.mark.gpu
def test_errors_name_the_operands_and_the_formula():
    conv = cuopjit.Convolution2DFloat(4, 8, 3, 3)
    x = cuopjit.empty([1, 4, 5, 5])
    with pytest.raises(ValueError, match=r"no weight: call set_weight\(W\) with W of shape \[8, 4, 3, 3\]"):
        conv.forward(x, cuopjit.empty([1, 8, 3, 3]))
    with pytest.raises(ValueError, match=r"weight has shape \[8, 3, 3, 3\], expected \[8, 4, 3, 3\]"):
        conv.set_weight(cuopjit.empty([8, 3, 3, 3]))
    conv.set_weight(cuopjit.empty([8, 4, 3, 3]))
    with pytest.raises(ValueError, match=r"x has shape \[1, 3, 5, 5\] with C=3 channels but the weight "
                                         r"\[8, 4, 3, 3\] expects in_channels=4"):
        conv.forward(cuopjit.empty([1, 3, 5, 5]), cuopjit.empty([1, 8, 3, 3]))
    with pytest.raises(ValueError, match=r"y has shape \[1, 8, 5, 5\], expected \[1, 8, 3, 3\]: OH = .* = "
                                         r"\(5 \+ 2\*0 - 1\*\(3-1\) - 1\) // 1 \+ 1 = 3"):
        conv.forward(x, cuopjit.empty([1, 8, 5, 5]))
    with pytest.raises(ValueError, match=r"would be empty: OH = .* = \(5 \+ 2\*0 - 1\*\(3-1\) - 1\) // 1 \+ 1 = 3; "
                                         r"OW = .* = \(1 \+ 2\*0"):
        conv.forward(cuopjit.empty([1, 4, 5, 1]), cuopjit.empty([1, 8, 3, 1]))
    with pytest.raises(ValueError, match=r"bias has shape \[4\], expected \[8\]"):
        conv.set_bias(cuopjit.empty([4]))
    with pytest.raises(TypeError, match="Convolution2DFloat: x is float64"):
        conv.forward(cuopjit.empty([1, 4, 5, 5], "float64"), cuopjit.empty([1, 8, 3, 3]))
