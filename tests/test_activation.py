"""ReLU and its JIT wrapper: CPU build of every kernel variant, config validation, GPU results."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit import kernels
from cuopjit.ops import FAMILIES

from conftest import make_config

DTYPES = [np.float32, np.float64]
SHAPES = [(1,), (7,), (33, 7), (1000,), (4097,), (3, 1000, 7), (1 << 20) + 1]
CONFIGS = [{}, {"block_size": 128}, {"block_size": 1024, "tile_size": 32}, {"tile_size": 16},
           {"enable_loop_unroll": False}, {"enable_memory_coalescing": False}, {"kernel_type": "simple"}]



@pytest.mark.parametrize("fields", CONFIGS)
@pytest.mark.parametrize("index", [0, 1])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_specs_compile(fields, index, arch):
    op = FAMILIES["relu"][index]()
    op._configure(make_config(**fields).snapshot(), None)
    for spec in op.specs():
        cubin, _ = kernels.build(spec, arch, kernels.MEMORY_ONLY)
        assert cubin[:4] == b"\x7fELF"


def test_config_changes_code():
    names = set()
    for fields in CONFIGS:
        op = cuopjit.ReluFloat()
        op._configure(make_config(**fields).snapshot(), None)
        names.add(kernels.source(op.specs()[0]))
    assert len(names) == len(CONFIGS)


@pytest.mark.parametrize("fields, message", [
    ({"tile_size": 64}, r"ReluFloat does not take tile_size=64: choose one of 0, 8, 16, 32"),
    ({"block_size": 32}, r"ReluFloat does not take block_size=32"),
    ({"kernel_type": "warp_optimized"}, r"ReluFloat has no kernel_type='warp_optimized': choose one of 'auto', "
                                        r"'tiled', 'simple'"),
    ({"enable_tensor_core": True}, "ReluFloat has no tensor-core kernel: set enable_tensor_core=False"),
    ({"enable_tma": True}, "ReluFloat has no TMA kernel: set enable_tma=False"),
])
def test_config_validation(fields, message):
    jit = cuopjit.JITReluFloat(cuopjit.ReluFloat())
    with pytest.raises(ValueError, match=message):
        jit.set_jit_config(make_config(**fields))


def test_wrapper_type():
    with pytest.raises(TypeError, match="JITReluDouble wraps a ReluDouble, got ReluFloat"):
        cuopjit.JITReluDouble(cuopjit.ReluFloat())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_relu(rng, dtype, shape):
    a = rng.standard_normal(shape).astype(dtype)
    op = (cuopjit.ReluFloat if dtype == np.float32 else cuopjit.ReluDouble)()
    x, y = cuopjit.tensor(a), cuopjit.empty(a.shape, dtype).fill(float("nan"))
    assert op.forward(x, y) is y
    assert np.array_equal(y.to_numpy(), np.maximum(a, 0))
    op.forward(x, x)  # in place
    assert np.array_equal(x.to_numpy(), np.maximum(a, 0))


@pytest.mark.gpu
@pytest.mark.parametrize("fields", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_jit_relu_configs(rng, fields, dtype):
    n = 4097 * 33
    a = rng.standard_normal(n).astype(dtype)
    a[::97] = np.nan
    wrapper = cuopjit.JITReluFloat if dtype == np.float32 else cuopjit.JITReluDouble
    op = (cuopjit.ReluFloat if dtype == np.float32 else cuopjit.ReluDouble)()
    jit = wrapper(op)
    jit.set_jit_config(make_config(**fields))
    jit.enable_persistent_cache(False)
    x, y = cuopjit.tensor(a), cuopjit.empty([n], dtype).fill(float("nan"))
    jit.forward(x, y)
    ref = np.where(a < 0, 0, a)
    np.testing.assert_array_equal(y.to_numpy(), ref)  # NaN stays NaN
    p = jit.get_performance_profile()
    assert p.calls == 1 and p.execution_time > 0 and p.kernel_name.startswith("relu_")


@pytest.mark.gpu
def test_relu_errors():
    with pytest.raises(ValueError, match=r"ReluFloat: y has shape \[3, 4\] but x has shape \[4, 3\]"):
        cuopjit.ReluFloat().forward(cuopjit.empty([4, 3]), cuopjit.empty([3, 4]))
    with pytest.raises(TypeError, match="ReluDouble: x is float32"):
        cuopjit.ReluDouble().forward(cuopjit.empty([4]), cuopjit.empty([4], "float64"))
    e = cuopjit.empty([0, 3])
    assert cuopjit.ReluFloat().forward(e, e) is e
