"""ReluFloat / ReluDouble: y = max(x, 0) elementwise (NaN stays NaN), in place when y is x."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor
from .elementwise import Elementwise


class Relu(Elementwise):
    """Rectified linear unit over a whole tensor; x and y must have the same shape."""

    def forward(self, x: Tensor, y: Tensor | None = None) -> Tensor:
        """y = max(x, 0); y defaults to x (in place); returns y."""
        if y is None:
            y = x
        try:
            key = (x.shape, y.shape, x.dtype, y.dtype, x.device, y.device, (x.ptr | y.ptr) & 15)
        except AttributeError:
            key = None
        launch = self._launches.get(key)
        if launch is None:
            self._check("x", x)
            self._check("y", y)
            if tuple(x.shape) != tuple(y.shape):
                raise ValueError(f"{type(self).__name__}: y has shape {list(y.shape)} but x has shape "
                                 f"{list(x.shape)}: they must be equal")
            if x.size == 0:
                return y
            launch = self._launches[key] = self._map_launch("relu", x, y)
        launch(x.ptr, y.ptr)
        return y

    def work(self, x: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return float(x.size), 2.0 * x.size * self.dtype.itemsize

    def specs(self) -> list:
        return self._map_specs("relu")


class ReluFloat(Relu):
    """float32 ReLU (cuOP `ReluFloat`)."""
    dtype = np.dtype(np.float32)


class ReluDouble(Relu):
    """float64 ReLU (cuOP `ReluDouble`)."""
    dtype = np.dtype(np.float64)
