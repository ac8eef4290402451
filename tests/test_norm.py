"""LayerNorm and BatchNorm with their JIT wrappers: CPU builds, config validation, GPU results."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cuopjit
from cuopjit import kernels
from cuopjit.ops import FAMILIES

from conftest import make_config, rel_error

DTYPES = [np.float32, np.float64]
TOL = {np.float32: 5e-6, np.float64: 1e-12}
CONFIGS = [{}, {"block_size": 128}, {"block_size": 1024}, {"tile_size": 8}, {"tile_size": 64},
           {"enable_loop_unroll": False}, {"enable_memory_coalescing": False},
           {"enable_shared_memory_opt": False}]



def _ln(dtype, **kw):
    return (cuopjit.LayerNormFloat if dtype == np.float32 else cuopjit.LayerNormDouble)(**kw)


def _bn(dtype, **kw):
    return (cuopjit.BatchNormFloat if dtype == np.float32 else cuopjit.BatchNormDouble)(**kw)


def _ln_ref(a, gamma, beta, eps, per_channel=False):
    a = a.astype(np.float64)
    if gamma is None:
        axes = (a.ndim - 1,)
    elif per_channel:
        axes = tuple(range(1, a.ndim))
    else:
        axes = tuple(range(a.ndim - gamma.ndim, a.ndim))
    mean = a.mean(axis=axes, keepdims=True)
    var = ((a - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (a - mean) / np.sqrt(var + eps)
    if gamma is not None:
        g = gamma.astype(np.float64)
        b = np.zeros_like(g) if beta is None else beta.astype(np.float64)
        if per_channel:
            g = g.reshape((-1,) + (1,) * (a.ndim - 2))
            b = b.reshape(g.shape)
        out = out * g + b
    return out


# --- CPU --------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["layernorm", "batchnorm"])
@pytest.mark.parametrize("fields", CONFIGS[1:])
def test_config_specs_compile(family, fields):
    op = FAMILIES[family][0]()
    op._configure(make_config(**fields).snapshot(), None)
    for spec in op.specs()[:3]:
        assert kernels.build(spec, "sm_90", kernels.MEMORY_ONLY)[0][:4] == b"\x7fELF"


@pytest.mark.parametrize("family", ["layernorm", "batchnorm"])
def test_config_changes_code(family):
    sources = set()
    for fields in CONFIGS:
        op = FAMILIES[family][0]()
        op._configure(make_config(**fields).snapshot(), None)
        sources.add(tuple(kernels.source(s) for s in op.specs()))
    assert len(sources) == len(CONFIGS)


@pytest.mark.parametrize("wrapper", ["JITLayerNormFloat", "JITBatchNormDouble"])
@pytest.mark.parametrize("fields, message", [
    ({"tile_size": 128}, r"does not take tile_size=128: choose one of 0, 8, 16, 32, 64"),
    ({"block_size": 32}, r"does not take block_size=32"),
    ({"kernel_type": "simple"}, r"has no kernel_type='simple': choose one of 'auto'"),
    ({"enable_tensor_core": True}, "has no tensor-core kernel"),
])
def test_config_validation(wrapper, fields, message):
    cls = getattr(cuopjit, wrapper)
    jit = cls(cls.operator_type())
    with pytest.raises(ValueError, match=cls.operator_type.__name__ + " " + message):
        jit.set_jit_config(make_config(**fields))


def test_defaults_and_modes():
    ln = cuopjit.LayerNormFloat()
    assert ln.eps == 1e-5
    assert cuopjit.LayerNormDouble(eps=1e-3).eps == 1e-3
    bn = cuopjit.BatchNormFloat()
    assert (bn.eps, bn.momentum, bn.training) == (1e-5, 0.1, False)
    assert bn.train().training is True and bn.eval().training is False
    with pytest.raises(ValueError, match=r"momentum=2.0 is not allowed: it must be in \[0, 1\]"):
        bn.momentum = 2.0
    with pytest.raises(ValueError, match=r"eps=-1.0 is not allowed"):
        ln.eps = -1.0


# --- GPU: LayerNorm ------------------------------------------------------------------------------
LN_CASES = [  # (x shape, gamma shape or None, per-channel)
    ((7, 1000), (1000,), False), ((4097, 33), (33,), False), ((1, 1), (1,), False), ((3, 5, 7), (5, 7), False),
    ((33, 4097), (4097,), False), ((1000, 7), (7,), False), ((2, 32768), (32768,), False),
    ((3, 100000), (100000,), False), ((2, 65537), (65537,), False), ((7, 1000), None, False),
    ((2, 3, 5, 7), (3,), True), ((4, 6, 33, 33), (6,), True), ((2, 64, 56, 56), (64,), True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, gshape, per_channel", LN_CASES)
def test_layernorm(rng, dtype, shape, gshape, per_channel):
    a = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    ln = _ln(dtype)
    gamma = beta = None
    if gshape is not None:
        gamma = rng.standard_normal(gshape).astype(dtype)
        beta = rng.standard_normal(gshape).astype(dtype)
        ln.set_gamma(cuopjit.tensor(gamma))
        ln.set_beta(cuopjit.tensor(beta))
    x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
    assert ln.forward(x, y) is y
    assert rel_error(y.to_numpy(), _ln_ref(a, gamma, beta, 1e-5, per_channel)) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("stash", ["registers", "async", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(140, 8192), (133, 20000), (133, 32768), (140, 4100), (133, 5001)])
def test_layernorm_stream(rng, monkeypatch, dtype, shape, stash):
    """The stream kernel (a row per SM at least), head stashed (through registers or cp.async) or all
    re-read from L2; random data, a large offset, and constant rows."""
    from cuopjit.ops import norm, rows
    if not rows.cluster_available() or shape[0] < rows.sm_count():
        pytest.skip("stream kernels run on sm_90 with a row per SM")
    monkeypatch.setattr(norm, "plan_rows", lambda dt, cfg, length, vec, ok, **kw: rows.plan_stream(
        dt, -(-length // vec), vec, 512, 2, 2, stash=stash != "none", l2_per_sm=1 << 40, copy_async=stash == "async"))
    ln = _ln(dtype)
    g = rng.standard_normal(shape[-1:]).astype(dtype)
    b = rng.standard_normal(shape[-1:]).astype(dtype)
    ln.set_gamma(cuopjit.tensor(g))
    ln.set_beta(cuopjit.tensor(b))
    for a, tol in ((rng.standard_normal(shape) * 2 + 0.5, TOL[dtype]),
                   (1e4 + rng.standard_normal(shape), 2e-3 if dtype == np.float32 else 1e-10)):
        a = a.astype(dtype)
        x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
        ln.forward(x, y)
        assert ln.last_kernel.spec.kernel == "layernorm_stream"
        assert rel_error(y.to_numpy(), _ln_ref(a, g, b, 1e-5)) < tol
    c = cuopjit.tensor(np.full(shape, 7.0, dtype))
    ln.set_beta(cuopjit.tensor(np.zeros(shape[-1:], dtype)))
    ln.forward(c, c)  # constant rows, in place: zeros
    assert np.array_equal(c.to_numpy(), np.zeros(shape, dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_offset_and_eps(rng, dtype):
    """Large mean, small spread: the variance must come from deviations, not E[x^2] - E[x]^2."""
    a = (1e4 + rng.standard_normal((33, 1024))).astype(dtype)
    ln = _ln(dtype, eps=1e-3)
    g = np.ones(1024, dtype)
    ln.set_gamma(cuopjit.tensor(g))
    x, y = cuopjit.tensor(a), cuopjit.empty(a.shape, dtype).fill(float("nan"))
    ln.forward(x, y)
    ref = _ln_ref(a, g, None, 1e-3)
    # float32 cannot hold a mean near 1e4 closer than ulp(1e4)/2 = 4.9e-4; E[x^2] - E[x]^2 would be off by ~ulp(1e8)
    tol = 2e-3 if dtype == np.float32 else 1e-10
    assert rel_error(y.to_numpy(), ref) < tol
    ln.eps = 10.0
    ln.forward(x, y)
    assert rel_error(y.to_numpy(), _ln_ref(a, g, None, 10.0)) < tol
    c = cuopjit.tensor(np.full((4, 1024), 7.0, dtype))
    ln.forward(c, c)  # constant rows, in place: all zeros, no NaN
    assert np.array_equal(c.to_numpy(), np.zeros((4, 1024), dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("fields", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_jit_layernorm_configs(rng, fields, dtype):
    ln = _ln(dtype)
    jit = (cuopjit.JITLayerNormFloat if dtype == np.float32 else cuopjit.JITLayerNormDouble)(ln)
    jit.set_jit_config(make_config(**fields))
    for shape in ((33, 1000), (3, 40000), (4097, 128)):
        a = rng.standard_normal(shape).astype(dtype)
        g = rng.standard_normal(shape[-1:]).astype(dtype)
        b = rng.standard_normal(shape[-1:]).astype(dtype)
        ln.set_gamma(cuopjit.tensor(g))
        ln.set_beta(cuopjit.tensor(b))
        x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
        jit.forward(x, y)
        assert rel_error(y.to_numpy(), _ln_ref(a, g, b, 1e-5)) < TOL[dtype], (shape, fields)


@pytest.mark.gpu
def test_layernorm_errors():
    ln = cuopjit.LayerNormFloat()
    ln.set_gamma(cuopjit.ones([5]))
    x = cuopjit.zeros([4, 6])
    with pytest.raises(ValueError, match=r"LayerNormFloat: gamma has shape \[5\] and x has shape \[4, 6\]"):
        ln.forward(x, cuopjit.zeros([4, 6]))
    ln.set_beta(cuopjit.zeros([6]))
    with pytest.raises(ValueError, match=r"LayerNormFloat: beta has shape \[6\] but gamma has shape \[5\]"):
        ln.forward(x, cuopjit.zeros([4, 6]))
    ln = cuopjit.LayerNormFloat()
    with pytest.raises(ValueError, match=r"LayerNormFloat: y has shape \[6, 4\], expected x's shape \[4, 6\]"):
        ln.forward(x, cuopjit.zeros([6, 4]))
    with pytest.raises(TypeError, match="LayerNormFloat: x is float64"):
        ln.forward(cuopjit.zeros([4, 6], "float64"), x)
    assert ln.forward(cuopjit.empty([0, 6]), cuopjit.empty([0, 6])).shape == (0, 6)


# --- GPU: BatchNorm -------------------------------------------------------------------------------
BN_SHAPES = [(2, 3, 5, 7), (4, 6, 33, 33), (32, 64), (7, 1000), (2, 3, 4097), (1, 1, 1, 1), (3, 7, 16, 16),
             (33, 1, 1, 7)]


def _bn_params(rng, c, dtype):
    return (rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype),
            rng.standard_normal(c).astype(dtype), (rng.random(c) + 0.5).astype(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", BN_SHAPES)
def test_batchnorm_inference(rng, dtype, shape):
    c = shape[1]
    a = rng.standard_normal(shape).astype(dtype)
    g, b, m, v = _bn_params(rng, c, dtype)
    bn = _bn(dtype)
    bn.set_gamma(cuopjit.tensor(g))
    bn.set_beta(cuopjit.tensor(b))
    bn.set_running_mean(cuopjit.tensor(m))
    bn.set_running_var(cuopjit.tensor(v))
    x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
    assert bn.forward(x, y) is y
    cs = (1, c) + (1,) * (len(shape) - 2)
    ref = (a.astype(np.float64) - m.reshape(cs)) / np.sqrt(v.reshape(cs).astype(np.float64) + 1e-5) \
        * g.reshape(cs) + b.reshape(cs)
    assert rel_error(y.to_numpy(), ref) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (8, 16, 33, 33), (64, 32), (2, 3, 4097)])
def test_batchnorm_training(rng, dtype, shape):
    """Batch statistics over N, H, W; running stats updated like torch.nn.BatchNorm2d (twice)."""
    c = shape[1]
    g, b, m, v = _bn_params(rng, c, dtype)
    bn = _bn(dtype, momentum=0.2).train()
    bn.set_gamma(cuopjit.tensor(g))
    bn.set_beta(cuopjit.tensor(b))
    rm, rv = cuopjit.tensor(m), cuopjit.tensor(v)
    bn.set_running_mean(rm)
    bn.set_running_var(rv)
    ref_m, ref_v = m.astype(np.float64), v.astype(np.float64)
    axes = (0,) + tuple(range(2, len(shape)))
    cs = (1, c) + (1,) * (len(shape) - 2)
    for _ in range(2):
        a = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
        x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
        bn.forward(x, y)
        a64 = a.astype(np.float64)
        mean, var = a64.mean(axis=axes), a64.var(axis=axes)
        n = a.size // c
        ref = (a64 - mean.reshape(cs)) / np.sqrt(var.reshape(cs) + 1e-5) * g.reshape(cs) + b.reshape(cs)
        assert rel_error(y.to_numpy(), ref) < TOL[dtype] * 4
        ref_m = 0.8 * ref_m + 0.2 * mean
        ref_v = 0.8 * ref_v + 0.2 * var * n / (n - 1)
        assert rel_error(rm.to_numpy(), ref_m) < TOL[dtype] * 4
        assert rel_error(rv.to_numpy(), ref_v) < TOL[dtype] * 4
    bn.eval()
    bn.forward(x, y)
    ref = (a64 - ref_m.reshape(cs)) / np.sqrt(ref_v.reshape(cs) + 1e-5) * g.reshape(cs) + b.reshape(cs)
    assert rel_error(y.to_numpy(), ref) < TOL[dtype] * 4


@pytest.mark.gpu
@pytest.mark.parametrize("fields", CONFIGS)
def test_jit_batchnorm_configs(rng, fields):
    bn = cuopjit.BatchNormFloat()
    jit = cuopjit.JITBatchNormFloat(bn)
    jit.set_jit_config(make_config(**fields))
    shape = (3, 5, 33, 32)
    a = rng.standard_normal(shape).astype(np.float32)
    x, y = cuopjit.tensor(a), cuopjit.empty(shape, np.float32).fill(float("nan"))
    jit.forward(x, y)  # defaults: gamma 1, beta 0, mean 0, var 1
    assert rel_error(y.to_numpy(), a / math.sqrt(1 + 1e-5)) < TOL[np.float32]


@pytest.mark.gpu
def test_batchnorm_errors():
    bn = cuopjit.BatchNormFloat()
    bn.set_gamma(cuopjit.ones([4]))
    x = cuopjit.zeros([2, 3, 5, 5])
    with pytest.raises(ValueError, match=r"BatchNormFloat: gamma has shape \[4\], expected \[3\] \(x has shape "
                                         r"\[2, 3, 5, 5\], C = 3\)"):
        bn.forward(x, cuopjit.zeros([2, 3, 5, 5]))
    with pytest.raises(ValueError, match=r"BatchNormFloat: gamma must be 1-D, got shape \[2, 2\]"):
        bn.set_gamma(cuopjit.ones([2, 2]))
    bn = cuopjit.BatchNormFloat()
    with pytest.raises(ValueError, match=r"BatchNormFloat: y has shape \[2, 3, 5\], expected x's shape"):
        bn.forward(x, cuopjit.zeros([2, 3, 5]))
    with pytest.raises(ValueError, match=r"BatchNormFloat: x must be N x C or N x C x H x W"):
        bn.forward(cuopjit.zeros([5]), cuopjit.zeros([5]))
    with pytest.raises(ValueError, match="training needs more than one value per channel"):
        bn.train().forward(cuopjit.zeros([1, 3]), cuopjit.zeros([1, 3]))
    assert bn.forward(cuopjit.empty([0, 3, 2, 2]), cuopjit.empty([0, 3, 2, 2])).shape == (0, 3, 2, 2)
