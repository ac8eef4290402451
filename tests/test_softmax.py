"""Softmax and its JIT wrappers: CPU builds of every kernel variant, config validation, GPU results."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit import kernels

from conftest import make_config, rel_error

DTYPES = [np.float32, np.float64]
TOL = {np.float32: 2e-6, np.float64: 1e-13}
SHAPES = [(1,), (7,), (33,), (1000, 33), (33, 1000), (4097, 7), (7, 4097), (3, 33, 7), (2, 1000, 5), (5, 1, 7),
          (1, 4097), (2, 7, 33, 5)]
LONG = [(3, 8192), (3, 20000), (2, 32768), (2, 65537), (2, 70000), (1, 300000)]
CONFIGS = [{}, {"block_size": 128}, {"block_size": 1024}, {"tile_size": 8}, {"tile_size": 64},
           {"enable_loop_unroll": False}, {"enable_memory_coalescing": False},
           {"enable_shared_memory_opt": False}]



def _op(dtype):
    return (cuopjit.SoftmaxFloat if dtype == np.float32 else cuopjit.SoftmaxDouble)()


def _ref(a: np.ndarray, axis: int) -> np.ndarray:
    a = a.astype(np.float64)
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# --- CPU: every config variant renders and compiles ------------------------------------------
@pytest.mark.parametrize("fields", CONFIGS[1:])
def test_config_specs_compile(fields):
    op = cuopjit.SoftmaxFloat()
    op._configure(make_config(**fields).snapshot(), None)
    for spec in op.specs()[:4]:
        assert kernels.build(spec, "sm_90", kernels.MEMORY_ONLY)[0][:4] == b"\x7fELF"


def test_config_changes_code():
    sources = set()
    for fields in CONFIGS:
        op = cuopjit.SoftmaxFloat()
        op._configure(make_config(**fields).snapshot(), None)
        sources.add(tuple(kernels.source(s) for s in op.specs()))
    assert len(sources) == len(CONFIGS)


@pytest.mark.parametrize("fields, message", [
    ({"tile_size": 128}, r"SoftmaxFloat does not take tile_size=128: choose one of 0, 8, 16, 32, 64"),
    ({"block_size": 32}, r"SoftmaxFloat does not take block_size=32"),
    ({"kernel_type": "tiled"}, r"SoftmaxFloat has no kernel_type='tiled': choose one of 'auto'"),
    ({"enable_tensor_core": True}, "SoftmaxFloat has no tensor-core kernel"),
    ({"enable_tma": True}, "SoftmaxFloat has no TMA kernel"),
])
def test_config_validation(fields, message):
    jit = cuopjit.JITSoftmaxFloat(cuopjit.SoftmaxFloat())
    with pytest.raises(ValueError, match=message):
        jit.set_jit_config(make_config(**fields))


def test_wrapper_type():
    with pytest.raises(TypeError, match="JITSoftmaxDouble wraps a SoftmaxDouble, got SoftmaxFloat"):
        cuopjit.JITSoftmaxDouble(cuopjit.SoftmaxFloat())


def test_row_plans_cover_lengths():
    """Every length gets a plan whose threads * vectors cover the row exactly once."""
    from cuopjit.ops.rows import plan_rows
    cfg = cuopjit.JITConfig().snapshot()
    for dtype in DTYPES:
        for length in (1, 7, 128, 1000, 1024, 4097, 8192, 32768, 65536, 10 ** 6):
            for vec in (1, 16 // np.dtype(dtype).itemsize):
                for cluster in (False, True):
                    p = plan_rows(np.dtype(dtype), cfg, length, vec, cluster)
                    lv = -(-length // vec)
                    cover = p.tpr * p.nv * (p.cl if p.kind == "rows" else p.chunks)
                    assert cover >= lv and p.cl <= 8 and p.threads <= 1024
                    assert p.kind == "split" or p.cl == 1 or cluster


def test_stream_plans():
    """Stream plans: the stash is a multiple of the block and fits in shared memory; the rest, re-read
    from L2, stays under its budget (else no plan: the cluster takes the row)."""
    from cuopjit.ops import rows
    for dtype in DTYPES:
        for length in (4100, 8192, 20000, 32768, 65536, 10 ** 6):
            vec = 16 // np.dtype(dtype).itemsize
            for threads, k, nv in ((256, 3, 4), (512, 2, 2), (1024, 1, 2)):
                p = rows.plan_stream(np.dtype(dtype), length // vec, vec, threads, k, nv)
                if p is None:
                    assert k * length * np.dtype(dtype).itemsize > rows.L2_PER_SM
                    continue
                assert p.kind == "stream" and p.stash % threads == 0 and p.stash <= length // vec
                assert k * (p.stash_bytes(dtype) + rows.SMEM_STATIC) <= rows.SMEM_PER_SM
                assert k * (length // vec - p.stash) * vec * np.dtype(dtype).itemsize <= rows.L2_PER_SM
    cfg = cuopjit.JITConfig().snapshot()
    table = ((32768, 1024, 1, 2, True),)
    plan = rows.plan_rows(np.dtype(np.float64), cfg, 32768, 2, True, stream=table)
    assert plan.kind == "stream" and plan.copy_async and plan.params()["ASYNC"] == 1
    assert rows.plan_rows(np.dtype(np.float64), cfg, 32768, 2, False, stream=table).kind != "stream"


# --- GPU ------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_every_axis(rng, dtype, shape):
    a = (rng.standard_normal(shape) * 3).astype(dtype)
    op = _op(dtype)
    x = cuopjit.tensor(a)
    for axis in list(range(len(shape))) + [-1]:
        y = cuopjit.empty(shape, dtype).fill(float("nan"))
        assert op.forward(x, y, axis=axis) is y
        err = rel_error(y.to_numpy(), _ref(a, axis))
        assert err < TOL[dtype], (axis, err)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", LONG)
def test_softmax_long_rows(rng, dtype, shape):
    """Single block, cluster and split-row kernels (aligned and not)."""
    a = rng.standard_normal(shape).astype(dtype)
    x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
    _op(dtype).forward(x, y)
    assert rel_error(y.to_numpy(), _ref(a, -1)) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis", [((33, 1000), -1), ((7, 4097), 0), ((2, 32768), -1), ((3, 1000, 5), 1)])
def test_softmax_extreme_inputs(rng, dtype, shape, axis):
    a = (np.sign(rng.standard_normal(shape)) * 1e4 + rng.standard_normal(shape)).astype(dtype)
    x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
    _op(dtype).forward(x, y, axis=axis)
    out = y.to_numpy()
    assert np.all(np.isfinite(out))
    assert rel_error(out, _ref(a, axis)) < 1e-5
    c = np.full(shape, 3.5, dtype)
    _op(dtype).forward(cuopjit.tensor(c), y, axis=axis)
    assert np.allclose(y.to_numpy(), 1.0 / shape[axis], rtol=1e-6)


STREAM_SHAPES = [(140, 8192), (133, 20000), (133, 32768), (140, 4100), (133, 5001)]


@pytest.mark.gpu
@pytest.mark.parametrize("stash", ["registers", "async", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", STREAM_SHAPES)
def test_softmax_stream(rng, monkeypatch, dtype, shape, stash):
    """The stream kernel (at least a row per SM), with the row's head copied to shared memory through
    registers or by cp.async, or all of it re-read from L2; normal and extreme (+-1e4) inputs."""
    from cuopjit.ops import rows, softmax
    if not rows.cluster_available() or shape[0] < rows.sm_count():
        pytest.skip("stream kernels run on sm_90 with a row per SM")
    monkeypatch.setattr(softmax, "plan_rows", lambda dt, cfg, length, vec, ok, **kw: rows.plan_stream(
        dt, -(-length // vec), vec, 512, 2, 2, stash=stash != "none", l2_per_sm=1 << 40, copy_async=stash == "async"))
    op = _op(dtype)
    for a in (rng.standard_normal(shape) * 3, np.sign(rng.standard_normal(shape)) * 1e4 + rng.standard_normal(shape)):
        a = a.astype(dtype)
        x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
        op.forward(x, y)
        assert op.last_kernel.spec.kernel == "softmax_stream"
        out = y.to_numpy()
        assert rel_error(out, _ref(a, -1)) < (TOL[dtype] if abs(a).max() < 100 else 1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_in_place_and_unaligned(rng, dtype):
    a = rng.standard_normal((17, 1024)).astype(dtype)
    x = cuopjit.tensor(a)
    _op(dtype).forward(x, x)
    assert rel_error(x.to_numpy(), _ref(a, -1)) < TOL[dtype]
    big = cuopjit.tensor(rng.standard_normal(1 + 16 * 1024).astype(dtype))
    view = cuopjit.Tensor._view(big.ptr + big.dtype.itemsize, (16, 1024), big.dtype, big.device, big)
    ref = _ref(view.to_numpy(), -1)
    out = cuopjit.empty((16, 1024), dtype).fill(float("nan"))
    _op(dtype).forward(view, out)  # x is 4/8-byte aligned only: scalar path
    assert rel_error(out.to_numpy(), ref) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("fields", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_jit_softmax_configs(rng, fields, dtype):
    jit = (cuopjit.JITSoftmaxFloat if dtype == np.float32 else cuopjit.JITSoftmaxDouble)(_op(dtype))
    jit.set_jit_config(make_config(**fields))
    for shape, axis in (((33, 1000), -1), ((2, 40000), -1), ((4, 100, 33), 1), ((4097, 128), -1)):
        a = rng.standard_normal(shape).astype(dtype)
        x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
        jit.forward(x, y, axis=axis)
        assert rel_error(y.to_numpy(), _ref(a, axis)) < TOL[dtype], (shape, fields)
    assert jit.get_performance_profile().bandwidth_gbps > 0


@pytest.mark.gpu
def test_softmax_errors():
    op = cuopjit.SoftmaxFloat()
    x = cuopjit.zeros([4, 5])
    with pytest.raises(ValueError, match=r"SoftmaxFloat: y has shape \[5, 4\], expected x's shape \[4, 5\]"):
        op.forward(x, cuopjit.zeros([5, 4]))
    with pytest.raises(TypeError, match="SoftmaxFloat: y is float64, SoftmaxFloat works on float32"):
        op.forward(x, cuopjit.zeros([4, 5], "float64"))
    with pytest.raises(ValueError, match=r"axis=2 is out of range for x of shape \[4, 5\] \(allowed -2..1\)"):
        op.forward(x, cuopjit.zeros([4, 5]), axis=2)
    with pytest.raises(TypeError, match="x must be a cuopjit Tensor"):
        op.forward(np.zeros((4, 5), np.float32), x)
    empty = cuopjit.empty([0, 5])
    assert op.forward(empty, cuopjit.empty([0, 5])).shape == (0, 5)
