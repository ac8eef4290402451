"""Foreign arrays straight into forward: torch / CuPy / JAX CUDA arrays as operands (zero-copy), one-line errors
naming the operand for those that cannot be, and no chained internal exceptions in any user-facing error.

CPU: how types are read (cuopjit/interop.py), the errors (a fake array type stands in for a GPU library where
the error comes before any launch), the no-GPU error. GPU: results with torch, CuPy and JAX operands."""
from __future__ import annotations

import os
import traceback

import numpy as np
import pytest

import cuopjit
from cuopjit import interop
from cuopjit.operands import operands, view_at
from cuopjit.target import named
from cuopjit.tensor import Tensor

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # JAX must leave the GPU's memory to the tests


def fake(shape, dtype="float32", ptr=1 << 20):
    return Tensor._view(ptr, tuple(shape), np.dtype(dtype), 0, None)


class Foreign:
    """A GPU array of a library cuopjit has never heard of: read through a registered reader."""
    def __init__(self, shape, dtype="float32", device=0, contiguous=True, ptr=1 << 24):
        self.shape, self.dtype, self.device, self.contiguous, self.ptr = tuple(shape), np.dtype(dtype), device, \
            contiguous, ptr


interop.register(Foreign, lambda x: (x.ptr, x.shape, x.dtype, x.device) if x.contiguous else None)


def assert_one_line_unchained(exc: BaseException) -> None:
    assert "\n" not in str(exc)
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__), exc.__context__


# --- how types are read -------------------------------------------------------------------------------------
def test_numbers_lists_arrays_and_our_tensors_are_not_foreign():
    for cls in (int, float, bool, type(None), list, tuple, np.ndarray, np.float32, cuopjit.Tensor,
                cuopjit.TensorFloat, cuopjit.TensorDouble):
        assert interop.reader(cls) is None, cls


def test_torch_and_cupy_are_recognised_by_class_without_importing_them():
    torch_like = type("Tensor", (), {"__module__": "torch"})
    sub = type("Parameter", (torch_like,), {"__module__": "torch.nn.parameter"})
    cupy_like = type("ndarray", (), {"__module__": "cupy._core.core"})
    assert interop.reader(torch_like) is interop.torch_key and interop.reader(sub) is interop.torch_key
    assert interop.reader(cupy_like) is interop.cupy_key


def test_operands_swap_foreign_arrays_for_cached_views_and_map_results_back():
    x, y = Foreign([4, 5]), Foreign([4, 5], ptr=1 << 25)
    t = fake([3])
    args, kwargs, back = operands((x, 2, t), {"out": y, "axis": -1})
    assert isinstance(args[0], Tensor) and args[0].ptr == x.ptr and args[0].shape == (4, 5)
    assert args[1] == 2 and args[2] is t and kwargs["axis"] == -1 and kwargs["out"].ptr == y.ptr
    assert back[id(args[0])] is x and back[id(kwargs["out"])] is y
    assert operands((x,), {})[0][0] is args[0]                 # the same view: one dict probe, nothing made
    assert operands((t, 1.0), {"s": None}) is None
    assert view_at(x.ptr, (4, 5), np.dtype("float32"), -1) is None      # host memory: no view


def test_views_share_plan_keys_with_tensors():
    x = Foreign([33, 7])
    assert operands((x,), {})[0][0].plan_key == fake([33, 7], ptr=x.ptr).plan_key


def test_warm_foreign_calls_are_one_probe_and_setters_invalidate_them():
    """A call on foreign arrays is memoised under its operands' keys (runner, pointers, which operand is the
    result); the next one with equal keys skips swap and bind, and a setter makes the next call bind again."""
    g = cuopjit.GemmFloat()
    g.set_weight(fake([5, 3], ptr=1 << 30))
    a, c = Foreign([2, 5]), Foreign([2, 3], ptr=1 << 25)
    launched = []
    (swapped, _, _) = operands((a, c), {})
    key, _, _ = g.bind(*swapped)
    g._default_plans[key] = lambda pointers, stream: launched.append(pointers)   # stands in for the loaded plan
    jit = cuopjit.JITGemmFloat(g)
    jit._time_next = False                       # its first forward would record CUDA events
    for run in (g.forward, g.forward, jit.forward):
        assert run(a, c) is c
    assert launched == [(a.ptr, 1 << 30, c.ptr)] * 3 and len(g.foreign_plans) == 1
    g.set_weight(fake([5, 3], ptr=1 << 31))
    assert not g.foreign_plans
    g._default_plans[g.bind(*swapped)[0]] = g._default_plans[key]
    assert g.forward(a, Foreign([2, 3], ptr=1 << 25)) is not c and launched[-1] == (a.ptr, 1 << 31, c.ptr)


