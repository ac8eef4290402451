"""The TF32 wgmma Conv2D's residual through shared memory (templates/conv2d/conv2d_wgmma_residual.cuh.jinja), on the
GPU: NCHW and channels_last outputs, channel tiles cut by the output's channels, pixel boxes past the output's edge,
two staged operands, one consumer warpgroup, more tiles than blocks (the staged tile reused across a block's tiles),
y stored over the staged tile by TMA (and not where c is read), a residual or y that is not 16-byte aligned at run
time (global memory in the same kernel); against float64 references, outputs NaN-poisoned inside canaries."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit.device import driver
from cuopjit.expr import evaluate, parse_epilogue
from cuopjit.recipes import placeholder
from cuopjit.target import of_device
from cuopjit.tensor import Tensor

from conftest import check_guards, guarded, make_config, rel_error
from test_conv2d import _reference
from test_epilogue_gpu import TOL, plan_specs

pytestmark = pytest.mark.gpu

RESIDUAL = "relu(acc * scale + shift + residual)"
TWO = "relu(acc * scale + r1) + 0.5 * r2"
WITH_C = "relu(acc * scale + residual) + 0.5 * c"     # staged residual, y read as c: global stores
TF32 = {"enable_tensor_core": True}
CASES = [  # (name, (N, C, H, W, K, kh, kw, stride, pad), channels_last, expr, extra config)
    ("nchw-3x3-k40", (3, 32, 9, 12, 40, 3, 3, 1, 1), False, RESIDUAL, {}),
    ("nchw-two-operands", (2, 64, 10, 16, 72, 3, 3, 1, 1), False, TWO, {}),
    ("nchw-1x1-box-past-ow", (2, 128, 28, 28, 136, 1, 1, 1, 0), False, RESIDUAL, {}),
    ("nchw-one-consumer", (2, 64, 11, 20, 64, 3, 3, 1, 1), False, RESIDUAL, {"block_size": 256}),
    ("nchw-stride-2", (2, 64, 15, 16, 64, 3, 3, 2, 1), False, RESIDUAL, {}),
    ("nchw-many-tiles", (32, 32, 32, 32, 64, 3, 3, 1, 1), False, RESIDUAL, {"tile_size": 64}),
    ("nchw-1x1-many-tiles", (8, 128, 28, 28, 512, 1, 1, 1, 0), False, RESIDUAL, {"tile_size": 128}),
    ("nhwc-whole-rows", (32, 64, 7, 7, 132, 3, 3, 1, 1), True, RESIDUAL, {}),
    ("nhwc-row-box", (2, 32, 10, 12, 40, 3, 3, 1, 1), True, RESIDUAL, {"tile_size": 64}),
    ("nhwc-two-operands", (64, 64, 14, 14, 68, 3, 3, 1, 1), True, TWO, {}),
    ("nchw-reads-c", (3, 32, 9, 12, 40, 3, 3, 1, 1), False, WITH_C, {}),
    ("nhwc-row-box-many-tiles", (24, 64, 20, 20, 64, 3, 3, 1, 1), True, RESIDUAL, {"tile_size": 64}),
]


def _tensor(a: np.ndarray, nhwc: bool) -> Tensor:
    return cuopjit.empty(a.shape, a.dtype, "channels_last" if nhwc else "contiguous").copy_from(a)


def _output(shape, nhwc: bool, fill=None) -> Tensor:
    """A NaN-poisoned output inside canaries (or holding `fill`, logical NCHW order), in y's layout."""
    if fill is not None and nhwc:
        fill = np.ascontiguousarray(fill.transpose(0, 2, 3, 1))
    g = guarded(shape, fill=fill)
    return Tensor._view(g.ptr, tuple(shape), np.dtype(np.float32), g.device, g._owner,
                        layout="channels_last") if nhwc else g


def _setup(rng, layer, nhwc, fields):
    n, c, h, w, k, kh, kw, st, pad = layer
    conv = cuopjit.Convolution2DFloat(c, k, kh, kw, st, st, pad_h=pad, pad_w=pad)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal(conv.weight_shape).astype(np.float32)
    conv.set_weight(cuopjit.tensor(wt))
    jit = cuopjit.JITConvolution2DFloat(conv)
    jit.set_jit_config(make_config(**TF32, **fields))
    acc = _reference(x, wt, None, (st, st), (pad, pad), (1, 1), 1, False)
    return conv, jit, _tensor(x, nhwc), acc, conv.output_shape(x.shape)


