"""What the torch.library ops share: one operator object per setting, views of torch tensors, held weights.

An op's launch gets a fresh contiguous output and torch's current stream; it wraps its tensors with
`view(t)` (a cached owner-less view: one dict probe on pointer, shape, dtype and device, nothing made or
freed per call) and hands weights to the operator with `hold` (a setter runs only when the tensor behind
the weight changed, so a model's parameters are checked once). Operators that hold weights are set and
launched under `lock`, since one operator object serves every caller with the same settings.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..ops import FAMILIES
from ..operands import view_at
from ..tensor import Tensor

NP = {torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64)}
lock = threading.Lock()
_instances: dict[tuple, Any] = {}
_constants: dict[tuple, torch.Tensor] = {}
_held: dict[tuple[int, str], tuple] = {}


def _no_cuda(device: int) -> int:
    raise RuntimeError("cuopjit.torch: this torch was built without CUDA; install a CUDA build of torch")


# torch's current stream on a device as a raw handle, no Stream object made (CPU-only builds of torch lack it:
# no CUDA tensor reaches a launch there)
raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _no_cuda)


@dataclass(frozen=True)
class TorchOp:
    """One custom op: its schema (after the name), its output shape, and its launch (out, stream, *args).

    `shape` and `run` take the op's arguments as the schema names them, with the schema's defaults."""
    schema: str
    shape: Callable[..., Sequence[int]]
    run: Callable[..., None]


def instance(family: str, dtype: torch.dtype, *settings: Any) -> Any:
    """One operator object per family, dtype and constructor settings (its plan memo is what makes calls warm)."""
    key = (family, dtype, *settings)
    op = _instances.get(key)
    if op is None:
        op = _instances.setdefault(key, FAMILIES[family][0 if dtype == torch.float32 else 1](*settings))
    return op


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
