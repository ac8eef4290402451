"""channels_last (and transposed) through the memory-bound operators, no layout copies: BatchNorm (inference and
training), window and global pools, ReLU, elementwise programs with per-channel operands, Flatten. CPU: the layout
reaches each family's problem and plan, the NHWC kernels' index arithmetic emulated on odd sizes against float64
(tests/layout_models.py), layout errors; GPU: float64 references on the logical array, NaN-poisoned guarded outputs,
C = 3, 5, 33, H, W = 7, 13, batch 1; a property over shapes for BatchNorm NHWC."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import cuopjit
from cuopjit import layout
from cuopjit.ops.elementwise import expression

import layout_models as lm
from conftest import make_config, rel_error

CL, CONT, TR = layout.CHANNELS_LAST, layout.CONTIGUOUS, layout.TRANSPOSED
DTYPES = [np.float32, np.float64]
TOL = {np.float32: 5e-6, np.float64: 1e-12}
ODD = [(1, 3, 7, 13), (2, 5, 13, 7), (2, 33, 7, 7), (3, 64, 5, 3)]
WINDOWS = [dict(kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1), dict(kernel_h=2, kernel_w=2),
           dict(kernel_h=3, kernel_w=3, stride_h=1, stride_w=1, pad_h=1, pad_w=1)]


def cls(name: str, dtype):
    return getattr(cuopjit, name + ("Float" if dtype == np.float32 else "Double"))


def bn_ref(x, mean, var, g, b, eps=1e-5):
    s = (1, -1, 1, 1)
    return (x - mean.reshape(s)) / np.sqrt(var.reshape(s) + eps) * g.reshape(s) + b.reshape(s)


def pool_ref(x, op, kernel_h, kernel_w, stride_h=None, stride_w=None, pad_h=0, pad_w=0):
    sh, sw = stride_h or kernel_h, stride_w or kernel_w
    n, c, h, w = x.shape
    fill = -np.inf if op == "max" else 0.0
    p = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad_h, pad_h), (pad_w, pad_w)), constant_values=fill)
    oh, ow = (h + 2 * pad_h - kernel_h) // sh + 1, (w + 2 * pad_w - kernel_w) // sw + 1
    win = np.stack([p[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw] for i in range(kernel_h) for j in range(kernel_w)])
    return win.max(0) if op == "max" else win.sum(0) / (kernel_h * kernel_w)


def bn_op(dtype, c, rng, training=False, fake=True):
    """A BatchNorm with every parameter set (fake tensors for emulation, else real) and their float64 values."""
    bn = cls("BatchNorm", dtype)().train(training)
    vals = {"gamma": rng.standard_normal(c), "beta": rng.standard_normal(c), "running_mean": rng.standard_normal(c),
            "running_var": rng.random(c) + 0.5}
    for k, v in vals.items():
        v = v.astype(dtype).astype(np.float64)
        vals[k] = v
        getattr(bn, "set_" + k)(lm.fake((c,), dtype, data=v) if fake else cuopjit.tensor(v.astype(dtype)))
    return bn, vals


# --- CPU: the layout reaches the problem; the NHWC kernels emulated ----------------------------------------------
def test_the_layout_is_part_of_each_familys_problem_and_plan(rng):
    bn, _ = bn_op(np.float32, 64, rng)
    pools = [(cls("MaxPool2D", np.float32)(3, 3, 2, 2, 1, 1), (2, 64, 28, 28)), (cls("GlobalAveragePool2D", np.float32)(),
                                                                                (2, 64))]
    for op, yshape in [(bn, (2, 64, 56, 56))] + pools:
        planned = {}
        for lay in (CONT, CL):
            x, y = lm.fake((2, 64, 56, 56), lay=lay), lm.fake(yshape, lay=lay if len(yshape) == 4 else CONT)
            problem = op.problem(x, y)
            assert problem.layout == lay
            planned[lay] = [kl.spec.name for kl in op.plan(x, y, target=lm.SM90).launches]
        assert planned[CONT] != planned[CL] and all("nhwc" in k for k in planned[CL][:1]), planned


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ODD)
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("fields", [{}, {"kernel_type": "simple"}, {"block_size": 32, "tile_size": 8}], ids=str)
def test_batchnorm_nhwc_emulated(rng, dtype, shape, training, fields):
    c = shape[1]
    bn, v = bn_op(dtype, c, rng, training)
    a = rng.standard_normal(shape) * 2 + 0.5
    x, y = lm.fake(shape, dtype, CL, a), lm.fake(shape, dtype, CL)
    writes = lm.emulate(bn, x, y, config=make_config(**fields).snapshot())
    assert np.all(writes[y.ptr] == 1)
    if not training:
        assert rel_error(lm.value(y), bn_ref(a, v["running_mean"], v["running_var"], v["gamma"], v["beta"])) < 1e-12
        return
    mean, var, n = a.mean((0, 2, 3)), a.var((0, 2, 3)), a.size // c
    assert rel_error(lm.value(y), bn_ref(a, mean, var, v["gamma"], v["beta"])) < 1e-12
    assert rel_error(lm.value(bn.running_mean), 0.9 * v["running_mean"] + 0.1 * mean) < 1e-12
    assert rel_error(lm.value(bn.running_var), 0.9 * v["running_var"] + 0.1 * var * n / (n - 1)) < 1e-12


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ODD + [(1, 8, 13, 13)])
@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: f"k{w['kernel_h']}s{w.get('stride_h', 2)}")
@pytest.mark.parametrize("op", ["max", "avg"])
def test_window_pool_nhwc_emulated(rng, dtype, shape, window, op):
    pool = cls("MaxPool2D" if op == "max" else "AveragePool2D", dtype)(**window)
    a = rng.standard_normal(shape)
    x = lm.fake(shape, dtype, CL, a)
    y = lm.fake(pool.output_shape(shape), dtype, CL)
    writes = lm.emulate(pool, x, y)
    assert np.all(writes[y.ptr] == 1)
    assert rel_error(lm.value(y), pool_ref(a, op, **window)) < 1e-12


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ODD + [(3, 5, 1, 3), (1, 16, 56, 56)])
@pytest.mark.parametrize("op", ["max", "avg"])
def test_global_pool_nhwc_emulated(rng, dtype, shape, op):
    pool = cls("GlobalMaxPool2D" if op == "max" else "GlobalAveragePool2D", dtype)()
    a = rng.standard_normal(shape)
    x, y = lm.fake(shape, dtype, CL, a), lm.fake(shape[:2] + (1, 1), dtype, CL)
    writes = lm.emulate(pool, x, y)
    assert np.all(writes[y.ptr] == 1)
    ref = a.max((2, 3)) if op == "max" else a.mean((2, 3))
    assert rel_error(lm.value(y).reshape(shape[:2]), ref) < 1e-12


@settings(max_examples=40, deadline=None)
@given(shape=st.tuples(st.integers(1, 3), st.integers(2, 40), st.integers(1, 9), st.integers(1, 9)),
       double=st.booleans(), training=st.booleans(), seed=st.integers(0, 2 ** 31))
def test_batchnorm_nhwc_property_emulated(shape, double, training, seed):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if double else np.float32
    assume(shape[2] * shape[3] > 1)      # H == W == 1: the memory is contiguous, the NCHW kernels run
    bn, v = bn_op(dtype, shape[1], rng, training)
    a = rng.standard_normal(shape)
    x, y = lm.fake(shape, dtype, CL, a), lm.fake(shape, dtype, CL)
    lm.emulate(bn, x, y)
    mean, var = (a.mean((0, 2, 3)), a.var((0, 2, 3))) if training else (v["running_mean"], v["running_var"])
    assert rel_error(lm.value(y), bn_ref(a, mean, var, v["gamma"], v["beta"])) < 1e-12


# --- CPU: what each operator accepts, and its messages --------------------------------------------------------
def test_layout_mismatches_raise_naming_both_operands(rng):
    x, y = lm.fake((2, 3, 5, 7), lay=CL), lm.fake((2, 3, 5, 7))
    both = r"x is channels_last but y is contiguous: pass tensors of one layout \(convert with cuopjit.contiguous"
    bn, _ = bn_op(np.float32, 3, rng)
    for op, args in ((bn, (x, y)), (cuopjit.ReluFloat(), (x, y)), (cuopjit.MaxPool2DFloat(), (x, lm.fake((2, 3, 2, 3)))),
                     (cuopjit.ElementwiseFloat("y = x + 1"), ())):
        kwargs = {"x": x, "y": y} if not args else {}
        with pytest.raises(ValueError, match=rf"^{type(op).__name__}: {both}"):
            op.problem(*args, **kwargs)
    with pytest.raises(ValueError, match=r"^ReluFloat: x is transposed but y is contiguous"):
        cuopjit.ReluFloat().problem(lm.fake((4, 6), lay=TR), lm.fake((4, 6)))


def test_layouts_an_operator_does_not_read_raise():
    cl = lm.fake((2, 3, 4, 5), lay=CL)
    msg = r"^{0}: x is channels_last, {0} takes contiguous tensors here: pass x.contiguous\(\) \(torch\) or " \
          r"cuopjit.contiguous\(x\)$"
    ln = cuopjit.LayerNormFloat()
    ln.set_gamma(lm.fake((5,)))
    ln.set_beta(lm.fake((5,)))
    for op, args in ((cuopjit.SoftmaxFloat(), (cl, lm.fake((2, 3, 4, 5)))), (ln, (cl, lm.fake((2, 3, 4, 5)))),
                     (cuopjit.ViewFloat(), (cl, lm.fake((1, 3, 4, 5))))):
        with pytest.raises(ValueError, match=msg.format(type(op).__name__)):
            op.problem(*args)
    with pytest.raises(ValueError, match=r"^BatchNormFloat: x is transposed, BatchNormFloat takes contiguous or "
                                         r"channels_last tensors here"):
        cuopjit.BatchNormFloat().problem(lm.fake((4, 6), lay=TR), lm.fake((4, 6), lay=TR))


def test_layout_agnostic_maps_take_any_shared_layout():
    for lay, shape in ((CL, (2, 3, 5, 7)), (TR, (3, 4, 6))):
        x, y = lm.fake(shape, lay=lay), lm.fake(shape, lay=lay)
        assert cuopjit.ReluFloat().problem(x, y).n == x.size
        prob = cuopjit.ElementwiseFloat("y = relu(x) * 2").problem(x=x, y=y)
        assert prob.layout == lay and [i.kind for i in prob.inputs] == ["full"]
    # a channels_last output of C == 1 has the memory of a contiguous one: they mix
    assert cuopjit.ReluFloat().problem(lm.fake((2, 1, 5, 7), lay=CL), lm.fake((2, 1, 5, 7))) is not None


@pytest.mark.parametrize("scale", [(6, 1, 1), (1, 6, 1, 1)])
def test_per_channel_operands_over_channels_last_read_as_vectors(scale):
    op = cuopjit.ElementwiseFloat("out = relu(x * scale + shift)")
    prob = op.problem(x=lm.fake((2, 6, 5, 7), lay=CL), scale=lm.fake(scale), shift=lm.fake(scale),
                      out=lm.fake((2, 6, 5, 7), lay=CL))
    assert prob.layout == CL and [(i.kind, i.inner, i.extent) for i in prob.inputs[1:]] == [("run", 1, 6)] * 2
    nchw = op.problem(x=lm.fake((2, 6, 5, 7)), scale=lm.fake(scale), shift=lm.fake(scale), out=lm.fake((2, 6, 5, 7)))
    assert [(i.kind, i.inner) for i in nchw.inputs[1:]] == [("run", 35)] * 2


def test_flatten_of_channels_last_is_one_layout_copy():
    x, y = lm.fake((2, 3, 5, 7), lay=CL, data=np.arange(210.0).reshape(2, 3, 5, 7)), lm.fake((2, 105))
    plan = cuopjit.FlattenFloat().plan(x, y, target=lm.SM90)
    assert [kl.spec.kernel for kl in plan.launches] == ["transpose"]
    lm.emulate(cuopjit.FlattenFloat(), x, y)
    np.testing.assert_array_equal(lm.value(y), np.arange(210.0).reshape(2, 105))
    with pytest.raises(ValueError, match=r"^FlattenFloat: y is channels_last, FlattenFloat takes contiguous"):
        cuopjit.FlattenFloat().problem(x, lm.fake((2, 3, 5, 7), lay=CL), start_dim=1, end_dim=1)


@st.composite
def laid_case(draw):
    """An output shape and layout, and three inputs in any layout their rank allows (None: a Python number;
    the operators raise for a full-size input of another layout than the output's, broadcast.layouts reads it
    strided)."""
    out = tuple(draw(st.lists(st.integers(1, 5), min_size=2, max_size=4)))
    lays = [CONT, TR] + ([CL] if len(out) == 4 else [])
    out_lay = draw(st.sampled_from(lays))
    inputs = []
    for _ in range(3):
        if draw(st.integers(0, 3)) == 0:
            inputs.append((None, None))
            continue
        keep = draw(st.integers(0, len(out)))
        s = tuple(d if draw(st.booleans()) else 1 for d in out[len(out) - keep:])
        if np.prod(s) == np.prod(out):
            s = out
        lay = draw(st.sampled_from([CONT] + ([TR] if len(s) >= 2 else []) + ([CL] if len(s) == 4 else [])))
        inputs.append((s, lay))
    return out, out_lay, inputs


@settings(max_examples=300, deadline=None)
@given(laid_case(), st.integers(0, 2 ** 32 - 1))
def test_broadcast_in_memory_order_matches_numpy(case, seed):
    """What the kernel reads for output element i (the i-th in the output's memory), by each input's Layout over its
    own memory, equals NumPy broadcasting of the logical arrays."""
    out, out_lay, inputs = case
    rng = np.random.default_rng(seed)
    arrays = [None if s is None else rng.standard_normal(s) for s, _ in inputs]
    strides = [None if s is None else layout.strides(s, lay) for s, lay in inputs]
    prob = expression.make_problem("o = a + 2 * b - 3 * c", "float64", [s for s, _ in inputs], out, 1,
                                   strides=strides, layout=out_lay)
    n, dims = int(np.prod(out)), prob.dims
    i = np.arange(n)
    total = np.zeros(n)
    for w, lay, arr, (_, mem) in zip((1, 2, -3), prob.inputs, arrays, inputs):
        if arr is None:
            continue
        flat = layout.to_storage(arr, mem).ravel()
        if lay.kind == "uniform":
            got = np.full(n, flat[0])
        elif lay.kind == "full":
            got = flat
        elif lay.kind == "run":
            got = flat[i // lay.inner % lay.extent]
        else:
            got = flat[sum(i // int(np.prod(dims[d + 1:])) % dims[d] * lay.strides[d] for d in range(len(dims)))]
        total += w * got
    ref = sum(w * np.broadcast_to(a, out) for w, a in zip((1, 2, -3), arrays) if a is not None)
    np.testing.assert_allclose(total, layout.to_storage(np.broadcast_to(ref, out), out_lay).ravel(), atol=1e-12)
