"""Tensor: a device buffer with a shape, a dtype (float32, float64, float16, bfloat16) and a layout (cuopjit/layout.py:
contiguous, channels_last or transposed; `.shape` is always the logical one, as torch reports it).

Interop is zero-copy both ways: `tensor(x)` wraps a torch/CuPy/JAX array (read as cuopjit/interop.py says;
operators take them directly, see cuopjit/operands.py), and a Tensor exports `__dlpack__` and
`__cuda_array_interface__` so those libraries can wrap it in turn.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, ClassVar, Iterable, Sequence

import numpy as np

from . import interop, layout as layouts
from .device import driver, memory, transfer
from .errors import NoDeviceError
from .layout import CHANNELS_LAST, CONTIGUOUS, TRANSPOSED


def as_dtype(dtype: Any) -> np.dtype:
    """'float32', np.float32 or a torch dtype (or its name) -> a numpy dtype cuopjit supports, else TypeError."""
    dt = interop.np_dtype(dtype) if dtype.__hash__ is not None else None
    if dt is None:
        raise TypeError(f"dtype {dtype!r} is not supported: cuopjit tensors hold {interop.HELD}")
    return dt


_PLAN_KEYS: dict[tuple, int] = {}
_PLAN_KEYS_KEPT = 1 << 16
_next_plan_key = itertools.count(1)


def _plan_key(shape: tuple[int, ...], dtype: np.dtype, device: int, ptr: int, layout: str) -> int:
    """One int per (shape, dtype, device, 16-byte alignment, layout): what about a tensor decides a plan.

    Interned, so an operator's memo key is a tuple of small ints (cheap to hash on every forward).
    When the table is full it starts over with new numbers: never an old number for a new meaning."""
    k = (shape, dtype.char, device, ptr & 15, layout)
    found = _PLAN_KEYS.get(k)
    if found is None:
        if len(_PLAN_KEYS) >= _PLAN_KEYS_KEPT:
            _PLAN_KEYS.clear()
        found = _PLAN_KEYS.setdefault(k, next(_next_plan_key))
    return found


def as_shape(shape: Iterable[int] | int) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        raise ValueError(f"shape {shape!r} is not valid: dimensions must be integers >= 0")
    return tuple(int(d) for d in shape)


class Tensor:
    """A device array. Owns its memory unless it is a view of another library's array or tensor."""

    __slots__ = ("shape", "dtype", "size", "ptr", "device", "plan_key", "layout", "_nbytes", "_owner", "_owns",
                 "__weakref__")

    def __init__(self, shape: Iterable[int] | int, dtype: Any = np.float32, *, device: int | None = None,
                 layout: str = CONTIGUOUS):
        self.shape = as_shape(shape)
        self.layout = layouts.check(layout, self.shape)
        self.dtype = as_dtype(dtype)
        self.size = math.prod(self.shape)
        try:
            self.device = driver.get_device(device).ordinal
        except NoDeviceError as exc:   # raised from here: no frames of the driver in the user's traceback
            raise exc.with_traceback(None) from None
        self._nbytes = self.size * self.dtype.itemsize
        self.ptr = memory.allocate(self._nbytes, self.device)
        self.plan_key = _plan_key(self.shape, self.dtype, self.device, self.ptr, self.layout)
        self._owner, self._owns = None, True
        memory.track(self)

    @classmethod
    def _view(cls, ptr: int, shape: tuple[int, ...], dtype: np.dtype, device: int, owner: Any,
              layout: str = CONTIGUOUS) -> "Tensor":
        """A Tensor over memory that `owner` keeps alive (None: the caller keeps it alive)."""
        t = object.__new__(_CLASSES[dtype])     # one statement per slot, the plan key's probe inline: this
        t.shape = shape                          # runs in every cuopjit.tensor(torch_tensor)
        t.dtype = dtype
        t.ptr = ptr
        t.device = device
        t.layout = layout
        t.size = size = math.prod(shape)
        found = _PLAN_KEYS.get((shape, dtype.char, device, ptr & 15, layout))
        t.plan_key = found if found is not None else _plan_key(shape, dtype, device, ptr, layout)
        t._nbytes = size * dtype.itemsize
        t._owner = owner
        t._owns = False
        return t

    # --- properties -------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides of the logical dimensions (what the layout implies)."""
        return layouts.strides(self.shape, self.layout)

    @property
    def mT(self) -> "Tensor":
        """The transpose of the last two dimensions as a view (contiguous <-> transposed; shares memory)."""
        if self.layout == CHANNELS_LAST or self.ndim < 2:
            raise ValueError(f"mT needs a contiguous or transposed tensor of >= 2 dimensions, got {self!r}")
        shape = self.shape[:-2] + (self.shape[-1], self.shape[-2])
        flipped = CONTIGUOUS if self.layout == TRANSPOSED else TRANSPOSED
        return Tensor._view(self.ptr, shape, self.dtype, self.device, self, flipped)

    def __repr__(self) -> str:
        laid = "" if self.layout == CONTIGUOUS else f", layout={self.layout}"
        return f"{type(self).__name__}(shape={list(self.shape)}, dtype={self.dtype.name}, device={self.device}{laid})"

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
        """Copy from a NumPy array (host→device, the logical array) or another Tensor of the same layout
        (device→device); shapes must match."""
        self.ensure_live()
        if isinstance(src, Tensor):
            _same_shape("src", src.shape, self.shape)
            if src.dtype != self.dtype:
                raise TypeError(f"copy_from: src is {src.dtype.name}, this tensor is {self.dtype.name}")
            if src.layout != self.layout:
                raise ValueError(f"copy_from: src is {src.layout}, this tensor is {self.layout}: convert with "
                                 f"cuopjit.{'channels_last' if self.layout == CHANNELS_LAST else 'contiguous'}(src)")
            if self._nbytes:
                transfer.device_to_device(self.device, self.ptr, src.ptr, self._nbytes)
            return self
        arr = np.asarray(src, dtype=self.dtype)
        _same_shape("src", arr.shape, self.shape)
        arr = layouts.to_storage(arr, self.layout)
        if self._nbytes:
            transfer.host_to_device(self.device, self.ptr, arr, self._nbytes)
        return self

    def to_numpy(self) -> np.ndarray:
        """A host copy of the logical array (waits for the work queued before it); a channels_last or
        transposed tensor gives the matching strided view of its buffer's copy."""
        self.ensure_live()
        out = np.empty(layouts.storage_shape(self.shape, self.layout), dtype=self.dtype)
        if self._nbytes:
            transfer.device_to_host(self.device, out, self.ptr, self._nbytes)
        return layouts.to_logical(out, self.layout)

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
        shape = as_shape(shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape {list(self.shape)} ({self.size} elements) to {list(shape)}")
        if self.layout != CONTIGUOUS:
            raise ValueError(f"cannot reshape a {self.layout} tensor as a view: make it contiguous first "
                             "(cuopjit.contiguous(t))")
        return Tensor._view(self.ptr, shape, self.dtype, self.device, self)

    # --- interop ----------------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict:
        self.ensure_live()
        strides = None if self.layout == CONTIGUOUS else tuple(s * self.dtype.itemsize for s in self.strides)
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": strides, "stream": 1}

    def __dlpack__(self, *, stream: int | None = None, max_version=None, dl_device=None, copy=None):
        self.ensure_live()
        kwargs = {"stream": stream}
        if max_version is not None:
            kwargs["max_version"] = max_version
        strides = None if self.layout == CONTIGUOUS else self.strides
        return transfer.dlpack(self.ptr, self._nbytes, self, self.shape, self.dtype, strides, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.device)  # kDLCUDA


class TypedTensor(Tensor):
    """A tensor whose class names its dtype (cuOP's `TensorFloat`, ...): the constructor takes no dtype."""
    __slots__ = ()
    DTYPE: ClassVar[np.dtype]

    def __init__(self, shape: Iterable[int] | int, *, device: int | None = None, layout: str = CONTIGUOUS):
        super().__init__(shape, self.DTYPE, device=device, layout=layout)


class TensorFloat(TypedTensor):
    """A float32 tensor (cuOP `TensorFloat`)."""
    __slots__ = ()
    DTYPE = np.dtype(np.float32)


class TensorDouble(TypedTensor):
    """A float64 tensor (cuOP `TensorDouble`)."""
    __slots__ = ()
    DTYPE = np.dtype(np.float64)


class TensorHalf(TypedTensor):
    """An IEEE float16 tensor (1 sign, 5 exponent, 10 mantissa bits; largest finite 65504)."""
    __slots__ = ()
    DTYPE = np.dtype(np.float16)


class TensorBFloat16(TypedTensor):
    """A bfloat16 tensor (float32's exponent range with 7 mantissa bits; NumPy type from ml_dtypes)."""
    __slots__ = ()
    DTYPE = np.dtype("bfloat16")


_CLASSES = {cls.DTYPE: cls for cls in (TensorFloat, TensorDouble, TensorHalf, TensorBFloat16)}


def _same_shape(name: str, got: Sequence[int], want: Sequence[int]) -> None:
    if tuple(got) != tuple(want):
        raise ValueError(f"{name} has shape {list(got)}, expected {list(want)}")


def new(shape, dtype, layout: str = CONTIGUOUS) -> Tensor:
    try:
        return _CLASSES[as_dtype(dtype)](shape, layout=layout)
    except NoDeviceError as exc:   # one line under the user's own call, not the driver's frames
        raise exc.with_traceback(None) from None


# --- other libraries' arrays ----------------------------------------------------------------------
for _cls in (Tensor, TypedTensor, *_CLASSES.values()):   # ours: never read as foreign arrays
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
    return Tensor._view(key[0], tuple(key[1]), dtype, key[3], obj, key[4] if len(key) > 4 else CONTIGUOUS)


def from_dlpack(obj: Any) -> Tensor:
    """Wrap a float32/float64/float16/bfloat16 GPU array (torch, CuPy, JAX, ...; contiguous, channels_last or transposed)
    without copying."""
    return wrap(obj, "from_dlpack(): the array")


def zeros(shape: Iterable[int] | int, dtype: Any = "float32", layout: str = CONTIGUOUS) -> Tensor:
    return new(shape, dtype, layout).zero()


def ones(shape: Iterable[int] | int, dtype: Any = "float32", layout: str = CONTIGUOUS) -> Tensor:
    return new(shape, dtype, layout).fill(1.0)


def empty(shape: Iterable[int] | int, dtype: Any = "float32", layout: str = CONTIGUOUS) -> Tensor:
    """Uninitialised memory: for outputs that a kernel writes in full. `layout`: cuopjit/layout.py."""
    return new(shape, dtype, layout)
