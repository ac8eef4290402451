"""The TF32 wgmma Conv2D on a channels_last x, which the tensor cores read truncated to TF32, scales its sums by
DEBIAS = 1 + the truncation's mean relative error (cuopjit/ops/conv2d/wgmma.py). CPU: which plans scale (a
channels_last x in TF32; not an NCHW x, whose NHWC copy is rounded to nearest, nor 3xTF32), the constant against
truncation emulated in NumPy, the builds compiling for sm_90a without spills. GPU, against float64 references into
NaN-poisoned outputs inside canaries: on positive data (where errors cannot cancel) a mean signed error near zero
(truncation alone: about -3.5e-4) for one and two consumers, an exact box, stride 2 and a staged residual, and the
norm-wise error within the per-product bound of x truncated and debiased, w rounded to nearest."""
from __future__ import annotations


import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit.ops.conv2d import gemm_route, plans as ck, wgmma as cw
from cuopjit.target import named

from conftest import check_guards, compiles_without_spills, make_config
from test_conv2d import _reference
from test_conv2d_layouts import _guarded, _tensor

SM90 = named("sm_90")
P = ck.ConvProblem
NHWC = {"x_nhwc": True, "y_nhwc": True}
TF32 = {"enable_tensor_core": True}
MU = cw.DEBIAS - 1
# |x' w' - x w| / |x w|: x truncated (relative error in [0, 2^-10)) then scaled up by MU, w rounded (2^-11)
PER_PRODUCT = 2.0 ** -10 - MU + 2.0 ** -11 + 2.0 ** -22
RESIDUAL = "(acc+r)|r:full"


def _conv_launch(problem, **fields):
    return ck.FAMILY.default_plan(problem, make_config(**fields).snapshot(), SM90).launches[-1]


# --- CPU ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer, fields, scaled", [
    (P("float32", 32, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, **NHWC), TF32, True),
    (P("float32", 32, 128, 56, 56, 128, 3, 3, 2, 2, 1, 1, x_nhwc=True), TF32, True),          # NCHW y
    (P("float32", 32, 128, 56, 56, 128, 3, 3, 2, 2, 1, 1, y_nhwc=True), TF32, False),         # NCHW x: its copy
    (P("float32", 32, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, **NHWC), {"precision": "3xtf32"}, False)])
def test_only_a_channels_last_x_in_tf32_is_debiased(layer, fields, scaled):
    conv = _conv_launch(layer, **fields)
    assert "wgmma" in conv.units and dict(conv.spec.params)["DEBIAS"] == (cw.DEBIAS if scaled else 0)
    assert ("acc[i] *= 1.00035222f" in pipeline.source(conv.spec)) is scaled


