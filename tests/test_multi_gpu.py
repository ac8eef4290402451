"""Two GPUs: kernels load per device, tensors and launches stay on theirs, errors name both devices."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def two_gpus():
    if cuopjit.get_device_count() < 2:
        pytest.skip("needs two GPUs")
    yield
    cuopjit.set_device(0)


def test_gemm_on_each_device(rng):
    a_np = rng.standard_normal((257, 129)).astype(np.float32)
    b_np = rng.standard_normal((129, 65)).astype(np.float32)
    ref = a_np.astype(np.float64) @ b_np
    g = cuopjit.GemmFloat()
    for dev in (0, 1):
        cuopjit.set_device(dev)
        a, b, c = cuopjit.tensor(a_np), cuopjit.tensor(b_np), cuopjit.empty([257, 65])
        assert a.device == dev
        c.fill(float("nan"))
        g.set_weight(b)
        g.forward(a, c)
        out = c.to_numpy()
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5
    assert len({spec_dev for (*_, spec_dev, _) in g._launches}) == 2


def test_tensor_on_other_device_is_named():
    cuopjit.set_device(0)
    a0 = cuopjit.ones([8, 8])
    cuopjit.set_device(1)
    g = cuopjit.GemmFloat()
    with pytest.raises(ValueError, match="weight is on device 0 but the current device is 1"):
        g.set_weight(a0)


def test_torch_tensor_on_second_gpu_is_zero_copy():
    torch = pytest.importorskip("torch")
    x = torch.ones(4, 4, device="cuda:1")
    t = cuopjit.tensor(x)
    assert t.device == 1 and t.ptr == x.data_ptr()
    cuopjit.set_device(1)
    np.testing.assert_array_equal(t.to_numpy(), np.ones((4, 4), np.float32))
