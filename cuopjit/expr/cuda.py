"""Generate CUDA C from a tree: one expression in `float` or `double`, plus a prelude of helpers.

Contract with a template: put `code.prelude` at file scope before the kernel (each helper sits in
its own `#ifndef` guard, so several preludes may share one file), and `code.expr` where the value is
needed. The caller maps every name the tree reads to the C expression that loads it, e.g.
`{"acc": "v", "bias": "bias_p[n]"}`; user text never reaches NVRTC, only the tree's nodes and
these loads. Only math builtins NVRTC declares without headers are used.

Semantics (the NumPy reference in numpy_eval.py follows them): relu(x) = x < 0 ? 0 : x (NaN stays
NaN, relu(-0) = -0); min/max/clamp propagate NaN like torch.minimum/maximum/clamp (fminf/fmaxf would
drop it), clamp(x, lo, hi) = min(max(x, lo), hi); gelu(x) = x/2 * erfc(-x/sqrt(2)) (the erf form,
accurate for negative x); gelu_tanh, silu = x / (1 + exp(-x)), sigmoid = 1 / (1 + exp(-x)) by their
formulas, so gelu(-inf), gelu_tanh(-inf) and silu(-inf) are NaN; comparisons are IEEE (false on NaN
but !=).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Union

import numpy as np

from .parse import Expression, Program
from .tree import (FUNCTIONS, GELU_TANH_K, BinOp, BoolOp, Call, Compare, ExpressionError, Name, Neg, Node, Not,
                   Num, functions)

SCALARS = ("float", "double")
_MATH = {
    "float": {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "rsqrt": "rsqrtf", "tanh": "tanhf", "abs": "fabsf",
              "erfc": "erfcf", "fmin": "fminf", "fmax": "fmaxf"},
    "double": {"exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh", "abs": "fabs",
               "erfc": "erfc", "fmin": "fmin", "fmax": "fmax"},
}
_BUILTINS = ("exp", "log", "sqrt", "rsqrt", "tanh", "abs")  # called directly, e.g. expf(x)
_HELPERS = {  # called as cj_<name>(...); parameters are FUNCTIONS[name], each of the scalar type
    "relu": "return x < {zero} ? {zero} : x;",
    "leaky_relu": "return x > {zero} ? x : x * slope;",
    "gelu": "return {half} * x * {erfc}(-x * {sqrt1_2});",
    "gelu_tanh": "return {half} * x * ({one} + {tanh}({sqrt_2_pi} * (x + {k} * x * x * x)));",
    "silu": "return x / ({one} + {exp}(-x));",
    "sigmoid": "return {one} / ({one} + {exp}(-x));",
    "min": "return (a != a || b != b) ? a + b : {fmin}(a, b);",
    "max": "return (a != a || b != b) ? a + b : {fmax}(a, b);",
    "clamp": "return cj_min(cj_max(x, lo), hi);",
}
_NEEDS = {"clamp": ("min", "max")}
_SIMPLE = re.compile(r"[A-Za-z_]\w*(\[[^\[\]]*\])?")


@dataclass(frozen=True)
class CudaCode:
    """A generated expression: `prelude` goes at file scope, `expr` is one C expression of the scalar type."""
    prelude: str
    expr: str


@dataclass(frozen=True)
class CudaProgram:
    """A generated program: `body` declares one `const <scalar> <result>` per output, in program order;
    `results[i]` is the C variable holding `program.outputs[i]`, for the template to store."""
    prelude: str
    body: str
    results: tuple[str, ...]


def literal(value: float, scalar: str = "float") -> str:
    """A C literal of exactly the value the kernel computes with: float's nearest value, shortest digits,
    'f' suffix ('1.5f', '0.1f'); a double's shortest round-trip digits ('0.1'); negatives parenthesised."""
    _check_scalar(scalar)
    if scalar == "float":
        with np.errstate(over="ignore"):
            f = np.float32(value)
        if not math.isfinite(float(f)):
            raise ExpressionError(f"the number {value!r} is outside float's range (magnitude at most "
                                  f"{float(np.finfo(np.float32).max)!r}); use Double or a smaller number")
        text = str(f) + "f"
    else:
        text = repr(float(value))
    return f"({text})" if text.startswith("-") else text


