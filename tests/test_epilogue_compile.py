"""Every product kernel with a user epilogue compiles for sm_80 and sm_90a without spills (CPU, real NVRTC): the
representative problems of GEMM, BatchMatMul and Conv2D, plus the layouts they leave out (split-K, the cp.async
SIMT kernel, the DMMA swap), under the configurations that pick each kernel, with an epilogue that reads every
kind of operand and `c`; and with no epilogue every kernel renders as it did (the template parameter is absent)."""
from __future__ import annotations

import dataclasses
import re

import pytest

from cuopjit.build import pipeline
from cuopjit.expr import parse_epilogue
from cuopjit.ops import epilogue
from cuopjit.ops.conv2d import plans as conv_plans
from cuopjit.ops.gemm import matmul, plans as gemm_plans
from cuopjit.prewarm import kernels_to_build
from cuopjit.target import named

from conftest import compiles_without_spills, make_config

KEY = epilogue.make_key(parse_epilogue("gelu(acc * s + bias) + r + 0.5 * c + t * relu(rows)"),
                        {"s": "scalar", "bias": "per_column", "r": "full", "t": "scalar", "rows": "per_row"})
# The batched SIMT float32 nn kernel (128 x 128 tiles, two blocks per SM: 128 registers) sits at its register cap:
# with this key's four tensor operands and c, ptxas spills 112 B on sm_90; with the templates before the staged
# store it spilled 112-208 B for other epilogues ("gelu(acc + bias) + r", "acc * s + bias + t * rows") and none
# for this one. Any other kernel, or more than this, fails.
AT_THE_CAP, AT_THE_CAP_KERNEL = 112, re.compile(r"gemm_f32_t128x128x16_r8x8_nn_v4_batched_e[0-9a-f]{8}")
CONFIGS = [{}, {"enable_tensor_core": True}, {"precision": "3xtf32"}, {"kernel_type": "simple"},
           {"kernel_type": "tensor_core", "tile_size": 64, "block_size": 128},
           {"enable_loop_unroll": False, "enable_memory_coalescing": False, "enable_shared_memory_opt": False}]
TEMPLATES = {"gemm/gemm.cu.jinja", "gemm/gemm_async.cu.jinja", "gemm/gemm_simt_async.cu.jinja",
             "gemm/gemm_wgmma.cu.jinja", "gemm/splitk_reduce.cu.jinja", "conv2d/conv2d.cu.jinja",
             "conv2d/conv2d_direct.cu.jinja", "conv2d/conv2d_wgmma.cu.jinja"}


def fused_plans(t):
    """(plan, problem) of every fused problem under every config that takes its dtype, for target t."""
    gemms = gemm_plans.problems() + [gemm_plans.packed("float32", 256, 256, 512, trans_a=True),   # cp.async SIMT
                                     gemm_plans.packed("float32", 64, 96, 4096),                 # split-K
                                     gemm_plans.packed("float64", 64, 96, 4096, aligned=False)]
    problems = ([(gemm_plans.FAMILY, dataclasses.replace(p, epilogue=KEY)) for p in gemms]
                + [(matmul.BATCH_FAMILY, dataclasses.replace(p, gemm=dataclasses.replace(p.gemm, epilogue=KEY)))
                   for p in matmul.batch_problems()]
                + [(conv_plans.FAMILY, dataclasses.replace(p, bias=False, relu=False, epilogue=KEY))
                   for p in conv_plans.problems()])
    out = []
    for fields in CONFIGS:
        cfg = make_config(**fields).snapshot()
        for family, p in problems:
            if p.dtype == "float64" and "precision" in fields or p.dtype in ("float16", "bfloat16"):
                continue            # 16-bit fused kernels: test_gemm_half_compile.py compiles a few
            out.append(family.default_plan(p, cfg, t))
    # the cp.async SIMT kernel is a tuning candidate (both operands k-major), never the first choice
    simt = dataclasses.replace(gemms[-3], epilogue=KEY)
    out += [gemm_plans.plan(simt, c, t) for c in gemm_plans.choices(simt, make_config().snapshot(), t)
            if not getattr(c, "shape", c).mma and getattr(c, "stages", 1) > 1]
    return out


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_fused_kernel_compiles_without_spills(arch):
    t = named(arch)
    plans = fused_plans(t)
    fused = {spec for p in plans for spec in p.specs if dict(spec.params).get("epilogue")}
    templates = {s.template for s in fused}
    assert templates == (TEMPLATES if arch == "sm_90" else TEMPLATES - {"gemm/gemm_wgmma.cu.jinja",
                                                                        "conv2d/conv2d_wgmma.cu.jinja"})
    if arch == "sm_90":   # TF32 and 3xTF32 wgmma, the DMMA swap, a batched launch, split-K's reduction
        names = " ".join(s.name for s in fused)
        assert all(tag in names for tag in ("_3xtf32_nt_e", "_3xtf32r_", "wgmma_t", "_swap_e", "_batched_e", "splitk_reduce_"))
    for spec, _ in kernels_to_build([type("P", (), {"plan": p, "target": t})() for p in plans]):
        if spec not in fused:
            continue
        cubin, info = pipeline.build(spec, t.arch, persistent=False)
        allowed = AT_THE_CAP if AT_THE_CAP_KERNEL.fullmatch(spec.name) and arch == "sm_90" else 0
        assert cubin[:4] == b"\x7fELF" and info.spill_bytes <= allowed, f"{spec.name} spills {info.spill_bytes} B on {arch}"


