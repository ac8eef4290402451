"""Tensor: a C-contiguous device buffer with a shape and a dtype (float32 or float64).

Interop is zero-copy both ways: `tensor(x)` wraps a torch/CuPy/JAX array (read as cuopjit/interop.py says;
operators take them directly, see cuopjit/operands.py), and a Tensor exports `__dlpack__` and
`__cuda_array_interface__` so those libraries can wrap it in turn.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Iterable, Sequence

import numpy as np

from . import interop
from .device import driver, memory, transfer
from .errors import NoDeviceError
from .interop import DTYPES


def as_dtype(dtype: Any) -> np.dtype:
    """'float32', np.float32 or a torch dtype (or its name) -> a numpy dtype cuopjit supports, else TypeError."""
    dt = interop.np_dtype(dtype) if dtype.__hash__ is not None else None
    if dt is None:
        raise TypeError(f"dtype {dtype!r} is not supported: cuopjit tensors hold float32 or float64")
    return dt


_PLAN_KEYS: dict[tuple, int] = {}
_PLAN_KEYS_KEPT = 1 << 16
_next_plan_key = itertools.count(1)


def _plan_key(shape: tuple[int, ...], dtype: np.dtype, device: int, ptr: int) -> int:
    """One int per (shape, dtype, device, 16-byte alignment): what about a tensor decides a plan.

    Interned, so an operator's memo key is a tuple of small ints (cheap to hash on every forward).
    When the table is full it starts over with new numbers: never an old number for a new meaning."""
    k = (shape, dtype.char, device, ptr & 15)
    found = _PLAN_KEYS.get(k)
    if found is None:
        if len(_PLAN_KEYS) >= _PLAN_KEYS_KEPT:
            _PLAN_KEYS.clear()
        found = _PLAN_KEYS.setdefault(k, next(_next_plan_key))
    return found


def _shape(shape: Iterable[int] | int) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        raise ValueError(f"shape {shape!r} is not valid: dimensions must be integers >= 0")
    return tuple(int(d) for d in shape)


class Tensor:
    """A device array. Owns its memory unless it is a view of another library's array or tensor."""

    __slots__ = ("shape", "dtype", "size", "ptr", "device", "plan_key", "_nbytes", "_owner", "_owns", "__weakref__")

    def __init__(self, shape: Iterable[int] | int, dtype: Any = np.float32, *, device: int | None = None):
        self.shape = _shape(shape)
        self.dtype = as_dtype(dtype)
        self.size = math.prod(self.shape)
        try:
            self.device = driver.get_device(device).ordinal
        except NoDeviceError as exc:   # raised from here: no frames of the driver in the user's traceback
            raise exc.with_traceback(None) from None
        self._nbytes = self.size * self.dtype.itemsize
        self.ptr = memory.allocate(self._nbytes, self.device)
        self.plan_key = _plan_key(self.shape, self.dtype, self.device, self.ptr)
        self._owner, self._owns = None, True
        memory.track(self)

    @classmethod
    def _view(cls, ptr: int, shape: tuple[int, ...], dtype: np.dtype, device: int, owner: Any) -> "Tensor":
        """A Tensor over memory that `owner` keeps alive (None: the caller keeps it alive)."""
        t = object.__new__(_CLASSES[dtype])
        t.shape, t.dtype, t.size, t.ptr, t.device = shape, dtype, math.prod(shape), ptr, device
        t.plan_key = _plan_key(shape, dtype, device, ptr)
        t._nbytes, t._owner, t._owns = t.size * dtype.itemsize, owner, False
        return t

    # --- properties -------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={list(self.shape)}, dtype={self.dtype.name}, device={self.device})"

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 1

    # --- lifetime ---------------------------------------------------------------------------
    def release(self) -> None:
        """Give the device memory back now (stream-ordered on the default stream); later use raises."""
        if self._owns and self.ptr:
            memory.release(self.ptr, self._nbytes, self.device)
        self.ptr, self._owns, self._owner = 0, False, None
        self.shape = tuple(0 for _ in self.shape) if self.size else self.shape
        self.size = 0
        self.plan_key = -next(_next_plan_key)   # matches no plan: the next forward checks it and raises

    def __del__(self) -> None:
        try:
            if self._owns:   # a view has nothing to give back
                self.release()
        except Exception:  # interpreter shutdown (the driver may be gone), or __init__ raised
            pass

    # --- data movement ----------------------------------------------------------------------
    def ensure_live(self) -> None:
        """Raise ValueError when this tensor's memory was released (its memory_context ended)."""
        if self.ptr == 0 and self._nbytes:
            raise ValueError(f"{self!r} was released (its memory_context ended); create a new tensor")

    def copy_from(self, src: Any) -> "Tensor":
        """Copy from a NumPy array (host→device) or another Tensor (device→device); shapes must match."""
        self.ensure_live()
        if isinstance(src, Tensor):
            _same_shape("src", src.shape, self.shape)
            if src.dtype != self.dtype:
                raise TypeError(f"copy_from: src is {src.dtype.name}, this tensor is {self.dtype.name}")
            if self._nbytes:
                transfer.device_to_device(self.device, self.ptr, src.ptr, self._nbytes)
            return self
        arr = np.ascontiguousarray(src, dtype=self.dtype)
        _same_shape("src", arr.shape, self.shape)
        if self._nbytes:
            transfer.host_to_device(self.device, self.ptr, arr, self._nbytes)
        return self

    def to_numpy(self) -> np.ndarray:
        """A host copy (waits for the work queued before it)."""
        self.ensure_live()
        out = np.empty(self.shape, dtype=self.dtype)
        if self._nbytes:
            transfer.device_to_host(self.device, out, self.ptr, self._nbytes)
        return out

    def fill(self, value: float) -> "Tensor":
        """Set every element to `value` (NaN and inf included)."""
        self.ensure_live()
        if self._nbytes:
            transfer.fill(self.device, self.ptr, value, self.dtype, self.size)
        return self

    def zero(self) -> "Tensor":
        """Set every element to 0."""
        self.ensure_live()
        if self._nbytes:
            transfer.zero(self.device, self.ptr, self._nbytes)
        return self

    def reshape(self, *shape: Any) -> "Tensor":
        """A view with another shape and the same number of elements (shares memory)."""
        shape = _shape(shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape {list(self.shape)} ({self.size} elements) to {list(shape)}")
        return Tensor._view(self.ptr, shape, self.dtype, self.device, self)

    # --- interop ----------------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict:
        self.ensure_live()
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": None, "stream": 1}

    def _memory_view(self):
        self.ensure_live()
        return transfer.memory_view(self.ptr, self._nbytes, self, self.shape, self.dtype)

    def __dlpack__(self, *, stream: int | None = None, max_version=None, dl_device=None, copy=None):
        kwargs = {"stream": stream}
        if max_version is not None:
            kwargs["max_version"] = max_version
        return self._memory_view().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.device)  # kDLCUDA


