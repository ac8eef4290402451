"""The expression language (cuopjit.expr), CPU only: parsing, refusals, canonical keys, kinds, NumPy semantics.

Generated CUDA compiled with real NVRTC is in test_expr_cuda.py.
"""
from __future__ import annotations

import ast
import math
import pathlib
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuopjit.errors import CuopjitError
from cuopjit.expr import (FUNCTIONS, KINDS, ExpressionError, canonical, check_kinds, epilogue_key, evaluate,
                          evaluate_program, infer_kind, parse_epilogue, parse_program)

SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30, 88.0, -88.0, 710.0, -710.0, 1.0, -1.0]


def _inputs(rng, n=64):
    return np.concatenate([np.array(SPECIALS), rng.standard_normal(n) * 4])


def _nan_max(a, b):
    return a + b if math.isnan(a) or math.isnan(b) else max(a, b)


def _nan_min(a, b):
    return a + b if math.isnan(a) or math.isnan(b) else min(a, b)


def _exp(x):
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _sigmoid(x):  # the stable form, so the reference is independent of the implementation's
    if math.isnan(x):
        return x
    if x >= 0:
        return 1.0 / (1.0 + _exp(-x))
    return _exp(x) / (1.0 + _exp(x))


def _log(x):
    return x if math.isnan(x) else math.nan if x < 0 else -math.inf if x == 0 else math.log(x)


def _sqrt(x):
    return x if math.isnan(x) else math.nan if x < 0 else math.sqrt(x)


def _rsqrt(x):
    s = _sqrt(x)
    return math.copysign(math.inf, x) if s == 0 else 1.0 / s  # CUDA's rsqrt(-0) = -inf


# Per-element float64 references written from the definitions (torch's formulas), not from numpy_eval.
REFERENCE = {
    "relu": lambda x: 0.0 if x < 0 else x,
    "leaky_relu": lambda x, s: x if x > 0 else x * s,
    "gelu": lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if math.isfinite(x) else 0.5 * x * (1.0 + math.copysign(1.0, x)) if not math.isnan(x) else x,
    "silu": lambda x: x * _sigmoid(x),
    "sigmoid": _sigmoid,
    "tanh": math.tanh,
    "exp": _exp,
    "log": _log,
    "sqrt": _sqrt,
    "rsqrt": _rsqrt,
    "abs": abs,
    "min": _nan_min,
    "max": _nan_max,
    "clamp": lambda x, lo, hi: _nan_min(_nan_max(x, lo), hi),
}
ATOL = {"gelu": 1e-15, "gelu_tanh": 1e-15, "silu": 1e-300, "sigmoid": 1e-300}  # 1/(1+exp(-x)) underflows first


def _reference(func, *args):
    f = np.frompyfunc(REFERENCE[func], len(args), 1)
    with np.errstate(all="ignore"):
        return np.asarray(f(*np.broadcast_arrays(*args)), dtype=np.float64)


# ---------------------------------------------------------------- functions and operators vs float64

@pytest.mark.parametrize("func", [f for f in FUNCTIONS if f != "where"])
def test_function_matches_float64_reference(func, rng):
    arity = len(FUNCTIONS[func])
    args = [_inputs(rng)] + [rng.permutation(_inputs(rng)) for _ in range(arity - 1)]
    names = ["x", "y", "z"][:arity]
    if func == "leaky_relu":
        args[1] = np.float64(0.01)
    expr = parse_epilogue(f"{func}({', '.join(names)})")
    got = evaluate(expr, dict(zip(names, args)))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, _reference(func, *args), rtol=1e-13, atol=ATOL.get(func, 0), equal_nan=True)


