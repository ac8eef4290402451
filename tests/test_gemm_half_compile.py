"""GEMM, MatMul and BatchMatMul in float16 / bfloat16 without a GPU: which kernel each problem plans (wgmma f16 / bf16
on sm_90 where TMA takes the strides, with wgmma's transpose bits for MN-major operands; the one-stage kernel reading
halves elsewhere), the refusals, a few representative kernels compiling for sm_80 and sm_90a without spills, the
float32 kernels keeping their code, and `prewarm --dtype float16,bfloat16` building what the plans need."""
from __future__ import annotations

import dataclasses

import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit.cli.main import main
from cuopjit.ops import HALF_CLASSES, epilogue
from cuopjit.ops.gemm import plans, wgmma
from cuopjit.expr import parse_epilogue
from cuopjit.prewarm import kernels_to_build, representative_plans
from cuopjit.target import named

from blas_emulate import fake
from conftest import compiles_without_spills, make_config
from half_maps import HALF

SM90, SM80 = named("sm_90"), named("sm_80")
BIAS = epilogue.make_key(parse_epilogue("gelu(acc + bias)"), {"bias": "per_column"})


def _plan(problem, target=SM90, **fields):
    return plans.FAMILY.default_plan(problem, make_config(**fields).snapshot(), target)


def _params(plan):
    return dict(plan.launches[0].spec.params)


def test_the_families_have_16_bit_classes():
    for op, names in (("gemm", "Gemm"), ("matmul", "MatMul"), ("batchmatmul", "BatchMatMul")):
        half, bf16 = HALF_CLASSES[op]
        assert (half.__name__, bf16.__name__) == (names + "Half", names + "BFloat16")
        assert (half.dtype.name, bf16.dtype.name) == HALF
    assert cuopjit.JITGemmHalf.__name__ == "JITGemmHalf" and cuopjit.JITBatchMatMulBFloat16


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("ta, tb", [(False, False), (False, True), (True, False), (True, True)])
def test_aligned_problems_run_wgmma_with_the_transpose_bits(dtype, ta, tb):
    p = _params(_plan(plans.packed(dtype, 4096, 4096, 4096, ta, tb)))
    assert p["ELEM"] == {"float16": "half_t", "bfloat16": "bf16_t"}[dtype] and p["P_IS_A"] and not p["P_REGS"]
    assert (p["P_KMAJOR"], p["Q_KMAJOR"]) == (not ta, tb)
    assert tb or p["QN"] % wgmma.MN_BOX == 0 and p["NI"] % wgmma.MN_BOX == 0
    assert _plan(plans.packed(dtype, 4096, 4096, 4096, ta, tb)).choice.startswith("wgmma_t128x256x64")


@pytest.mark.parametrize("dtype", HALF)
def test_other_problems_read_halves_on_the_one_stage_kernel(dtype):
    odd = _plan(plans.packed(dtype, 33, 47, 29, aligned=False))          # rows not 16-byte multiples: no TMA
    assert _params(odd)["elem_t"] in ("half_t", "bf16_t") and _params(odd)["VEC"] == 1 and _params(odd)["mma"]
    assert [a.kind for a in odd.launches[0].args[9:11]] == ["f32", "f32"]
    assert "mma16" in _plan(plans.packed(dtype, 512, 512, 512), SM80).launches[0].spec.name   # m16n8k16
    assert _params(_plan(plans.packed(dtype, 512, 512, 512), SM80, tile_size=64))["mma"]     # TF32: exact on halves
    assert not _params(_plan(plans.packed(dtype, 512, 512, 512), kernel_type="simple"))["mma"]
    big = _plan(plans.packed(dtype, 64, 64, 65536, aligned=False), SM80)             # no split-K in 16 bits
    assert len(big.launches) == 1 and big.workspace == 0


