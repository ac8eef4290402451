"""--epilogue, --elementwise and --operand on `cuopjit prewarm`, `show` and `explain` (CPU, real NVRTC): prewarm
builds exactly what a forward with that epilogue (or program) plans, show prints the fused kernel, explain the
generated line, and every bad combination is one line, exit 2, nothing compiled."""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit.build import compiler, pipeline
from cuopjit.cli.main import main
from cuopjit.config import DEFAULT
from cuopjit.listing import plan_of
from cuopjit.recipes import placeholder as P


def _cached(operator, args, kwargs, arch):
    plan = plan_of(operator, DEFAULT, args, kwargs, arch)[0]
    assert plan.launches
    return [(s.name, pipeline.is_cached(s, arch)) for s in plan.specs]


def test_prewarm_with_an_epilogue_and_a_shape_builds_what_forward_plans(cache_dir, capsys):
    assert main(["prewarm", "--arch", "sm_80", "--op", "gemm", "--dtype", "float64", "--shape", "96x80x64",
                 "--epilogue", "relu(acc * s + bias) + r", "--operand", "s=scalar", "--operand", "r=full",
                 "--quiet"]) == 0
    assert "prewarmed" in capsys.readouterr().out
    g = cuopjit.GemmDouble()
    g.set_weight(P((64, 80), np.float64))
    g.set_epilogue("relu( acc*s + bias ) + r", bias=P((80,), np.float64))     # another spelling, bound + per call
    args = (P((96, 64), np.float64), P((96, 80), np.float64))
    found = _cached(g, args, {"s": 2.5, "r": P((96, 80), np.float64)}, "sm_80")
    assert all(hit for _, hit in found), found
    assert any("_e" in name for name, _ in found)


def test_prewarm_with_an_epilogue_builds_the_representative_problems_fused(cache_dir, capsys):
    assert main(["prewarm", "--arch", "sm_80", "--op", "conv2d", "--dtype", "float64", "--epilogue",
                 "relu(acc * scale + shift)", "--quiet"]) == 0
    conv = cuopjit.Convolution2DDouble(64, 128, 3, 3, pad_h=1, pad_w=1)     # the seed layer, a representative
    conv.set_weight(P(conv.weight_shape, np.float64))
    conv.set_epilogue("relu(acc * scale + shift)", scale=P((128,), np.float64), shift=P((128, 1, 1), np.float64))
    found = _cached(conv, (P((32, 64, 224, 224), np.float64), P((32, 128, 224, 224), np.float64)), {}, "sm_80")
    assert all(hit for _, hit in found), found


def test_prewarm_with_an_elementwise_program_builds_what_forward_plans(cache_dir, capsys):
    assert main(["prewarm", "--arch", "sm_90", "--op", "elementwise", "--dtype", "float32", "--elementwise",
                 "out = relu(x * s + b)", "--operand", "s=64x1x1", "--operand", "b=scalar", "--shape", "8x64x16x16",
                 "--quiet"]) == 0
    op = cuopjit.ElementwiseFloat("out=relu(x*s+b)")
    found = _cached(op, (), {"x": P((8, 64, 16, 16)), "s": P((64, 1, 1)), "b": 0.5, "out": P((8, 64, 16, 16))},
                    "sm_90")
    assert all(hit for _, hit in found), found


def test_show_prints_the_fused_kernel(capsys):
    assert main(["show", "gemm", "--arch", "sm_80", "--shape", "64x48x32", "--epilogue", "gelu(acc + bias)"]) == 0
    out = capsys.readouterr().out
    assert "epilogue=gelu((acc+bias))|bias:per_column" in out and "cj_epi(alpha * acc" in out
    assert "cj_gelu" in out and "bias" not in out.split("struct cj_epilogue")[1].split("};")[0]
    assert main(["show", "batchmatmul", "--all", "--arch", "sm_80", "--dtype", "float64", "--epilogue",
                 "acc * rows", "--operand", "rows=per_row"]) == 0
    assert "_batched_e" in capsys.readouterr().out


def test_explain_prints_the_generated_line(capsys):
    assert main(["explain", "conv2d", "--arch", "sm_90", "--no-measure", "--shape", "2x16x8x8x32x3x3",
                 "--epilogue", "relu(acc * scale + shift + residual)", "--operand", "residual=full"]) == 0
    out = capsys.readouterr().out
    assert ("generated: out = cj_relu((((cj_acc * (__ldg(cj_p0 + cj_col))) + (__ldg(cj_p1 + cj_col))) "
            "+ (__ldg(cj_p2 + cj_full))));") in out
    assert "epilogue=relu((((acc*scale)+shift)+residual))|scale:per_column|shift:per_column|residual:full" in out
    assert main(["explain", "elementwise", "--arch", "sm_90", "--no-measure", "--elementwise", "y = x * 2"]) == 0
    assert "generated: const float cj_out0 = (cj_in0 * 2.0f);" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["show", "softmax", "--epilogue", "relu(acc)"], "softmax takes no --epilogue: --epilogue is for gemm, matmul, "
                                                     "batchmatmul, conv2d (--elementwise for elementwise programs)"),
    (["prewarm", "--arch", "sm_80", "--op", "gemv", "--epilogue", "acc"], "gemv takes no --epilogue"),
    (["show", "gemm", "--elementwise", "y = x"], "gemm takes no --elementwise: --elementwise is for elementwise"),
    (["show", "gemm", "--operand", "bias=full"], "--operand describes the operands of --epilogue or --elementwise"),
    (["show", "gemm", "--epilogue", "acc", "--elementwise", "y = x"], "exclude each other"),
    (["show", "gemm", "--epilogue", "acc + bias", "--operand", "bias=row"],
     "--operand bias=row: the kind is one of scalar, per_column, per_row, full"),
    (["show", "gemm", "--epilogue", "acc + bias", "--operand", "bais=full"], "'bais' is not used by the epilogue"),
    (["show", "gemm", "--epilogue", "acc + bias", "--operand", "bias"], "--operand 'bias': write NAME=VALUE"),
    (["show", "gemm", "--epilogue", "acc.__class__"], "attribute access"),
    (["show", "gemm", "--epilogue", "acc + a"], "operand 'a' has the name of one of forward's own arguments"),
    (["show", "elementwise", "--elementwise", "y = x", "--operand", "z=4"], "'z' is not an input of 'y=x'"),
    (["prewarm", "--arch", "sm_80", "--epilogue", "acc", "--shape", "4x4x4"], "--shape needs --op"),
])
def test_bad_flags_are_one_line_and_compile_nothing(capsys, monkeypatch, argv, message):
    monkeypatch.setattr(compiler, "compile_cubin", lambda *a, **k: pytest.fail("compiled"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
