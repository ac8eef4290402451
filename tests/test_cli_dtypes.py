"""`--dtype float16,bfloat16` in the commands that time kernels (`tune`, `bench`): argument parsing, one-line
refusals of a dtype a family has no kernels of, and what each would run (on a faked GPU for tune, no GPU for
bench's selection). prewarm / show / explain take the 16-bit dtypes too (tests/test_prewarm_dtypes.py); here
one `explain` in bfloat16 for sm_90a, planned without a GPU."""
from __future__ import annotations

import argparse

import pytest

import test_tuning_cli
from cuopjit import tuning
from cuopjit.cli import bench
from cuopjit.cli.main import main
from cuopjit.config import JITConfig, RunSettings
from cuopjit.ops import operator_class
from cuopjit.recipes import placeholder

SM90 = test_tuning_cli.SM90
fake_gpu = test_tuning_cli.fake_gpu      # the fixture: tune on sm_90 without a GPU


@pytest.mark.parametrize("argv, message", [
    (["tune", "gemm", "--shape", "8x8x8", "--dtype", "float32,half"],
     "--dtype 'half': choose from float32, float64, float16, bfloat16"),
    (["bench", "relu", "--dtype", "float8"], "unknown dtype 'float8': choose from float32, float64, float16, bfloat16"),
    (["bench", "symm", "--dtype", "float32", "--dtype", "bfloat16"],
     "symm has no bfloat16 kernels: it has float32, float64"),
])
def test_dtype_lists_are_checked_before_anything_runs(capsys, argv, message):
    assert main(argv) == 2
    assert capsys.readouterr().err == f"cuopjit {argv[0]}: error: {message}\n"


def test_tune_conv2d_in_bfloat16_names_the_dtype(tmp_path, capsys, fake_gpu):
    assert main(["tune", "conv2d", "--shape", "2,64,14,14,64,3,3", "--layout", "channels_last", "--dtype",
                 "bfloat16", "--cache-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("2x64x14x14x64x3x3 stride 1 channels_last bfloat16: ")


def test_tune_gemm_in_both_16_bit_dtypes_stores_a_record_per_dtype(tmp_path, capsys, fake_gpu):
    assert main(["tune", "gemm", "--shape", "256x512x128", "--trans", "nt", "--dtype", "float16,bfloat16",
                 "--cache-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["256x512x128 nt float16", "256x512x128 nt bfloat16"]
    settings = RunSettings.of(JITConfig().snapshot(), str(tmp_path), True, tuning=True)
    for dtype in ("float16", "bfloat16"):
        op = operator_class("gemm", dtype)(False, True)
        op.set_weight(placeholder((512, 128), dtype))
        problem = op.problem(placeholder((256, 128), dtype), placeholder((256, 512), dtype))
        labels = list(dict.fromkeys(c.label for c in op.family.choices(problem, settings.config, SM90)))
        key = tuning.record_key("gemm", problem, SM90, "tf32")
        assert tuning.timings(settings, key, labels) == {label: float(len(label)) for label in labels}


def test_bench_measures_each_family_in_the_dtypes_it_has():
    ns = argparse.Namespace(op=["gemm", "symm", "relu"], dtype=["float16,bfloat16", "float32"])
    with pytest.raises(ValueError, match="symm has no float16 kernels: it has float32, float64"):
        bench.selection(ns)
    ops, dtypes = bench.selection(argparse.Namespace(op=[], dtype=["bfloat16"]))
    assert dtypes == ["bfloat16"] and "symm" in ops
    alone, _ = bench.uncovered(ops, dtypes, {("gemm", "bfloat16")})
    assert ("gemm", "bfloat16") not in alone and ("relu", "bfloat16") in alone
    assert not [op for op, _ in alone if op in ("symm", "trsm")]
    assert bench.selection(argparse.Namespace(op=["gemm"], dtype=None)) == (["gemm"], ["float32", "float64"])


def test_explain_plans_a_bfloat16_gemm_for_sm_90a_without_a_gpu(capsys):
    assert main(["explain", "gemm", "--dtype", "bfloat16", "--shape", "512,512,512", "--arch", "sm_90a"]) == 0
    out = capsys.readouterr().out
    assert "bf16" in out
