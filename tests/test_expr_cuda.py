"""Generated CUDA C of the expression language (cuopjit.expr.cuda): literals, helpers, and real NVRTC
compiles for sm_80 and sm_90a in float and double, with no warnings. No GPU needed."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cuopjit.expr import (FUNCTIONS, ExpressionError, generate, generate_program, literal, parse_epilogue,
                          parse_program, prelude)
from cuopjit.device import nvrtc
from cuopjit.expr.tree import functions


ARCHS = ("sm_80", "sm_90a")
SCALARS = ("float", "double")
EVERYTHING = ("where(x > 0 and not (y <= 1) or x != y or x == y or x >= 2 or x < -3.5, "
              "relu(acc) + leaky_relu(acc, s) * gelu(x) - gelu_tanh(y) / silu(acc), "
              "-sigmoid(c) + tanh(x) * exp(y) + log(abs(x)) + sqrt(abs(y)) * rsqrt(abs(c) + 1e-30) "
              "+ min(x, y) * max(acc, 0.1) + clamp(acc, -1, 1) + 1e-45 - 3e38)")


def nvrtc_compile(source: str, arch: str) -> str:
    """Compile `source` with pip's NVRTC for `arch`; returns the log, fails the test on an error."""
    out = nvrtc.compile_program(source, "expr_test.cu", (f"--gpu-architecture={arch}", "--std=c++17"))
    log = out.log.strip()
    assert out.ok, f"NVRTC failed for {arch}:\n{log}\n--- source ---\n{source}"
    return log


def kernel(code_prelude: str, body: str, scalar: str) -> str:
    """A kernel with inputs acc, c, x, y (arrays) and s (a scalar parameter) around a generated body."""
    return (f"{code_prelude}\n"
            f'extern "C" __global__ void expr_kernel(const {scalar}* __restrict__ acc_p, '
            f"const {scalar}* __restrict__ c_p, const {scalar}* __restrict__ x_p, const {scalar}* __restrict__ "
            f"y_p, {scalar} s, {scalar}* __restrict__ out, int n) {{\n"
            f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n  {body}\n}}\n")


LOADS = {"acc": "acc_p[i]", "c": "c_p[i]", "x": "x_p[i]", "y": "y_p[i]", "s": "s"}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("scalar", SCALARS)
def test_every_function_compiles_without_warnings(scalar, arch):
    e = parse_epilogue(EVERYTHING)
    assert set(functions(e.tree)) == set(FUNCTIONS)
    code = generate(e, LOADS, scalar)
    assert nvrtc_compile(kernel(code.prelude, f"out[i] = {code.expr};", scalar), arch) == ""


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("scalar", SCALARS)
@pytest.mark.parametrize("func", [f for f in FUNCTIONS if f != "where"])
def test_each_function_compiles_alone(func, scalar, arch):
    args = ["acc", "s", "x"][:len(FUNCTIONS[func])]
    code = generate(parse_epilogue(f"{func}({', '.join(args)})"), LOADS, scalar)
    assert nvrtc_compile(kernel(code.prelude, f"out[i] = {code.expr};", scalar), arch) == ""


def test_preludes_can_share_a_file():
    """Two epilogues, float and double helpers, in one translation unit: guards keep one definition each."""
    a = generate(parse_epilogue("clamp(gelu(acc), 0, 1)"), LOADS, "float")
    b = generate(parse_epilogue("max(gelu(acc), c)"), LOADS, "float")
    d = generate(parse_epilogue("clamp(gelu(x), 0, 1)"), LOADS, "double")
    assert a.prelude.count("cj_gelu(") == 1 and a.prelude.index("cj_min(") < a.prelude.index("cj_clamp(")
    body = f"out[i] = {a.expr} + {b.expr} + (float){d.expr.replace('x_p[i]', '(double)x_p[i]')};"
    nvrtc_compile(kernel(a.prelude + b.prelude + d.prelude, body, "float"), "sm_80")


