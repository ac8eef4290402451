"""The expression tree: frozen, hashable node dataclasses, the function table and the canonical string.

A tree is what the parser produces and what generation, evaluation and cache keys read. Its
canonical string is fully parenthesised and spells every number as Python's shortest round-trip
`repr` of a double, so it does not depend on the user's spelling (spaces, redundant parentheses,
`1` vs `1.0`, `+x`) and parses back to the same tree. Nothing is reordered or folded except a
minus sign applied to a literal (`-1.5` is one number), which is exact.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Union

from ..errors import CuopjitError


class ExpressionError(CuopjitError, ValueError):
    """A user expression is not in the language, or names an operand wrongly. The message is one line."""


# name -> parameter names; the arity is fixed. `where`'s first argument is a condition, not a value.
FUNCTIONS: dict[str, tuple[str, ...]] = {
    "relu": ("x",), "leaky_relu": ("x", "slope"), "gelu": ("x",), "gelu_tanh": ("x",), "silu": ("x",),
    "sigmoid": ("x",), "tanh": ("x",), "exp": ("x",), "log": ("x",), "sqrt": ("x",), "rsqrt": ("x",),
    "abs": ("x",), "min": ("a", "b"), "max": ("a", "b"), "clamp": ("x", "lo", "hi"),
    "where": ("cond", "a", "b"),
}
ARITHMETIC = ("+", "-", "*", "/")
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
GELU_TANH_K = 0.044715  # gelu_tanh(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + GELU_TANH_K * x^3)))


@dataclass(frozen=True, eq=False)
class Num:
    """A finite number literal, held as a Python float (a double). Equal only to the same bits' repr (0.0 != -0.0)."""
    value: float

    def __post_init__(self):
        value = float(self.value)
        if not math.isfinite(value):
            raise ExpressionError(f"the number {value!r} is not finite; NaN and infinity cannot be written as "
                                  "literals, pass them as scalar operands")
        object.__setattr__(self, "value", value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Num) and repr(self.value) == repr(other.value)

    def __hash__(self) -> int:
        return hash(("Num", repr(self.value)))


@dataclass(frozen=True)
class Name:
    """A named input: `acc`, `c` or an operand in an epilogue; an input or earlier output in a program."""
    id: str


@dataclass(frozen=True)
class Neg:
    """Unary minus of a value (never of a literal: the parser folds `-1.5` into Num(-1.5))."""
    operand: Node


@dataclass(frozen=True)
class BinOp:
    """`left op right` for op in + - * /."""
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Compare:
    """`left op right` for op in < <= > >= == != (a condition; only inside where's first argument)."""
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class BoolOp:
    """`left and right` / `left or right` of two conditions."""
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Not:
    """`not cond`."""
    operand: Node


@dataclass(frozen=True)
class Call:
    """A call of one of FUNCTIONS with exactly its arity."""
    func: str
    args: tuple[Node, ...]


Node = Union[Num, Name, Neg, BinOp, Compare, BoolOp, Not, Call]


def canonical(node: Node) -> str:
    """The spelling-independent string of a tree, e.g. 'relu((acc+bias))'; parses back to the same tree."""
    if isinstance(node, Num):
        return repr(node.value)
    if isinstance(node, Name):
        return node.id
    if isinstance(node, Neg):
        return f"(-{canonical(node.operand)})"
    if isinstance(node, (BinOp, Compare)):
        return f"({canonical(node.left)}{node.op}{canonical(node.right)})"
    if isinstance(node, BoolOp):
        return f"({canonical(node.left)} {node.op} {canonical(node.right)})"
    if isinstance(node, Not):
        return f"(not {canonical(node.operand)})"
    if isinstance(node, Call):
        return f"{node.func}({','.join(canonical(a) for a in node.args)})"
    raise TypeError(f"not an expression node: {node!r}")


def children(node: Node) -> tuple[Node, ...]:
    """The node's operands, left to right."""
    if isinstance(node, (Neg, Not)):
        return (node.operand,)
    if isinstance(node, (BinOp, Compare, BoolOp)):
        return (node.left, node.right)
    if isinstance(node, Call):
        return node.args
    return ()


def walk(node: Node) -> Iterator[Node]:
    """Every node of the tree, pre-order, left to right (iterative: no recursion limit)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def names(node: Node) -> tuple[str, ...]:
    """The names the tree reads, each once, in order of first appearance."""
    return tuple(dict.fromkeys(n.id for n in walk(node) if isinstance(n, Name)))


def functions(node: Node) -> tuple[str, ...]:
    """The functions the tree calls, each once, in order of first appearance."""
    return tuple(dict.fromkeys(n.func for n in walk(node) if isinstance(n, Call)))