class TensorFloat(Tensor):
    """A float32 tensor (cuOP `TensorFloat`)."""
    __slots__ = ()

    def __init__(self, shape: Iterable[int] | int, *, device: int | None = None):
        super().__init__(shape, np.float32, device=device)


class TensorDouble(Tensor):
    """A float64 tensor (cuOP `TensorDouble`)."""
    __slots__ = ()

    def __init__(self, shape: Iterable[int] | int, *, device: int | None = None):
        super().__init__(shape, np.float64, device=device)


_CLASSES = {np.dtype(np.float32): TensorFloat, np.dtype(np.float64): TensorDouble}


def _same_shape(name: str, got: Sequence[int], want: Sequence[int]) -> None:
    if tuple(got) != tuple(want):
        raise ValueError(f"{name} has shape {list(got)}, expected {list(want)}")


def _new(shape, dtype) -> Tensor:
    try:
        return _CLASSES[as_dtype(dtype)](shape)
    except NoDeviceError as exc:   # one line under the user's own call, not the driver's frames
        raise exc.with_traceback(None) from None


# --- other libraries' arrays ----------------------------------------------------------------------
for _cls in (Tensor, TensorFloat, TensorDouble):   # ours: never read as foreign arrays
    interop.register(_cls, None)


def wrap(obj: Any, who: str = "tensor(): the array", key: tuple | None = None) -> Tensor:
    """A view of a GPU array that keeps the array alive (zero-copy), or a one-line error naming `who`.
    `key`: the array's interop key when the caller has read it already."""
    if key is None:
        read = interop.reader(type(obj))
        key = None if read is None else read(obj)
    dtype = None if key is None else interop.np_dtype(key[2])
    if dtype is None or key[3] < 0:
        kind, reason = interop.why_not(obj)
        raise kind(f"{who} {reason}")
    return Tensor._view(key[0], tuple(key[1]), dtype, key[3], obj)


def from_dlpack(obj: Any) -> Tensor:
    """Wrap a C-contiguous float32/float64 GPU array (torch, CuPy, JAX, ...) without copying."""
    return wrap(obj, "from_dlpack(): the array")


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
    arr = np.asarray(data)
    if dtype is None:
        if arr.dtype not in DTYPES:
            if arr.dtype.kind in "iub" or arr.dtype == np.float16 or arr.dtype.kind == "O":
                arr = arr.astype(np.float32)
            else:
                as_dtype(arr.dtype)
        dtype = arr.dtype
    return _new(arr.shape, dtype).copy_from(arr)


def zeros(shape: Iterable[int] | int, dtype: Any = "float32") -> Tensor:
    return _new(shape, dtype).zero()


def ones(shape: Iterable[int] | int, dtype: Any = "float32") -> Tensor:
    return _new(shape, dtype).fill(1.0)


def empty(shape: Iterable[int] | int, dtype: Any = "float32") -> Tensor:
    """Uninitialised memory: for outputs that a kernel writes in full."""
    return _new(shape, dtype)


def random(shape: Iterable[int] | int, dtype: Any = "float32", mean: float = 0.0, std: float = 1.0,
           seed: int | None = None) -> Tensor:
    """Normally distributed values (drawn on the host with NumPy's PCG64, then copied)."""
    rng = np.random.default_rng(seed)
    return tensor(rng.normal(mean, std, _shape(shape)).astype(as_dtype(dtype)))


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
