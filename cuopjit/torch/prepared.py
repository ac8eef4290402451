"""Prepared launches of the torch.library ops: a warm `torch.ops.cuopjit.*` call is one key, one probe, one
allocation and one packed launch.

The first call of an op on some (shapes, strides, dtypes, devices, other arguments) runs its launch
function as before (checks, views, the operator's forward) inside `common.capture()`, which records the
one forward it made. `prepare` then asks that operator for the bound call (`bind`, its plan memo's
runner) and sorts the launch's pointers into those of the call's tensors and the output (read again
each call) and fixed ones (an operator's packed weights, epilogue words). A call's key holds no data
pointer of its tensors (only their 16-byte alignment, which plans read), except those of the weights an
operator packs (`TorchOp.weights`, conv2d's) with their `_version`: an in-place write to such a weight
misses, and the miss re-packs it. The warm call:

    key(args) -> the warm call: out = empty_like(x) or x.new_empty(size); runner(pointers, torch's stream)

A call is not prepared (it keeps the slow path, every time) when a tensor needed a copy to be contiguous,
a pointer cannot be told apart (aliased operands, an empty tensor), or the launch made no single forward.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from ..config import DEFAULT
from ..device import driver
from .common import raw_stream
from .warm import Recipe

_KEPT = 256    # prepared calls per op; past this many the table starts over (a miss is one slow call)
_Tensor = torch.Tensor


def key_of(weights: frozenset[int]) -> Callable[[tuple], tuple]:
    """The function giving a call's key: each tensor by (shape, strides, dtype, device, 16-byte alignment: what
    its plan key holds) and, for the packed weights, by (data pointer, version); lists as tuples; other
    arguments as they are."""
    if not weights:
        def key(args: tuple) -> tuple:
            return tuple([(a.shape, a.stride(), a.dtype, a.get_device(), a.data_ptr() & 15)
                          if isinstance(a, _Tensor) else tuple(a) if type(a) is list else a for a in args])
        return key

    def key_weights(args: tuple) -> tuple:
        parts = []
        for i, a in enumerate(args):
            if isinstance(a, _Tensor):
                parts.append((a.shape, a.stride(), a.dtype, a.get_device(), a.data_ptr(), a._version)
                             if i in weights else (a.shape, a.stride(), a.dtype, a.get_device(), a.data_ptr() & 15))
            else:
                parts.append(tuple(a) if type(a) is list else a)
        return tuple(parts)
    return key_weights


def prepare(calls: list, args: Sequence[Any], out: torch.Tensor, weights: frozenset[int]
            ) -> Callable[[tuple], torch.Tensor] | None:
    """The warm call for these arguments, from the forward `calls` recorded (None: not preparable)."""
    if len(calls) != 1:
        return None
    op, vargs, vkwargs = calls[0]
    try:
        key, pointers, _ = op.bind(*vargs, **vkwargs)
        run = op.memo(DEFAULT).get(key)
    except (LookupError, AttributeError, TypeError):
        return None
    if run is None:
        return None
    dynamic = [i for i, a in enumerate(args) if isinstance(a, _Tensor) and i not in weights]
    sources = [args[i].data_ptr() for i in dynamic] + [out.data_ptr()]
    held = {args[i].data_ptr() for i in weights if i < len(args) and isinstance(args[i], _Tensor)}
    if 0 in sources or len(set(sources)) < len(sources) or held.intersection(sources):
        return None
    warm = _warm(Recipe(run, sources, tuple(pointers)), dynamic, args, out)
    warm.operator = op      # its packed weights are among the fixed pointers: they live as long as this call
    return warm


def _allocator(args: Sequence[Any], out: torch.Tensor) -> tuple[int, Callable[[torch.Tensor], torch.Tensor]]:
    """(the argument the output is made like, the cheapest call that makes it)."""
    for i, a in enumerate(args):
        if isinstance(a, _Tensor) and a.shape == out.shape and a.stride() == out.stride() and a.dtype == out.dtype:
            return i, torch.empty_like
    first = next(i for i, a in enumerate(args) if isinstance(a, _Tensor))
    size = tuple(out.shape)
    return first, lambda x: x.new_empty(size)


def _warm(recipe: Recipe, dynamic: list[int], args: Sequence[Any], out: torch.Tensor
          ) -> Callable[[tuple], torch.Tensor]:
    like, make = _allocator(args, out)
    ordinal, current, set_device = out.get_device(), driver.current_ordinal, driver.set_device
    run, fixed, pick = recipe.runner, recipe.fixed, recipe.pick
    identity = recipe.order == list(range(len(dynamic) + 1)) and not fixed

    if identity and len(dynamic) == 1:      # one tensor in, the output: relu, softmax, pools, ...
        (i,) = dynamic

        def one(args: tuple) -> torch.Tensor:
            y = make(args[like])
            if current() != ordinal:
                set_device(ordinal)
            run((args[i].data_ptr(), y.data_ptr()), raw_stream(ordinal))
            return y
        return one

    def call(args: tuple) -> torch.Tensor:
        y = make(args[like])
        if current() != ordinal:
            set_device(ordinal)
        ptrs = [args[i].data_ptr() for i in dynamic]
        ptrs.append(y.data_ptr())
        run(pick(ptrs + fixed), raw_stream(ordinal))
        return y
    return call


class Table:
    """One op's prepared calls: `get(args)` (None on a miss or an unhashable argument) and `put`."""

    def __init__(self, weights: Sequence[int]):
        self.weights = frozenset(weights)
        self.key = key_of(self.weights)
        self.calls: dict[tuple, Callable[[tuple], torch.Tensor]] = {}

    def get(self, args: tuple) -> Callable[[tuple], torch.Tensor] | None:
        try:
            return self.calls.get(self.key(args))
        except TypeError:      # an unhashable argument: the slow path takes it
            return None

    def put(self, args: tuple, calls: list, out: torch.Tensor) -> None:
        warm = prepare(calls, args, out, self.weights)
        if warm is None:
            return
        if len(self.calls) >= _KEPT:
            self.calls.clear()
        try:
            self.calls[self.key(args)] = warm
        except TypeError:
            pass
