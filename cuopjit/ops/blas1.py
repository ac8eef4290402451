"""BLAS level 1 (cuOP ScalFloat, AxpyFloat, CopyFloat, DotFloat and their Double twins).

x and y may have any shapes holding the same number of elements (as cuBLAS sees them: flat
vectors, unit stride). Scal, Axpy and Copy are the streaming map kernel of elementwise.py;
Dot is a deterministic two-pass reduction (templates/dot.cu.jinja).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..config import ConfigSnapshot
from ..launch import Launch
from ..tensor import Tensor, empty
from .base import Operator, dtype_tag, scalar_t
from .elementwise import (BLOCK_SIZES, STREAM_BYTES, TILE_SIZES, Elementwise, persistent_grid, stream_geometry)


class Scal(Elementwise):
    """x = alpha * x, in place."""

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = float(alpha)

    def set_alpha(self, alpha: float) -> None:
        self.alpha = float(alpha)
        self._launches.clear()

    def forward(self, x: Tensor) -> Tensor:
        """x *= alpha; returns x."""
        key = self._key(x, x)
        launch = self._launches.get(key)
        if launch is None:
            self._check("x", x)
            if x.size == 0:
                return x
            launch = self._launches[key] = self._map_launch("scal", x, x, self.alpha)
        launch(x.ptr, x.ptr)
        return x

    def work(self, x: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return float(x.size), 2.0 * x.size * self.dtype.itemsize

    def specs(self) -> list:
        return self._map_specs("scal")


class Axpy(Elementwise):
    """y = alpha * x + y."""

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = float(alpha)

    def set_alpha(self, alpha: float) -> None:
        self.alpha = float(alpha)
        self._launches.clear()

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        """y += alpha * x; returns y."""
        key = self._key(x, y)
        launch = self._launches.get(key)
        if launch is None:
            self._same_size("x", x, "y", y)
            if x.size == 0:
                return y
            launch = self._launches[key] = self._map_launch("axpy", x, y, self.alpha)
        launch(x.ptr, y.ptr)
        return y

    def work(self, x: Tensor, y: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return 2.0 * x.size, 3.0 * x.size * self.dtype.itemsize

    def specs(self) -> list:
        return self._map_specs("axpy")


class Copy(Elementwise):
    """y = x."""

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        """Copy x into y (same number of elements); returns y."""
        key = self._key(x, y)
        launch = self._launches.get(key)
        if launch is None:
            self._same_size("x", x, "y", y)
            if x.size == 0:
                return y
            launch = self._launches[key] = self._map_launch("copy", x, y)
        launch(x.ptr, y.ptr)
        return y

    def work(self, x: Tensor, y: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return 0.0, 2.0 * x.size * self.dtype.itemsize

    def specs(self) -> list:
        return self._map_specs("copy")


# --- Dot -------------------------------------------------------------------------------------
DOT_TEMPLATE = "dot.cu.jinja"


def dot_kernel(dtype: np.dtype, cfg: ConfigSnapshot, n: int, aligned: bool) -> tuple[str, str, dict]:
    """-> (template, readable name, params) of the two-pass dot product."""
    threads, vec, items = stream_geometry(dtype, cfg, aligned, vectors=4)
    streaming = 2 * n * np.dtype(dtype).itemsize > STREAM_BYTES
    params = {"scalar_t": scalar_t(dtype), "unroll": bool(cfg.enable_loop_unroll), "THREADS": threads,
              "VEC": vec, "ITEMS": items, "STREAM": streaming}
    name = (f"dot_{dtype_tag(dtype)}_b{threads}_v{vec}x{items}" + ("_cs" if streaming else "")
            + ("" if cfg.enable_loop_unroll else "_nounroll"))
    return DOT_TEMPLATE, name, params


class _DotLaunch:
    """The partial-sum launch, the final launch and their buffers for one (n, alignment)."""

    __slots__ = ("partial", "final", "buffer", "result")

    def __init__(self, partial: Launch, final: Launch, buffer: Tensor, result: Tensor):
        self.partial, self.final, self.buffer, self.result = partial, final, buffer, result


class Dot(Operator):
    """result = sum(x * y), deterministic: the same inputs give the same bits on every run."""

    kernel_types = ("auto", "tiled")
    tile_sizes = TILE_SIZES
    block_sizes = BLOCK_SIZES
    uses_shared_memory = False  # only one word per warp for the block reduction

    def forward(self, x: Tensor, y: Tensor, result: Tensor | None = None) -> Any:
        """x . y as a Python float (waits for the GPU).

        With `result` (a one-element Tensor of this dtype) the sum is written there instead and
        the call returns `result` at once, without waiting (like cuBLAS's device pointer mode).
        """
        key = Elementwise._key(x, y)
        launch = self._launches.get(key)
        if launch is None:
            Elementwise._same_size(self, "x", x, "y", y)
            if x.size == 0:
                if result is None:
                    return 0.0
                self._check_result(result)
                return result.zero()
            launch = self._launches[key] = self._make_launch(x, y)
        out = launch.result.ptr
        if result is not None:
            self._check_result(result)
            out = result.ptr
        launch.partial(x.ptr, y.ptr, launch.buffer.ptr)
        launch.final(launch.buffer.ptr, out)
        if result is not None:
            return result
        return float(launch.result.to_numpy()[0])

    def _check_result(self, result: Tensor) -> None:
        self._check("result", result)
        if result.size != 1:
            raise ValueError(f"{type(self).__name__}: result has shape {list(result.shape)}, "
                             "expected one element ([1] or [])")

    def _make_launch(self, x: Tensor, y: Tensor) -> _DotLaunch:
        n = x.size
        aligned = ((x.ptr | y.ptr) & 15) == 0
        template, name, params = dot_kernel(self.dtype, self._config, n, aligned)
        threads = params["THREADS"]
        blocks = persistent_grid(-(-n // (threads * params["VEC"] * params["ITEMS"])), threads)
        buffer, result = empty([blocks], self.dtype), empty([1], self.dtype)
        partial = self._prepare(self._spec(template, "dot_partial", name, params), (blocks, 1, 1), (threads, 1, 1),
                                0, [("ptr", x.ptr), ("ptr", y.ptr), ("ptr", buffer.ptr), ("i64", n)])
        final = self._prepare(self._spec(template, "dot_final", name, params), (1, 1, 1), (threads, 1, 1), 0,
                              [("ptr", buffer.ptr), ("ptr", result.ptr), ("i32", blocks)])
        return _DotLaunch(partial, final, buffer, result)

    def work(self, x: Tensor, y: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return 2.0 * x.size, 2.0 * x.size * self.dtype.itemsize

    def specs(self) -> list:
        out = []
        for n, aligned in ((1 << 28, True), (1 << 20, True), (4097, False)):
            template, name, params = dot_kernel(self.dtype, self._config, n, aligned)
            spec = self._spec(template, "dot_partial", name, params)
            if spec not in out:
                out.append(spec)
        return out


class ScalFloat(Scal):
    """float32 SCAL (cuOP `ScalFloat`)."""
    dtype = np.dtype(np.float32)


class ScalDouble(Scal):
    """float64 SCAL (cuOP `ScalDouble`)."""
    dtype = np.dtype(np.float64)


class AxpyFloat(Axpy):
    """float32 AXPY (cuOP `AxpyFloat`)."""
    dtype = np.dtype(np.float32)


class AxpyDouble(Axpy):
    """float64 AXPY (cuOP `AxpyDouble`)."""
    dtype = np.dtype(np.float64)


class CopyFloat(Copy):
    """float32 COPY (cuOP `CopyFloat`)."""
    dtype = np.dtype(np.float32)


class CopyDouble(Copy):
    """float64 COPY (cuOP `CopyDouble`)."""
    dtype = np.dtype(np.float64)


class DotFloat(Dot):
    """float32 DOT (cuOP `DotFloat`), accumulated in float32 over many independent partial sums."""
    dtype = np.dtype(np.float32)


class DotDouble(Dot):
    """float64 DOT (cuOP `DotDouble`)."""
    dtype = np.dtype(np.float64)
