"""Plans checked on the CPU, geometry included: every family's plan on sm_80, sm_86, sm_89 and sm_90 targets over
a table of boundary shapes (tests/plan_cases.py), run through models of its kernels (tests/plan_coverage.py and
tests/coverage_models_*.py): each output element written exactly once (split slices once each, then once by
their reduction), nothing read or written outside its tensor or the workspace, vector accesses aligned,
workspace read only after it is written, reductions over every term, launch limits and the templates' own
block geometry. No GPU: the tensors are fake addresses.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cuopjit.ops import FAMILIES
from cuopjit.target import named
from cuopjit.tensor import Tensor

import coverage_models_conv
import coverage_models_gemm
import coverage_models_other
import coverage_models_rows
import coverage_models_trsm
from conftest import make_config
from plan_cases import (F32, F64, Alloc, Case, batchnorm, batchnorm_check, blas, conv, conv_check, copied, flatten,
                        gemm, gemv, global_pool, identity, layernorm, layernorm_check, matmul, once, pool, relu,
                        softmax, softmax_check, symm, symm_check, trsm, trsm_check, view, view_index)
from plan_coverage import CoverageError, assert_written_once, check

MODELS = {**coverage_models_gemm.MODELS, **coverage_models_trsm.MODELS, **coverage_models_conv.MODELS,
          **coverage_models_rows.MODELS, **coverage_models_other.MODELS}
ALL = ("sm_80", "sm_86", "sm_89", "sm_90")
K_TERMS = once("c", value=lambda p: p.k)
MM_TERMS = once("c", value=lambda p: p.gemm.k)
GEMV_TERMS = once("y", value=lambda p: p.m if p.trans else p.n)
TC = {"enable_tensor_core": True}

# GEMM shapes whose automatic 128 x 128 tiles are exactly the target's SM count (the largest tile that "gives every
# SM a block"; K = 256), and whose tiles give exactly SPLIT_BELOW warps per SM (no split) / one 64-column tile fewer
# (split-K; K = 1024).
TILES_EQ_SMS = {"sm_80": (1536, 1152), "sm_86": (256, 5248), "sm_89": (2048, 1024), "sm_90": (1536, 1408)}
SPLIT_AT = {"sm_80": (576, 1920), "sm_86": (320, 2624), "sm_89": (640, 2048), "sm_90": (704, 1920)}
SPLIT_UNDER = {"sm_80": (576, 1856), "sm_86": (320, 2560), "sm_89": (640, 1984), "sm_90": (704, 1856)}


def per_target(table: dict, dtype: str, k: int, label: str, config=None) -> list[Case]:
    return [Case("gemm", f"{label}{m}x{n}x{k}", dtype, gemm(m, n, k), K_TERMS, config or {}, (arch,))
            for arch, (m, n) in table.items()]


CASES = [
    # GEMM: split-K, tiles = SMs, the split threshold, M != N, transposes, odd leading dims, misaligned operands
    Case("gemm", "1000^3", F32, gemm(1000, 1000, 1000), K_TERMS),
    Case("gemm", "1000^3", F64, gemm(1000, 1000, 1000), K_TERMS),
    *per_target(TILES_EQ_SMS, F64, 256, "tiles=SMs-"),
    *per_target(TILES_EQ_SMS, F32, 256, "tiles=SMs-"),
    *[Case("gemm", f"tiles=SMs-odd-{m - 1}x{n - 1}x255", F64, gemm(m - 1, n - 1, 255), K_TERMS, {}, (arch,))
      for arch, (m, n) in TILES_EQ_SMS.items()],
    *per_target(SPLIT_AT, F32, 1024, "split-at-"),
    *per_target(SPLIT_UNDER, F32, 1024, "split-under-"),
    Case("gemm", "k511", F32, gemm(64, 512, 511), K_TERMS),
    Case("gemm", "k512", F32, gemm(64, 512, 512), K_TERMS),
    Case("gemm", "33x4097x1000", F32, gemm(33, 4097, 1000), K_TERMS),
    Case("gemm", "4097x33x64-tn", F32, gemm(4097, 33, 64, ta=True), K_TERMS),
    Case("gemm", "257x129x65-nt", F64, gemm(257, 129, 65, tb=True), K_TERMS),
    Case("gemm", "7^3-tt", F32, gemm(7, 7, 7, True, True), K_TERMS),
    Case("gemm", "384x256x96-tt", F64, gemm(384, 256, 96, True, True, beta=0.5), K_TERMS),
    Case("gemm", "256^3-a+4", F32, gemm(256, 256, 256, offs=(4, 0, 0)), K_TERMS),
    Case("gemm", "256^3-c+8", F32, gemm(256, 256, 256, offs=(0, 0, 8)), K_TERMS),
    Case("gemm", "256^3-b+8", F64, gemm(256, 256, 256, offs=(0, 8, 0)), K_TERMS),
    Case("gemm", "1000^3", F32, gemm(1000, 1000, 1000), K_TERMS, TC),
    Case("gemm", "1000x520x1000-nt", F32, gemm(1000, 520, 1000, tb=True), K_TERMS, TC),
    Case("gemm", "600x700x333-tt", F32, gemm(600, 700, 333, True, True), K_TERMS, TC),
    Case("gemm", "1000^3", F32, gemm(1000, 1000, 1000), K_TERMS, {"precision": "3xtf32"}),
    Case("gemm", "300x500x129-tn", F32, gemm(300, 500, 129, ta=True), K_TERMS, {"precision": "3xtf32"}),
    Case("gemm", "33x4097x1000", F32, gemm(33, 4097, 1000), K_TERMS, {"precision": "3xtf32"}),
    Case("gemm", "600x700x333-tt", F32, gemm(600, 700, 333, True, True), K_TERMS, {"precision": "3xtf32"}),
    Case("gemm", "500^3", F32, gemm(500, 500, 500), K_TERMS, {"kernel_type": "simple"}),
    Case("gemm", "500x300x200", F64, gemm(500, 300, 200), K_TERMS, {"tile_size": 64, "block_size": 256}),
    Case("gemm", "1000x1000x64", F32, gemm(1000, 1000, 64), K_TERMS, {**TC, "block_size": 256}),
    Case("gemm", "650x1500x256-nt", F32, gemm(650, 1500, 256, tb=True), K_TERMS, TC),
    Case("gemm", "1024x4096x32-nt", F32, gemm(1024, 4096, 32, tb=True), K_TERMS, TC, ("sm_90",)),
    # GEMV: splits over columns (few rows) and rows (transposed), unaligned rows, misaligned x
    Case("gemv", "8192^2-n", F32, gemv(8192, 8192, False), GEMV_TERMS),
    Case("gemv", "8192^2-t", F64, gemv(8192, 8192, True), GEMV_TERMS),
    Case("gemv", "33x100000-n", F32, gemv(33, 100000, False), GEMV_TERMS),
    Case("gemv", "33x100000-t", F32, gemv(33, 100000, True), GEMV_TERMS),
    Case("gemv", "48x200012-n", F32, gemv(48, 200012, False), GEMV_TERMS),
    Case("gemv", "100000x33-t", F64, gemv(100000, 33, True), GEMV_TERMS),
    Case("gemv", "4097x33-n", F32, gemv(4097, 33, False), GEMV_TERMS),
    Case("gemv", "1000^2-t-x+4", F32, gemv(1000, 1000, True, offs=(0, 4, 0), beta=1.0), GEMV_TERMS),
    Case("gemv", "64x4100-n", F64, gemv(64, 4100, False), GEMV_TERMS, {"block_size": 128}),
    # MatMul / BatchMatMul: 2-D, batches with long K, broadcast weights, mixed broadcasts (a launch per outer)
    Case("matmul", "1000^3", F32, matmul((1000, 1000), (1000, 1000), (1000, 1000)), MM_TERMS),
    Case("matmul", "4x64x4096x64", F32, matmul((4, 64, 4096), (4, 4096, 64), (4, 64, 64)), MM_TERMS),
    Case("matmul", "3x1x33x17@1x4x17x5", F64, matmul((3, 1, 33, 17), (1, 4, 17, 5), (3, 4, 33, 5)), MM_TERMS),
    Case("matmul", "vec@batch", F32, matmul((200,), (6, 200, 40), (6, 40)), MM_TERMS),
    Case("batchmatmul", "70000x2x3x2", F32, matmul((70000, 2, 3), (70000, 3, 2), (70000, 2, 2), True), MM_TERMS),
    Case("batchmatmul", "7x33^3", F32, matmul((7, 33, 33), (7, 33, 33), (7, 33, 33), True), MM_TERMS),
    Case("batchmatmul", "64x128^3-bcast", F64, matmul((64, 128, 128), (1, 128, 128), (64, 128, 128), True), MM_TERMS),
    Case("batchmatmul", "8x128x2048x96", F32, matmul((8, 128, 2048), (8, 2048, 96), (8, 128, 96), True), MM_TERMS),
    Case("batchmatmul", "8x128x2048x96", F32, matmul((8, 128, 2048), (8, 2048, 96), (8, 128, 96), True), MM_TERMS,
         TC),
    Case("batchmatmul", "5x96x256x40", F32, matmul((5, 96, 256), (1, 256, 40), (5, 96, 40), True), MM_TERMS,
         {"precision": "3xtf32"}),
    # SYMM (the fill grid, then the product) and TRSM (leaves and updates in dependency order)
    Case("symm", "256x300-left-upper", F32, symm(256, 300, False, True), symm_check),
    Case("symm", "33x1000-right-lower", F32, symm(33, 1000, True, False), symm_check),
    Case("symm", "200x129-left-lower", F64, symm(200, 129, False, False), symm_check),
    Case("trsm", "300x200-left-lower", F32, trsm(300, 200, False, False, False, False), trsm_check),
    Case("trsm", "200x300-right-upper-t-unit", F32, trsm(200, 300, True, True, True, True), trsm_check),
    Case("trsm", "129x65-left-upper-t", F64, trsm(129, 65, False, True, True, False, 2.0, False), trsm_check),
    Case("trsm", "65x259-right-lower", F64, trsm(65, 259, True, False, False, False, 1.0, False), trsm_check),
    Case("trsm", "520x96-left-upper", F32, trsm(520, 96, False, True, False, False), trsm_check, TC),
    Case("trsm", "64x2048-right-lower", F32, trsm(64, 2048, True, False, False, False), trsm_check),
    # Conv2D: the wide tile, flat k order, depthwise (direct), dilation, tensor cores (wgmma on sm_90), 3xTF32
    Case("conv2d", "2x64x28x28-64-3x3", F32, conv(2, 64, 28, 28, 64, 3, 3, p=1), conv_check),
    Case("conv2d", "8x64x56x56-64-3x3", F32, conv(8, 64, 56, 56, 64, 3, 3, p=1), conv_check),
    Case("conv2d", "2x8x16x18-dw", F32, conv(2, 8, 16, 18, 8, 3, 3, p=1, groups=8), conv_check),
    Case("conv2d", "2x40x14x14-64-3x3", F32, conv(2, 40, 14, 14, 64, 3, 3, p=1), conv_check, TC),
    Case("conv2d", "2x3x32x32-16-7x7s2", F32, conv(2, 3, 32, 32, 16, 7, 7, s=2, p=3, bias=True, relu=True),
         conv_check),
    Case("conv2d", "2x32x14x14-dw", F32, conv(2, 32, 14, 14, 32, 3, 3, p=1, groups=32), conv_check),
    Case("conv2d", "2x8x16x16-dw", F64, conv(2, 8, 16, 16, 8, 3, 3, p=1, groups=8, bias=True), conv_check),
    Case("conv2d", "1x65x17x17-66-d2", F64, conv(1, 65, 17, 17, 66, 3, 3, s=2, p=2, d=2, bias=True, offs=(0, 8)),
         conv_check),
    Case("conv2d", "2x64x28x28-128-3x3", F32, conv(2, 64, 28, 28, 128, 3, 3, p=1), conv_check, TC),
    Case("conv2d", "1x48x20x20-96-g2", F32, conv(1, 48, 20, 20, 96, 3, 3, p=1, groups=2), conv_check, TC),
    Case("conv2d", "2x64x15x15-128-3x3", F32, conv(2, 64, 15, 15, 128, 3, 3, p=1, bias=True), conv_check,
         {"precision": "3xtf32"}),
    Case("conv2d", "1x32x12x12-32-1x1", F32, conv(1, 32, 12, 12, 32, 1, 1), conv_check, {"precision": "3xtf32"}),
    Case("conv2d", "2x16x9x9-16-3x3", F32, conv(2, 16, 9, 9, 16, 3, 3), conv_check, {"kernel_type": "simple"}),
    # Softmax: every path (rows, clusters, stream, split-row, strided in registers / streamed), misaligned x
    Case("softmax", "4096x128", F32, softmax((4096, 128)), softmax_check),
    Case("softmax", "64x1000", F32, softmax((64, 1000)), softmax_check),
    Case("softmax", "64x7", F64, softmax((64, 7)), softmax_check),
    Case("softmax", "160x8192", F64, softmax((160, 8192)), softmax_check),
    Case("softmax", "200x32768", F32, softmax((200, 32768)), softmax_check),
    Case("softmax", "8x32768", F32, softmax((8, 32768)), softmax_check),
    Case("softmax", "8x30000", F32, softmax((8, 30000)), softmax_check),
    Case("softmax", "6x12002", F64, softmax((6, 12002)), softmax_check),
    Case("softmax", "2x2^20", F32, softmax((2, 1 << 20)), softmax_check),
    Case("softmax", "64x1024-x+4", F32, softmax((64, 1024), offs=(4, 0)), softmax_check),
    Case("softmax", "300x3x256-axis0", F32, softmax((300, 3, 256), axis=0), softmax_check),
    Case("softmax", "64x4096-axis0", F32, softmax((64, 4096), axis=0), softmax_check),
    Case("softmax", "2x100000-axis0", F32, softmax((2, 100000), axis=0), softmax_check),
    Case("softmax", "16x196608-axis0", F32, softmax((16, 196608), axis=0), softmax_check),
    Case("softmax", "16x196608-axis0", F64, softmax((16, 196608), axis=0), softmax_check),
    Case("softmax", "9x4x2048-axis0", F32, softmax((9, 4, 2048), axis=0), softmax_check),
    Case("softmax", "16x4097x33-axis1", F64, softmax((16, 4097, 33), axis=1), softmax_check),
    Case("softmax", "8x64x7x9-axis1", F32, softmax((8, 64, 7, 9), axis=1, offs=(8, 0)), softmax_check),
    # LayerNorm: rows, clusters, stream, resident (cuOP's NCHW per-channel form), split-row, no affine, misaligned
    Case("layernorm", "4096x1024", F32, layernorm((4096, 1024), (1024,)), layernorm_check),
    Case("layernorm", "64x1000", F64, layernorm((64, 1000), (1000,)), layernorm_check),
    Case("layernorm", "8x32768", F32, layernorm((8, 32768), (32768,)), layernorm_check),
    Case("layernorm", "4x30004", F64, layernorm((4, 30004), (30004,)), layernorm_check),
    Case("layernorm", "140x16384", F64, layernorm((140, 16384), (16384,)), layernorm_check),
    Case("layernorm", "2x64x56x56-perchannel", F32, layernorm((2, 64, 56, 56), (64,)), layernorm_check),
    Case("layernorm", "2x2^20", F32, layernorm((2, 1 << 20), (1 << 20,)), layernorm_check),
    Case("layernorm", "512x96-noaffine", F64, layernorm((512, 96)), layernorm_check),
    Case("layernorm", "64x512-gamma+4", F32, layernorm((64, 512), (512,), offs=(0, 0, 4)), layernorm_check),
    Case("layernorm", "40x4096-gammaonly", F32, layernorm((40, 4096), (4096,), beta=False), layernorm_check),
    # BatchNorm: inference and training, per-plane (vectorised and odd planes) and flat
    Case("batchnorm", "8x64x28x28", F32, batchnorm((8, 64, 28, 28), False), batchnorm_check),
    Case("batchnorm", "8x64x28x28-train", F32, batchnorm((8, 64, 28, 28), True), batchnorm_check),
    Case("batchnorm", "2x16x64x64", F32, batchnorm((2, 16, 64, 64), False), batchnorm_check),
    Case("batchnorm", "2x16x64x64-train", F64, batchnorm((2, 16, 64, 64), True), batchnorm_check),
    Case("batchnorm", "2x4x128x128-train", F32, batchnorm((2, 4, 128, 128), True), batchnorm_check),
    Case("batchnorm", "2x3x5x7-train", F64, batchnorm((2, 3, 5, 7), True), batchnorm_check),
    Case("batchnorm", "32x64-train", F32, batchnorm((32, 64), True), batchnorm_check),
    Case("batchnorm", "4x16x10x10-x+4", F32, batchnorm((4, 16, 10, 10), True, offs=(4, 0)), batchnorm_check),
    Case("batchnorm", "4x16x12x12", F64, batchnorm((4, 16, 12, 12), False), batchnorm_check, {"kernel_type": "simple"}),
    # pools: windows (padded, strided, odd, misaligned), global (vectorised, scalar, 1 x 1)
    Case("maxpool2d", "4x64x56x56", F32, pool((4, 64, 56, 56)), once("y")),
    Case("avgpool2d", "2x16x56x56-3x3s1p1", F64, pool((2, 16, 56, 56), "avg", 3, 1, 1), once("y")),
    Case("maxpool2d", "7x1x33x33", F32, pool((7, 1, 33, 33), offs=(4, 4)), once("y")),
    Case("avgpool2d", "2x8x32x32-4x4s4", F32, pool((2, 8, 32, 32), "avg", 4), once("y")),
    Case("globalavgpool2d", "32x64x7x7", F32, global_pool((32, 64, 7, 7)), once("y", value=lambda p: p.hw)),
    Case("globalmaxpool2d", "4x64x56x56", F64, global_pool((4, 64, 56, 56), "max"), once("y", value=lambda p: p.hw)),
    Case("globalavgpool2d", "2x3x1x1", F32, global_pool((2, 3, 1, 1)), once("y", value=lambda p: p.hw)),
    Case("globalmaxpool2d", "3x5x8x8-x+8", F32, global_pool((3, 5, 8, 8), "max", offs=(8, 0)),
         once("y", value=lambda p: p.hw)),
    # maps, BLAS-1, shape copies
    Case("relu", "2^20", F32, relu(1 << 20), copied("y", "x", identity)),
    Case("relu", "4097-x+4", F32, relu(4097, offs=(4, 0)), copied("y", "x", identity)),
    Case("relu", "4099-inplace", F64, relu(4099, inplace=True), copied("x", "x", identity)),
    Case("scal", "100003", F32, blas("scal", 100003), copied("x", "x", identity)),
    Case("axpy", "2^18+5-y+12", F32, blas("axpy", (1 << 18) + 5, offs=(0, 12)), copied("y", "x", identity)),
    Case("copy", "4097", F64, blas("copy", 4097, offs=(8, 0)), copied("y", "x", identity)),
    Case("relu", "4096", F32, relu(4096), copied("y", "x", identity), {"kernel_type": "simple"}),
    Case("dot", "2^20", F32, blas("dot", 1 << 20), once("result", value=lambda p: p.n)),
    Case("dot", "4097-x+4", F64, blas("dot", 4097, offs=(8, 0)), once("result", value=lambda p: p.n)),
    Case("dot", "3", F32, blas("dot", 3), once("result", value=lambda p: p.n)),
    Case("flatten", "8x3x33x33", F32, flatten((8, 3, 33, 33)), copied("y", "x", lambda p: np.arange(p.n))),
    Case("view", "64^3", F32, view((64, 64, 64), (1, 2, 4), (32, 32, 32)),
         copied("y", "x", view_index((64, 64, 64), (1, 2, 4), (32, 32, 32)))),
    Case("view", "64^3-run", F32, view((64, 64, 64), (3, 0, 0), (8, 64, 64)),
         copied("y", "x", view_index((64, 64, 64), (3, 0, 0), (8, 64, 64)))),
    Case("view", "33x40x6", F64, view((33, 40, 6), (5, 3, 1), (20, 30, 4)),
         copied("y", "x", view_index((33, 40, 6), (5, 3, 1), (20, 30, 4)))),
    Case("view", "5x10x6", F32, view((5, 10, 6), (1, 2, 0), (3, 8, 4)),
         copied("y", "x", view_index((5, 10, 6), (1, 2, 0), (3, 8, 4)))),
    Case("view", "100x12-x+8", F32, view((100, 12), (10, 0), (50, 12), offs=(8, 0)),
         copied("y", "x", view_index((100, 12), (10, 0), (50, 12)))),
]
RUNS = [(c, arch) for c in CASES for arch in ALL if arch in c.targets]

# Families the table does not reach yet, with the reason.
UNMODELLED = {"elementwise": "the expression kernel (ops/elementwise/expression.py) is newer than this table",
              "attention": "the fused attention kernels (ops/attention) are newer than this table"}
# Known bugs in the plan code, found by these tests: (case id, arch) -> reason. Each is an xfail(strict=True).
KNOWN: dict[tuple[str, str], str] = {}   # none open; issue 28's Softmax (TY < VEC) was the first, fixed in the template


def planned(case: Case, arch: str):
    """(sim, problem) of `case` on target `arch`: the default plan under the case's config, run through MODELS."""
    alloc = Alloc(case.dtype)
    op, args, kwargs = case.build(alloc)
    problem = op.problem(*args, **kwargs)
    cfg = make_config(**case.config).snapshot()
    target = named(arch)
    plan = op.family.default_plan(problem, cfg, target)
    _, pointers, _ = op.bind(*args, **kwargs)
    return check(plan, pointers, alloc.tensors, target, case.dtype, MODELS), problem


