"""Other libraries' GPU arrays as operands: torch, CuPy, JAX, anything with DLPack or the CUDA Array Interface.

`reader(cls)` gives, once per type, the function that reads an instance's key: (data pointer, shape,
dtype token, device ordinal) for a C-contiguous array, the same plus its layout name for a channels_last or
transposed one (cuopjit/layout.py), None for other strides; `reader` itself is None
for types that hold no GPU array (numbers, None, cuopjit Tensors). A key is what a zero-copy view is
cached under (cuopjit/operands.py), so a warm read is a handful of attribute reads and one dict probe:

    torch     x.data_ptr(), x.shape, x.dtype, x.get_device(), x.is_contiguous()   (C calls; x.stride() only
              when not contiguous; the CUDA Array
              Interface would build a dict of Python ints, ~10x slower). Recognised by class (a base named
              Tensor in module torch), so cuopjit never imports torch.
    CuPy      x.data.ptr, x.shape, x.dtype, x.device.id, x.flags.c_contiguous
    others    cuda.core's StridedMemoryView over DLPack or the CUDA Array Interface (JAX, Numba, ...)

`register(cls, read)` adds a reader for another type. `why_not(x)` says in words why x cannot be an
operand (host memory, dtype, strides, not an array), for the one-line errors that name the operand.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import ml_dtypes
import numpy as np

from . import layout
from .device import transfer

# what a Tensor holds; bfloat16 is ml_dtypes' NumPy type (np.dtype("bfloat16") once ml_dtypes is imported)
DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
HELD = "float32, float64, float16 or bfloat16"
Key = tuple            # (pointer, shape, dtype token, device ordinal; -1: host memory[, layout unless contiguous])
Reader = Callable[[Any], Optional[Key]]

# type -> its key reader, None for types that are no foreign arrays; filled by reader() and register() only
READERS: dict[type, Optional[Reader]] = {t: None for t in (int, float, bool, complex, str, bytes, type(None),
                                                              list, tuple, dict)}
_DTYPES: dict[Any, Optional[np.dtype]] = {}     # dtype token -> numpy dtype (None: not one cuopjit holds)
_CUDA_DEVICE_TYPES = (2, 3, 13)                 # DLPack kDLCUDA, kDLCUDAHost, kDLCUDAManaged


def torch_key(x: Any) -> Key | None:
    """A torch tensor's key (read through its C methods; x.stride() only when it is not contiguous)."""
    if x.is_contiguous():
        return (x.data_ptr(), x.shape, x.dtype, x.get_device())
    return _laid_out((x.data_ptr(), x.shape, x.dtype, x.get_device()), tuple(x.shape), x.stride())


