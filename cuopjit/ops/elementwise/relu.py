"""ReluFloat / ReluDouble / ReluHalf / ReluBFloat16: y = max(x, 0) elementwise (NaN stays NaN), in place when y is x.

A map reads x's buffer in memory order, so any layout works (contiguous, channels_last, transposed) when x and y
share it (memory order: a channels_last y of C == 1 is contiguous); the kernel is the same for all of them."""
from __future__ import annotations

from typing import Any


from ...layout import LAYOUTS
from ...tensor import Tensor
from . import kernels as elementwise
from ..base import Operator, typed
from ..layouts import same_layout


class Relu(Operator):
    """Rectified linear unit over a whole tensor: `forward(x, y=None)`; y defaults to x (in place); returns y."""

    family = elementwise.family("relu")

    def bind(self, x: Tensor, y: Tensor | None = None) -> tuple:
        y = x if y is None else y
        return (x.plan_key, y.plan_key), (x.ptr, y.ptr), y

    def problem(self, x: Tensor, y: Tensor | None = None) -> elementwise.MapProblem | None:
        y = x if y is None else y
        x = self.check_operand("x", x, layouts=LAYOUTS)
        y = self.check_operand("y", y, layouts=LAYOUTS)
        if tuple(x.shape) != tuple(y.shape):
            raise ValueError(f"{type(self).__name__}: y has shape {list(y.shape)} but x has shape "
                             f"{list(x.shape)}: they must be equal")
        same_layout(type(self).__name__, [("x", x), ("y", y)])
        if x.size == 0:
            return None
        return elementwise.MapProblem("relu", self.dtype.name, x.size, ((x.ptr | y.ptr) & 15) == 0)

    def work(self, x: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return float(x.size), 2.0 * x.size * self.dtype.itemsize


ReluFloat, ReluDouble, ReluHalf, ReluBFloat16 = typed(Relu, "Relu", "ReLU", elementwise.DTYPES)


