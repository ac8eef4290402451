"""Tensors made from data: `tensor(x)` (host data copied, GPU arrays wrapped), and values computed on the
host: random normals, identities, ranges, coordinate grids (computed with NumPy and copied once).

The constant fills (zeros, ones, empty) live beside Tensor in cuopjit/tensor.py.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from . import interop
from .interop import DTYPES
from .tensor import Tensor, as_dtype, as_shape, new, wrap


def tensor(data: Any, dtype: Any = None) -> Tensor:
    """A Tensor from a NumPy array / nested list / CPU tensor (copied to the GPU) or a GPU array (wrapped,
    zero-copy: torch, CuPy, JAX, DLPack or the CUDA Array Interface)."""
    if isinstance(data, Tensor):
        return data
    read = interop.reader(type(data))
    key = None if read is None else read(data)
    if key is not None and key[3] >= 0 or read is not None and not interop.on_host(data):
        t = wrap(data, key=key)
        if dtype is not None and as_dtype(dtype) != t.dtype:
            raise TypeError(f"tensor(): the GPU array is {t.dtype.name}, dtype={dtype!r} asks for a copy; "
                            "convert it in its own library first")
        return t
    try:
        arr = np.asarray(data)
    except (TypeError, ValueError, RuntimeError) as exc:   # torch's CPU bfloat16 has no NumPy form: say so
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TypeError(f"tensor(): cannot read {type(data).__name__} data as a NumPy array ({why}); "
                        "move GPU-able tensors to the GPU first (x.cuda()): they are wrapped without a copy") from None
    if dtype is None:
        if arr.dtype not in DTYPES:
            if arr.dtype.kind in "iub" or arr.dtype.kind == "O":
                arr = arr.astype(np.float32)
            else:
                as_dtype(arr.dtype)
        dtype = arr.dtype
    return new(arr.shape, dtype).copy_from(arr)


def random(shape: Iterable[int] | int, dtype: Any = "float32", mean: float = 0.0, std: float = 1.0,
           seed: int | None = None) -> Tensor:
    """Normally distributed values (drawn on the host with NumPy's PCG64, then copied)."""
    rng = np.random.default_rng(seed)
    return tensor(rng.normal(mean, std, as_shape(shape)).astype(as_dtype(dtype)))


def eye(n: int, m: int | None = None, dtype: Any = "float32") -> Tensor:
    return tensor(np.eye(n, m, dtype=as_dtype(dtype)))


def linspace(start: float, stop: float, num: int = 50, dtype: Any = "float32") -> Tensor:
    return tensor(np.linspace(start, stop, num, dtype=as_dtype(dtype)))


def logspace(start: float, stop: float, num: int = 50, base: float = 10.0, dtype: Any = "float32") -> Tensor:
    return tensor(np.logspace(start, stop, num, base=base, dtype=as_dtype(dtype)))


def meshgrid(*xi: Any, indexing: str = "xy") -> list[Tensor]:
    """Coordinate matrices from 1-D inputs (Tensors or arrays), as numpy.meshgrid."""
    arrays = [x.to_numpy() if isinstance(x, Tensor) else np.asarray(x) for x in xi]
    return [tensor(np.ascontiguousarray(g)) for g in np.meshgrid(*arrays, indexing=indexing)]