@pytest.mark.parametrize("func", [f for f in FUNCTIONS if f != "where"])
def test_function_float32_close_to_float64(func, rng):
    arity = len(FUNCTIONS[func])
    names = ["x", "y", "z"][:arity]
    base = np.concatenate([[np.nan, np.inf, -np.inf, 0.0], rng.uniform(-6, 6, 60)])
    env = {n: base if i == 0 else rng.permutation(base) for i, n in enumerate(names)}
    expr = parse_epilogue(f"{func}({', '.join(names)})")
    f32, f64 = evaluate(expr, env, np.float32), evaluate(expr, env, np.float64)
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, f64, rtol=3e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("op", ["+", "-", "*", "/"])
def test_arithmetic_with_nan_and_inf(op, rng):
    x, y = _inputs(rng), rng.permutation(_inputs(rng))
    got = evaluate(parse_epilogue(f"x {op} y"), {"x": x, "y": y})
    with np.errstate(all="ignore"):
        want = {"+": x + y, "-": x - y, "*": x * y, "/": x / y}[op]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(evaluate(parse_epilogue("-x"), {"x": x}), -x)
    np.testing.assert_array_equal(evaluate(parse_epilogue("+x"), {"x": x}), x)


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_comparisons_in_where_follow_ieee(op, rng):
    x, y = _inputs(rng), rng.permutation(_inputs(rng))
    got = evaluate(parse_epilogue(f"where(x {op} y, 1, 0)"), {"x": x, "y": y})
    want = [1.0 if eval(f"a {op} b") else 0.0 for a, b in zip(x.tolist(), y.tolist())]  # noqa: S307
    np.testing.assert_array_equal(got, want)


def test_boolean_conditions(rng):
    x, y = _inputs(rng), rng.permutation(_inputs(rng))
    got = evaluate(parse_epilogue("where(x > 0 and not y < 1 or x != x, x, y)"), {"x": x, "y": y})
    want = [a if ((a > 0 and not b < 1) or a != a) else b for a, b in zip(x.tolist(), y.tolist())]
    np.testing.assert_array_equal(got, want)


def test_relu_and_min_max_propagate_nan():
    env = {"x": np.array([np.nan, -1.0, 2.0]), "y": np.array([0.0, np.nan, 1.0])}
    np.testing.assert_array_equal(evaluate(parse_epilogue("relu(x)"), env), [np.nan, 0.0, 2.0])
    np.testing.assert_array_equal(evaluate(parse_epilogue("max(x, y)"), env), [np.nan, np.nan, 2.0])
    np.testing.assert_array_equal(evaluate(parse_epilogue("min(x, y)"), env), [np.nan, np.nan, 1.0])
    np.testing.assert_array_equal(evaluate(parse_epilogue("clamp(x, 0, 1)"), env), [np.nan, 0.0, 1.0])


def test_broadcasting_of_operand_kinds(rng):
    m, n = 5, 7
    acc, c = rng.standard_normal((m, n)), rng.standard_normal((m, n))
    bias, row, res = rng.standard_normal(n), rng.standard_normal((m, 1)), rng.standard_normal((m, n))
    e = parse_epilogue("relu(acc * s + bias + row + res) + 0.5 * c")
    got = evaluate(e, {"acc": acc, "c": c, "s": 2.0, "bias": bias, "row": row, "res": res})
    np.testing.assert_allclose(got, np.maximum(acc * 2.0 + bias + row + res, 0) + 0.5 * c, rtol=1e-15)
    assert got.shape == (m, n)


def test_program_outputs_read_earlier_outputs(rng):
    x, y = rng.standard_normal((3, 4)), rng.standard_normal(4)
    p = parse_program("a = x * 2; b = relu(a + y)\nd = max(b, a)")
    assert (p.inputs, p.outputs) == (("x", "y"), ("a", "b", "d"))
    out = evaluate_program(p, {"x": x, "y": y}, np.float32)
    assert list(out) == ["a", "b", "d"] and all(v.dtype == np.float32 for v in out.values())
    a = (x * 2).astype(np.float32)
    np.testing.assert_allclose(out["d"], np.maximum(np.maximum(a + y.astype(np.float32), 0), a), rtol=1e-6)


def test_evaluate_rejects_missing_value_and_dtype():
    with pytest.raises(ExpressionError, match=r"no value was given for 'bias'; given: acc"):
        evaluate(parse_epilogue("acc + bias"), {"acc": 1.0})
    with pytest.raises(ValueError, match="dtype float16 is not supported; use float32 or float64"):
        evaluate(parse_epilogue("acc"), {"acc": 1.0}, np.float16)


# ---------------------------------------------------------------- canonical form

