"""Convolution2DFloat / Convolution2DDouble: NCHW 2-D convolution (cuOP `Convolution2DFloat`).

`Convolution2DFloat(in_channels, out_channels, kernel_h, kernel_w, stride_h=1, stride_w=1,
dilation_h=1, dilation_w=1, groups=1, relu=False, pad_h=0, pad_w=0)`; `set_weight(W)` with W of
shape [out_channels, in_channels / groups, kernel_h, kernel_w], optional `set_bias(b)` of shape
[out_channels]; `forward(x, y, pad_h=..., pad_w=...)` writes y = conv(x, W) + b (then max(., 0)
when relu) and returns it. The output is N x out_channels x OH x OW with PyTorch's formula

    OH = (H + 2 pad_h - dilation_h (kernel_h - 1) - 1) // stride_h + 1     (OW likewise)

which `output_shape(x_shape)` computes. Kernels: cuopjit/ops/conv2d_plans.py.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...tensor import Tensor
from . import plans as conv2d_plans
from ..base import Operator
from ..params import plan_setting


def _positive(name: str, value: Any, low: int = 1) -> int:
    if isinstance(value, bool) or int(value) != value or value < low:
        raise ValueError(f"{name}={value!r} is not allowed: it must be an integer >= {low}")
    return int(value)


class Convolution2D(Operator):
    """2-D convolution over NCHW with stride, padding, dilation, groups, bias and a fused ReLU."""

    family = conv2d_plans.FAMILY

    def __init__(self, in_channels: int, out_channels: int, kernel_h: int, kernel_w: int, stride_h: int = 1,
                 stride_w: int = 1, dilation_h: int = 1, dilation_w: int = 1, groups: int = 1, relu: bool = False,
                 pad_h: int = 0, pad_w: int = 0):
        super().__init__()
        name = type(self).__name__
        self.in_channels = _positive("in_channels", in_channels)
        self.out_channels = _positive("out_channels", out_channels)
        self.kernel_h, self.kernel_w = _positive("kernel_h", kernel_h), _positive("kernel_w", kernel_w)
        self.stride_h, self.stride_w = _positive("stride_h", stride_h), _positive("stride_w", stride_w)
        self.dilation_h, self.dilation_w = _positive("dilation_h", dilation_h), _positive("dilation_w", dilation_w)
        self.groups = _positive("groups", groups)
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"{name}: groups={self.groups} must divide in_channels={self.in_channels} and "
                             f"out_channels={self.out_channels}")
        self.pad_h, self.pad_w = _positive("pad_h", pad_h, 0), _positive("pad_w", pad_w, 0)
        self._relu = bool(relu)
        self._weight: Tensor | None = None
        self._bias: Tensor | None = None
        self._settings_changed()

    relu = plan_setting("relu", bool)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.out_channels, self.in_channels // self.groups, self.kernel_h, self.kernel_w)

    def set_weight(self, weight: Tensor) -> None:
        """W of shape [out_channels, in_channels / groups, kernel_h, kernel_w] (read at every forward)."""
        self._weight = self.check_operand("weight", weight, shape=self.weight_shape)
        self._settings_changed()

    def set_bias(self, bias: Tensor | None) -> None:
        """b of shape [out_channels], added in the epilogue; None removes it."""
        self._bias = None if bias is None else self.check_operand("bias", bias, shape=(self.out_channels,))
        self._settings_changed()

    def _plan_settings(self) -> tuple:
        w, b = self._weight, self._bias
        return (self._relu, None if w is None else w.device, None if b is None else b.device)

    def _pads(self, pad_h: int | None, pad_w: int | None) -> tuple[int, int]:
        return (self.pad_h if pad_h is None else _positive("pad_h", pad_h, 0),
                self.pad_w if pad_w is None else _positive("pad_w", pad_w, 0))

    def _out_size(self, size: int, pad: int, kernel: int, dilation: int, stride: int, axis: str) -> tuple[int, str]:
        """The output extent along one axis and the formula with its numbers (for error messages)."""
        out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
        a = axis.lower()
        return out, (f"O{axis} = ({axis} + 2*pad_{a} - dilation_{a}*(kernel_{a}-1) - 1) // stride_{a} + 1 = "
                     f"({size} + 2*{pad} - {dilation}*({kernel}-1) - 1) // {stride} + 1 = {out}")

    def output_shape(self, shape: Sequence[int], pad_h: int | None = None, pad_w: int | None = None
                     ) -> tuple[int, int, int, int]:
        """N x out_channels x OH x OW for an input of `shape` (N x C x H x W); ValueError if it is empty."""
        n, c, h, w = shape
        ph, pw = self._pads(pad_h, pad_w)
        oh, fh = self._out_size(h, ph, self.kernel_h, self.dilation_h, self.stride_h, "H")
        ow, fw = self._out_size(w, pw, self.kernel_w, self.dilation_w, self.stride_w, "W")
        if oh < 1 or ow < 1:
            raise ValueError(f"{type(self).__name__}: the output of x {list(shape)} would be empty: {fh}; {fw}")
        return (n, self.out_channels, oh, ow)

    def bind(self, x: Tensor, y: Tensor, pad_h: int | None = None, pad_w: int | None = None) -> tuple:
        b = self._bias
        return ((x.plan_key, y.plan_key, pad_h, pad_w, self._state),
                (x.ptr, self._weight.ptr, 0 if b is None else b.ptr, y.ptr), y)

    def problem(self, x: Tensor, y: Tensor, pad_h: int | None = None, pad_w: int | None = None
                ) -> conv2d_plans.ConvProblem | None:
        name = type(self).__name__
        if self._weight is None:
            raise ValueError(f"{name}: no weight: call set_weight(W) with W of shape {list(self.weight_shape)} "
                             "before forward")
        self.check_operand("x", x, ndim=4)
        self.check_operand("y", y)
        self.check_operand("weight", self._weight, shape=self.weight_shape)
        if self._bias is not None:
            self.check_operand("bias", self._bias, shape=(self.out_channels,))
        n, c, h, w = x.shape
        if c != self.in_channels:
            raise ValueError(f"{name}: x has shape {list(x.shape)} with C={c} channels but the weight "
                             f"{list(self.weight_shape)} expects in_channels={self.in_channels} "
                             f"({self.groups} group(s) of {self.in_channels // self.groups})")
        expected = self.output_shape(x.shape, pad_h, pad_w)
        ph, pw = self._pads(pad_h, pad_w)
        if tuple(y.shape) != expected:
            _, fh = self._out_size(h, ph, self.kernel_h, self.dilation_h, self.stride_h, "H")
            _, fw = self._out_size(w, pw, self.kernel_w, self.dilation_w, self.stride_w, "W")
            raise ValueError(f"{name}: y has shape {list(y.shape)}, expected {list(expected)}: {fh}; {fw}")
        if y.size == 0:
            return None
        if n * expected[2] * expected[3] >= 2 ** 31:
            raise ValueError(f"{name}: {n * expected[2] * expected[3]} output pixels per channel: the kernels "
                             "index pixels with 32-bit integers; split the batch")
        return conv2d_plans.ConvProblem(self.dtype.name, n, c, h, w, self.out_channels, self.kernel_h,
                                          self.kernel_w, self.stride_h, self.stride_w, ph, pw, self.dilation_h,
                                          self.dilation_w, self.groups, self._bias is not None, self._relu,
                                          (y.ptr & 15) == 0)

    def work(self, x: Tensor, y: Tensor, pad_h: int | None = None, pad_w: int | None = None) -> tuple[float, float]:
        taps = self.in_channels // self.groups * self.kernel_h * self.kernel_w
        return (2.0 * y.size * taps,
                float((x.size + y.size + self._weight.size) * self.dtype.itemsize))


class Convolution2DFloat(Convolution2D):
    """float32 2-D convolution (cuOP `Convolution2DFloat`)."""
    dtype = np.dtype(np.float32)


class Convolution2DDouble(Convolution2D):
    """float64 2-D convolution (cuOP `Convolution2DDouble`)."""
    dtype = np.dtype(np.float64)
