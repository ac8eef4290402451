"""User epilogues on the product operators (CPU, no GPU): set_epilogue, operand kinds from shapes, the canonical
key in the plan (spellings share it, meanings and kinds do not), numbers as per-call words (no re-plan), the
default epilogue untouched, Conv2D's relu / set_bias as spellings, and every bad input one line, nothing compiled."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit.build import compiler
from cuopjit.config import DEFAULT
from cuopjit.expr import ExpressionError
from cuopjit.listing import plan_of
from cuopjit.ops import epilogue
from cuopjit.recipes import placeholder

P = placeholder


@pytest.fixture(autouse=True)
def nothing_compiled(monkeypatch):
    """Planning never compiles: a compile here fails the test."""
    monkeypatch.setattr(compiler, "compile_cubin", lambda *a, **k: pytest.fail("compiled while planning"))


def gemm(dtype=np.float32, n=96, k=64):
    g = (cuopjit.GemmFloat if dtype == np.float32 else cuopjit.GemmDouble)()
    g.set_weight(P((k, n), dtype))
    return g


def plan(op, args, kwargs=None, arch="sm_90"):
    return plan_of(op, DEFAULT, args, kwargs or {}, arch)[0]


def fused_specs(p):
    return [kl.spec for kl in p.launches if dict(kl.spec.params).get("epilogue")]


def test_spellings_share_the_plan_and_the_kernel():
    a, c, b = P((128, 64)), P((128, 96)), P((96,))
    plans = []
    for text in ("gelu(acc + bias)", "gelu( acc+bias )", "gelu(((acc) + (bias)))", "gelu(+acc + bias)"):
        g = gemm()
        g.set_epilogue(text, bias=b)
        plans.append(plan(g, (a, c)))
    assert all(p == plans[0] for p in plans)
    assert fused_specs(plans[0]) and plans[0].operands == ("a", "b", "c", "bias")


def test_meanings_and_kinds_change_the_kernel():
    a, c = P((128, 64)), P((128, 96))
    specs = set()
    for text, operand in (("gelu(acc + bias)", P((96,))), ("gelu(acc - bias)", P((96,))),
                          ("silu(acc + bias)", P((96,))), ("gelu(acc + bias)", P((128, 1))),
                          ("gelu(acc + bias)", P((128, 96))), ("gelu(acc + bias)", 0.5), ("gelu(acc + 0.5)", None)):
        g = gemm()
        g.set_epilogue(text, **({} if operand is None else {"bias": operand}))
        specs.add(fused_specs(plan(g, (a, c)))[0])
    assert len(specs) == 7


@pytest.mark.parametrize("shape, kind", [((96,), "per_column"), ((1, 96), "per_column"), ((128, 1), "per_row"),
                                         ((128, 96), "full"), ((1, 128, 96), "full")])
def test_gemm_operand_kinds_follow_the_shape(shape, kind):
    g = gemm()
    g.set_epilogue("acc * w")
    problem = g.problem(P((128, 64)), P((128, 96)), w=P(shape))
    assert problem.epilogue == f"(acc*w)|w:{kind}"


@pytest.mark.parametrize("shape, kind", [((64,), "per_column"), ((64, 1, 1), "per_column"), ((1, 64, 1, 1), "per_column"),
                                         ((2, 1, 8, 8), "per_row"), ((2, 64, 8, 8), "full")])
def test_conv_operand_kinds_count_channels_as_columns(shape, kind):
    conv = cuopjit.Convolution2DFloat(16, 64, 3, 3, pad_h=1, pad_w=1)
    conv.set_weight(P(conv.weight_shape))
    conv.set_epilogue("relu(acc + t)")
    problem = conv.problem(P((2, 16, 8, 8)), P((2, 64, 8, 8)), t=P(shape))
    assert problem.epilogue == f"relu((acc+t))|t:{kind}" and not problem.bias and not problem.relu


def test_numbers_are_per_call_words_not_plan_settings():
    g = gemm()
    g.set_epilogue("acc * s + t", t=0.25)
    a, c = cuopjit.recipes.placeholder((128, 64)), cuopjit.recipes.placeholder((128, 96))
    k1, p1, _ = g.bind(a, c, s=1.5)
    k2, p2, _ = g.bind(a, c, s=-3.0)
    assert k1 == k2 and p1[:3] == p2[:3] and p1[3] != p2[3]
    assert p1[3] == np.float32(1.5).view(np.uint32) and p1[4] == np.float32(0.25).view(np.uint32)
    assert plan(g, (a, c), {"s": 1.5}) == plan(g, (a, c), {"s": -3.0})
    d = gemm(np.float64)
    d.set_epilogue("acc * s")
    assert d.bind(P((128, 64), np.float64), P((128, 96), np.float64), s=0.1)[1][3] == np.float64(0.1).view(np.uint64)


def test_a_per_call_operand_wins_over_a_bound_one_and_keys_its_shape():
    g = gemm()
    bound, given = P((96,)), P((96,))
    g.set_epilogue("acc + bias", bias=bound)
    a, c = P((128, 64)), P((128, 96))
    assert g.bind(a, c)[1][3] == bound.ptr and g.bind(a, c, bias=given)[1][3] == given.ptr
    assert g.bind(a, c, bias=P((128, 1)))[0] != g.bind(a, c, bias=given)[0]


def test_set_epilogue_none_restores_the_default_plan():
    a, c = P((128, 64)), P((128, 96))
    g = gemm()
    before = plan(g, (a, c))
    g.set_epilogue("relu(acc)")
    assert plan(g, (a, c)) != before and g.epilogue == "relu(acc)"
    g.set_epilogue(None)
    assert plan(g, (a, c)) == before and g.epilogue is None and "bind" not in vars(g)


def test_split_k_applies_the_epilogue_once_in_the_reduction():
    g = gemm(n=96, k=4096)
    g.set_epilogue("relu(acc + bias)", bias=P((96,)))
    p = plan(g, (P((64, 4096)), P((64, 96))))
    assert [kl.spec.kernel for kl in p.launches] == ["gemm", "splitk_reduce"]
    assert [bool(dict(kl.spec.params).get("epilogue")) for kl in p.launches] == [False, True]
    assert p.launches[0].spec == plan(gemm(n=96, k=4096), (P((64, 4096)), P((64, 96)))).launches[0].spec
    assert p.launches[1].args[-1].value == 3 and p.launches[0].args[2].value == 4   # the operand, the workspace


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_product_family_carries_the_epilogue(arch):
    key_of = {}
    mm = cuopjit.MatMulFloat()
    mm.set_epilogue("acc + r")
    key_of["matmul"] = plan(mm, (P((3, 1, 8, 16)), P((1, 4, 16, 24)), P((3, 4, 8, 24))), {"r": P((3, 4, 8, 24))}, arch)
    bmm = cuopjit.BatchMatMulDouble()
    bmm.set_epilogue("acc * rows", rows=P((5, 8, 1), np.float64))
    key_of["batchmatmul"] = plan(bmm, (P((5, 8, 16), np.float64), P((5, 16, 24), np.float64), P((5, 8, 24), np.float64)),
                                 arch=arch)
    conv = cuopjit.Convolution2DFloat(64, 64, 3, 3, pad_h=1, pad_w=1)
    conv.set_weight(P(conv.weight_shape))
    conv.set_epilogue("relu(acc * s + t)", s=P((64,)), t=P((64,)))
    key_of["conv2d"] = plan(conv, (P((2, 64, 16, 16)), P((2, 64, 16, 16))), arch=arch)
    for name, p in key_of.items():
        assert fused_specs(p), name
    # mixed broadcast: a batched GEMM launch (4 entries) per outer index (3), the full operand moving with C
    outer = [kl for kl in key_of["matmul"].launches if kl.spec.kernel == "gemm"]
    assert [kl.args[-1].offset for kl in outer] == [i * 4 * 8 * 24 * 4 for i in range(3)]
    assert [kl.args[-1].offset for kl in outer] == [kl.args[2].offset for kl in outer]


def test_conv_relu_and_bias_are_spellings_of_an_epilogue():
    conv = cuopjit.Convolution2DFloat(16, 32, 3, 3, relu=True)
    assert conv.epilogue == "relu(acc)"
    conv.set_bias(P((32,)))
    assert conv.epilogue == "relu((acc+bias))"
    conv.relu = False
    assert conv.epilogue == "(acc+bias)"
    conv.set_epilogue("acc * 2")
    assert not conv.relu and conv._bias is None and conv.epilogue == "(acc*2.0)"
    with pytest.raises(ValueError, match=r"relu and set_bias are the epilogue relu\(acc \+ bias\), but the epilogue "
                                         r"'\(acc\*2.0\)' is set: write them into it, or call set_epilogue\(None\)"):
        conv.relu = True
    with pytest.raises(ValueError, match="call set_epilogue"):
        conv.set_bias(P((32,)))
    conv.set_epilogue(None)
    conv.relu = True
    assert conv.epilogue == "relu(acc)"


# --- bad input: one line each, nothing compiled -------------------------------------------------------------
HOSTILE = ["__import__('os')", "acc.__class__", "acc[0]", "'x'", "lambda: 1", "[x for x in acc]", "acc; c",
           "x = acc", "acc # hi", "{acc}", "asm(acc)", "exec(acc)", "relu(acc, 1)", "acc ** 2", "acc % 2",
           "acc if c else 0", "acc < 0", "relu(acc) and c", "nan", "inf * acc", "threadIdx", "int(acc)",
           "relu(*acc)", "relu(x=acc)", "acc @ c", "not acc", "1e999", "_hidden", "a" * 65, "acc +" * 700,
           "relu", "f(acc)(c)", "acc\\\n+c", "acc\x00", "é + acc", ""]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_strings_are_refused_in_one_line(text):
    with pytest.raises(ExpressionError) as info:
        gemm().set_epilogue(text)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("call, exc, message", [
    (lambda g: g.set_epilogue("acc + a"), ExpressionError, r"operand 'a' has the name of one of forward's own "
                                                           r"arguments \(a, c, stream\); rename it"),
    (lambda g: g.set_epilogue("acc + bias", bais=P((96,))), ExpressionError,
     r"GemmFloat: 'bais' is not an operand of the epilogue '\(acc\+bias\)'; its operands: bias"),
    (lambda g: g.set_epilogue("acc + bias", bias=P((96,), np.float64)), TypeError,
     "GemmFloat: bias is float64, GemmFloat works on float32"),
    (lambda g: g.set_epilogue("acc + bias", bias="0.5"), TypeError, "bias"),
    (lambda g: g.set_epilogue(None, bias=1.0), TypeError, r"set_epilogue\(None\) restores the default"),
])
def test_set_epilogue_refusals(call, exc, message):
    with pytest.raises(exc, match=message):
        call(gemm())


@pytest.mark.parametrize("kwargs, exc, message", [
    ({}, ExpressionError, r"GemmFloat: the epilogue '\(acc\+bias\)' needs operand 'bias': bind it with "
                          r"set_epilogue\(\.\.\., bias=\.\.\.\) or pass bias=\.\.\. to forward"),
    ({"bias": P((95,))}, ExpressionError, r"GemmFloat: operand 'bias' of shape \(95,\) does not broadcast to the "
                                          r"output; allowed for an output of shape \(128, 96\)"),
    ({"bias": P((128, 2))}, ExpressionError, "does not broadcast to the output"),
    ({"bias": P((2, 128, 96))}, ExpressionError, "does not broadcast to the output"),
    ({"bias": P((96,), np.float64)}, TypeError, "GemmFloat: bias is float64, GemmFloat works on float32"),
    ({"bias": np.zeros(96, np.float32)}, Exception, "bias"),
    ({"bias": P((96,)), "other": 1.0}, ExpressionError, r"'other' is not an operand of the epilogue"),
])
def test_forward_refusals(kwargs, exc, message):
    g = gemm()
    g.set_epilogue("acc + bias")
    with pytest.raises(exc, match=message) as info:
        g.problem(P((128, 64)), P((128, 96)), **kwargs)
    assert "\n" not in str(info.value)


def test_neither_row_column_nor_output_is_refused_for_conv_and_matmul():
    conv = cuopjit.Convolution2DFloat(16, 64, 3, 3)
    conv.set_weight(P(conv.weight_shape))
    conv.set_epilogue("acc + t")
    with pytest.raises(ExpressionError, match=r"operand 't' of shape \(2, 64, 1, 1\) is neither a row, a column nor "
                                              r"the output; allowed for an output of shape \(2, 64, 6, 6\)"):
        conv.problem(P((2, 16, 8, 8)), P((2, 64, 6, 6)), t=P((2, 64, 1, 1)))
    mm = cuopjit.MatMulFloat()
    mm.set_epilogue("acc + bias")
    with pytest.raises(ExpressionError, match="MatMulFloat: epilogue operand 'bias' is per-column, which needs 2-D"):
        mm.problem(P((2, 8, 16)), P((16,)), P((2, 8)), bias=P((8,)))


def test_extra_arguments_without_an_epilogue_are_refused():
    with pytest.raises(TypeError, match=r"GemmFloat: 'bias' is not an argument of forward: no epilogue is set"):
        gemm().problem(P((128, 64)), P((128, 96)), bias=P((96,)))


def test_families_without_an_epilogue_do_not_take_one():
    for op in (cuopjit.SoftmaxFloat(), cuopjit.GemvFloat()):
        with pytest.raises(TypeError, match=rf"^{type(op).__name__} takes no epilogue: set_epilogue works on "
                                            r"GemmFloat/Double, MatMul, BatchMatMul and Convolution2D; fuse "
                                            r"elementwise work after it with cuopjit.ElementwiseFloat/Double$"):
            op.set_epilogue("relu(acc)")


def test_a_jit_wrapper_sets_its_operators_epilogue():
    gemm = cuopjit.GemmFloat()
    jit = cuopjit.JITGemmFloat(gemm)
    jit.set_epilogue("relu(acc)")
    assert gemm.epilogue == "relu(acc)"


def test_the_generated_line_uses_no_user_names():
    key = epilogue.make_key(cuopjit.expr.parse_epilogue("relu(acc * my_scale + shift)"),
                            {"my_scale": "per_column", "shift": "scalar"})
    line = epilogue.line(key, "double")
    assert "my_scale" not in line and "shift" not in line
    assert line == "out = cj_relu(((cj_acc * (__ldg(cj_p0 + cj_col))) + cj_s1));"