SAME = [
    ("relu(acc+bias)", "relu( acc + bias )", "relu(((acc)+(bias)))", "relu(+acc + +bias)", "relu(acc\n+bias)"),
    ("acc*2", "acc * 2.0", "acc*2.000", "acc*(2)", "acc*2e0", "acc * +2"),
    ("acc*-1", "acc*(-1.0)", "acc * -(1)", "acc*-1.", "acc * - - -1"),
    ("where(x>0,x,0)", "where((x > 0), x, 0.0)", "where(((x) > (0)), (x), 0)", "where(x > 0., +x, 0)"),
    ("acc*1e3", "acc*1000", "acc*1000.0"),
    ("acc*0.1", "acc*.1", "acc*1e-1"),
    ("clamp(x,-1,1)", "clamp(x, -1.0, +1.0)"),
    ("where(a<b and c<d or not a==b, 1, 2)", "where(((a<b) and (c<d)) or (not (a==b)), 1, 2)"),
]
DIFFERENT = [
    "acc+bias", "bias+acc", "(a+b)+c", "a+(b+c)", "acc*2", "acc*2.0000001", "acc*0.0", "acc*-0.0",
    "relu(acc)", "max(acc, 0)", "acc-1", "acc+-1", "where(x>0,x,0)", "where(x>=0,x,0)", "-(acc*b)", "-acc*b",
    "acc/2", "acc*0.5", "where(a<b and c<d or e<f, 1, 2)", "where(a<b and (c<d or e<f), 1, 2)",
    "gelu(acc)", "gelu_tanh(acc)", "x - -y", "x + y",
]


@pytest.mark.parametrize("spellings", SAME, ids=lambda s: s[0])
def test_canonical_key_ignores_spelling(spellings):
    exprs = [parse_epilogue(s) for s in spellings]
    assert len({e.canonical for e in exprs}) == 1
    assert len(set(exprs)) == 1 and len({hash(e) for e in exprs}) == 1


def test_canonical_key_differs_across_meanings():
    keys = [parse_epilogue(s).canonical for s in DIFFERENT]
    assert len(set(keys)) == len(keys)


def test_canonical_examples_and_round_trip():
    e = parse_epilogue("relu( acc + bias )")
    assert e.canonical == "relu((acc+bias))" and e.operands == ("bias",) and e.names == ("acc", "bias")
    assert parse_epilogue("-0.0*acc").canonical == "(-0.0*acc)"
    assert parse_epilogue("0.0*acc") != parse_epilogue("-0.0*acc")
    e = parse_epilogue("where(not (x < 1 or y >= 2) and c != 3, -acc, c / 4)")
    assert parse_epilogue(e.canonical) == e and parse_epilogue(e.canonical).canonical == e.canonical
    assert canonical(e.tree) == e.canonical == "where(((not ((x<1.0) or (y>=2.0))) and (c!=3.0)),(-acc),(c/4.0))"


def test_program_canonical():
    p = parse_program("""
        a = x*2
        b = relu( a+y );  d = a""")
    assert p.canonical == "a=(x*2.0); b=relu((a+y)); d=a"
    assert parse_program(p.canonical) == p == parse_program("a = x * 2.0; b = relu(a + y); d = a")
    assert parse_program("a = x * 2; b = a") != p


def test_epilogue_key_includes_kinds():
    e = parse_epilogue("relu(acc + bias) * s")
    k1 = epilogue_key(e, {"bias": "per_column", "s": "scalar"})
    assert k1 == "(relu((acc+bias))*s)|bias:per_column|s:scalar"
    assert k1 == epilogue_key(parse_epilogue("relu(acc+bias)*s"), {"s": "scalar", "bias": "per_column"})
    assert k1 != epilogue_key(e, {"bias": "per_row", "s": "scalar"})


@st.composite
def _number(draw):
    k = draw(st.integers(0, 1000))
    value = draw(st.sampled_from([float(k), k / 8, k * 1e-3, k * 1e10]))
    spellings = [repr(value), f" {value!r} ", f"({value!r})", f"+{value!r}"]
    if value.is_integer() and value < 1e6:
        spellings += [str(int(value)), f"{int(value)}.0", f"{int(value)}e0"]
    return draw(st.sampled_from(spellings)), draw(st.sampled_from(spellings))


_LEAF = st.one_of(st.sampled_from(["acc", "c", "bias", "x1"]).map(lambda n: (n, f" ({n}) ")), _number())


def _combine(kids):
    def binop(t):
        (a1, a2), (b1, b2), op = t
        return f"({a1}{op}{b1})", f"( ( {a2} ) {op}  {b2} )"

    def call(t):
        f, args = t
        return f"{f}({','.join(a for a, _ in args)})", f"{f}( {' , '.join(b for _, b in args)} )"

    def where(t):
        (a1, a2), op, (b1, b2), (c1, c2), (d1, d2) = t
        return f"where({a1}{op}{b1},{c1},{d1})", f"where( (({a2}) {op} {b2}), +{c2}, ({d2}) )"

    fixed = [f for f in FUNCTIONS if f != "where"]
    return st.one_of(
        st.tuples(kids, kids, st.sampled_from("+-*/")).map(binop),
        st.tuples(kids).map(lambda t: (f"-{t[0][0]}", f"-( {t[0][1]} )")),
        st.sampled_from(fixed).flatmap(lambda f: st.tuples(st.just(f), st.tuples(*[kids] * len(FUNCTIONS[f])))).map(call),
        st.tuples(kids, st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), kids, kids, kids).map(where),
    )


