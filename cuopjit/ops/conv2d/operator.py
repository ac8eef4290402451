"""Convolution2DFloat / Double / Half / BFloat16: 2-D convolution of NCHW or channels_last tensors (cuOP
`Convolution2DFloat`; float16 / bfloat16 read exactly, products and sums in float32, y rounded once).

`Convolution2DFloat(in_channels, out_channels, kernel_h, kernel_w, stride_h=1, stride_w=1,
dilation_h=1, dilation_w=1, groups=1, relu=False, pad_h=0, pad_w=0)`; `set_weight(W)` with W of
shape [out_channels, in_channels / groups, kernel_h, kernel_w], optional `set_bias(b)` of shape
[out_channels]; `forward(x, y, pad_h=..., pad_w=...)` writes y = conv(x, W) + b (then max(., 0)
when relu) and returns it. The output is N x out_channels x OH x OW with PyTorch's formula

    OH = (H + 2 pad_h - dilation_h (kernel_h - 1) - 1) // stride_h + 1     (OW likewise)

which `output_shape(x_shape)` computes. Kernels: cuopjit/ops/conv2d/plans.py.

Layouts: x and y may each be contiguous (NCHW) or channels_last (`Tensor.layout`, torch's
memory_format=torch.channels_last): the tensor passed as y decides the output's layout, and every pairing
runs without a layout copy of x or y (NCHW x on the Hopper tensor-core kernel excepted: an internal NHWC copy,
counted in its time); output-shaped epilogue operands must have y's layout. The weight and bias are
contiguous. The weight is packed into the layouts the kernels read once per `set_weight` (and by the first
forward of a kernel that needs a layout not packed yet), into memory the operator keeps, not per forward:
call set_weight again after changing the weight's values in place.

`set_epilogue(expr, **bound)` (cuopjit/ops/epilogue_operator.py) replaces the whole epilogue: y = expr over acc
(the convolution), c (y's old value) and operands ([K] / [K, 1, 1] per channel, output-shaped full, ...), e.g.
`conv.set_epilogue("relu(acc * scale + shift + residual)", scale=s, shift=t)` then
`conv.forward(x, y, pad_h=1, pad_w=1, residual=r)`. relu=True and set_bias(b) are spellings of the epilogues
relu(acc), acc + bias and relu(acc + bias) (they keep their kernels: their ReLU maps NaN to 0, the expression's
keeps it); set_epilogue clears them, and they are refused while an expression is set.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...config import RunSettings
from ...device import driver, streams
from ...layout import CHANNELS_LAST, CONTIGUOUS
from ...run import executor
from ...target import Target
from ...tensor import Tensor
from . import packing, plans as conv2d_plans
from .problem import ConvPlan
from ..base import HALF_DTYPES, Operator, typed
from ..epilogue_operator import Fusable
from ..params import plan_setting

_LAYOUTS = (CONTIGUOUS, CHANNELS_LAST)


def _positive(name: str, value: Any, low: int = 1) -> int:
    if isinstance(value, bool) or int(value) != value or value < low:
        raise ValueError(f"{name}={value!r} is not allowed: it must be an integer >= {low}")
    return int(value)


def _no_expression(op: "Convolution2D", value: Any) -> None:
    """relu=True and set_bias are refused while a user epilogue is set (it is the whole epilogue)."""
    if value is not None and value is not False and op._fused is not None:
        raise ValueError(f"{type(op).__name__}: relu and set_bias are the epilogue relu(acc + bias), but the epilogue "
                         f"{op._fused.canonical!r} is set: write them into it, or call set_epilogue(None) first")


class Convolution2D(Fusable, Operator):
    """2-D convolution over NCHW with stride, padding, dilation, groups, bias and a fused ReLU, or a user epilogue."""

    family = conv2d_plans.FAMILY
    forward_names = ("x", "y", "pad_h", "pad_w")
    channels = True

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
        # packing.key(plan) -> (the packed weight's memory, its packing runner, the number of plan operands)
        self._packed: dict[tuple, tuple[Tensor, object, int]] = {}
        self._settings_changed()

    relu = plan_setting("relu", bool, _no_expression)

    @property
    def epilogue(self) -> str | None:
        """The epilogue's canonical text: the user's, relu=True / set_bias's equivalent, or None (y = acc)."""
        if self._fused is not None or not (self._relu or self._bias is not None):
            return super().epilogue
        inner = "(acc+bias)" if self._bias is not None else "acc"
        return f"relu({inner})" if self._relu else inner

    def set_epilogue(self, expression: Any, **bound: Any) -> None:
        """A user epilogue in place of bias and ReLU (both cleared); None: y = acc (see the module docstring)."""
        super().set_epilogue(expression, **bound)
        self._relu, self._bias = False, None
        self._settings_changed()

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.out_channels, self.in_channels // self.groups, self.kernel_h, self.kernel_w)

    def set_weight(self, weight: Tensor) -> None:
        """W of shape [out_channels, in_channels / groups, kernel_h, kernel_w], contiguous: packed again now into
        every layout earlier forwards packed (on the current stream), the others when a forward first needs them."""
        self._weight = self.check_operand("weight", weight, shape=self.weight_shape, layouts=(CONTIGUOUS,))
        self._settings_changed()
        for k, held in list(self._packed.items()):
            if held[0].device != self._weight.device:
                del self._packed[k]
            else:
                self._pack(held, streams.local.stream)

    def check_operand(self, name: str, t: Any, ndim: int | None = None, shape: Sequence[int] | None = None,
                      layouts: tuple[str, ...] = _LAYOUTS) -> Tensor:
        """The base check; contiguous and channels_last tensors both pass unless `layouts` says otherwise."""
        return super().check_operand(name, t, ndim, shape, layouts)

    def _pack(self, held: tuple, stream: int) -> None:
        """Run a packing (weight -> the kept memory) on `stream`."""
        memory, run, operands = held
        run((0, self._weight.ptr) + (0,) * (operands - 2), stream)

    def _choose(self, problem: Any, settings: RunSettings, target: Target, args: tuple, kwargs: dict):
        """The family's (or auto-tuning's) plan; one that packs the weight is split (conv2d/packing.py): the packing
        runs now, once for every plan of the same packed layout, into memory this operator keeps, and the plan
        returned reads it there."""
        plan = super()._choose(problem, settings, target, args, kwargs)
        size = packing.packed_bytes(plan) if isinstance(plan, ConvPlan) else 0
        if not size:
            return plan
        key = packing.key(plan)
        held = self._packed.get(key)
        if held is None:
            memory = Tensor((-(-size // 8),), np.float64)
            ordinal = driver.current_ordinal()
            run = executor.load(packing.split(plan, memory.ptr)[0], ordinal, settings, type(self).__name__)
            held = self._packed.setdefault(key, (memory, run, len(plan.operands)))
            s = streams.local.stream
            self._pack(held, s)
            streams.synchronize(s)     # the forward may run on another stream
        return packing.split(plan, held[0].ptr)[1]

    def set_bias(self, bias: Tensor | None) -> None:
        """b of shape [out_channels], added in the epilogue; None removes it."""
        _no_expression(self, bias)
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

    def problem(self, x: Tensor, y: Tensor, pad_h: int | None = None, pad_w: int | None = None, **operands: Any
                ) -> conv2d_plans.ConvProblem | None:
        name = type(self).__name__
        if self._weight is None:
            raise ValueError(f"{name}: no weight: call set_weight(W) with W of shape {list(self.weight_shape)} "
                             "before forward")
        self.check_operand("x", x, ndim=4)
        self.check_operand("y", y)
        self.check_operand("weight", self._weight, shape=self.weight_shape, layouts=(CONTIGUOUS,))
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
        fused = self.epilogue_key(expected, operands)
        self._check_full_layouts(y, operands)
        if y.size == 0:
            return None
        if n * expected[2] * expected[3] >= 2 ** 31:
            raise ValueError(f"{name}: {n * expected[2] * expected[3]} output pixels per channel: the kernels "
                             "index pixels with 32-bit integers; split the batch")
        return conv2d_plans.ConvProblem(self.dtype.name, n, c, h, w, self.out_channels, self.kernel_h,
                                          self.kernel_w, self.stride_h, self.stride_w, ph, pw, self.dilation_h,
                                          self.dilation_w, self.groups, self._bias is not None, self._relu,
                                          (y.ptr & 15) == 0, fused, x.layout == CHANNELS_LAST,
                                          y.layout == CHANNELS_LAST, (x.ptr | self._weight.ptr) & 15 == 0)

    def _check_full_layouts(self, y: Tensor, operands: dict) -> None:
        """Output-shaped epilogue operands are indexed as y is: they must have y's layout."""
        if self._fused is None:
            return
        for name in self._fused.operands:
            v = operands.get(name, self._bound.get(name))
            if isinstance(v, Tensor) and tuple(v.shape) == tuple(y.shape) and v.layout != y.layout:
                raise ValueError(f"{type(self).__name__}: epilogue operand {name} is {v.layout} but y is {y.layout}: "
                                 f"output-shaped operands must have y's layout")

    def work(self, x: Tensor, y: Tensor, pad_h: int | None = None, pad_w: int | None = None,
             **operands: Any) -> tuple[float, float]:
        taps = self.in_channels // self.groups * self.kernel_h * self.kernel_w
        reads_y = self._fused is not None and "c" in self._fused.names
        return (2.0 * y.size * taps,
                float((x.size + y.size * (2 if reads_y else 1) + self._weight.size) * self.dtype.itemsize
                      + self.epilogue_bytes(operands)))


Convolution2DFloat, Convolution2DDouble = typed(Convolution2D, "Convolution2D", "2-D convolution")
Convolution2DHalf, Convolution2DBFloat16 = typed(Convolution2D, "Convolution2D", "2-D convolution", HALF_DTYPES)


