"""Generate CUDA C from a tree: one expression in `float` or `double`, plus a prelude of helpers.

Contract with a template: put `code.prelude` at file scope before the kernel (each helper sits in
its own `#ifndef` guard, so several preludes may share one file), and `code.expr` where the value is
needed. The caller maps every name the tree reads to the C expression that loads it, e.g.
`{"acc": "v", "bias": "bias_p[n]"}`; user text never reaches NVRTC, only the tree's nodes and
these loads. Only math builtins NVRTC declares without headers are used.

Semantics (the NumPy reference in numpy_eval.py follows them): relu(x) = x < 0 ? 0 : x (NaN stays
NaN, relu(-0) = -0); min/max/clamp propagate NaN like torch.minimum/maximum/clamp (fminf/fmaxf would
drop it), clamp(x, lo, hi) = min(max(x, lo), hi); gelu(x) = x/2 * erfc(-x/sqrt(2)) in double (the erf
form, accurate for negative x) and x * Phi(x) in float with the normal tail Phi(-|x|) = 2^-p(|x|), p a fitted
polynomial (tools/fit_gelu.py; 8 fma and one ex2.approx: fused GEMMs pay it per output; absolute error within
|x| * 2^-22 with ex2.approx's 2 ulp, erff's formula 2^-23; -0 below -6, where 1 + erf already rounded to 0);
gelu_tanh, silu = x / (1 + exp(-x)), sigmoid = 1 / (1 + exp(-x)) by their formulas in double. In float the three
are one ex2.approx and one rcp.approx each (7, 5 and 5 instructions instead of 25-35 with tanhf, expf and IEEE division,
which an unrolled epilogue pays per output): silu and sigmoid as x / (1 + 2^(-x log2 e)), gelu_tanh as its equal
x / (1 + exp(-2u)), u = sqrt(2/pi) (x + k x^3) (no cancellation for negative x, unlike 1 + tanh(u)). Error: ex2.approx
2 ulp of its result plus the rounding of its argument a (|a| 2^-24 relative), the division 2 ulp: at most (4 + |a|)
ulp relative, 1.6e-6 at |x| = 20; a denominator past 2^126 gives -0 (x / inf's value), below a float's smallest
normal. So gelu(-inf), gelu_tanh(-inf) and silu(-inf) are NaN; comparisons are IEEE (false on NaN but !=).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Union

import numpy as np

from .parse import Expression, Program
from .tree import FUNCTIONS, GELU_TANH_K, ExpressionError, Neg, Node, Num, fold, functions

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
# float's own gelu: x * Phi(x) with Phi(-|x|) = 2^-p(|x|), p of degree 8 fitted on [0, 6] (tools/fit_gelu.py; 0 past
# 6, where Phi(-6) < 2^-29): 8 fma and one ex2.approx, half the instructions of erf's two polynomials, which a fused
# GEMM's epilogue paid per output while the tensor cores waited.
_GELU_TAIL = [0xb63a0ac4, 0x3821ff44, 0xb93f6d67, 0xb918ecad, 0x3be7d901, 0xbd570f7a, 0xbeeb1ce8, 0xbf93576f,
              0xbf800000]
def _poly(var: str, t: str, coefs: list[int]) -> str:
    return (f"float {var} = __int_as_float(0x{coefs[0]:x}); "
            + "".join(f"{var} = fmaf({var}, {t}, __int_as_float(0x{c:x})); " for c in coefs[1:]))


_FLOAT_HELPERS = {   # coefficients as immediates (a table held registers: an unrolled SIMT epilogue spilled)
    "gelu": ("const float a = fabsf(x); " + _poly("p", "a", _GELU_TAIL)
             + "float q; asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(q) : \"f\"(p)); q = a < 6.f ? q : 0.f; "
               "return x * (x < 0.f ? q : 1.f - q);").replace("{", "{{").replace("}", "}}"),
    # x / (1 + 2^e): ex2.approx and rcp.approx (__fdividef); a denominator past 2^126 gives -0 (as x / inf)
    "exp2_ratio": "float t; asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(t) : \"f\"(e)); "
                  "return __fdividef(x, 1.f + t);".replace("{", "{{").replace("}", "}}"),
    "silu": "return cj_exp2_ratio(x, x * {m_log2e});",
    "sigmoid": "return cj_exp2_ratio({one}, x * {m_log2e});",
    "gelu_tanh": "return cj_exp2_ratio(x, x * fmaf(x * x, {m2k_log2e}, {m2_log2e}));",   # -2u log2 e
}
_HELPER_PARAMS = {"exp2_ratio": ("x", "e")}
_NEEDS = {"clamp": ("min", "max")}
_FLOAT_NEEDS = {"silu": ("exp2_ratio",), "sigmoid": ("exp2_ratio",), "gelu_tanh": ("exp2_ratio",)}
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
        for g in (*_NEEDS.get(f, ()), *(_FLOAT_NEEDS.get(f, ()) if scalar == "float" else ()), f):
            if g in _HELPERS or scalar == "float" and g in _FLOAT_HELPERS:
                wanted[g] = None
    words = dict(_MATH[scalar], zero=literal(0.0, scalar), one=literal(1.0, scalar), half=literal(0.5, scalar),
                 sqrt1_2=literal(math.sqrt(0.5), scalar), sqrt_2_pi=literal(math.sqrt(2 / math.pi), scalar),
                 k=literal(GELU_TANH_K, scalar), m_log2e=literal(-1 / math.log(2), scalar),
                 m2_log2e=literal(-2 * math.sqrt(2 / math.pi) / math.log(2), scalar),
                 m2k_log2e=literal(-2 * math.sqrt(2 / math.pi) * GELU_TANH_K / math.log(2), scalar))
    out, helpers = [], _FLOAT_HELPERS if scalar == "float" else {}
    for f in wanted:
        guard = f"CJ_EXPR_{f.upper()}_{scalar.upper()}"
        params = ", ".join(f"{scalar} {p}" for p in _HELPER_PARAMS.get(f) or FUNCTIONS[f])
        out.append(f"#ifndef {guard}\n#define {guard}\n__device__ __forceinline__ {scalar} cj_{f}({params}) "
                   f"{{ {(helpers.get(f) or _HELPERS[f]).format(**words)} }}\n#endif\n")
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
        return fold(node, self.leaf, lambda n, a: f"({'-' if isinstance(n, Neg) else '!'}{a})", self.binary, self.call)

    def leaf(self, node: Node) -> str:
        if isinstance(node, Num):
            return literal(node.value, self.scalar)
        load = self.loads.get(node.id)
        if not isinstance(load, str) or not load.strip():
            raise ExpressionError(f"no load was given for {node.id!r}; loads given: {', '.join(self.loads)}")
        return load if _SIMPLE.fullmatch(load) else f"({load})"

    @staticmethod
    def binary(node: Node, left: str, right: str) -> str:
        op = {"and": "&&", "or": "||"}.get(node.op, node.op)
        return f"({left} {op} {right})"

    def call(self, node: Node, args: list) -> str:
        if node.func == "where":
            return f"({args[0]} ? {args[1]} : {args[2]})"
        name = _MATH[self.scalar][node.func] if node.func in _BUILTINS else f"cj_{node.func}"
        return f"{name}({', '.join(args)})"
