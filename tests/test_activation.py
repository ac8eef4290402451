"""ReLU and its JIT wrapper: CPU build of every kernel variant, config validation, GPU results."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit import target

from conftest import SEED_CONFIGS, check_guards, guarded, make_config

DTYPES = [np.float32, np.float64]
SHAPES = [(1,), (7,), (33, 7), (1000,), (4097,), (3, 1000, 7), (1 << 20) + 1]
CONFIGS = [{}, {"block_size": 128}, {"block_size": 1024, "tile_size": 32}, {"tile_size": 16},
           {"enable_loop_unroll": False}, {"enable_memory_coalescing": False}, {"kernel_type": "simple"}]





def _specs(fields: dict, dtype: str = "float32") -> list:
    family = cuopjit.ReluFloat.family
    cfg = make_config(**fields).snapshot()
    return [s for p in family.problems() if p.dtype == dtype
            for s in family.default_plan(p, cfg, target.named("sm_90")).specs]


@pytest.mark.parametrize("fields", CONFIGS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_plans_compile(fields, dtype, arch):
    for spec in _specs(fields, dtype):
        cubin, _ = pipeline.build(spec, arch, persistent=False)
        assert cubin[:4] == b"\x7fELF"


def test_config_changes_code():
    sources = {tuple(pipeline.source(s) for s in _specs(fields)) for fields in CONFIGS}
    assert len(sources) == len(CONFIGS)


def test_every_seed_configuration_plans():
    for fields in SEED_CONFIGS:
        assert _specs(fields)


def test_a_tile_no_kernel_takes_says_what_to_choose():
    jit = cuopjit.JITReluFloat(cuopjit.ReluFloat())
    with pytest.raises(ValueError, match=r"tile_size=256 is not available for streaming kernels: choose one of "
                                         r"0, 8, 16, 32, 64, 128"):
        jit.set_jit_config(make_config(tile_size=256))


def test_wrapper_type():
    with pytest.raises(TypeError, match="JITReluDouble wraps a ReluDouble, got ReluFloat"):
        cuopjit.JITReluDouble(cuopjit.ReluFloat())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_relu(rng, dtype, shape):
    a = rng.standard_normal(shape).astype(dtype)
    op = (cuopjit.ReluFloat if dtype == np.float32 else cuopjit.ReluDouble)()
    x, y = cuopjit.tensor(a), guarded(a.shape, dtype)
    assert op.forward(x, y) is y
    check_guards(y)
    assert np.array_equal(y.to_numpy(), np.maximum(a, 0))
    op.forward(x, x)  # in place
    assert np.array_equal(x.to_numpy(), np.maximum(a, 0))


@pytest.mark.gpu
@pytest.mark.parametrize("fields", CONFIGS + SEED_CONFIGS)
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
    x, y = cuopjit.tensor(a), guarded([n], dtype)
    jit.forward(x, y)
    check_guards(y)
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
