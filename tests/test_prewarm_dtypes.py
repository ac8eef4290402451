"""--dtype float16,bfloat16 in prewarm, show and explain (no GPU): each family plans the dtypes it has classes of,
prewarm builds exactly what those plans need, and a family asked for a dtype it lacks says which it has."""
from __future__ import annotations

import argparse

import pytest

from cuopjit.build import pipeline
from cuopjit.cli import args
from cuopjit.cli.main import main
from cuopjit.ops import CLASSES, FAMILIES, HALF_CLASSES
from cuopjit.prewarm import ALL_DTYPES, DTYPES, family_dtypes, kernels_to_build, representative_plans


def test_each_family_plans_the_dtypes_it_has_classes_of():
    for op in FAMILIES:
        problems = FAMILIES[op][0].family.problems()
        assert {p.dtype for p in problems} == set(family_dtypes(op)), op
        assert all(cls.dtype.name == dt for dt, cls in CLASSES[op].items())
    assert set(HALF_CLASSES) >= {"softmax", "layernorm"}
    assert DTYPES == ("float32", "float64") and set(ALL_DTYPES) == {"float32", "float64", "float16", "bfloat16"}


def test_prewarm_builds_what_the_half_plans_need(cache_dir, capsys):
    assert main(["prewarm", "--arch", "sm_80,sm_90", "--dtype", "float16,bfloat16", "--quiet"]) == 0
    out, err = capsys.readouterr()
    ops = sorted(HALF_CLASSES)
    lack = ", ".join(op for op in FAMILIES if op not in ops)     # the shorter list is named
    assert err.splitlines() == [f"note: float16: {lack} have no float16 kernels (skipped); "
                                f"bfloat16: {lack} have no bfloat16 kernels (skipped)"]
    planned = representative_plans(ops, ["float16", "bfloat16"], ["sm_80", "sm_90"])
    assert {p.problem.dtype for p in planned} == {"float16", "bfloat16"}
    want = kernels_to_build(planned)
    assert f"prewarmed {len(want)} kernels for sm_80, sm_90" in out
    assert [(s.name, a) for s, a in want if not pipeline.is_cached(s, a)] == []


def test_every_family_keeps_its_own_dtypes_with_a_mixed_list(capsys):
    ns = argparse.Namespace(op=None, dtype=["float32,bfloat16"])
    ops, dtypes = args.selection(ns)
    assert ops == list(FAMILIES) and dtypes == ["float32", "bfloat16"]
    assert "have no bfloat16 kernels" in capsys.readouterr().err
    ns.op, ns.dtype = ["softmax"], None
    assert args.selection(ns) == (["softmax"], ["float32", "float64"])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv", [
    ["prewarm", "--arch", "sm_90", "--op", "softmax,trsm", "--dtype", "float32,float16"],
    ["show", "trsm", "--dtype", "float16"],
    ["show", "symm", "--dtype", "float16", "--all"],
    ["explain", "trsm", "--dtype", "float16", "--arch", "sm_90", "--no-measure"],
])
def test_a_family_without_the_dtype_says_which_it_has(argv, capsys):
    assert main(argv) == 2
    op = "symm" if "symm" in argv else "trsm"
    assert capsys.readouterr().err.splitlines() == [
        f"cuopjit {argv[0]}: error: {op} has no float16 kernels: it has float32, float64"]


def test_an_unknown_dtype_names_the_four(capsys):
    assert main(["prewarm", "--arch", "sm_90", "--dtype", "float8"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("cuopjit prewarm: error: unknown dtype 'float8': choose from "
                                                        "float32, float64, float16, bfloat16")


@pytest.mark.parametrize("dtype, tag", [("float16", "f16"), ("bfloat16", "bf16")])
def test_show_and_explain_plan_half_kernels(dtype, tag, capsys):
    assert main(["show", "layernorm", "--dtype", dtype, "--arch", "sm_80", "--shape", "64x1000"]) == 0
    out = capsys.readouterr().out
    assert f"layernorm_rows_{tag}_v8" in out and f"elem_t={'half_t' if tag == 'f16' else 'bf16_t'}" in out
    assert main(["explain", "softmax", "--dtype", dtype, "--arch", "sm_90", "--no-measure", "--shape", "8x4096"]) == 0
    out = capsys.readouterr().out
    assert f"softmax_rows_{tag}_v8" in out and "spills 0 B" in out and f"dtype={dtype}" in out