@settings(max_examples=200, deadline=None)
@given(st.recursive(_LEAF, _combine, max_leaves=12))
def test_canonical_is_idempotent_and_spelling_free(pair):
    first, second = parse_epilogue(pair[0]), parse_epilogue(pair[1])
    assert first == second and first.canonical == second.canonical
    again = parse_epilogue(first.canonical)
    assert again == first and again.canonical == first.canonical


# ---------------------------------------------------------------- operand kinds

@pytest.mark.parametrize("shape, out, axis, kind", [
    ((), (4, 5), -1, "scalar"), ((5,), (4, 5), -1, "per_column"), ((1, 5), (4, 5), -1, "per_column"),
    ((4, 1), (4, 5), -1, "per_row"), ((4, 5), (4, 5), -1, "full"), ((1, 4, 5), (4, 5), -1, "full"),
    ((3, 1, 1), (2, 3, 4, 5), 1, "per_column"), ((1, 3, 1, 1), (2, 3, 4, 5), 1, "per_column"),
    ((2, 1, 4, 5), (2, 3, 4, 5), 1, "per_row"), ((2, 3, 4, 5), (2, 3, 4, 5), 1, "full"),
    ((3,), (2, 4, 5, 3), -1, "per_column"), ((2, 4, 5, 1), (2, 4, 5, 3), -1, "per_row"),
    ((1,), (4, 1), -1, "per_column"),
])
def test_infer_kind(shape, out, axis, kind):
    assert infer_kind("v", shape, out, channel_axis=axis) == kind


@pytest.mark.parametrize("shape, out, axis, match", [
    ((4,), (4, 5), -1, r"operand 'v' of shape \(4,\) does not broadcast to the output; allowed for an output of "
                       r"shape \(4, 5\): a Python number, a per-column vector \(1, 5\), a per-row vector \(4, 1\)"),
    ((5, 4), (4, 5), -1, "does not broadcast to the output"),
    ((2, 4, 5), (4, 5), -1, "does not broadcast to the output"),
    ((1,), (4, 5), -1, r"of shape \(1,\) is neither a row, a column nor the output"),
    ((3,), (2, 3, 4, 5), 1, "does not broadcast to the output"),
    ((2, 3, 1, 1), (2, 3, 4, 5), 1, r"neither a row, a column nor the output; .*per-column vector \(1, 3, 1, 1\)"),
])
def test_infer_kind_refuses(shape, out, axis, match):
    with pytest.raises(ExpressionError, match=match):
        infer_kind("v", shape, out, channel_axis=axis)


def test_check_kinds():
    e = parse_epilogue("acc * scale + shift + c")
    assert check_kinds(e, {"shift": "per_column", "scale": "scalar"}) == (("scale", "scalar"), ("shift", "per_column"))
    assert set(KINDS) == {"scalar", "per_column", "per_row", "full"}
    with pytest.raises(ExpressionError, match=r"needs operand 'shift', which is missing \(given: scale\)"):
        check_kinds(e, {"scale": "scalar"})
    with pytest.raises(ExpressionError, match=r"operand 'bais' is not used by the epilogue .*its operands: scale, shift"):
        check_kinds(e, {"scale": "scalar", "shift": "full", "bais": "full"})
    with pytest.raises(ExpressionError, match=r"operand 'scale' has kind 'row'; kinds are scalar, per_column"):
        check_kinds(e, {"scale": "row", "shift": "full"})
    with pytest.raises(ExpressionError, match=r"'acc' is the epilogue's own name"):
        check_kinds(e, {"acc": "full", "scale": "scalar", "shift": "full"})


# ---------------------------------------------------------------- hostile input: one line each

