"""Operand validation without a GPU: every operator refuses bad operands before any driver call.

Operands are Tensor views of made-up device addresses (nothing is allocated, no driver is loaded), so
these run anywhere; a check that let a bad operand through would reach the driver and fail differently.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import cuopjit
from cuopjit.device import driver
from cuopjit.build import pipeline
from cuopjit.run.plan import KernelLaunch
from cuopjit.tensor import Tensor


def fake(shape, dtype="float32", *, device: int = 0, ptr: int = 1 << 20) -> Tensor:
    """A Tensor describing `shape` x `dtype` on `device` at address `ptr`: no memory behind it."""
    return Tensor._view(ptr, tuple(shape), np.dtype(dtype), device, None)


@pytest.fixture(autouse=True)
def no_driver(monkeypatch):
    """Any driver call fails the test: validation must come first."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a check let the operands reach the driver")
    monkeypatch.setattr(driver, "api", forbidden)
    monkeypatch.setattr(driver, "get_device", forbidden)


def _gemm(trans_a=False, trans_b=False, weight=(5, 3), dtype="float32"):
    g = (cuopjit.GemmFloat if dtype == "float32" else cuopjit.GemmDouble)(trans_a=trans_a, trans_b=trans_b)
    g.set_weight(fake(weight, dtype))
    return g


def test_gemm_needs_a_weight():
    with pytest.raises(ValueError, match=r"GemmFloat: no weight: call set_weight\(B\) before forward"):
        cuopjit.GemmFloat().forward(fake([4, 4]), fake([4, 4]))


@pytest.mark.parametrize("trans_a, trans_b, a, weight, message", [
    (False, False, (2, 4), (5, 3), r"a has shape \[2, 4\] and weight has shape \[5, 3\]: op\(a\) has 4 columns but "
                                   r"op\(weight\) has 5 rows"),
    (True, False, (4, 2), (5, 3), r"a has shape \[4, 2\] .*: op\(a\) has 4 columns but op\(weight\) has 5 rows"),
    (False, True, (2, 4), (3, 5), r"a has shape \[2, 4\] .*: op\(a\) has 4 columns but op\(weight\) has 5 rows"),
    (False, False, (2, 6), (5, 3), r"a has shape \[2, 6\] .*: op\(a\) has 6 columns but op\(weight\) has 5 rows"),
])
def test_gemm_refuses_a_k_mismatch(trans_a, trans_b, a, weight, message):
    g = _gemm(trans_a, trans_b, weight)
    m = a[1] if trans_a else a[0]
    n = weight[0] if trans_b else weight[1]
    with pytest.raises(ValueError, match="GemmFloat: " + message):
        g.forward(fake(a), fake([m, n]))


@pytest.mark.parametrize("trans_a, trans_b, a, weight, c, want", [
    (False, False, (2, 5), (5, 3), (2, 4), (2, 3)),
    (False, False, (2, 5), (5, 3), (3, 3), (2, 3)),
    (False, False, (2, 5), (5, 3), (3, 2), (2, 3)),
    (True, False, (5, 2), (5, 3), (5, 3), (2, 3)),
    (False, True, (2, 5), (3, 5), (2, 5), (2, 3)),
    (False, False, (2, 5), (5, 3), (2, 3, 1), None),
])
def test_gemm_refuses_a_wrong_c(trans_a, trans_b, a, weight, c, want):
    g = _gemm(trans_a, trans_b, weight)
    if want is None:
        message = r"GemmFloat: c must be 2-D, got shape \[2, 3, 1\]"
    else:
        message = rf"GemmFloat: c has shape \[{c[0]}, {c[1]}\], expected \[{want[0]}, {want[1]}\]"
    with pytest.raises(ValueError, match=message):
        g.forward(fake(a), fake(c))


