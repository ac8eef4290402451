"""The Hopper wgmma GEMM: routing (which configs and problems reach it), every variant compiles for
sm_90a without spills (CPU, real NVRTC); on an H100, TF32 and 3xTF32 results for every layout (3xTF32:
A^T @ B and unaligned operands too), alpha/beta and odd sizes against float64 NumPy (C poisoned with NaN, canaries around it), batched
problems (broadcast on either side) planned directly and through BatchMatMul / MatMul, and 3xTF32's
error no worse than the exact SIMT kernel's on randn and on 2^-20..2^20 inputs."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

import cuopjit
from cuopjit.run import executor
from cuopjit.build import pipeline
from cuopjit.config import DEFAULT, JITConfig
from cuopjit.ops.gemm import matmul, plans as gk, tf32x3, wgmma as gw, wgmma_plan
from cuopjit.run.plan import i32, i64
from cuopjit.prewarm import kernels_to_build, representative_plans
from cuopjit.target import named

from conftest import check_guards, guarded, make_config, rel_error

SM90, SM90A, SM80 = named("sm_90"), named("sm_90a"), named("sm_80")
LAYOUTS = [(False, True), (False, False), (True, True)]      # nt (SS), nn (RS, D = C^T), tt (RS)


# --- CPU: routing ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fields", [{"enable_tensor_core": True}, {"kernel_type": "tensor_core"},
                                    {"enable_tma": True}, {"precision": "3xtf32"},
                                    {"kernel_type": "tiled", "tile_size": 32, "block_size": 256,
                                     "enable_tensor_core": True, "enable_tma": True}])
@pytest.mark.parametrize("target", [SM90, SM90A], ids=["sm_90", "sm_90a"])
def test_float32_tensor_cores_on_sm90_are_wgmma(fields, target):
    *split, launch = gk.FAMILY.default_plan(gk.packed("float32", 4096, 4096, 4096), make_config(**fields).snapshot(),
                                            target).launches
    assert "_wgmma_" in launch.spec.name and launch.spec.arch_specific
    # 3xTF32 at 4096³: A (stored M x K) and B (stored K x N, transposed) are split into hi and lo parts first
    # (narrower products split in the kernel: tests/test_gemm_wgmma_inreg.py)
    assert [k.spec.name for k in split] == (["tf32_split_n", "tf32_split_t"] if "precision" in fields else [])
    assert pipeline.compile_arch(launch.spec, "sm_90") == "sm_90a"
    assert launch.grid[0] <= 2 * target.sm_count and launch.block[0] in (256, 384)
    assert launch.units == gw.UNITS[fields.get("precision") == "3xtf32"]
    if fields.get("tile_size"):
        # one consumer (64-row tiles), instructions of N 32 side by side: 4096³ takes 64 x 256 tiles (8 of them)
        assert launch.block == (256, 1, 1) and "_t64x256x32_i64x32x32_" in launch.spec.name


@pytest.mark.parametrize("problem, fields, why", [
    (gk.packed("float32", 512, 512, 512, True, False), {"enable_tensor_core": True}, "A^T @ B"),
    (gk.packed("float32", 7, 7, 7, aligned=False), {"enable_tensor_core": True}, "unaligned"),
    (gk.packed("float32", 64, 64, 0), {"enable_tensor_core": True}, "K = 0"),
    (gk.packed("float32", 512, 512, 512), {"enable_tensor_core": True, "block_size": 128}, "mma.sync block"),
    (gk.packed("float64", 512, 512, 512), {"enable_tensor_core": True}, "float64"),
])
def test_what_wgmma_cannot_take_runs_on_mma_sync(problem, fields, why):
    launch = gk.FAMILY.default_plan(problem, make_config(**fields).snapshot(), SM90).launches[0]
    assert "mma.sync" in launch.units, why


def _batched_problem(batch, m, n, k, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, bcast=None):
    """`batch` packed GEMMs; bcast "a" or "b": that operand is one matrix (stride 0) for every entry."""
    lda, ldb = (m if trans_a else k), (k if trans_b else n)
    return gk.GemmProblem("float32", m, n, k, trans_a, trans_b, True, alpha, beta, lda, ldb, n, batch=batch,
                          stride_a=0 if bcast == "a" else m * k, stride_b=0 if bcast == "b" else k * n, stride_c=m * n)


def test_batched_runs_on_wgmma_and_older_targets_on_mma_sync():
    cfg = make_config(enable_tensor_core=True).snapshot()
    (launch,) = gk.FAMILY.default_plan(_batched_problem(100, 256, 256, 256), cfg, SM90).launches
    assert launch.spec.name.endswith("_nn_batched") and dict(launch.spec.params)["BATCHED"]
    assert launch.args[-4:] == (i64(65536), i64(65536), i64(65536), i32(100))
    (launch,) = gk.FAMILY.default_plan(gk.packed("float32", 256, 256, 256), cfg, SM90).launches
    assert not dict(launch.spec.params)["BATCHED"] and len(launch.args) == 12
    odd = dataclasses.replace(_batched_problem(3, 8, 8, 8), stride_a=66)
    assert gw.why_not(odd, SM90) == "TMA needs batch strides that are multiples of 16 bytes"
    assert "mma.sync" in gk.FAMILY.default_plan(odd, cfg, SM90).launches[0].units
    assert "mma.sync" in gk.FAMILY.default_plan(gk.packed("float32", 4096, 4096, 4096), cfg, SM80).launches[0].units


def test_batch_matmul_and_matmul_reach_wgmma_in_one_launch():
    """BatchMatMulFloat with tensor cores (a broadcast weight too) and MatMul with batch dims: one wgmma launch."""
    cfg = make_config(kernel_type="tensor_core").snapshot()
    for problem in matmul.batch_problems()[:2]:
        (launch,) = matmul.BATCH_FAMILY.default_plan(problem, cfg, SM90).launches
        assert "_wgmma_" in launch.spec.name and launch.spec.name.endswith("_batched")
    mm = matmul._plan_batch("float32", (8, 100), (8, 100, 256, 256), (256, 256), 256, 256, 256, True)
    (launch,) = matmul.FAMILY.default_plan(mm, cfg, SM90).launches
    assert "_wgmma_" in launch.spec.name and launch.args[-4:] == (i64(65536), i64(0), i64(65536),
                                                                   i32(800))


def test_3xtf32_splits_every_layout_into_the_workspace():
    """3xTF32 runs A^T @ B on wgmma too: both operands are split K-major (P = A, Q = B^T) into the workspace,
    a broadcast operand once, each other batch entry on its own grid z."""
    cfg = make_config(precision="3xtf32").snapshot()
    for ta, tb in itertools.product((False, True), repeat=2):
        problem = _batched_problem(5, 260, 132, 100, ta, tb, bcast="a")
        copies = next(c for c in gw.choices(problem, cfg, SM90, True) if c.copies)
        split_a, split_b, main = wgmma_plan.plan(problem, copies, SM90).launches
        assert main.spec.name.endswith("_3xtf32_nt_batched") and dict(main.spec.params)["P_KMAJOR"]
        assert (split_a.spec.name[-1], split_b.spec.name[-1]) == ("t" if ta else "n", "n" if tb else "t")
        assert split_a.grid == (4, 9, 1) and split_b.grid == (4, 5, 5)       # K 100 in tiles of 32; rows; entries
        lay = tf32x3.SplitLayout.of(problem, main.grid[0] * 2 * gw.MAP_BYTES)
        assert lay.ld == 100 and (lay.stride_p, lay.stride_q) == (0, 132 * 100)
        assert lay.end == lay.q_hi + 8 * 5 * 132 * 100 and lay.q_hi >= lay.p_hi + 8 * 260 * 100
        assert main.args[-2:] == (i64(260 * 100), i64(5 * 132 * 100)) and main.args[7] == i32(100)


def test_3xtf32_without_wgmma_is_the_exact_simt_kernel_and_float64_refuses_it():
    cfg = make_config(precision="3xtf32").snapshot()
    assert gk.FAMILY.default_plan(gk.packed("float32", 512, 512, 512), cfg, SM80).launches[0].units == \
        "FP32 cores (SIMT)"
    # Unaligned operands reach wgmma through the split; C is then written element by element. A product too
    # narrow for the split to pay runs the exact SIMT kernel.
    main = gk.FAMILY.default_plan(gk.packed("float32", 1001, 1001, 1001, aligned=False), cfg, SM90).launches[-1]
    assert main.spec.name.endswith("_3xtf32_nt_unaligned") and not dict(main.spec.params)["C_PAIRS"]
    # (the copies' rule on unaligned operands; aligned ones split in the kernel, tests/test_gemm_wgmma_inreg.py)
    for m, n in ((33, 4097), (7, 7), (256, 256)):
        assert gw.narrow(gk.packed("float32", m, n, 1000, aligned=False))
        launch = gk.FAMILY.default_plan(gk.packed("float32", m, n, 1000, aligned=False), cfg, SM90).launches[0]
        assert launch.units == "FP32 cores (SIMT)"
    assert not gw.narrow(gk.packed("float32", 400, 400, 1000, aligned=False))
    with pytest.raises(ValueError, match=r"GEMM precision='3xtf32' applies to float32 .* leave precision='tf32'"):
        gk.choices(gk.packed("float64", 64, 64, 64), cfg, SM90)


def test_precision_is_validated_and_part_of_the_snapshot():
    cfg = JITConfig()
    with pytest.raises(ValueError, match=r"precision='fp32' is not allowed: choose 'tf32' .* or '3xtf32'"):
        cfg.precision = "fp32"
    cfg.precision = "3xtf32"
    assert cfg.snapshot().precision == "3xtf32" and cfg.snapshot() != JITConfig().snapshot()


def test_heuristic_takes_the_modelled_fastest_tile_and_tuning_offers_the_others():
    """The pick is wgmma_tiles' fastest build; the other builds follow as tuning candidates, then the head's
    variants (one block per SM, a cluster of 2)."""
    cfg = make_config(enable_tensor_core=True).snapshot()
    big = gw.choices(gk.packed("float32", 4096, 4096, 4096), cfg, SM90, split=False)
    assert (big[0].consumers, big[0].qn, big[0].per_sm) == (2, 256, 1) and len(big) == len(gw.wgmma_tiles.TF32_BUILDS) + 1
    assert {(c.consumers, c.qn) for c in big[:-1]} == set(gw.wgmma_tiles.TF32_BUILDS)
    assert big[-1] == dataclasses.replace(big[0], cluster=2)    # the head's build over a cluster of 2: a candidate
    # the wave quantisation the old rule (widest tile that fills the SMs) missed: QKV 4096 x 2304 x 768 in 384
    # tiles of 128 x 192 (2.9 rounds), not 288 of 128 x 256 (2.2); FFN-2 4096 x 768 x 3072 in one round of 128 x 192
    for m, n, k in ((4096, 2304, 768), (4096, 768, 3072)):
        pick = gw.choices(gk.packed("float32", m, n, k, False, True), cfg, SM90, split=False)[0]
        assert (pick.consumers, pick.qn, pick.per_sm) == (2, 192, 1)
    one_cfg = make_config(block_size=256, tile_size=64, enable_tensor_core=True).snapshot()
    one = gw.choices(gk.packed("float32", 4096, 4096, 4096), one_cfg, SM90, False)
    assert [(c.consumers, c.qn, c.instr_n, c.per_sm, c.cluster) for c in one] == [(1, 256, 64, 1, 1), (1, 256, 64, 1, 2)]
    for c in one:
        assert gw.smem_bytes(c.consumers, c.qn, c.stages, False) <= gw.smem_limit(SM90, c.per_sm)
    # tile_size is the instruction's N: the seed's tile 32 with one consumer is a 64 x 96 tile of 3 of them,
    # two blocks per SM (one per SM a candidate)
    seed_cfg = make_config(block_size=256, tile_size=32, enable_tensor_core=True).snapshot()
    seed = gw.choices(gk.packed("float32", 1000, 1000, 1000), seed_cfg, SM90, False)
    assert [(c.qn, c.instr_n, c.per_sm) for c in seed[:2]] == [(96, 32, 2), (96, 32, 1)]
    assert "_t64x96x32_i64x32x32_" in seed[0].label
    # Short K (the batched 100 x 256³): one consumer, two blocks per SM, TF32 and 3xTF32 split in the kernel.
    for split in (False, True):
        bmm = gw.choices(_batched_problem(100, 256, 256, 256), cfg, SM90, split=split)[0]
        assert (bmm.consumers, bmm.per_sm, bmm.inreg) == (1, 2, split)
    split = gw.choices(gk.packed("float32", 4096, 4096, 4096), cfg, SM90, split=True)
    assert all(c.qn <= gw.SPLIT_MAX and c.split for c in split)
    # 3xTF32 at 4096³: every build on the split copies (gw.COPY_SIDE), then the kernel split's pick and the head
    # over a cluster of 2 as candidates
    assert [c.inreg for c in split[:-1]] == [False] * len(gw.wgmma_tiles.SPLIT_BUILDS) + [True]
    assert (split[0].consumers, split[0].qn) == (2, 128) and split[-1] == dataclasses.replace(split[0], cluster=2)
    # 3xTF32 at 1000³: one consumer, two blocks per SM
    assert (gw.choices(gk.packed("float32", 1000, 1000, 1000), cfg, SM90, split=True)[0].consumers) == 1
    for c in big + split:
        assert gw.smem_bytes(c.consumers, c.qn, c.stages, c.split, inreg=c.inreg) <= gw.smem_limit(SM90, c.per_sm)


def test_the_cost_model_counts_rounds_and_partial_rounds():
    """wgmma_tiles.estimate: whole rounds cost the same per round; a partial round costs less than a whole one
    but at least PARTIAL of its k-loop; two blocks per SM hide part of the epilogue."""
    est = gw.wgmma_tiles.estimate
    one, two = est(132, 24, 2, 256, 1, False, 132), est(264, 24, 2, 256, 1, False, 132)
    assert two == pytest.approx(2 * one)
    assert one < est(133, 24, 2, 256, 1, False, 132) < two
    few = est(13, 24, 2, 256, 1, False, 132)
    assert few < one and few >= gw.wgmma_tiles.PARTIAL * (one - 128 * 256 * 4 / gw.wgmma_tiles.STORE)
    assert gw.wgmma_tiles.rate(2, 168, 1, False) == gw.wgmma_tiles.REL[2, 160, 1]    # an unmeasured width: the nearest
    with pytest.raises(ValueError, match=r"qn=204 ni=0: the tile width and each instruction's N must be multiples of 8"):
        wgmma_plan.plan(gk.packed("float32", 64, 64, 64), gw.WgmmaChoice(2, 204, 4), SM90)


def test_wgmma_errors_say_what_to_choose():
    cfg = make_config(enable_tensor_core=True, block_size=512).snapshot()
    with pytest.raises(ValueError, match=r"block_size=512 cannot run the wgmma kernel .* choose block_size 256"):
        gw.choices(gk.packed("float32", 64, 64, 64), cfg, SM90, split=False)
    with pytest.raises(ValueError, match=r"cannot run on the wgmma kernel: A\^T @ B has no K-major operand"):
        wgmma_plan.plan(gk.packed("float32", 64, 64, 64, True, False), gw.WgmmaChoice(2, 128, 4), SM90)
    with pytest.raises(ValueError, match=r"ni=48: the tile width and each instruction's N must be multiples of 8 .*"
                                         r"dividing the tile width: choose tile_size 128"):
        wgmma_plan.plan(gk.packed("float32", 64, 64, 64), gw.WgmmaChoice(2, 128, 4, ni=48), SM90)
    with pytest.raises(ValueError, match=r"per_sm=2: two blocks per SM need one consumer warpgroup"):
        wgmma_plan.plan(gk.packed("float32", 64, 64, 64), gw.WgmmaChoice(2, 128, 4, per_sm=2), SM90)


def test_prewarm_for_sm90a_builds_the_wgmma_kernels():
    cfg = make_config(enable_tensor_core=True).snapshot()
    planned = representative_plans(["gemm"], ["float32"], ["sm_90a"], cfg)
    pairs = kernels_to_build(planned)
    assert any(spec.template == gw.TEMPLATE for spec, _ in pairs)
    assert all(p.plan.workspace == p.plan.launches[0].grid[0] * gw.MAP_BYTES
               for p in planned if p.plan.launches[0].spec.template == gw.TEMPLATE)


# --- CPU: every variant compiles for sm_90a without spills -------------------------------------------

# (trans_a, trans_b, split, consumers, qn, ni, batched): every layout and precision, every width with 1
# and 2 consumers, narrower instructions than the tile, batched with broadcasts.
_VARIANTS = ([(ta, tb, split, 2, gw.SPLIT_MAX if split else 256, 0, "") for (ta, tb) in LAYOUTS
              for split in (False, True)]
             + [(False, False, False, c, q, 0, "") for c in (1, 2) for q in gw.WIDTHS if (c, q) != (2, 256)]
             + [(False, False, False, 1, 64, 32, ""), (False, True, False, 2, 256, 16, ""),
                (True, True, True, 2, 64, 32, ""), (True, False, True, 1, 128, 0, "")]
             + [(False, False, False, 2, 128, 0, "b"), (False, True, False, 1, 64, 0, "a"),
                (True, True, True, 2, 64, 0, "b")])


@pytest.mark.parametrize("trans_a, trans_b, split, consumers, qn, ni, bcast", _VARIANTS,
                         ids=[f"{'t' if a else 'n'}{'t' if b else 'n'}-{'3x' if s else 'tf32'}-{c}x{q}"
                              + (f"-i{i}" if i else "") + (f"-batched-{bc}" if bc else "")
                              for a, b, s, c, q, i, bc in _VARIANTS])
def test_every_variant_compiles_for_sm90a_without_spills(trans_a, trans_b, split, consumers, qn, ni, bcast):
    choice = dataclasses.replace(gw.build(consumers, qn, SM90, split), ni=ni)
    problem = (_batched_problem(7, 1000, 1000, 1000, trans_a, trans_b, bcast=bcast) if bcast
               else gk.packed("float32", 1000, 1000, 1000, trans_a, trans_b))
    plan = wgmma_plan.plan(problem, choice, SM90)
    assert len(plan.launches) == (3 if split else 1)
    plan.check_target(SM90)
    for launch in plan.launches:
        spec = launch.spec
        built = pipeline.compile_fresh(spec, "sm_90")
        assert built.spill_bytes == 0, f"{spec.name} spills {built.spill_bytes} bytes"
        assert built.registers is not None and built.registers <= 240
        assert "C7513" not in built.log, f"{spec.name}: ptxas serialises the wgmmas:\n{built.log}"


# (trans_a, trans_b, split, consumers, qn, per_sm, bcast): thread-block clusters of 2 over every layout, TF32 and
# 3xTF32, one and two consumers, two blocks per SM, batched with a broadcast operand.
_CLUSTER_VARIANTS = [(False, True, False, 2, 256, 1, ""), (False, False, False, 2, 256, 1, ""),
                     (True, True, False, 2, 256, 1, "b"), (False, False, False, 1, 128, 2, "a"),
                     (True, False, True, 2, 128, 1, "b")]


@pytest.mark.parametrize("trans_a, trans_b, split, consumers, qn, per_sm, bcast", _CLUSTER_VARIANTS,
                         ids=[f"{'t' if a else 'n'}{'t' if b else 'n'}-{'3x' if s else 'tf32'}-{c}x{q}-b{p}"
                              + (f"-batched-{bc}" if bc else "") for a, b, s, c, q, p, bc in _CLUSTER_VARIANTS])
def test_cluster_variants_compile_and_launch_whole_clusters(trans_a, trans_b, split, consumers, qn, per_sm, bcast):
    """cluster=2: __cluster_dims__ in the source, the launch's cluster and a grid of whole clusters (odd unit
    counts too), no spills, no serialised wgmmas; a target without clusters refuses it."""
    choice = gw.WgmmaChoice(consumers, qn, gw.stages_for(consumers, qn, split, SM90, per_sm), split=split,
                            per_sm=per_sm, cluster=2)
    for m in (1000, 132 * 128 + 64 * 3):       # the second: more units than clusters fit, an odd P-tile count
        problem = (_batched_problem(3, m, 1000, 1000, trans_a, trans_b, bcast=bcast) if bcast
                   else gk.packed("float32", m, 1000, 1000, trans_a, trans_b))
        plan = wgmma_plan.plan(problem, choice, SM90)
        plan.check_target(SM90)
        launch = plan.launches[-1]
        assert launch.cluster == (2, 1, 1) and launch.grid[0] % 2 == 0 and "_c2_" in launch.spec.name
        assert launch.grid[0] <= SM90.sm_count * per_sm and launch.grid[0] // 2 <= gw.units(problem, choice)
    source = pipeline.source(launch.spec)
    # a cluster-scope release on the stage arrivals is a MEMBAR.ALL.GPU each in SASS: the build ran 2.5x slower
    assert "__cluster_dims__(CLUSTER, 1, 1)" in source and "mbarrier.arrive.release.cluster" not in source
    built = pipeline.compile_fresh(launch.spec, "sm_90")
    assert built.spill_bytes == 0, f"{launch.spec.name} spills {built.spill_bytes} bytes"
    assert "C7513" not in built.log and "C7508" not in built.log, built.log
    with pytest.raises(ValueError, match="use cluster=1"):
        wgmma_plan.plan(problem, dataclasses.replace(choice, cluster=4), SM90)
    with pytest.raises(ValueError, match="thread-block clusters"):
        plan.check_target(SM80)


# --- GPU ------------------------------------------------------------------------------------------

def _tf32(x, nearest: bool):
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    if nearest:
        bits = bits + np.uint32(0x1000)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)


def _gemm(rng, m, n, k, trans_a, trans_b, alpha, beta, fields, a=None, b=None):
    """One forward through JITGemmFloat with `fields`; returns (out, a, b, c0, kernel name)."""
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32) if a is None else a
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32) if b is None else b
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    c = guarded([m, n], np.float32, fill=c0 if beta else None)
    gemm = cuopjit.GemmFloat(trans_a, trans_b, alpha, beta)
    gemm.set_weight(cuopjit.tensor(b))
    op = cuopjit.JITGemmFloat(gemm)
    op.set_jit_config(make_config(**fields))
    op.forward(cuopjit.tensor(a), c)
    check_guards(c)
    return c.to_numpy(), a, b, c0, op.get_performance_profile().kernel_name


def _ref(a, b, c0, trans_a, trans_b, alpha, beta):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return alpha * ((a.T if trans_a else a) @ (b.T if trans_b else b)) + beta * c0.astype(np.float64)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS, ids=["nt", "nn", "tt"])
@pytest.mark.parametrize("m, n, k, alpha, beta", [
    (4, 4, 4, 1.0, 0.0), (36, 12, 1000, 1.0, 0.0), (128, 256, 64, 1.0, 0.0), (1000, 1000, 1000, 1.0, 0.0),
    (260, 4100, 36, -0.5, 1.5), (1024, 1028, 1004, 2.0, -1.0), (4096, 260, 516, 0.0, 2.0)])
def test_wgmma_matches_float64(rng, m, n, k, alpha, beta, trans_a, trans_b, precision):
    """Componentwise bound: u (|alpha| |op(A)| |op(B)| + |beta| |C0|), u = (K + 16) float32 roundings, against
    operands truncated to TF32 as the tensor core reads them (tf32) or exact operands (3xtf32)."""
    fields = {"kernel_type": "tensor_core", "precision": precision}
    out, a, b, c0, name = _gemm(rng, m, n, k, trans_a, trans_b, alpha, beta, fields)
    # 3xTF32 on a narrow product (4 x 4, 36 x 12, 128 x 256) is routed to the exact SIMT kernel
    wgmma = precision == "tf32" or not gw.narrow(gk.packed("float32", m, n, k))
    assert ("_wgmma_" in name) == wgmma and ("_3xtf32" in name) == (wgmma and precision == "3xtf32"), name
    if precision == "tf32":
        a, b = _tf32(a, False), _tf32(b, False)
    u = (k + 16) * np.finfo(np.float32).eps
    bound = u * _ref(np.abs(a), np.abs(b), np.abs(c0), trans_a, trans_b, abs(alpha), abs(beta))
    err = np.abs(out.astype(np.float64) - _ref(a, b, c0, trans_a, trans_b, alpha, beta))
    assert np.all(np.isfinite(out)) and np.all(err <= bound), f"{name}: error {np.max(err - bound):.3g} over the bound"


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, alpha, beta", [(4, 4, 4, 1.0, 0.0), (1000, 1000, 1000, 1.0, 0.0),
                                                  (260, 4100, 36, -0.5, 1.5), (1028, 132, 1001, 2.0, -1.0)])
def test_3xtf32_runs_a_transposed_times_b_on_wgmma(rng, m, n, k, alpha, beta):
    """A^T @ B, which TF32 leaves to mma.sync, on the 3xTF32 wgmma kernel: both operands split transposed."""
    out, a, b, c0, name = _gemm(rng, m, n, k, True, False, alpha, beta, {"precision": "3xtf32"})
    assert ("_wgmma_" in name and "tf32_split_t" in name) != gw.narrow(gk.packed("float32", m, n, k, True, False)), name
    _within_bound(out, a, b, c0, True, False, alpha, beta, k, name)
    problem = _batched_problem(3, m, n, k, True, False, alpha, beta, "b")      # planned on wgmma, narrow or not
    assert "_3xtf32_nt_batched" in _run_batched(rng, problem, precision="3xtf32")


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, trans_a, trans_b, alpha, beta", [
    (7, 7, 7, False, False, 1.0, 0.0), (33, 4097, 1000, False, False, 1.0, 0.0), (1000, 1001, 999, True, True, -0.5, 1.5),
    (1, 33, 4097, True, False, 2.0, -1.0)])
def test_3xtf32_on_unaligned_operands(rng, m, n, k, trans_a, trans_b, alpha, beta):
    """Odd leading dimensions (no TMA on the operands themselves): the split reads them, C is written per element."""
    out, a, b, c0, name = _gemm(rng, m, n, k, trans_a, trans_b, alpha, beta, {"precision": "3xtf32"})
    assert ("_3xtf32_nt_unaligned" in name) != gw.narrow(gk.packed("float32", m, n, k)), name
    _within_bound(out, a, b, c0, trans_a, trans_b, alpha, beta, k, name)
    # batched with entries of m x n floats: odd batch strides, any leading dimension
    problem = dataclasses.replace(_batched_problem(3, m, n, min(k, 100), trans_a, trans_b, alpha, beta,
                                                   "a" if m > n else None), aligned=False)
    assert _run_batched(rng, problem, precision="3xtf32").endswith("_unaligned_batched")


def _within_bound(out, a, b, c0, trans_a, trans_b, alpha, beta, k, name):
    """The componentwise bound of test_wgmma_matches_float64 on one product (a, b already as the kernel reads them)."""
    u = (k + 16) * np.finfo(np.float32).eps
    bound = u * _ref(np.abs(a), np.abs(b), np.abs(c0), trans_a, trans_b, abs(alpha), abs(beta))
    err = np.abs(out.astype(np.float64) - _ref(a, b, c0, trans_a, trans_b, alpha, beta))
    assert np.all(np.isfinite(out)) and np.all(err <= bound), f"{name}: error {np.max(err - bound):.3g} over the bound"


def _run_batched(rng, problem, choice=None, precision="tf32"):
    """Plan `problem` (batched GemmProblem) directly on the wgmma kernel (narrow or not), run it on fresh operands,
    check each entry; the kernel name."""
    p = problem
    sa, sb = ((p.k, p.m) if p.trans_a else (p.m, p.k)), ((p.n, p.k) if p.trans_b else (p.k, p.n))
    a = rng.standard_normal((p.batch if p.stride_a else 1, *sa)).astype(np.float32)
    b = rng.standard_normal((p.batch if p.stride_b else 1, *sb)).astype(np.float32)
    c0 = rng.standard_normal((p.batch, p.m, p.n)).astype(np.float32)
    c = guarded([p.batch, p.m, p.n], np.float32, fill=c0 if p.beta else None)
    target = cuopjit.target.of_device(0)
    if choice is None:
        choice = gw.choices(p, make_config(kernel_type="tensor_core", precision=precision).snapshot(), target,
                            precision == "3xtf32")[0]
    plan = gk.plan(p, choice, target)
    at, bt = cuopjit.tensor(a), cuopjit.tensor(b)
    executor.load(plan, 0, DEFAULT)((at.ptr, bt.ptr, c.ptr), 0)
    check_guards(c)
    out, name = c.to_numpy(), plan.launches[-1].spec.name
    if not choice.split:
        a, b = _tf32(a, False), _tf32(b, False)
    for z in range(p.batch):
        _within_bound(out[z], a[z if p.stride_a else 0], b[z if p.stride_b else 0], c0[z] if p.beta else 0 * c0[z],
                      p.trans_a, p.trans_b, p.alpha, p.beta, p.k, f"{name} entry {z}")
    return name


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS, ids=["nt", "nn", "tt"])
@pytest.mark.parametrize("batch, m, n, k, alpha, beta, bcast", [
    (3, 257, 260, 132, 1.0, 0.0, None), (3, 33, 36, 1004, -0.5, 1.5, "a"), (100, 7, 36, 36, 1.0, 0.0, "b"),
    (5, 1, 4, 4, 2.0, -1.0, None), (3, 260, 4100, 36, 0.0, 2.0, "b"), (4, 264, 132, 260, 1.0, 1.0, "a")])
def test_batched_wgmma_matches_float64(rng, batch, m, n, k, alpha, beta, bcast, trans_a, trans_b, precision):
    """Batched problems planned directly: every layout, broadcast A or B, alpha/beta, partial tiles; tt needs m % 4."""
    m = m + (-m % 4 if trans_a else 0)
    problem = _batched_problem(batch, m, n, k, trans_a, trans_b, alpha, beta, bcast)
    name = _run_batched(rng, problem, precision=precision)
    assert "_wgmma_" in name and name.endswith("_batched")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS, ids=["nt", "nn", "tt"])
def test_blocks_per_sm_and_instruction_widths_on_gpu(rng, layout):
    """One and two blocks per SM, instructions narrower than the tile, batched and not, TF32 and 3xTF32."""
    for consumers, qn, per_sm, ni, split in ((2, 128, 1, 0, False), (1, 64, 2, 0, False), (1, 64, 1, 0, False),
                                             (1, 128, 2, 0, False), (1, 64, 2, 32, False), (2, 256, 1, 64, False),
                                             (1, 32, 1, 16, False), (2, 64, 1, 32, True), (2, 64, 1, 0, False),
                                             (1, 128, 2, 32, False)):
        choice = gw.WgmmaChoice(consumers, qn, gw.stages_for(consumers, qn, split, SM90, per_sm), split=split,
                                per_sm=per_sm, ni=ni)
        for batch in (1, 3):
            problem = _batched_problem(batch, 260, 300, 1000, *layout, alpha=0.5, beta=-1.0, bcast="b")
            if batch == 1:
                problem = dataclasses.replace(problem, stride_a=0, stride_b=0, stride_c=0)
            name = _run_batched(rng, problem, choice)
            assert choice.label in name


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS, ids=["nt", "nn", "tt"])
@pytest.mark.parametrize("batch, m, n, k, alpha, beta, bcast", [
    (1, 7, 36, 36, 1.0, 0.0, None), (1, 260, 300, 1004, 0.5, -1.0, None), (1, 1000, 1000, 1000, 1.0, 0.0, None),
    (3, 260, 4100, 132, -0.5, 1.5, "b"), (5, 33, 4, 260, 2.0, 0.0, "a")], ids=["tiny", "odd", "1000", "batched", "narrow"])
def test_clusters_match_float64(rng, batch, m, n, k, alpha, beta, bcast, layout):
    """Pairs of blocks sharing the Q tile through TMA multicast (cluster=2): every layout, TF32 and 3xTF32 (also on
    unaligned operands), one and two consumers, two blocks per SM, odd P-tile counts (a rank past the last
    P-tile), more units than clusters (batched), partial tiles, alpha/beta; C poisoned, canaries checked."""
    m = m + (-m % 4 if layout[0] else 0)
    problem = _batched_problem(batch, m, n, k, *layout, alpha=alpha, beta=beta, bcast=bcast)
    if batch == 1:
        problem = dataclasses.replace(problem, stride_a=0, stride_b=0, stride_c=0)
    for consumers, qn, per_sm, split in ((2, 256, 1, False), (2, 64, 1, False), (1, 128, 2, False), (1, 32, 1, False),
                                         (2, 128, 1, True)):
        choice = gw.WgmmaChoice(consumers, qn, gw.stages_for(consumers, qn, split, SM90, per_sm), split=split,
                                per_sm=per_sm, cluster=2)
        assert choice.label in _run_batched(rng, problem, choice) and "_c2_" in choice.label + "_"
    odd = dataclasses.replace(_batched_problem(batch, m + 1, n + 1, k + 1, *layout, alpha=alpha, beta=beta,
                                               bcast=bcast), aligned=False)
    if batch == 1:
        odd = dataclasses.replace(odd, stride_a=0, stride_b=0, stride_c=0)
    split = gw.WgmmaChoice(1, 64, gw.stages_for(1, 64, True, SM90), split=True, cluster=2)
    assert _run_batched(rng, odd, split).endswith("_unaligned" + ("_batched" if batch > 1 else ""))


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 3, 100])
@pytest.mark.parametrize("m", [1, 7, 33, 257])
@pytest.mark.parametrize("bcast", [None, "a", "b"])
def test_batch_matmul_runs_wgmma(rng, batch, m, bcast):
    """BatchMatMulFloat with tensor cores through the JIT wrapper: one wgmma launch whatever the batch (one row
    and one entry: GEMV, exact float32)."""
    n, k = 36, 260
    a = rng.standard_normal((1 if bcast == "a" else batch, m, k)).astype(np.float32)
    b = rng.standard_normal((1 if bcast == "b" else batch, k, n)).astype(np.float32)
    c = guarded([batch, m, n], np.float32)
    op = cuopjit.JITBatchMatMulFloat(cuopjit.BatchMatMulFloat())
    op.set_jit_config(make_config(kernel_type="tensor_core"))
    op.forward(cuopjit.tensor(a), cuopjit.tensor(b), c)
    check_guards(c)
    name = op.get_performance_profile().kernel_name
    row = batch == 1 and m == 1
    assert ("gemv_" in name if row else "_wgmma_" in name and name.endswith("_batched") == (batch > 1)), name
    out, ta, tb = c.to_numpy(), (a if row else _tf32(a, False)), (b if row else _tf32(b, False))
    for z in range(batch):
        _within_bound(out[z], ta[0 if bcast == "a" else z], tb[0 if bcast == "b" else z], np.zeros((m, n)),
                      False, False, 1.0, 0.0, k, f"{name} entry {z}")


@pytest.mark.gpu
@pytest.mark.parametrize("spread", [0, 20], ids=["randn", "2^-20..2^20"])
def test_3xtf32_error_is_no_worse_than_simt(rng, spread):
    """Norm-wise error against float64, same inputs: 3xTF32 on wgmma vs the exact float32 SIMT kernel."""
    m = n = k = 1024
    scale = lambda shape: np.exp2(rng.uniform(-spread, spread, shape)) if spread else 1.0  # noqa: E731
    a = (rng.standard_normal((m, k)) * scale((m, k))).astype(np.float32)
    b = (rng.standard_normal((k, n)) * scale((k, n))).astype(np.float32)
    ref = _ref(a, b, np.zeros((m, n), np.float32), False, False, 1.0, 0.0)
    errs = {}
    for label, fields in (("3x", {"precision": "3xtf32"}), ("simt", {"kernel_type": "tiled"}),
                          ("tf32", {"kernel_type": "tensor_core"})):
        out, *_, name = _gemm(rng, m, n, k, False, False, 1.0, 0.0, fields, a=a, b=b)
        errs[label] = rel_error(out, ref)
    print(errs)
    assert errs["3x"] <= 1.25 * errs["simt"] and errs["tf32"] > 30 * errs["3x"], errs


@pytest.mark.gpu
def test_every_block_and_tile_size_on_gpu(rng):
    """Each (consumers, instruction N) the config can name, on a size that leaves partial tiles on both sides."""
    for block, tile in itertools.product((0, 256), gw.WIDTHS[1:]):
        fields = {"kernel_type": "tensor_core", "block_size": block, "tile_size": tile}
        out, a, b, c0, name = _gemm(rng, 200, 300, 100, False, False, 1.0, 0.0, fields)
        assert f"x{tile}x32_" in name and ("_t64x" in name if block else "_wgmma_t" in name)
        ref = _ref(_tf32(a, False), _tf32(b, False), c0, False, False, 1.0, 0.0)
        assert rel_error(out, ref) < 1e-5, name


@pytest.mark.parametrize("split", [False, True], ids=["tf32", "3xtf32"])
def test_loop_unroll_off_reaches_the_optional_loops_and_compiles(split):
    """enable_loop_unroll=False rolls the TMA box loop and the split loop; nothing spills, nothing serialises."""
    cfg = make_config(enable_tensor_core=True, enable_loop_unroll=False, precision="3xtf32" if split else "tf32")
    # 3xTF32: unaligned operands, which take the split copies (their loop)
    problem = gk.packed("float32", 1000, 1000, 1000, aligned=not split)
    launches = gk.FAMILY.default_plan(problem, cfg.snapshot(), SM90).launches
    assert launches[-1].spec.name.endswith("_nounroll_nt_unaligned" if split else "_nounroll_nn")
    for launch in launches:
        spec = launch.spec
        assert "_nounroll" in spec.name and 'unroll 1' in pipeline.source(spec)
        built = pipeline.compile_fresh(spec, "sm_90")
        assert built.spill_bytes == 0 and "C7513" not in built.log