HOSTILE = [
    ("acc.real", r"'acc.real' is not allowed \(attribute access\); allowed: numbers, names"),
    ("acc.__class__", "attribute access"),
    ("acc[0]", r"'acc\[0\]' is not allowed \(subscripts\)"),
    ("'acc'", r"strings \(quotes\) are not allowed, at character 1"),
    ("b'\\x00' + acc", r"strings \(quotes\) are not allowed"),
    ('f"{acc}"', r"strings \(quotes\) are not allowed"),
    ("lambda: acc", r"'lambda: acc' is not allowed \(lambdas\)"),
    ("[x for x in acc]", r"comprehensions"),
    ("(y := acc)", r"assignment expressions \(:=\)"),
    ("acc = 1", r"assignments \(=\) are not allowed in an epilogue"),
    ("relu(x=acc)", r"keyword arguments in 'relu\(x=acc\)' are not allowed; call relu\(x\) positionally"),
    ("relu(**acc)", r"keyword arguments"),
    ("relu(*acc)", r"starred arguments in 'relu\(\*acc\)' are not allowed"),
    ("acc ** 2", r"operator \*\* \(power; write x \* x"),
    ("acc % 2", r"operator % \(modulo\) in 'acc % 2' is not allowed; operators are \+ - \* / and unary -"),
    ("acc // 2", r"// \(floor division\)"),
    ("acc & 1", r"& \(bit and\)"),
    ("acc | 1", r"\| \(bit or\)"),
    ("acc ^ 1", r"\^ \(bit xor\)"),
    ("acc << 1", r"<< \(shift\)"),
    ("~acc", r"~ \(bit not\)"),
    ("acc @ c", r"@ \(matrix product\)"),
    ("acc # comment", r"comments \(#\) are not allowed, at character 5"),
    ("{acc}", r"braces \(\{\) are not allowed, at character 1; group with parentheses"),
    ("acc; acc", r"';' is not allowed, at character 4: an epilogue is one expression"),
    ("asm(acc)", r"unknown function 'asm'; functions: relu, leaky_relu, gelu"),
    ("acc + asm", r"'asm' is a reserved word in CUDA C"),
    ("int * acc", r"'int' is a reserved word in CUDA C"),
    ("__import__(acc)", r"unknown function '__import__'"),
    ("__builtins__", r"name '__builtins__' starts with an underscore"),
    ("relu(relu)(acc)", r"calls of calls \('relu\(relu\)\(acc\)'\) are not allowed"),
    ("os.system(acc)", r"only the listed functions can be called, not 'os.system'"),
    ("(lambda: 0)()", r"only the listed functions can be called"),
    ("acc+" * 600 + "acc", r"epilogue is 2403 characters long; at most 2000 are allowed"),
    ("", r"epilogue '': it is empty; write an expression such as relu\(acc \+ bias\)"),
    ("  \n ", r"it is empty"),
    ("1e999 * acc", r"the number 1e999 overflows a double; write a finite number"),
    ("9" * 400 + " * acc", r"overflows a double"),
    ("nan", r"'nan' is not a constant here; NaN and infinity cannot be written, pass them as scalar operands"),
    ("acc * Inf", r"'Inf' is not a constant here"),
    ("acc < 1", r"condition 'acc < 1' is only allowed as where\(\)'s first argument, e.g. where\(x > 0, x, 0\)"),
    ("acc and c", r"condition 'acc and c' is only allowed as where\(\)'s first argument"),
    ("not acc", r"'not' in 'not acc' is only allowed inside where\(\)'s condition"),
    ("where(acc, 1, 0)", r"where\(\)'s condition 'acc' is not a comparison; write e.g. where\(x > 0, a, b\)"),
    ("where(True, 1, 0)", r"where\(\)'s condition 'True' is not a comparison"),
    ("where(0 < acc < 1, 1, 0)", r"chained comparison '0 < acc < 1'; write \(a < b\) and \(b < c\)"),
    ("where(acc in c, 1, 0)", r"operator 'in' in 'acc in c' is not allowed; comparisons are < <= > >= == !="),
    ("where(acc is c, 1, 0)", r"operator 'is' in 'acc is c'"),
    ("foo(acc)", r"unknown function 'foo'; functions: relu, leaky_relu"),
    ("getattr(acc, c)", r"unknown function 'getattr'"),
    ("relu(acc, 1)", r"relu\(\) takes 1 argument, relu\(x\), got 2"),
    ("clamp(acc, 0)", r"clamp\(\) takes 3 arguments, clamp\(x, lo, hi\), got 2"),
    ("where(acc > 0, 1)", r"where\(\) takes 3 arguments, where\(cond, a, b\), got 2"),
    ("acc if c else 0", r"conditional expressions \(use where\(cond, a, b\)\)"),
    ("relu(acc", r"syntax error at column 5: '\(' was never closed"),
    ("acc +", r"syntax error at column"),
    ("True * acc", r"True is not allowed; allowed: numbers"),
    ("None", r"None is not allowed"),
    ("...", r"Ellipsis is not allowed"),
    ("1j * acc", r"complex numbers \(1j\) are not allowed"),
    ("(acc, c)", r"'\(acc, c\)' is not allowed \(tuples\)"),
    ("[acc]", r"lists"),
    ("\uff41cc", r"character '\uff41' is not allowed, at character 1; only printable ASCII is"),
    ("acc\x00", r"character '\\x00' is not allowed"),
    ("acc \\\n + 1", r"backslashes are not allowed"),
    ("relu", r"'relu' is a function; call it as relu\(x\)"),
    ("relu(acc) + max", r"'max' is a function; call it as max\(a, b\)"),
    ("-" * 300 + "acc", r"it nests more than 200 levels deep"),
    ("x" * 65, r"is 65 characters long; at most 64 are allowed"),
    ("await acc", r"syntax error|await"),
]