def test_gemm_operand_types_dimensions_and_devices():
    g = _gemm()
    with pytest.raises(TypeError, match="GemmFloat: a is float64, GemmFloat works on float32"):
        g.forward(fake([2, 5], "float64"), fake([2, 3]))
    with pytest.raises(TypeError, match="GemmFloat: c is float64"):
        g.forward(fake([2, 5]), fake([2, 3], "float64"))
    with pytest.raises(TypeError, match=r"GemmFloat: a must be a cuopjit Tensor, got ndarray \(wrap arrays with "
                                        r"cuopjit.tensor\(...\)\)"):
        g.forward(np.zeros((2, 5), np.float32), fake([2, 3]))
    with pytest.raises(ValueError, match=r"GemmFloat: a must be 2-D, got shape \[10\]"):
        g.forward(fake([10]), fake([2, 3]))
    with pytest.raises(ValueError, match=r"GemmFloat: weight must be 2-D, got shape \[5\]"):
        g.set_weight(fake([5]))
    with pytest.raises(TypeError, match="GemmDouble: weight is float32"):
        cuopjit.GemmDouble().set_weight(fake([5, 3]))
    with pytest.raises(ValueError, match=r"GemmFloat: a is on device 1 but the current device is 0: call "
                                         r"cuopjit.set_device\(1\)"):
        g.forward(fake([2, 5], device=1), fake([2, 3]))
    released = fake([2, 5], ptr=0)
    with pytest.raises(ValueError, match=r"was released \(its memory_context ended\)"):
        g.forward(released, fake([2, 3]))


def test_gemm_with_nothing_to_compute_launches_nothing():
    g = _gemm(weight=(5, 3))
    c = fake([0, 3])
    assert g.forward(fake([0, 5]), c) is c
    g = _gemm(weight=(5, 0))
    c = fake([2, 0])
    assert g.forward(fake([2, 5]), c) is c


@pytest.mark.parametrize("cls", [cuopjit.LayerNormFloat, cuopjit.BatchNormFloat, cuopjit.LayerNormDouble])
@pytest.mark.parametrize("eps", [float("nan"), -1.0, -1e-30])
def test_eps_must_be_a_non_negative_number(cls, eps):
    with pytest.raises(ValueError, match=rf"{cls.__name__}: eps={eps!r} is not allowed: it must be >= 0"):
        cls(eps=eps)
    op = cls()
    with pytest.raises(ValueError, match=rf"{cls.__name__}: eps={eps!r} is not allowed"):
        op.eps = eps
    assert op.eps == 1e-5          # refused values are not kept
    op.eps = 0.0
    assert op.eps == 0.0


@pytest.mark.parametrize("momentum", [float("nan"), -0.1, 1.5])
def test_momentum_must_be_in_the_unit_interval(momentum):
    with pytest.raises(ValueError, match=rf"BatchNormFloat: momentum={momentum!r} is not allowed: it must be in "
                                         r"\[0, 1\]"):
        cuopjit.BatchNormFloat(momentum=momentum)
    for ok in (0.0, 1.0):
        assert cuopjit.BatchNormFloat(momentum=ok).momentum == ok


@pytest.mark.parametrize("grid, block", [((0, 1, 1), (32, 1, 1)), ((1, 0, 1), (32, 1, 1)), ((1, 1, 0), (32, 1, 1)),
                                         ((2 ** 31, 1, 1), (32, 1, 1)), ((1, 65536, 1), (32, 1, 1)),
                                         ((1, 1, 65536), (32, 1, 1)), ((1, 1, 1), (0, 1, 1)),
                                         ((1, 1, 1), (32, 1, 0))])
def test_a_launch_outside_the_hardware_limits_is_refused(grid, block):
    spec = pipeline.make_spec("elementwise/elementwise.cu.jinja", "k", "k", {})
    with pytest.raises(ValueError, match=rf"k: launch geometry grid=\({grid[0]}, {grid[1]}, {grid[2]}\) "
                                         rf"block=\({block[0]}, {block[1]}, {block[2]}\) is out of range"):
        KernelLaunch(spec, grid, block, ())


def test_the_largest_launch_is_accepted():
    spec = pipeline.make_spec("elementwise/elementwise.cu.jinja", "k", "k", {})
    launch = KernelLaunch(spec, (2 ** 31 - 1, 65535, 65535), (1024,), ())
    assert launch.grid == (2 ** 31 - 1, 65535, 65535) and launch.block == (1024, 1, 1)
    with pytest.raises(ValueError, match="k: 1025 threads per block is over 1024: choose block_size <= 1024"):
        KernelLaunch(spec, (1,), (1025,), ())