def cupy_key(x: Any) -> Key | None:
    """A CuPy array's key."""
    if x.flags.c_contiguous:
        return (x.data.ptr, x.shape, x.dtype, x.device.id)
    return _laid_out((x.data.ptr, x.shape, x.dtype, x.device.id), x.shape,
                     tuple(s // x.itemsize for s in x.strides))


def _laid_out(key: Key, shape: tuple, strides: tuple | None) -> Key | None:
    """`key` for an array of these element strides: as it is when contiguous, with the layout's name appended
    for channels_last or transposed, None for other strides."""
    found = layout.of(shape, strides)
    if found is None:
        return None
    return key if found == layout.CONTIGUOUS else key + (found,)


def _generic_key(x: Any) -> Key | None:
    """Through cuda.core's StridedMemoryView: DLPack (synchronised for the legacy default stream) or CAI."""
    try:
        dev = getattr(x, "__dlpack_device__", None)
        if dev is not None and dev()[0] not in _CUDA_DEVICE_TYPES:
            return None
        view = transfer.view_of(x)
        shape, strides = tuple(view.shape), view.strides
        key = (int(view.ptr), shape, np.dtype(view.dtype), int(view.device_id))
    except Exception:  # not readable as a GPU array: why_not says so
        return None
    return _laid_out(key, shape, None if strides is None else tuple(strides))


def _named(cls: type, module: str, name: str) -> bool:
    return any(b.__name__ == name and b.__module__.split(".")[0] == module for b in cls.__mro__)


def _resolve(cls: type) -> Reader | None:
    for base in cls.__mro__:
        if base in READERS and base is not object:
            return READERS[base]
    if _named(cls, "torch", "Tensor"):
        return torch_key
    if _named(cls, "cupy", "ndarray"):
        return cupy_key
    if issubclass(cls, np.ndarray) or not (hasattr(cls, "__cuda_array_interface__") or hasattr(cls, "__dlpack__")):
        return None
    return _generic_key


def reader(cls: type) -> Reader | None:
    """The key reader for instances of `cls` (None: they are no GPU arrays); resolved once per type."""
    try:
        return READERS[cls]
    except KeyError:
        found = READERS[cls] = _resolve(cls)
        return found


def register(cls: type, read: Reader | None) -> None:
    """Read instances of `cls` (and its subclasses) with `read(x) -> (ptr, shape, dtype, device) | None`;
    `read=None` marks a type whose instances are no foreign arrays (cuopjit's own Tensors)."""
    for known in [k for k in READERS if issubclass(k, cls)]:
        del READERS[known]
    READERS[cls] = read


def np_dtype(token: Any) -> np.dtype | None:
    """The numpy dtype of a key's dtype token (torch.float32, a numpy dtype, '<f4', ...) if cuopjit holds it."""
    try:
        return _DTYPES[token]
    except KeyError:
        pass
    try:
        torch_like = isinstance(token, str) or type(token).__module__ == "torch"
        dt = np.dtype(str(token).replace("torch.", "") if torch_like else token)
    except (TypeError, ValueError):
        dt = None
    found = _DTYPES[token] = dt if dt in DTYPES else None
    return found


def dtype_name(token: Any) -> str:
    return str(token).replace("torch.", "")


def _array_facts(x: Any) -> tuple[str, Any, tuple, tuple | None] | None:
    """(library, dtype token, shape, strides in elements or None) of a torch or CuPy array, else None."""
    cls = type(x)
    if _named(cls, "torch", "Tensor"):
        return "torch", x.dtype, tuple(x.shape), tuple(x.stride())
    if _named(cls, "cupy", "ndarray"):
        return "cupy", x.dtype, tuple(x.shape), tuple(s // x.itemsize for s in x.strides)
    return None


def why_not(x: Any) -> tuple[type[Exception], str]:
    """Why `x` cannot be a GPU operand: (TypeError or ValueError, the reason after the operand's name)."""
    cls = type(x)
    facts = _array_facts(x)
    if facts is None and reader(cls) is None:
        got = "None" if x is None else cls.__name__
        return TypeError, (f"must be a cuopjit Tensor, got {got} (wrap arrays with cuopjit.tensor(...)), "
                           "or a torch, CuPy or JAX CUDA array")
    if facts is not None:
        lib, token, shape, strides = facts
        if lib == "torch" and x.get_device() < 0:
            return TypeError, f"is a {x.device.type.upper()} tensor: pass a CUDA tensor (x.cuda())"
        if np_dtype(token) is None:
            return TypeError, (f"is {dtype_name(token)}: cuopjit tensors hold {HELD} "
                               "(convert with x.float(), x.double(), x.half() or x.bfloat16())")
        if layout.of(shape, strides) is None:
            return ValueError, (f"has strides {list(strides)} (shape {list(shape)}, in elements) of no layout "
                                "cuopjit reads (contiguous, channels_last, transposed): pass x.contiguous()")
        return ValueError, "cannot be read as a GPU array"
    return _why_not_generic(x)


def _why_not_generic(x: Any) -> tuple[type[Exception], str]:
    """The reason for an array read through DLPack / the CUDA Array Interface."""
    reason: tuple[type[Exception], str] | None = None
    try:
        dev = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else 2
        if dev not in _CUDA_DEVICE_TYPES:
            reason = (TypeError, f"is in host memory (DLPack device type {dev}): move it to the GPU first")
        else:
            view = transfer.view_of(x)
            shape, strides = tuple(view.shape), view.strides
            if np_dtype(np.dtype(view.dtype)) is None:
                reason = (TypeError, f"is {np.dtype(view.dtype).name}: cuopjit tensors hold {HELD}")
            elif layout.of(shape, None if strides is None else tuple(strides)) is None:
                reason = (ValueError, f"has strides {list(strides)} (shape {list(shape)}, in elements) of no "
                                      "layout cuopjit reads (contiguous, channels_last, transposed): make it "
                                      "contiguous first")
    except Exception as exc:  # the library refused to export it: say what it said, in one line
        reason = (TypeError, f"cannot be read as a GPU array ({type(exc).__name__}: {str(exc).splitlines()[0]})"
                  if str(exc) else f"cannot be read as a GPU array ({type(exc).__name__})")
    return reason or (ValueError, "cannot be read as a GPU array")


def on_host(x: Any) -> bool:
    """Whether `x` lives in host memory (NumPy, lists, CPU tensors: tensor() copies them) rather than on a GPU."""
    read = reader(type(x))
    if read is None:
        return True
    if read is torch_key:
        return x.get_device() < 0
    if read is cupy_key:
        return False
    try:
        dev = getattr(x, "__dlpack_device__", None)
        return dev is not None and dev()[0] not in _CUDA_DEVICE_TYPES
    except Exception:  # a broken protocol method: wrap() says what is wrong
        return False