@pytest.mark.parametrize("dtype", HALF)
def test_one_row_or_column_runs_as_the_16_bit_gemv(dtype):
    assert _plan(plans.packed(dtype, 1, 4096, 1024, trans_b=True)).choice.startswith("gemv_")
    assert _plan(plans.packed(dtype, 1000, 1, 1000)).choice.startswith("gemv_")
    with_bias = dataclasses.replace(plans.packed(dtype, 1, 4096, 1024, trans_b=True), epilogue=BIAS)
    assert _plan(with_bias).choice.startswith("wgmma_t64x")          # epilogues stay on the GEMM kernels


def test_refusals():
    with pytest.raises(ValueError, match="precision='3xtf32' applies to float32 products; float16 multiplies"):
        _plan(plans.packed("float16", 64, 64, 64), precision="3xtf32")
    nn = plans.packed("bfloat16", 512, 512, 512)
    choice = dataclasses.replace(plans.choices(nn, make_config().snapshot(), SM90)[0], ni=32, qn=64)
    with pytest.raises(ValueError, match="reads it in boxes of 64 columns: the instruction's N \\(32\\) must be"):
        plans.plan(nn, choice, SM90)
    g = cuopjit.GemmHalf()
    with pytest.raises(TypeError, match="GemmHalf: weight is float32, GemmHalf works on float16"):
        g.set_weight(fake([4, 4]))


def _representative(arch):
    t = named(arch.rstrip("a"))
    probs = [plans.packed(dt, 512, 512, 512, ta, tb) for dt in HALF for ta, tb in ((0, 0), (0, 1), (1, 0), (1, 1))]
    probs += [dataclasses.replace(plans.packed("float16", 512, 512, 512, False, tb), epilogue=BIAS) for tb in (0, 1)]
    probs += [plans.packed("bfloat16", 33, 47, 29, aligned=False),
              dataclasses.replace(plans.packed("float16", 33, 47, 29, aligned=False), epilogue=BIAS),
              dataclasses.replace(plans.packed("bfloat16", 128, 128, 64), batch=8, stride_a=8192, stride_b=0,
                                  stride_c=16384)]
    specs = {}
    for p in probs:
        specs.update(dict.fromkeys(_plan(p, t).specs))
    return specs


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_representative_half_kernels_compile_without_spills(arch):
    specs = sorted(_representative(arch), key=lambda s: s.name)
    assert any("_f16_" in s.name for s in specs) and any("_bf16_" in s.name for s in specs)
    assert any("wgmma" in s.name for s in specs) == (arch == "sm_90a")
    compiles_without_spills(specs, arch)


def test_float_kernels_never_see_the_16_bit_paths():
    for p in plans.problems():
        if p.dtype in ("float32", "float64"):
            for t in (SM90, SM80):
                for spec in _plan(p, t, enable_tensor_core=True).specs:
                    code = pipeline.source(spec)
                    assert "half_t" not in code and "elem_t" not in code and ".f16" not in code, spec.name


def test_prewarm_builds_what_the_half_gemm_plans_need(cache_dir, capsys):
    assert main(["prewarm", "--arch", "sm_90", "--op", "gemm", "--dtype", "float16,bfloat16", "--quiet"]) == 0
    planned = representative_plans(["gemm"], list(HALF), ["sm_90"])
    assert {p.problem.dtype for p in planned} == set(HALF)
    want = kernels_to_build(planned)
    assert any("wgmma" in s.name for s, _ in want)
    assert f"prewarmed {len(want)} kernels for sm_90" in capsys.readouterr().out
    assert [(s.name, a) for s, a in want if not pipeline.is_cached(s, a)] == []


@pytest.mark.parametrize("dtype, tag", [("float16", "f16"), ("bfloat16", "bf16")])
def test_show_and_explain_plan_the_half_gemm(dtype, tag, capsys):
    assert main(["show", "gemm", "--dtype", dtype, "--arch", "sm_90"]) == 0
    assert f"gemm_{tag}_wgmma_t128x256x64" in capsys.readouterr().out
    assert main(["explain", "matmul", "--dtype", dtype, "--arch", "sm_90", "--no-measure", "--shape", "256x512x512"]) == 0
    out = capsys.readouterr().out
    assert f"gemm_{tag}_wgmma" in out and "spills 0 B" in out and f"'dtype': '{dtype}'" in out