def test_layernorm_checks():
    ln = cuopjit.LayerNormFloat()
    ln.set_gamma(fake([5]))
    x = fake([4, 6])
    with pytest.raises(ValueError, match=r"LayerNormFloat: gamma has shape \[5\] and x has shape \[4, 6\]"):
        ln.forward(x, fake([4, 6]))
    ln.set_beta(fake([6]))
    with pytest.raises(ValueError, match=r"LayerNormFloat: beta has shape \[6\] but gamma has shape \[5\]"):
        ln.forward(x, fake([4, 6]))
    ln = cuopjit.LayerNormFloat()
    with pytest.raises(ValueError, match=r"LayerNormFloat: y has shape \[6, 4\], expected x's shape \[4, 6\]"):
        ln.forward(x, fake([6, 4]))
    with pytest.raises(TypeError, match="LayerNormFloat: x is float64"):
        ln.forward(fake([4, 6], "float64"), x)
    with pytest.raises(TypeError, match="LayerNormFloat: gamma is float64"):
        ln.set_gamma(fake([6], "float64"))
    with pytest.raises(ValueError, match="LayerNormFloat: x is 0-D: layer norm needs at least one dimension"):
        ln.forward(fake([]), fake([]))
    ln.set_beta(fake([6]))
    with pytest.raises(ValueError, match=r"LayerNormFloat: beta has shape \[6\] but gamma has shape None"):
        ln.forward(x, fake([4, 6]))
    empty = fake([0, 6])
    assert cuopjit.LayerNormFloat().forward(empty, empty) is empty


def test_batchnorm_checks():
    bn = cuopjit.BatchNormFloat()
    bn.set_gamma(fake([4]))
    x = fake([2, 3, 5, 5])
    with pytest.raises(ValueError, match=r"BatchNormFloat: gamma has shape \[4\], expected \[3\] \(x has shape "
                                         r"\[2, 3, 5, 5\], C = 3\)"):
        bn.forward(x, fake([2, 3, 5, 5]))
    with pytest.raises(ValueError, match=r"BatchNormFloat: gamma must be 1-D, got shape \[2, 2\]"):
        bn.set_gamma(fake([2, 2]))
    bn = cuopjit.BatchNormFloat()
    with pytest.raises(ValueError, match=r"BatchNormFloat: y has shape \[2, 3, 5\], expected x's shape"):
        bn.forward(x, fake([2, 3, 5]))
    with pytest.raises(ValueError, match=r"BatchNormFloat: x must be N x C or N x C x H x W \(at least 2-D\), got "
                                         r"shape \[5\]"):
        bn.forward(fake([5]), fake([5]))
    with pytest.raises(TypeError, match="BatchNormFloat: y is float64"):
        bn.forward(x, fake([2, 3, 5, 5], "float64"))


def test_softmax_checks():
    sm = cuopjit.SoftmaxFloat()
    x = fake([4, 5])
    with pytest.raises(ValueError, match=r"SoftmaxFloat: y has shape \[5, 4\], expected x's shape \[4, 5\]"):
        sm.forward(x, fake([5, 4]))
    with pytest.raises(TypeError, match="SoftmaxFloat: y is float64, SoftmaxFloat works on float32"):
        sm.forward(x, fake([4, 5], "float64"))
    for axis, allowed in ((2, "-2..1"), (-3, "-2..1")):
        with pytest.raises(ValueError, match=rf"SoftmaxFloat: axis={axis} is out of range for x of shape \[4, 5\] "
                                             rf"\(allowed {allowed}\)"):
            sm.forward(x, fake([4, 5]), axis=axis)
    with pytest.raises(ValueError, match="SoftmaxFloat: x is a 0-D tensor: softmax needs at least one axis"):
        sm.forward(fake([]), fake([]))
    with pytest.raises(TypeError, match="SoftmaxFloat: x must be a cuopjit Tensor"):
        sm.forward([1.0], x)


def test_pool_checks():
    x = fake([2, 3, 8, 8])
    with pytest.raises(ValueError, match=r"MaxPool2DFloat: y has shape \[2, 3, 8, 8\], expected \[2, 3, 4, 4\] "
                                         r"\(x of shape \[2, 3, 8, 8\]"):
        cuopjit.MaxPool2DFloat().forward(x, fake([2, 3, 8, 8]))
    with pytest.raises(ValueError, match=r"AveragePool2DFloat: x must be 4-D, got shape \[3, 8, 8\]"):
        cuopjit.AveragePool2DFloat().forward(fake([3, 8, 8]), fake([3, 4, 4]))
    with pytest.raises(ValueError, match=r"GlobalMaxPool2DFloat: y has shape \[2, 3, 1\], expected \[2, 3\] or "
                                         r"\[2, 3, 1, 1\]"):
        cuopjit.GlobalMaxPool2DFloat().forward(x, fake([2, 3, 1]))
    with pytest.raises(ValueError, match=r"GlobalAveragePool2DFloat: x of shape \[2, 3, 0, 4\] has empty planes"):
        cuopjit.GlobalAveragePool2DFloat().forward(fake([2, 3, 0, 4]), fake([2, 3]))
    with pytest.raises(TypeError, match=r"MaxPool2DFloat.forward got unexpected keyword arguments \['kernel'\]"):
        cuopjit.MaxPool2DFloat().forward(x, fake([2, 3, 4, 4]), kernel=2)
    with pytest.raises(ValueError, match=r"MaxPool2DFloat: x of shape \[1, 1, 2, 2\] is smaller than the 3x3 window"):
        cuopjit.MaxPool2DFloat().forward(fake([1, 1, 2, 2]), fake([1, 1, 1, 1]), kernel_h=3, kernel_w=3)
    with pytest.raises(ValueError, match=r"MaxPool2DFloat: padding \(2x0\) must be between 0 and half the "):
        cuopjit.MaxPool2DFloat(kernel_h=2, pad_h=2)
    with pytest.raises(ValueError, match=r"kernel \(0x2\) and stride \(0x2\) must be >= 1"):
        cuopjit.MaxPool2DFloat(kernel_h=0)


