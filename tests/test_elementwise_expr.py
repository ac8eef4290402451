"""ElementwiseFloat / ElementwiseDouble without a GPU: parsing, broadcasting and its errors, layouts, plans and
keys shared across spellings, every variant compiled for sm_80 and sm_90a without spills, and a NumPy
emulation of the kernel's index arithmetic against float64."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cuopjit
from cuopjit import target
from cuopjit.build import pipeline
from cuopjit.explain import explain_family
from cuopjit.expr import ExpressionError, evaluate_program, parse_program
from cuopjit.ops import FAMILIES
from cuopjit.ops.elementwise import broadcast, expression
from cuopjit.ops.elementwise.broadcast import Layout
from cuopjit.prewarm import representative_plans
from cuopjit.tensor import Tensor

from conftest import compiles_without_spills, make_config

SM80, SM90 = target.named("sm_80"), target.named("sm_90")
RESNET = "out = relu(x * scale + shift + r)"
NCHW = dict(x=(4, 6, 9, 11), scale=(6, 1, 1), shift=(6, 1, 1), r=(4, 6, 9, 11))
_addresses = iter(range(1, 1 << 20))


def fake(shape, dtype=np.float32, offset=0):
    """A tensor of no memory at an aligned fake address (+ `offset` bytes): all planning reads."""
    return Tensor._view((1 << 40) + (next(_addresses) << 32) + offset, tuple(shape), np.dtype(dtype), 0, None)


def operands(shapes: dict, dtype=np.float32, out="out"):
    """Fake tensors for `shapes` (numbers stay numbers) and a fake output of the broadcast shape."""
    ops = {k: (v if isinstance(v, (int, float)) else fake(v, dtype)) for k, v in shapes.items()}
    shape = np.broadcast_shapes(*[v for v in shapes.values() if not isinstance(v, (int, float))])
    ops[out] = fake(shape, dtype)
    return ops


# --- the operator: names, spellings, keys ------------------------------------------------------------------
def test_spellings_share_the_problem_the_plan_and_the_kernel():
    a, b = cuopjit.ElementwiseFloat("out=relu(x*scale+shift+r)"), cuopjit.ElementwiseFloat(
        "out = relu( (x * scale) + shift + r )  ")
    assert a.expression == b.expression == "out=relu((((x*scale)+shift)+r))"
    args = operands(NCHW)
    pa, pb = a.plan(**args, target=SM90), b.plan(**args, target=SM90)
    assert pa == pb and pa.specs[0] == pb.specs[0]
    other = cuopjit.ElementwiseFloat("out = relu(x * scale + shift - r)").plan(**args, target=SM90)
    assert other.specs[0] != pa.specs[0]
    assert expression.problems_for("out=relu(x)") == expression.problems_for("out = relu( x )")


def test_a_python_number_is_a_per_call_word_not_part_of_the_key():
    op = cuopjit.ElementwiseDouble("out = x * w + 1")
    x, y = fake((100,), np.float64), fake((100,), np.float64)
    k1, p1, r1 = op.bind(x=x, w=0.5, out=y)
    k2, p2, _ = op.bind(x=x, w=-3, out=y)
    assert k1 == k2 and r1 is y
    assert p1[:2] == p2[:2] == (x.ptr, y.ptr)
    assert np.array([p1[2]], np.uint64).view(np.float64)[0] == 0.5
    assert np.array([p2[2]], np.uint64).view(np.float64)[0] == -3.0
    f = cuopjit.ElementwiseFloat("out = x * w")
    _, words, _ = f.bind(x=fake((4,)), w=1e39, out=fake((4,)))
    assert np.array([words[2]], np.uint32).view(np.float32)[0] == np.inf   # beyond float32: inf, as a cast


def test_several_outputs_are_returned_in_program_order():
    op = cuopjit.ElementwiseFloat("a = x * 2; b = relu(a + y)")
    assert op.inputs == ("x", "y") and op.outputs == ("a", "b")
    args = operands({"x": (7, 3), "y": (3,)}, out="a")
    args["b"] = fake((7, 3))
    _, pointers, result = op.bind(**args)
    assert result == (args["a"], args["b"])
    plan = op.plan(**args, target=SM90)
    assert plan.operands == ("x", "y", "a", "b")


@pytest.mark.parametrize("program, error, message", [
    ("out = x +", ExpressionError, "syntax error"),
    ("out = x.y", ExpressionError, "attribute access"),
    ("out = relu(x); out = x", ExpressionError, "assigned twice"),
    ("out = foo(x)", ExpressionError, "unknown function 'foo'"),
    ("stream = x * 2", ValueError, "'stream' cannot name an operand"),
    ("out = stream * 2", ValueError, "'stream' cannot name an operand"),
    (42, TypeError, "an elementwise program is a string"),
])
def test_programs_outside_the_language_are_refused(program, error, message):
    with pytest.raises(error, match=message):
        cuopjit.ElementwiseFloat(program)


@pytest.mark.parametrize("shapes, message", [
    (dict(x=(2, 4, 5, 6), scale=(3, 1, 1), shift=(4, 1, 1), r=(2, 4, 5, 6)),
     r"ElementwiseFloat: x \[2,4,5,6\] and scale \[3,1,1\] do not broadcast \(axis -3: 4 vs 3\)"),
    (dict(x=(5, 6), scale=(6,), shift=(6,), r=(4, 6)),
     r"ElementwiseFloat: x \[5,6\] and r \[4,6\] do not broadcast \(axis -2: 5 vs 4\)"),
])
def test_inputs_that_do_not_broadcast_name_both(shapes, message):
    op = cuopjit.ElementwiseFloat(RESNET)
    args = {k: fake(v) for k, v in shapes.items()}
    with pytest.raises(ValueError, match=message):
        op.plan(**args, out=fake((2, 4, 5, 6)), target=SM90)


@pytest.mark.parametrize("x, out, message", [
    ((3, 4), (4,), r"x \[3,4\] has more axes than output out \[4\]"),
    ((1, 4), (4,), r"x \[1,4\] has more axes than output out \[4\]"),
    ((5,), (3, 4), r"x \[5\] does not broadcast to output out \[3,4\] \(axis -1: 5 vs 4\)"),
    ((3, 4), (3, 1), r"x \[3,4\] does not broadcast to output out \[3,1\] \(axis -1: 4 vs 1\)"),
])
def test_an_input_that_does_not_broadcast_to_the_output_names_both(x, out, message):
    with pytest.raises(ValueError, match=message):
        cuopjit.ElementwiseFloat("out = relu(x)").plan(x=fake(x), out=fake(out), target=SM90)


def test_outputs_of_different_shapes_are_refused():
    op = cuopjit.ElementwiseFloat("a = x; b = -x")
    with pytest.raises(ValueError, match=r"outputs a \[4,3\] and b \[3\] differ"):
        op.plan(x=fake((3,)), a=fake((4, 3)), b=fake((3,)), target=SM90)


def test_outputs_may_be_larger_than_the_inputs_broadcast_as_numpy_out():
    op = cuopjit.ElementwiseFloat("out = x * 2")
    plan = op.plan(x=fake((3,)), out=fake((5, 3)), target=SM90)
    assert "_e_" in plan.specs[0].name   # x runs along the last axis: extent 3, inner 1, read per element


@pytest.mark.parametrize("call, error, message", [
    (lambda op, a: op.forward(a["x"], a["out"]), TypeError, r"pass operands by name, forward\(x=\.\.\., "),
    (lambda op, a: op.forward(x=a["x"], out=a["out"]), TypeError, r"input 'scale' is missing"),
    (lambda op, a: op.forward(**a, bias=a["x"]), TypeError, r"'bias' is not an operand of"),
    (lambda op, a: op.forward(**{**a, "scale": "2"}), TypeError,
     r"scale must be a cuopjit Tensor or a Python number, got str"),
    (lambda op, a: op.forward(**{**a, "scale": np.ones(6)}), TypeError, r"got ndarray"),
    (lambda op, a: op.forward(**{**a, "out": 1.0}), TypeError, r"out must be a cuopjit Tensor"),
    (lambda op, a: op.forward(**{**a, "scale": fake((6, 1, 1), np.float64)}), TypeError,
     r"^ElementwiseFloat: scale is float64, ElementwiseFloat works on float32$"),
    (lambda op, a: op.forward(**{**a, "out": fake((4, 6, 9, 11), np.float64)}), TypeError,
     r"^ElementwiseFloat: out is float64"),
])
def test_bad_operands_are_refused_naming_them(call, error, message):
    op = cuopjit.ElementwiseFloat(RESNET)
    with pytest.raises(error, match=message):
        call(op, operands(NCHW))


def test_an_empty_output_plans_nothing():
    op = cuopjit.ElementwiseFloat("out = x + 1")
    assert op.plan(x=fake((0, 3)), out=fake((0, 3)), target=SM90).launches == ()


# --- layouts ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, out, layout", [
    ((6, 1, 1), (4, 6, 9, 11), Layout("run", 99, 6)),             # NCHW per channel
    ((8,), (4, 9, 11, 8), Layout("run", 1, 8)),                  # NHWC per channel
    ((4, 1, 1, 1), (4, 6, 9, 11), Layout("run", 594, 4)),         # per sample
    ((9, 11), (4, 6, 9, 11), Layout("run", 1, 99)),               # one map per plane
    ((1, 6, 9, 1), (4, 6, 9, 11), Layout("run", 11, 54)),         # a contiguous run of axes
    ((1, 6, 1, 1), (4, 6, 1, 1), Layout("run", 1, 6)),            # size-1 output axes do not break a run
    ((4, 1, 9, 11), (4, 6, 9, 11), Layout("strided", strides=(99, 0, 1))),
    ((1, 1, 1), (4, 6, 9), Layout("uniform")),
    ((4, 6, 9), (1, 4, 6, 9), Layout("full")),
    (None, (3,), Layout("scalar")),
])
def test_layouts(shape, out, layout):
    got, dims = broadcast.layouts([shape], out)
    assert got == (layout,)
    assert dims == ((4, 6, 99) if layout.kind == "strided" else ())


def test_strided_axes_collapse_where_every_strided_input_broadcasts_alike():
    lays, dims = broadcast.layouts([(2, 1, 1, 5, 6), (1, 3, 4, 1, 6), (3, 4, 1, 1)], (2, 3, 4, 5, 6))
    assert dims == (2, 12, 5, 6)
    assert [lay.kind for lay in lays] == ["strided", "strided", "run"]
    assert [lay.strides for lay in lays[:2]] == [(30, 0, 6, 1), (0, 6, 0, 1)]
    assert (lays[2].inner, lays[2].extent) == (30, 12)
    with pytest.raises(ValueError, match="10 alternating groups of output axes; at most 8"):
        broadcast.layouts([(2, 1) * 5], (2, 2) * 5)


@pytest.mark.parametrize("layout, vec, mode", [
    (Layout("run", 99, 6), 4, "elem"), (Layout("run", 100, 6), 4, "bcast"), (Layout("run", 1, 8), 4, "vec"),
    (Layout("run", 1, 8, aligned=False), 4, "elem"), (Layout("run", 1, 6), 4, "elem"), (Layout("run", 1, 6), 2, "vec"),
    (Layout("run", 99, 6), 1, "bcast"), (Layout("full"), 4, "full"),
])
def test_modes(layout, vec, mode):
    assert expression.mode(layout, vec) == mode


def gather(layout: Layout, array: np.ndarray, n: int, dims: tuple) -> np.ndarray:
    """What the kernel reads for output elements 0..n-1 from one input, by its index arithmetic."""
    i, flat = np.arange(n), np.ravel(array)
    if layout.kind == "uniform":
        return np.full(n, flat[0])
    if layout.kind == "full":
        return flat
    if layout.kind == "run":
        return flat[i // layout.inner % layout.extent]
    off = sum(i // math.prod(dims[d + 1:]) % dims[d] * layout.strides[d] for d in range(len(dims)))
    return flat[off]


@st.composite
def broadcast_case(draw):
    out = tuple(draw(st.lists(st.integers(1, 6), min_size=0, max_size=5)))
    shapes = []
    for _ in range(3):
        if draw(st.booleans()) and draw(st.booleans()):
            shapes.append(None)
            continue
        keep = draw(st.integers(0, len(out)))
        shapes.append(tuple(d if draw(st.booleans()) else 1 for d in out[len(out) - keep:]))
    return out, shapes


@settings(max_examples=200, deadline=None)
@given(broadcast_case(), st.sampled_from([np.float32, np.float64]), st.integers(0, 2 ** 32 - 1))
def test_the_kernels_index_arithmetic_matches_numpy_broadcasting(case, dtype, seed):
    """Emulate the kernel (each input gathered by its layout, the program in `dtype`) against float64."""
    out, shapes = case
    rng = np.random.default_rng(seed)
    prog = parse_program("o = where(a > b, a * b - c, relu(c) + a); p = o / (1 + abs(b))")
    env = {k: (float(rng.standard_normal()) if s is None else rng.standard_normal(s).astype(dtype))
           for k, s in zip("abc", shapes)}
    env = {k: (float(dtype(v)) if np.ndim(v) == 0 and not isinstance(v, np.ndarray) else v) for k, v in env.items()}
    lays, dims = broadcast.layouts(shapes, out)
    n = math.prod(out)
    flat = {k: (v if lay.kind == "scalar" else gather(lay, v, n, dims)) for (k, v), lay in zip(env.items(), lays)}
    got = evaluate_program(prog, flat, dtype)
    ref = evaluate_program(prog, {k: np.asarray(v, np.float64) for k, v in env.items()}, np.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    for name in ("o", "p"):
        want = np.broadcast_to(ref[name], out).ravel()
        assert np.allclose(np.broadcast_to(got[name], (n,)), want, rtol=tol, atol=tol)


# --- plans and kernels --------------------------------------------------------------------------------------
PROBLEMS = (expression.family().problems()
            + expression.problems_for("a = x * w + b; s = sigmoid(a); t = where(a > 0, a, 0.1 * a)", "float32",
                                      {"x": (5, 7, 33), "w": None, "b": (5, 1, 33)})
            + expression.problems_for("out = gelu(x) * y + z", "float64", {"x": (3, 6, 5), "y": (1, 1), "z": (5,)})
            + expression.problems_for("out = x + y", "float32", {"x": (1 << 16, 1 << 15), "y": (1 << 15,)}))
CONFIGS = [{}, {"kernel_type": "simple"}, {"enable_loop_unroll": False}, {"enable_memory_coalescing": False},
           {"block_size": 1024, "tile_size": 128}, {"tile_size": 8, "block_size": 64}]


def _specs(configs, t, problems=PROBLEMS):
    family = expression.family()
    return list(dict.fromkeys(s for fields in configs for p in problems
                              for s in family.default_plan(p, make_config(**fields).snapshot(), t).specs))


def test_problems_cover_the_patterns_the_kernel_specialises():
    assert any(p.n >= 2 ** 31 for p in PROBLEMS)
    modes = {expression.mode(lay, 4 if p.dtype == "float32" else 2) for p in PROBLEMS for lay in p.inputs}
    assert modes == {"full", "bcast", "vec", "elem", "strided", "scalar", "uniform"}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_variant_compiles_without_spills(arch):
    t = SM80 if arch == "sm_80" else SM90
    specs = _specs(CONFIGS if arch == "sm_90a" else CONFIGS[:3], t)
    compiles_without_spills(specs, arch)


def test_every_config_field_changes_the_code():
    sources = {tuple(pipeline.source(s) for s in _specs([fields], SM90, PROBLEMS[:3])) for fields in CONFIGS}
    assert len(sources) == len(CONFIGS)
    with pytest.raises(ValueError, match="tile_size=256 is not available for streaming kernels"):
        cuopjit.JITElementwiseFloat(cuopjit.ElementwiseFloat(RESNET)).set_jit_config(make_config(tile_size=256))


def test_no_user_text_reaches_the_source_except_the_canonical_program_in_comments():
    op = cuopjit.ElementwiseFloat("zeta_out = relu(alpha_in * beta_in)")
    source = pipeline.source(op.plan(alpha_in=fake((9,)), beta_in=2.0, zeta_out=fake((9,)), target=SM90).specs[0])
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("//"))
    assert "alpha_in" not in code and "beta_in" not in code and "zeta_out" not in code


def test_the_family_is_registered_and_the_cli_pieces_plan_it_without_a_program():
    assert FAMILIES["elementwise"] == (cuopjit.ElementwiseFloat, cuopjit.ElementwiseDouble)
    planned = representative_plans(["elementwise"], targets=("sm_80", "sm_90"))
    assert {p.problem.dtype for p in planned} == {"float32", "float64"}
    assert {p.problem.program for p in planned} == {parse_program(expression.DEFAULT_PROGRAM).canonical}
    e = explain_family("elementwise", "float32", arch="sm_90")
    assert e.kernels and e.kernels[0]["spill_bytes"] == 0


def test_problems_for_a_given_program_and_shapes():
    ps = expression.problems_for("y = x * s", "float64", {"x": (8, 4), "s": None})
    assert len(ps) == 1 and ps[0].n == 32 and [lay.kind for lay in ps[0].inputs] == ["full", "scalar"]
    assert len(expression.problems_for("y = x * s")) == 12   # 3 problems x 4 dtypes
    with pytest.raises(ValueError, match="'q' is not an operand of"):
        expression.problems_for("y = x * s", shapes={"x": (4,), "s": None, "q": (1,)})
    with pytest.raises(ValueError, match="no shape for input 's'"):
        expression.problems_for("y = x * s", shapes={"x": (4,)})
    with pytest.raises(ValueError, match=r"x \[4\] and s \[3\] do not broadcast"):
        expression.problems_for("y = x * s", shapes={"x": (4,), "s": (3,)})