def _params():
    out = []
    for case, arch in RUNS:
        reason = KNOWN.get((case.id, arch))
        marks = [pytest.mark.xfail(strict=True, raises=CoverageError, reason=reason)] if reason else []
        out.append(pytest.param(case, arch, id=f"{case.id}-{arch}", marks=marks))
    return out


@pytest.mark.parametrize("case, arch", _params())
def test_every_element_once_within_bounds_and_aligned(case, arch):
    sim, problem = planned(case, arch)
    case.check(sim, problem)


def test_the_table_reaches_every_family_and_kernel():
    """Every family of cuopjit.ops.FAMILIES has cases (but those UNMODELLED names), and the kernels of every
    path have models."""
    assert {c.family for c in CASES} | set(UNMODELLED) == set(FAMILIES)
    assert {"gemm_wgmma", "tf32_split", "splitk_reduce", "conv2d_wgmma", "conv2d_direct", "softmax_strided",
            "layernorm_resident", "softmax_stream", "softmax_partials"} <= set(MODELS)


# Auto-tuning candidates run on the GPU too (cuopjit/tuning.py times each): every candidate's plan is checked.
CANDIDATES = [("gemm-32-1000^3", "sm_80"), ("gemm-64-1000^3", "sm_90"), ("gemm-32-1000^3-enable_tensor_core=True",
              "sm_90"), ("gemm-32-650x1500x256-nt-enable_tensor_core=True", "sm_90"),
              ("gemm-32-1024x4096x32-nt-enable_tensor_core=True", "sm_90"),
              ("gemm-32-1000^3-precision=3xtf32", "sm_90"), ("gemm-64-257x129x65-nt", "sm_86"),
              ("batchmatmul-32-8x128x2048x96-enable_tensor_core=True", "sm_90"), ("gemm-32-33x4097x1000", "sm_89"),
              ("conv2d-32-8x64x56x56-64-3x3", "sm_90"), ("conv2d-32-2x64x28x28-128-3x3-enable_tensor_core=True",
              "sm_90"), ("conv2d-64-1x65x17x17-66-d2", "sm_80")]