def test_debias_is_the_mean_relative_error_of_tf32_truncation():
    """Values of log-uniform significand and uniform low bits (what activations look like): the mean of
    (x - trunc(x)) / x over them is MU; values exact in TF32 come out MU high, under TF32's 2^-11."""
    x = np.exp2(np.random.default_rng(0).uniform(-8, 8, 1 << 20)).astype(np.float32)
    trunc = (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    mean = float(np.mean((x.astype(np.float64) - trunc) / x))
    assert abs(mean - MU) < 0.01 * MU and 3.5e-4 < MU < 2.0 ** -11
    assert float(np.float32(cw.DEBIAS)) == pytest.approx(cw.DEBIAS, rel=2.0 ** -24)


def test_debiased_builds_compile_for_sm90a_without_spills():
    cases = [(P("float32", 32, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, **NHWC), {}),
             (P("float32", 2, 64, 20, 20, 72, 3, 3, 1, 1, 1, 1, epilogue=RESIDUAL, **NHWC), {"tile_size": 64})]
    specs = [_conv_launch(p, **TF32, **fields).spec for p, fields in cases]
    compiles_without_spills(specs, "sm_90a")


# --- GPU ---------------------------------------------------------------------------------------------------
# (N, C, H, W, K, kernel, stride, pad), config: one consumer, two, an exact box (QN past its pixels), stride 2
LAYERS = [((2, 64, 20, 20, 64, 3, 1, 1), {"block_size": 256}),
          ((2, 64, 17, 19, 128, 3, 1, 1), {"tile_size": 64}),
          ((8, 96, 7, 7, 128, 3, 1, 1), {"block_size": 256}),     # the heuristic picks split-K mma.sync here
          ((2, 128, 30, 30, 136, 1, 2, 0), {"tile_size": 128})]


def _run(rng, layer, fields, y_nhwc, positive, x_nhwc=True, epilogue=False):
    n, c, h, w, k, r, st, pad = layer
    conv = cuopjit.Convolution2DFloat(c, k, r, r, st, st, pad_h=pad, pad_w=pad)
    draw = (lambda shape: rng.uniform(0.1, 1.0, shape)) if positive else rng.standard_normal
    x, wt = draw((n, c, h, w)).astype(np.float32), draw(conv.weight_shape).astype(np.float32)
    conv.set_weight(cuopjit.tensor(wt))
    ref = _reference(x, wt, None, (st, st), (pad, pad), (1, 1), 1, False)
    operands = {}
    if epilogue:        # a residual staged by TMA
        res = draw(ref.shape).astype(np.float32)
        conv.set_epilogue("acc + r")
        ref, operands = ref + res, {"r": _tensor(res, y_nhwc)}
    y = _guarded(ref.shape, np.float32, y_nhwc)
    jit = cuopjit.JITConvolution2DFloat(conv)
    jit.set_jit_config(make_config(**TF32, **fields))
    assert jit.forward(_tensor(x, x_nhwc), y, **operands) is y
    check_guards(y)
    out, kernel = y.to_numpy().astype(np.float64), jit.get_performance_profile().kernel_name
    assert np.all(np.isfinite(out)) and "wgmma" in kernel, kernel
    return out, ref, kernel, c * r * r


@pytest.mark.gpu
@pytest.mark.parametrize("layer, fields", LAYERS, ids=["one", "two", "exact", "s2"])
@pytest.mark.parametrize("y_nhwc", [True, False], ids=["y_nhwc", "y_nchw"])
def test_channels_last_tf32_error_is_within_the_per_product_bound(rng, layer, fields, y_nhwc):
    out, ref, kernel, taps = _run(rng, layer, fields, y_nhwc, False)
    err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert err <= 2 * np.finfo(np.float32).eps * (taps + 2) + PER_PRODUCT, f"{layer}: error {err:.3g} ({kernel})"


@pytest.mark.gpu
@pytest.mark.parametrize("layer, fields, x_nhwc, epilogue", [
    (*LAYERS[0], True, False), (*LAYERS[1], True, True), (*LAYERS[2], True, False), (*LAYERS[3], True, False),
    (*LAYERS[1], False, False)], ids=["one", "two-residual", "exact", "s2", "x_nchw"])
def test_tf32_has_no_bias_on_positive_data(rng, layer, fields, x_nhwc, epilogue):
    """Positive x and w: x truncated alone would put every output about 3.5e-4 low; debiased (or rounded to nearest
    by the NCHW copy) the mean signed error is what the float32 sums leave (the tensor cores round them toward zero:
    <= 2^-24 per tap) and the mantissas' departure from log-uniform (uniform here: 1.4e-5)."""
    out, ref, kernel, taps = _run(rng, layer, fields, True, True, x_nhwc, epilogue)
    bias = float(np.mean((out - ref) / ref))
    assert abs(bias) <= taps * 2.0 ** -24 + 2.0 ** -14, f"{layer}: mean relative error {bias:.3g} ({kernel})"


def test_the_pointwise_gemm_route_takes_both_truncations_back_through_alpha():
    """A 1x1 channels_last layer runs as a GEMM whose wgmma kernel truncates x and the stored weight: alpha is
    DEBIAS²; the exact SIMT route and 3xTF32 keep alpha 1."""
    layer = P("float32", 32, 256, 28, 28, 128, 1, 1, **NHWC)
    for fields, alpha in ((TF32, cw.DEBIAS ** 2), ({"precision": "3xtf32"}, 1.0), ({}, 1.0)):
        cfg = make_config(**fields).snapshot()
        plan = gemm_route.plan(layer, gemm_route.choices(layer, cfg, SM90)[0], SM90)
        scalars = [a.value for kl in plan.launches for a in kl.args if a.kind == "f32"]
        assert scalars and scalars[0] == pytest.approx(alpha, rel=1e-7), fields
