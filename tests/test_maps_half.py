"""ReLU, BLAS-1 (Scal, Axpy, Copy, Dot), elementwise programs, Flatten, View and the layout copies in float16 and
bfloat16: read exactly into float32, computed in float32, rounded once on store; copies move the bits as stored.

CPU: what the plans ask of the kernels (16-byte vectors of 8, elem_t, float32 scalars and workspace), refused
dtypes. GPU: float64 references of the 16-bit inputs with the bounds of half_maps.py, NaN-poisoned guarded outputs,
odd sizes and unaligned pointers, NCHW and channels_last, inf / NaN / subnormals, float16 overflow on store."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cuopjit
from cuopjit import layout
from cuopjit.build import pipeline
from cuopjit.ops.blas1 import DOT, DotProblem
from cuopjit.ops.elementwise import expression, kernels
from cuopjit.ops.elementwise.kernels import MapProblem
from cuopjit.recipes import placeholder
from cuopjit.target import named

from conftest import check_guards, guarded, make_config
from half_maps import HALF, U32, assert_half, bits, gamma32, half_input, rounded, specials
from layout_models import laid

SM90 = named("sm_90")
CL = layout.CHANNELS_LAST
TAIL = "out = relu(x * scale + shift + r)"
CLS = {name: {"float16": getattr(cuopjit, f"{name}Half"), "bfloat16": getattr(cuopjit, f"{name}BFloat16")}
       for name in ("Relu", "Scal", "Axpy", "Copy", "Dot", "Elementwise", "Flatten", "View")}


# --- CPU ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", HALF)
def test_map_plans_move_16_byte_vectors_of_8_and_scale_in_float32(dtype):
    cfg = make_config().snapshot()
    for op in ("relu", "scal", "axpy", "copy"):
        (kl,) = kernels.family(op).default_plan(MapProblem(op, dtype, 1 << 20, True, 2.5), cfg, SM90).launches
        params = dict(kl.spec.params)
        assert (params["VEC"], params["scalar_t"], params["elem_t"]) == (8, "float", {"float16": "half_t",
                                                                                      "bfloat16": "bf16_t"}[dtype])
        assert kl.args[-1].kind == "f32" and kl.spec.name.startswith(f"{op}_{'f16' if dtype == 'float16' else 'bf16'}_")
    dot = DOT.default_plan(DotProblem(dtype, 1 << 20, True), cfg, SM90)
    assert dot.workspace == dot.launches[0].grid[0] * 4                       # float32 partial sums
    src = kernels.family("copy").default_plan(MapProblem("copy", dtype, 4097, False), cfg, SM90).launches[0].spec
    code = pipeline.source(src)
    assert "raw_t<VEC>" in code and "load_raw" in code                          # a copy moves bits, never converts


@pytest.mark.parametrize("dtype", HALF)
def test_the_resnet_tail_reads_per_channel_vectors_of_8(dtype):
    nchw = expression.problems_for(TAIL, dtype, expression.DEFAULT_SHAPES[0])[0]
    nhwc = expression.problems_for(TAIL, dtype, expression.DEFAULT_SHAPES[1])[0]
    cfg = make_config().snapshot()
    for problem, modes in ((nchw, ("full", "bcast", "bcast", "full")), (nhwc, ("full", "vec", "vec", "full"))):
        (kl,) = expression.family(TAIL).default_plan(problem, cfg, SM90).launches
        params = dict(kl.spec.params)
        assert params["modes"] == modes and params["VEC"] == 8 and kl.units == "FP32 cores"


def test_operands_of_another_dtype_are_refused():
    x16, xb = placeholder((64,), np.float16), placeholder((64,), "bfloat16")
    with pytest.raises(TypeError, match="^AxpyHalf: y is bfloat16, AxpyHalf works on float16$"):
        cuopjit.AxpyHalf().plan(x16, xb)
    with pytest.raises(TypeError, match="^ReluBFloat16: x is float16, ReluBFloat16 works on bfloat16$"):
        cuopjit.ReluBFloat16().plan(x16)
    with pytest.raises(TypeError, match="JITReluHalf wraps a ReluHalf, got ReluBFloat16"):
        cuopjit.JITReluHalf(cuopjit.ReluBFloat16())


# --- GPU: ReLU ---------------------------------------------------------------------------------------------------
SIZES = [1, 7, 8, 33, 4097, (1 << 20) + 3]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("fields", [None, {"kernel_type": "simple"}, {"enable_memory_coalescing": False},
                                    {"tile_size": 64, "block_size": 128}], ids=str)
def test_relu_is_exact_and_keeps_nan(rng, dtype, n, fields):
    a = half_input(rng, n, dtype)
    a[: min(n, 12)] = specials(dtype)[: min(n, 12)]
    x, y = cuopjit.tensor(a), guarded(n, dtype)
    op = CLS["Relu"][dtype]()
    if fields is not None:
        op = {"float16": cuopjit.JITReluHalf, "bfloat16": cuopjit.JITReluBFloat16}[dtype](op)
        op.set_jit_config(make_config(**fields))
    assert op.forward(x, y) is y
    check_guards(y)
    got, a32 = y.to_numpy().astype(np.float32), a.astype(np.float32)
    assert np.array_equal(got, np.where(a32 < 0, 0, a32), equal_nan=True)
    assert np.array_equal(np.signbit(got[a32 == 0]), np.signbit(a32[a32 == 0]))   # -0 stays -0 (x < 0 is false)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("lay", [layout.CONTIGUOUS, CL])
def test_relu_in_place_on_nchw_and_nhwc(rng, dtype, lay):
    a = half_input(rng, (3, 5, 7, 9), dtype)
    x = laid(a.shape, dtype, lay).copy_from(a)
    assert CLS["Relu"][dtype]().forward(x) is x
    check_guards(x)
    a32 = a.astype(np.float32)
    assert np.array_equal(x.to_numpy().astype(np.float32), np.where(a32 < 0, 0, a32))


# --- GPU: BLAS-1 -------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("misaligned", [False, True])
def test_blas1_match_float64(rng, dtype, n, misaligned):
    """scal: one float32 rounding, then the store's; axpy: 2 u32 (|alpha x| + |y|); copy: the bits; dot: the float32
    sum of n products within (n + 4) 2 u32 sum|x y|, rounded once."""
    pad = 1 if misaligned else None
    a, b = half_input(rng, n, dtype), half_input(rng, n, dtype)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    x = guarded(n, dtype, fill=a, pad=pad)
    CLS["Scal"][dtype](-2.5).forward(x)
    check_guards(x)
    assert_half(x.to_numpy(), *rounded(-2.5 * a64, U32 * np.abs(2.5 * a64), dtype), f"scal {n}")
    x, y = cuopjit.tensor(a), guarded(n, dtype, fill=b, pad=pad)
    CLS["Axpy"][dtype](0.75).forward(x, y)
    check_guards(y)
    ref = 0.75 * a64 + b64
    assert_half(y.to_numpy(), *rounded(ref, 2 * U32 * (np.abs(0.75 * a64) + np.abs(b64)), dtype), f"axpy {n}")
    z = guarded(n, dtype, pad=pad)
    CLS["Copy"][dtype]().forward(x, z)
    check_guards(z)
    assert np.array_equal(bits(z.to_numpy()), bits(a))
    got = CLS["Dot"][dtype]().forward(x, cuopjit.tensor(b))
    r = guarded(1, dtype)
    assert CLS["Dot"][dtype]().forward(x, cuopjit.tensor(b), r) is r
    check_guards(r)
    assert got == float(r.to_numpy()[0])
    ref, bound = rounded(a64 @ b64, (n + 4) * 2 * U32 * np.abs(a64 * b64).sum(), dtype)
    assert abs(got - ref) <= bound, (got, ref, bound)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_copy_keeps_every_bit_pattern(dtype):
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    for n, pad in ((every.size, None), (every.size - 5, 3)):    # vectors; an unaligned source: the scalar path
        src = guarded(n, dtype, fill=every[:n], pad=pad)
        dst = guarded(n, dtype)
        CLS["Copy"][dtype]().forward(src, dst)
        check_guards(dst)
        assert np.array_equal(bits(dst.to_numpy()), bits(every[:n]))


@pytest.mark.gpu
def test_float16_overflow_on_store_gives_inf():
    big = np.full(4099, 65504, np.float16)
    x = cuopjit.tensor(big)
    cuopjit.ScalHalf(2.0).forward(x)
    assert np.all(np.isposinf(x.to_numpy()))
    assert cuopjit.DotHalf().forward(cuopjit.tensor(np.full(1000, 16, np.float16)),
                                     cuopjit.tensor(np.full(1000, 16, np.float16))) == np.inf
    assert cuopjit.DotBFloat16().forward(cuopjit.tensor(np.full(1000, 16, "bfloat16")),
                                         cuopjit.tensor(np.full(1000, 16, "bfloat16"))) == 256000.0
    y = guarded(4099, np.float16)
    cuopjit.ElementwiseHalf("out = x * 1000").forward(x=cuopjit.tensor(big), out=y)
    check_guards(y)
    assert np.all(np.isposinf(y.to_numpy()))
    xb, yb = big.astype("bfloat16"), guarded(4099, "bfloat16")
    cuopjit.ElementwiseBFloat16("out = x * 1000").forward(x=cuopjit.tensor(xb), out=yb)
    ref = xb.astype(np.float64) * 1000
    assert_half(yb.to_numpy(), *rounded(ref, U32 * ref, "bfloat16"), "bfloat16 x * 1000 stays finite")


# --- GPU: elementwise programs -----------------------------------------------------------------------------------
TAIL_SHAPES = [(32, 64, 28, 28), (3, 5, 7, 9), (2, 16, 1, 1), (1, 8, 3, 5)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", TAIL_SHAPES)
@pytest.mark.parametrize("lay", [layout.CONTIGUOUS, CL])
def test_resnet_tail_over_nchw_and_nhwc(rng, dtype, shape, lay):
    """relu(x s + b + r): 3 float32 roundings of |x s| + |b| + |r| (relu exact), then the store's."""
    c = shape[1]
    a, r = half_input(rng, shape, dtype), half_input(rng, shape, dtype)
    s, b = half_input(rng, (c, 1, 1), dtype, 1.0), half_input(rng, (c, 1, 1), dtype, 1.0)
    x, res, out = laid(shape, dtype, lay).copy_from(a), laid(shape, dtype, lay).copy_from(r), laid(shape, dtype, lay)
    op = CLS["Elementwise"][dtype](TAIL)
    assert op.forward(x=x, scale=cuopjit.tensor(s), shift=cuopjit.tensor(b), r=res, out=out) is out
    check_guards(out)
    a64, r64, s64, b64 = (v.astype(np.float64) for v in (a, r, s, b))
    ref = np.maximum(a64 * s64 + b64 + r64, 0)
    assert_half(out.to_numpy(), *rounded(ref, gamma32(3) * (np.abs(a64 * s64) + np.abs(b64) + np.abs(r64)), dtype),
                f"tail {shape} {lay}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_programs_with_numbers_uniforms_and_strided_inputs(rng, dtype):
    """A Python number (a float32 parameter), a one-element tensor, an input varying along axes 0 and 2 (strided)
    and two outputs, the second reading the first."""
    a, z, w = half_input(rng, (4, 33, 17), dtype), half_input(rng, (4, 1, 17), dtype), half_input(rng, (1,), dtype, 1.0)
    op = CLS["Elementwise"][dtype]("p = x * k + w * z; q = -p")
    p, q = guarded((4, 33, 17), dtype), guarded((4, 33, 17), dtype)
    operands = dict(x=cuopjit.tensor(a), k=0.1, w=cuopjit.tensor(w), z=cuopjit.tensor(z), p=p, q=q)
    assert [lay.kind for lay in op.problem(**operands).inputs] == ["full", "scalar", "uniform", "strided"]
    op.forward(**operands)
    check_guards(p)
    check_guards(q)
    a64, w64, z64, k = a.astype(np.float64), w.astype(np.float64), z.astype(np.float64), float(np.float32(0.1))
    b32 = gamma32(3) * (np.abs(a64 * k) + np.abs(w64 * z64))
    assert_half(p.to_numpy(), *rounded(a64 * k + w64 * z64, b32, dtype), "p")
    assert np.array_equal(bits(q.to_numpy()), bits(-p.to_numpy()))


# --- GPU: Flatten, View, layout copies ---------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (4, 64, 14, 14), (1, 1, 1, 9)])
def test_flatten_view_and_relayouts_move_bits(rng, dtype, shape):
    a = half_input(rng, shape, dtype)
    a.reshape(-1)[: min(a.size, 12)] = specials(dtype)[: min(a.size, 12)]
    flat = (shape[0], math.prod(shape[1:]))
    for x in (cuopjit.tensor(a), laid(shape, dtype, CL).copy_from(a)):
        y = guarded(flat, dtype)
        assert CLS["Flatten"][dtype]().forward(x, y) is y
        check_guards(y)
        assert np.array_equal(bits(y.to_numpy()), bits(a.reshape(flat))), x.layout
    cl = cuopjit.channels_last(cuopjit.tensor(a))
    assert cl.layout == CL and np.array_equal(bits(cl.to_numpy()), bits(a))
    back = cuopjit.contiguous(cl)
    assert back.layout == layout.CONTIGUOUS and np.array_equal(bits(back.to_numpy()), bits(a))
    offset = [d // 2 for d in shape]
    sub = [d - o for d, o in zip(shape, offset)]
    v = guarded(sub, dtype)
    assert CLS["View"][dtype]().forward(cuopjit.tensor(a), v, offset, sub) is v
    check_guards(v)
    assert np.array_equal(bits(v.to_numpy()), bits(a[tuple(slice(o, None) for o in offset)]))
