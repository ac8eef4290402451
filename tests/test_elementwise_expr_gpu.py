"""ElementwiseFloat / ElementwiseDouble on the GPU against cuopjit.expr.evaluate_program in float64: NaN-poisoned
outputs in guard regions, odd sizes, unaligned operands, scalars per call, every broadcast pattern the kernel
specialises (full, per-channel NCHW and NHWC, row, uniform, strided, scalar), several outputs, in place,
the JIT configs, and a Hypothesis property over random shapes and broadcasts."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuopjit
from cuopjit.expr import evaluate_program, parse_program

from conftest import check_guards, guarded, make_config

pytestmark = pytest.mark.gpu
DTYPES = [np.float32, np.float64]
TOL = {np.float32: 1e-5, np.float64: 1e-12}   # an indexing error is O(1); rounding is far below
RESNET = "out = relu(x * scale + shift + r)"
# name -> shapes of x, scale, shift, r (a float: a Python number)
PATTERNS = {
    "full": dict(x=(5, 7, 33), scale=(5, 7, 33), shift=(5, 7, 33), r=(5, 7, 33)),
    "nchw": dict(x=(3, 6, 9, 11), scale=(6, 1, 1), shift=(6, 1, 1), r=(3, 6, 9, 11)),
    "nchw_vector_aligned": dict(x=(2, 16, 8, 8), scale=(16, 1, 1), shift=(16, 1, 1), r=(2, 16, 8, 8)),
    "nhwc": dict(x=(3, 9, 11, 8), scale=(8,), shift=(8,), r=(3, 9, 11, 8)),
    "nhwc_odd_channels": dict(x=(3, 5, 7, 6), scale=(6,), shift=(6,), r=(3, 5, 7, 6)),
    "row": dict(x=(33, 17), scale=(33, 1), shift=(33, 1), r=(33, 17)),
    "outer": dict(x=(5, 7, 33), scale=(7, 33), shift=(1, 7, 33), r=(5, 7, 33)),
    "scalar": dict(x=(1000, 37), scale=0.75, shift=-0.25, r=(1000, 37)),
    "uniform": dict(x=(4097,), scale=(1,), shift=(1, 1), r=(4097,)),
    "strided": dict(x=(5, 7, 33), scale=(5, 1, 33), shift=(1, 7, 1), r=(7, 1)),
    "large": dict(x=(8, 64, 56, 56), scale=(64, 1, 1), shift=(64, 1, 1), r=(8, 64, 56, 56)),
    "odd_large": dict(x=((1 << 20) + 3,), scale=(1,), shift=0.5, r=((1 << 20) + 3,)),
}


def inputs(shapes: dict, dtype, rng, unaligned=False):
    """(host arrays / numbers, device operands); tensors unaligned (in guards) when asked."""
    host, dev = {}, {}
    for name, shape in shapes.items():
        if isinstance(shape, float):
            host[name] = float(np.dtype(dtype).type(shape))
            dev[name] = shape
            continue
        host[name] = rng.standard_normal(shape).astype(dtype)
        dev[name] = guarded(shape, dtype, fill=host[name], pad=257) if unaligned else cuopjit.tensor(host[name])
    return host, dev


def reference(program: str, host: dict) -> dict:
    """Every output of `program` in float64 from the (rounded) inputs."""
    return evaluate_program(parse_program(program), {k: np.asarray(v, np.float64) for k, v in host.items()})


def check(out, want, dtype):
    got = out.to_numpy().astype(np.float64)
    check_guards(out)
    want = np.broadcast_to(want, got.shape)
    assert not np.isnan(got).any(), "an output element was never written"
    assert np.allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype]), f"max error {np.abs(got - want).max()}"


@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_broadcast_patterns(pattern, dtype, unaligned, rng):
    shapes = PATTERNS[pattern]
    host, dev = inputs(shapes, dtype, rng, unaligned)
    ref = reference(RESNET, host)["out"]
    out = guarded(ref.shape, dtype)
    op = (cuopjit.ElementwiseFloat if dtype == np.float32 else cuopjit.ElementwiseDouble)(RESNET)
    assert op.forward(**dev, out=out) is out
    check(out, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_several_outputs_and_the_language(dtype, rng):
    program = ("a = x * w + b; s = sigmoid(a); t = where(a > 0 and not (x < -1), a, 0.1 * a); "
               "u = gelu(a) - silu(x) * tanh(b) + clamp(a, -0.5, 0.5) + leaky_relu(x, 0.2) + max(a, b) / (1 + abs(x))"
               "; v = exp(min(a, 2)) + log(abs(b) + 1) + sqrt(abs(a)) * rsqrt(abs(x) + 1) + gelu_tanh(-a)")
    host, dev = inputs(dict(x=(4, 10, 7, 9), w=(10, 1, 1), b=-0.125), dtype, rng)
    ref = reference(program, host)
    outs = {k: guarded((4, 10, 7, 9), dtype) for k in "astuv"}
    op = (cuopjit.ElementwiseFloat if dtype == np.float32 else cuopjit.ElementwiseDouble)(program)
    got = op.forward(**dev, **outs)
    assert got == tuple(outs[k] for k in "astuv")
    for k in "astuv":
        check(outs[k], ref[k], dtype)


def test_numbers_change_per_call_without_a_new_plan(rng):
    host, dev = inputs(dict(x=(3, 8, 5, 5), c=(8, 1, 1)), np.float32, rng)
    op = cuopjit.ElementwiseFloat("out = leaky_relu(x * c + w, slope)")
    out = guarded((3, 8, 5, 5))
    for w, slope in ((0.5, 0.1), (-2, 0.3), (float("inf"), 0.0), (1e39, 1)):
        op.forward(**dev, w=w, slope=slope, out=out)
        f32 = {"w": float(np.float32(w)) if abs(w) < 1e39 else np.inf, "slope": float(np.float32(slope))}
        ref = reference("out = leaky_relu(x * c + w, slope)", {**host, **f32})["out"]
        got = out.to_numpy().astype(np.float64)
        assert np.allclose(got, ref, rtol=TOL[np.float32], atol=TOL[np.float32], equal_nan=True)
    assert len(op._default_plans) == 1


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_in_place(dtype, rng):
    host, dev = inputs(dict(x=(4099,), y=(4099,)), dtype, rng)
    op = (cuopjit.ElementwiseFloat if dtype == np.float32 else cuopjit.ElementwiseDouble)("out = x * 2 - y")
    op.forward(x=dev["x"], y=dev["y"], out=dev["x"])
    assert np.allclose(dev["x"].to_numpy(), 2 * host["x"].astype(np.float64) - host["y"], rtol=TOL[dtype])


CONFIGS = [{}, {"kernel_type": "simple"}, {"enable_loop_unroll": False}, {"enable_memory_coalescing": False},
           {"block_size": 1024, "tile_size": 128}, {"tile_size": 8, "block_size": 64}, {"tile_size": 128}]


@pytest.mark.parametrize("fields", CONFIGS, ids=str)
@pytest.mark.parametrize("pattern", ["nchw_vector_aligned", "nhwc", "strided", "odd_large"])
def test_jit_configs(fields, pattern, rng):
    host, dev = inputs(PATTERNS[pattern], np.float32, rng)
    ref = reference(RESNET, host)["out"]
    out = guarded(ref.shape)
    jit = cuopjit.JITElementwiseFloat(cuopjit.ElementwiseFloat(RESNET))
    jit.set_jit_config(make_config(**fields))
    jit.forward(**dev, out=out)
    check(out, ref, np.float32)
    assert jit.get_performance_profile().kernel_name.startswith("expr_f32_")


def test_fold_batchnorm_on_device_tensors(rng):
    c = 16
    gamma, beta, mean = (rng.standard_normal(c).astype(np.float32) for _ in range(3))
    var = rng.random(c).astype(np.float32) + 0.1
    scale, shift = cuopjit.fold_batchnorm(*(cuopjit.tensor(a) for a in (gamma, beta, mean, var)), 1e-5)
    assert isinstance(scale, cuopjit.Tensor) and scale.dtype == np.float32
    x = rng.standard_normal((2, c, 5, 5)).astype(np.float32)
    out = guarded(x.shape)
    cuopjit.ElementwiseFloat("out = x * s + b").forward(x=cuopjit.tensor(x), s=scale.reshape(c, 1, 1),
                                                        b=shift.reshape(c, 1, 1), out=out)
    g, b, m, v = (a.astype(np.float64)[:, None, None] for a in (gamma, beta, mean, var))
    check(out, (x - m) / np.sqrt(v + 1e-5) * g + b, np.float32)


@st.composite
def case(draw):
    out = tuple(draw(st.lists(st.integers(1, 40), min_size=1, max_size=4)))
    shapes = {}
    for name in ("a", "b", "c"):
        if draw(st.integers(0, 4)) == 0:
            shapes[name] = draw(st.floats(-4, 4, allow_nan=False))
            continue
        keep = draw(st.integers(1, len(out)))   # no 0-d inputs: cuopjit.tensor() cannot upload a 0-d array yet
        shapes[name] = tuple(d if draw(st.booleans()) else 1 for d in out[len(out) - keep:])
    if all(isinstance(s, float) for s in shapes.values()):
        shapes["a"] = out
    return out, shapes, draw(st.sampled_from(DTYPES)), draw(st.booleans())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case())
def test_property_random_shapes_and_broadcasts(rng, drawn):
    out_shape, shapes, dtype, unaligned = drawn
    program = "o = where(a > b, a * b - c, relu(c) + a); p = o / (1 + abs(b))"
    host, dev = inputs(shapes, dtype, rng, unaligned)
    ref = reference(program, host)
    outs = {"o": guarded(out_shape, dtype), "p": guarded(out_shape, dtype)}
    op = (cuopjit.ElementwiseFloat if dtype == np.float32 else cuopjit.ElementwiseDouble)(program)
    op.forward(**dev, **outs)
    for k in "op":
        check(outs[k], ref[k], dtype)