def prelude(funcs: Iterable[str], scalar: str = "float") -> str:
    """`__device__ __forceinline__` definitions of the helpers `funcs` need, each in an include guard."""
    _check_scalar(scalar)
    wanted: dict[str, None] = {}
    for f in funcs:
        if f not in FUNCTIONS:
            raise ExpressionError(f"unknown function {f!r}; functions: {', '.join(FUNCTIONS)}")
        for g in (*_NEEDS.get(f, ()), f):
            if g in _HELPERS:
                wanted[g] = None
    words = dict(_MATH[scalar], zero=literal(0.0, scalar), one=literal(1.0, scalar), half=literal(0.5, scalar),
                 sqrt1_2=literal(math.sqrt(0.5), scalar), sqrt_2_pi=literal(math.sqrt(2 / math.pi), scalar),
                 k=literal(GELU_TANH_K, scalar))
    out = []
    for f in wanted:
        guard = f"CJ_EXPR_{f.upper()}_{scalar.upper()}"
        params = ", ".join(f"{scalar} {p}" for p in FUNCTIONS[f])
        out.append(f"#ifndef {guard}\n#define {guard}\n__device__ __forceinline__ {scalar} cj_{f}({params}) "
                   f"{{ {_HELPERS[f].format(**words)} }}\n#endif\n")
    return "".join(out)


def generate(expr: Union[Expression, Node], loads: Mapping[str, str], scalar: str = "float") -> CudaCode:
    """The C expression of `expr` in `scalar` ('float' or 'double'), reading each name through `loads`."""
    _check_scalar(scalar)
    tree = expr.tree if isinstance(expr, Expression) else expr
    return CudaCode(prelude(functions(tree), scalar), _Gen(loads, scalar).c(tree))


def generate_program(program: Program, loads: Mapping[str, str], scalar: str = "float",
                     prefix: str = "cj_out") -> CudaProgram:
    """Statements computing every output of `program` into locals `<prefix>0, <prefix>1, ...`.

    `loads` maps each input; an earlier output is read from its local."""
    _check_scalar(scalar)
    env = dict(loads)
    lines, results, used = [], [], {}
    for i, (out, tree) in enumerate(program.statements):
        var = f"{prefix}{i}"
        lines.append(f"const {scalar} {var} = {_Gen(env, scalar).c(tree)};")
        env[out] = var
        results.append(var)
        used.update(dict.fromkeys(functions(tree)))
    return CudaProgram(prelude(used, scalar), "\n".join(lines), tuple(results))


def _check_scalar(scalar: str) -> None:
    if scalar not in SCALARS:
        raise ValueError(f"scalar type {scalar!r} is not supported; use one of {', '.join(SCALARS)}")


class _Gen:
    def __init__(self, loads: Mapping[str, str], scalar: str):
        self.loads, self.scalar = loads, scalar

    def c(self, node: Node) -> str:
        if isinstance(node, Num):
            return literal(node.value, self.scalar)
        if isinstance(node, Name):
            load = self.loads.get(node.id)
            if not isinstance(load, str) or not load.strip():
                raise ExpressionError(f"no load was given for {node.id!r}; loads given: {', '.join(self.loads)}")
            return load if _SIMPLE.fullmatch(load) else f"({load})"
        if isinstance(node, Neg):
            return f"(-{self.c(node.operand)})"
        if isinstance(node, (BinOp, Compare)):
            return f"({self.c(node.left)} {node.op} {self.c(node.right)})"
        if isinstance(node, BoolOp):
            return f"({self.c(node.left)} {'&&' if node.op == 'and' else '||'} {self.c(node.right)})"
        if isinstance(node, Not):
            return f"(!{self.c(node.operand)})"
        if isinstance(node, Call):
            args = [self.c(a) for a in node.args]
            if node.func == "where":
                return f"({args[0]} ? {args[1]} : {args[2]})"
            name = _MATH[self.scalar][node.func] if node.func in _BUILTINS else f"cj_{node.func}"
            return f"{name}({', '.join(args)})"
        raise TypeError(f"not an expression node: {node!r}")