@pytest.mark.parametrize("text, match", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_epilogue_is_one_line_error(text, match):
    assert len(HOSTILE) >= 30
    with pytest.raises(ExpressionError, match=match) as info:
        parse_epilogue(text)
    err = info.value
    assert isinstance(err, CuopjitError) and isinstance(err, ValueError)
    assert "\n" not in str(err) and err.__cause__ is None
    assert err.__context__ is None or err.__suppress_context__  # no traceback chain


HOSTILE_PROGRAMS = [
    ("a = x; a = x * 2", r"'a' is assigned twice; assign each output once \(line 1, column 8\)"),
    ("x = relu(x)", r"'x' is read before it is assigned; name outputs apart from inputs"),
    ("a = b * 2\nb = x", r"'b' is read before it is assigned"),
    ("a, b = x, y", r"cannot assign to 'a, b'; assign to a plain name"),
    ("a = b = x", r"chained assignment"),
    ("a += x", r"augmented assignment \(\+= and the like\) are not allowed"),
    ("import os", r"import statements are not allowed; a program is statements name = expression"),
    ("x * 2", r"statement 'x \* 2' assigns nothing; write name = expression"),
    ("a.b = x", r"cannot assign to 'a.b'"),
    ("a = 1", r"the program reads no input"),
    ("if x: a = 1", r"If statements are not allowed"),
    ("a: float = x", r"annotations are not allowed"),
    ("a = x # out", r"comments \(#\)"),
    ("a = x;; b = y", r"syntax error at line 1"),
    ("relu = x", r"'relu' is a function"),
    ("a = x\nb = a ** 2", r"operator \*\* \(power"),
    ("", r"program '': it is empty; write statements such as out = relu\(x \+ y\)"),
]


@pytest.mark.parametrize("text, match", HOSTILE_PROGRAMS, ids=range(len(HOSTILE_PROGRAMS)))
def test_hostile_program_is_one_line_error(text, match):
    with pytest.raises(ExpressionError, match=match) as info:
        parse_program(text)
    assert "\n" not in str(info.value)


def test_refusals_of_non_text():
    with pytest.raises(ExpressionError, match="epilogue must be a str, got int"):
        parse_epilogue(42)
    with pytest.raises(ExpressionError, match="program is 2001 characters long; at most 2000"):
        parse_program("a = x" + " " * 1996)


def test_long_but_legal_expressions():
    e = parse_epilogue("+".join(["acc"] * 150))
    assert evaluate(e, {"acc": 1.0}) == 150.0
    assert parse_epilogue("relu(" * 60 + "acc" + ")" * 60).canonical.count("relu") == 60


# ---------------------------------------------------------------- the layer is a leaf

def test_expr_package_imports_only_stdlib_numpy_and_errors():
    pkg = pathlib.Path(__file__).resolve().parents[1] / "cuopjit" / "expr"
    for path in pkg.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level == 1 or (node.level == 2 and node.module == "errors"):
                    continue
                assert node.level == 0, f"{path.name} imports ..{node.module}"
                mods = [node.module]
            else:
                continue
            for mod in mods:
                top = mod.split(".")[0]
                assert top == "numpy" or top in sys.stdlib_module_names, f"{path.name} imports {mod}"