def test_blas1_and_relu_checks():
    x, y = fake([10]), fake([11])
    with pytest.raises(ValueError, match=r"AxpyFloat: x has shape \[10\] \(10 elements\) and y has shape \[11\] "
                                         r"\(11 elements\)"):
        cuopjit.AxpyFloat(1.0).forward(x, y)
    with pytest.raises(ValueError, match=r"DotFloat: x has shape \[10\] .* y has shape \[11\]"):
        cuopjit.DotFloat().forward(x, y)
    with pytest.raises(TypeError, match="CopyFloat: y is float64, CopyFloat works on float32"):
        cuopjit.CopyFloat().forward(x, fake([10], "float64"))
    with pytest.raises(TypeError, match="ScalDouble: x must be a cuopjit Tensor, got ndarray"):
        cuopjit.ScalDouble(1.0).forward(np.zeros(3))
    with pytest.raises(ValueError, match=r"DotFloat: result has shape \[2\], expected one element"):
        cuopjit.DotFloat().forward(x, x, result=fake([2]))
    with pytest.raises(ValueError, match=r"ReluFloat: y has shape \[3, 4\] but x has shape \[4, 3\]"):
        cuopjit.ReluFloat().forward(fake([4, 3]), fake([3, 4]))
    with pytest.raises(TypeError, match="ReluDouble: x is float32"):
        cuopjit.ReluDouble().forward(fake([4]), fake([4], "float64"))
    e = fake([0, 3])
    assert cuopjit.ReluFloat().forward(e, e) is e


def test_shape_checks():
    x = fake([4, 6])
    with pytest.raises(ValueError, match=r"FlattenFloat: y has shape \[4, 5\], expected \[24\] \(x of shape \[4, 6\]"):
        cuopjit.FlattenFloat().forward(x, fake([4, 5]), start_dim=0)
    with pytest.raises(ValueError, match=r"ViewFloat: the view at offset \[2, 0\] with shape \[3, 6\] leaves x of "
                                         r"shape \[4, 6\] along dim 0 \(2 \+ 3 > 4\)"):
        cuopjit.ViewFloat().forward(x, fake([3, 6]), [2, 0], [3, 6])
    with pytest.raises(ValueError, match=r"ViewFloat: y has shape \[3, 5\], expected the view's shape \[3, 6\]"):
        cuopjit.ViewFloat().forward(x, fake([3, 5]), [0, 0], [3, 6])
    with pytest.raises(ValueError, match=r"ViewFloat: offset \[0\] and shape \[3, 6\] must each have 2 entries"):
        cuopjit.ViewFloat().forward(x, fake([3, 6]), [0], [3, 6])
    with pytest.raises(ValueError, match=r"ViewFloat: offset \[-1, 0\] and shape \[3, 6\] must not be negative"):
        cuopjit.ViewFloat().forward(x, fake([3, 6]), [-1, 0], [3, 6])


def test_wrapper_checks_its_operator_and_config():
    with pytest.raises(TypeError, match="JITGemmFloat wraps a GemmFloat, got GemmDouble"):
        cuopjit.JITGemmFloat(cuopjit.GemmDouble())
    jit = cuopjit.JITGemmFloat(cuopjit.GemmFloat())
    with pytest.raises(ValueError, match="tile_size=256"):
        cfg = cuopjit.JITConfig()
        cfg.tile_size = 256
        jit.set_jit_config(cfg)
    with pytest.raises(TypeError, match="GemmFloat: a is float64, GemmFloat works on float32"):
        g = _gemm()
        cuopjit.JITGemmFloat(g).forward(fake([2, 5], "float64"), fake([2, 3]))