@pytest.mark.parametrize("scalar", SCALARS)
def test_program_compiles(scalar):
    p = parse_program("a = x * 2; b = relu(a + y)\nd = where(b > a, sigmoid(b), a)")
    g = generate_program(p, {"x": "x_p[i]", "y": "y_p[i]"}, scalar)
    assert g.results == ("cj_out0", "cj_out1", "cj_out2")
    assert g.body.splitlines()[1] == f"const {scalar} cj_out1 = cj_relu((cj_out0 + y_p[i]));"
    stores = " ".join(f"out[{k} * n + i] = {r};" for k, r in enumerate(g.results))
    for arch in ARCHS:
        assert nvrtc_compile(kernel(g.prelude, g.body + "\n  " + stores, scalar), arch) == ""


def test_generated_text_is_the_tree_not_the_spelling():
    loads = {"acc": "v", "bias": "p0[n]", "res": "p1[m * ld + n]", "w": "a + b"}
    one = generate(parse_epilogue("relu(acc+bias) + res*2"), loads, "float")
    two = generate(parse_epilogue("relu( (acc) + +bias )  +  res * 2.0"), loads, "float")
    assert one == two
    assert one.expr == "(cj_relu((v + p0[n])) + (p1[m * ld + n] * 2.0f))"
    assert "bias" not in one.expr and "res" not in one.expr  # user names reach C only through the loads
    assert generate(parse_epilogue("w * 2"), loads).expr == "((a + b) * 2.0f)"  # a compound load is parenthesised
    assert one.prelude == ("#ifndef CJ_EXPR_RELU_FLOAT\n#define CJ_EXPR_RELU_FLOAT\n__device__ __forceinline__ "
                           "float cj_relu(float x) { return x < 0.0f ? 0.0f : x; }\n#endif\n")


def test_generate_needs_a_load_for_every_name():
    with pytest.raises(ExpressionError, match=r"no load was given for 'bias'; loads given: acc"):
        generate(parse_epilogue("acc + bias"), {"acc": "v"})
    with pytest.raises(ValueError, match=r"scalar type 'half' is not supported; use one of float, double"):
        generate(parse_epilogue("acc"), {"acc": "v"}, "half")
    with pytest.raises(ExpressionError, match=r"unknown function 'erf'"):
        prelude(["erf"])


@pytest.mark.parametrize("value, f32, f64", [
    (1, "1.0f", "1.0"), (1.5, "1.5f", "1.5"), (0.1, "0.1f", "0.1"), (-2, "(-2.0f)", "(-2.0)"),
    (-0.0, "(-0.0f)", "(-0.0)"), (1e-50, "0.0f", "1e-50"), (1e-45, "1e-45f", "1e-45"),
    (3.4028235e38, "3.4028235e+38f", "3.4028235e+38"), (1 / 3, "0.33333334f", "0.3333333333333333"),
    (16777217, "1.6777216e+07f", "16777217.0"), (5e-324, "0.0f", "5e-324"),
])
def test_literals(value, f32, f64):
    assert (literal(value, "float"), literal(value, "double")) == (f32, f64)


def test_literals_are_exact(rng):
    for v in np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-40, 38, 200), [math.pi, 1e308]]):
        v = float(v)
        assert float(literal(v, "double").strip("()")) == v
        if abs(v) < 3.4e38:
            assert np.float32(float(literal(v, "float").strip("()f"))) == np.float32(v)
    with pytest.raises(ExpressionError, match=r"the number 1e\+39 is outside float's range"):
        literal(1e39, "float")


@pytest.mark.parametrize("scalar", SCALARS)
def test_extreme_literals_compile_without_warnings(scalar):
    values = [3.4028235e38, -3.4028235e38, 1e-45, 1.17549435e-38, 0.1, 1 / 3, 16777217.0, -0.0]
    if scalar == "double":
        values += [1.7976931348623157e308, 5e-324, 2.2250738585072014e-308]
    body = "out[i] = " + " + ".join(f"{literal(v, scalar)} * acc_p[i]" for v in values) + ";"
    assert nvrtc_compile(kernel("", body, scalar), "sm_80") == ""


def test_float_range_is_checked_at_generation():
    e = parse_epilogue("acc * 1e300")
    assert "1e+300" in generate(e, LOADS, "double").expr
    with pytest.raises(ExpressionError, match="outside float's range"):
        generate(e, LOADS, "float")
