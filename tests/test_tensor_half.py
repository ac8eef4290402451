"""float16 and bfloat16 tensors: dtypes, host round trips, fills, and torch interop both ways."""
import ml_dtypes
import numpy as np
import pytest

import cuopjit
from cuopjit import interop
from cuopjit.tensor import as_dtype

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("token, want", [
    ("float16", np.float16), (np.float16, np.float16), ("torch.float16", np.float16), ("half", np.float16),
    ("bfloat16", BF16), (ml_dtypes.bfloat16, BF16), ("torch.bfloat16", BF16),
])
def test_half_dtypes_are_named_like_numpy_and_torch(token, want):
    assert as_dtype(token) == np.dtype(want)
    assert interop.np_dtype(token) == np.dtype(want)


def test_other_dtypes_list_the_four_a_tensor_holds():
    with pytest.raises(TypeError, match=r"^dtype 'int8' is not supported: cuopjit tensors hold float32, float64, "
                                        r"float16 or bfloat16$"):
        as_dtype("int8")


def test_the_classes_name_their_dtype():
    assert cuopjit.TensorHalf.DTYPE == np.float16 and cuopjit.TensorBFloat16.DTYPE == BF16
    assert issubclass(cuopjit.TensorBFloat16, cuopjit.Tensor)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_tensors_round_trip_exactly(rng, dtype):
    x = rng.standard_normal((37, 5)).astype(dtype)
    t = cuopjit.tensor(x)
    assert type(t) is (cuopjit.TensorHalf if dtype == "float16" else cuopjit.TensorBFloat16)
    assert t.dtype == np.dtype(dtype) and t.nbytes == 37 * 5 * 2
    np.testing.assert_array_equal(t.to_numpy().view(np.uint16), x.view(np.uint16))
    c = cuopjit.empty((5, 37), dtype, layout="transposed").copy_from(x.T)
    np.testing.assert_array_equal(c.to_numpy().astype(np.float32), x.T.astype(np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, value, want", [
    ("float16", 65504.0, 65504.0),           # the largest finite float16
    ("float16", 1e5, np.inf),                # beyond it: rounds to inf, as NumPy and torch do
    ("float16", -np.inf, -np.inf), ("float16", np.nan, np.nan),
    ("bfloat16", 3e38, 1.765625 * 2.0 ** 127), ("bfloat16", np.nan, np.nan), ("bfloat16", 1.0 / 3.0, 0.333984375),
])
def test_fill_rounds_to_the_dtype(dtype, value, want):
    t = cuopjit.zeros((1000 + 3,), dtype).fill(value)
    got = t.to_numpy().astype(np.float64)
    np.testing.assert_array_equal(got, np.full(1003, want))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_torch_half_tensors_cross_both_ways(rng, name):
    torch = pytest.importorskip("torch")
    dt = getattr(torch, name)
    x = torch.randn(4, 3, 6, 5, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
    t = cuopjit.tensor(x)
    assert t.dtype == np.dtype(name) and t.layout == "channels_last" and t.ptr == x.data_ptr()
    np.testing.assert_array_equal(t.to_numpy().astype(np.float32), x.float().cpu().numpy())
    y = torch.from_dlpack(t)
    assert y.dtype == dt and y.data_ptr() == t.ptr and torch.equal(y, x)
    with pytest.raises(TypeError, match=rf"^ReluFloat: x is {name}, ReluFloat works on float32$"):
        cuopjit.ReluFloat().forward(x, x)


def test_a_host_array_numpy_cannot_read_is_refused_in_one_line():
    class Opaque:
        def __array__(self, *args, **kwargs):
            raise RuntimeError("Got unsupported ScalarType BFloat16")
    with pytest.raises(TypeError, match=r"^tensor\(\): cannot read Opaque data as a NumPy array \(Got unsupported "
                                        r"ScalarType BFloat16\); move GPU-able tensors to the GPU first") as info:
        cuopjit.tensor(Opaque())
    assert info.value.__cause__ is None and info.value.__suppress_context__
