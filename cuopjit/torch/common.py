"""What the torch.library ops share: one operator object per setting, views of torch tensors, held weights.

An op's launch gets a fresh contiguous output and torch's current stream; it wraps its tensors with
`view(t)` (a cached owner-less view: one dict probe on pointer, shape, dtype and device, nothing made or
freed per call), hands weights to the operator with `hold` (a setter runs only when the tensor behind
the weight changed, so a model's parameters are checked once) and launches with `forward(op, ...)`.
An operator that packs its weights belongs to them (conv2d: `instance(..., owner=(weight, bias))`, one per
weight tensor, so two layers of one shape never take turns re-packing, and what a prepared launch remembers
of the packed weights stays true; it keeps them alive until 4,096 operators have been made, when the table
starts over); operators are set and launched under `lock`, since threads share them.
`capture()` records the forward a launch made, from which cuopjit/torch/prepared.py makes a warm call.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..interop import np_dtype
from ..ops import CLASSES
from ..operands import view_at
from ..tensor import Tensor

# the torch dtypes cuopjit holds, as NumPy dtypes (bfloat16: ml_dtypes' type, as cuopjit's tensors hold it)
NP = {t: np_dtype(t) for t in (torch.float32, torch.float64, torch.float16, torch.bfloat16)}
HALF = frozenset({torch.float16, torch.bfloat16})   # stored in 16 bits, computed in float32
lock = threading.Lock()
_instances: dict[tuple, Any] = {}
_constants: dict[tuple, torch.Tensor] = {}
_held: dict[tuple[int, str], tuple] = {}
_INSTANCES_KEPT = 1 << 12   # past this many operators (weights seen) the table starts over
_seen = threading.local()   # .calls: the forwards made while a capture() is open on this thread


def _no_cuda(device: int) -> int:
    raise RuntimeError("cuopjit.torch: this torch was built without CUDA; install a CUDA build of torch")


# torch's current stream on a device as a raw handle, no Stream object made (CPU-only builds of torch lack it:
# no CUDA tensor reaches a launch there)
raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _no_cuda)


@dataclass(frozen=True)
class TorchOp:
    """One custom op: its schema (after the name), its output shape, and its launch (out, stream, *args).

    `shape` and `run` take the op's arguments as the schema names them, with the schema's defaults.
    `weights`: the positions of the tensors its operator packs (keyed by identity in prepared calls);
    `prepared`: whether a warm call may skip `run` (False where `run` does more than one forward);
    `family`: the operator family it launches (its dtypes are the ones the op takes; "" for no check)."""
    schema: str
    shape: Callable[..., Sequence[int]]
    run: Callable[..., None]
    weights: tuple[int, ...] = ()
    prepared: bool = True
    family: str = ""


def dtype_name(dtype: torch.dtype) -> str:
    """'float32', 'bfloat16', ... (torch's name without the prefix)."""
    return str(dtype).replace("torch.", "")


def operator_class(family: str, dtype: torch.dtype) -> type | None:
    """Family `family`'s operator class of a torch dtype, None where it has no kernels of that dtype (a
    Convolution2D in float16 before its half kernels exist, SYMM in bfloat16, ...)."""
    return CLASSES[family].get(dtype_name(dtype)) if dtype in NP else None


def make_operator(family: str, dtype: torch.dtype, *settings: Any) -> Any:
    """A new operator of `family` for `dtype`; TypeError (one line) where the family has no such kernels."""
    cls = operator_class(family, dtype)
    if cls is None:
        raise TypeError(f"cuopjit has no {dtype_name(dtype)} {family} kernels: it has "
                        f"{', '.join(CLASSES[family])}")
    return cls(*settings)


def instance(family: str, dtype: torch.dtype, *settings: Any, owner: Sequence[torch.Tensor | None] = (),
             epilogue: str | None = None) -> Any:
    """One operator object per family, dtype and constructor settings (its plan memo is what makes calls warm),
    per `epilogue` (set once, its operands passed per call) and per `owner`: the weight tensors it will hold
    (the operator keeps them alive, so their pointers, part of the key, name them)."""
    if owner and not getattr(_seen, "owned", True):   # a copy made for this call only: share one operator
        owner = ()
    key = (family, dtype, *settings, epilogue, *[0 if t is None else t.data_ptr() for t in owner])
    op = _instances.get(key)
    if op is None:
        if len(_instances) >= _INSTANCES_KEPT:
            _instances.clear()
            _held.clear()
        op = make_operator(family, dtype, *settings)
        if epilogue is not None:
            op.set_epilogue(epilogue)
        op = _instances.setdefault(key, op)
    return op


def forward(op: Any, *args: Any, stream: int, **kwargs: Any) -> Any:
    """`op.forward(*args, stream=stream, **kwargs)`, recorded while a capture() is open on this thread."""
    result = op.forward(*args, stream=stream, **kwargs)
    calls = getattr(_seen, "calls", None)
    if calls is not None:
        calls.append((op, args, kwargs))
    return result


class capture:
    """`with capture(owned) as calls:` the (operator, args, kwargs) of each `forward` made inside, in order.
    `owned=False`: the call's weights are copies made for it (to be contiguous), so `instance` ignores owners."""

    def __init__(self, owned: bool = True):
        self.owned = owned

    def __enter__(self) -> list:
        self.outer = getattr(_seen, "calls", None), getattr(_seen, "owned", True)
        _seen.calls, _seen.owned = [], self.owned
        return _seen.calls

    def __exit__(self, *exc: Any) -> None:
        _seen.calls, _seen.owned = self.outer


def view(t: torch.Tensor, shape: Sequence[int] | None = None) -> Tensor:
    """A cuopjit view of a contiguous CUDA tensor of a supported dtype (optionally seen with another shape of
    the same size), valid while `t` lives: the operands of one launch."""
    return view_at(t.data_ptr(), t.shape if shape is None else shape, t.dtype, t.get_device())


def hold(op: Any, setter: str, t: torch.Tensor | None) -> None:
    """`op.<setter>(t)` unless `op` already holds this tensor's memory with this shape, dtype and contents
    (torch's `_version` counts in-place writes: an optimizer step on the weight sets it again, so a
    Convolution2D re-packs it) (call under `lock`). The operator keeps `t` alive while it holds it."""
    key = (id(op), setter)
    seen = None if t is None else (t.data_ptr(), t.shape, t.dtype, t._version)
    if _held.get(key, ()) != seen:
        getattr(op, setter)(t)
        _held[key] = seen


def constant(value: float, n: int, like: torch.Tensor) -> torch.Tensor:
    """A cached [n] tensor of `value` (the default gamma/beta of a norm called without them)."""
    key = (value, n, like.dtype, like.device)
    t = _constants.get(key)
    if t is None:
        t = _constants.setdefault(key, torch.full((n,), value, dtype=like.dtype, device=like.device))
    return t


def pair(values: Sequence[int]) -> tuple[int, int]:
    """(h, w) from torch's int[2] (the schema gives two values; one is read as both)."""
    return values[0], values[-1]
