"""Warm launches of a compiled graph's kernels: the runner and a recipe for its pointers, learnt once.

A graph compiled with static shapes calls each of its kernels with the same shapes, strides and dtypes
every time; only the addresses of the activations change (torch's caching allocator does not hand them out
in the same order each call). `Warm` learns, from a kernel's first calls through the operator's `forward`,
which runner the operator's plan memo holds for the call (the operator binds the same operands: their
cuopjit views, cuopjit.operands) and where each pointer it packs comes from: one of the tensors the kernel
passes (by position) or a fixed address (the operator's weights, packed epilogue operands). The recipe is
trusted once a second call at other addresses packs exactly what it predicts; from then on a call is a
few `data_ptr()` reads and one packed launch instead of the whole warm path per node (H100 host,
ViT-B/16 TF32 through the backend: 13.8 ms a forward before, most of it this path). A kernel whose
pointers the recipe does not predict (after a few tries) keeps calling `forward`. A runner of the backend's
own (fused_attention.Runner: no operator plan memo) says its launch itself, through its `bound`.

Everything else a kernel passes (strides, padding, axis, bound epilogue operands) is fixed when it is
built, as are the shapes, strides and dtypes of a static graph's values.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Any, Callable

import torch

from ..config import DEFAULT
from ..operands import operands

_TRIES = 8       # calls that may learn (or prove) a recipe before the kernel keeps the ordinary path
_Tensor = torch.Tensor


def _sources(args: tuple, kwargs: dict) -> list[int]:
    ptrs = [a.data_ptr() for a in args if isinstance(a, _Tensor)]
    ptrs += [a.data_ptr() for a in kwargs.values() if isinstance(a, _Tensor)]
    return ptrs


class Recipe:
    """A runner and how its pointers follow from a call's tensor addresses: `order` picks each from the call's
    sources + `fixed` (the pointers that are none of them). `sources`: the addresses of the call it was learnt
    from. The torch.library ops' prepared calls (prepared.py) use it too."""
    __slots__ = ("runner", "sources", "fixed", "order", "pick")

    def __init__(self, runner: Callable, sources: list[int], pointers: tuple):
        self.runner, self.sources = runner, sources
        self.fixed = [p for p in pointers if p not in sources]
        self.order = order = [sources.index(p) if p in sources else len(sources) + self.fixed.index(p)
                              for p in pointers]
        if len(order) > 1:
            self.pick = itemgetter(*order)
        else:
            self.pick = (lambda s, i=order[0]: (s[i],)) if order else (lambda s: ())

    def pointers(self, sources: list[int]) -> tuple:
        return self.pick(sources + self.fixed)


class Warm:
    """One kernel's launch: `__call__(stream, args, kwargs)` as `run.forward(*args, stream=..., **kwargs)`."""
    __slots__ = ("run", "op", "recipe", "trusted", "tries")

    def __init__(self, run: Any, op: Any):
        self.run, self.op = run, op     # run: the operator or a JIT wrapper of it
        self.recipe: Recipe | None = None
        self.trusted = False
        self.tries = 0

    def __call__(self, stream: int, args: tuple, kwargs: dict) -> None:
        if self.trusted:
            recipe = self.recipe
            recipe.runner(recipe.pointers(_sources(args, kwargs)), stream)
            return
        self.run.forward(*args, stream=stream, **kwargs)
        if self.tries < _TRIES:
            self._learn(args, kwargs)

    def _bound(self, args: tuple, kwargs: dict) -> tuple[Callable, tuple] | None:
        """(the runner the forward just launched, the pointers it packed), where the operator can say them."""
        own = getattr(self.run, "bound", None)     # a runner of the backend's own (fused_attention.Runner)
        if own is not None:
            try:
                return own(*args, **kwargs)
            except (LookupError, AttributeError, TypeError, ValueError):
                return None
        memo = getattr(self.op, "memo", None)     # stand-in operators (tests) have no plan memo
        swapped = operands(args, kwargs) if memo is not None else None
        settings = DEFAULT if self.run is self.op else getattr(self.run, "run_settings", None)
        if swapped is None or settings is None:
            return None
        try:
            key, pointers, _ = self.op.bind(*swapped[0], **swapped[1])
            runner = memo(settings).get(key)
        except (LookupError, AttributeError, TypeError, ValueError):
            return None
        return None if runner is None else (runner, tuple(pointers))

    def _learn(self, args: tuple, kwargs: dict) -> None:
        self.tries += 1
        bound = self._bound(args, kwargs)
        if bound is None:
            self.tries = _TRIES
            return
        runner, pointers = bound
        sources = _sources(args, kwargs)
        recipe = self.recipe
        if recipe is not None and sources == recipe.sources:   # the same addresses prove nothing: wait
            return
        if recipe is not None and recipe.runner is runner and recipe.pointers(sources) == pointers:
            self.trusted = True
            return
        self.recipe = Recipe(runner, sources, pointers)