def test_every_fake_is_free():
    """The views above own nothing: a fake is only a description."""
    t = fake([3, 4], "float64")
    assert t.nbytes == 3 * 4 * 8 and t.size == math.prod((3, 4)) and t.device == 0


ALIGNED = 1 << 20   # a 16-byte aligned made-up address


@pytest.mark.parametrize("dtype, trans_a, trans_b, a, weight, c, ptrs, aligned, lds", [
    ("float32", False, False, (6, 8), (8, 12), (6, 12), (0, 0, 0), True, (8, 12, 12)),
    ("float32", True, False, (8, 6), (8, 12), (6, 12), (0, 0, 0), False, (6, 12, 12)),      # lda = 6
    ("float32", True, True, (6, 8), (12, 6), (8, 12), (0, 0, 0), False, (8, 6, 12)),        # ldb = 6
    ("float32", False, True, (4, 8), (6, 8), (4, 6), (0, 0, 0), False, (8, 8, 6)),          # ldc = 6
    ("float32", False, False, (6, 8), (8, 12), (6, 12), (4, 0, 0), False, (8, 12, 12)),     # A 4 bytes off
    ("float32", False, False, (6, 8), (8, 12), (6, 12), (0, 8, 0), False, (8, 12, 12)),     # B 8 bytes off
    ("float32", False, False, (6, 8), (8, 12), (6, 12), (0, 0, 16 + 4), False, (8, 12, 12)),  # C
    ("float64", True, False, (8, 6), (8, 12), (6, 12), (0, 0, 0), True, (6, 12, 12)),       # 6 doubles = 48 B
    ("float64", False, False, (6, 7), (7, 12), (6, 12), (0, 0, 0), False, (7, 12, 12)),
])
def test_gemm_problem_describes_the_call(dtype, trans_a, trans_b, a, weight, c, ptrs, aligned, lds):
    cls = cuopjit.GemmFloat if dtype == "float32" else cuopjit.GemmDouble
    g = cls(trans_a=trans_a, trans_b=trans_b, alpha=0.5, beta=-2.0)
    g.set_weight(fake(weight, dtype, ptr=ALIGNED * 2 + ptrs[1]))
    p = g.problem(fake(a, dtype, ptr=ALIGNED + ptrs[0]), fake(c, dtype, ptr=ALIGNED * 3 + ptrs[2]))
    m, n = c
    k = a[0] if trans_a else a[1]
    assert (p.dtype, p.m, p.n, p.k, p.trans_a, p.trans_b, p.aligned, p.alpha, p.beta, (p.lda, p.ldb, p.ldc)) == (
        dtype, m, n, k, trans_a, trans_b, aligned, 0.5, -2.0, lds)


def test_gemm_rechecks_its_weight_at_every_forward(monkeypatch):
    g = _gemm()
    monkeypatch.setattr(driver, "current_ordinal", lambda: 1)   # cuopjit.set_device(1) after set_weight
    with pytest.raises(ValueError, match=r"GemmFloat: weight is on device 0 but the current device is 1: call "
                                         r"cuopjit.set_device\(0\)"):
        g.forward(fake([2, 5], device=1), fake([2, 3], device=1))


def test_check_operand_compares_a_given_shape():
    g = cuopjit.GemmFloat()
    t = fake([2, 3])
    assert g.check_operand("bias", t, shape=(2, 3)) is t and g.check_operand("bias", t, shape=[2, 3]) is t
    with pytest.raises(ValueError, match=r"GemmFloat: bias has shape \[2, 3\], expected \[3, 2\]"):
        g.check_operand("bias", t, shape=(3, 2))
    with pytest.raises(ValueError, match=r"GemmFloat: bias must be 1-D, got shape \[2, 3\]"):
        g.check_operand("bias", t, ndim=1, shape=(2, 3))


def test_gemm_defaults():
    g = cuopjit.GemmDouble()
    assert (g.trans_a, g.trans_b, g.alpha, g.beta) == (False, False, 1.0, 0.0)
    g.set_weight(fake([5, 3], "float64"))
    p = g.problem(fake([2, 5], "float64"), fake([2, 3], "float64"))
    assert (p.m, p.n, p.k, p.trans_a, p.trans_b, p.alpha, p.beta) == (2, 3, 5, False, False, 1.0, 0.0)