def test_without_an_epilogue_no_kernel_has_the_parameter():
    t = named("sm_90")
    for family, problems in ((gemm_plans.FAMILY, gemm_plans.problems()), (conv_plans.FAMILY, conv_plans.problems()),
                             (matmul.BATCH_FAMILY, matmul.batch_problems())):
        for p in problems:
            for spec in family.default_plan(p, make_config().snapshot(), t).specs:
                assert "epilogue" not in dict(spec.params) and "cj_epi" not in pipeline.source(spec)


def test_the_wgmma_register_epilogue_takes_what_it_can():
    """float32 C along Q (A @ W^T, P = A) runs the expression on the accumulators (store_regs: no staging buffer in
    shared memory) whatever its operands: per-column / per-row / scalar ones from shared memory, an output-shaped
    one (a residual) and c loaded into registers ahead of the expression, one 8-byte load per pair where aligned;
    D = C^T (A @ B) stages through shared memory. The register variants compile for sm_90a without spills: one
    consumer (two blocks per SM, the 128-register cap), two consumers 256 wide, 3xTF32 on unaligned C."""
    t, cfg = named("sm_90"), make_config(enable_tensor_core=True).snapshot()
    regs = epilogue.make_key(parse_epilogue("silu(acc * s + bias) + t * rows"),
                             {"s": "scalar", "bias": "per_column", "t": "scalar", "rows": "per_row"})
    residual = epilogue.make_key(parse_epilogue("relu(acc * scale + shift + residual)"),
                                 {"scale": "per_column", "shift": "per_column", "residual": "full"})
    x3 = make_config(precision="3xtf32").snapshot()
    cases = [(gemm_plans.packed("float32", 4096, 3072, 768, trans_b=True), regs, cfg, True),
             (gemm_plans.packed("float32", 511, 403, 129, trans_b=True, aligned=False), regs, x3, True),
             (gemm_plans.packed("float32", 25088, 512, 128, trans_b=True), residual, cfg, True),
             (gemm_plans.packed("float32", 4096, 3072, 768, trans_b=True), KEY, cfg, True),
             (gemm_plans.packed("float32", 511, 403, 129, trans_b=True, aligned=False), KEY, x3, True),
             (gemm_plans.packed("float32", 256, 200, 96), regs, cfg, False),
             (gemm_plans.packed("float32", 256, 200, 96), KEY, cfg, False)]
    specs = []
    for p, key, c, expect in cases:
        problem = dataclasses.replace(p, epilogue=key)
        spec = next(s for s in gemm_plans.FAMILY.default_plan(problem, c, t).specs if "wgmma" in s.name)
        src = pipeline.source(spec)
        assert ("cj_epi.pair_from(" in src, "wbuf" in src) == (expect, not expect), spec.name
        if expect and key != regs:      # the residual (and c) in registers, both load widths
            assert "cj_load_run(rf[j + RD]" in src and "cj_load(cj_epi.cj_p" in src, spec.name
        specs += [spec] if expect and key != regs or p.m == 511 else []
    assert any("_b2_" in s.name for s in specs) and any("x256x" in s.name for s in specs)
    compiles_without_spills(specs, t.arch)
