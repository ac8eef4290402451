"""Memory layouts in the compiled graph: outputs in the format torch eager would give, operands as they lie.

A kernel allocates its output in the memory format of the node's fake value (`output_format`): a
channels_last conv input gives channels_last outputs all the way down, as in eager, so the torch ops
left in the graph (and the caller) see the strides they would have seen. Operands go to the operator
as they lie; cuopjit reads contiguous, channels_last and transposed tensors zero-copy (cuopjit/layout.py)
where the operator takes that layout. `Trial` learns, on a kernel's first call, whether its operator
takes the layouts it is handed; if it refuses one (a ValueError naming the layout), that kernel copies
its operands to contiguous tensors from then on (torch's `.contiguous()`) and writes contiguous outputs.

An elementwise program needs no layout of its own: over channels_last tensors it runs on their
storage order, (N, H, W, C) views that are plain contiguous arrays, with its per-channel constants
seen as [C] (`nhwc`, `nhwc_constant`).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

CONTIGUOUS_FORMAT, CHANNELS_LAST = torch.contiguous_format, torch.channels_last


def output_format(fake: torch.Tensor) -> torch.memory_format:
    """channels_last for a 4-D value laid out so (and not also contiguous), else contiguous."""
    if fake.dim() == 4 and not fake.is_contiguous() and fake.is_contiguous(memory_format=CHANNELS_LAST):
        return CHANNELS_LAST
    return CONTIGUOUS_FORMAT


def contiguous(x: Any) -> Any:
    """`x` as a contiguous tensor (itself when it is one; numbers pass)."""
    return x.contiguous() if isinstance(x, torch.Tensor) and not x.is_contiguous() else x


def is_channels_last(x: Any, shape: tuple[int, ...]) -> bool:
    """Whether `x` is a `shape`-d tensor whose storage is (N, H, W, C) row-major."""
    return (isinstance(x, torch.Tensor) and tuple(x.shape) == shape
            and x.is_contiguous(memory_format=CHANNELS_LAST))


def nhwc(x: torch.Tensor) -> torch.Tensor:
    """The (N, H, W, C) view of a channels_last tensor: contiguous, the same memory."""
    return x.permute(0, 2, 3, 1)


def nhwc_constant(t: torch.Tensor) -> torch.Tensor:
    """A constant broadcasting against (N, C, H, W) seen against (N, H, W, C) ([C, 1, 1] -> [1, 1, 1, C])."""
    while t.dim() < 4:
        t = t.unsqueeze(0)
    return t.permute(0, 2, 3, 1).contiguous()


class Trial:
    """Whether an operator takes its operands as they lie: unknown until the first call, which tries."""
    __slots__ = ("native",)

    def __init__(self) -> None:
        self.native: bool | None = None

    def run(self, launch: Callable[..., torch.Tensor], xs: tuple, operands: dict, fmt: torch.memory_format
            ) -> torch.Tensor:
        """launch(xs, operands, fmt) as they lie when the operator takes them, else on contiguous copies."""
        if self.native:
            return launch(xs, operands, fmt)
        if self.native is None:
            laid = fmt != CONTIGUOUS_FORMAT or any(isinstance(x, torch.Tensor) and not x.is_contiguous()
                                                   for x in (*xs, *operands.values()))
            if not laid:               # contiguous operands, contiguous output: what every operator takes
                self.native = True
                return launch(xs, operands, fmt)
            try:
                out = launch(xs, operands, fmt)
            except ValueError:   # a layout the operator does not take (the copies below raise anything else)
                self.native = False
            else:
                self.native = True
                return out
        return launch(tuple(contiguous(x) for x in xs), {k: contiguous(v) for k, v in operands.items()},
                      CONTIGUOUS_FORMAT)