@pytest.mark.parametrize("name, layer, nhwc, expr, fields", CASES, ids=[c[0] for c in CASES])
def test_staged_residual_matches_float64(rng, name, layer, nhwc, expr, fields):
    conv, jit, x, acc, shape = _setup(rng, layer, nhwc, fields)
    k = shape[1]
    scale = rng.standard_normal(k).astype(np.float32)
    shift = rng.standard_normal((k, 1, 1)).astype(np.float32)
    bound = {"scale": cuopjit.tensor(scale)} | ({"shift": cuopjit.tensor(shift)} if "shift" in expr else {})
    conv.set_epilogue(expr, **bound)
    for call in range(2):           # a second call with other residuals: nothing stale in the staged tile
        full = {nm: rng.standard_normal(shape).astype(np.float32) for nm in parse_epilogue(expr).operands
                if nm not in ("scale", "shift")}
        old = rng.standard_normal(shape).astype(np.float32)
        y = _output(shape, nhwc, old if "c" in parse_epilogue(expr).names else None)
        assert jit.forward(x, y, **{nm: _tensor(v, nhwc) for nm, v in full.items()}) is y
        check_guards(y)
        env = {"acc": acc, "scale": scale.reshape(-1, 1, 1).astype(np.float64), "shift": shift.astype(np.float64),
               "c": old.astype(np.float64), **{nm: v.astype(np.float64) for nm, v in full.items()}}
        kernel = jit.get_performance_profile().kernel_name
        err = rel_error(y.to_numpy(), evaluate(parse_epilogue(expr), env, np.float64))
        assert "_rt" in kernel and err <= TOL["tf32"], f"{name} call {call}: {kernel}: {err:.3g}"


@pytest.mark.parametrize("unaligned", ["residual", "y"])
def test_an_unaligned_residual_or_output_takes_global_memory(rng, unaligned):
    conv, jit, x, acc, shape = _setup(rng, (2, 32, 9, 12, 40, 3, 3, 1, 1), False, {})
    conv.set_epilogue(RESIDUAL.replace("shift", "0.25"), scale=cuopjit.tensor(np.full(40, 0.5, np.float32)))
    host = rng.standard_normal(shape).astype(np.float32)
    r = guarded(shape, np.float32, fill=host, pad=257 if unaligned == "residual" else None)  # 4 bytes past 16
    y = guarded(shape, pad=257 if unaligned == "y" else None)
    jit.forward(x, y, residual=r)
    check_guards(y)
    ref = np.maximum(0.5 * acc + 0.25 + host, 0)
    assert "_rt" in jit.get_performance_profile().kernel_name and rel_error(y.to_numpy(), ref) <= TOL["tf32"]


@pytest.fixture(scope="module", autouse=True)
def built_in_parallel():
    """Every case's kernels compiled at once, in threads (the tests then load them from the session's cache)."""
    specs = {}

    def P(shape, dtype, layout):
        t = placeholder(shape, dtype)
        return Tensor._view(t.ptr, t.shape, t.dtype, t.device, None, layout=layout)
    layout = {True: "channels_last", False: "contiguous"}
    for _, (n, c, h, w, k, kh, kw, st, pad), nhwc, expr, fields in CASES:
        conv = cuopjit.Convolution2DFloat(c, k, kh, kw, st, st, pad_h=pad, pad_w=pad)
        conv.set_weight(cuopjit.zeros(conv.weight_shape, np.float32))   # planning packs it: real memory
        out = conv.output_shape((n, c, h, w))
        conv.set_epilogue(expr)
        full = {nm: P(out, np.float32, layout[nhwc]) for nm in ("residual", "r1", "r2")}
        given = {"scale": placeholder((k,)), "shift": placeholder((k, 1, 1)), **full}
        plan_specs(specs, conv, {**TF32, **fields},
                   (P((n, c, h, w), np.float32, layout[nhwc]), P(out, np.float32, layout[nhwc])), given, expr)
    arch = of_device(driver.current_ordinal()).arch
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda spec: pipeline.build(spec, arch), specs))