@pytest.mark.parametrize("cid, arch", [pytest.param(c, a, id=f"{c}-{a}") for c, a in CANDIDATES])
def test_every_tuning_candidate_plan_is_covered(cid, arch):
    case = next(c for c in CASES if c.id == cid)
    alloc = Alloc(case.dtype)
    op, args, kwargs = case.build(alloc)
    problem = op.problem(*args, **kwargs)
    target = named(arch)
    found = op.family.choices(problem, make_config(**case.config).snapshot(), target)
    assert len(found) > 1, f"{cid} on {arch} has no tuning candidates to check"
    pointers = op.bind(*args, **kwargs)[1]
    for choice in found:
        sim = check(op.family.plan(problem, choice, target), pointers, alloc.tensors, target, case.dtype, MODELS)
        case.check(sim, problem)


def _relu_plan(n: int, arch: str = "sm_90"):
    alloc = Alloc(F32)
    op, args, kwargs = relu(n)(alloc)
    return op.family.default_plan(op.problem(*args), make_config().snapshot(), named(arch)), alloc


def test_the_checker_flags_races_bounds_alignment_and_unwritten_workspace():
    plan, alloc = _relu_plan(5000)
    x, y = alloc.tensors["x"], alloc.tensors["y"]
    sim = check(plan, (x.ptr, y.ptr), alloc.tensors, named("sm_90"), F32, MODELS)
    twice = dataclasses.replace(plan, launches=plan.launches * 2)
    with pytest.raises(CoverageError, match="y element 0 is written 2 times"):
        assert_written_once(check(twice, (x.ptr, y.ptr), alloc.tensors, named("sm_90"), F32, MODELS), ["y"])
    small, _ = _relu_plan(6000)
    with pytest.raises(CoverageError, match="reads x element .* outside its 20000 bytes"):
        check(small, (x.ptr, y.ptr), alloc.tensors, named("sm_90"), F32, MODELS)
    shifted = {"x": Tensor._view(x.ptr + 4, (4999,), x.dtype, 0, None), "y": y}
    with pytest.raises(CoverageError, match="16-byte vector read of x at byte 0 .* is not 16-byte aligned"):
        check(plan, (x.ptr + 4, y.ptr), shifted, named("sm_90"), F32, MODELS)
    assert sim.vectors == {"x": 16, "y": 16}
    dot = Alloc(F32)
    op, args, _ = blas("dot", 4096)(dot)
    plan = op.family.default_plan(op.problem(*args), make_config().snapshot(), named("sm_80"))
    alone = dataclasses.replace(plan, launches=plan.launches[1:])
    with pytest.raises(CoverageError, match="reads workspace byte 0 before any launch wrote it"):
        check(alone, op.bind(*args)[1], dot.tensors, named("sm_80"), F32, MODELS)
