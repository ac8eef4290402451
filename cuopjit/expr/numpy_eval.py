"""Reference evaluation of a tree with NumPy, matching the generated CUDA's semantics (see cuda.py).

Used by tests and by CPU emulation. Every value is computed in `dtype` (float32 or float64) with
NumPy broadcasting between operands; erfc (NumPy has none) is `math.erfc` in float64, rounded to
`dtype`. Floating-point warnings are silenced: inf and NaN results are the point.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Union

import numpy as np

from .parse import Expression, Program
from .tree import GELU_TANH_K, BinOp, BoolOp, Call, Compare, ExpressionError, Name, Neg, Node, Not, Num

_erfc64 = np.vectorize(math.erfc, otypes=[np.float64])
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def evaluate(expr: Union[Expression, Node], env: Mapping[str, Any], dtype: Any = np.float64) -> np.ndarray:
    """The value of `expr` with each name taken from `env` (numbers or arrays), as an array of `dtype`."""
    tree = expr.tree if isinstance(expr, Expression) else expr
    ev = _Eval(env, _dtype(dtype))
    with np.errstate(all="ignore"):
        return np.asarray(ev.value(tree), dtype=ev.dtype)


def evaluate_program(program: Program, env: Mapping[str, Any], dtype: Any = np.float64) -> dict[str, np.ndarray]:
    """Every output of `program`, in order, as arrays of `dtype`; `env` holds the inputs."""
    ev = _Eval(dict(env), _dtype(dtype))
    out: dict[str, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for name, tree in program.statements:
            out[name] = np.asarray(ev.value(tree), dtype=ev.dtype)
            ev.env[name] = out[name]
    return out


def _dtype(dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in _DTYPES:
        raise ValueError(f"dtype {dt} is not supported; use float32 or float64")
    return dt


class _Eval:
    def __init__(self, env: Mapping[str, Any], dtype: np.dtype):
        self.env, self.dtype, self.t = env, dtype, dtype.type

    def value(self, node: Node):
        if isinstance(node, Num):
            return self.t(node.value)
        if isinstance(node, Name):
            if node.id not in self.env:
                raise ExpressionError(f"no value was given for {node.id!r}; given: {', '.join(self.env)}")
            return np.asarray(self.env[node.id], dtype=self.dtype)
        if isinstance(node, Neg):
            return -self.value(node.operand)
        if isinstance(node, BinOp):
            a, b = self.value(node.left), self.value(node.right)
            return {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}[node.op](a, b)
        if isinstance(node, (Compare, BoolOp, Not)):
            return self.cond(node)
        if isinstance(node, Call):
            return self.call(node.func, node.args)
        raise TypeError(f"not an expression node: {node!r}")

    def cond(self, node: Node):
        if isinstance(node, Compare):
            a, b = self.value(node.left), self.value(node.right)
            return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
                    "==": np.equal, "!=": np.not_equal}[node.op](a, b)
        if isinstance(node, BoolOp):
            f = np.logical_and if node.op == "and" else np.logical_or
            return f(self.cond(node.left), self.cond(node.right))
        if isinstance(node, Not):
            return np.logical_not(self.cond(node.operand))
        raise TypeError(f"not a condition node: {node!r}")

    def call(self, func: str, args: tuple[Node, ...]):
        if func == "where":
            return np.where(self.cond(args[0]), self.value(args[1]), self.value(args[2]))
        v = [self.value(a) for a in args]
        t, x = self.t, v[0]
        one, half, zero = t(1), t(0.5), t(0)
        if func == "relu":
            return np.where(x < zero, zero, x)
        if func == "leaky_relu":
            return np.where(x > zero, x, x * v[1])
        if func == "gelu":
            return half * x * self.erfc(-x * t(math.sqrt(0.5)))
        if func == "gelu_tanh":
            return half * x * (one + np.tanh(t(math.sqrt(2 / math.pi)) * (x + t(GELU_TANH_K) * x * x * x)))
        if func == "silu":
            return x / (one + np.exp(-x))
        if func == "sigmoid":
            return one / (one + np.exp(-x))
        if func == "rsqrt":
            return one / np.sqrt(x)
        if func in ("tanh", "exp", "log", "sqrt", "abs"):
            return getattr(np, func)(x)
        if func == "min":
            return np.minimum(x, v[1])
        if func == "max":
            return np.maximum(x, v[1])
        if func == "clamp":
            return np.minimum(np.maximum(x, v[1]), v[2])
        raise ExpressionError(f"unknown function {func!r}")

    def erfc(self, x):
        return _erfc64(np.asarray(x, dtype=np.float64)).astype(self.dtype)
