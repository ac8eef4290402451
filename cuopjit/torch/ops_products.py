"""The product ops: cuopjit::gemm, linear, matmul, bmm, gemv and conv2d (schemas, output shapes, launches).

    linear(x, weight, bias=None)       x @ weightᵀ + bias over x's last axis, as F.linear: a GEMM with
                                       B transposed (with a bias: its epilogue acc + bias, one launch)
    matmul(a, b)                       torch.matmul / NumPy rules (1-D operands, broadcast batches)
    bmm(a, b)                          [b, m, k] @ [b, k, n], as torch.bmm
    gemv(a, x, trans=False)            a @ x (aᵀ @ x), as torch.mv
    conv2d(x, weight, bias=None, stride=[1, 1], padding=[0, 0], dilation=[1, 1], groups=1)   as F.conv2d (NCHW)
    gemm(a, b, trans_a=False, trans_b=False, alpha=1.0)

Every op takes float32 and float64 tensors, and float16 / bfloat16 where its family has 16-bit classes (GEMM,
MatMul, BatchMatMul, GEMV, Convolution2D: all of these): one dtype for every operand.
Weights (linear's, gemv's matrix, conv2d's weight and bias) reach the operator through `hold`: set once
per tensor, not per call. The GEMM-family operators read their weights where they lie (a held weight is a view),
so one operator serves every weight of a setting, and a prepared call passes the weight's pointer as it passes
the activations'. Conv2d packs its weight: its operator belongs to the weight and bias (owner=), and a prepared
call keys on their identity (TorchOp.weights); pass parameters there, not tensors made per call.
"""
from __future__ import annotations

import math
from typing import Sequence

from .common import TorchOp, forward, hold, instance, lock, pair, view


def _gemm_shape(a, b, trans_a=False, trans_b=False, alpha=1.0):
    return (a.shape[1] if trans_a else a.shape[0], b.shape[0] if trans_b else b.shape[1])


def _gemm(out, s, a, b, trans_a=False, trans_b=False, alpha=1.0):
    op = instance("gemm", a.dtype, trans_a, trans_b, alpha, 0.0)
    with lock:
        hold(op, "set_weight", b)
        forward(op, view(a), view(out), stream=s)


def _linear_shape(x, weight, bias=None):
    return (*x.shape[:-1], weight.shape[0])


def _linear(out, s, x, weight, bias=None):
    k, n = x.shape[-1], weight.shape[0]
    rows = math.prod(x.shape[:-1])
    if bias is None:
        op = instance("gemm", x.dtype, False, True, 1.0, 0.0)
        with lock:
            hold(op, "set_weight", weight)
            forward(op, view(x, (rows, k)), view(out, (rows, n)), stream=s)
        return
    op = instance("gemm", x.dtype, False, True, epilogue="acc + bias")   # one launch, as F.linear
    with lock:
        hold(op, "set_weight", weight)
        forward(op, view(x, (rows, k)), view(out, (rows, n)), stream=s, bias=view(bias))


def _broadcast(x: Sequence[int], y: Sequence[int]) -> tuple:
    """NumPy's broadcast of two batch shapes (mismatches are left to the operator's check, which names them)."""
    n = max(len(x), len(y))
    x, y = (1,) * (n - len(x)) + tuple(x), (1,) * (n - len(y)) + tuple(y)
    return tuple(q if p == 1 else p for p, q in zip(x, y))


def _matmul_shape(a, b):
    sa = (1, *a.shape) if a.dim() == 1 else a.shape
    sb = (*b.shape, 1) if b.dim() == 1 else b.shape
    batch = _broadcast(sa[:-2], sb[:-2]) if len(sa) > 2 or len(sb) > 2 else ()
    return (*batch, *((sa[-2],) if a.dim() > 1 else ()), *((sb[-1],) if b.dim() > 1 else ()))


def _matmul(out, s, a, b):
    forward(instance("matmul", a.dtype), view(a), view(b), view(out), stream=s)


def _bmm(out, s, a, b):
    forward(instance("batchmatmul", a.dtype), view(a), view(b), view(out), stream=s)


def _gemv_shape(a, x, trans=False):
    return (a.shape[1] if trans else a.shape[0],)


def _gemv(out, s, a, x, trans=False):
    op = instance("gemv", a.dtype, trans, 1.0, 0.0)
    with lock:
        hold(op, "set_weight", a)
        forward(op, view(x), view(out), stream=s)


def _conv_shape(x, weight, bias=None, stride: Sequence[int] = (1, 1), padding: Sequence[int] = (0, 0),
                dilation: Sequence[int] = (1, 1), groups=1):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    kh, kw = weight.shape[2], weight.shape[3]
    return (x.shape[0], weight.shape[0], (x.shape[2] + 2 * ph - dh * (kh - 1) - 1) // sh + 1,
            (x.shape[3] + 2 * pw - dw * (kw - 1) - 1) // sw + 1)


def _conv2d(out, s, x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    o, cg, kh, kw = weight.shape
    op = instance("conv2d", x.dtype, cg * groups, o, kh, kw, sh, sw, dh, dw, groups, owner=(weight, bias))
    with lock:
        hold(op, "set_weight", weight)
        hold(op, "set_bias", bias)
        forward(op, view(x), view(out), pad_h=ph, pad_w=pw, stream=s)


PRODUCTS: dict[str, TorchOp] = {
    "gemm": TorchOp("(Tensor a, Tensor b, bool trans_a=False, bool trans_b=False, float alpha=1.0) -> Tensor",
                    _gemm_shape, _gemm, family="gemm"),
    "linear": TorchOp("(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor", _linear_shape, _linear,
                      family="gemm"),
    "matmul": TorchOp("(Tensor a, Tensor b) -> Tensor", _matmul_shape, _matmul, family="matmul"),
    "bmm": TorchOp("(Tensor a, Tensor b) -> Tensor", lambda a, b: (a.shape[0], a.shape[1], b.shape[2]), _bmm,
                   family="batchmatmul"),
    "gemv": TorchOp("(Tensor a, Tensor x, bool trans=False) -> Tensor", _gemv_shape, _gemv, family="gemv"),
    "conv2d": TorchOp("(Tensor x, Tensor weight, Tensor? bias=None, int[2] stride=[1, 1], int[2] padding=[0, 0], "
                      "int[2] dilation=[1, 1], int groups=1) -> Tensor", _conv_shape, _conv2d, weights=(1, 2),
                      family="conv2d"),
}
