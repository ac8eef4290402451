"""channels_last through BatchNorm, the pools, ReLU, elementwise programs and Flatten on the GPU: float64 references on
the logical array, NaN-poisoned outputs in guard regions, odd C / H / W and batch 1, channels_last in and out with no
copy (torch's channels_last arrays too), and a property over shapes for BatchNorm NHWC (training and inference)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import cuopjit
from cuopjit import layout

from layout_models import laid
from conftest import check_guards, rel_error
from test_layouts_maps import ODD, TOL, WINDOWS, bn_op, bn_ref, cls, pool_ref

pytestmark = pytest.mark.gpu
CL, TR = layout.CHANNELS_LAST, layout.TRANSPOSED
DTYPES = [np.float32, np.float64]


def cl_tensor(a: np.ndarray):
    """A channels_last Tensor holding the logical array a."""
    return cuopjit.empty(a.shape, a.dtype, layout=CL).copy_from(a)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ODD + [(4, 256, 14, 14)])
def test_batchnorm_nhwc_inference_and_training(rng, dtype, shape):
    c = shape[1]
    bn, v = bn_op(dtype, c, rng, fake=False)
    a = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    x, y = cl_tensor(a), laid(shape, dtype, CL)
    assert bn.forward(x, y) is y
    check_guards(y)
    assert rel_error(y.to_numpy(), bn_ref(a.astype(np.float64), v["running_mean"], v["running_var"], v["gamma"],
                                          v["beta"])) < TOL[dtype]
    bn.train()
    y2 = laid(shape, dtype, CL)
    bn.forward(x, y2)
    check_guards(y2)
    a64 = a.astype(np.float64)
    mean, var, n = a64.mean((0, 2, 3)), a64.var((0, 2, 3)), a.size // c
    assert rel_error(y2.to_numpy(), bn_ref(a64, mean, var, v["gamma"], v["beta"])) < 4 * TOL[dtype]
    assert rel_error(bn.running_mean.to_numpy(), 0.9 * v["running_mean"] + 0.1 * mean) < 4 * TOL[dtype]
    assert rel_error(bn.running_var.to_numpy(), 0.9 * v["running_var"] + 0.1 * var * n / (n - 1)) < 4 * TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ODD + [(1, 8, 13, 13)])
@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: f"k{w['kernel_h']}s{w.get('stride_h', 2)}")
@pytest.mark.parametrize("op", ["max", "avg"])
def test_window_pools_nhwc(rng, dtype, shape, window, op):
    pool = cls("MaxPool2D" if op == "max" else "AveragePool2D", dtype)(**window)
    a = rng.standard_normal(shape).astype(dtype)
    y = laid(pool.output_shape(shape), dtype, CL)
    pool.forward(cl_tensor(a), y)
    check_guards(y)
    assert rel_error(y.to_numpy(), pool_ref(a, op, **window)) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ODD + [(3, 5, 1, 3), (2, 64, 56, 56), (2, 2048, 7, 7)])
@pytest.mark.parametrize("op", ["max", "avg"])
def test_global_pools_nhwc(rng, dtype, shape, op):
    pool = cls("GlobalMaxPool2D" if op == "max" else "GlobalAveragePool2D", dtype)()
    a = rng.standard_normal(shape).astype(dtype)
    for yshape in (shape[:2], shape[:2] + (1, 1)):
        y = laid(yshape, dtype, CL if len(yshape) == 4 else layout.CONTIGUOUS)
        pool.forward(cl_tensor(a), y)
        check_guards(y)
        ref = a.astype(np.float64).max((2, 3)) if op == "max" else a.astype(np.float64).mean((2, 3))
        assert rel_error(y.to_numpy().reshape(shape[:2]), ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lay, shape", [(CL, (1, 3, 7, 13)), (CL, (2, 33, 13, 7)), (TR, (5, 7, 13)), (TR, (33, 4097))])
def test_relu_keeps_any_shared_layout(rng, dtype, lay, shape):
    a = rng.standard_normal(shape).astype(dtype)
    x = cuopjit.empty(shape, dtype, layout=lay).copy_from(a)
    y = laid(shape, dtype, lay)
    cls("Relu", dtype)().forward(x, y)
    check_guards(y)
    np.testing.assert_array_equal(y.to_numpy(), np.maximum(a, 0))
    cls("Relu", dtype)().forward(x)                  # in place
    np.testing.assert_array_equal(x.to_numpy(), np.maximum(a, 0))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ODD)
@pytest.mark.parametrize("pc", [lambda c: (c, 1, 1), lambda c: (1, c, 1, 1)], ids=["C11", "1C11"])
def test_elementwise_per_channel_over_channels_last(rng, dtype, shape, pc):
    c = shape[1]
    op = cls("Elementwise", dtype)("out = relu(x * scale + shift + r)")
    a, r = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    s, t = (rng.standard_normal(pc(c)).astype(dtype) for _ in range(2))
    out = laid(shape, dtype, CL)
    op.forward(x=cl_tensor(a), scale=cuopjit.tensor(s), shift=cuopjit.tensor(t), r=cl_tensor(r), out=out)
    check_guards(out)
    ref = np.maximum(a.astype(np.float64) * s + t + r, 0)
    assert rel_error(out.to_numpy(), ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_flatten_reads_channels_last_in_logical_order(rng, dtype):
    a = rng.standard_normal((2, 5, 7, 13)).astype(dtype)
    y = laid((2, 5 * 7 * 13), dtype, layout.CONTIGUOUS)
    cls("Flatten", dtype)().forward(cl_tensor(a), y)
    check_guards(y)
    np.testing.assert_array_equal(y.to_numpy(), a.reshape(2, -1))


def test_torch_channels_last_tensors_go_through_without_copies(rng):
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 33, 13, 7, device="cuda").to(memory_format=torch.channels_last)
    y = torch.empty_like(x)
    bn = cuopjit.BatchNormFloat()
    assert bn.forward(x, y) is y and y.is_contiguous(memory_format=torch.channels_last)
    ref = torch.nn.functional.batch_norm(x, torch.zeros(33, device="cuda"), torch.ones(33, device="cuda"), eps=1e-5)
    assert torch.allclose(y, ref, atol=1e-5)
    pooled = torch.empty(2, 33, 7, 4, device="cuda").to(memory_format=torch.channels_last)
    cuopjit.MaxPool2DFloat(3, 3, 2, 2, 1, 1).forward(x, pooled)
    assert torch.equal(pooled, torch.nn.functional.max_pool2d(x, 3, 2, 1))


@settings(max_examples=15, deadline=None)
@given(shape=st.tuples(st.integers(1, 3), st.integers(2, 70), st.integers(1, 15), st.integers(1, 15)),
       double=st.booleans(), training=st.booleans(), seed=st.integers(0, 2 ** 31))
def test_batchnorm_nhwc_property(shape, double, training, seed):
    assume(shape[2] * shape[3] > 1)
    rng = np.random.default_rng(seed)
    dtype = np.float64 if double else np.float32
    bn, v = bn_op(dtype, shape[1], rng, training, fake=False)
    a = rng.standard_normal(shape).astype(dtype)
    y = laid(shape, dtype, CL)
    bn.forward(cl_tensor(a), y)
    check_guards(y)
    a64 = a.astype(np.float64)
    mean, var = (a64.mean((0, 2, 3)), a64.var((0, 2, 3))) if training else (v["running_mean"], v["running_var"])
    assert rel_error(y.to_numpy(), bn_ref(a64, mean, var, v["gamma"], v["beta"])) < 4 * TOL[dtype]
