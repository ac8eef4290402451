"""Layout conversions: cuopjit.contiguous / cuopjit.channels_last and the relayout family (a tiled transpose):
CPU plans and builds, the kernel's index arithmetic emulated on odd sizes (tests/layout_models.py), GPU round trips
exact against NumPy, guards, views where the memory already has the order, torch interop, a property over shapes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import cuopjit
from cuopjit import layout, target
from cuopjit.ops import layouts as relayout

import layout_models
from layout_models import fake, laid
from conftest import SEED_CONFIGS, build_once, check_guards, family_plans, make_config

SM80, SM90 = target.named("sm_80"), target.named("sm_90")
DTYPES = [np.float32, np.float64]
CL, CONT, TR = layout.CHANNELS_LAST, layout.CONTIGUOUS, layout.TRANSPOSED
SHAPES = [(2, 3, 7, 13), (1, 5, 13, 7), (3, 33, 7, 7), (2, 64, 9, 5), (1, 2, 1, 40)]


def emulate(x_logical: np.ndarray, src: str, dst: str, **fields) -> np.ndarray:
    """The relayout plan of src -> dst run on NumPy (layout_models): the logical array y holds."""
    x = fake(x_logical.shape, x_logical.dtype, src, x_logical)
    y = fake(x_logical.shape, x_logical.dtype, dst)
    op = relayout.RelayoutFloat() if x_logical.dtype == np.float32 else relayout.RelayoutDouble()
    writes = layout_models.emulate(op, x, y, config=make_config(**fields).snapshot())
    assert np.all(writes[y.ptr] == 1), f"{int(np.sum(writes[y.ptr] != 1))} elements not written exactly once"
    return layout_models.value(y)


# --- CPU ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("t, fields", [(SM90, f) for f in [{}, {"block_size": 32}, {"block_size": 1024},
                                                            {"enable_loop_unroll": False}] + SEED_CONFIGS]
                         + [(SM80, {})], ids=lambda v: v.arch if isinstance(v, target.Target) else str(v))
def test_every_config_plans_and_compiles(t, fields):
    build_once(family_plans(relayout.FAMILY, fields, t), t)


def test_tile_shapes_follow_the_narrow_side():
    assert relayout.tile_shape(256, 3136) == (32, 32)
    assert relayout.tile_shape(3, 50176) == (4, 256) and relayout.tile_shape(50176, 3) == (256, 4)
    assert relayout.tile_shape(33, 5) == (128, 8) and relayout.tile_shape(1, 1) == (1024, 1)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("src, dst", [(CONT, CL), (CL, CONT)])
@pytest.mark.parametrize("fields", [{}, {"block_size": 64}], ids=str)
def test_nchw_nhwc_copies_emulated(rng, shape, src, dst, fields):
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(emulate(x, src, dst, **fields), x)


@pytest.mark.parametrize("shape", [(7, 13), (3, 1, 33), (2, 5, 40, 3)])
@pytest.mark.parametrize("src, dst", [(TR, CONT), (CONT, TR)])
def test_transposed_copies_emulated(rng, shape, src, dst):
    x = rng.standard_normal(shape)
    np.testing.assert_array_equal(emulate(x, src, dst), x)


@settings(max_examples=60, deadline=None)
@given(shape=st.tuples(st.integers(1, 4), st.integers(1, 70), st.integers(1, 9), st.integers(1, 40)),
       pair=st.sampled_from([(CONT, CL), (CL, CONT), (TR, CONT), (CONT, TR)]), double=st.booleans())
def test_every_conversion_moves_each_element_once(shape, pair, double):
    x = np.arange(np.prod(shape), dtype=np.float64 if double else np.float32).reshape(shape)
    np.testing.assert_array_equal(emulate(x, *pair), x)


def test_relayout_refuses_pairs_it_does_not_convert():
    op = relayout.RelayoutFloat()
    with pytest.raises(ValueError, match=r"^RelayoutFloat: x is channels_last and y is transposed: RelayoutFloat "
                                         r"converts contiguous <-> channels_last"):
        op.problem(fake((2, 3, 4, 5), lay=CL), fake((2, 3, 4, 5), lay=TR))
    assert op.problem(fake((2, 3)), fake((2, 3))) == relayout.RelayoutProblem("float32", 1, 1, 6)  # a copy
    with pytest.raises(ValueError, match=r"^RelayoutFloat: y has shape \[2, 3, 4, 4\], expected x's shape"):
        op.problem(fake((2, 3, 4, 5)), fake((2, 3, 4, 4), lay=CL))


def test_conversions_return_the_tensor_or_a_view_without_copying():
    t = fake((2, 3, 4, 5), lay=CL)
    assert cuopjit.channels_last(t) is t
    c = fake((2, 3, 4, 5))
    assert cuopjit.contiguous(c) is c
    one = fake((2, 1, 4, 5))            # C == 1: the memory of both layouts is the same
    v = cuopjit.channels_last(one)
    assert v.layout == CL and v.ptr == one.ptr and cuopjit.contiguous(v).ptr == one.ptr
    col = fake((6, 1), lay=TR)
    assert cuopjit.contiguous(col).ptr == col.ptr and cuopjit.contiguous(col).layout == CONT
    with pytest.raises(ValueError, match=r"^channels_last\(\): t has shape \[2, 3, 4\]; channels_last needs a 4-D"):
        cuopjit.channels_last(fake((2, 3, 4)))


# --- GPU ------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_contiguous_channels_last_round_trip(rng, dtype, shape):
    x = rng.standard_normal(shape).astype(dtype)
    t = cuopjit.tensor(x)
    cl = cuopjit.channels_last(t)
    assert cl.layout == CL and cl.shape == shape and cl is not t
    np.testing.assert_array_equal(cl.to_numpy(), x)
    back = cuopjit.contiguous(cl)
    assert back.layout == CONT
    np.testing.assert_array_equal(back.to_numpy(), x)
    op = relayout.RelayoutFloat() if dtype == np.float32 else relayout.RelayoutDouble()
    for src, dst in ((t, laid(shape, dtype, CL)), (cl, laid(shape, dtype, CONT))):
        op.forward(src, dst)
        check_guards(dst)
        np.testing.assert_array_equal(dst.to_numpy(), x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 13), (3, 33, 5), (2, 1, 64, 3), (1, 3, 7, 13)])
def test_contiguous_of_a_transposed_view(rng, dtype, shape):
    x = rng.standard_normal(shape).astype(dtype)
    t = cuopjit.tensor(np.ascontiguousarray(np.swapaxes(x, -1, -2))).mT   # logical x, transposed memory
    assert t.layout == TR
    c = cuopjit.contiguous(t)
    assert c.layout == CONT
    np.testing.assert_array_equal(c.to_numpy(), x)
    if len(shape) == 4:
        cl = cuopjit.channels_last(t)       # through contiguous
        assert cl.layout == CL
        np.testing.assert_array_equal(cl.to_numpy(), x)


@pytest.mark.gpu
def test_torch_channels_last_converts_and_goes_back(rng):
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 5, 7, 13, device="cuda")
    cl = cuopjit.channels_last(x)
    assert cl.layout == CL
    back = torch.from_dlpack(cl)
    assert back.is_contiguous(memory_format=torch.channels_last) and torch.equal(back, x)
    y = x.to(memory_format=torch.channels_last)
    c = cuopjit.contiguous(y)
    assert torch.equal(torch.from_dlpack(c), x) and torch.from_dlpack(c).is_contiguous()


@pytest.mark.gpu
@settings(max_examples=12, deadline=None)
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 40), st.integers(1, 9), st.integers(1, 17)),
       double=st.booleans())
def test_conversions_are_exact_on_the_gpu(shape, double):
    dtype = np.float64 if double else np.float32
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    cl = cuopjit.channels_last(cuopjit.tensor(x))
    np.testing.assert_array_equal(cl.to_numpy(), x)
    np.testing.assert_array_equal(cuopjit.contiguous(cl).to_numpy(), x)
