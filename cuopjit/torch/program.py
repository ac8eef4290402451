"""A group's elementwise program: the text of cuopjit.expr that one ElementwiseFloat/Double kernel runs.

`render(group, ctx)` writes the group's tail (and the head's own finish: a linear's bias, baddbmm's
beta/alpha) as one statement `out = ...` over named operands:

    y     the head's output (absent for a pure elementwise group)
    x<i>  tensors the graph passes at run time (residuals, scales, activations of other groups)
    k<i>  tensors fixed at compile time (a linear's bias, an eval BatchNorm's scale and shift)

Python numbers of the graph become literals of the text (a compile-time constant per graph). Each
op is written by its torch definition: add(x, y, alpha) = x + alpha*y; gelu(approximate='tanh') is
gelu_tanh; an eval batch_norm is x*scale + shift with scale and shift from cuopjit.fold_batchnorm
(float64), shaped [C, 1, ...] to broadcast over the channel axis.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.fx as fx

from ..ops import fold_batchnorm
from .fusion import Group
from .nodes import Call
from .support import Context

HEAD = "y"


@dataclass
class Program:
    """`text` over `operands` (name -> the head marker HEAD, an FX node passed at run time, or a tensor)."""
    text: str
    operands: dict[str, Any]

    @property
    def runtime(self) -> list[tuple[str, fx.Node]]:
        return [(n, v) for n, v in self.operands.items() if isinstance(v, fx.Node)]

    @property
    def constants(self) -> dict[str, torch.Tensor]:
        return {n: v for n, v in self.operands.items() if isinstance(v, torch.Tensor)}


def number(value: float) -> str:
    """A literal of the language: shortest round-trip digits, negatives parenthesised."""
    text = repr(float(value)) if isinstance(value, float) else str(int(value))
    return f"({text})" if text.startswith("-") else text


def _scaled(factor: Any, text: str) -> str:
    return text if factor == 1 else f"{number(factor)} * {text}"


def batchnorm_scale_shift(call: Call, ctx: Context) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, shift) of an eval BatchNorm as float64 CPU tensors of [C] (cuopjit.fold_batchnorm)."""
    a = call.args
    mean, var = ctx.constant(a["running_mean"]), ctx.constant(a["running_var"])
    c = mean.shape[0]
    gamma = ctx.constant(a["weight"]) if a["weight"] is not None else torch.ones(c, dtype=torch.float64)
    beta = ctx.constant(a["bias"]) if a["bias"] is not None else torch.zeros(c, dtype=torch.float64)
    host = [t.detach().to("cpu", torch.float64).numpy() for t in (gamma, beta, mean, var)]
    return tuple(torch.from_numpy(np.ascontiguousarray(v)) for v in fold_batchnorm(*host, a["eps"]))


def batchnorm_constants(call: Call, ctx: Context) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, shift) in the output's dtype and device, shaped [C, 1, ...] to broadcast over its channels."""
    like = ctx.val(call.node)
    shape = (-1,) + (1,) * (like.dim() - 2)
    return tuple(v.reshape(shape).to(like.device, like.dtype) for v in batchnorm_scale_shift(call, ctx))


_UNARY = {"relu": "relu({})", "silu": "silu({})", "sigmoid": "sigmoid({})", "tanh": "tanh({})", "neg": "(-{})"}


def _expression(call: Call, arg: Callable[[Any], str], ctx: Context, constant: Callable[[torch.Tensor], str]
                ) -> str:
    a = call.args
    op = call.op
    if op in _UNARY:
        return _UNARY[op].format(arg(a["input"]))
    if op == "hardtanh":
        return f"clamp({arg(a['input'])}, {number(a['min_val'])}, {number(a['max_val'])})"
    if op == "gelu":
        return f"{'gelu_tanh' if a['approximate'] == 'tanh' else 'gelu'}({arg(a['input'])})"
    if op in ("add", "sub"):
        sign = "+" if op == "add" else "-"
        return f"({arg(a['input'])} {sign} {_scaled(a['alpha'], arg(a['other']))})"
    if op in ("mul", "div"):
        return f"({arg(a['input'])} {'*' if op == 'mul' else '/'} {arg(a['other'])})"
    if op == "batch_norm":
        scale, shift = batchnorm_constants(call, ctx)
        return f"({arg(a['input'])} * {constant(scale)} + {constant(shift)})"
    raise ValueError(f"cuopjit.torch: no elementwise form of {op}; add it to program._expression")


def finish(head: Call, product: str, arg: Callable[[Any], str], constant: Callable[[torch.Tensor], str],
           ctx: Context) -> str | None:
    """The elementwise part of a head op over its `product` (a linear's bias, baddbmm's beta/alpha)."""
    a = head.args
    if head.op == "linear" and a["bias"] is not None:
        return f"({product} + {constant(ctx.constant(a['bias']))})"
    if head.op == "baddbmm":
        scaled = _scaled(a["alpha"], product)
        return scaled if a["beta"] == 0 else f"({_scaled(a['beta'], arg(a['input']))} + {scaled})"
    return None


def render(group: Group, ctx: Context, product: str | None = None,
           extra: dict[str, torch.Tensor] | None = None) -> Program | None:
    """The group's program, or None when the head's output is the group's output as it is.

    The head's output is the operand HEAD; with `product` (an epilogue: "acc", or a conv's "relu((acc + kb))")
    it is that text instead, and `extra` are constants the text names (bound with the others)."""
    operands: dict[str, Any] = dict(extra or {})
    texts: dict[fx.Node, str] = {}
    names: dict[int, str] = {}

    def constant(t: torch.Tensor) -> str:
        name = names.get(id(t))
        if name is None:
            name = names[id(t)] = f"k{sum(isinstance(v, torch.Tensor) for v in operands.values())}"
            while name in operands:
                name += "_"
            operands[name] = t
        return name

    def arg(v: Any) -> str:
        if not isinstance(v, (fx.Node, torch.Tensor)):
            return number(v)
        if isinstance(v, torch.Tensor):
            return constant(v)
        if v in texts:
            return texts[v]
        if v is group.head_out:
            if product is not None:
                return product
            operands[HEAD] = HEAD
            return HEAD
        name = names.get(id(v))
        if name is None:
            name = names[id(v)] = f"x{sum(isinstance(o, fx.Node) for o in operands.values())}"
            operands[name] = v
        return name

    if group.head is not None:
        done = finish(group.head, HEAD if product is None else product, arg, constant, ctx)
        if done is not None:
            texts[group.head_out] = done
    for call in group.tail:
        texts[call.node] = _expression(call, arg, ctx, constant)
    if group.output not in texts:
        return None
    return Program(f"out = {texts[group.output]}", operands)
