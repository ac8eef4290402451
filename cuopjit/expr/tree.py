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
from typing import Any, Callable, Iterator, Union

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
class Unary:
    """One operand under a prefix operator (Neg, Not)."""
    operand: Node


@dataclass(frozen=True)
class Binary:
    """Two operands joined by `op` (BinOp, Compare, BoolOp): nodes of different classes are never equal."""
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Neg(Unary):
    """Unary minus of a value (never of a literal: the parser folds `-1.5` into Num(-1.5))."""


@dataclass(frozen=True)
class BinOp(Binary):
    """`left op right` for op in + - * /."""


@dataclass(frozen=True)
class Compare(Binary):
    """`left op right` for op in < <= > >= == != (a condition; only inside where's first argument)."""


@dataclass(frozen=True)
class BoolOp(Binary):
    """`left and right` / `left or right` of two conditions."""


@dataclass(frozen=True)
class Not(Unary):
    """`not cond`."""


@dataclass(frozen=True)
class Call:
    """A call of one of FUNCTIONS with exactly its arity."""
    func: str
    args: tuple[Node, ...]


Node = Union[Num, Name, Neg, BinOp, Compare, BoolOp, Not, Call]


def fold(node: Node, leaf: Callable[[Node], Any], unary: Callable[[Node, Any], Any],
         binary: Callable[[Node, Any, Any], Any], call: Callable[[Node, list], Any]) -> Any:
    """A tree folded bottom-up: `leaf` of each Num and Name, `unary(node, operand)`, `binary(node, left, right)`,
    `call(node, args)` of the folded operands. The canonical string and the CUDA generator are two folds."""
    if isinstance(node, (Num, Name)):
        return leaf(node)
    if isinstance(node, Unary):
        return unary(node, fold(node.operand, leaf, unary, binary, call))
    if isinstance(node, Binary):
        return binary(node, fold(node.left, leaf, unary, binary, call), fold(node.right, leaf, unary, binary, call))
    if isinstance(node, Call):
        return call(node, [fold(a, leaf, unary, binary, call) for a in node.args])
    raise TypeError(f"not an expression node: {node!r}")


def canonical(node: Node) -> str:
    """The spelling-independent string of a tree, e.g. 'relu((acc+bias))'; parses back to the same tree."""
    return fold(node, lambda n: repr(n.value) if isinstance(n, Num) else n.id,
                lambda n, a: f"({'-' if isinstance(n, Neg) else 'not '}{a})",
                lambda n, a, b: f"({a} {n.op} {b})" if isinstance(n, BoolOp) else f"({a}{n.op}{b})",
                lambda n, args: f"{n.func}({','.join(args)})")


def children(node: Node) -> tuple[Node, ...]:
    """The node's operands, left to right."""
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
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