# --- errors: one line, naming the operand, nothing chained ----------------------------------------------------
def gemm():
    g = cuopjit.GemmFloat()
    g.set_weight(fake([5, 3]))
    return g


BAD = [
    (np.zeros((2, 5), np.float32), TypeError, r"^GemmFloat: a must be a cuopjit Tensor, got ndarray \(wrap arrays "
                                              r"with cuopjit.tensor\(...\)\), or a torch, CuPy or JAX CUDA array$"),
    ([[1.0] * 5] * 2, TypeError, r"^GemmFloat: a must be a cuopjit Tensor, got list"),
    (None, TypeError, r"^GemmFloat: a must be a cuopjit Tensor, got None"),
    (Foreign([2, 5], "float64"), TypeError, r"^GemmFloat: a is float64, GemmFloat works on float32$"),
    (Foreign([2, 5], device=1), ValueError, r"^GemmFloat: a is on device 1 but the current device is 0: "
                                            r"call cuopjit.set_device\(1\)$"),
    (Foreign([5, 2], contiguous=False), TypeError, r"^GemmFloat: a cannot be read as a GPU array"),
]


@pytest.mark.parametrize("a, kind, message", BAD, ids=["ndarray", "list", "None", "dtype", "device", "unreadable"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["operator", "jit"])
def test_bad_operands_raise_one_unchained_line(a, kind, message, wrapped):
    op = gemm()
    run = cuopjit.JITGemmFloat(op).forward if wrapped else op.forward
    with pytest.raises(kind, match=message) as info:
        run(a, fake([2, 3]))
    assert_one_line_unchained(info.value)


def test_no_weight_and_numpy_operands_chain_nothing():
    with pytest.raises(ValueError, match=r"^GemmFloat: no weight: call set_weight\(B\) before forward$") as info:
        cuopjit.GemmFloat().forward(np.zeros((2, 2)), np.zeros((2, 2)))
    assert_one_line_unchained(info.value)
    with pytest.raises(TypeError, match="SoftmaxFloat: y must be a cuopjit Tensor, got ndarray") as info:
        cuopjit.SoftmaxFloat().forward(Foreign([4, 5]), np.zeros((4, 5), np.float32))
    assert_one_line_unchained(info.value)
    with pytest.raises(TypeError, match="ElementwiseFloat: x must be") as info:
        cuopjit.ElementwiseFloat("out = x * 2").forward(x=np.zeros(3), out=fake([3]))
    assert_one_line_unchained(info.value)


def test_setters_take_foreign_arrays_and_name_bad_ones():
    g = cuopjit.GemmFloat()
    w = Foreign([5, 3])
    g.set_weight(w)
    assert g.plan(fake([2, 5]), Foreign([2, 3], ptr=1 << 26), target=named("sm_90")).launches   # swapped too
    with pytest.raises(TypeError, match=r"^GemmFloat: weight must be a cuopjit Tensor, got list") as info:
        g.set_weight([[1.0]])
    assert_one_line_unchained(info.value)


def test_without_a_gpu_tensor_creation_raises_one_short_line():
    if cuopjit.get_device_count():
        pytest.skip("this machine has a GPU")
    for make in (lambda: cuopjit.tensor(np.ones(3)), lambda: cuopjit.zeros([4]), lambda: cuopjit.TensorFloat([2])):
        with pytest.raises(cuopjit.NoDeviceError, match="tensors and forward need") as info:
            make()
        assert_one_line_unchained(info.value)
        frames = traceback.extract_tb(info.value.__traceback__)
        assert len(frames) <= 4, [f.name for f in frames]        # the test's lambda, tensor(), _new / __init__


class TorchDtype:
    __module__ = "torch"

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


class TorchLike:
    """Stands in for torch.Tensor (CI has no torch): recognised by its class name and module alone."""
    __module__ = "torch"

    def __init__(self, shape, dtype="float32", device=0, strides=None, ptr=1 << 28):
        self.shape, self._dtype, self._device, self.ptr = tuple(shape), TorchDtype(dtype), device, ptr
        c = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        self._strides = c if strides is None else tuple(strides)
        self._c = c

    dtype = property(lambda self: self._dtype)
    device = property(lambda self: type("device", (), {"type": "cpu" if self._device < 0 else "cuda"})())

    def data_ptr(self):
        return self.ptr

    def get_device(self):
        return self._device

    def is_contiguous(self):
        return self._strides == self._c

    def stride(self):
        return self._strides


TorchLike.__name__ = "Tensor"


@pytest.mark.parametrize("a, kind, message", [
    (TorchLike([2, 5], device=-1), TypeError, r"^GemmFloat: a is a CPU tensor: pass a CUDA tensor \(x.cuda\(\)\)$"),
    (TorchLike([2, 5], "int32"), TypeError, r"^GemmFloat: a is int32: cuopjit tensors hold float32, float64, float16 "
                                         r"or bfloat16 \(convert with x.float\(\), x.double\(\), x.half\(\) or "
                                         r"x.bfloat16\(\)\)$"),
    (TorchLike([2, 5], "float16"), TypeError, r"^GemmFloat: a is float16, GemmFloat works on float32$"),
    (TorchLike([2, 5], strides=[10, 2]), ValueError, r"^GemmFloat: a has strides \[10, 2\] \(shape \[2, 5\], in "
                                                  r"elements\) of no layout cuopjit reads \(contiguous, channels_last, "
                                                  r"transposed\): pass x.contiguous\(\)$"),
    (TorchLike([2, 5], "float64"), TypeError, r"^GemmFloat: a is float64, GemmFloat works on float32$"),
], ids=["cpu", "int32", "float16", "strides", "float64"])
def test_torch_like_operands_are_read_structurally(a, kind, message):
    assert interop.reader(TorchLike) is interop.torch_key
    with pytest.raises(kind, match=message) as info:
        gemm().forward(a, fake([2, 3]))
    assert_one_line_unchained(info.value)


def test_torch_cpu_tensors_are_named_as_such():
    torch = pytest.importorskip("torch")
    op = gemm()
    for bad, message in ((torch.zeros(2, 5), r"^GemmFloat: a is a CPU tensor: pass a CUDA tensor \(x.cuda\(\)\)$"),
                         (torch.zeros(2, 5, device="meta"), r"^GemmFloat: a is a META tensor")):
        with pytest.raises(TypeError, match=message) as info:
            op.forward(bad, fake([2, 3]))
        assert_one_line_unchained(info.value)
    c = torch.zeros(2, 3)
    with pytest.raises(TypeError, match=r"^GemmFloat: c is a CPU tensor") as info:
        op.forward(fake([2, 5]), c)
    assert_one_line_unchained(info.value)


# --- GPU: the real libraries ------------------------------------------------------------------------------------
def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_forward_takes_torch_tensors_everywhere(dtype):
    torch = _torch()
    td = getattr(torch, dtype)
    suffix = "Float" if dtype == "float32" else "Double"
    eps = 2.0 ** -23 if dtype == "float32" else 2.0 ** -52
    g = torch.Generator(device="cuda").manual_seed(torch.seed() % (1 << 31))
    a, b = torch.randn(33, 65, device="cuda", dtype=td, generator=g), torch.randn(65, 17, device="cuda", dtype=td,
                                                                                    generator=g)
    gemm = getattr(cuopjit, "Gemm" + suffix)()
    gemm.set_weight(b)
    c = torch.full((33, 17), float("nan"), device="cuda", dtype=td)
    for run in (gemm.forward, getattr(cuopjit, "JITGemm" + suffix)(gemm).forward):
        c.fill_(float("nan"))
        assert run(a, c) is c                                        # the caller's tensor comes back
        ref = a.double() @ b.double()
        assert float((c.double() - ref).norm() / ref.norm()) < 4 * 65 * eps
    y = torch.empty_like(a)
    assert getattr(cuopjit, "Softmax" + suffix)().forward(a, y, axis=0) is y
    torch.testing.assert_close(y.double(), torch.softmax(a.double(), 0), rtol=64 * eps, atol=64 * eps)
    out = cuopjit.zeros([33, 17], dtype)                             # mixed: torch inputs, a cuopjit output
    assert getattr(cuopjit, "MatMul" + suffix)().forward(a, b, out) is out
    np.testing.assert_allclose(out.to_numpy(), (a.double() @ b.double()).cpu().numpy(), rtol=1e-4 if eps > 1e-10
                               else 1e-12, atol=1e-4 if eps > 1e-10 else 1e-12)
    ew = getattr(cuopjit, "Elementwise" + suffix)("out = relu(x * s + r)")
    z = torch.empty_like(a)
    assert ew.forward(x=a, s=0.5, r=a, out=z) is z
    torch.testing.assert_close(z, torch.relu(a * 1.5), rtol=4 * eps, atol=4 * eps)


@pytest.mark.gpu
def test_bad_torch_tensors_raise_one_line_naming_the_operand():
    torch = _torch()
    relu = cuopjit.ReluFloat()
    x = torch.randn(8, 8, device="cuda")
    cases = [(torch.randn(8, 8), TypeError, r"^ReluFloat: x is a CPU tensor: pass a CUDA tensor \(x.cuda\(\)\)$"),
             (x.to(torch.int32), TypeError, r"^ReluFloat: x is int32: cuopjit tensors hold float32, float64"),
             (x.half(), TypeError, r"^ReluFloat: x is float16, ReluFloat works on float32$"),
             (x.double(), TypeError, r"^ReluFloat: x is float64, ReluFloat works on float32$"),
             (x[:, ::2], ValueError, r"^ReluFloat: x has strides \[8, 2\] \(shape \[8, 4\], in elements\) of no "
                                     r"layout cuopjit reads")]
    for bad, kind, message in cases:
        for call in (lambda: relu.forward(bad, x), lambda: cuopjit.JITReluFloat(relu).forward(bad, x)):
            with pytest.raises(kind, match=message) as info:
                call()
            assert_one_line_unchained(info.value)
    with pytest.raises(TypeError, match=r"^ReluFloat: y is a CPU tensor") as info:
        relu.forward(x, torch.empty(8, 8))
    assert_one_line_unchained(info.value)


@pytest.mark.gpu
def test_views_follow_memory_that_torch_reuses():
    """A tensor freed and another allocated at the same address with another shape: the right plan and size."""
    torch = _torch()
    relu = cuopjit.ReluFloat()
    for n in (1000, 7, 4096, 33):
        x = torch.randn(n, device="cuda")
        y = torch.full_like(x, float("nan"))
        relu.forward(x, y)
        torch.testing.assert_close(y, torch.relu(x), rtol=0, atol=0)
        del x, y


@pytest.mark.gpu
def test_a_new_weight_is_used_by_the_next_warm_torch_forward():
    torch = _torch()
    gemm = cuopjit.GemmFloat()
    a, c = torch.randn(4, 16, device="cuda"), torch.empty(4, 8, device="cuda")
    for _ in range(2):
        w = torch.randn(16, 8, device="cuda")
        gemm.set_weight(w)
        for _ in range(2):
            c.fill_(float("nan"))
            gemm.forward(a, c)
            torch.testing.assert_close(c, a @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_weights_set_from_torch_stay_alive():
    torch = _torch()
    gemm = cuopjit.GemmFloat()
    w = torch.randn(16, 8, device="cuda")
    expect = w.clone()
    gemm.set_weight(w)
    del w
    torch.cuda.empty_cache()
    junk = torch.randn(16, 8, device="cuda")        # would land on the weight's memory if it had been freed
    a, c = torch.randn(4, 16, device="cuda"), torch.empty(4, 8, device="cuda")
    gemm.forward(a, c)
    torch.testing.assert_close(c, a @ expect, rtol=1e-5, atol=1e-5)
    assert junk.shape == (16, 8)


@pytest.mark.gpu
def test_tensor_wraps_torch_zero_copy_and_keeps_it_alive():
    torch = _torch()
    x = torch.randn(33, 17, device="cuda")
    t = cuopjit.tensor(x)
    assert t.ptr == x.data_ptr() and t.shape == (33, 17) and isinstance(t, cuopjit.TensorFloat)
    np.testing.assert_array_equal(t.to_numpy(), x.cpu().numpy())
    cpu = torch.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(cuopjit.tensor(cpu).to_numpy(), cpu.numpy())     # host memory is copied
    with pytest.raises(TypeError, match=r"^tensor\(\): the array is int32: cuopjit tensors hold float32, float64, "):
        cuopjit.tensor(torch.zeros(3, dtype=torch.int32, device="cuda"))


@pytest.mark.gpu
def test_cupy_arrays_are_operands():
    cp = pytest.importorskip("cupy")
    x = cp.random.standard_normal((64, 33), dtype=cp.float32)
    y = cp.full((64, 33), cp.nan, dtype=cp.float32)
    assert cuopjit.ReluFloat().forward(x, y) is y
    cp.testing.assert_array_equal(y, cp.maximum(x, 0))
    with pytest.raises(ValueError, match=r"^ReluFloat: x has strides \[33, 2\] \(shape \[64, 17\], in elements\) "
                                         r"of no layout") as info:
        cuopjit.ReluFloat().forward(x[:, ::2], y[:, ::2])
    assert_one_line_unchained(info.value)


@pytest.mark.gpu
def test_jax_arrays_are_operands():
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX has no GPU backend here")
    jnp = jax.numpy
    a = jax.device_put(jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4) - 5.0, gpu)
    out = cuopjit.zeros([3, 4])
    assert cuopjit.ReluFloat().forward(a, out) is out
    np.testing.assert_array_equal(out.to_numpy(), np.maximum(np.asarray(a), 0))
    t = cuopjit.tensor(a)
    assert t.shape == (3, 4) and t.dtype == np.float32
