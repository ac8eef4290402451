"""Tensor on the GPU: creation, copies, fills, views, zero-copy DLPack / CUDA Array Interface, memory."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit

pytestmark = pytest.mark.gpu
DTYPES = [np.float32, np.float64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (33, 4097), (2, 3, 5, 7)])
def test_round_trip(rng, dtype, shape):
    a = rng.standard_normal(shape).astype(dtype)
    t = cuopjit.tensor(a)
    assert isinstance(t, cuopjit.TensorDouble if dtype == np.float64 else cuopjit.TensorFloat)
    assert t.shape == shape and t.size == a.size and t.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(t.to_numpy(), a)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -2.5, 0.0])
def test_fill_writes_every_element(dtype, value):
    t = cuopjit.zeros([1000, 33], dtype=np.dtype(dtype).name)
    t.fill(value)
    np.testing.assert_array_equal(t.to_numpy(), np.full((1000, 33), value, dtype=dtype))
    t.zero()
    assert not t.to_numpy().any()


def test_creation_functions_match_numpy():
    np.testing.assert_array_equal(cuopjit.ones([3, 4]).to_numpy(), np.ones((3, 4), np.float32))
    np.testing.assert_array_equal(cuopjit.eye(5, dtype="float64").to_numpy(), np.eye(5))
    np.testing.assert_allclose(cuopjit.linspace(0, 1, 11).to_numpy(), np.linspace(0, 1, 11, dtype=np.float32))
    np.testing.assert_allclose(cuopjit.logspace(0, 3, 4, base=2.0).to_numpy(), [1, 2, 4, 8])
    gx, gy = cuopjit.meshgrid(np.arange(3.0), np.arange(2.0))
    ex, ey = np.meshgrid(np.arange(3.0), np.arange(2.0))
    np.testing.assert_array_equal(gx.to_numpy(), ex)
    np.testing.assert_array_equal(gy.to_numpy(), ey)
    r = cuopjit.random([200000], mean=3.0, std=2.0).to_numpy()
    assert abs(r.mean() - 3.0) < 0.05 and abs(r.std() - 2.0) < 0.05
    assert cuopjit.TensorFloat([2, 3]).shape == (2, 3)


def test_copy_from_and_reshape(rng):
    a = rng.standard_normal((6, 4)).astype(np.float32)
    src = cuopjit.tensor(a)
    dst = cuopjit.zeros([6, 4])
    dst.copy_from(src)
    np.testing.assert_array_equal(dst.to_numpy(), a)
    np.testing.assert_array_equal(dst.reshape(24).to_numpy(), a.ravel())
    with pytest.raises(ValueError, match=r"src has shape \[4, 6\], expected \[6, 4\]"):
        dst.copy_from(a.T.copy())
    with pytest.raises(ValueError, match=r"cannot reshape \[6, 4\] \(24 elements\) to \[5, 5\]"):
        dst.reshape(5, 5)


def test_unsupported_dtype_says_what_is_supported():
    with pytest.raises(TypeError, match="cuopjit tensors hold float32, float64, float16 or bfloat16$"):
        cuopjit.tensor(np.zeros(3, dtype=np.complex64))


def test_dlpack_round_trip_with_torch_is_zero_copy(rng):
    torch = pytest.importorskip("torch")
    x = torch.randn(33, 17, device="cuda")
    t = cuopjit.tensor(x)
    assert t.ptr == x.data_ptr() and t.shape == (33, 17)
    t.fill(3.0)
    torch.cuda.synchronize()
    assert bool((x == 3.0).all())
    y = torch.from_dlpack(t)
    assert y.data_ptr() == t.ptr and tuple(y.shape) == (33, 17) and y.dtype == torch.float32
    d = cuopjit.tensor(rng.standard_normal((5, 2)))
    np.testing.assert_array_equal(torch.from_dlpack(d).cpu().numpy(), d.to_numpy())
    x = torch.randn(8, 6, device="cuda")
    t = cuopjit.tensor(x.t())
    assert t.layout == "transposed" and t.shape == (6, 8) and t.ptr == x.data_ptr()
    np.testing.assert_array_equal(t.to_numpy(), x.t().cpu().numpy())
    with pytest.raises(ValueError, match=r"has strides \[6, 2\] \(shape \[8, 3\], in elements\) of no layout"):
        cuopjit.tensor(x[:, ::2])


def test_a_wrapped_torch_tensor_stays_alive_with_its_wrapper(rng):
    torch = pytest.importorskip("torch")
    a = rng.standard_normal((64, 65)).astype(np.float32)
    x = torch.from_numpy(a).cuda()
    t = cuopjit.tensor(x)
    del x
    torch.cuda.empty_cache()
    junk = torch.full((64, 65), float("nan"), device="cuda")   # would reuse the memory had it been freed
    np.testing.assert_array_equal(t.to_numpy(), a)
    assert bool(junk.isnan().all())
    with pytest.raises(TypeError, match=r"^tensor\(\): the array is int64: cuopjit tensors hold float32, float64, "
                                        r"float16 or bfloat16 \(convert with "):
        cuopjit.tensor(torch.zeros(3, dtype=torch.int64, device="cuda"))


def test_cuda_array_interface_with_cupy():
    cp = pytest.importorskip("cupy")
    t = cuopjit.tensor(np.arange(12, dtype=np.float64).reshape(3, 4))
    c = cp.asarray(t)
    assert c.data.ptr == t.ptr
    np.testing.assert_array_equal(cp.asnumpy(c), np.arange(12.0).reshape(3, 4))
    back = cuopjit.tensor(cp.ones((4, 4), dtype=cp.float32))
    assert back.ptr == cp.ones(1).data.ptr or back.to_numpy().sum() == 16


def test_out_of_memory_raises_and_the_process_recovers():
    free, total = cuopjit.get_memory_info()
    with pytest.raises(cuopjit.MemoryError, match=r"out of device memory: requested .* free .* of .*") as info:
        cuopjit.TensorFloat([total // 2, 4])
    assert info.value.requested == (total // 2) * 4 * 4 and info.value.total == total
    assert isinstance(info.value, MemoryError)
    t = cuopjit.ones([1024])
    assert t.to_numpy().sum() == 1024


def test_memory_context_releases_its_tensors():
    with cuopjit.memory_context():
        t = cuopjit.ones([1 << 20])
        assert t.to_numpy()[0] == 1
    with pytest.raises(ValueError, match="was released"):
        t.to_numpy()
    assert cuopjit.ones([4]).to_numpy().sum() == 4


def test_device_functions():
    assert cuopjit.get_device_count() >= 1 and cuopjit.get_device() == 0
    cuopjit.set_device(0)
    free, total = cuopjit.get_memory_info()
    assert 0 < free <= total
    cuopjit.synchronize()
    cuopjit.empty_cache()
    with pytest.raises(ValueError, match=r"device 99 does not exist"):
        cuopjit.set_device(99)
