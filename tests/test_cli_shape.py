"""One `--shape` grammar for `cuopjit show`, `explain`, `tune` and `prewarm`, a recipe for every family, and
`show --shape` printing the kernels of the plan forward would run for that shape (no GPU needed)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from cuopjit import target
from cuopjit.cli.main import main
from cuopjit.cache import KernelCache
from cuopjit.config import get_default_global_jit_config
from cuopjit.explain import explain_family
from cuopjit.recipes import SHAPES, build, check_shape, fake_maker, parse_shape, parse_shapes

# a small, odd problem per family (with the sizes its --shape takes)
ODD = {"gemm": "33,65,17", "gemv": "33x1000", "matmul": "7 x 9 x 100", "batchmatmul": "3,33,17,65",
       "symm": "33,100", "trsm": "100,33", "conv2d": "2,3,17,19,8,3,5", "scal": "1001", "axpy": "1001",
       "copy": "3x1001", "dot": "4097", "relu": "7,9,11", "maxpool2d": "2,3,17,19", "avgpool2d": "2,3,17,19",
       "globalmaxpool2d": "2,3,17,19", "globalavgpool2d": "2,3,17,19", "flatten": "2,3,5,7", "view": "9,17,33",
       "softmax": "7,1001", "layernorm": "7,1001", "batchnorm": "2,3,17,19"}


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("text", ["4096x1024x3", "4096,1024,3", "4096 x 1024 x 3", "4096, 1024, 3", "4096 1024 3",
                                  " 4096X1024x3 ", "4096×1024×3"])
def test_one_grammar_x_commas_and_spaces(text):
    assert parse_shape(text) == (4096, 1024, 3)


def test_x_written_shapes_may_share_one_option_with_commas():
    assert parse_shapes(["4096x4096x4096,1000x1000x1000", "7, 8, 9", "5 x 6 x 7"]) == [
        (4096, 4096, 4096), (1000, 1000, 1000), (7, 8, 9), (5, 6, 7)]


@pytest.mark.parametrize("text", ["", "4,0", "a,b", "4x-1", "4.5x2"])
def test_what_the_grammar_refuses(text):
    with pytest.raises(ValueError, match=r"is not understood: write sizes >= 1 separated by x or commas"):
        parse_shape(text)


def test_the_families_that_had_no_recipe_have_one():
    assert {"gemv", "matmul", "batchmatmul", "symm", "trsm", "conv2d"} <= set(SHAPES) and set(ODD) <= set(SHAPES)


@pytest.mark.parametrize("op", sorted(ODD))
def test_show_shape_prints_the_kernels_of_the_plan_forward_runs(capsys, op):
    """Every launch of the plan `forward` would run for the shape on sm_80, in order, with its geometry."""
    operator, args, kwargs = build(op, "float32", parse_shape(ODD[op]), fake_maker(np.float32))
    plan = operator.plan(*args, target=target.named("sm_80"), **kwargs)
    code, out, err = run(capsys, "show", op, "--shape", ODD[op], "--arch", "sm_80")
    assert code == 0, err
    headers = [line for line in out.splitlines() if re.match(r"// \S+: .*; grid \(", line)]
    assert headers == [f"// {kl.spec.name}: {kl.units}; grid {kl.grid}, block {kl.block}, {kl.shared} B dynamic "
                       f"shared memory" + (f", cluster {kl.cluster}" if kl.cluster != (1, 1, 1) else "")
                       for kl in plan.launches]
    assert 'extern "C" __global__' in out


@pytest.mark.parametrize("op", ["gemm", "softmax", "conv2d"])
def test_show_defaults_to_the_explain_shape(capsys, op):
    e = explain_family(op, "float32", arch="sm_90")
    code, out, err = run(capsys, "show", op, "--json")
    assert code == 0, err
    shown = [(k["name"], k["grid"], k["block"]) for k in __import__("json").loads(out)["kernels"]]
    assert shown == [(k["name"], k["grid"], k["block"]) for k in e.kernels]


@pytest.mark.parametrize("op", ["gemv", "matmul", "batchmatmul", "symm", "trsm", "conv2d"])
def test_explain_takes_a_shape_for_the_families_that_had_none(capsys, op):
    code, out, err = run(capsys, "explain", op, "--shape", ODD[op], "--arch", "sm_80", "--json")
    assert code == 0, err
    assert "kernels" in out and '"measured": null' in out


def test_conv2d_shape_is_n_c_h_w_k_r_s_with_same_padding():
    op, (x, y), _ = build("conv2d", "float64", (2, 3, 17, 19, 8, 3, 5), fake_maker(np.float64))
    assert (x.shape, op.weight_shape, y.shape) == ((2, 3, 17, 19), (8, 3, 3, 5), (2, 8, 17, 19))
    assert (op.stride_h, op.stride_w, op.pad_h, op.pad_w, op.dilation_h, op.groups) == (1, 1, 1, 2, 1, 1)


@pytest.mark.parametrize("op, shape", [("gemm", "4,4"), ("conv2d", "1,2,3,4"), ("batchmatmul", "2,3,4"),
                                       ("maxpool2d", "3,4")])
def test_a_shape_of_the_wrong_rank_names_the_sizes(op, shape, capsys):
    dims = SHAPES[op].dims
    for command in ("show", "explain"):
        code, out, err = run(capsys, command, op, "--shape", shape, "--arch", "sm_80")
        assert (code, out) == (2, "")
        assert err == f"cuopjit {command}: error: {op}: --shape takes {dims}, got {shape}\n"
    with pytest.raises(ValueError, match=f"^{op}: --shape takes {dims}, got {shape}$"):
        check_shape(op, parse_shape(shape))


def test_tune_reads_the_same_grammar(capsys):
    code, _, err = run(capsys, "tune", "gemm", "--shape", "4096 x 4096")
    assert (code, err) == (2, "cuopjit tune: error: gemm: --shape takes M,N,K, got 4096,4096\n")
    code, _, err = run(capsys, "tune", "gemm", "--shape", "1,2,x")
    assert code == 2 and "--shape '1,2,x' is not understood" in err


def test_prewarm_shape_builds_the_kernels_of_those_plans(cache_dir, capsys, monkeypatch):
    monkeypatch.setattr(get_default_global_jit_config(), "cache_dir", None)
    code, out, err = run(capsys, "prewarm", "--arch", "sm_80", "--op", "softmax", "--dtype", "float32",
                         "--shape", "7x1001", "--shape", "5, 100000", "--quiet", "--cache-dir", str(cache_dir))
    assert code == 0, err
    want = set()
    for shape in ((7, 1001), (5, 100000)):
        operator, args, kwargs = build("softmax", "float32", shape, fake_maker(np.float32))
        want |= {kl.spec.name for kl in operator.plan(*args, target=target.named("sm_80"), **kwargs).launches}
    got = {e.name.rsplit("_", 1)[0] for e in KernelCache(cache_dir).entries()}
    assert got == want and f"prewarmed {len(want)} kernels for sm_80" in out


def test_prewarm_shape_needs_op(cache_dir, capsys):
    code, _, err = run(capsys, "prewarm", "--arch", "sm_80", "--shape", "4,4")
    assert (code, err) == (2, "cuopjit prewarm: error: --shape needs --op: what a shape means depends on the "
                              "family (see --help)\n")


@pytest.mark.parametrize("command", ["show", "explain", "prewarm"])
def test_help_says_what_the_shape_means_per_family(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    for op, recipe in SHAPES.items():
        line = next((x for x in text.splitlines() if x.startswith(f"  {op} ")), "")
        assert recipe.meaning in line and recipe.dims in line, (op, line)
