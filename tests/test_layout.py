"""Tensor layouts: contiguous, channels_last, transposed (cuopjit/layout.py, cuopjit/tensor.py)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import cuopjit
from cuopjit import interop, layout

dims = st.integers(min_value=1, max_value=5)


@settings(max_examples=60, deadline=None)
@given(shape=st.tuples(dims, dims, dims, dims), name=st.sampled_from(layout.LAYOUTS))
def test_strides_storage_and_logical_agree_with_numpy(shape, name):
    logical = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    stored = layout.to_storage(logical, name)
    assert stored.flags.c_contiguous and stored.shape == layout.storage_shape(shape, name)
    back = layout.to_logical(stored, name)
    np.testing.assert_array_equal(back, logical)
    assert tuple(s // back.itemsize for s in back.strides) == layout.strides(shape, name) or 1 in shape
    assert layout.of(shape, layout.strides(shape, name)) in (name, layout.CONTIGUOUS)


def test_the_layouts_torch_uses_are_named():
    n, c, h, w = 2, 3, 4, 5
    assert layout.strides((n, c, h, w), "channels_last") == (h * w * c, 1, w * c, c)
    assert layout.strides((7, 4, 6), "transposed") == (24, 1, 4)
    assert layout.of((n, c, h, w), (h * w * c, 1, w * c, c)) == "channels_last"
    assert layout.of((4, 6), (1, 4)) == "transposed"
    assert layout.of((4, 6), (6, 1)) == "contiguous"
    assert layout.of((2, 1, 4, 5), (20, 1, 5, 1)) == "contiguous"     # C == 1: both; contiguous wins
    assert layout.of((4, 6), (12, 2)) is None                          # a slice
    assert layout.of((4, 6), (0, 1)) is None                           # a broadcast


@pytest.mark.parametrize("name, shape, message", [
    ("NHWC", (1, 2, 3, 4), r"^layout 'NHWC' is not known: choose from contiguous, channels_last, transposed$"),
    ("channels_last", (2, 3, 4), r"^layout 'channels_last' needs a 4-D \(N, C, H, W\) shape, got \[2, 3, 4\]$"),
    ("transposed", (5,), r"^layout 'transposed' needs at least 2 dimensions, got \[5\]$"),
])
def test_unknown_or_impossible_layouts_raise(name, shape, message):
    with pytest.raises(ValueError, match=message):
        layout.check(name, shape)


class TorchLike:
    """Just enough of a CUDA torch tensor for interop's reader (recognised by class name)."""

    def __init__(self, shape, strides):
        self.shape, self._strides = tuple(shape), tuple(strides)

    def data_ptr(self):
        return 1 << 20

    def get_device(self):
        return 0

    def is_contiguous(self):
        return layout.of(self.shape, self._strides) == "contiguous"

    def stride(self):
        return self._strides

    dtype = "torch.float32"


TorchLike.__name__ = "Tensor"
TorchLike.__module__ = "torch"


def test_torch_strides_reach_the_interop_key():
    read = interop.reader(TorchLike)
    assert read(TorchLike((2, 3, 4, 5), (60, 20, 5, 1))) == (1 << 20, (2, 3, 4, 5), "torch.float32", 0)
    assert read(TorchLike((2, 3, 4, 5), (60, 1, 15, 3)))[4:] == ("channels_last",)
    assert read(TorchLike((4, 6), (1, 4)))[4:] == ("transposed",)
    assert read(TorchLike((4, 6), (12, 2))) is None


@pytest.mark.gpu
@pytest.mark.parametrize("name, shape", [("channels_last", (2, 3, 5, 7)), ("transposed", (3, 5, 7)),
                                         ("contiguous", (3, 5, 7))])
def test_tensors_of_each_layout_round_trip(rng, name, shape):
    x = rng.standard_normal(shape)
    t = cuopjit.empty(shape, "float64", layout=name).copy_from(x)
    assert t.layout == name and t.shape == shape and t.strides == layout.strides(shape, name)
    np.testing.assert_array_equal(t.to_numpy(), x)
    cai = t.__cuda_array_interface__
    assert cai["strides"] == (None if name == "contiguous" else tuple(8 * s for s in t.strides))
    u = cuopjit.zeros(shape, "float64", layout=name).copy_from(t)
    np.testing.assert_array_equal(u.to_numpy(), x)
    with pytest.raises(ValueError, match=r"^copy_from: src is "):
        cuopjit.empty(shape, "float64").copy_from(t) if name != "contiguous" else \
            cuopjit.empty(shape, "float64", layout="transposed").copy_from(t)


@pytest.mark.gpu
def test_mT_is_a_view_and_reshape_needs_contiguous(rng):
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    t = cuopjit.tensor(x)
    v = t.mT
    assert v.layout == "transposed" and v.shape == (4, 5, 3) and v.ptr == t.ptr
    np.testing.assert_array_equal(v.to_numpy(), np.swapaxes(x, -1, -2))
    assert v.mT.layout == "contiguous" and v.mT.shape == t.shape
    assert v.plan_key != t.reshape(4, 5, 3).plan_key          # same shape, other layout: another plan
    with pytest.raises(ValueError, match=r"^cannot reshape a transposed tensor as a view"):
        v.reshape(60)
    with pytest.raises(ValueError, match=r"^mT needs a contiguous or transposed tensor"):
        cuopjit.empty((1, 2, 3, 4), layout="channels_last").mT


@pytest.mark.gpu
def test_torch_channels_last_arrives_as_is_and_goes_back(rng):
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 3, 5, 7, device="cuda").to(memory_format=torch.channels_last)
    t = cuopjit.tensor(x)
    assert t.layout == "channels_last" and t.shape == (2, 3, 5, 7) and t.ptr == x.data_ptr()
    np.testing.assert_array_equal(t.to_numpy(), x.cpu().numpy())
    back = torch.from_dlpack(cuopjit.empty((2, 3, 5, 7), layout="channels_last").copy_from(x.cpu().numpy()))
    assert back.is_contiguous(memory_format=torch.channels_last) and torch.equal(back, x)


@pytest.mark.gpu
def test_operators_refuse_a_layout_they_do_not_read():
    t = cuopjit.zeros((2, 3, 4, 5), layout="channels_last")
    with pytest.raises(ValueError, match=r"^SoftmaxFloat: x is channels_last, SoftmaxFloat takes contiguous tensors "
                                         r"here: pass x.contiguous\(\) \(torch\) or cuopjit.contiguous\(x\)$"):
        cuopjit.SoftmaxFloat().forward(t, cuopjit.zeros((2, 3, 4, 5)))
