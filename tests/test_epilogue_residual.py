"""The TF32 wgmma Conv2D's output-shaped epilogue operands (a residual) brought into shared memory by TMA
(cuopjit/ops/conv2d/wgmma.py residual_tiles, templates/conv2d/conv2d_wgmma_residual.cuh.jinja), on the CPU: which
layers stage them (and store y over the staged tile by TMA), the shared memory they take, and that the staged
builds compile for sm_90a without spills."""
from __future__ import annotations

import dataclasses

import pytest

from cuopjit.expr import epilogue_key, parse_epilogue
from cuopjit.ops import epilogue
from cuopjit.ops.conv2d import plans as ck, wgmma as cw, wgmma_plan as cwp
from cuopjit.target import named

from conftest import compiles_without_spills, make_config

SM90 = named("sm_90")
P = ck.ConvProblem
COL, FULL = "per_column", "full"
RESIDUAL = epilogue_key(parse_epilogue("relu(acc * scale + shift + residual)"),
                        {"scale": COL, "shift": COL, "residual": FULL})
TWO = epilogue_key(parse_epilogue("relu(acc * scale + r1) + r2"), {"scale": COL, "r1": FULL, "r2": FULL})
THREE = epilogue_key(parse_epilogue("r1 + r2 * r3 + acc"), {"r1": FULL, "r2": FULL, "r3": FULL})
WITH_C = epilogue_key(parse_epilogue("relu(acc * scale + residual) + 0.5 * c"), {"scale": COL, "residual": FULL})
LAYER = P("float32", 32, 64, 56, 56, 64, 3, 3, ph=1, pw=1, epilogue=RESIDUAL)      # ResNet-50 3x3 64 at 56^2
TF32 = {"enable_tensor_core": True}


def _conv(problem, **fields):
    return ck.FAMILY.default_plan(problem, make_config(**(fields or TF32)).snapshot(), SM90).launches[-1]


@pytest.mark.parametrize("change, tiles", [
    ({}, 1), ({"epilogue": TWO}, 2), ({"epilogue": THREE}, 0),             # at most two staged operands
    ({"w": 54}, 0), ({"w": 60}, 1),                                         # NCHW: OW floats a 16-byte multiple
    ({"x_nhwc": True, "y_nhwc": True, "k": 66}, 0),                         # channels_last: O a multiple of 4
    ({"x_nhwc": True, "y_nhwc": True, "k": 68}, 1)])
def test_which_layers_stage_their_output_shaped_operands(change, tiles):
    problem = dataclasses.replace(LAYER, **change)
    assert cw.residual_tiles(problem, split=False) == tiles and cw.residual_tiles(problem, split=True) == 0
    launch = _conv(problem)
    assert ("_rt" in launch.spec.name) == bool(tiles) and dict(launch.spec.params)["RTILES"] == (
        tuple(i for i, k in enumerate(epilogue.kinds_of(problem.epilogue)) if k == FULL) if tiles else ())
    assert "_rt" not in _conv(problem, precision="3xtf32").spec.name


@pytest.mark.parametrize("change, ytma", [
    ({}, True), ({"x_nhwc": True, "y_nhwc": True, "k": 68}, True),          # one staged operand: y stored by TMA
    ({"epilogue": TWO}, False), ({"epilogue": WITH_C}, False),               # two operands; c read from y
    ({"n": 32, "c": 64, "h": 7, "w": 7, "k": 132, "x_nhwc": True, "y_nhwc": True}, False)])   # whole-row boxes
def test_one_staged_operand_stores_y_by_tma_where_tma_clips_the_box(change, ytma):
    launch = _conv(dataclasses.replace(LAYER, **change))
    assert "_rt" in launch.spec.name and ("_ytma" in launch.spec.name) == ytma == dict(launch.spec.params)["YSTORE"]


def test_the_staged_tile_fits_beside_fewer_stages_or_not_at_all():
    # 1x1 128 -> 512 at 28^2: a 128 x 128 tile (64 KB) leaves room for 4 stages of 32 KB instead of 6
    launch = _conv(P("float32", 32, 128, 28, 28, 512, 1, 1, epilogue=RESIDUAL))
    assert "_s4_rt1" in launch.spec.name and launch.shared <= SM90.smem_per_block
    assert launch.shared - cw.smem_bytes(2, 128, 4, False, True) == 128 * 128 * 4 + 16
    # two 128 x 256 tiles (256 KB) fit nowhere: read from global memory
    assert cw.build(2, 256, 32, SM90, split=False, staged=True, rtiles=2).rtiles == 0
    bad = cw.build(2, 128, 32, SM90, split=False, staged=True, rtiles=1)
    with pytest.raises(ValueError, match="stages 1 epilogue operands by TMA, which this layer takes 0 of"):
        cwp.plan(dataclasses.replace(LAYER, w=55, epilogue=RESIDUAL), bad, SM90)


def test_staged_builds_compile_for_sm90a_without_spills():
    problems = [LAYER, P("float32", 3, 32, 9, 12, 40, 3, 3, ph=1, pw=1, epilogue=TWO),
                P("float32", 32, 64, 7, 7, 132, 3, 3, ph=1, pw=1, epilogue=RESIDUAL, x_nhwc=True, y_nhwc=True),
                P("float32", 2, 32, 10, 12, 40, 3, 3, ph=1, pw=1, epilogue=RESIDUAL, x_nhwc=True, y_nhwc=True)]
    specs = [_conv(p, **TF32, **({"tile_size": 64} if i == 3 else {})).spec for i, p in enumerate(problems)]
    assert all("_rt" in s.name for s in specs)
    compiles_without_spills(specs, "sm_90a")


@pytest.mark.parametrize("c, hw, k", [(64, 56, 256), (128, 28, 512), (256, 14, 1024)])
def test_a_pointwise_channels_last_layer_with_a_residual_runs_the_convolution(c, hw, k):
    """TF32 1x1 channels_last layers (ResNet-50's expansions) with an output-shaped operand run the wgmma
    convolution, which stages it by TMA during the k-loop; without one (and in 3xTF32) they stay on the GEMM."""
    layer = P("float32", 32, c, hw, hw, k, 1, 1, x_nhwc=True, y_nhwc=True, epilogue=RESIDUAL)
    assert "_rt1" in _conv(layer).spec.name and _conv(layer).spec.kernel == "conv2d_wgmma"
    bn_relu = epilogue_key(parse_epilogue("relu(acc * scale + shift)"), {"scale": COL, "shift": COL})
    assert _conv(dataclasses.replace(layer, epilogue=bn_relu)).spec.kernel == "gemm_wgmma"


def test_a_channels_last_residual_keeps_four_stages_beside_its_tile():
    # 1x1 128 -> 512 at 28^2 channels_last: 128 x 112 pixels with 4 stages, not the 128 x 200 that leaves 2
    name = _conv(P("float32", 32, 128, 28, 28, 512, 1, 1, x_nhwc=True, y_nhwc=True, epilogue=RESIDUAL)).spec.name
    assert "_t128x112_" in name and "_s4_rt1" in name
